"""NVIDIA Network Operator: the chart, the NicClusterPolicy it no longer creates, and NV-IPAM pools."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, assert_never

import pulumi

from components import k8s, versions
from components.fabric import addressing
from components.fabric import wiring as fab
from components.jobs.resolve import TRAINING_POD_SELECTOR
from components.model.config import MirrorsConfig, PlatformConfig
from components.platform import mirrors, networks, placement

NAMESPACE = "nvidia-network-operator"
COMPONENT = "network-operator"
POLICY_NAME = "nic-cluster-policy"  # the operator reconciles only a NicClusterPolicy of this name
# pulumi-kubernetes await annotations (provider/pkg/metadata/annotations.go).
WAIT_FOR = "pulumi.com/waitFor"
TIMEOUT_SECONDS = "pulumi.com/timeoutSeconds"


def values(platform: PlatformConfig) -> dict:
    """Helm values for nvidia/network-operator; since v24.10 the chart deploys only the operator and its CRDs.

    One node-feature-discovery runs in a cluster. With the GPU Operator installed it is the GPU Operator's, so
    this chart's NFD is off and so is its NodeFeatureRule: network-operator@v26.4.1:
    deployment/network-operator/templates/nodefeaturerules.yaml renders the rule whenever
    `nfd.deployNodeFeatureRules` is true (its default), while the NodeFeatureRule CRD ships only with the NFD
    subchart this release then leaves out; the CRD would have to come from the gpu-operator release, which
    installs in parallel, so the release would fail with "no matches for kind NodeFeatureRule" whenever it
    won the race. The rule only adds `feature.node.kubernetes.io/pci-15b3.present`, which the GPU Operator's
    NFD already sets (its PCI whitelist has classes 02/0200/0207 with the vendor field:
    gpu-operator@v26.7.0:deployments/gpu-operator/values.yaml), so turning it off loses nothing and needs no
    ordering between the two releases. Without the GPU Operator this chart's NFD runs with its rule, CRDs
    included.
    """
    gpu_nfd = platform.components.gpu_operator
    v: dict = {"nfd": {"enabled": not gpu_nfd}}  # pinned both ways (the chart's default is true)
    if gpu_nfd:
        v["nfd"]["deployNodeFeatureRules"] = False
    if (att := platform.fabric.attachment_row) is not None and att.sriov_operator:
        v["sriovNetworkOperator"] = {"enabled": True}
        # The parent chart's default, pinned: the SriovOperatorConfig `default` it creates is what makes the
        # operator deploy its config daemon; without it no VF is ever configured.
        v["sriov-network-operator"] = {"sriovOperatorConfig": {"deploy": True}}
    return k8s.merge_values(v, placement.site_values(versions.NETWORK_OPERATOR_CHART, platform))


def _image(name: str, version: str, mirror: MirrorsConfig | None = None) -> dict:
    return {"image": name, "repository": mirrors.image(versions.MELLANOX_REPOSITORY, mirror), "version": version}


# How long `pulumi up` waits for the NicClusterPolicy to report ready: the DOCA driver container compiles
# and loads the driver on every NIC node at once on first install (tens of minutes); without it, only images.
READY_TIMEOUT_DOCA = 3600
READY_TIMEOUT = 900


def ofed_env(platform: PlatformConfig) -> list[dict]:
    """Environment of the DOCA driver container (network-operator@v26.4.1:docs/mofed-container-env-vars.md).
    NFS over RDMA checkpoints need `ENABLE_NFSRDMA=true`: the driver is built with its NFS-RDMA modules and loads
    `rpcrdma` after the reload (without it the build passes --without-mlnx-nfsrdma and the mount fails with
    proto=rdma). `UNLOAD_STORAGE_MODULES=true` because a node that already mounted over RDMA has rpcrdma loaded,
    and the driver container refuses to reload the stack over loaded storage modules without it
    (Mellanox/doca-driver-build entrypoint `handleKernelModules`)."""
    nfs = platform.checkpoints.nfs if platform.checkpoints and platform.components.checkpoint_storage else None
    if nfs is None or not nfs.rdma:
        return []
    return [{"name": "ENABLE_NFSRDMA", "value": "true"}, {"name": "UNLOAD_STORAGE_MODULES", "value": "true"}]


def nic_cluster_policy(platform: PlatformConfig) -> dict:
    """The NicClusterPolicy: DOCA driver unless the hosts carry MOFED, the device plugin the attachment needs
    (one resource per rail), Multus with the CNI plugins (and IPoIB for InfiniBand `shared`), and NV-IPAM.

    `pulumi up` waits until the operator reports `status.state: ready` (pulumi-kubernetes' `pulumi.com/waitFor`
    annotation, pulumi/pulumi-kubernetes provider/pkg/metadata/overrides.go `ReadyCondition`; the state values
    are network-operator@v26.4.1:api/v1alpha1/nicclusterpolicy_types.go `StateReady = "ready"`): the IPPool
    CRD only exists once the operator has reconciled `spec.nvIpam`, so the pools must not be sent before.
    A custom GPU taint goes into `spec.tolerations`: the operator's DaemonSets tolerate only `nvidia.com/gpu`
    by themselves, and the DOCA driver state skips nodes with any other untolerated taint.
    """
    f = platform.fabric
    rails = fab.rails(f)
    tag = versions.network_operator_component_tag(platform.versions.network_operator)
    spec: dict = {}
    if not platform.gpu.host_mofed:
        spec["ofedDriver"] = {
            **_image(
                "doca-driver", versions.DOCA_DRIVER_VERSIONS[platform.versions.network_operator], platform.mirrors
            ),
            # maxParallelUpgrades 1 is the CRD's default, pinned: a driver upgrade restarts the RDMA stack, so
            # one node at a time. Before it, the node waits for the training pods on it to finish (fastpath's role
            # label, as the GPU driver's upgrades do), then drains what is left; without these the operator only
            # cordons and restarts the driver under running RDMA pods (network-operator@v26.4.1:
            # api/v1alpha1/utils.go GetDriverUpgradePolicy passes a nil drain and wait through).
            "upgradePolicy": {
                "autoUpgrade": True,
                "maxParallelUpgrades": 1,
                "waitForCompletion": {"podSelector": TRAINING_POD_SELECTOR},
                "drain": {"enable": True, "deleteEmptyDir": True},
            },
        }
        if env := ofed_env(platform):
            spec["ofedDriver"]["env"] = env
    att = f.attachment_row
    if att is not None:
        match att.device_plugin:
            case "rdma-shared":
                config: dict[str, Any] = {
                    "configList": [
                        {
                            "resourceName": r.resource_name,
                            "rdmaHcaMax": 63,
                            "selectors": {"ifNames": [r.host_interface]},
                        }
                        for r in rails
                    ]
                }
                spec["rdmaSharedDevicePlugin"] = {
                    **_image("k8s-rdma-shared-dev-plugin", tag, platform.mirrors),
                    "config": json.dumps(config, indent=2),
                }
            case "hostdevice":
                config = {
                    "resourceList": [
                        {
                            "resourcePrefix": att.resource_prefix,
                            "resourceName": r.resource_name,
                            "selectors": {"vendors": ["15b3"], "isRdma": True, "pfNames": [r.host_interface]},
                        }
                        for r in rails
                    ]
                }
                spec["sriovDevicePlugin"] = {
                    **_image("sriov-network-device-plugin", tag, platform.mirrors),
                    "config": json.dumps(config, indent=2),
                }
            case "sriov":  # the SR-IOV operator (chart values) runs its own device plugin
                pass
            case "dra":  # dranet publishes the NICs (components/platform/dra.py): the policy keeps the driver only
                pass
            case other:
                assert_never(other)
    # Multus, the CNI plugins and NV-IPAM only where pods get a network per rail: `hostnetwork` pods are on the
    # node's interfaces and `rdma-only` pods need no address on the rail (both optional in the NicClusterPolicy,
    # network-operator@v26.4.1 api/v1alpha1/nicclusterpolicy_types.go).
    if f.secondary_network:
        secondary: dict = {
            "cniPlugins": _image("plugins", tag, platform.mirrors),
            "multus": _image("multus-cni", tag, platform.mirrors),
        }
        if networks.cni(f) == "ipoib":
            secondary["ipoib"] = _image("ipoib-cni", tag, platform.mirrors)
        spec["secondaryNetwork"] = secondary
        # enableWebhook false is the zero value, pinned: the nv-ipam webhook needs cert-manager, which fastpath
        # does not install.
        spec["nvIpam"] = {**_image("nvidia-k8s-ipam", tag, platform.mirrors), "enableWebhook": False}
    if platform.gpu.taint_key != k8s.DEFAULT_GPU_TAINT or platform.health.enabled:
        # With node health, the operands also tolerate the quarantine taint (k8s.QUARANTINE_TAINT says why).
        spec["tolerations"] = [
            t
            for t in k8s.operand_tolerations(platform.gpu.taint_key, platform.health.enabled)
            if t["key"] != k8s.DEFAULT_GPU_TAINT
        ]
    # Every operand DaemonSet only on GPU nodes (network-operator@v26.4.1: each manifests/state-*/ DaemonSet
    # template renders `.NodeAffinity` beside its own nodeSelector). Multus, the CNI plugins and nv-ipam's node
    # agent otherwise run on every node, and the policy is `ready` only when every operand DaemonSet is available
    # on all the nodes it selects (pkg/state/state_skel.go isDaemonSetReady): one NotReady CPU node, or a failed
    # pull there, would hold every `pulumi up`. The GPU Operator's NFD labels GPU nodes at once (PCI class 0302,
    # vendor 10de), before the driver and GPU feature discovery: the label is there when the policy is applied.
    # Leaving a CPU node, Multus (thin, `--cleanup-config-on-exit`: manifests/state-multus-cni/0050-multus-ds.yml)
    # removes its CNI config there, so that node's pods keep the cluster's own CNI.
    spec["nodeAffinity"] = {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": k8s.NFD_GPU_LABEL, "operator": "In", "values": ["true"]}]}
            ]
        }
    }
    if (system := platform.nodes.system) is not None and "nvIpam" in spec:
        # nv-ipam's controller is the policy's one Deployment: placed by the policy, not by Helm values
        # (network-operator@v26.4.1:api/v1alpha1/nicclusterpolicy_types.go DeploymentNodeAffinity and
        # DeploymentTolerations; the operator adds its own GPU and control-plane tolerations to these).
        terms = [{"key": k, "operator": "In", "values": [v]} for k, v in sorted(system.node_selector.items())]
        spec["deploymentNodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": terms}]}
        }
        if system.taints:
            spec["deploymentTolerations"] = system.tolerations()
    timeout = READY_TIMEOUT_DOCA if "ofedDriver" in spec else READY_TIMEOUT
    return {
        "apiVersion": "mellanox.com/v1alpha1",
        "kind": "NicClusterPolicy",
        "metadata": k8s.meta(
            POLICY_NAME,
            platform.cluster,
            COMPONENT,
            annotations={WAIT_FOR: "jsonpath={.status.state}=ready", TIMEOUT_SECONDS: str(timeout)},
        ),
        "spec": spec,
    }


def ip_pools(platform: PlatformConfig) -> list[dict]:
    """One NV-IPAM IPPool per rail, in the operator's namespace (the only one nv-ipam watches), for the GPU
    nodes only. Each node gets a block of `addressing.block_size` addresses (what it can attach at once, times
    2); the rest of the subnet stays free for nodes that join or replace others. nv-ipam gives every matching
    Node a block and frees it only when the Node object is deleted or stops matching
    (Mellanox/nvidia-k8s-ipam@network-operator-v26.4.1:pkg/ipam-controller/controllers/ippool/ippool.go
    `Reconcile`), so splitting the subnet evenly across today's nodes would leave a new node without a block
    and its pods in ContainerCreating. PlatformConfig refuses a subnet too small for nodes.count plus spares."""
    out: list[dict] = []
    f = platform.fabric
    if not f.secondary_network:
        return out
    block = addressing.block_size(f.attachment, f.vfs_per_pf, platform.gpu.per_node)
    for r, rc in zip(fab.rails(f), f.rails, strict=True):
        out.append(
            {
                "apiVersion": "nv-ipam.nvidia.com/v1alpha1",
                "kind": "IPPool",
                "metadata": k8s.meta(r.name, platform.cluster, COMPONENT, namespace=NAMESPACE),
                "spec": {
                    "subnet": str(rc.subnet),
                    "perNodeBlockSize": block,
                    "nodeSelector": gpu_node_selector_term(platform),
                },
            }
        )
    return out


def gpu_node_selector_term(platform: PlatformConfig) -> dict:
    return {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": k8s.GPU_PRODUCT_LABEL, "operator": "In", "values": [platform.gpu.product]}]}
        ]
    }


@dataclass
class NetworkOperatorArgs:
    platform: PlatformConfig


class NetworkOperator(pulumi.ComponentResource):
    """Installs the NVIDIA Network Operator (chart nvidia/network-operator), the `nic-cluster-policy`
    NicClusterPolicy and one NV-IPAM IPPool per rail.

    Needs: Mellanox/NVIDIA NICs on the GPU nodes; fabric.kind infiniband or roce.
    Ordering: the NicClusterPolicy waits for the release (its CRD comes with the chart); the IPPools wait for
    the NicClusterPolicy to report ready, because their CRD is installed by the operator when it reconciles
    `spec.nvIpam`. No ordering against the GPU Operator: see `values`.

    Example:
        NetworkOperator("net", NetworkOperatorArgs(platform=cfg.platform), opts=pulumi.ResourceOptions(parent=p))
    """

    def __init__(self, name: str, args: NetworkOperatorArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("fastpath:platform:NetworkOperator", name, None, opts)
        p = args.platform
        self.namespace, self.release = k8s.operator_install(
            self,
            p.cluster,
            COMPONENT,
            NAMESPACE,
            "privileged",
            "DOCA driver, device plugins and CNI DaemonSets need host network, host paths and privileges",
            "network-operator",
            *mirrors.chart_source(versions.NETWORK_OPERATOR_CHART, versions.NETWORK_OPERATOR_REPO, p.mirrors),
            p.versions.network_operator,
            values(p),
        )
        self.policy = k8s.apply(nic_cluster_policy(p), pulumi.ResourceOptions(parent=self, depends_on=[self.release]))
        self.pools = [k8s.apply(m, pulumi.ResourceOptions(parent=self, depends_on=[self.policy])) for m in ip_pools(p)]
        self.register_outputs({"namespace": NAMESPACE, "policy": POLICY_NAME})
