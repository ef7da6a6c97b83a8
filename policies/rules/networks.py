"""The cluster's network objects: secondary networks hand out addresses cluster-wide, and SR-IOV pools drain a
few nodes at a time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from policies.engine import MANDATORY, Context, Finding, rule
from policies.pods import dict_or_empty


def _ipam_types(conf: dict) -> list[str]:
    out = []
    plugins = conf.get("plugins")
    for plugin in [conf, *(plugins if isinstance(plugins, list) else [])]:
        ipam = plugin.get("ipam") if isinstance(plugin, dict) else None
        if isinstance(ipam, dict) and ipam.get("type"):
            out.append(ipam["type"])
    return out


# Operator CRs that render a NetworkAttachmentDefinition from `spec.ipam`, a JSON object in a string:
# Mellanox/sriov-network-operator@network-operator-26.4.x:api/v1/{sriovnetwork,sriovibnetwork,ovsnetwork}_types.go
# and Mellanox/network-operator@v26.4.1:api/v1alpha1/{macvlannetwork,hostdevicenetwork,ipoibnetwork}_types.go.
IPAM_FIELD_KINDS = frozenset(
    {"SriovNetwork", "SriovIBNetwork", "OVSNetwork", "MacvlanNetwork", "HostDeviceNetwork", "IPoIBNetwork"}
)
HOST_LOCAL = (
    "IPAM host-local on a network pods use across nodes: every node hands out the same addresses "
    "(duplicate IPs, silent NCCL hangs); use cluster-wide IPAM (nv-ipam or whereabouts)"
)


def _json_object(raw: object) -> dict | None:
    try:
        conf = json.loads(raw) if isinstance(raw, str) else None
    except (json.JSONDecodeError, RecursionError):
        conf = None
    return conf if isinstance(conf, dict) else None


@rule(
    "nad-cluster-ipam",
    "Secondary networks use cluster-wide IPAM",
    level=MANDATORY,
    description="A NetworkAttachmentDefinition's IPAM, or the `spec.ipam` of an operator network CR that renders one "
    "(SriovNetwork, SriovIBNetwork, OVSNetwork, MacvlanNetwork, HostDeviceNetwork, IPoIBNetwork), is not "
    "host-local (each node would reuse the same addresses).",
    remediation="use cluster-wide IPAM (nv-ipam or whereabouts)",
    kinds={"NetworkAttachmentDefinition", *IPAM_FIELD_KINDS},
    pods=False,
)
def nad_cluster_ipam(ctx: Context) -> Iterator[Finding]:
    kind = ctx.obj.get("kind")
    spec = dict_or_empty(ctx.obj.get("spec"))
    if kind in IPAM_FIELD_KINDS:
        raw = spec.get("ipam")
        if not raw:
            return  # no IPAM: addresses are the application's business (or none, as for RDMA-only VFs)
        ipam = _json_object(raw)
        if ipam is None:
            yield Finding(f"spec.ipam is not a JSON object in a string: the operator cannot render {kind}'s network")
        elif ipam.get("type") == "host-local":
            yield Finding(HOST_LOCAL)
        return
    if kind != "NetworkAttachmentDefinition":
        return
    conf = _json_object(spec.get("config") or "{}")
    if conf is None:
        yield Finding("spec.config is not a JSON object in a string: Multus cannot attach this network")
        return
    if "host-local" in _ipam_types(conf):
        yield Finding(HOST_LOCAL)


@rule(
    "sriov-pool-drain",
    "SR-IOV pools drain a few nodes at a time",
    level=MANDATORY,
    description="A SriovNetworkPoolConfig sets maxUnavailable below 100% (unset or 100%: every node of the pool "
    "drains and reboots at once when SR-IOV settings change).",
    remediation="set spec.maxUnavailable (a count or a percentage)",
    kinds={"SriovNetworkPoolConfig"},
    pods=False,
)
def sriov_pool_drain(ctx: Context) -> Iterator[Finding]:
    """k8snetworkplumbingwg/sriov-network-operator (the build network-operator v26.4.1 bundles): a node in a
    SriovNetworkPoolConfig whose maxUnavailable is unset may drain at any time, so every node of the pool drains
    and reboots at once when VFs, firmware or the RDMA mode change (the first apply included)."""
    if ctx.obj.get("kind") != "SriovNetworkPoolConfig":
        return
    pace = dict_or_empty(ctx.obj.get("spec")).get("maxUnavailable")
    if isinstance(pace, str) and pace.strip().endswith("%") and pace.strip()[:-1].isdigit():
        if int(pace.strip()[:-1]) >= 100:
            yield Finding(
                f"spec.maxUnavailable is {pace}: every node of this pool may drain and reboot at once when the SR-IOV "
                "configuration changes, as if it were unset; set a count or a percentage that leaves the pool "
                "running (for example 10%)"
            )
        return
    if pace is None:
        yield Finding(
            "no spec.maxUnavailable: every node of this pool may drain and reboot at once when the SR-IOV "
            "configuration changes (firmware rewrite, numVfs, rdmaMode): the whole GPU pool goes down "
            "together; set maxUnavailable (a count or a percentage)"
        )
