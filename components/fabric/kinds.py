"""The fabric kinds and rail attachments fastpath knows: one row each, and nothing else imports a kind by string.

A kind is the inter-node fabric (what NCCL's traffic rides on); an attachment is how a rail's NIC reaches a
training pod. Code that differs per kind or attachment dispatches with `match` and `assert_never`, so a new row
fails type checking (`make typecheck`) everywhere a case is missing; what does not differ is read off the row.
A comparison of a kind or attachment to a string anywhere else fails tests/test_kinds_in_one_place.py.
Adding a kind or an attachment is one row here plus its real differences (docs/architecture.md).

Pure data: no Pulumi, no config imports (config validates against these rows).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, get_args

FabricKind = Literal["infiniband", "roce", "efa", "tcp"]
Attachment = Literal["sriov", "shared", "hostdevice", "hostnetwork", "rdma-only", "dra"]
# The NCCL network transport a multi-node job should run on, as tools.ncclcheck names it.
Transport = Literal["ib", "roce", "efa", "socket"]
# Who hands a pod a rail's RDMA device: a device plugin, or Dynamic Resource Allocation (dranet, claims).
DevicePlugin = Literal["sriov", "rdma-shared", "hostdevice", "dra"]

TRANSPORTS: tuple[str, ...] = get_args(Transport)
# What NCCL runs on besides a kind's network, as tools.ncclcheck names it: one node (P2P and SHM only), and a
# multi-node run inside one NVLink clique (every connection P2P/MNNVL: a pod with its job's IMEX channel).
LOCAL = "local"
MNNVL = "mnnvl"

# The EFA device plugin's resource, one per EFA device (which are not rails).
EFA_RESOURCE = "vpc.amazonaws.com/efa"


@dataclass(frozen=True)
class Kind:
    name: FabricKind
    transport: Transport  # what ncclcheck --expect says for a multi-node run
    rdma: bool  # pods pin memory (IPC_LOCK), get RDMA devices, and run the preflight
    rails: bool  # the NICs are described by fabric.rails and served by the Network Operator
    attachments: tuple[Attachment, ...]  # allowed fabric.attachment values (empty: the key is not allowed)
    nccl_net: str | None  # NCCL_NET by default: NCCL fails at init instead of falling back to sockets
    ib_env: bool  # NCCL's IB verbs transport runs: NCCL_IB_HCA and friends apply
    link_layer: str | None  # /sys/class/infiniband/<hca>/ports/1/link_layer the preflight expects
    # A port's GIDs are its netdev's IP addresses (RoCEv2): NCCL picks a GID by address (NCCL_IB_ADDR_RANGE, or
    # fabric.gidIndex), so every rail needs a subnet and a pod an address on the rail (a network attachment or the
    # host's netdev), which the preflight looks for in the HCA's GID table. InfiniBand routes by LID and GUID.
    gid_from_address: bool
    # The device plugin resource of a node's fabric devices when they are not rails: a pod requests its GPUs'
    # share of fabric.efaDevicesPerNode, which the kind then needs (and no other kind takes).
    node_resource: str | None
    # NET module names only this kind's own NCCL net plugin registers (`Using network <name>`, `via NET/<name>/..`):
    # tools.ncclcheck tells the kind's transport by them. Empty where NCCL's own IB (IB or RoCE by the link layer), a
    # shared plugin (HPC-X IBext) or aws-ofi-nccl (told apart by its provider) drives the kind.
    net_modules: tuple[str, ...]

    @property
    def ipoib(self) -> bool:
        """The rails are InfiniBand links, which carry IP only as IPoIB: a pod's own interface on a rail is an IPoIB
        child of a shared port or an InfiniBand VF (SR-IOV linkType ib), never a macvlan or an Ethernet VF."""
        return self.link_layer == "InfiniBand"


@dataclass(frozen=True)
class AttachmentKind:
    name: Attachment
    device_plugin: DevicePlugin
    resource_prefix: str  # the device plugin's resource prefix
    resource_stem: str  # a rail's resource is <prefix>/<stem>_<rail>
    secondary_network: bool  # a NetworkAttachmentDefinition per rail, Multus, NV-IPAM, a Multus annotation
    host_network: bool  # pods share the node's network namespace
    whole_node: str | None  # why a pod with part of a node's GPUs cannot be wired, or None
    host_hca_names: bool  # pods see the host's HCA names (NCCL_IB_HCA lists them); False: VFs are renamed
    interface_role: str  # what fabric.rails[].interface names on the host

    @property
    def rail_address(self) -> bool:
        """The pod has an address on the rail: a network of its own, the host's netdev, or (DRA) the rail's netdev
        moved into it with its addresses."""
        return self.secondary_network or self.host_network or self.claims

    @property
    def claims(self) -> bool:
        """Pods claim their GPUs and rail NICs through Dynamic Resource Allocation (components/fabric/dra.py)."""
        return self.device_plugin == "dra"

    @property
    def sriov_operator(self) -> bool:
        """The SR-IOV Network Operator creates the rail's VFs and runs their device plugin: its chart is on, its node
        policies drain nodes (fabric.sriovMaxUnavailable), and a rail's PF may be named by PCI address
        (fabric.rails[].rootDevices) instead of by interface."""
        return self.device_plugin == "sriov"


KINDS: Mapping[FabricKind, Kind] = {
    "infiniband": Kind(
        name="infiniband",
        transport="ib",
        rdma=True,
        rails=True,
        attachments=("sriov", "shared", "hostdevice", "hostnetwork", "rdma-only", "dra"),
        nccl_net="IB",
        ib_env=True,
        link_layer="InfiniBand",
        gid_from_address=False,
        node_resource=None,
        net_modules=(),
    ),
    "roce": Kind(
        name="roce",
        transport="roce",
        rdma=True,
        rails=True,
        # rdma-only is not offered: with gid_from_address a pod needs an address on the rail, and rdma-only gives
        # it neither a network attachment nor the host's netdevs.
        attachments=("sriov", "shared", "hostdevice", "hostnetwork", "dra"),
        nccl_net="IB",
        ib_env=True,
        link_layer="Ethernet",
        gid_from_address=True,
        node_resource=None,
        net_modules=(),
    ),
    "efa": Kind(
        name="efa",
        transport="efa",
        rdma=True,
        rails=False,
        attachments=(),
        nccl_net="Libfabric",
        ib_env=False,
        link_layer=None,
        gid_from_address=False,
        node_resource=EFA_RESOURCE,
        net_modules=(),
    ),
    "tcp": Kind(
        name="tcp",
        transport="socket",
        rdma=False,
        rails=False,
        attachments=(),
        nccl_net=None,
        ib_env=False,
        link_layer=None,
        gid_from_address=False,
        node_resource=None,
        net_modules=(),
    ),
}

_PARTIAL_PF = (
    "each rail's PF goes to one pod whole, so a partial-node pod would get NICs that are not next to its "
    "GPUs (or none) and a second pod on the node no rail at all"
)
_PARTIAL_HOST = (
    "pods on the host network share the node's ports and interfaces, so a second pod on the node "
    "would collide with the first (the container ports become host ports)"
)

ATTACHMENTS: Mapping[Attachment, AttachmentKind] = {
    "sriov": AttachmentKind(
        name="sriov",
        device_plugin="sriov",
        resource_prefix="nvidia.com",
        resource_stem="sriov",
        secondary_network=True,
        host_network=False,
        whole_node=None,
        host_hca_names=False,
        interface_role="the PF name (nicSelector.pfNames)",
    ),
    "shared": AttachmentKind(
        name="shared",
        device_plugin="rdma-shared",
        resource_prefix="rdma",
        resource_stem="shared",
        secondary_network=True,
        host_network=False,
        whole_node=None,
        host_hca_names=True,
        interface_role="the macvlan/IPoIB master",
    ),
    "hostdevice": AttachmentKind(
        name="hostdevice",
        device_plugin="hostdevice",
        resource_prefix="nvidia.com",
        resource_stem="hostdev",
        secondary_network=True,
        host_network=False,
        whole_node=_PARTIAL_PF,
        host_hca_names=True,
        interface_role="the PF whose devices the device plugin hands out",
    ),
    "hostnetwork": AttachmentKind(
        name="hostnetwork",
        device_plugin="rdma-shared",
        resource_prefix="rdma",
        resource_stem="shared",
        secondary_network=False,
        host_network=True,
        whole_node=_PARTIAL_HOST,
        host_hca_names=True,
        interface_role="the rail's netdev (the RDMA shared device plugin's ifNames selector)",
    ),
    "rdma-only": AttachmentKind(
        name="rdma-only",
        device_plugin="rdma-shared",
        resource_prefix="rdma",
        resource_stem="shared",
        secondary_network=False,
        host_network=False,
        whole_node=None,
        host_hca_names=True,
        interface_role="the rail's netdev (the RDMA shared device plugin's ifNames selector)",
    ),
    # Dynamic Resource Allocation (Kubernetes 1.34+): each pod claims its GPUs (NVIDIA's DRA driver) and, for each,
    # the rail NIC on the same PCIe root (kubernetes-sigs/dranet), which dranet moves into the pod with its
    # addresses and RDMA devices: no counted resource, no Multus, no VF (components/fabric/dra.py).
    "dra": AttachmentKind(
        name="dra",
        device_plugin="dra",
        resource_prefix="",
        resource_stem="",
        secondary_network=False,
        host_network=False,
        whole_node=None,
        host_hca_names=True,
        interface_role="the rail's netdev (dranet's dra.net/ifName, which the rail DeviceClass selects)",
    ),
}
