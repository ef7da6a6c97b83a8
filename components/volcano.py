"""Volcano: gang scheduling, queues and training priority tiers."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from components import k8s, profile, versions
from components.config import PlatformConfig

NAMESPACE = "volcano-system"
COMPONENT = "volcano"
SCHEDULER_NAME = profile.SCHEDULER_NAME
PRIORITY_CLASSES = profile.PRIORITY_CLASSES  # training tiers: preemption order when the cluster is full
DEFAULT_PRIORITY_CLASS = profile.DEFAULT_PRIORITY_CLASS


def values(platform: PlatformConfig) -> dict:
    return {"custom": {"scheduler_enable": True, "controller_enable": True, "admission_enable": True}}


def queues(platform: PlatformConfig) -> list[dict]:
    out = []
    for q in platform.scheduler.queues:
        spec: dict = {"weight": q.weight, "reclaimable": q.reclaimable}
        if q.gpus is not None:
            spec["capability"] = {"nvidia.com/gpu": q.gpus}
        out.append({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                    "metadata": k8s.meta(q.name, platform.cluster, COMPONENT), "spec": spec})
    return out


def priority_classes(platform: PlatformConfig) -> list[dict]:
    out = []
    for name, value, description in PRIORITY_CLASSES:
        pc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
              "metadata": k8s.meta(name, platform.cluster, COMPONENT), "value": value, "globalDefault": False,
              "description": description}
        if name == "training-preemptible":
            pc["preemptionPolicy"] = "Never"
        out.append(pc)
    return out


@dataclass
class VolcanoArgs:
    platform: PlatformConfig


class Volcano(pulumi.ComponentResource):
    """Installs Volcano (chart volcano-sh/volcano) in `volcano-system`, the Queues from
    `fastpath:platform.scheduler.queues` (weight, GPU capability) and the training PriorityClasses.

    Needs: nothing but the cluster. Queues wait for the release (the chart ships the Queue CRD).

    Example:
        Volcano("volcano", VolcanoArgs(platform=cfg.platform), opts=pulumi.ResourceOptions(parent=p))
    """

    def __init__(self, name: str, args: VolcanoArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("fastpath:platform:Volcano", name, None, opts)
        p = args.platform
        self.namespace, self.release = k8s.operator_install(
            self, p.cluster, COMPONENT, NAMESPACE, "baseline", "scheduler, controllers and webhook run unprivileged",
            "volcano", versions.VOLCANO_CHART, versions.VOLCANO_REPO, p.versions.volcano, values(p))
        after = pulumi.ResourceOptions(parent=self, depends_on=[self.release])
        self.queues = [k8s.apply(m, after) for m in queues(p)]
        self.priority_classes = [k8s.apply(m, pulumi.ResourceOptions(parent=self)) for m in priority_classes(p)]
        self.register_outputs({"queues": [q.name for q in p.scheduler.queues]})
