"""Devices claimed through DRA, and NVLink domains: a claim of GPUs and RDMA NICs ties each NIC to its GPU's PCIe root,
and a pod that uses multi-node NVLink claims its ComputeDomain's IMEX channel.
"""

from __future__ import annotations

from collections.abc import Iterator

from components.fabric.dra import CLIQUE_LABEL
from policies import dra
from policies.engine import MANDATORY, Context, Finding, rule
from policies.pods import containers, dict_or_empty, dicts, rank_env, where
from policies.podspecs import PodTemplate

CLAIM_KINDS = frozenset({"ResourceClaimTemplate", "ResourceClaim"})
DRANET_MEASURED = (
    "dranet measured 11.35 vs 6.04 GB/s: kubernetes-sigs/dranet@v1.4.0:site/content/docs/user/aws-eks-efa.md"
)


def _names(requests: list[dra.Request]) -> str:
    shown = ", ".join(r.name for r in requests[:4])
    return shown + (f" and {len(requests) - 4} more" if len(requests) > 4 else "")


def _covers(constraint: dict, every: list[str]) -> tuple[list[str], bool]:
    """The request names a constraint covers (`gpus/two` counts for `gpus`), and whether it names them at all: a
    constraint without `requests` applies to every request of the claim (resource.k8s.io/v1
    DeviceConstraint.requests)."""
    named = constraint.get("requests")
    if not isinstance(named, list) or not named:
        return every, False
    return [n.split("/", 1)[0] for n in named if isinstance(n, str)], True


@rule(
    "dra-nic-alignment",
    "DRA claims tie each RDMA NIC to its GPU's PCIe root",
    level=MANDATORY,
    description="A ResourceClaimTemplate or ResourceClaim that requests GPUs (DeviceClass gpu.nvidia.com, or one "
    "selecting that driver) and RDMA NICs (a DeviceClass selecting dra.net or the DRA SR-IOV driver) ties every NIC "
    "request to a GPU request by a `matchAttribute: resource.kubernetes.io/pcieRoot` constraint whose `requests` "
    "name both, and no such constraint covers more than one GPU (a constraint without `requests` covers every device "
    "of the claim). A claim that takes the GPUs or the NICs with allocationMode All (a whole node), or takes as many "
    "NICs as its class and selectors name one by one (`ifName in [...]`: every rail), is exempt. "
    "Which class hands out NICs is read off the DeviceClasses among the objects checked (CrossGuard, which sees one "
    "resource at a time, knows only the drivers' own classes and request selectors).",
    remediation="request each GPU with its NIC (gpu-i, nic-i), each pair under a constraint {matchAttribute: "
    "resource.kubernetes.io/pcieRoot, requests: [gpu-i, nic-i]}, or take the whole node with allocationMode All",
    kinds=CLAIM_KINDS,
    pods=False,
)
def dra_nic_alignment(ctx: Context) -> Iterator[Finding]:
    """NCCL gives each GPU the NIC nearest it; a NIC allocated on another PCIe root than its GPU is reached through
    the CPU's root complex, at about half the bandwidth dranet measured for an aligned pair (DRANET_MEASURED). Both
    drivers publish resource.kubernetes.io/pcieRoot (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:cmd/gpu-kubelet-
    plugin/nvlib.go; kubernetes-sigs/dranet@v1.4.0:pkg/inventory/db.go), and only a matchAttribute constraint over
    a GPU request and a NIC request makes the scheduler pick them on one root. Such a constraint makes every device
    of the requests it covers share one value (kubernetes/dynamic-resource-allocation@v0.34.0:structured/internal/
    stable/allocator_stable.go matchAttributeConstraint), and without `requests` it covers the whole claim: on an
    HGX-class node, one GPU and one compute NIC per root, it then fits 1 GPU + 1 NIC and nothing more (restated in
    tests/dra_allocator_v134.py, shown in tests/test_dra_allocator_rules.py). Grace nodes (GB200/GB300) share no
    root between GPUs and NICs (docs/research/dra-nics-gpus-nvl72.md §0): a whole-node claim there takes all with
    allocationMode All, which is exempt. So is a NIC request whose count reaches the NICs its class and selectors name
    one by one (dranet's interface, RDMA device and PCI names are unique on a node): it holds every NIC it could get,
    and NCCL pairs each GPU with the nearest of them itself, as under All."""
    requests = dra.requests(dra.claim_devices(ctx.obj), ctx.claims)
    gpus = [r for r in requests if r.role == dra.GPU]
    nics = [r for r in requests if r.role == dra.NIC]
    if not gpus or not nics or any(r.mode == "All" for r in gpus) or any(r.takes_all for r in nics):
        return
    every = [r.name for r in requests]
    constraints = [
        c for c in dicts(dra.claim_devices(ctx.obj).get("constraints")) if c.get("matchAttribute") == dra.PCIE_ROOT
    ]
    if not constraints:
        yield Finding(
            f"requests GPUs ({_names(gpus)}) and RDMA NICs ({_names(nics)}) without a `matchAttribute: "
            f"{dra.PCIE_ROOT}` constraint: NICs not constrained to the GPUs' PCIe roots: NCCL pairs each GPU with a "
            f"NIC across the PCIe fabric ({DRANET_MEASURED}); request each GPU with its NIC (gpu-i, nic-i) under a "
            f"constraint {{matchAttribute: {dra.PCIE_ROOT}, requests: [gpu-i, nic-i]}}, or take the whole node with "
            "allocationMode All (on Grace nodes, GB200/GB300, no GPU shares a PCIe root with a NIC)"
        )
        return
    by_name = {r.name: r for r in requests}
    tied: set[str] = set()
    for constraint in constraints:
        covered, named = _covers(constraint, every)
        mine = [by_name[n] for n in dict.fromkeys(covered) if n in by_name]
        own_gpus = [r for r in mine if r.role == dra.GPU]
        if own_gpus:
            tied.update(r.name for r in mine if r.role == dra.NIC)
        devices = sum(r.count or 0 for r in own_gpus)
        if devices > 1:
            scope = f"requests {', '.join(r.name for r in mine)}" if named else "no `requests`: every request"
            nic_devices = sum(r.count or 0 for r in mine if r.role == dra.NIC)
            yield Finding(
                f"the pcieRoot constraint ({scope}) puts {devices} GPUs"
                f"{f' and {nic_devices} NICs' if nic_devices else ''} on one PCIe root: every device it covers "
                "must share one root, and an HGX-class node has one GPU and one compute NIC per root, so the claim "
                "fits 1 GPU + 1 NIC and never more; give each GPU its own request paired with one NIC request "
                f"under its own constraint {{matchAttribute: {dra.PCIE_ROOT}, requests: [gpu-i, nic-i]}}"
            )
    untied = [r for r in nics if r.name not in tied]
    if untied:
        yield Finding(
            f"NIC request{'s' if len(untied) > 1 else ''} {_names(untied)} {'are' if len(untied) > 1 else 'is'} "
            f"in no `matchAttribute: {dra.PCIE_ROOT}` constraint with a GPU request: NICs not constrained to the "
            f"GPUs' PCIe roots: NCCL pairs each GPU with a NIC across the PCIe fabric ({DRANET_MEASURED}); name "
            "each NIC request with its GPU request in one constraint's `requests`"
        )


# CLIQUE_LABEL: GPU Feature Discovery's (NVIDIA/k8s-device-plugin@v0.20.0:internal/lm/imex.go).
IMEX_CHANNELS = "/dev/nvidia-caps-imex-channels"
# What the device plugin asks the NVIDIA runtime for channels with (NVIDIA/k8s-device-plugin@v0.20.0:
# api/config/v1/imex.go ImexChannelEnvVar, set in internal/plugin/server.go).
IMEX_ENV = "NVIDIA_IMEX_CHANNELS"


def _placed_by_clique(t: PodTemplate) -> str | None:
    """How the pod is placed by NVLink clique, if it is: nodeSelector, node affinity, or pod affinity with topologyKey
    nvidia.com/gpu.clique (all pods of the job in one clique)."""
    spec = t.template["spec"]
    if CLIQUE_LABEL in spec["nodeSelector"]:
        return "nodeSelector"
    affinity = spec["affinity"]
    node = affinity["nodeAffinity"]
    required = dict_or_empty(node.get("requiredDuringSchedulingIgnoredDuringExecution"))
    terms = dicts(required.get("nodeSelectorTerms")) + [
        dict_or_empty(p.get("preference")) for p in dicts(node.get("preferredDuringSchedulingIgnoredDuringExecution"))
    ]
    if any(e.get("key") == CLIQUE_LABEL for term in terms for e in dicts(term.get("matchExpressions"))):
        return "node affinity"
    pods = dict_or_empty(affinity.get("podAffinity"))
    pod_terms = dicts(pods.get("requiredDuringSchedulingIgnoredDuringExecution")) + [
        dict_or_empty(p.get("podAffinityTerm"))
        for p in dicts(pods.get("preferredDuringSchedulingIgnoredDuringExecution"))
    ]
    if any(term.get("topologyKey") == CLIQUE_LABEL for term in pod_terms):
        return "pod affinity on topologyKey"
    return None


def _host_channel(c: dict) -> bool:
    """The container gets IMEX channels another way: privileged (every device of the host), or NVIDIA_IMEX_CHANNELS,
    which the NVIDIA container runtime answers with the host's channels."""
    if dict_or_empty(c.get("securityContext")).get("privileged") is True:
        return True
    return any(e.get("name") == IMEX_ENV for e in c.get("env") or [])


def _pod_channels(ctx: Context, t: PodTemplate) -> list[str]:
    """The pod's claims of a ComputeDomain channel, whichever container lists them."""
    entries = dra.pod_claims(t)
    return [
        name
        for name, entry in entries.items()
        if isinstance(ref := entry.get("resourceClaimTemplateName"), str)
        and (
            dra.lookup(ctx.claims, "ComputeDomain", ctx.namespace, ref) is not None
            or any(
                r.role == dra.CHANNEL
                for r in dra.requests(
                    dra.claim_devices(dra.lookup(ctx.claims, "ResourceClaimTemplate", ctx.namespace, ref) or {}),
                    ctx.claims,
                )
            )
        )
    ]


@rule(
    "mnnvl-compute-domain",
    "Multi-node NVLink pods claim their ComputeDomain's IMEX channel",
    level=MANDATORY,
    description="A GPU container (device plugin or DRA) that sets NCCL_MNNVL_ENABLE=1, or whose pod is placed by "
    "`nvidia.com/gpu.clique` (nodeSelector, node affinity, or pod affinity on that topologyKey) with "
    "NCCL_MNNVL_ENABLE not 0, consumes a ComputeDomain's IMEX channel: it lists in `resources.claims` a pod claim "
    "from a ResourceClaimTemplate of DeviceClass compute-domain-default-channel.nvidia.com, or from the template a "
    "ComputeDomain in its namespace names in spec.channel.resourceClaimTemplate.name (the ComputeDomain controller "
    "creates it). A container that lists a claim none of the objects checked answers is not judged; a privileged "
    "one, or one setting NVIDIA_IMEX_CHANNELS (host IMEX), passes. A device "
    "plugin that injects channels itself (imex.channelIDs) is invisible here: exempt such pods by label.",
    remediation="create a ComputeDomain and claim its channel: resourceClaims [{name: imex, "
    "resourceClaimTemplateName: <its spec.channel.resourceClaimTemplate.name>}] and resources.claims [{name: imex}]",
)
def mnnvl_compute_domain(ctx: Context) -> Iterator[Finding]:
    """Multi-node NVLink needs the IMEX channel device: NCCL allocates FABRIC-handle memory and, when it cannot on
    an NVLink clique, fails init with "MNNVL ... is available but not working on this system. Check the IMEX channel
    configuration (/dev/nvidia-caps-imex-channels)" (NVIDIA/nccl@v2.30.7-1:src/mnnvl.cc ncclMnnvlCheck, returning
    ncclSystemError; src/init.cc runs it for any NCCL_MNNVL_ENABLE but 0 across nodes, although docs/userguide/
    source/env.rst says 2 does not fail); CUDA error 800 in p2p.cc is the same missing access (docs/userguide/source/
    troubleshooting/performance_and_tuning.rst). In Kubernetes the channel comes from NVIDIA's DRA driver: the
    ComputeDomain's workload ResourceClaimTemplate (request `channel`, class compute-domain-default-channel.nvidia.com)
    and its kubelet plugin, which injects /dev/nvidia-caps-imex-channels/channel0 by CDI into the containers that
    list the claim (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:cmd/compute-domain-controller/
    resourceclaimtemplate.go, templates/compute-domain-workload-claim-template.tmpl.yaml; cmd/compute-domain-kubelet-
    plugin/device_state.go applyComputeDomainChannelConfig)."""
    for t in ctx.templates:
        clique = _placed_by_clique(t)
        pod_channels: list[str] | None = None
        for c in containers(t):
            if not ctx.facts(c).has_gpus:
                continue
            env = rank_env(ctx, t, c)
            value = env.get("NCCL_MNNVL_ENABLE")
            if "NCCL_MNNVL_ENABLE" in env and value is None:
                continue  # valueFrom: a setting the manifest does not show
            value = value.strip() if value is not None else None
            if value != "1" and (clique is None or value == "0"):
                continue
            used = ctx.consumed(c)
            if used.channels or used.unresolved or _host_channel(c):
                continue
            why = (
                "sets NCCL_MNNVL_ENABLE=1 (multi-node NVLink forced on)"
                if value == "1"
                else f"is placed by {CLIQUE_LABEL} ({clique}) for multi-node NVLink"
            )
            if pod_channels is None:
                pod_channels = _pod_channels(ctx, t)
            if pod_channels:
                yield Finding(
                    f"{where(t, c)} {why} but does not list the pod's ComputeDomain channel claim "
                    f"{', '.join(repr(n) for n in pod_channels)} in resources.claims: the channel "
                    f"({IMEX_CHANNELS}) reaches only the containers that list it, and without it NCCL cannot use "
                    "multi-node NVLink (init fails: NVIDIA/nccl@v2.30.7-1:src/mnnvl.cc); add it to "
                    "resources.claims"
                )
                continue
            yield Finding(
                f"{where(t, c)} {why} but consumes no ComputeDomain IMEX channel: without the IMEX channel "
                f'({IMEX_CHANNELS}) NCCL cannot use multi-node NVLink and its init fails ("MNNVL ... available but '
                'not working", NVIDIA/nccl@v2.30.7-1:src/mnnvl.cc; "CUDA error 800", its docs\' troubleshooting); '
                "create a ComputeDomain and claim its channel: resourceClaims [{name: imex, "
                "resourceClaimTemplateName: <its spec.channel.resourceClaimTemplate.name>}], listed in the "
                "container's resources.claims"
            )
