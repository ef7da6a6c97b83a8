"""NVIDIA Network Operator: the chart, the NicClusterPolicy it no longer creates, and NV-IPAM pools."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi

from components import fabric as fab
from components import k8s, versions
from components.config import PlatformConfig

NAMESPACE = "nvidia-network-operator"
COMPONENT = "network-operator"
POLICY_NAME = "nic-cluster-policy"  # the operator reconciles only a NicClusterPolicy of this name


def values(platform: PlatformConfig) -> dict:
    """Helm values for nvidia/network-operator. Since v24.10 the chart deploys only the operator and CRDs.
    NFD runs here only when the GPU Operator (which brings its own) is not installed."""
    v: dict = {
        "nfd": {"enabled": not platform.components.gpu_operator},
        "sriovNetworkOperator": {"enabled": platform.fabric.attachment == "sriov"},
    }
    if platform.fabric.attachment == "sriov":
        # The bundled SR-IOV chart creates the SriovOperatorConfig `default`; without it nothing is configured.
        v["sriov-network-operator"] = {"sriovOperatorConfig": {"deploy": True}}
    return v


def _image(name: str, version: str = versions.NETWORK_OPERATOR_COMPONENT_TAG) -> dict:
    return {"image": name, "repository": versions.MELLANOX_REPOSITORY, "version": version}


def nic_cluster_policy(platform: PlatformConfig) -> dict:
    """The NicClusterPolicy: DOCA driver unless the hosts carry MOFED, the device plugin the attachment needs
    (one resource per rail), Multus with the CNI plugins (and IPoIB for InfiniBand `shared`), and NV-IPAM."""
    f = platform.fabric
    rails = fab.rails(f)
    spec: dict = {}
    if not platform.gpu.host_mofed:
        spec["ofedDriver"] = {
            **_image("doca-driver", versions.DOCA_DRIVER_VERSION),
            "upgradePolicy": {"autoUpgrade": True, "maxParallelUpgrades": 1},
        }
    if f.attachment == "shared":
        config = {"configList": [
            {"resourceName": r.resource_name, "rdmaHcaMax": 63, "selectors": {"ifNames": [r.host_interface]}}
            for r in rails
        ]}
        spec["rdmaSharedDevicePlugin"] = {**_image("k8s-rdma-shared-dev-plugin"),
                                          "config": json.dumps(config, indent=2)}
    if f.attachment == "hostdevice":
        config = {"resourceList": [
            {"resourcePrefix": fab.HOSTDEV_RESOURCE_PREFIX, "resourceName": r.resource_name,
             "selectors": {"vendors": ["15b3"], "isRdma": True, "pfNames": [r.host_interface]}}
            for r in rails
        ]}
        spec["sriovDevicePlugin"] = {**_image("sriov-network-device-plugin"), "config": json.dumps(config, indent=2)}
    secondary: dict = {"cniPlugins": _image("plugins"), "multus": _image("multus-cni")}
    if f.attachment == "shared" and f.kind == "infiniband":
        secondary["ipoib"] = _image("ipoib-cni")
    spec["secondaryNetwork"] = secondary
    spec["nvIpam"] = {**_image("nvidia-k8s-ipam"), "enableWebhook": False}
    return {
        "apiVersion": "mellanox.com/v1alpha1",
        "kind": "NicClusterPolicy",
        "metadata": k8s.meta(POLICY_NAME, platform.cluster, COMPONENT),
        "spec": spec,
    }


def ip_pools(platform: PlatformConfig) -> list[dict]:
    """One NV-IPAM IPPool per rail, in the operator's namespace (the only one nv-ipam watches), splitting the
    rail subnet evenly across the GPU nodes."""
    out = []
    for r, rc in zip(fab.rails(platform.fabric), platform.fabric.rails, strict=True):
        block = (rc.subnet.num_addresses - 2) // platform.nodes.count
        out.append({
            "apiVersion": "nv-ipam.nvidia.com/v1alpha1",
            "kind": "IPPool",
            "metadata": k8s.meta(r.name, platform.cluster, COMPONENT, namespace=NAMESPACE),
            "spec": {
                "subnet": str(rc.subnet),
                "perNodeBlockSize": block,
                "nodeSelector": gpu_node_selector_term(platform),
            },
        })
    return out


def gpu_node_selector_term(platform: PlatformConfig) -> dict:
    return {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "nvidia.com/gpu.product", "operator": "In", "values": [platform.gpu.product]}]}]}


@dataclass
class NetworkOperatorArgs:
    platform: PlatformConfig


class NetworkOperator(pulumi.ComponentResource):
    """Installs the NVIDIA Network Operator (chart nvidia/network-operator), the `nic-cluster-policy`
    NicClusterPolicy and one NV-IPAM IPPool per rail.

    Needs: Mellanox/NVIDIA NICs on the GPU nodes; fabric.kind infiniband or roce.
    Ordering: the NicClusterPolicy waits for the release (its CRD comes with the chart); the IPPools wait for
    the NicClusterPolicy, because their CRD is installed by the operator when it reconciles `spec.nvIpam`.

    Example:
        NetworkOperator("net", NetworkOperatorArgs(platform=cfg.platform), opts=pulumi.ResourceOptions(parent=p))
    """

    def __init__(self, name: str, args: NetworkOperatorArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("fastpath:platform:NetworkOperator", name, None, opts)
        p = args.platform
        self.namespace, self.release = k8s.operator_install(
            self, p.cluster, COMPONENT, NAMESPACE, "privileged",
            "DOCA driver, device plugins and CNI DaemonSets need host network, host paths and privileges",
            "network-operator", versions.NETWORK_OPERATOR_CHART, versions.NETWORK_OPERATOR_REPO,
            p.versions.network_operator, values(p))
        self.policy = k8s.apply(nic_cluster_policy(p), pulumi.ResourceOptions(parent=self, depends_on=[self.release]))
        self.pools = [k8s.apply(m, pulumi.ResourceOptions(parent=self, depends_on=[self.policy]))
                      for m in ip_pools(p)]
        self.register_outputs({"namespace": NAMESPACE, "policy": POLICY_NAME})
