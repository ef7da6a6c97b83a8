"""Secondary networks for the `shared` and `hostdevice` attachments: one NetworkAttachmentDefinition per rail
in every training namespace."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal, assert_never

import pulumi

from components import k8s
from components.fabric import wiring as fab
from components.model.config import FabricConfig, PlatformConfig

COMPONENT = "networks"
RESOURCE_ANNOTATION = "k8s.v1.cni.cncf.io/resourceName"

Cni = Literal["host-device", "ipoib", "macvlan"]


def cni(f: FabricConfig) -> Cni | None:
    """The CNI plugin of fastpath's NetworkAttachmentDefinitions on this fabric, or None where it makes none
    (`sriov`'s are the SR-IOV operator's; `hostnetwork` and `rdma-only` pods get no network per rail)."""
    match f.attachment:
        case "hostdevice":  # the PF's own netdev moves into the pod
            return "host-device"
        case "shared":  # a child interface of the host's port; InfiniBand carries no Ethernet frames for macvlan
            return "ipoib" if f.kind_row.ipoib else "macvlan"
        case "sriov" | "hostnetwork" | "rdma-only" | "dra" | None:
            return None
        case other:
            assert_never(other)


def cni_config(platform: PlatformConfig, rail: fab.Rail) -> dict:
    f = platform.fabric
    conf: dict = {"cniVersion": "0.3.1", "name": rail.network}
    match cni(f):
        case "host-device":
            conf["type"] = "host-device"
        case "ipoib":
            conf.update({"type": "ipoib", "master": rail.host_interface})
        case "macvlan":
            conf.update({"type": "macvlan", "master": rail.host_interface, "mode": "bridge"})
        case None:
            raise ValueError(f"fabric.attachment {f.attachment!r} has no NetworkAttachmentDefinition of fastpath's")
        case other:
            assert_never(other)
    if f.mtu and conf["type"] != "host-device":
        conf["mtu"] = f.mtu
    # NV-IPAM hands out addresses cluster-wide from the rail's IPPool. Never host-local on a network that spans
    # nodes: each node's host-local would hand out the same addresses.
    conf["ipam"] = {"type": "nv-ipam", "poolName": rail.name}
    return conf


def attachments(platform: PlatformConfig) -> list[dict]:
    out = []
    for ns in platform.training_namespaces:
        for r in fab.rails(platform.fabric):
            assert r.network is not None and r.resource is not None, (
                "SecondaryNetworks is built only for attachments with a network and a counted resource"
            )
            out.append(
                {
                    "apiVersion": "k8s.cni.cncf.io/v1",
                    "kind": "NetworkAttachmentDefinition",
                    "metadata": k8s.meta(
                        r.network,
                        platform.cluster,
                        COMPONENT,
                        namespace=ns,
                        annotations={RESOURCE_ANNOTATION: r.resource},
                    ),
                    "spec": {"config": json.dumps(cni_config(platform, r), separators=(",", ":"))},
                }
            )
    return out


@dataclass
class SecondaryNetworksArgs:
    platform: PlatformConfig
    depends_on: list  # the NicClusterPolicy (Multus, CNI plugins, NV-IPAM) and the training namespaces


class SecondaryNetworks(pulumi.ComponentResource):
    """One NetworkAttachmentDefinition per rail per training namespace: macvlan (RoCE) or ipoib (InfiniBand)
    for `shared`, host-device for `hostdevice`; each names its device-plugin resource in the
    `k8s.v1.cni.cncf.io/resourceName` annotation and takes addresses from NV-IPAM.

    Needs: Multus and NV-IPAM (the NicClusterPolicy) and the namespaces.

    Example:
        SecondaryNetworks("networks", SecondaryNetworksArgs(platform=cfg.platform, depends_on=[net.policy]))
    """

    def __init__(self, name: str, args: SecondaryNetworksArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("fastpath:platform:SecondaryNetworks", name, None, opts)
        after = pulumi.ResourceOptions(parent=self, depends_on=args.depends_on)
        self.attachments = [k8s.apply(m, after) for m in attachments(args.platform)]
        self.register_outputs({"count": len(self.attachments)})
