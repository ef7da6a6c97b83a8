"""SR-IOV rails: one SriovNetworkNodePolicy and one SriovIBNetwork / SriovNetwork per rail."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi

from components import fabric as fab
from components import k8s
from components.config import PlatformConfig
from components.network_operator import NAMESPACE as OPERATOR_NAMESPACE

COMPONENT = "sriov"


def ipam(rail: fab.Rail) -> str:
    # NV-IPAM, cluster-wide: host-local would hand every node the same addresses.
    return json.dumps({"type": "nv-ipam", "poolName": rail.name}, separators=(",", ":"))


def node_policies(platform: PlatformConfig) -> list[dict]:
    f = platform.fabric
    out = []
    for r in fab.rails(f):
        spec = {
            "resourceName": r.resource_name,
            "nodeSelector": {"nvidia.com/gpu.product": platform.gpu.product},
            "nicSelector": {"vendor": "15b3", "pfNames": [r.host_interface]},
            "numVfs": f.vfs_per_pf,
            "isRdma": True,
            "linkType": "ib" if f.kind == "infiniband" else "eth",
            "deviceType": "netdevice",
            "priority": 90,
        }
        if f.mtu:
            spec["mtu"] = f.mtu
        out.append({
            "apiVersion": "sriovnetwork.openshift.io/v1",
            "kind": "SriovNetworkNodePolicy",
            "metadata": k8s.meta(r.name, platform.cluster, COMPONENT, namespace=OPERATOR_NAMESPACE),
            "spec": spec,
        })
    return out


def networks(platform: PlatformConfig) -> list[dict]:
    """The operator renders each into a NetworkAttachmentDefinition of the same name in the training
    namespace; that name is the one pods reference (fabric.Rail.network)."""
    f = platform.fabric
    kind = "SriovIBNetwork" if f.kind == "infiniband" else "SriovNetwork"
    namespace = platform.training_namespaces[0]
    return [{
        "apiVersion": "sriovnetwork.openshift.io/v1",
        "kind": kind,
        "metadata": k8s.meta(r.network, platform.cluster, COMPONENT, namespace=OPERATOR_NAMESPACE),
        "spec": {"resourceName": r.resource_name, "networkNamespace": namespace, "ipam": ipam(r),
                 "linkState": "enable"},
    } for r in fab.rails(f)]


@dataclass
class SriovNetworksArgs:
    platform: PlatformConfig
    operator: pulumi.Resource  # the network-operator release that installs the SR-IOV CRDs


class SriovNetworks(pulumi.ComponentResource):
    """Exposes each rail to pods as SR-IOV VFs: a SriovNetworkNodePolicy per rail (pfNames, numVfs, isRdma,
    linkType, nodeSelector on the GPU product) and a SriovIBNetwork (InfiniBand) or SriovNetwork (RoCE) per
    rail targeting the training namespace, with NV-IPAM. Resources are `nvidia.com/sriov_<rail>`.

    Needs: the network-operator release with sriovNetworkOperator.enabled (NetworkOperator sets it).

    Example:
        SriovNetworks("sriov", SriovNetworksArgs(platform=cfg.platform, operator=net.release))
    """

    def __init__(self, name: str, args: SriovNetworksArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("fastpath:platform:SriovNetworks", name, None, opts)
        after = pulumi.ResourceOptions(parent=self, depends_on=[args.operator])
        self.policies = [k8s.apply(m, after) for m in node_policies(args.platform)]
        self.networks = [k8s.apply(m, after) for m in networks(args.platform)]
        self.register_outputs({"networks": [r.network for r in fab.rails(args.platform.fabric)]})
