"""Kueue (scheduler.name kueue): each job admitted whole against its queue's GPU quota, then bound by the default
scheduler; the three training tiers preempt within a queue, and a queue within its quota reclaims from queues
borrowing beyond theirs. Read at kubernetes-sigs/kueue@v0.19.2 (docs/research/kueue-v0.19.2-for-issue-21.md holds
the reading; tests/kueue_v019.py restates the rules and applies them to these objects).

What the stack's queues become:
- one ClusterQueue per queue, all in one cohort (`fastpath`), GPUs only (`resources.quotaCheckStrategy:
  IgnoreUndeclared`: the pods' CPU, memory and RDMA requests are the default scheduler's business, not quota's);
- nominalQuota: the queue's weight share of the cluster in whole nodes (guaranteed, even while others idle), at
  most its `gpus`; borrowingLimit: up to `gpus` (unlimited without), 0 for a queue that is not reclaimable, since
  Kueue reclaims only from a queue over its nominal quota (pkg/scheduler/preemption/classical candidateIsValid);
- preemption: withinClusterQueue LowerPriority (the tiers), reclaimWithinCohort Any (any tier of a queue over its
  quota), borrowWithinCohort Never (the CRD's default, stated): a gang never preempts to borrow;
- a LocalQueue of each queue's name in every training namespace, and a LocalQueue `default` pointing at the
  namespace's own queue: Kueue's webhooks give every unlabelled job of an enabled integration in that namespace
  the label `kueue.x-k8s.io/queue-name: default` (pkg/controller/jobframework/defaults.go
  ApplyDefaultLocalQueueWithManagedJobsNamespaceSelector), so a hand-written TrainJob is admitted, not left
  unmanaged;
- WorkloadPriorityClasses of the tiers' names and values, and PriorityClasses of the same with preemptionPolicy
  Never: Kueue evicts whole workloads, and kube-scheduler must not preempt single pods of another gang for a pod
  Kueue admitted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import yaml

from components import k8s, versions
from components.jobs.resolve import DEFAULT_LOCAL_QUEUE
from components.model import profile
from components.model.config import PlatformConfig, QueueConfig
from components.platform import mirrors, placement, shares, topology

NAMESPACE = "kueue-system"
COMPONENT = "kueue"
API = "kueue.x-k8s.io/v1beta2"  # every Kueue CRD stores v1beta2 at v0.19.2; v1beta1 is deprecated
COHORT = "fastpath"
GPU = "nvidia.com/gpu"
# What each tier does under Kueue (PriorityClass descriptions; the values are profile.PRIORITY_CLASSES').
_ACROSS = (
    "Across queues tiers do not apply: a queue within its quota takes whole gangs, of any tier, from queues "
    "borrowing beyond theirs; a queue within its quota is never reclaimed from."
)
TIER_TEXT = {
    "training-critical": "Deadline runs. If its gang does not fit in its queue's quota, Kueue evicts whole gangs of "
    "lower tiers of the same queue, newest first, the fewest that make room. " + _ACROSS,
    "training-standard": "Default tier. If its gang does not fit, Kueue evicts whole training-preemptible gangs of "
    "the same queue; training-critical gangs of the same queue may evict it. " + _ACROSS,
    "training-preemptible": "Opportunistic runs: the first whole gangs evicted for higher tiers of the same queue; "
    "evicts no tier. " + _ACROSS,
}
# The integrations fastpath's jobs use (the chart enables more: batch/job, pod, deployment and statefulset would put
# fastpath's own rendezvous store and any Deployment of a training namespace under the `default` LocalQueue).
# No kubeflow.org/mpijob: Kueue's is mpi-operator's v2beta1, and the Training Operator's MPIJob v1 holds that CRD.
FRAMEWORKS = (
    "kubeflow.org/pytorchjob",
    "kubeflow.org/tfjob",
    "trainer.kubeflow.org/trainjob",
    "jobset.x-k8s.io/jobset",
)
# A gang whose pods are not all ready this long after admission (the reaper's start deadline, so a first image pull
# fits) is evicted and requeued with backoff (60 s doubling, at most BACKOFF_MAX): its quota goes back to the queue
# instead of being held by a job that cannot start. Requeued without limit: the count never resets in a Workload's
# life (pkg/controller/core/workload_controller.go reconcileNotReadyTimeout), so a limit would one day deactivate a
# week-long run for its lost nodes; a job that can never start is the reaper's to fail.
BACKOFF_MAX = 3600
# A running gang whose pods stop being all ready (a lost node, a TrainJob's whole-gang restart) is evicted after
# this long: past the lost-node release and the gang's own restart, which are shorter.
RECOVERY_MINUTES = 60


def training_namespaces(platform: PlatformConfig) -> dict[str, Any]:
    """A namespace selector of exactly the training namespaces (by the name label every namespace carries)."""
    return {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": sorted(platform.training_namespaces)}
        ]
    }


def manager_config(platform: PlatformConfig) -> dict[str, Any]:
    """The chart's controller-manager Configuration (kubernetes-sigs/kueue@v0.19.2:charts/kueue/values.yaml
    managerConfig), restated whole because the value replaces it whole, with fastpath's integrations, GPU-only
    quota and the pods-ready deadline."""
    deadline = f"{platform.reaper.start_deadline_minutes}m"
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "controller": {
            "groupKindConcurrency": {
                "Job.batch": 5,
                "Pod": 5,
                "Workload.kueue.x-k8s.io": 10,
                "LocalQueue.kueue.x-k8s.io": 5,
                "ClusterQueue.kueue.x-k8s.io": 5,
                "ResourceFlavor.kueue.x-k8s.io": 1,
            }
        },
        "clientConnection": {"qps": 300, "burst": 500},
        # On by default since v0.19 (30m); stated.
        "waitForPodsReady": {
            "timeout": deadline,
            "recoveryTimeout": f"{max(RECOVERY_MINUTES, platform.reaper.start_deadline_minutes)}m",
            "blockAdmission": False,
            "requeuingStrategy": {"timestamp": "Eviction", "backoffBaseSeconds": 60, "backoffMaxSeconds": BACKOFF_MAX},
        },
        "integrations": {"frameworks": list(FRAMEWORKS)},
        # Kueue's job webhooks fail closed (failurePolicy Fail) in every namespace this selects, batch Jobs included
        # whatever the integrations (charts/kueue/templates/webhook/manifests.yaml): the training namespaces only,
        # so no other install's Job waits on Kueue being up. The default LocalQueue applies there alone too
        # (jobframework/defaults.go ApplyDefaultLocalQueueWithManagedJobsNamespaceSelector).
        "managedJobsNamespaceSelector": training_namespaces(platform),
        "resources": {"quotaCheckStrategy": "IgnoreUndeclared"},
    }


def values(platform: PlatformConfig) -> dict[str, Any]:
    """Helm values for the kueue chart: the pinned image, two replicas (the webhooks every job creation passes
    through stay up through a drain) and the Configuration above."""
    v = {
        "controllerManager": {
            "manager": {
                "image": {
                    "repository": versions.KUEUE_IMAGE_REPOSITORY,
                    "tag": versions.KUEUE_IMAGE_TAG,
                    "pullPolicy": "IfNotPresent",
                }
            },
            "replicas": 2,
            "podDisruptionBudget": {"enabled": True},  # minAvailable 1 by default
            # On two nodes when there are two (charts/kueue/templates/_helpers.tpl kueue.selectorLabels): one node's
            # drain never takes both webhooks.
            "topologySpreadConstraints": [
                {
                    "maxSkew": 1,
                    "topologyKey": "kubernetes.io/hostname",
                    "whenUnsatisfiable": "ScheduleAnyway",
                    "labelSelector": {
                        "matchLabels": {"app.kubernetes.io/name": "kueue", "control-plane": "controller-manager"}
                    },
                }
            ],
        },
        "managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(manager_config(platform), sort_keys=False)},
    }
    return k8s.merge_values(v, placement.site_values(versions.KUEUE_CHART, platform))


def nominal_quotas(platform: PlatformConfig) -> dict[str, int]:
    """Each queue's guaranteed GPUs (shares.kueue_nominal)."""
    queues = [shares.Queue(q.name, q.weight, q.gpus) for q in platform.scheduler.queues]
    return shares.kueue_nominal(queues, platform.nodes.count, platform.gpu.per_node)


def _limits(q: QueueConfig, nominal: int) -> dict[str, Any]:
    if not q.reclaimable:
        return {"borrowingLimit": 0}
    return {"borrowingLimit": q.gpus - nominal} if q.gpus is not None else {}


def cluster_queue(
    name: str, platform: PlatformConfig, nominal: int, limits: dict[str, Any], preemption: dict[str, Any]
) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "ClusterQueue",
        "metadata": k8s.meta(name, platform.cluster, COMPONENT),
        "spec": {
            "cohortName": COHORT,
            "namespaceSelector": training_namespaces(platform),
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [
                {
                    "coveredResources": [GPU],
                    "flavors": [
                        {
                            "name": topology.flavor_name(platform),
                            "resources": [{"name": GPU, "nominalQuota": nominal, **limits}],
                        }
                    ],
                }
            ],
            "preemption": preemption,
        },
    }


TRAINING_PREEMPTION = {
    "withinClusterQueue": "LowerPriority",
    "reclaimWithinCohort": "Any",
    "borrowWithinCohort": {"policy": "Never"},
}
# The fabric acceptance borrows idle GPUs only (nominal 0) and takes nothing from anyone: training queues within
# their quota reclaim it.
ACCEPTANCE_PREEMPTION = {"withinClusterQueue": "Never", "reclaimWithinCohort": "Never"}


def cluster_queues(platform: PlatformConfig) -> list[dict[str, Any]]:
    quotas = nominal_quotas(platform)
    out = [
        cluster_queue(q.name, platform, quotas[q.name], _limits(q, quotas[q.name]), TRAINING_PREEMPTION)
        for q in platform.scheduler.queues
    ]
    if platform.acceptance.enabled:
        cap = platform.acceptance.queue_cap(platform.nodes.count, platform.gpu.per_node)
        out.append(cluster_queue(profile.ACCEPTANCE_QUEUE, platform, 0, {"borrowingLimit": cap}, ACCEPTANCE_PREEMPTION))
    return out


def local_queue(name: str, namespace: str, cluster_queue_name: str, cluster: str) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "LocalQueue",
        "metadata": k8s.meta(name, cluster, COMPONENT, namespace=namespace),
        "spec": {"clusterQueue": cluster_queue_name},
    }


def local_queues(platform: PlatformConfig) -> list[dict[str, Any]]:
    """Every queue in every training namespace, the namespace's `default`, and the acceptance's in its namespace
    (the first training namespace, where the acceptance job runs)."""
    out = []
    for ns in platform.training_namespaces:
        out += [local_queue(q.name, ns, q.name, platform.cluster) for q in platform.scheduler.queues]
        out.append(local_queue(DEFAULT_LOCAL_QUEUE, ns, platform.scheduler.queue_of(ns), platform.cluster))
    if platform.acceptance.enabled:
        ns = platform.training_namespaces[0]
        out.append(local_queue(profile.ACCEPTANCE_QUEUE, ns, profile.ACCEPTANCE_QUEUE, platform.cluster))
    return out


def priority_classes(platform: PlatformConfig) -> list[dict[str, Any]]:
    """The tiers twice: WorkloadPriorityClasses (Kueue's order and preemption) and PriorityClasses (the pods'), the
    same value, the pods' never preempting."""
    out: list[dict[str, Any]] = []
    for name, value, _ in profile.PRIORITY_CLASSES:
        meta = k8s.meta(name, platform.cluster, COMPONENT)
        out.append({"apiVersion": API, "kind": "WorkloadPriorityClass", "metadata": meta, "value": value})
        out.append(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": dict(meta),
                "value": value,
                "globalDefault": False,
                "preemptionPolicy": "Never",
                "description": TIER_TEXT[name],
            }
        )
    return out


def objects(platform: PlatformConfig) -> list[dict[str, Any]]:
    """Every Kueue object of the stack, cluster-scoped first (the flavor and topology before the queues naming
    them)."""
    return [
        *topology.kueue_objects(platform),
        *cluster_queues(platform),
        *local_queues(platform),
        *priority_classes(platform),
    ]


@dataclass
class KueueArgs:
    platform: PlatformConfig


class Kueue(pulumi.ComponentResource):
    """Installs Kueue (chart kubernetes-sigs/kueue) in `kueue-system` and the stack's queues as ClusterQueues in one
    cohort, LocalQueues in every training namespace, the training tiers, and the GPU ResourceFlavor (with the fabric
    Topology when nodes.topology is set).

    Needs: the training namespaces (their LocalQueues); the Training Operator and Trainer need nothing from Kueue
    (they honour `suspend`). Kueue's objects wait for the release (the chart ships the CRDs and the webhooks that
    check them).

    Example:
        Kueue("kueue", KueueArgs(platform=cfg.platform), opts=pulumi.ResourceOptions(parent=p))
    """

    def __init__(self, name: str, args: KueueArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("fastpath:platform:Kueue", name, None, opts)
        p = args.platform
        self.namespace, self.release = k8s.operator_install(
            self,
            p.cluster,
            COMPONENT,
            NAMESPACE,
            "restricted",
            "the manager runs unprivileged",
            "kueue",
            *mirrors.chart_source(versions.KUEUE_CHART, None, p.mirrors),
            versions.KUEUE_VERSION,
            values(p),
        )
        after = pulumi.ResourceOptions(parent=self, depends_on=[self.release, *k8s.inherited_depends_on(opts)])
        self.objects = [k8s.apply(m, after) for m in objects(p)]
        self.register_outputs({"queues": [q.name for q in p.scheduler.queues]})
