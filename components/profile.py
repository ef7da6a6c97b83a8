"""The platform profile: everything a TrainingJob needs to wire a pod for one cluster. Pure data.

The stack exports it as `profile`; jobs in the same program take it from Platform.profile, jobs in another
project from a StackReference (`from_stack`). The names jobs refer to (scheduler, priority tiers, checkpoint
claim, preflight ConfigMap) are defined here; the Volcano and checkpoint components take them from this module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from components import fabric
from components.config import PlatformConfig

SCHEDULER_NAME = "volcano"
# What Volcano v1.15.1, as components/volcano.py configures it, does with these tiers (PodGroup priorityClassName):
# gangpreempt evicts whole gangs of strictly lower tiers in the preemptor's own queue, never part of a gang, and
# only when the preemptor's entire gang then fits; across queues only gangreclaim acts: a starving queue takes
# whole gangs from other reclaimable queues, those furthest over their share first, without checking that the
# victim's queue is over its share and regardless of tier (pkg/scheduler/actions/gangreclaim selectDomainBundles,
# SortBundlesForReclaim). preemptionPolicy Never binds kube-scheduler only (the gang actions do not read it).
_QUEUES = ("Across queues tiers do not apply: a queue whose gang does not fit reclaims whole gangs, of any tier, "
           "from other reclaimable queues, those furthest over their weight share first. A queue's GPU capability "
           "is a ceiling it never exceeds and reserves nothing.")
PRIORITY_CLASSES = (
    ("training-critical", 100000,
     "Deadline runs. If its gang does not fit, Volcano evicts whole gangs of lower tiers in the same queue "
     "(never part of one, only when the whole gang then fits). " + _QUEUES),
    ("training-standard", 10000,
     "Default tier. If its gang does not fit, Volcano evicts whole training-preemptible gangs in the same queue; "
     "training-critical gangs of the same queue may evict it. " + _QUEUES),
    ("training-preemptible", 100,
     "Opportunistic runs: the first whole gangs evicted for higher tiers of the same queue; evicts no tier. A job "
     "that loses pods and cannot re-form within its rendezvous timeout fails and frees its nodes. " + _QUEUES),
)
DEFAULT_PRIORITY_CLASS = "training-standard"
CHECKPOINT_CLAIM = "checkpoints"
CHECKPOINT_ROOT = "/checkpoints"
PREFLIGHT_CONFIGMAP = "fastpath-preflight"
PREFLIGHT_KEY = "preflight.sh"


def profile(platform: PlatformConfig) -> dict:
    """Everything a TrainingJob needs to wire a pod for this cluster: plain data, exported as the stack output
    `profile` and readable from other projects through a StackReference."""
    full_node = fabric.pod_wiring(platform.fabric, platform.training_namespaces[0], platform.gpu.per_node,
                                  platform.gpu.per_node)
    return {
        "cluster": platform.cluster,
        "namespaces": list(platform.training_namespaces),
        "gpu": {"product": platform.gpu.product, "perNode": platform.gpu.per_node,
                "taintKey": platform.gpu.taint_key},
        "nodes": platform.nodes.to_config(),
        "fabric": platform.fabric.to_config(),
        "transport": full_node.transport,
        "rails": [{"name": r.name, "network": r.network, "resource": r.resource, "hca": r.hca,
                   "subnet": r.subnet, "speedGbps": r.speed_gbps} for r in fabric.rails(platform.fabric)],
        "ncclEnv": full_node.env,
        "scheduler": {
            "name": SCHEDULER_NAME if platform.components.volcano else None,
            "queues": [{"name": q.name, "gpus": q.gpus} for q in platform.scheduler.queues],
            "defaultQueue": platform.scheduler.queue_for_jobs,
            "priorityClasses": [name for name, _, _ in PRIORITY_CLASSES],
            "defaultPriorityClass": DEFAULT_PRIORITY_CLASS,
        },
        "checkpoints": ({"claim": CHECKPOINT_CLAIM, "mountRoot": CHECKPOINT_ROOT}
                        if platform.components.checkpoint_storage else None),
        # The preflight script ships as a ConfigMap in each training namespace on RDMA fabrics.
        "preflight": ({"configMap": PREFLIGHT_CONFIGMAP, "key": PREFLIGHT_KEY}
                      if fabric.is_rdma(platform.fabric) else None),
    }


def normalize(value, drop_none: bool = False):
    """Plain data with integral floats back to ints (and, with drop_none, unset keys removed). Pulumi hands
    every number across the wire (StackReference outputs, mocks, policy props) as a float: 8.0 GPUs would
    render as nprocPerNode "8.0"."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str | bytes):
        return value
    # Mappings and Sequences, not just dict/list: policy props arrive as read-only proxies.
    if isinstance(value, Mapping):
        return {k: normalize(v, drop_none) for k, v in value.items() if not (drop_none and v is None)}
    if isinstance(value, Sequence):
        return [normalize(v, drop_none) for v in value]
    return value


def from_stack(stack: str) -> dict:
    """The profile exported by another fastpath stack (`org/fastpath/prod-ib`), as plain data, so a
    TrainingJob in another project is wired from it at preview time. Call inside a Pulumi program."""
    import pulumi
    from pulumi.runtime.sync_await import _sync_await

    details = _sync_await(pulumi.StackReference(f"fastpath-profile-{stack.replace('/', '-')}", stack_name=stack)
                          .get_output_details("profile"))
    value = details.value if details.value is not None else details.secret_value
    if not isinstance(value, dict):
        raise ValueError(f"stack {stack} exports no `profile`: is it a fastpath stack that has been deployed?")
    return normalize(value)
