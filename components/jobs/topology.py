"""A job's place in the fabric topology, as each scheduler reads it. Pure.

Kueue (Topology Aware Scheduling) reads podset annotations on each pod template and places the admitted gang in one
domain of the named level, or as close as it can (kubernetes-sigs/kueue@v0.19.2:pkg/controller/jobframework/tas.go
NewPodSetTopologyRequest; apis/kueue/v1beta2/topology_types.go for the keys). Two podsets of one job (an MPI
launcher and its nodes, a TFJob's chief and workers) share the domain only when grouped: `podset-group-name` on
both, which requires required or preferred and takes exactly two podsets.

Volcano reads `networkTopology` on the PodGroup: `hard` keeps the gang inside one HyperNode of at most that tier,
`soft` as low a tier as fits (volcano-sh/volcano@v1.15.1: the network-topology-aware plugin, which the scheduler
conf fastpath renders loads when the stack has a topology). A Trainer v2 runtime carries it in
`podGroupPolicy.volcano.networkTopology` (kubeflow/trainer@v2.3.0:pkg/apis/trainer/v1alpha1/trainingruntime_types.go
VolcanoPodGroupPolicySource); a Training Operator v1 PodGroup has no such field, so v1 jobs on Volcano are packed by
preferred pod affinity on the level's key only.
"""

from __future__ import annotations

from components.model.topology import TopologyConfig, TopologyPlacement

REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
GROUP = "kueue.x-k8s.io/podset-group-name"


def kueue_annotations(
    placement: TopologyPlacement, topology: TopologyConfig, group: str | None = None
) -> dict[str, str]:
    """The pod-template annotations that place a podset at `placement` (and, with `group`, share its domain with
    the job's other podset)."""
    key = REQUIRED if placement.mode == "required" else PREFERRED
    out = {key: topology.key(placement.level)}
    if group is not None:
        out[GROUP] = group
    return out


def volcano_network_topology(placement: TopologyPlacement, topology: TopologyConfig) -> dict[str, object]:
    """A PodGroup's networkTopology for `placement`: the level's HyperNode tier (innermost 1), hard when required."""
    return {
        "mode": "hard" if placement.mode == "required" else "soft",
        "highestTierAllowed": topology.volcano_tier(placement.level),
    }
