"""A pod's place on the rails' secondary networks: the interface Multus gives it and the address block NV-IPAM
gives its node. Pure arithmetic on plain values, no models: the schema checks rail subnets and
NCCL_SOCKET_IFNAME with it (components/model/config.py), the fabric model names a pod's interfaces
(components/fabric/wiring.py) and the network operator sizes its IPPools
(components/platform/network_operator.py).
"""

from __future__ import annotations

import ipaddress
from typing import assert_never

from components.fabric import kinds

# nv-ipam never hands out a subnet's network or broadcast address.
RESERVED_ADDRESSES = 2


def block_size(attachment: kinds.Attachment | None, vfs_per_pf: int, gpus_per_node: int) -> int:
    """NV-IPAM perNodeBlockSize of every rail pool: the most pods one node can attach to a rail at once
    (`sriov`: fabric.vfsPerPf VFs; `shared`: one pod per GPU; `hostdevice`: the PF goes to one pod), times
    2, because a replacement pod takes its address while the pod it replaces may still be terminating."""
    per_node: int
    match attachment:
        case "sriov":
            per_node = vfs_per_pf
        case "shared":
            per_node = gpus_per_node
        case "hostdevice":
            per_node = 1
        case "hostnetwork" | "rdma-only" | "dra" | None:  # no secondary network, no IPAM (dranet keeps the host's)
            per_node = 0
        case other:
            assert_never(other)
    return 2 * per_node


def blocks_needed(nodes: int) -> int:
    """Blocks each rail subnet must hold: one per GPU node plus spares (a quarter of the nodes, at least 2)
    for nodes that join or replace others before the old Node object is deleted."""
    return nodes + max(2, -(-nodes // 4))


def usable_addresses(subnet: ipaddress.IPv4Network) -> int:
    return subnet.num_addresses - RESERVED_ADDRESSES


def smallest_prefix(addresses: int) -> int:
    """The longest prefix of a subnet that has `addresses` usable addresses."""
    return 32 - (addresses + RESERVED_ADDRESSES - 1).bit_length()


def secondary_interface(position: int) -> str:
    """Multus names a pod's secondary interfaces net1..netN in the order of its networks annotation."""
    return f"net{position + 1}"


def pod_interfaces(primary: str, attachment: kinds.Attachment | None, rails: int) -> list[str]:
    """A training pod's interfaces: its primary and one per rail on a secondary network, in the order Multus
    names them. On the host network the pod has the node's interfaces; the primary is the one that matters to
    NCCL bootstrap and gloo."""
    secondary = rails if attachment is not None and kinds.ATTACHMENTS[attachment].secondary_network else 0
    return [primary, *(secondary_interface(i) for i in range(secondary))]
