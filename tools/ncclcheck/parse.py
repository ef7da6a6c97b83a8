"""The line grammar of NCCL_DEBUG=INFO logs and nccl-tests output: what one line says, and the report of a log
read one line at a time (`Parser.feed`, `parse`). The bulk reader (bulk.py) gives the same report faster, judging
each line shape once with `feed`.

Prefixes that launchers and log collectors put before each line (Open MPI `[1,0]<stdout>:`, `kubectl logs
--timestamps` and `--prefix`, NCCL's own `[%F %T]` timestamps, Slurm `--label`) are ignored. A section, the N-node
run of a fastpath acceptance log, lies between its marker lines.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from components.fabric.kinds import KINDS, LOCAL, MNNVL, Transport
from components.jobs.sections import MARKER, section_markers

# Longest line read whole; the rest of a longer line (binary garbage, a minified blob) is skipped, not held.
MAX_LINE = 1 << 16
# Bounds on what is remembered per log, so memory does not grow with the log or with garbage in it.
MAX_NAMES = 64  # distinct channel transports, network names, env variables
MAX_RANKS = 1 << 17

# What launchers and collectors put before a line, possibly several: `[1,3]<stdout>:` (mpirun --tag-output),
# `[pod/nccl-acceptance-launcher/launcher] ` (kubectl logs --prefix), `2024-05-01T12:00:00.123456789Z `
# (kubectl logs --timestamps; CloudWatch copies add ` | `), `[2025-10-16 22:16:08] ` (NCCL_DEBUG_TIMESTAMP_FORMAT),
# `12: ` (srun --label).
PREFIX = re.compile(
    r"(?:\[\d{1,6},\d{1,9}\]<std(?:out|err)>:"
    r"|\[pod/[^\]\s]{1,300}\]\s"
    r"|\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?(?:\s+\|)?\s+"
    r"|\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?\]\s*"
    r"|\|\s+"
    r"|\d{1,6}:\s)+"
)

VERSION = re.compile(r"NCCL version (\d{1,3}\.\d{1,3}\.\d{1,3})")
# `Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0/GDRDMA` and the older shapes: `Channel 01 : 24[101c0] ->
# 31[a01d0] via P2P/IPC/read` (bus ids), `Ring 00 : 7 -> 8 [send] via NET/AWS Libfabric/0`, `... via direct shared
# memory`. The transport after `via` may hold spaces (`AWS Libfabric`, `P2P/direct pointer`).
CHANNEL = re.compile(
    r"\b(?:Channel|Ring) \d{1,4}(?:/\d{1,4})? :\s+\d{1,9}(?:\[[0-9a-fA-Fx:.]{1,20}\])?\s+->"
    r"\s+\d{1,9}(?:\[[0-9a-fA-Fx:.]{1,20}\])?(?:\s+\[(?:send|receive)\])?\s+via\s+(\S.{0,200}?)\s*$"
)
# A verbs device with its link layer, in every shape NCCL has printed the device list: `[0]mlx5_0:1/IB`,
# `[0]={[0] mlx5_2:1/RoCE, [1] mlx5_3:1/RoCE}` (merged NICs), `[0]mlx5_9:1/IB/SHARP`, `NET/IB: [0] mlx5_1:1/IB`.
LINK_LAYER = re.compile(r"[\w.-]{1,64}:\d{1,3}/(IB|RoCE)\b")
# The NICs one process's IB transport will use, printed once per process by ncclIbInitDevices
# (NVIDIA/nccl@v2.30.7-1:src/transport/net_ib/init.cc; v2.27.7-1:src/transport/net_ib.cc): `NET/IB : Using
# [0]mlx5_0:1/IB [1]mlx5_3:1/IB [RO]; OOB eth0:10.244.1.17<0>`. It lists only the ports it kept: it skips a port
# whose state is not IBV_PORT_ACTIVE, and one NCCL_IB_HCA does not match (matchIfList, src/misc/utils.cc: a device
# name matches as a prefix unless the list starts with `=`; a list starting with `^` names the NICs to leave out).
# `NET/IB : No device found.` is a list of none (from 2.24 an empty `Using` list follows it).
IB_USING = re.compile(r"NET/IB\w{0,16} ?: Using ")
# One NIC of that list, `device:port` kept: `[0]mlx5_0:1/IB`, `[0] mlx5_2:1/RoCE` inside a merged `[0]={...}`
# (2.20-2.23), `[5]mlx5_9:1/IB/SHARP` (the HPC-X plugin), and from 2.30 the rail and plane NCCL_IB_HCA gives
# (`[0]mlx5_0:1:3/IB`, `[0]mlx5_0:1::2/IB`, `[0]mlx5_0:1:3:2/IB`).
NIC = re.compile(r"\[\d{1,3}\] ?([\w.-]{1,64}:\d{1,3})(?::\d{0,4})?(?::\d{1,4})?/(IB|RoCE)\b")
NO_IB_DEVICE = "NET/IB : No device found"
# The host of an NCCL line (`%s:%d:%d [%d] NCCL INFO`: hostname, pid, tid, CUDA device; NVIDIA/nccl@v2.30.7-1:
# src/debug.cc ncclDebugLogV).
LINE_HOST = re.compile(r"([^\s:\[\]]{1,253}):\d{1,10}:\d{1,10} \[\d{1,4}\] NCCL ")
NET_SOCKET_USING = re.compile(r"NET/Socket : Using (.*)")
# The interface NCCL bootstraps on (its out-of-band sockets), `<name>:<address><<port>>` (ncclSocketToString):
# `Bootstrap : Using [0]ib0:10.1.2.3<0>` (up to 2.7: the interfaces found, the first one used), `Bootstrap : Using
# eth0:10.1.2.3<0>` (2.8 to 2.23; from 2.23 under NCCL_DEBUG_SUBSYS=BOOTSTRAP), `Bootstrap: Using eth0:10.1.2.3<0>`
# (2.24 on), and the IB transport's own `NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB eth0:10.1.2.3<0>` (INIT,NET). Not
# 2.27's `Bootstrap: Using mlx5_0:1` (NCCL_OOB_NET_ENABLE: a NET device, no address).
BOOTSTRAP_LEADS = (r"Bootstrap ?: Using (?:\[\d{1,3}\])?", r"; OOB ")
INTERFACE_ADDRESS = r"([^\s:<>\[\]]{1,64}):[^\s<>]{0,64}<\d{1,6}>"
BOOTSTRAP_USING = re.compile(f"(?:{'|'.join(BOOTSTRAP_LEADS)}){INTERFACE_ADDRESS}")
USING_NETWORK = re.compile(r"Using (?:internal )?[Nn]etwork (\S.{0,60}?)\s*$")
OFI_PROVIDER = re.compile(r"NET/OFI Selected [Pp]rovider is (\w{1,32})")
INIT = re.compile(r"rank (\d{1,9}) nranks (\d{1,9}) .*- Init COMPLETE")
NRANKS = re.compile(r"rank \d{1,9} nranks (\d{1,9})")
# Some releases end the line with a period (`set by environment to 1.`): not part of the value.
ENV_SET = re.compile(r"(NCCL_\w{1,64}) set by environment to (\S{0,200}?)\.?(?!\S)")
# nccl-tests: `#  Rank  8 Group  0 Pid     41 on llm-ib-worker-1 device  0 [0x18] NVIDIA H100 80GB HBM3`
TEST_RANK = re.compile(r"^#\s+Rank\s+(\d{1,9})\s+(?:Group\s+\d+\s+)?Pid\b")
AVG_BUSBW = re.compile(r"# Avg bus bandwidth\s*:\s*(\d{1,9}(?:\.\d{1,9})?)")
NUMBER = re.compile(r"\d{1,9}(?:\.\d{1,9})?")
DATATYPE = re.compile(r"[a-z][a-z0-9_]{0,15}")

# (pattern, what it means and which knob fixes it). The reason quotes the first line that matched.
FAILURES = [
    (
        # NVIDIA/nccl@v2.30.7-1 src/mnnvl.cc ncclMnnvlCheck: a FABRIC handle that cannot be allocated, exported or
        # imported fails init, unless NCCL_MNNVL_ENABLE=0.
        re.compile(r"MNNVL \(cliqueSize \d+\) is available but not working"),
        "multi-node NVLink is there but not working: the pod has no IMEX channel (its ComputeDomain claim, "
        "/dev/nvidia-caps-imex-channels) or the domain's IMEX daemons are not up (the ComputeDomain's status)",
    ),
    (
        re.compile(r"Watchdog caught collective operation timeout|Timeout|timed out|timeout", re.I),
        "a timeout: a rank never joined or the network path between pods is blocked; check that every pod started "
        "(gang scheduling) and that NCCL_SOCKET_IFNAME names the interface that routes between pods",
    ),
    (
        re.compile(r"unhandled system error"),
        "`unhandled system error`: a system call failed inside NCCL, usually the RDMA device (missing /dev/infiniband, "
        "IPC_LOCK/memlock) or /dev/shm; the WARN line before it names the call",
    ),
    (
        re.compile(r"Failed to open libibverbs"),
        "the image has no libibverbs (rdma-core): NCCL cannot use IB; use an image with rdma-core",
    ),
    (
        re.compile(r"ibv_reg_mr.*failed|Cannot allocate memory"),
        "memory registration failed: the container lacks IPC_LOCK (memlock limit); add the capability",
    ),
    (
        re.compile(
            r"\bibv_(?:create_qp|create_cq|alloc_pd|open_device)\b.{0,80}fail|fail.{0,40}\bibv_(?:create_qp|create_cq)"
        ),
        "a verbs call that allocates RDMA resources failed (queue pair, completion queue): the locked-memory limit "
        "(IPC_LOCK) or the device's own limits; add IPC_LOCK and check ulimit -l in the pod",
    ),
    (
        re.compile(r"\bibv_modify_qp\b.{0,80}fail|fail.{0,40}\bibv_modify_qp"),
        "connecting an RDMA queue pair failed (ibv_modify_qp): on RoCE a GID index without an address of the peers' "
        "family (NCCL_IB_GID_INDEX, the rail's IP), on IB a port that is down or in another partition",
    ),
    (
        re.compile(r"Bootstrap : no socket interface found"),
        "NCCL_SOCKET_IFNAME matches no interface of the pod; use the primary interface (=eth0)",
    ),
    (
        re.compile(r"No space left on device|Bus error|Error while creating shared memory segment"),
        "/dev/shm is too small: mount a memory-backed emptyDir with a larger sizeLimit",
    ),
    (
        re.compile(
            r"NET/OFI .{0,120}(?:fi_getinfo\(\) call failed|Creating new endpoint.{0,120}failed)"
            r"|NET/OFI Couldn't open|provider efa output empty list"
        ),
        "aws-ofi-nccl found no usable EFA device: the pod lacks the vpc.amazonaws.com/efa resource (and with it "
        "/dev/infiniband)",
    ),
    (
        re.compile(r"Test (?:NCCL |CUDA )?failure"),
        "nccl-tests stopped on an error (the line names the NCCL or CUDA call): the results table is incomplete",
    ),
    (
        re.compile(r"[Cc]ollective mismatch|Mismatched collective|op mismatch"),
        "ranks called different collectives (or the same one with other sizes) at the same step: a program bug, or "
        "ranks out of step after one failed; the run is stuck or wrong, not slow",
    ),
    (
        re.compile(r"Cuda failure|ncclUnhandledCudaError|unhandled cuda error"),
        "a CUDA call failed inside NCCL (the quoted error names it: out of memory, an initialization error when the "
        "pod does not see its GPUs, an operation not permitted for NVLS/multicast without the fabric manager or IMEX)",
    ),
    (
        re.compile(r"Connection closed by remote peer|remote process exited"),
        "a peer closed its connection or exited: another rank died first (out of memory, a crash, a timeout); its own "
        "log names why, and this rank's failure follows from it",
    ),
    (
        re.compile(r"fe80:[0-9a-fA-F:]*%\w+"),
        "NCCL connected over an IPv6 link-local address (fe80::...%iface): NCCL_SOCKET_IFNAME matched an interface "
        "that does not route between the nodes (a docker or veth link, an IB port's link-local); name the routed one",
    ),
    (
        re.compile(r"socketStartConnect|socketFinalizeAccept|socketPollConnect|Connection refused|Connection reset"),
        "a TCP connection between ranks failed or was answered by something else (bootstrap or the socket "
        "transport): NCCL_SOCKET_IFNAME picked an interface that does not route between the pods (a link-local or "
        "another job's address), or a firewall; name the routed interface",
    ),
]
# Failures that only say the node has no RDMA device for NCCL: a failure where RDMA was expected, nothing on a
# one-node run or a TCP fabric (NCCL probes IB first everywhere).
RDMA_ABSENT = [
    (
        re.compile(r"NET/IB : No device found"),
        "no RDMA device in the pod: the RDMA resource (rdma/..., nvidia.com/sriov_...) was not requested or "
        "NCCL_IB_HCA matches no device",
    ),
]
# ibv_wc_status (rdma-core libibverbs/verbs.h, enum ibv_wc_status): what a completion error's number means.
WC_STATUS = {
    4: "local protection error (4): the NIC could not access the buffer it was given, usually GPU memory "
    "GPUDirect cannot map (nvidia-peermem or dmabuf missing or broken: set gpu.gpuDirect, or try "
    "NCCL_NET_GDR_LEVEL=LOC to confirm)",
    5: "work request flushed (5): the queue pair was already in error after an earlier failure; the first error "
    "on the peer or on this rank is the cause",
    10: "remote access error (10): the peer refused the RDMA write (its memory registration is gone: the peer "
    "crashed or restarted)",
    12: "transport retry count exceeded (12): the peer never acknowledged: a link flapped, the RoCE fabric dropped "
    "packets (PFC/ECN) or the peers' GIDs do not match; check the port counters and NCCL_IB_GID_INDEX / NCCL_IB_TC",
    13: "receiver-not-ready retry count exceeded (13): the peer stopped posting receives (it hung or crashed)",
}
COMPLETION = re.compile(r"Got completion (?:from peer .{0,80})?with (?:error|status)[ =:]*(\d{1,3})?")
# An NCCL WARN line: its text, quoted in the reasons when no pattern above knows it.
WARN_TEXT = re.compile(r"NCCL WARN (.{1,200})")
MAX_WARNINGS = 5
QUOTE = 160  # characters of a log line quoted in a reason
FAILURE_HINT = re.compile(
    r"WARN|Watchdog|rror|ailure|ailed|imeout|imed out|No device found|No space left|ismatch|socket|empty list"
    r"|Connection|exited|fe80:|not working"
)

NO_DEBUG = "run with NCCL_DEBUG=INFO"
# The transports the NET modules give, as the kinds table names them (a renamed one fails the type check here).
SOCKET: Transport = "socket"
IB: Transport = "ib"
ROCE: Transport = "roce"
EFA: Transport = "efa"
# NET modules of one kind's own net plugin, by lowercased name: the module is the transport (Kind.net_modules).
PLUGIN_TRANSPORTS: dict[str, Transport] = {m.lower(): k.transport for k in KINDS.values() for m in k.net_modules}
PLUGIN = "plugin"
# LOCAL (a one-node run) and MNNVL (inside one NVLink clique): what --expect names beside the fabric kinds'
# transports (components/jobs/sections.py, shared with the acceptance that writes the checks).
# aws-ofi-nccl on another libfabric provider than EFA's (Slingshot's cxi, tcp): `libfabric/<provider>`.
OTHER_PROVIDER = "libfabric/"
EFA_PROVIDER = "efa"  # libfabric's name for its EFA provider


def _same_warning(a: str, b: str) -> bool:
    """The same WARN from another rank or peer: equal once numbers are left out."""
    return re.sub(r"\d+", "", a) == re.sub(r"\d+", "", b)


# The host of an init line that each process prints (`Using network`, `NET/IB : Using`, `Init COMPLETE`): two hosts
# make a multi-node run. Unanchored, so that prefixes (timestamps, mpirun's `[1,0]<stdout>:`) do not hide it.
INIT_HOST = re.compile(
    r"([^\s:\[\]<>]{1,253}):\d{1,10}:\d{1,10} \[\d{1,4}\] NCCL INFO "
    r"(?:Using (?:internal )?[Nn]etwork|NET/IB : Using|.{0,200}Init COMPLETE)"
)


# NCCL's profiler plugin (fastpath's telemetry has NCCL load the Inspector by path, NCCL_PROFILER_PLUGIN), as NCCL
# reports loading it under INIT at every release that has one (NVIDIA/nccl@v2.27.7-1 and @v2.30.7-1:
# src/plugin/plugin_open.cc openPluginLib, src/plugin/profiler.cc ncclProfilerPluginLoad, src/plugin/profiler/
# profiler_v*.cc). Loaded: `PROFILER/Plugin: Loaded Inspector (v5)` (2.28 on), `PROFILER/Plugin: loaded Inspector`
# (up to 2.27). The file not there: `PROFILER/Plugin: Could not find: <names>` (up to 2.27 with a trailing `. `),
# where NCCL looking for its default libnccl-profiler.so without NCCL_PROFILER_PLUGIN set is no failure. Opened but
# no profiler API this NCCL knows: `External profiler plugin <name> is unsupported` (2.28 on), `PROFILER/Plugin:
# failed to find ncclProfiler_v1` (up to 2.27, the last of its v4..v1 lookups). Not opened (dlopen's error: another
# architecture, a missing library): `PROFILER/Plugin: [<name>: ]<dlerror>`. Its init failing: `Profiler init failed`.
# NCCL_PROFILER_PLUGIN unset: NCCL looks for its default library; `none` (2.27: it then tries the name and
# libnccl-profiler-none.so): a process told to run without one. Neither is a plugin that failed.
PROFILER_NOT_GIVEN = ("libnccl-profiler.so", "none", "libnccl-profiler-none.so")
PROFILER_LOADED = re.compile(r"PROFILER/Plugin: [Ll]oaded (\S.{0,80}?)\s*$")
PROFILER_NOT_FOUND = re.compile(r"PROFILER/Plugin: Could not find:((?: \S{1,255}){1,8})")
PROFILER_UNSUPPORTED = re.compile(
    r"External profiler plugin (\S{1,255}) is unsupported|PROFILER/Plugin: failed to find ncclProfiler_v1\b"
)
PROFILER_BENIGN = ("Loaded ", "loaded ", "Could not find", "failed to find", "Plugin name set", "Closing", "init ")
PROFILER_OPEN_ERROR = re.compile(r"PROFILER/Plugin: (\S.{0,200}?\.so\b.{0,200})$")
# 2.28 on: INFO `Profiler init failed with error '%d': %s.`; 2.27: WARN `Profiler init failed with error (%d).`
PROFILER_INIT_FAILED = re.compile(r"Profiler init failed with error.{0,80}")
# The Inspector's own line once it set up a communicator (INFO INIT, every build from NVIDIA/nccl@v2.28.3-1:
# ext-profiler/inspector/inspector_plugin.cc to v2.30.7-1:plugins/profiler/inspector/inspector_plugin.cc
# inspectorPluginInit). From 2.29.3 a failed setup (NCCL_INSPECTOR_ENABLE not 1, its dump directory or thread)
# returns success with no such line and its reason under NCCL_DEBUG_SUBSYS PROFILE only: loaded, but inert.
INSPECTOR_COMM = re.compile(r"PROFILER/Plugin: init commName: .{0,300}? nranks: (\d{1,9}) rank: (\d{1,9})")
INSPECTOR = "Inspector"  # its name (ncclProfiler_v5.name)
# ... and what every process's Inspector prints, bare (NCCL's VERSION level), when NCCL_INSPECTOR_ENABLE is not a
# non-zero integer (atoi: `true` is 0): it is off by default (v2.28.3-1 to v2.30.7-1 inspector.cc inspectorGlobalInit).
INSPECTOR_DISABLED = re.compile(r"NCCL Inspector Plugin DISABLED \(NCCL_INSPECTOR_ENABLE=(.{0,40}?)\)")
# The Inspector as built from NVIDIA/nccl (ext-profiler/inspector from v2.28.3-1, plugins/profiler/inspector from
# v2.29.7-1; its Prometheus output from v2.29.3-1) exports ncclProfiler_v5 only, which NCCL loads from 2.28.3
# (src/plugin/profiler/profiler_v5.cc is new there; v2.27.7-1 looks up v4..v1).
PROFILER_V5_NCCL = (2, 28, 3)


def profiler_line(line: str) -> bool:
    """Whether a line may tell of the profiler plugin (`Parser._profiler` reads it; the bulk reader feeds it whole:
    its numbers, v1 or v4, a rank, decide what it says)."""
    return "PROFILER" in line or "rofiler" in line or "Inspector Plugin" in line


# Why a process ran without the plugin it was given (the judge adds what the NCCL version says to the interface one).
PROFILER_MISSING = (
    "NCCL could not find the profiler plugin NCCL_PROFILER_PLUGIN names: the init container that copies it from "
    "monitoring.ncclInspectorImage did not put it there (the image holds it elsewhere), the variable names another "
    "path, or the file is for another CPU architecture (the loader may report that as not found)"
)
PROFILER_UNKNOWN_INTERFACE = "NCCL found no profiler interface it knows in the plugin"
PROFILER_START_FAILED = (
    "the profiler plugin failed to start (its init returned an error) and NCCL went on without it: the plugin's "
    "reason is logged under NCCL_DEBUG_SUBSYS PROFILE"
)
PROFILER_DISABLED = (
    "the Inspector loaded disabled: NCCL_INSPECTOR_ENABLE must be 1 (it reads the value as an integer, so `true` "
    "is 0); it exports nothing"
)
PROFILER_NOT_LOADED = (
    "NCCL could not load the profiler plugin (the dynamic loader's error is quoted): a plugin built against a newer "
    "glibc or libstdc++ than the training image has, or for another CPU architecture (an x86_64 build on Grace); "
    "build it in or for the training image"
)


# A communicator's node count (`comm 0x... rank 0 nRanks 16 nNodes 2 localRanks 8`, NCCL 2.19 on): more than one.
NNODES_MANY = re.compile(r"\bnNodes (?:[2-9]|[1-9]\d{1,6})\b")

# Multi-node NVLink (NVIDIA/nccl@v2.30.7-1): each rank's communicator line ends with its MNNVL flag (src/init.cc
# initTransportsRank: `comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL %d`; the clique counts as
# one node), a rank whose check passed names its clique (src/mnnvl.cc ncclMnnvlCheck: `MNNVL %d cliqueId %x
# cliqueSize %d cliqueRank %d nvlDomainSize %d`), and its P2P connections are `via P2P/MNNVL` (src/transport/p2p.cc
# p2pSendSetup: `P2P/%s` with MNNVL or CUMEM), within a tray too.
COMM_MNNVL = re.compile(r"\blocalRank \d{1,9} MNNVL ([01])\b")
MNNVL_CLIQUE = re.compile(r"\bMNNVL \d{1,3} cliqueId [0-9a-fA-F]{1,8} cliqueSize (\d{1,5})\b")
MNNVL_CHANNEL = "P2P/MNNVL"


@dataclass
class Report:
    transport: str = "unknown"  # ib, roce, efa, socket, local (single node: P2P/SHM only), mnnvl, unknown
    gdr: bool | None = None  # GDRDMA on the NET channel lines; None: the log has no NET channel line to show it
    fell_back_to_socket: bool = False
    nranks: int | None = None
    init_complete: int = 0
    nccl_version: str | None = None
    avg_busbw_gbps: float | None = None
    peak_busbw_gbps: float | None = None
    peak_message_bytes: int | None = None
    channels: dict[str, int] = field(default_factory=dict)
    networks: list[str] = field(default_factory=list)  # NET module names: IB, IBext_v8, AWS Libfabric, Socket...
    link_layers: list[str] = field(default_factory=list)  # of the verbs devices NCCL listed: IB, RoCE
    nics: list[str] = field(default_factory=list)  # the longest NIC list one process printed, `device:port`
    net_devices: list[int] | None = None  # NET device indices the channel lines used; None: not read
    failures: list[str] = field(default_factory=list)  # what each known failure means, quoting its first line
    warnings: list[str] = field(default_factory=list)  # NCCL WARN lines no pattern knows, distinct, the first few
    verdict: str = "fail"  # pass, warn, fail, incomplete
    reasons: list[str] = field(default_factory=list)
    not_in_log: list[str] = field(default_factory=list)  # what this log cannot show, asked for or not
    # not part of the JSON contract's headline, kept for the reasons
    nccl_lines: int = 0
    net_channels: int = 0
    test_ranks: int = 0  # ranks nccl-tests listed under "Using devices"
    transport_note: str = ""
    unknown_nets: list[str] = field(default_factory=list)
    ofi_provider: str | None = None
    socket_interfaces: list[str] = field(default_factory=list)
    bootstrap_interfaces: list[str] = field(default_factory=list)  # where NCCL bootstrapped (Bootstrap / OOB)
    env: dict[str, str] = field(default_factory=dict)
    fewest_nics: list[str] | None = None  # the shortest NIC list one process printed; None: no process printed one
    fewest_nics_host: str = ""  # the host of the process that printed it
    multi_host: bool = False  # NCCL init lines of two hosts or more (a multi-node run, whatever its channels show)
    mnnvl: bool | None = None  # the communicator lines' MNNVL flag: False once one says 0; None: no such line
    clique_size: int | None = None  # GPUs of the NVLink clique NCCL's MNNVL check found (the largest printed)
    rdma_absent: list[str] = field(default_factory=list)  # RDMA_ABSENT meanings seen, quoting their first line
    profiler: str | None = None  # the profiler plugin NCCL loaded (`Inspector (v5)`), the first one seen
    profiler_failures: list[str] = field(default_factory=list)  # why NCCL ran without the one it was given
    profiler_unset: bool = False  # a process was given no plugin (NCCL_PROFILER_PLUGIN unset or `none`)
    profiler_ranks: int = 0  # ranks on which the Inspector set up a communicator (of the largest size it logged)
    failure_seen: set[str] = field(default_factory=set)  # meanings already reported (each once)
    quoted_warn: set[str] = field(default_factory=set)  # ... whose quote is an NCCL WARN line


def strip_prefix(line: str) -> str:
    """The line as the program wrote it: surrounding blanks and collector prefixes removed."""
    line = line.strip()
    if m := PREFIX.match(line):
        line = line[m.end() :].lstrip()
    return line


def transport_name(via: str) -> str:
    """`NET/IB/0/GDRDMA` -> `NET/IB/GDRDMA`, `NET/AWS Libfabric/0/GDRDMA/Shared` -> `NET/AWS Libfabric/GDRDMA`,
    `P2P/CUMEM/read` -> `P2P/CUMEM`, `direct shared memory` -> `SHM`: per-channel detail without ids."""
    if via.startswith("direct shared memory"):
        return "SHM"
    parts = [p.strip() for p in via.split("/")]
    if parts[0] == "NET":
        return "/".join(parts[:2] + (["GDRDMA"] if any(p.startswith("GDRDMA") for p in parts[2:]) else []))
    return "/".join(parts[:2])


def net_device(via: str) -> int | None:
    """The NET device a channel used, from its `via` text: `NET/IB/3/GDRDMA` -> 3, `NET/AWS Libfabric/0` -> 0."""
    parts = via.split("/", 3)
    if len(parts) < 3 or parts[0] != "NET" or not (parts[2].isascii() and parts[2].isdigit() and len(parts[2]) <= 3):
        return None
    return int(parts[2])


def net_family(name: str) -> str | None:
    """What a NET module name is: `ib` (verbs: the internal IB, the HPC-X plugin's IBext / IBext_v6..v11, UCX),
    `ofi` (aws-ofi-nccl: Libfabric, AWS Libfabric up to 1.11, OFI), `plugin` (a kind's own net plugin:
    PLUGIN_TRANSPORTS), `socket`, or None for one not known here."""
    lower = name.lower()
    if lower == "socket":
        return "socket"
    if lower in PLUGIN_TRANSPORTS:
        return PLUGIN
    if lower == "ib" or lower.startswith("ibext") or lower in ("ucx", "ucx-rma"):
        return "ib"
    if lower in ("libfabric", "aws libfabric", "ofi"):
        return "ofi"
    return None


class Parser:
    """Reads a log one line at a time; memory stays bounded whatever the log holds."""

    def __init__(self, bootstrap: bool = True, devices: bool = True) -> None:
        # Whether to read the interfaces NCCL bootstrapped on and the NET devices of the channel lines: each is a
        # regex pass over the blocks that hold them (bulk.py), so only when asked.
        self.read_bootstrap = bootstrap
        self.read_devices = devices
        self.r = Report()
        self.channels: Counter[str] = Counter()
        self.link_layers: set[str] = set()
        self.networks: set[str] = set()
        self.nics: list[str] = []  # the longest NIC list a process printed, the first of that length
        self.fewest: list[str] | None = None  # the shortest, the first of that length, and its host
        self.fewest_host = ""
        self.net_devices: set[int] = set()  # at most 1000: three digits
        self.bootstrap: list[str] = []  # interfaces in the order first seen (a list: bounded, added in order)
        self.complete: set[int] = set()
        self.hosts: set[str] = set()  # at most 2: only whether there are several counts
        self.test_ranks: set[int] = set()
        self.table: tuple[int, list[int]] | None = None  # columns of the nccl-tests header, busbw positions
        self.avg_sum = 0.0
        self.avg_count = 0
        self.inspector_nranks = 0  # the largest communicator the Inspector set up, and its ranks seen
        self.inspector_ranks: set[int] = set()

    def feed(self, raw: str) -> None:
        line = strip_prefix(raw)
        if not line:
            return
        if self.read_bootstrap and "Using " in line and (names := BOOTSTRAP_USING.findall(line)):
            self._bootstrap(names)
        r, first = self.r, line[0]
        if first == "#":  # nccl-tests' banner, device list, table header and summary (and comments)
            self._test_comment(line)
            return
        if "NCCL" in line:
            self._nccl(line)
        if first.isdigit():
            self._result_row(line)
        if FAILURE_HINT.search(line):
            self._failure(line)
        if not r.multi_host and "NCCL INFO" in line and ("Using" in line or "COMPLETE" in line or "nNodes" in line):
            self._host(raw)

    def _failure(self, line: str) -> None:
        """What a line that may tell of a failure tells: a known failure (once, quoting the first line that showed
        it, or the first NCCL WARN that did once one does), an RDMA device that is absent, or an NCCL WARN no pattern
        knows (quoted, the first few distinct)."""
        r = self.r
        known = False
        for pattern, meaning in FAILURES:
            if found := pattern.search(line):
                known = True
                self._record(r.failures, meaning, line, found.start())
        if "completion" in line and (m := COMPLETION.search(line)):
            known = True
            code = int(m.group(1)) if m.group(1) else None
            known_code = WC_STATUS.get(code) if code is not None else None
            meaning = "an RDMA work request completed with an error: " + (
                known_code or f"status {code if code is not None else 'not shown'}: look it up in ibv_wc_status"
            )
            self._record(r.failures, meaning, line, m.start())
        for pattern, meaning in RDMA_ABSENT:
            if found := pattern.search(line):
                known = True
                self._record(r.rdma_absent, meaning, line, found.start())
        known = known or PROFILER_INIT_FAILED.search(line) is not None  # the plugin's: read by _profiler
        if not known and "NCCL WARN" in line and (m := WARN_TEXT.search(line)):
            text = m.group(1).strip()
            if len(r.warnings) < MAX_WARNINGS and not any(_same_warning(text, w) for w in r.warnings):
                r.warnings.append(text)

    def _record(self, into: list[str], meaning: str, line: str, start: int) -> None:
        """`meaning` once in `into`, quoting the line from the WARN that holds the match (a line may hold several,
        glued), else from the match; a quote of a line without a WARN gives way to the first WARN that says it."""
        r = self.r
        warn = line.rfind("NCCL WARN", 0, start + 1)
        entry = f"{meaning} (log: {line[warn if warn >= 0 else start :].strip()[:QUOTE]!r})"
        if meaning not in r.failure_seen:
            r.failure_seen.add(meaning)
            into.append(entry)
            if warn >= 0:
                r.quoted_warn.add(meaning)
        elif warn >= 0 and meaning not in r.quoted_warn:
            r.quoted_warn.add(meaning)
            into[next(i for i, e in enumerate(into) if e.startswith(f"{meaning} (log: "))] = entry

    def _host(self, raw: str) -> None:
        if (m := INIT_HOST.search(raw)) is not None:
            self.hosts.add(m.group(1))
            self.r.multi_host = len(self.hosts) > 1
        if "nNodes" in raw and NNODES_MANY.search(raw):
            self.r.multi_host = True

    def _nccl(self, line: str) -> None:
        r = self.r
        if (
            " NCCL INFO " in line
            or " NCCL WARN " in line
            or line.startswith(("NCCL version", "NCCL INFO", "NCCL WARN"))
        ):
            r.nccl_lines += 1
        if not r.nccl_version and (m := VERSION.search(line)):
            r.nccl_version = m.group(1)
        if " via " in line and (m := CHANNEL.search(line)):
            name = transport_name(m.group(1))
            if name in self.channels or len(self.channels) < MAX_NAMES:
                self.channels[name] += 1
            if name.startswith("NET/"):
                r.net_channels += 1
                self._network(name.split("/")[1])
                if self.read_devices and (device := net_device(m.group(1))) is not None:
                    self.net_devices.add(device)
            return
        if "NET/IB" in line:
            self.link_layers.update(LINK_LAYER.findall(line))
            self._nic_line(line)
            if "NCCL WARN NET/IB : " in line:  # the IB transport's own error: a connection went over it
                self._network("IB")
        if "etwork" in line and (m := USING_NETWORK.search(line)):
            self._network(m.group(1))
        if "NET/Socket : Using" in line and (m := NET_SOCKET_USING.search(line)):
            r.socket_interfaces = re.findall(r"\[\d+\](\w+):", m.group(1))[:MAX_NAMES]
        if "NET/OFI" in line and (m := OFI_PROVIDER.search(line)):
            r.ofi_provider = m.group(1).lower()
        if "nranks" in line:
            if "Init COMPLETE" in line and (m := INIT.search(line)) and len(self.complete) < MAX_RANKS:
                self.complete.add(int(m.group(1)))
            if m := NRANKS.search(line):
                r.nranks = max(r.nranks or 0, int(m.group(1)))
        if "MNNVL" in line:
            self._mnnvl(line)
        if profiler_line(line):
            self._profiler(line)
        if "set by environment" in line and (m := ENV_SET.search(line)):
            if m.group(1) in r.env or len(r.env) < MAX_NAMES:
                r.env[m.group(1)] = m.group(2)

    def _mnnvl(self, line: str) -> None:
        r = self.r
        if m := COMM_MNNVL.search(line):
            r.mnnvl = m.group(1) == "1" and r.mnnvl is not False
        if m := MNNVL_CLIQUE.search(line):
            r.clique_size = max(r.clique_size or 0, int(m.group(1)))

    def _profiler(self, line: str) -> None:
        """What NCCL said of loading the profiler plugin: its name once loaded, the ranks on which the Inspector set
        up a communicator, or why a process runs without it (each reason once, quoting its first line)."""
        r = self.r
        if (m := INSPECTOR_COMM.search(line)) is not None:
            nranks, rank = int(m.group(1)), int(m.group(2))
            if nranks > self.inspector_nranks:  # the largest communicator's ranks are the ones counted
                self.inspector_nranks, self.inspector_ranks = nranks, set()
            if nranks == self.inspector_nranks and len(self.inspector_ranks) < MAX_RANKS:
                self.inspector_ranks.add(rank)
        elif (m := INSPECTOR_DISABLED.search(line)) is not None:
            self._record(r.profiler_failures, PROFILER_DISABLED, line, m.start())
        elif (m := PROFILER_LOADED.search(line)) is not None:
            r.profiler = r.profiler or m.group(1).rstrip(".")
        elif (m := PROFILER_NOT_FOUND.search(line)) is not None:
            names = [n.rstrip(".") for n in m.group(1).split()]
            if all(n.lower() in PROFILER_NOT_GIVEN for n in names):
                r.profiler_unset = True
            else:
                self._record(r.profiler_failures, PROFILER_MISSING, line, m.start())
        elif (m := PROFILER_UNSUPPORTED.search(line)) is not None:
            self._record(r.profiler_failures, PROFILER_UNKNOWN_INTERFACE, line, m.start())
        elif (m := PROFILER_INIT_FAILED.search(line)) is not None:
            self._record(r.profiler_failures, PROFILER_START_FAILED, line, m.start())
        elif (m := PROFILER_OPEN_ERROR.search(line)) is not None and not m.group(1).startswith(PROFILER_BENIGN):
            self._record(r.profiler_failures, PROFILER_NOT_LOADED, line, m.start())

    def _nic_line(self, line: str) -> None:
        """A line of NCCL's IB transport: one process's NIC list (`NET/IB : Using ...`, or none found), if it is one.
        The longest and the shortest list are kept, each the first of its length."""
        if "Using" in line and (m := IB_USING.search(line)):
            found = NIC.findall(line, m.end())
        elif NO_IB_DEVICE in line:
            found = []
        else:
            return
        self.link_layers.update(layer for _, layer in found)
        names = [name for name, _ in found[:MAX_NAMES]]  # as many as the line lists, whatever its digits
        if len(names) > len(self.nics):
            self.nics = names
        if self.fewest is None or len(names) < len(self.fewest):
            host = LINE_HOST.search(line)
            self.fewest, self.fewest_host = names, host.group(1) if host else ""

    def _bootstrap(self, names: Iterable[str]) -> None:
        for name in names:
            if name not in self.bootstrap and len(self.bootstrap) < MAX_NAMES:
                self.bootstrap.append(name)

    def _network(self, name: str) -> None:
        if name in self.networks or len(self.networks) < MAX_NAMES:
            self.networks.add(name)

    def _test_comment(self, line: str) -> None:
        if "busbw" in line and "size" in line:  # the nccl-tests header names the columns of this table
            cols = line.lstrip("#").split()
            self.table = (len(cols), [i for i, col in enumerate(cols) if col == "busbw"])
        elif "Rank" in line and (m := TEST_RANK.match(line)):
            if len(self.test_ranks) < MAX_RANKS:
                self.test_ranks.add(int(m.group(1)))
        elif "Avg bus bandwidth" in line and (m := AVG_BUSBW.search(line)):
            self.avg_sum += float(m.group(1))
            self.avg_count += 1

    def _result_row(self, line: str) -> None:
        """`  8589934592  2147483648  float  sum  -1  48093.8  178.60  334.89  0  48190.0  178.25  334.22  0`, or
        older tables without root or redop, or with an `error` column: busbw is where the header says, else the
        third of each (time, algbw, busbw, #wrong) group at the end."""
        cols = line.split()
        if len(cols) < 7 or not (
            cols[0].isdigit() and cols[1].isdigit() and len(cols[0]) <= 20 and DATATYPE.fullmatch(cols[2])
        ):
            return
        if self.table and len(cols) == self.table[0]:
            candidates = [cols[i] for i in self.table[1]]
        elif len(cols) >= 11:
            candidates = [cols[-6], cols[-2]]
        else:
            candidates = [cols[-2]]
        values = [float(c) for c in candidates if NUMBER.fullmatch(c)]
        if not values:
            return
        busbw, size, r = max(values), int(cols[0]), self.r
        if r.peak_busbw_gbps is None or (busbw, size) > (r.peak_busbw_gbps, r.peak_message_bytes or 0):
            r.peak_busbw_gbps, r.peak_message_bytes = busbw, size

    def report(self) -> Report:
        r = self.r
        r.channels = dict(sorted(self.channels.items()))
        r.init_complete = len(self.complete)
        r.profiler_ranks = len(self.inspector_ranks)
        r.test_ranks = len(self.test_ranks)
        r.networks = sorted(self.networks)
        r.bootstrap_interfaces = list(self.bootstrap)
        r.link_layers = sorted(self.link_layers)
        r.nics = list(self.nics)
        r.fewest_nics = None if self.fewest is None else list(self.fewest)
        r.fewest_nics_host = self.fewest_host
        r.net_devices = sorted(self.net_devices) if self.read_devices else None
        if self.avg_count:
            r.avg_busbw_gbps = round(self.avg_sum / self.avg_count, 3)
        channel_nets = {c.split("/")[1] for c in self.channels if c.startswith("NET/")}
        # Channel lines say what each connection used; "Using network" only what was picked, so it counts for logs
        # without them. A one-node run picks a network at init (IB, or Socket where there is no HCA) and then
        # connects every channel over P2P/SHM: that is a local run, not an IB run nor a fallback.
        # A multi-node run whose excerpt holds only its P2P/SHM channel lines (one node's) used the network it picked:
        # its `Using network` lines (or, without them, the NICs its IB transport listed) say which.
        local_only = bool(self.channels) and not channel_nets
        names = channel_nets if self.channels and not (local_only and r.multi_host) else self.networks
        if local_only and r.multi_host and not names and self.link_layers:
            names = {"IB"}
        # Every connection of a multi-node run over multi-node NVLink: the network picked at init carries nothing.
        mnnvl = r.multi_host and local_only and MNNVL_CHANNEL in self.channels and r.mnnvl is not False
        if mnnvl:
            names = set()
        families = {net_family(n) for n in names}
        chosen = r.env.get("NCCL_IB_DISABLE") == "1" or r.env.get("NCCL_NET", "").lower() == "socket"
        socket = "socket" in families or ("Socket" in self.networks and not self.channels)
        # Sockets someone chose (NCCL_NET=Socket, NCCL_IB_DISABLE=1) are no fallback.
        r.fell_back_to_socket = socket and not chosen
        if mnnvl:
            r.transport = MNNVL
        elif socket:
            r.transport = SOCKET
        elif PLUGIN in families:
            r.transport = min(PLUGIN_TRANSPORTS[n.lower()] for n in names if n.lower() in PLUGIN_TRANSPORTS)
        elif "ofi" in families:
            # aws-ofi-nccl also drives Slingshot (cxi) and libfabric's own tcp provider: only efa is EFA.
            r.transport = EFA if r.ofi_provider in (None, EFA_PROVIDER) else f"{OTHER_PROVIDER}{r.ofi_provider}"
        elif "ib" in families:
            r.transport = ROCE if self.link_layers == {"RoCE"} else IB
        elif None in families:
            r.unknown_nets = sorted(n for n in names if net_family(n) is None)
            r.transport_note = (
                f"unknown (NET/{', NET/'.join(r.unknown_nets)}: a network module ncclcheck does not know)"
            )
        elif self.channels and not r.multi_host:
            r.transport = LOCAL
        elif self.channels:
            r.transport_note = (
                "unknown (a multi-node run whose lines here show only its P2P/SHM channels and no 'Using network' "
                "line: run with NCCL_DEBUG_SUBSYS=INIT,NET)"
            )
        elif not r.nccl_lines:
            r.transport_note = f"unknown ({NO_DEBUG})"
        else:
            r.transport_note = (
                "unknown (no channel or 'Using network' lines: run with NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,NET)"
            )
        net = [c for c in self.channels if c.startswith("NET/")]
        r.gdr = any(c.endswith("GDRDMA") for c in net) if net else None
        return r


def read_lines(path: Path) -> Iterator[str]:
    """The lines of a log, decoded leniently, never more than MAX_LINE characters of one line held."""
    with open(path, encoding="utf-8", errors="replace") as f:
        while line := f.readline(MAX_LINE):
            if not line.endswith("\n"):  # longer than MAX_LINE: skip the rest of it
                rest = line
                while rest and not rest.endswith("\n"):
                    rest = f.readline(MAX_LINE)
            yield line


def parse(
    lines: Iterable[str], section: str | int | None = None, bootstrap: bool = True, devices: bool = True
) -> tuple[Report, bool]:
    """The report of a log (of its `section`-node run when given) and whether that run was found. A run that
    starts again starts a fresh report; a log cut off mid-run is judged on what is there. `bootstrap`: read the
    interfaces NCCL bootstrapped on; `devices`: the NET devices of the channel lines."""
    parser = Parser(bootstrap, devices)
    if section is None:
        for line in lines:
            parser.feed(line)
        return parser.report(), True
    begin, end = section_markers(section)
    found = inside = False
    for line in lines:
        if MARKER in line:
            marker = strip_prefix(line)
            if marker == begin:
                parser, found, inside = Parser(bootstrap, devices), True, True
                continue
            if marker == end and inside:
                break
        if inside:
            parser.feed(line)
    return parser.report(), found


def parse_text(text: str, section: str | int | None = None) -> Report:
    """`parse` of a log held in a string (tests, small logs)."""
    return parse(text.splitlines(), section)[0]
