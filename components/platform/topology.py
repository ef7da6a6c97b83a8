"""The fabric topology (nodes.topology) as the cluster sees it: who labels the nodes (NVIDIA Topograph, or the
cluster's provisioning), and the scheduler's view built from the same level list (Kueue's Topology and
ResourceFlavor, or Volcano's HyperNodes by label discovery and its network-topology-aware plugin). Each job's
placement in it is components/jobs/topology.py.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import pulumi

from components import k8s, versions
from components.model.config import PlatformConfig
from components.model.topology import HOSTNAME, TopologyConfig
from components.platform import mirrors, placement

NAMESPACE = "topograph"
COMPONENT = "topology"
KUEUE_API = "kueue.x-k8s.io/v1beta2"
# Volcano's label discovery type name (at most 20 characters: volcano-sh/volcano@v1.15.1 label discovery config).
VOLCANO_TYPE = "fastpath"


def level_keys(topology: TopologyConfig) -> list[str]:
    """The scheduler's levels, outermost first, the host last."""
    return [*topology.keys(), HOSTNAME]


def _digest(topology: TopologyConfig) -> str:
    return hashlib.sha256(",".join(level_keys(topology)).encode()).hexdigest()[:8]


def topology_name(topology: TopologyConfig) -> str:
    """Kueue's Topology name: its levels are immutable (CEL self == oldSelf in kueue.x-k8s.io_topologies), so a
    changed list is a new Topology, named by its keys."""
    return f"fastpath-{_digest(topology)}"


def flavor_name(platform: PlatformConfig) -> str:
    """The GPU ResourceFlavor's name. A flavor's topologyName and nodeLabels are immutable once it has a topology
    (kubernetes-sigs/kueue@v0.19.2:apis/kueue/v1beta2/resourceflavor_types.go CEL), so it is named by them too."""
    topology = platform.nodes.topology
    return "gpu" if topology is None else f"gpu-{_digest(topology)}"


def kueue_objects(platform: PlatformConfig) -> list[dict[str, Any]]:
    """The GPU ResourceFlavor (the GPU nodes by product; with a topology, its Topology too). Kueue's TAS sees only
    nodes carrying the flavor's labels and every level's label (pkg/cache/scheduler/tas_nodes_cache.go): a node
    Topograph has not labelled yet takes no TAS pod."""
    spec: dict[str, Any] = {"nodeLabels": {k8s.GPU_PRODUCT_LABEL: platform.gpu.product}}
    out: list[dict[str, Any]] = []
    if (topology := platform.nodes.topology) is not None:
        name = topology_name(topology)
        out.append(
            {
                "apiVersion": KUEUE_API,
                "kind": "Topology",
                "metadata": k8s.meta(name, platform.cluster, COMPONENT),
                "spec": {"levels": [{"nodeLabel": key} for key in level_keys(topology)]},
            }
        )
        spec["topologyName"] = name
    flavor = {
        "apiVersion": KUEUE_API,
        "kind": "ResourceFlavor",
        "metadata": k8s.meta(flavor_name(platform), platform.cluster, COMPONENT),
        "spec": spec,
    }
    return [*out, flavor]


def volcano_controller_config(topology: TopologyConfig) -> dict[str, Any]:
    """Volcano's controller config (chart value custom.controller_config_override, a map): HyperNodes discovered
    from the level labels, the host last (volcano-sh/volcano@v1.15.1:pkg/controllers/hypernode/discovery/label)."""
    return {
        "networkTopologyDiscovery": [
            {
                "source": "label",
                "enabled": True,
                "config": {"networkTopologyTypes": {VOLCANO_TYPE: [{"nodeLabel": k} for k in level_keys(topology)]}},
            }
        ]
    }


# The scheduler plugin that honours a PodGroup's networkTopology (without it `hard` is ignored: the only plugin that
# registers HyperNode gradients, volcano-sh/volcano@v1.15.1:pkg/scheduler/plugins/network-topology-aware), packing
# gangs into the fullest HyperNode that fits, on GPUs alone: the resources are one comma-separated string (a YAML
# list is ignored) and CPU and memory weigh 1 unless zeroed (getPriorityWeight). tests/volcano_topology_v115.py
# restates what it does with these.
VOLCANO_PLUGIN = {
    "name": "network-topology-aware",
    "arguments": {
        "weight": 10,
        "hypernode.binpack.cpu": 0,
        "hypernode.binpack.memory": 0,
        "hypernode.binpack.resources": "nvidia.com/gpu",
        "hypernode.binpack.resources.nvidia.com/gpu": 10,
    },
}


def topograph_values(platform: PlatformConfig) -> dict[str, Any]:
    """Helm values for NVIDIA Topograph (engine k8s): the provider, the level keys it owns closest first (it writes
    exactly those and removes them from nodes it no longer places: NVIDIA/topograph@v1.0.0:pkg/engines/k8s), only
    on GPU nodes; for infiniband-k8s the privileged node-data-broker on each GPU node (ibnetdiscover reads
    /sys/class), given whole as the chart's IB example does (a partial override is refused at admission)."""
    topology = platform.nodes.topology
    assert topology is not None and topology.source == "topograph"
    gpu_nodes = {k8s.NFD_GPU_LABEL: "true"}
    v: dict[str, Any] = {
        "image": {"repository": versions.TOPOGRAPH_IMAGE_REPOSITORY, "tag": versions.TOPOGRAPH_IMAGE_TAG},
        "engine": {"name": "k8s", "params": {"fabricLabels": topology.keys()[::-1], "nodeSelector": gpu_nodes}},
        "nodeObserver": {"topograph": {"trigger": {"nodeSelector": gpu_nodes}}},
        # Helm test pods: `pulumi up` never runs them.
        "tests": {"enabled": False},
    }
    if topology.provider == "netq":
        v["provider"] = {"name": "netq", "params": {"apiUrl": topology.endpoint}}
        v["config"] = {"credentialsSecret": topology.credentials_secret}
        v["nodeDataBroker"] = {"enabled": False}
    else:
        v["provider"] = {"name": "infiniband-k8s"}
        v["nodeDataBroker"] = {
            "podSecurityContext": {
                "runAsNonRoot": False,
                "runAsUser": 0,
                "runAsGroup": 0,
                "fsGroup": 0,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "securityContext": {
                "privileged": True,
                "runAsNonRoot": False,
                "runAsUser": 0,
                "readOnlyRootFilesystem": False,
                "allowPrivilegeEscalation": True,
                "capabilities": {"drop": []},
            },
            "nodeSelector": gpu_nodes,
            "tolerations": k8s.operand_tolerations(platform.gpu.taint_key, platform.health.enabled),
            "volumeMounts": [{"name": "sys-class-volume", "mountPath": "/sys/class"}],
            "volumes": [{"name": "sys-class-volume", "hostPath": {"path": "/sys/class", "type": "Directory"}}],
        }
    return k8s.merge_values(v, placement.site_values(versions.TOPOGRAPH_CHART, platform))


@dataclass
class TopographArgs:
    platform: PlatformConfig


class Topograph(pulumi.ComponentResource):
    """Installs NVIDIA Topograph (chart topograph) in `topograph`: it discovers the fabric through the stack's
    provider and labels each GPU node with its level keys (nodes.topology), which Kueue's Topology or Volcano's
    HyperNode discovery then read.

    Needs: for infiniband-k8s, ibnetdiscover's reach from a GPU node (a privileged pod each; the namespace allows
    it) and each HCA's NodeDescription starting with the Kubernetes node name; for netq, the credentials Secret.

    Example:
        Topograph("topograph", TopographArgs(platform=cfg.platform), opts=pulumi.ResourceOptions(parent=p))
    """

    def __init__(self, name: str, args: TopographArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("fastpath:platform:Topograph", name, None, opts)
        p = args.platform
        topology = p.nodes.topology
        assert topology is not None
        privileged = topology.provider == "infiniband-k8s"
        self.namespace, self.release = k8s.operator_install(
            self,
            p.cluster,
            COMPONENT,
            NAMESPACE,
            "privileged" if privileged else "restricted",
            "the node-data-broker runs ibnetdiscover on each GPU node, privileged"
            if privileged
            else "API server and node-observer run unprivileged",
            "topograph",
            *mirrors.chart_source(versions.TOPOGRAPH_CHART, versions.TOPOGRAPH_REPO, p.mirrors),
            versions.TOPOGRAPH_VERSION,
            topograph_values(p),
        )
        self.register_outputs({"levels": topology.keys()})
