"""SR-IOV rails: the GPU nodes' pool config, one SriovNetworkNodePolicy per rail and one SriovIBNetwork /
SriovNetwork per rail in every training namespace.

Upstream behaviour this relies on (the SR-IOV operator bundled with network-operator 26.4.1 is the
Mellanox/sriov-network-operator@network-operator-26.4.x build; upstream.lock.yaml pins its CRDs, crds/sriovnetwork.*):
- A network CR may live in the namespace its pods run in, with `networkNamespace` empty: the operator then
  creates the NetworkAttachmentDefinition there, named like the CR (controllers/generic_network_controller.go;
  the network reconcilers run on a manager that watches every namespace, main.go `mgrGlobal`). So each training
  namespace gets its own CR with the same name, and pods everywhere reference the same network name.
- `rdmaMode: exclusive` (SriovNetworkPoolConfig) binds every RDMA device to one network namespace
  (kernel `ib_core netns_mode=0`): a pod sees only its own VFs' RDMA devices, which is what makes NCCL_IB_HCA
  `mlx5` (a prefix) select exactly the pod's VFs (components/fabric/wiring.py). The `rdma` meta plugin moves a VF's
  RDMA device into the pod; without it the pod would have the netdev but no RDMA device.
- `maxUnavailable` unset in a pool means every node of the pool drains at once (api/v1/helper.go
  `SriovNetworkPoolConfig.MaxUnavailable`): fastpath always sets it (fabric.sriovMaxUnavailable).
- The operator's config daemon and device plugin tolerate every taint (bindata/manifests/daemon/daemonset.yaml,
  bindata/manifests/plugins/sriov-device-plugin.yaml), so a custom GPU taint needs nothing here.
- No SriovOperatorConfig of fastpath's own: the chart creates the one the operator reads (`default`,
  network_operator.values); a second writer would fight it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi

from components import k8s
from components.fabric import wiring as fab
from components.model.config import PlatformConfig
from components.platform.network_operator import NAMESPACE as OPERATOR_NAMESPACE

COMPONENT = "sriov"
POOL_NAME = "gpu-nodes"
RDMA_META_PLUGIN = json.dumps({"type": "rdma"}, separators=(",", ":"))


def ipam(rail: fab.Rail) -> str:
    # NV-IPAM, cluster-wide: host-local would hand every node the same addresses.
    return json.dumps({"type": "nv-ipam", "poolName": rail.name}, separators=(",", ":"))


def pool_config(platform: PlatformConfig) -> dict:
    """The GPU nodes as one SriovNetworkPoolConfig: RDMA exclusive mode and how many nodes may drain at once.

    Changing rdmaMode reboots every node of the pool (kernel argument), `maxUnavailable` at a time."""
    return {
        "apiVersion": "sriovnetwork.openshift.io/v1",
        "kind": "SriovNetworkPoolConfig",
        "metadata": k8s.meta(POOL_NAME, platform.cluster, COMPONENT, namespace=OPERATOR_NAMESPACE),
        "spec": {
            "nodeSelector": {"matchLabels": {k8s.GPU_PRODUCT_LABEL: platform.gpu.product}},
            "rdmaMode": "exclusive",
            "maxUnavailable": platform.fabric.sriov_max_unavailable,
        },
    }


def node_policies(platform: PlatformConfig) -> list[dict]:
    """One SriovNetworkNodePolicy per rail: numVfs RDMA VFs on the rail's PF, chosen by name (pfNames) or PCI
    address (rootDevices). On Mellanox NICs the first policy (or a numVfs change) rewrites the firmware and
    reboots the node (Mellanox/sriov-network-operator@network-operator-26.4.x:pkg/plugins/mellanox/
    mellanox_plugin.go)."""
    f = platform.fabric
    out = []
    for r, rc in zip(fab.rails(f), f.rails, strict=True):
        nic: dict = {"vendor": "15b3"}
        if rc.root_devices is not None:
            nic["rootDevices"] = list(rc.root_devices)
        else:
            nic["pfNames"] = [r.host_interface]
        spec = {
            "resourceName": r.resource_name,
            "nodeSelector": {k8s.GPU_PRODUCT_LABEL: platform.gpu.product},
            "nicSelector": nic,
            "numVfs": f.vfs_per_pf,
            "isRdma": True,
            "linkType": "ib" if f.kind_row.ipoib else "eth",
            "deviceType": "netdevice",
            "priority": 90,
        }
        if f.mtu:
            spec["mtu"] = f.mtu
        out.append(
            {
                "apiVersion": "sriovnetwork.openshift.io/v1",
                "kind": "SriovNetworkNodePolicy",
                "metadata": k8s.meta(r.name, platform.cluster, COMPONENT, namespace=OPERATOR_NAMESPACE),
                "spec": spec,
            }
        )
    return out


def networks(platform: PlatformConfig) -> list[dict]:
    """One network CR per rail in every training namespace, named `fabric.Rail.network`: the operator renders
    each into a NetworkAttachmentDefinition of the same name beside it, the name pods reference."""
    f = platform.fabric
    kind = "SriovIBNetwork" if f.kind_row.ipoib else "SriovNetwork"
    return [
        {
            "apiVersion": "sriovnetwork.openshift.io/v1",
            "kind": kind,
            "metadata": k8s.meta(r.network or r.name, platform.cluster, COMPONENT, namespace=ns),
            "spec": {
                "resourceName": r.resource_name,
                "ipam": ipam(r),
                "linkState": "enable",
                "metaPlugins": RDMA_META_PLUGIN,
            },
        }
        for ns in platform.training_namespaces
        for r in fab.rails(f)
    ]


@dataclass
class SriovNetworksArgs:
    platform: PlatformConfig
    operator: pulumi.Resource  # the network-operator release that installs the SR-IOV CRDs
    policy: pulumi.Resource | None = None  # the NicClusterPolicy (Multus, NV-IPAM; awaited until ready)
    namespaces: list = field(default_factory=list)  # the training Namespace resources the networks live in


LEFT_ON_DESTROY = (
    "SriovNetworkPoolConfig and SriovNetworkNodePolicy objects in nvidia-network-operator (deleted with the "
    "operator, so no drain starts): the NICs keep their VFs and the nodes stay schedulable; delete them with kubectl "
    "before a reinstall that should start from no VFs"
)


class SriovNetworks(pulumi.ComponentResource):
    """Exposes each rail to pods as SR-IOV VFs: the GPU nodes' SriovNetworkPoolConfig (RDMA exclusive mode,
    drain parallelism), a SriovNetworkNodePolicy per rail (pfNames or rootDevices, numVfs, isRdma, linkType,
    nodeSelector on the GPU product) and, in every training namespace, a SriovIBNetwork (InfiniBand) or
    SriovNetwork (RoCE) per rail with NV-IPAM and the rdma meta plugin. Resources are `nvidia.com/sriov_<rail>`.

    Needs: the network-operator release with sriovNetworkOperator.enabled (NetworkOperator sets it); the
    training namespaces. First apply: firmware rewrite and a reboot of every GPU node, maxUnavailable at a time.

    Example:
        SriovNetworks("sriov", SriovNetworksArgs(platform=cfg.platform, operator=net.release, namespaces=nss))
    """

    def __init__(self, name: str, args: SriovNetworksArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("fastpath:platform:SriovNetworks", name, None, opts)
        # The NicClusterPolicy first: it waits until every NIC DaemonSet is ready, which the node reboots the
        # policies cause would keep it from reaching (network-operator@v26.4.1 state_skel.go isDaemonSetReady).
        # The pool before the policies: a config daemon that saw a policy first would drain with the default of
        # one node and reboot again for the exclusive RDMA mode.
        policy = [args.policy] if args.policy is not None else []
        # Deleted with the operator's release, not before it: on `pulumi destroy` a deleted policy would start a
        # drain (its VFs go) that the release's uninstall then cuts short, leaving nodes cordoned
        # (Mellanox/sriov-network-operator@network-operator-v26.4.0-beta.7: the drain controller uncordons only
        # when it completes). Left in place, with no operator, they change nothing: nodes stay schedulable and
        # keep their VFs (LEFT_ON_DESTROY). Removing a rail in an update still deletes its policy and drains.
        with_release = pulumi.ResourceOptions(deleted_with=args.operator)
        self.pool = k8s.apply(
            pool_config(args.platform),
            pulumi.ResourceOptions.merge(
                with_release, pulumi.ResourceOptions(parent=self, depends_on=[args.operator, *policy])
            ),
        )
        after_pool = pulumi.ResourceOptions.merge(
            with_release, pulumi.ResourceOptions(parent=self, depends_on=[args.operator, *policy, self.pool])
        )
        self.policies = [k8s.apply(m, after_pool) for m in node_policies(args.platform)]
        in_namespaces = pulumi.ResourceOptions(parent=self, depends_on=[args.operator, *policy, *args.namespaces])
        self.networks = [k8s.apply(m, in_namespaces) for m in networks(args.platform)]
        self.register_outputs({"networks": [r.network for r in fab.rails(args.platform.fabric)]})
