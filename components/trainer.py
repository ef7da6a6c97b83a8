"""Kubeflow Trainer v2: its controller and JobSet from the `kubeflow-trainer` chart, and the ClusterTrainingRuntimes
fastpath publishes, one per framework and priority tier, each a whole node of this cluster wired for its fabric.

Upstream behaviour this relies on (kubeflow/trainer@v2.3.0, kubernetes-sigs/jobset@v0.12.0; ../notes/trainer-v2.md
f and g have the paths):
- The chart installs the trainer controller, its CRDs (chart templates, so upgraded), and JobSet as a subchart
  (`jobset.install`); the controller makes its own webhook certificate (`certManagement.enable`), no cert-manager.
- The trainer's volcano plugin watches PodGroups only if their CRD exists when it starts, so the release waits for
  Volcano's.
- Runtimes and TrainJobs go through the trainer's webhook (`failurePolicy: Fail`): runtimes wait for the release,
  which Pulumi awaits until the controller is ready.
- A TrainJob's pods take their priority from the runtime's pod template, which a TrainJob cannot patch: hence one
  runtime per tier (components/profile.py `runtime_name`), e.g. `fastpath-torch`, `fastpath-torch-critical`.
- The controller snapshots a runtime when a TrainJob first uses it: a republished runtime changes new runs only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi

from components import k8s, training_job, versions
from components.config import PlatformConfig
from components.profile import Profile

TOKEN = "fastpath:platform:Trainer"
NAMESPACE = "kubeflow-system"  # upstream's, and the trainer's certificate code's fallback namespace
COMPONENT = "trainer"
RELEASE = "kubeflow-trainer"


def values(platform: PlatformConfig) -> dict[str, Any]:
    """Helm values for kubeflow-trainer: the controller and JobSet images pinned, the chart's own runtimes off."""
    return {
        # The chart derives `v<chart version>` when empty (templates/_helpers.tpl): pinned, so a chart bump moves
        # the controller only with this file.
        "image": {"tag": versions.TRAINER_CONTROLLER_TAG},
        # The subchart's in-repo values name a staging `:main` image pulled Always; only the published chart's
        # are rewritten to the release (kubernetes-sigs/jobset@v0.12.0:hack/helm-chart-package.sh).
        "jobset": {"image": {"repository": versions.JOBSET_IMAGE_REPOSITORY, "tag": versions.JOBSET_IMAGE_TAG,
                             "pullPolicy": "IfNotPresent"}},
        # Off by default already; pinned because turning them on runs a hook Job that installs kubectl from the
        # internet (templates/runtimes/installer-job.yaml) and publishes runtimes that skip validation and carry
        # no fabric wiring.
        "runtimes": {"defaultEnabled": False},
    }


def runtimes(profile: Profile) -> list[dict[str, Any]]:
    """Every ClusterTrainingRuntime this cluster publishes (components/training_job.py builds each, so a
    TrainJob's contract is read off the same object)."""
    return [training_job.runtime(profile, framework, tier) for _, framework, tier in profile.runtimes()]


@dataclass
class TrainerArgs:
    platform: PlatformConfig
    """The validated platform (jobApi v2 or both). Required."""
    profile: Profile
    """Its profile: the runtimes are built from it. Required."""
    after: list = field(default_factory=list)
    """What the release waits for: Volcano's release (the PodGroup CRD must exist when the controller starts).
    Default none."""


class Trainer(pulumi.ComponentResource):
    """Installs Kubeflow Trainer v2 and JobSet (chart `kubeflow-trainer`, version pinned in components/versions.py)
    in `kubeflow-system`, and publishes fastpath's ClusterTrainingRuntimes (torch, mpi when trainer.mpiImage is set,
    plain; one per priority tier with Volcano).

    Needs: Volcano's release before it when Volcano is on; the training namespaces' network attachments, preflight
    ConfigMap and checkpoint claim before any TrainJob runs (runtimes only name them).
    Output: `runtimes`, the names TrainJobs refer to.

    Example:
        Trainer("trainer", TrainerArgs(cfg.platform, profile(cfg.platform), after=[volcano.release]),
                pulumi.ResourceOptions(parent=platform))
    """

    release: pulumi.Resource
    """The Helm release; runtimes wait for it (the trainer's webhook must serve)."""
    runtimes: list[pulumi.Resource]
    """One ClusterTrainingRuntime per framework and tier."""

    def __init__(self, name: str, args: TrainerArgs, opts: pulumi.ResourceOptions | None = None):
        manifests = runtimes(args.profile)  # built before anything registers: a bad profile registers nothing
        super().__init__(TOKEN, name, None, opts)
        p = args.platform
        self.namespace = k8s.apply(
            k8s.namespace(NAMESPACE, p.cluster, COMPONENT, "restricted",
                          "the trainer and JobSet controllers run as non-root with no capabilities "
                          "(the charts' securityContext); training pods run in the training namespaces"),
            pulumi.ResourceOptions(parent=self))
        self.release = k8s.helm_release(
            RELEASE, versions.TRAINER_CHART, None, p.versions.trainer, NAMESPACE, values(p),
            pulumi.ResourceOptions(parent=self, depends_on=[self.namespace, *args.after]))
        after = pulumi.ResourceOptions(parent=self, depends_on=[self.release])
        self.runtimes = [k8s.apply(m, after) for m in manifests]
        self.register_outputs({"runtimes": [m["metadata"]["name"] for m in manifests]})
