"""The `dra` attachment: a training pod claims its GPUs and its rail NICs through Dynamic Resource Allocation
(resource.k8s.io/v1, Kubernetes 1.34+) instead of counting device-plugin resources. Pure.

- GPUs come from NVIDIA's DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1, DeviceClass `gpu.nvidia.com`),
  rail NICs from kubernetes-sigs/dranet@v1.4.0 (driver `dra.net`), through fastpath's DeviceClass, which selects
  exactly the rails' netdevs (`dra.net/ifName`: a storage or management NIC is never a rail).
- Both publish `resource.kubernetes.io/pcieRoot`. A pod with part of a node's GPUs asks for them one by one, each
  with a NIC constrained to the GPU's PCIe root (a `matchAttribute` constraint naming the pair: a constraint
  without `requests` would force every device of the claim onto one root, which on an HGX node holds one GPU and
  one NIC; kubernetes/dynamic-resource-allocation@v0.34.0 structured matchAttributeConstraint, restated in
  tests/dra_allocator_v134.py). A whole-node pod takes every GPU and every rail, unconstrained.
- dranet moves each allocated NIC's netdev into the pod, so the pod sees exactly its NICs; which HCA each one is
  (mlx5_N) dranet does not publish for a NIC with a netdev (pkg/inventory/db.go addRDMAAttributes), so a
  partial-node pod reads it at start (components/jobs/dra_hca.sh) and a whole-node pod knows it: every rail.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from components.model.config import FabricConfig

API = "resource.k8s.io/v1"
GPU_CLASS = "gpu.nvidia.com"  # the GPU DRA driver chart's (templates/deviceclass-gpu.yaml)
NIC_CLASS = "fastpath-rail-nic"
NIC_DRIVER = "dra.net"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
CLAIM = "fabric"  # the pod's claim name; its containers list it in resources.claims
# The whole-node template in every training namespace, which the Trainer v2 runtimes name (a cluster-wide runtime
# can only name a template by name, resolved in each TrainJob's namespace).
RUNTIME_TEMPLATE = "fastpath-fabric"


@dataclass(frozen=True)
class FabricClaim:
    """What a pod claims: `gpus` GPUs and `nics` rail NICs, paired by PCIe root when the pod has part of a node."""

    template: str  # the ResourceClaimTemplate the pod names (in its own namespace)
    gpus: int
    nics: int
    paired: bool


def fabric_claim(template: str, gpus: int, gpus_per_node: int, rails: int) -> FabricClaim:
    """The claim of a pod with `gpus` of a node's `gpus_per_node` (config refuses `dra` unless rails equal GPUs)."""
    whole = gpus >= gpus_per_node
    return FabricClaim(template, gpus, rails if whole else gpus, paired=not whole)


def nic_selector(fabric: FabricConfig) -> str:
    """CEL selecting the rails' RDMA NICs among everything dranet publishes (every netdev of the node)."""
    names = ", ".join(f'"{r.interface}"' for r in fabric.rails)
    attrs = f'device.attributes["{NIC_DRIVER}"]'
    return (
        f'device.driver == "{NIC_DRIVER}" && {attrs}.rdma == true && "ifName" in {attrs} && {attrs}.ifName in [{names}]'
    )


def device_class(fabric: FabricConfig, meta: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "DeviceClass",
        "metadata": meta,
        "spec": {"selectors": [{"cel": {"expression": nic_selector(fabric)}}]},
    }


def _exactly(name: str, device_class_name: str, count: int) -> dict[str, Any]:
    return {
        "name": name,
        "exactly": {"deviceClassName": device_class_name, "allocationMode": "ExactCount", "count": count},
    }


def claim_spec(claim: FabricClaim) -> dict[str, Any]:
    """The ResourceClaim spec of `claim`: paired requests gpu-i/nic-i, each pair on one PCIe root, or the node's
    GPUs and rails whole."""
    if not claim.paired:
        requests = [_exactly("gpus", GPU_CLASS, claim.gpus), _exactly("nics", NIC_CLASS, claim.nics)]
        return {"devices": {"requests": requests}}
    requests, constraints = [], []
    for i in range(claim.gpus):
        requests += [_exactly(f"gpu-{i}", GPU_CLASS, 1), _exactly(f"nic-{i}", NIC_CLASS, 1)]
        constraints.append({"requests": [f"gpu-{i}", f"nic-{i}"], "matchAttribute": PCIE_ROOT})
    return {"devices": {"requests": requests, "constraints": constraints}}


def claim_template(claim: FabricClaim, meta: dict[str, Any]) -> dict[str, Any]:
    """The ResourceClaimTemplate a pod names: each pod gets its own claim from it (dranet serves a claim to one
    pod only: pkg/driver/dra_hooks.go prepareResourceClaim)."""
    return {"apiVersion": API, "kind": "ResourceClaimTemplate", "metadata": meta, "spec": {"spec": claim_spec(claim)}}


# Multi-node NVLink (gpu.nvlinkDomain): a ComputeDomain per job (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1,
# resource.nvidia.com/v1beta1). Its controller makes the job's channel ResourceClaimTemplate, named as the domain says,
# in the domain's namespace (cmd/compute-domain-controller/resourceclaimtemplate.go), and the kubelet plugin injects
# the IMEX channel into the pods that claim it, once the node's IMEX daemon is up (cmd/compute-domain-kubelet-plugin/
# device_state.go applyComputeDomainChannelConfig). numNodes 0: with IMEXDaemonsWithDNSNames (the default) a pod
# starts once its own node's daemon is ready.
IMEX_CLAIM = "imex"
CLIQUE_LABEL = "nvidia.com/gpu.clique"  # GPU feature discovery's <clusterUUID>.<cliqueID> (k8s-device-plugin imex.go)


def compute_domain(template: str, meta: dict[str, Any]) -> dict[str, Any]:
    """A job's ComputeDomain, whose controller makes the channel template `template` its pods claim."""
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": meta,
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": template}}},
    }
