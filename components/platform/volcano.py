"""Volcano: gang scheduling, queues and training priority tiers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import yaml

from components import k8s, versions
from components.model import profile
from components.model.config import PlatformConfig
from components.model.topology import TopologyConfig
from components.platform import mirrors, placement
from components.platform import topology as fabric_topology

NAMESPACE = "volcano-system"
COMPONENT = "volcano"
PRIORITY_CLASSES = profile.PRIORITY_CLASSES  # training tiers: preemption order when the cluster is full
DEFAULT_PRIORITY_CLASS = profile.DEFAULT_PRIORITY_CLASS


# The Volcano scheduler configuration (volcano-sh/volcano@v1.15.1; read there, not guessed):
# - No `enqueue` action: `allocate` then moves every Pending PodGroup to Inqueue itself
#   (pkg/scheduler/actions/allocate/allocate.go `buildAllocateContext`), so the Training Operator creates the pods
#   of a gang that does not fit yet (it waits for the PodGroup to leave Pending) and that gang can preempt or
#   reclaim. With `enqueue`, the overcommit and proportion votes keep it Pending on a full cluster, and a Pending
#   PodGroup never preempts (actions/gangpreempt/gangpreempt.go `Execute` skips `job.IsPending()`).
# - `gangpreempt` and `gangreclaim` instead of `preempt` and `reclaim`: they evict whole jobs (victim "bundles",
#   actions/utils/bundle.go `CreateJobBundles`) and commit only when the whole preemptor gang is pipelined; the
#   legacy actions evict task by task per node and split several gangs in half. The two are not mixed.
# - `allocate` first: while victims terminate, it pipelines the nominated gang onto releasing resources, so the
#   gang actions do not pick more victims for it in the next session.
# - binpack weighted on GPUs: packed nodes mean one evicted gang frees whole nodes, so the placement dry run
#   succeeds with fewer victims (plugins/binpack/binpack.go `binpack.resources`).
GANG_ACTIONS = ("gangpreempt", "gangreclaim")


def scheduler_conf(topology: TopologyConfig | None = None) -> dict:
    """The volcano-scheduler.conf fastpath installs (chart value `custom.scheduler_config_override`, which
    replaces the chart's file wholesale: volcano-sh/volcano@v1.15.1:installer/helm/chart/volcano/templates/
    scheduler.yaml); with a fabric topology, the plugin that places gangs in its HyperNodes."""
    conf: dict[str, Any] = {
        "actions": "allocate, backfill, gangreclaim, gangpreempt",
        # allowWholeBundle true is the actions' default, pinned: with minMember = every pod, a healthy gang is
        # one whole bundle, and false would never evict it at all.
        "configurations": [{"name": a, "arguments": {"allowWholeBundle": True}} for a in GANG_ACTIONS],
        "tiers": [
            {"plugins": [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}]},
            {
                "plugins": [
                    {"name": "drf", "enablePreemptable": False},
                    {"name": "predicates"},
                    {"name": "proportion"},
                    {"name": "nodeorder"},
                    {
                        "name": "binpack",
                        "arguments": {
                            "binpack.weight": 10,
                            "binpack.resources": "nvidia.com/gpu",
                            "binpack.resources.nvidia.com/gpu": 10,
                        },
                    },
                ]
            },
        ],
    }
    if topology is not None:
        conf["tiers"][1]["plugins"].append(fabric_topology.VOLCANO_PLUGIN)
    # `dra` needs nothing here: predicates runs Kubernetes' DRA plugin whenever the DynamicResourceAllocation gate is
    # on, which Volcano aligns to the cluster's version (GA at 1.34: volcano-sh/volcano@v1.15.1:pkg/util/util.go
    # SetupComponentGlobals); the old `predicate.DynamicResourceAllocationEnable` argument is no longer read.
    return conf


# The chart's admission webhooks (volcano-sh/volcano@v1.15.1:installer/helm/chart/volcano/values.yaml
# custom.enabled_admissions), plus the PodGroup mutation: a PodGroup created in the `default` queue is moved to the
# queue its namespace's QUEUE_ANNOTATION names (pkg/webhooks/admission/podgroups/mutate/mutate_podgroup.go
# createPodGroupPatch; the chart grants the webhook namespace reads only with it, templates/admission.yaml). That is
# how a TrainJob that names no queue lands in its team's queue: its runtime names none, so the trainer's PodGroup
# takes the CRD default `default` (kubeflow/trainer@v2.3.0:pkg/runtime/framework/plugins/volcano/volcano.go).
CHART_ADMISSIONS = (
    "/jobs/mutate,/jobs/validate,/podgroups/validate,/queues/mutate,/queues/validate,/hypernodes/validate,"
    "/cronjobs/validate"
)
PODGROUP_MUTATE = "/podgroups/mutate"
QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"  # on a Namespace: its PodGroups' queue when they name none


def values(platform: PlatformConfig) -> dict:
    """Helm values for volcano-sh/volcano: the scheduler configuration above, and the chart's admission webhooks
    with the PodGroup mutation added (the scheduler, controllers and admission webhook are on by default)."""
    v = {
        "custom": {
            "scheduler_config_override": yaml.safe_dump(scheduler_conf(platform.nodes.topology), sort_keys=False),
            "enabled_admissions": f"{CHART_ADMISSIONS},{PODGROUP_MUTATE}",
            # Off in the chart: during a rollout (a values change, a node drain) the old and the new scheduler then
            # both bind pods for a while, two gangs onto the same GPUs. With it the new one waits for the lease
            # (templates/scheduler.yaml and controllers.yaml pass --leader-elect; the ClusterRoles grant leases).
            "leader_elect_enable": True,
        }
    }
    if platform.nodes.topology is not None:
        v["custom"]["controller_config_override"] = fabric_topology.volcano_controller_config(platform.nodes.topology)
    return k8s.merge_values(v, placement.site_values(versions.VOLCANO_CHART, platform))


def queue(name: str, cluster: str, component: str, weight: int, reclaimable: bool, gpus: int | None) -> dict[str, Any]:
    """A Volcano Queue; `gpus` caps what it holds at once (capability: a ceiling, it reserves nothing)."""
    spec: dict[str, Any] = {"weight": weight, "reclaimable": reclaimable}
    if gpus is not None:
        spec["capability"] = {"nvidia.com/gpu": gpus}
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": k8s.meta(name, cluster, component),
        "spec": spec,
    }


def queues(platform: PlatformConfig) -> list[dict[str, Any]]:
    return [
        queue(q.name, platform.cluster, COMPONENT, q.weight, q.reclaimable, q.gpus) for q in platform.scheduler.queues
    ]


def priority_classes(platform: PlatformConfig) -> list[dict]:
    out = []
    for name, value, description in PRIORITY_CLASSES:
        pc = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": k8s.meta(name, platform.cluster, COMPONENT),
            "value": value,
            "globalDefault": False,
            "description": description,
        }
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
            self,
            p.cluster,
            COMPONENT,
            NAMESPACE,
            "baseline",
            "scheduler, controllers and webhook run unprivileged",
            "volcano",
            *mirrors.chart_source(versions.VOLCANO_CHART, versions.VOLCANO_REPO, p.mirrors),
            p.versions.volcano,
            values(p),
        )
        after = pulumi.ResourceOptions(parent=self, depends_on=[self.release])
        self.queues = [k8s.apply(m, after) for m in queues(p)]
        self.priority_classes = [k8s.apply(m, pulumi.ResourceOptions(parent=self)) for m in priority_classes(p)]
        self.register_outputs({"queues": [q.name for q in p.scheduler.queues]})
