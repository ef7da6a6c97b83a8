"""Kubeflow Training Operator v1 (PyTorchJob, MPIJob v1, TFJob) from its standalone kustomize overlay."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from components import versions
from components.config import PlatformConfig

GANG_FLAG = "--gang-scheduler-name=volcano"


def overlay_url(ref: str) -> str:
    return f"{versions.TRAINING_OPERATOR_OVERLAY}?ref={ref}"


def enable_volcano(obj: dict, opts: object = None) -> None:
    """kustomize transformation: add `--gang-scheduler-name=volcano` to the operator's manager container, so it
    creates a Volcano PodGroup per job and sets schedulerName on its pods. The upstream Deployment runs
    `command: [/manager]`; the flag goes in its args, idempotently."""
    if obj.get("kind") != "Deployment" or obj.get("metadata", {}).get("name") != "training-operator":
        return
    for c in obj["spec"]["template"]["spec"]["containers"]:
        if c.get("name") == "training-operator":
            args = [a for a in c.get("args") or [] if not a.startswith("--gang-scheduler-name")]
            c["args"] = [*args, GANG_FLAG]


@dataclass
class TrainingOperatorArgs:
    platform: PlatformConfig


class TrainingOperator(pulumi.ComponentResource):
    """Installs the Kubeflow Training Operator (git ref pinned in components/versions.py) from
    `github.com/kubeflow/trainer.git/manifests/overlays/standalone`, with `--gang-scheduler-name=volcano`
    when Volcano is enabled. It owns the `mpijobs.kubeflow.org` CRD (v1): never install mpi-operator beside it.

    Needs: `kustomize` access to GitHub from where `pulumi up` runs (the provider fetches the overlay).

    Example:
        TrainingOperator("training-operator", TrainingOperatorArgs(platform=cfg.platform))
    """

    def __init__(self, name: str, args: TrainingOperatorArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("fastpath:platform:TrainingOperator", name, None, opts)
        import pulumi_kubernetes as k8s

        p = args.platform
        self.url = overlay_url(p.versions.training_operator)
        self.directory = k8s.kustomize.Directory(
            "training-operator",
            directory=self.url,
            transformations=[enable_volcano] if p.components.volcano else [],
            opts=pulumi.ResourceOptions(parent=self),
        )
        # What the overlay gets beyond upstream, so the renderer's packages.yaml shows it for review.
        self.register_outputs({"overlay": self.url,
                               "managerArgs": [GANG_FLAG] if p.components.volcano else []})
