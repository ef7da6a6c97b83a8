"""Verdicts from what a log showed (a parsed `Report`): pass, warn, fail with the likely cause and the knob, or
incomplete when a check asked for cannot be judged from this log. What --expect accepts and which transports must
run with GPUDirect RDMA are read off the kinds table (components/fabric/kinds.py)."""

from __future__ import annotations

from components.fabric.kinds import KINDS, TRANSPORTS
from tools.ncclcheck.parse import (
    IB,
    INSPECTOR,
    LOCAL,
    MNNVL,
    NO_DEBUG,
    OTHER_PROVIDER,
    PROFILER_UNKNOWN_INTERFACE,
    PROFILER_V5_NCCL,
    ROCE,
    SOCKET,
    Report,
    section_markers,
)

# What --expect accepts: each fabric kind's transport, `local` for a one-node run (P2P/SHM only) and `mnnvl` for a
# multi-node run inside one NVLink clique.
EXPECT = (*TRANSPORTS, LOCAL, MNNVL)
# Transports that must run with GPUDirect RDMA.
RDMA_TRANSPORTS = frozenset(kind.transport for kind in KINDS.values() if kind.rdma)


def judge(
    r: Report,
    expect: str | None,
    min_busbw: float | None,
    ranks: int | None,
    allow_no_gdr: bool,
    warn_busbw: float | None = None,
    bootstrap: str | None = None,
    rails: int | None = None,
    profiler: bool = False,
) -> Report:
    """Set `r`'s verdict and reasons for the checks asked for (`expect`ed transport, bus bandwidth floor and warning
    level, `ranks` that must initialise, the `bootstrap` interface, the NICs of the profile's `rails` every process
    must find, the `profiler` plugin every process must load) and return it."""
    failed: list[str] = []  # the log shows a check failing
    warned: list[str] = []  # passes, with something to look at
    absent: list[str] = []  # a check asked for whose lines are not in this log
    notes: list[str] = []  # what the log cannot show, not asked for
    if r.unknown_nets and expect:
        failed.append(
            f"NCCL used NET/{', NET/'.join(r.unknown_nets)}, a network module ncclcheck does not know, "
            f"where {expect} was expected: check NCCL_NET and NCCL_NET_PLUGIN"
        )
    elif r.transport_note:
        (absent if expect else notes).append(f"transport: {r.transport_note}")
    if {expect, r.transport} == {IB, ROCE} and not r.link_layers:
        # NCCL's IB transport drives both; only its NIC list (`NET/IB : Using [0]mlx5_0:1/RoCE`) says which.
        absent.append(
            f"link layer: not in this log (NCCL used its IB transport, but no 'NET/IB : Using' line says whether "
            f"over InfiniBand or RoCE); {expect} cannot be confirmed"
        )
    elif expect and r.transport != expect and not r.transport_note:
        if r.fell_back_to_socket and any(i.startswith("net") for i in r.socket_interfaces):
            failed.append(
                "NCCL used TCP sockets although the pod has secondary networks ("
                f"{', '.join(i for i in r.socket_interfaces if i.startswith('net'))}): it found no usable "
                "RDMA device; the RDMA resource is missing from the pod or NCCL_IB_HCA matches no device"
            )
        elif r.transport == SOCKET and r.env.get("NCCL_IB_DISABLE") == "1":
            failed.append("NCCL used TCP sockets because NCCL_IB_DISABLE=1: set it to 0 on RDMA fabrics")
        elif r.transport == SOCKET and r.env.get("NCCL_NET", "").lower() == "socket":
            failed.append(
                f"NCCL used TCP sockets because NCCL_NET={r.env['NCCL_NET']}: set NCCL_NET to the fabric's network "
                "(IB, or the net plugin's name)"
            )
        elif r.fell_back_to_socket:
            failed.append(
                "NCCL fell back to TCP sockets: no RDMA device and no secondary networks in the pod; "
                "request the fabric's RDMA resources and networks (fastpath wires them from the profile)"
            )
        elif expect == MNNVL and r.channels:
            failed.append(f"a multi-node NVLink run went over {r.transport}: {mnnvl_off_reason(r)}")
        elif expect == MNNVL and not r.failures:
            absent.append(
                "transport: not in this log (no channel lines: NCCL connected nothing, or ran without "
                "NCCL_DEBUG=INFO); multi-node NVLink cannot be confirmed"
            )
        elif r.transport == MNNVL:
            failed.append(
                f"the run went over multi-node NVLink, not {expect}: the network was not measured; set "
                "NCCL_MNNVL_ENABLE=0 for a network run inside an NVLink clique"
            )
        elif expect == LOCAL:
            failed.append(
                f"a one-node run used the network ({r.transport}): the GPUs did not reach each other "
                "over NVLink or PCIe P2P; check nvidia-smi topo -m and NCCL_P2P_DISABLE"
            )
        elif r.transport.startswith(OTHER_PROVIDER):
            failed.append(
                f"aws-ofi-nccl ran on libfabric's {r.ofi_provider} provider, not efa: the pod sees no EFA "
                "device (vpc.amazonaws.com/efa resource) or FI_PROVIDER names another provider"
            )
        else:
            failed.append(f"transport is {r.transport}, expected {expect}: check fabric.kind and NCCL_IB_HCA")
    if expect in RDMA_TRANSPORTS and r.transport == expect and r.gdr is not True and not allow_no_gdr:
        if r.net_channels:
            failed.append(
                "RDMA without GPUDirect (no GDRDMA on the NET channels): data is staged through host "
                "memory; check gpu.gpuDirect (dmabuf needs the open kernel module, peermem needs "
                "nvidia-peermem) and NCCL_NET_GDR_LEVEL"
            )
        else:
            absent.append(
                "GPUDirect RDMA: not in this log (no NET channel lines to show GDRDMA): run with "
                "NCCL_DEBUG_SUBSYS=INIT,NET, or pass --allow-no-gdr"
            )
    _judge_ranks(r, ranks, failed, absent, notes)
    if bootstrap is not None:
        _judge_bootstrap(r, bootstrap, failed, absent)
    if rails is not None:
        _judge_rails(r, rails, failed, absent, notes)
    _judge_profiler(r, profiler, ranks, failed, warned, absent)
    failed += r.failures
    # No RDMA device is a failure where RDMA was expected, and where nothing was said about a run that went over the
    # network; a one-node run or a TCP fabric has none to find.
    if expect in RDMA_TRANSPORTS or (expect is None and r.transport not in (LOCAL, SOCKET)):
        failed += r.rdma_absent
    if r.warnings:
        quoted = "; ".join(repr(w) for w in r.warnings)
        if r.avg_busbw_gbps is not None:  # nccl-tests printed its summary: the run went to its end
            warned.append(
                f"NCCL warned of what ncclcheck has no rule for, and the run still finished: {quoted}; read the lines "
                "around it"
            )
        else:
            failed.append(
                f"NCCL warned of what ncclcheck has no rule for: {quoted}; the run likely failed there (no nccl-tests "
                "summary follows): read the lines around it"
            )
    if r.peak_busbw_gbps is None:
        why = "not in this log (no nccl-tests results table: the run stopped before its first size, or the log was cut)"
        if min_busbw is not None:
            absent.append(f"bus bandwidth: {why}; the floor of {min_busbw:g} GB/s cannot be checked")
        elif r.nccl_lines:
            notes.append(f"bus bandwidth: {why}")
    elif min_busbw is not None and r.peak_busbw_gbps < min_busbw:
        failed.append(
            f"peak bus bandwidth {r.peak_busbw_gbps:g} GB/s is under the floor of {min_busbw:g} GB/s "
            f"({r.peak_busbw_gbps / min_busbw:.0%}): check that every rail is in use (NCCL_IB_HCA, the "
            "rail resources) and the fabric's health"
        )
    if not r.nccl_lines and r.peak_busbw_gbps is None and not r.failures:
        absent.append(
            "nothing to judge: no NCCL lines and no nccl-tests results in this log; is it the job's log "
            f"(the MPIJob launcher's, or every worker's)? {NO_DEBUG}"
        )
    r.not_in_log = absent + notes
    r.reasons = failed + absent
    r.verdict = "fail" if failed else "incomplete" if absent else "pass"
    if (
        r.verdict == "pass"
        and warn_busbw is not None
        and r.peak_busbw_gbps is not None
        and r.peak_busbw_gbps < warn_busbw
    ):
        warned.append(
            f"peak bus bandwidth {r.peak_busbw_gbps:g} GB/s passes the floor but is under "
            f"{warn_busbw:g} GB/s, what healthy links give ({r.peak_busbw_gbps / warn_busbw:.0%}): look "
            "for a slow rail (ibdiagnet, port counters) before production runs"
        )
    if r.verdict == "pass" and warned:
        r.verdict, r.reasons = "warn", warned
    return r


def mnnvl_off_reason(r: Report) -> str:
    """Why NCCL left multi-node NVLink off, from what the log shows (NVIDIA/nccl@v2.30.7-1 src/mnnvl.cc
    ncclMnnvlCheck returns without it, silently, when cuMem is off, a GPU's fabric state is not COMPLETED or the
    cluster UUID is zero; src/graph/paths.cc ncclTopoCheckMNNVL: peers of another clique are not P2P)."""
    if r.env.get("NCCL_MNNVL_ENABLE") == "0":
        return "NCCL_MNNVL_ENABLE=0 turned it off"
    if r.env.get("NCCL_CUMEM_ENABLE") == "0":
        return "NCCL_CUMEM_ENABLE=0: MNNVL needs cuMem"
    return (
        "NCCL did not enable MNNVL"
        + (" (its communicator lines say MNNVL 0)" if r.mnnvl is False else "")
        + ": a GPU whose fabric registration is not Completed (nvidia-smi -q, Fabric), ranks in different NVLink "
        "cliques (the nodes' nvidia.com/gpu.clique labels), or cuMem turned off by the framework"
    )


def _judge_profiler(
    r: Report, required: bool, ranks: int | None, failed: list[str], warned: list[str], absent: list[str]
) -> None:
    """The Inspector (fastpath's telemetry) must have set up every rank's communicator when `required` (`ranks`, or
    the communicator's size the log shows); otherwise a plugin that did not load is a warning: the job trains on,
    with no per-collective metrics, so nothing shows a slow rank or rail until the next acceptance run."""
    reasons = [_with_version_advice(r, reason) for reason in r.profiler_failures]
    if r.profiler_unset and required:
        reasons.append(
            "a process was given no profiler plugin (NCCL looked only for its default libnccl-profiler.so, or "
            "NCCL_PROFILER_PLUGIN was none): the launcher did not pass the Inspector's variables to every rank "
            "(mpirun -x, or the container's env)"
        )
    if not required:
        warned.extend(f"the job runs without its telemetry: {reason}" for reason in reasons)
        return
    failed.extend(f"telemetry: {reason}" for reason in reasons)
    if reasons:
        return
    if r.profiler is None:
        absent.append(
            "profiler plugin: not in this log (no 'PROFILER/Plugin' line, which every process prints at init under "
            "NCCL_DEBUG=INFO with INIT in NCCL_DEBUG_SUBSYS, unless NCCL_PROFILER_PLUGIN is none: NCCL 2.28 and "
            "later then print nothing); --profiler cannot be checked"
        )
        return
    if not r.profiler.startswith(INSPECTOR):
        failed.append(f"telemetry: NCCL loaded the profiler plugin {r.profiler!r}, not the Inspector: check the file")
        return
    want = ranks or r.nranks
    if not r.profiler_ranks or (want and r.profiler_ranks < want):
        of = f" on {r.profiler_ranks} of {want} ranks" if want else " on no rank"
        failed.append(
            f"telemetry: the Inspector loaded but set up a communicator{of} ('PROFILER/Plugin: init commName' "
            "lines): on the others it exports nothing (NCCL_INSPECTOR_ENABLE not 1, its dump directory not "
            "writable, its dump thread; it logs why under NCCL_DEBUG_SUBSYS PROFILE), or that rank's lines are "
            "missing from this log"
        )


def _with_version_advice(r: Report, reason: str) -> str:
    """A plugin NCCL found no interface in: too old an NCCL for the Inspector, or not the Inspector, by the version
    the log shows (read here: rank 0 prints it, anywhere in a launcher's log)."""
    if not reason.startswith(PROFILER_UNKNOWN_INTERFACE):
        return reason
    floor = ".".join(map(str, PROFILER_V5_NCCL))
    version = tuple(int(x) for x in r.nccl_version.split(".")) if r.nccl_version else None
    if version is None:
        advice = f"the Inspector exports ncclProfiler_v5, which NCCL loads from {floor} on: check the image's NCCL"
    elif version < PROFILER_V5_NCCL:
        advice = (
            f"NCCL {r.nccl_version} loads profiler interfaces v1-v4 only and the Inspector exports v5 (NCCL {floor} "
            "on): use a training image with a newer NCCL"
        )
    else:
        advice = f"NCCL {r.nccl_version} loads the Inspector's v5: the file is not the Inspector, or a broken build"
    head, quote = reason[: len(PROFILER_UNKNOWN_INTERFACE)], reason[len(PROFILER_UNKNOWN_INTERFACE) :]
    return f"{head}: {advice}{quote}"


def _judge_bootstrap(r: Report, interface: str, failed: list[str], absent: list[str]) -> None:
    """NCCL's out-of-band connections (bootstrap, and the IB transport's OOB socket) must use `interface`: on a
    host-network pod the node's primary interface, which routes between the nodes."""
    if not r.bootstrap_interfaces:
        absent.append(
            f"bootstrap interface: not in this log (no 'Bootstrap: Using' or NET/IB '; OOB' line: run with "
            f"NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,NET,BOOTSTRAP); --bootstrap {interface} cannot be "
            "checked"
        )
    elif others := [name for name in r.bootstrap_interfaces if name != interface]:
        failed.append(
            f"NCCL bootstrapped on {', '.join(others)}, not {interface}: NCCL_SOCKET_IFNAME / "
            f"fabric.podInterface names {interface} but NCCL used {', '.join(others)}; set them to the "
            "interface that routes between the nodes (on the host network: the node's primary interface)"
        )


def _judge_rails(r: Report, rails: int, failed: list[str], absent: list[str], notes: list[str]) -> None:
    """Every process's IB transport must find a NIC per rail. NCCL lists the ports it will use (`NET/IB : Using`,
    once per process) after skipping those that are not ACTIVE and those NCCL_IB_HCA filters out
    (NVIDIA/nccl@v2.30.7-1:src/transport/net_ib/init.cc ncclIbInitDevices), so a shorter list is a rail this job
    runs without. The channel lines' NET devices are only a note: a log often holds some ranks' channels only."""
    if r.fewest_nics is None:
        absent.append(
            "rails: not in this log (no 'NET/IB : Using' line, where NCCL's IB transport lists the NICs it found: "
            f"run with NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,NET); --rails {rails} cannot be checked"
        )
        return
    if len(r.fewest_nics) < rails:
        where = f" on {r.fewest_nics_host}" if r.fewest_nics_host else ""
        found = ", ".join(r.fewest_nics) or "none"
        others = [nic for nic in r.nics if nic not in r.fewest_nics]
        hca = r.env.get("NCCL_IB_HCA")
        unmatched = hca_entries_not_found(hca, r.fewest_nics) if hca else []
        failed.append(
            f"NCCL found {len(r.fewest_nics)} of {rails} rails' NICs{where} ({found})"
            + (f"; other processes found {', '.join(others)} too" if others else "")
            + (f"; NCCL_IB_HCA={hca} names {', '.join(unmatched)}, which it did not find" if unmatched else "")
            + ": NCCL leaves out a port that is not ACTIVE (a link down or not yet up: ibstat on that node) and a NIC "
            "that NCCL_IB_HCA does not match, and a pod has no NIC of a rail whose resource it does not request; "
            "check that port, NCCL_IB_HCA and the pod's rail resources"
        )
    if r.net_devices and len(r.net_devices) < rails and not r.fell_back_to_socket:
        devices = ", ".join(map(str, r.net_devices))
        notes.append(
            f"rails in use: the channel lines in this log use NET device{'s' if len(r.net_devices) > 1 else ''} "
            f"{devices} ({len(r.net_devices)} of {rails}); the other ranks' channel lines are not in it, so this "
            "is not judged"
        )


def hca_entries_not_found(hca: str, nics: list[str]) -> list[str]:
    """The devices an NCCL_IB_HCA list names that match none of `nics` (`device:port`), the way NCCL matches them
    (NVIDIA/nccl@v2.30.7-1:src/misc/utils.cc parseStringList, matchIfList): entries `device[:port[:rail[:plane]]]`
    split at commas, a device name matched as a prefix unless the list starts with `=`. An exclusion list (`^...`)
    names the NICs NCCL must not use: none of it is expected."""
    if hca.startswith("^"):
        return []
    exact = hca.startswith("=")
    found = [nic.split(":") for nic in nics]
    missing = []
    for entry in hca.removeprefix("=").split(","):
        device, _, rest = entry.partition(":")
        port = rest.partition(":")[0]
        if not device:
            continue
        if not any(
            (name == device if exact else name.startswith(device)) and (not port or port == nic_port)
            for name, nic_port, *_ in found
        ):
            missing.append(entry)
    return missing


def _judge_ranks(r: Report, ranks: int | None, failed: list[str], absent: list[str], notes: list[str]) -> None:
    """Init COMPLETE lines show the ranks that initialised; without NCCL INFO lines, nccl-tests' device list and a
    results table (which every rank took part in) show how many ran."""
    if r.nranks is not None or r.init_complete:
        want = ranks or r.nranks or r.init_complete
        if r.init_complete >= want:
            return
        shown = f"{r.init_complete} of {want} ranks reached Init COMPLETE"
        if ranks is not None:
            failed.append(
                f"{shown}: {want - r.init_complete} missing (a pod not scheduled, crashed, or blocked on bootstrap)"
            )
        else:
            notes.append(
                f"ranks: {shown} in this log; the others' lines are not in it (give --ranks N to require them)"
            )
        return
    if r.peak_busbw_gbps is not None and r.test_ranks:
        if ranks is not None and r.test_ranks < ranks:
            failed.append(
                f"nccl-tests ran on {r.test_ranks} ranks, not {ranks}: check mpirun -np and the hostfile's slots"
            )
        return
    why = (
        f"not in this log (no NCCL init lines: {NO_DEBUG})"
        if not r.nccl_lines
        else "not in this log (no rank reached NCCL init: the job did not get that far, or the log was cut)"
    )
    if ranks is not None:
        absent.append(f"ranks initialised: {why}; --ranks {ranks} cannot be checked")
    elif r.nccl_lines or r.peak_busbw_gbps is not None:
        notes.append(f"ranks initialised: {why}")


def missing_section(r: Report, section: str | int) -> Report:
    """The verdict when the log holds no `section` run: incomplete, naming the marker line not found."""
    r.verdict = "incomplete"
    begin, _ = section_markers(section)
    nodes, _, over = str(section).partition("/")
    r.reasons = r.not_in_log = [
        f"no {nodes}-node run{f' over {over}' if over else ''} in this log (no '{begin}' line): the launcher "
        "stopped before it, or this is another job's log"
    ]
    return r
