"""RDMA and NCCL wiring: RDMA pods keep NCCL on their RDMA devices and pin the right HCAs, sockets bind to
interfaces the pod has, RDMA memory can be pinned, and host-network pods resolve cluster names.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from components.fabric import addressing, nccl
from components.fabric.kinds import EFA_RESOURCE
from components.fabric.wiring import NETWORKS_ANNOTATION
from components.model.profile import normalize as _normalize
from policies.dra import is_claimed
from policies.engine import MANDATORY, Context, Finding, rule
from policies.pods import (
    containers,
    is_rdma_pod,
    pod_annotations,
    rank_env,
    rank_literals,
    rdma_resources,
    runs_nccl,
    where,
)
from policies.podspecs import PodTemplate, clean_container, pod_templates


def network_interfaces(t: PodTemplate) -> tuple[str, ...]:
    """The interfaces a pod has: its primary (eth0, or what fastpath's primary-interface annotation names) and lo,
    plus one per Multus network (net1.. unless named)."""
    raw = pod_annotations(t).get(NETWORKS_ANNOTATION)
    primary = pod_annotations(t).get(nccl.PRIMARY_INTERFACE_ANNOTATION)
    primary = str(primary) if isinstance(primary, str) and primary else "eth0"
    return _interfaces(primary, raw) if raw is None or isinstance(raw, str) else _read_interfaces(primary, raw)


@lru_cache(maxsize=1024)  # the pods of one lint share a few networks annotations: each is read once
def _interfaces(primary: str, raw: str | None) -> tuple[str, ...]:
    return _read_interfaces(primary, raw)


def _read_interfaces(primary: str, raw: Any) -> tuple[str, ...]:
    if not raw:
        return (primary, "lo")
    try:
        nets = json.loads(raw)
        names = [n.get("interface") if isinstance(n, dict) else None for n in nets]
    except (json.JSONDecodeError, TypeError):
        names = [None for _ in str(raw).split(",") if _.strip()]
    return (primary, "lo", *(str(n) if n else addressing.secondary_interface(i) for i, n in enumerate(names)))


@lru_cache(maxsize=4096)
def socket_ifname_problem(value: str, interfaces: tuple[str, ...]) -> str | None:
    """components.fabric.nccl.socket_ifname_problem, once per distinct value and pod network."""
    return nccl.socket_ifname_problem(value, list(interfaces))


@rule(
    "nccl-ib-enabled",
    "RDMA pods keep NCCL's IB transport on",
    level=MANDATORY,
    description="Pods that request RDMA resources or secondary networks, or mount the host's /dev/infiniband, do "
    "not set NCCL_IB_DISABLE to anything but 0, nor NCCL_NET=Socket (in their env or exported by an "
    "MPI launcher).",
    remediation="leave NCCL_IB_DISABLE unset (or 0) and set NCCL_NET to IB or the net plugin's name",
)
def nccl_ib_enabled(ctx: Context) -> Iterator[Finding]:
    """RDMA pods do not switch NCCL to TCP: NCCL_IB_DISABLE=1, or NCCL_NET=Socket (the built-in TCP network by
    name, NVIDIA/nccl@v2.30.7-1:docs/userguide/source/env.rst NCCL_NET), in the pod's env or exported by an MPI
    launcher."""
    for t in ctx.templates:
        if not is_rdma_pod(ctx, t):
            continue
        for c in containers(t):
            e = rank_env(ctx, t, c)
            disable = e.get("NCCL_IB_DISABLE") or "0"
            if disable.strip() not in ("0", ""):
                yield Finding(
                    f"{where(t, c)} requests RDMA (resources or secondary networks) but sets "
                    f"NCCL_IB_DISABLE={disable}: NCCL will use TCP sockets; set it to 0"
                )
            net = e.get("NCCL_NET")
            if net is not None and net.strip().lower() == "socket":
                yield Finding(
                    f"{where(t, c)} requests RDMA (resources or secondary networks) but sets "
                    f"NCCL_NET={net}: NCCL is forced onto TCP sockets and the RDMA devices sit idle; "
                    "set NCCL_NET=IB (or the name of the net plugin in use)"
                )


@rule(
    "nccl-net-set",
    "RDMA pods name their NCCL network",
    level=MANDATORY,
    description="GPU or RDMA containers of RDMA pods that run NCCL (the workload requests GPUs, or the pod sets an "
    "NCCL_* variable) set NCCL_NET (IB, or the net plugin's name such as IBext or "
    "Libfabric), so a broken RDMA path fails NCCL init instead of falling back to TCP without a word. "
    "For MPIJob workers, `mpirun -x NCCL_NET` from the launcher counts.",
    remediation="set NCCL_NET=IB (or the net plugin's name: IBext, Libfabric); MPIJob: mpirun -x NCCL_NET",
)
def nccl_net_set(ctx: Context) -> Iterator[Finding]:
    """RDMA pods name their NCCL network. Without NCCL_NET, NCCL (since 2.10) tries the net plugins, then its
    built-in IB, then Socket, and takes the first that initialises: an RDMA device that is missing, a plugin
    that fails to load or a bad NCCL_IB_HCA leaves the job on TCP with nothing but an INFO line. NCCL_NET forces
    the network by name and so prevents that silent fallback (NVIDIA/nccl@v2.30.7-1:docs/userguide/source/env.rst
    NCCL_NET, read in src/init.cc): init fails instead. A NCCL_NET from valueFrom counts as set; envFrom and
    nccl.conf files are not seen. For MPIJob workers a value the launcher exports (`mpirun -x`) counts."""
    for t in ctx.templates:
        if not is_rdma_pod(ctx, t) or not runs_nccl(ctx, t):
            continue
        for c in containers(t):
            own = ctx.facts(c)
            if not (own.has_gpus or own.rdma):
                continue
            e = rank_env(ctx, t, c)
            if "NCCL_NET" in e and (e["NCCL_NET"] is None or e["NCCL_NET"].strip()):
                continue
            if EFA_RESOURCE in own.rdma:
                name = "Libfabric (AWS Libfabric with older aws-ofi-nccl plugins)"
            else:
                name = "IB (or the net plugin's own name, such as IBext for the HPC-X SHARP plugin)"
            how = (
                " on the worker, or export it from the launcher (mpirun -x NCCL_NET)"
                if ctx.obj.get("kind") == "MPIJob"
                else ""
            )
            yield Finding(
                f"{where(t, c)} requests RDMA but does not set NCCL_NET: when the RDMA transport fails "
                "to initialise (device not visible, plugin not loaded, wrong HCA) NCCL silently falls "
                "back to TCP sockets and the job runs at a fraction of its bandwidth; set "
                f"NCCL_NET={name}{how} so such a failure stops the job at init"
            )


@rule(
    "nccl-ib-hca",
    "RDMA pods pin their HCAs exactly",
    level=MANDATORY,
    description="Pods with InfiniBand/RoCE resources that run NCCL (as nccl-net-set) set NCCL_IB_HCA, with `=` "
    "when a listed name prefixes another (NICs claimed through DRA are exempt: the container can open only the "
    "allocated ones). "
    "For MPIJob workers what the launcher exports counts (`mpirun -x`, `-genv`, `-genvlist`; the "
    "launcher's whole env under horovodrun or mpiImplementation Intel/MPICH); a value from valueFrom "
    "counts as set. The other NCCL rules read the same environment.",
    remediation="set NCCL_IB_HCA to the compute HCAs, with `=` for exact names",
)
def nccl_ib_hca(ctx: Context) -> Iterator[Finding]:
    for t in ctx.templates:
        if not runs_nccl(ctx, t):
            continue
        for c in containers(t):
            # EFA is no HCA; a DRA claim's NICs are the only ones the container can open (dranet adds the character
            # devices of the allocated RDMA devices only: kubernetes-sigs/dranet@v1.4.0:pkg/driver/dra_hooks.go
            # buildRDMAConfig; NCCL skips a device it cannot open, NVIDIA/nccl@v2.30.7-1:src/transport/net_ib/
            # init.cc "Unable to open device"), so there is no storage HCA for NCCL to pick.
            rdma = [r for r in ctx.facts(c).rdma if r != EFA_RESOURCE and not is_claimed(r)]
            if not rdma:
                continue
            e = rank_env(ctx, t, c)
            if "NCCL_IB_HCA" in e and e["NCCL_IB_HCA"] is None:
                continue  # valueFrom: set, by a value the manifest does not show
            value = e.get("NCCL_IB_HCA")
            if not value:
                how = (
                    " (on the worker, or exported by the launcher: mpirun -x NCCL_IB_HCA=...)"
                    if ctx.obj.get("kind") == "MPIJob"
                    else ""
                )
                yield Finding(
                    f"{where(t, c)} requests {', '.join(rdma)} but does not set NCCL_IB_HCA{how}: NCCL may "
                    "pick storage or management HCAs; list the compute HCAs (with `=` for exact names)"
                )
            elif nccl.needs_exact(value):
                yield Finding(
                    f"{where(t, c)}: NCCL_IB_HCA={value} lists a name that prefixes another (mlx5_1 also "
                    f"matches mlx5_10): write ={value.lstrip('^=')} (or ^={value.lstrip('^=')})"
                )


@rule(
    "nccl-socket-ifname",
    "NCCL_SOCKET_IFNAME selects an interface the pod has",
    level=MANDATORY,
    description="Evaluated with NCCL's prefix, `^` and `=` semantics against eth0 and the Multus interfaces (net1..).",
    remediation="name an interface the pod has: eth0, or its Multus interface (net1..)",
)
def nccl_socket_ifname(ctx: Context) -> Iterator[Finding]:
    for t in ctx.templates:
        if ctx.obj.get("kind") == "MPIJob" and t.role == "Launcher":
            # The launcher runs mpirun, not NCCL: its NCCL_* are there for `mpirun -x` to hand to the workers,
            # whose interfaces (rails included) are the ones that count; they are judged in the Worker template.
            continue
        for c in containers(t):
            value = rank_literals(ctx, t, c).get("NCCL_SOCKET_IFNAME")
            if not value:
                continue
            if (p := socket_ifname_problem(value, network_interfaces(t))) is not None:
                yield Finding(f"{where(t, c)}: {p}")


@rule(
    "hostnetwork-dns",
    "Host-network training pods resolve cluster names",
    level=MANDATORY,
    description="A pod on the host network (`hostNetwork: true`) in a workload that requests GPUs sets dnsPolicy "
    "ClusterFirstWithHostNet: unset or ClusterFirst, the kubelet gives it the node's resolv.conf, so "
    "Service and pod names (a rendezvous Service, a PyTorchJob's master, an MPI launcher's worker "
    "hostnames) do not resolve and the job hangs at rendezvous. Every host-network pod of such a "
    "workload counts, a launcher without GPUs too; workloads without GPUs (node agents) are not judged.",
    remediation="set dnsPolicy: ClusterFirstWithHostNet",
)
def hostnetwork_dns(ctx: Context) -> Iterator[Finding]:
    """A host-network pod under ClusterFirst does not get cluster DNS: the kubelet's getPodDNSType answers
    ClusterFirst with podDNSCluster only for a pod off the host network and falls through to DNSDefault (the
    node's resolv.conf) for one on it; ClusterFirstWithHostNet is what gives such a pod the cluster's DNS
    (kubernetes/kubernetes@04791b4:pkg/kubelet/network/dns/dns.go getPodDNSType). An unset dnsPolicy is defaulted
    to ClusterFirst (SetDefaults_PodSpec, pkg/apis/core/v1/defaults.go), so it fails the same way. Default and
    None are choices someone made and pass. The launcher of an MPIJob has no GPUs but is the pod that resolves
    the workers' hostnames, so the whole workload is judged once any of its pods requests GPUs."""
    if not ctx.gpu_containers:
        return
    for t in ctx.templates:
        spec = t.template["spec"]
        if spec.get("hostNetwork") is not True:
            continue
        policy = spec.get("dnsPolicy")
        if policy not in (None, "", "ClusterFirst"):
            continue
        shown = "ClusterFirst" if policy == "ClusterFirst" else "unset (so ClusterFirst)"
        who = "the pod" if t.role == "pod" else f"{t.role} pod"
        yield Finding(
            f"{who} runs on the host network with dnsPolicy {shown}: the kubelet then gives it "
            "the node's resolv.conf instead of the cluster DNS, so Service and pod names (the rendezvous "
            "or master Service, the MPI launcher's worker hostnames) do not resolve and the job hangs at "
            "rendezvous; set dnsPolicy: ClusterFirstWithHostNet"
        )


def _raw_template(obj: dict, path: str) -> dict | None:
    """The pod template at `path` (a PodTemplate.path such as spec.replicatedJobs[0].template.spec.template) in
    the object itself, not the extractor's cleaned copy."""
    node: Any = obj
    for part in path.split("."):
        m = re.fullmatch(r"([^\[]+)((?:\[\d+\])*)", part)
        if m is None or not isinstance(node, dict):
            return None
        node = node.get(m.group(1))
        for i in re.findall(r"\[(\d+)\]", m.group(2)):
            if not isinstance(node, list) or int(i) >= len(node):
                return None
            node = node[int(i)]
    if path == "spec":  # a Pod: the object's spec is the pod spec
        return {"spec": node} if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


def add_ipc_lock(obj: dict) -> dict | None:
    """Remediation for rdma-ipc-lock (safe and additive: it only adds a capability RDMA needs). Returns the fixed
    object, or None when nothing needed fixing (or the containers are in shapes it cannot safely edit)."""
    obj = _normalize(obj)  # a copy: the fix is returned, the caller's object is left as it was
    if not isinstance(obj, dict) or not isinstance(obj.get("kind"), str):
        return None
    changed = False
    for t in pod_templates(obj):
        raw = _raw_template(obj, t.path)
        spec = raw.get("spec") if raw is not None else None
        if not isinstance(spec, dict) or not isinstance(spec.get("containers"), list):
            continue  # TrainJob's trainer has no securityContext to set
        for c in spec["containers"]:
            if not isinstance(c, dict):
                continue
            if not rdma_resources(clean_container(c)):
                continue
            sc = c.get("securityContext")
            if sc is None:
                sc = c["securityContext"] = {}
            if not isinstance(sc, dict) or sc.get("privileged"):
                continue
            caps = sc.get("capabilities")
            if caps is None:
                caps = sc["capabilities"] = {}
            if not isinstance(caps, dict):
                continue
            add = caps.get("add") or []
            if isinstance(add, list) and "IPC_LOCK" not in add:
                caps["add"] = [*add, "IPC_LOCK"]
                changed = True
    return obj if changed else None


@rule(
    "rdma-ipc-lock",
    "RDMA pods add IPC_LOCK",
    level=MANDATORY,
    description="Containers requesting RDMA resources add the IPC_LOCK capability (or run privileged). Remediable.",
    remediation="add securityContext.capabilities.add: [IPC_LOCK]",
    remediate=add_ipc_lock,
)
def rdma_ipc_lock(ctx: Context) -> Iterator[Finding]:
    for t in ctx.templates:
        for c in containers(t):
            rdma = ctx.facts(c).rdma
            if not rdma:
                continue
            sc = c.get("securityContext") or {}
            if sc.get("privileged") or "IPC_LOCK" in ((sc.get("capabilities") or {}).get("add") or []):
                continue
            yield Finding(
                f"{where(t, c)} requests {', '.join(rdma)} without the IPC_LOCK capability: "
                "RDMA cannot pin memory (ibv_reg_mr fails); add securityContext.capabilities.add: [IPC_LOCK]"
            )
