"""Read NCCL_DEBUG=INFO logs and nccl-tests output and say what happened, and whether it is the fast path.

    python -m tools.ncclcheck LOG... [--expect ib|roce|efa|socket|local] [--min-busbw GBPS] [--warn-busbw GBPS]
                              [--ranks N] [--section NODES] [--allow-no-gdr] [--format text|json]

Reports the transport each channel used (NET/IB with or without GDRDMA, the HPC-X plugin's NET/IBext*, aws-ofi-nccl's
NET/Libfabric, NET/AWS Libfabric and NET/OFI, NET/Socket, P2P, SHM), whether any rank fell back to Socket, nranks and
how many ranks reached "Init COMPLETE", the NCCL version, the average and peak bus bandwidth with the message size at
the peak, and known failure lines. RoCE is told from InfiniBand by the link layer of the devices NCCL lists
(`mlx5_0:1/RoCE`), whichever verbs module (IB, IBext_v8, ...) drives them.

It judges what the log shows and says what it cannot show. Exit 0 (`pass`, or `warn` under --warn-busbw but above
the floor) when every check asked for holds: the expected transport (with GPUDirect RDMA on RDMA fabrics), every
expected rank initialised, no failure line, the peak bus bandwidth at the floor. Exit 1 with `fail`, the likely
cause and the knob, when the log shows a check failing; exit 1 with `incomplete` when a check asked for cannot be
judged because its lines are not in this log (nccl-tests output without NCCL INFO lines has bandwidth but no
transport; a cut log has no results table). What was not asked for and is not in the log is only reported. Exit 2
when a log cannot be read.

Logs are read line by line in bounded memory whatever their size; prefixes that launchers and log collectors put
before each line (Open MPI `[1,0]<stdout>:`, `kubectl logs --timestamps` and `--prefix`, NCCL's own `[%F %T]`
timestamps, Slurm `--label`) are ignored. --section N reads only the N-node run of a fastpath acceptance log (between
its marker lines).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

# Longest line read whole; the rest of a longer line (binary garbage, a minified blob) is skipped, not held.
MAX_LINE = 1 << 16
# Bounds on what is remembered per log, so memory does not grow with the log or with garbage in it.
MAX_NAMES = 64  # distinct channel transports, network names, env variables
MAX_RANKS = 1 << 17

# What launchers and collectors put before a line, possibly several: `[1,3]<stdout>:` (mpirun --tag-output),
# `[pod/nccl-acceptance-launcher/launcher] ` (kubectl logs --prefix), `2024-05-01T12:00:00.123456789Z `
# (kubectl logs --timestamps; CloudWatch copies add ` | `), `[2025-10-16 22:16:08] ` (NCCL_DEBUG_TIMESTAMP_FORMAT),
# `12: ` (srun --label).
PREFIX = re.compile(r"(?:\[\d{1,6},\d{1,9}\]<std(?:out|err)>:"
                    r"|\[pod/[^\]\s]{1,300}\]\s"
                    r"|\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?(?:\s+\|)?\s+"
                    r"|\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?\]\s*"
                    r"|\|\s+"
                    r"|\d{1,6}:\s)+")

VERSION = re.compile(r"NCCL version (\d{1,3}\.\d{1,3}\.\d{1,3})")
# `Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0/GDRDMA` and the older shapes: `Channel 01 : 24[101c0] ->
# 31[a01d0] via P2P/IPC/read` (bus ids), `Ring 00 : 7 -> 8 [send] via NET/AWS Libfabric/0`, `... via direct shared
# memory`. The transport after `via` may hold spaces (`AWS Libfabric`, `P2P/direct pointer`).
CHANNEL = re.compile(r"\b(?:Channel|Ring) \d{1,4}(?:/\d{1,4})? :\s+\d{1,9}(?:\[[0-9a-fA-Fx:.]{1,20}\])?\s+->"
                     r"\s+\d{1,9}(?:\[[0-9a-fA-Fx:.]{1,20}\])?(?:\s+\[(?:send|receive)\])?\s+via\s+(\S.{0,200}?)\s*$")
# A verbs device with its link layer, in every shape NCCL has printed the device list: `[0]mlx5_0:1/IB`,
# `[0]={[0] mlx5_2:1/RoCE, [1] mlx5_3:1/RoCE}` (merged NICs), `[0]mlx5_9:1/IB/SHARP`, `NET/IB: [0] mlx5_1:1/IB`.
LINK_LAYER = re.compile(r"[\w.-]{1,64}:\d{1,3}/(IB|RoCE)\b")
NET_SOCKET_USING = re.compile(r"NET/Socket : Using (.*)")
USING_NETWORK = re.compile(r"Using (?:internal )?[Nn]etwork (\S.{0,60}?)\s*$")
OFI_PROVIDER = re.compile(r"NET/OFI Selected [Pp]rovider is (\w{1,32})")
INIT = re.compile(r"rank (\d{1,9}) nranks (\d{1,9}) .*- Init COMPLETE")
NRANKS = re.compile(r"rank \d{1,9} nranks (\d{1,9})")
ENV_SET = re.compile(r"(NCCL_\w{1,64}) set by environment to (\S{0,200})")
# nccl-tests: `#  Rank  8 Group  0 Pid     41 on llm-ib-worker-1 device  0 [0x18] NVIDIA H100 80GB HBM3`
TEST_RANK = re.compile(r"^#\s+Rank\s+(\d{1,9})\s+(?:Group\s+\d+\s+)?Pid\b")
AVG_BUSBW = re.compile(r"# Avg bus bandwidth\s*:\s*(\d{1,9}(?:\.\d{1,9})?)")
NUMBER = re.compile(r"\d{1,9}(?:\.\d{1,9})?")
DATATYPE = re.compile(r"[a-z][a-z0-9_]{0,15}")

# (pattern, what it means and which knob fixes it)
FAILURES = [
    (re.compile(r"Watchdog caught collective operation timeout|Timeout|timed out|timeout", re.I),
     "a timeout: a rank never joined or the network path between pods is blocked; check that every pod started "
     "(gang scheduling) and that NCCL_SOCKET_IFNAME names the interface that routes between pods"),
    (re.compile(r"unhandled system error"),
     "`unhandled system error`: a system call failed inside NCCL, usually the RDMA device (missing /dev/infiniband, "
     "IPC_LOCK/memlock) or /dev/shm; the WARN line before it names the call"),
    (re.compile(r"NET/IB : No device found"),
     "no RDMA device in the pod: the RDMA resource (rdma/..., nvidia.com/sriov_...) was not requested or "
     "NCCL_IB_HCA matches no device"),
    (re.compile(r"Failed to open libibverbs"),
     "the image has no libibverbs (rdma-core): NCCL cannot use IB; use an image with rdma-core"),
    (re.compile(r"ibv_reg_mr.*failed|Cannot allocate memory"),
     "memory registration failed: the container lacks IPC_LOCK (memlock limit); add the capability"),
    (re.compile(r"Bootstrap : no socket interface found"),
     "NCCL_SOCKET_IFNAME matches no interface of the pod; use the primary interface (=eth0)"),
    (re.compile(r"No space left on device|Bus error|Error while creating shared memory segment"),
     "/dev/shm is too small: mount a memory-backed emptyDir with a larger sizeLimit"),
    (re.compile(r"Got completion (?:from peer .{0,80})?with (?:error|status)"),
     "an RDMA work request completed with an error (status 12: retry count exceeded): a link flapped, the RoCE "
     "fabric dropped packets (PFC/ECN) or the peers' GIDs do not match; check the port counters and "
     "NCCL_IB_GID_INDEX / NCCL_IB_TC"),
    (re.compile(r"NET/OFI .{0,80}fi_getinfo\(\) call failed|NET/OFI Couldn't open"),
     "aws-ofi-nccl found no usable EFA device: the pod lacks the vpc.amazonaws.com/efa resource (and with it "
     "/dev/infiniband)"),
    (re.compile(r"Test (?:NCCL |CUDA )?failure"),
     "nccl-tests stopped on an error (the line names the NCCL or CUDA call): the results table is incomplete"),
]
FAILURE_HINT = re.compile(r"WARN|Watchdog|rror|ailure|ailed|imeout|imed out|No device found|No space left")

NO_DEBUG = "run with NCCL_DEBUG=INFO"


@dataclass
class Report:
    transport: str = "unknown"  # ib, roce, efa, socket, local (single node: P2P/SHM only), unknown
    gdr: bool = False
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
    failures: list[str] = field(default_factory=list)
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
    env: dict[str, str] = field(default_factory=dict)


def strip_prefix(line: str) -> str:
    """The line as the program wrote it: surrounding blanks and collector prefixes removed."""
    line = line.strip()
    if m := PREFIX.match(line):
        line = line[m.end():].lstrip()
    return line


def _transport_name(via: str) -> str:
    """`NET/IB/0/GDRDMA` -> `NET/IB/GDRDMA`, `NET/AWS Libfabric/0/GDRDMA/Shared` -> `NET/AWS Libfabric/GDRDMA`,
    `P2P/CUMEM/read` -> `P2P/CUMEM`, `direct shared memory` -> `SHM`: per-channel detail without ids."""
    if via.startswith("direct shared memory"):
        return "SHM"
    parts = [p.strip() for p in via.split("/")]
    if parts[0] == "NET":
        return "/".join(parts[:2] + (["GDRDMA"] if any(p.startswith("GDRDMA") for p in parts[2:]) else []))
    return "/".join(parts[:2])


def net_family(name: str) -> str | None:
    """What a NET module name is: `ib` (verbs: the internal IB, the HPC-X plugin's IBext / IBext_v6..v11, UCX),
    `ofi` (aws-ofi-nccl: Libfabric, AWS Libfabric up to 1.11, OFI), `socket`, or None for one not known here."""
    lower = name.lower()
    if lower == "socket":
        return "socket"
    if lower == "ib" or lower.startswith("ibext") or lower in ("ucx", "ucx-rma"):
        return "ib"
    if lower in ("libfabric", "aws libfabric", "ofi"):
        return "ofi"
    return None


class Parser:
    """Reads a log one line at a time; memory stays bounded whatever the log holds."""

    def __init__(self) -> None:
        self.r = Report()
        self.channels: Counter[str] = Counter()
        self.link_layers: set[str] = set()
        self.networks: set[str] = set()
        self.complete: set[int] = set()
        self.test_ranks: set[int] = set()
        self.table: tuple[int, list[int]] | None = None  # columns of the nccl-tests header, busbw positions
        self.avg_sum = 0.0
        self.avg_count = 0

    def feed(self, raw: str) -> None:
        line = strip_prefix(raw)
        if not line:
            return
        r, first = self.r, line[0]
        if first == "#":  # nccl-tests' banner, device list, table header and summary (and comments)
            self._test_comment(line)
            return
        if "NCCL" in line:
            self._nccl(line)
        if first.isdigit():
            self._result_row(line)
        if FAILURE_HINT.search(line):
            for pattern, meaning in FAILURES:
                if meaning not in r.failures and pattern.search(line):
                    r.failures.append(meaning)

    def _nccl(self, line: str) -> None:
        r = self.r
        if " NCCL INFO " in line or " NCCL WARN " in line or line.startswith("NCCL version"):
            r.nccl_lines += 1
        if not r.nccl_version and (m := VERSION.search(line)):
            r.nccl_version = m.group(1)
        if " via " in line and (m := CHANNEL.search(line)):
            name = _transport_name(m.group(1))
            if name in self.channels or len(self.channels) < MAX_NAMES:
                self.channels[name] += 1
            if name.startswith("NET/"):
                r.net_channels += 1
                self._network(name.split("/")[1])
            return
        if "NET/IB" in line:
            self.link_layers.update(LINK_LAYER.findall(line))
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
        if "set by environment" in line and (m := ENV_SET.search(line)):
            if m.group(1) in r.env or len(r.env) < MAX_NAMES:
                r.env[m.group(1)] = m.group(2)

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
        if len(cols) < 7 or not (cols[0].isdigit() and cols[1].isdigit() and len(cols[0]) <= 20
                                 and DATATYPE.fullmatch(cols[2])):
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
        r.test_ranks = len(self.test_ranks)
        r.networks = sorted(self.networks)
        r.link_layers = sorted(self.link_layers)
        if self.avg_count:
            r.avg_busbw_gbps = round(self.avg_sum / self.avg_count, 3)
        channel_nets = {c.split("/")[1] for c in self.channels if c.startswith("NET/")}
        # Channel lines say what each connection used; "Using network" what was picked, for logs without them.
        names = channel_nets or self.networks
        families = {net_family(n) for n in names}
        r.fell_back_to_socket = "socket" in families or "Socket" in self.networks
        if r.fell_back_to_socket:
            r.transport = "socket"
        elif "ofi" in families:
            # aws-ofi-nccl also drives Slingshot (cxi) and libfabric's own tcp provider: only efa is EFA.
            r.transport = "efa" if r.ofi_provider in (None, "efa") else f"libfabric/{r.ofi_provider}"
        elif "ib" in families:
            r.transport = "roce" if self.link_layers == {"RoCE"} else "ib"
        elif None in families:
            r.unknown_nets = sorted(n for n in names if net_family(n) is None)
            r.transport_note = (f"unknown (NET/{', NET/'.join(r.unknown_nets)}: a network module ncclcheck does "
                                "not know)")
        elif self.channels:
            r.transport = "local"
        elif not r.nccl_lines:
            r.transport_note = f"unknown ({NO_DEBUG})"
        else:
            r.transport_note = ("unknown (no channel or 'Using network' lines: run with NCCL_DEBUG=INFO and "
                                "NCCL_DEBUG_SUBSYS=INIT,NET)")
        r.gdr = any(c.endswith("GDRDMA") for c in self.channels if c.startswith("NET/"))
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


SECTION_BEGIN = "fastpath-acceptance: begin {n} nodes"
SECTION_END = "fastpath-acceptance: end {n} nodes"


def parse(lines: Iterable[str], section: int | None = None) -> tuple[Report, bool]:
    """The report of a log (of its `section`-node run when given) and whether that run was found. A run that
    starts again starts a fresh report; a log cut off mid-run is judged on what is there."""
    parser = Parser()
    if section is None:
        for line in lines:
            parser.feed(line)
        return parser.report(), True
    begin, end = SECTION_BEGIN.format(n=section), SECTION_END.format(n=section)
    found = inside = False
    for line in lines:
        if "fastpath-acceptance:" in line:
            marker = strip_prefix(line)
            if marker == begin:
                parser, found, inside = Parser(), True, True
                continue
            if marker == end and inside:
                break
        if inside:
            parser.feed(line)
    return parser.report(), found


def parse_text(text: str, section: int | None = None) -> Report:
    return parse(text.splitlines(), section)[0]


def judge(r: Report, expect: str | None, min_busbw: float | None, ranks: int | None, allow_no_gdr: bool,
          warn_busbw: float | None = None) -> Report:
    failed: list[str] = []  # the log shows a check failing
    absent: list[str] = []  # a check asked for whose lines are not in this log
    notes: list[str] = []  # what the log cannot show, not asked for
    if r.unknown_nets and expect:
        failed.append(f"NCCL used NET/{', NET/'.join(r.unknown_nets)}, a network module ncclcheck does not know, "
                      f"where {expect} was expected: check NCCL_NET and NCCL_NET_PLUGIN")
    elif r.transport_note:
        (absent if expect else notes).append(f"transport: {r.transport_note}")
    if expect and r.transport != expect and not r.transport_note:
        if r.transport == "socket" and any(i.startswith("net") for i in r.socket_interfaces):
            failed.append("NCCL used TCP sockets although the pod has secondary networks ("
                          f"{', '.join(i for i in r.socket_interfaces if i.startswith('net'))}): it found no usable "
                          "RDMA device; the RDMA resource is missing from the pod or NCCL_IB_HCA matches no device")
        elif r.transport == "socket" and r.env.get("NCCL_IB_DISABLE") == "1":
            failed.append("NCCL used TCP sockets because NCCL_IB_DISABLE=1: set it to 0 on RDMA fabrics")
        elif r.transport == "socket":
            failed.append("NCCL fell back to TCP sockets: no RDMA device and no secondary networks in the pod; "
                          "request the fabric's RDMA resources and networks (fastpath wires them from the profile)")
        elif expect == "local":
            failed.append(f"a one-node run used the network ({r.transport}): the GPUs did not reach each other "
                          "over NVLink or PCIe P2P; check nvidia-smi topo -m and NCCL_P2P_DISABLE")
        elif r.transport.startswith("libfabric/"):
            failed.append(f"aws-ofi-nccl ran on libfabric's {r.ofi_provider} provider, not efa: the pod sees no EFA "
                          "device (vpc.amazonaws.com/efa resource) or FI_PROVIDER names another provider")
        else:
            failed.append(f"transport is {r.transport}, expected {expect}: check fabric.kind and NCCL_IB_HCA")
    if expect in ("ib", "roce", "efa") and r.transport == expect and not r.gdr and not allow_no_gdr:
        if r.net_channels:
            failed.append("RDMA without GPUDirect (no GDRDMA on the NET channels): data is staged through host "
                          "memory; check gpu.gpuDirect (dmabuf needs the open kernel module, peermem needs "
                          "nvidia-peermem) and NCCL_NET_GDR_LEVEL")
        else:
            absent.append("GPUDirect RDMA: not in this log (no NET channel lines to show GDRDMA): run with "
                          "NCCL_DEBUG_SUBSYS=INIT,NET, or pass --allow-no-gdr")
    _judge_ranks(r, ranks, failed, absent, notes)
    failed += r.failures
    if r.peak_busbw_gbps is None:
        why = ("not in this log (no nccl-tests results table: the run stopped before its first size, or the log "
               "was cut)")
        if min_busbw is not None:
            absent.append(f"bus bandwidth: {why}; the floor of {min_busbw:g} GB/s cannot be checked")
        elif r.nccl_lines:
            notes.append(f"bus bandwidth: {why}")
    elif min_busbw is not None and r.peak_busbw_gbps < min_busbw:
        failed.append(f"peak bus bandwidth {r.peak_busbw_gbps:g} GB/s is under the floor of {min_busbw:g} GB/s "
                      f"({r.peak_busbw_gbps / min_busbw:.0%}): check that every rail is in use (NCCL_IB_HCA, the "
                      "rail resources) and the fabric's health")
    if not r.nccl_lines and r.peak_busbw_gbps is None and not r.failures:
        absent.append("nothing to judge: no NCCL lines and no nccl-tests results in this log; is it the job's log "
                      f"(the MPIJob launcher's, or every worker's)? {NO_DEBUG}")
    r.not_in_log = absent + notes
    r.reasons = failed + absent
    r.verdict = "fail" if failed else "incomplete" if absent else "pass"
    if r.verdict == "pass" and warn_busbw is not None and r.peak_busbw_gbps is not None \
            and r.peak_busbw_gbps < warn_busbw:
        r.verdict = "warn"
        r.reasons = [f"peak bus bandwidth {r.peak_busbw_gbps:g} GB/s passes the floor but is under "
                     f"{warn_busbw:g} GB/s, what healthy links give ({r.peak_busbw_gbps / warn_busbw:.0%}): look "
                     "for a slow rail (ibdiagnet, port counters) before production runs"]
    return r


def _judge_ranks(r: Report, ranks: int | None, failed: list[str], absent: list[str], notes: list[str]) -> None:
    """Init COMPLETE lines show the ranks that initialised; without NCCL INFO lines, nccl-tests' device list and a
    results table (which every rank took part in) show how many ran."""
    if r.nranks is not None or r.init_complete:
        want = ranks or r.nranks or r.init_complete
        if r.init_complete >= want:
            return
        shown = f"{r.init_complete} of {want} ranks reached Init COMPLETE"
        if ranks is not None:
            failed.append(f"{shown}: {want - r.init_complete} missing (a pod not scheduled, crashed, or blocked on "
                          "bootstrap)")
        else:
            notes.append(f"ranks: {shown} in this log; the others' lines are not in it (give --ranks N to require "
                         "them)")
        return
    if r.peak_busbw_gbps is not None and r.test_ranks:
        if ranks is not None and r.test_ranks < ranks:
            failed.append(f"nccl-tests ran on {r.test_ranks} ranks, not {ranks}: check mpirun -np and the "
                          "hostfile's slots")
        return
    why = f"not in this log (no NCCL init lines: {NO_DEBUG})" if not r.nccl_lines else \
        "not in this log (no rank reached NCCL init: the job did not get that far, or the log was cut)"
    if ranks is not None:
        absent.append(f"ranks initialised: {why}; --ranks {ranks} cannot be checked")
    elif r.nccl_lines or r.peak_busbw_gbps is not None:
        notes.append(f"ranks initialised: {why}")


def to_json(r: Report) -> dict:
    d = asdict(r)
    for key in ("nccl_lines", "net_channels", "test_ranks", "transport_note", "unknown_nets", "ofi_provider",
                "socket_interfaces", "env"):
        d.pop(key)
    return d


def render_text(r: Report, ranks: int | None) -> str:
    transport = r.transport_note or r.transport + (" with GDRDMA" if r.gdr else "")
    if r.nranks is not None or r.init_complete:
        initialised = f"{r.init_complete}/{ranks or r.nranks or '?'} ranks initialised"
    else:
        initialised = "ranks initialised not in this log"
    bw = (f"peak busbw {r.peak_busbw_gbps:g} GB/s at {r.peak_message_bytes} B, avg {r.avg_busbw_gbps} GB/s"
          if r.peak_busbw_gbps is not None else "no nccl-tests results")
    lines = [f"NCCL {r.nccl_version or '?'}: transport {transport}, {initialised}, {bw}",
             "channels: " + (", ".join(f"{k} x{v}" for k, v in r.channels.items()) or "none"),
             f"verdict: {r.verdict}", *(f"  - {reason}" for reason in r.reasons)]
    notes = [n for n in r.not_in_log if n not in r.reasons]
    if notes:
        lines += ["not in this log (not asked for):", *(f"  - {n}" for n in notes)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.ncclcheck", description=__doc__.split("\n\n")[0])
    ap.add_argument("logs", nargs="+", type=Path)
    ap.add_argument("--expect", choices=("ib", "roce", "efa", "socket", "local"))
    ap.add_argument("--min-busbw", type=float, help="floor for the peak bus bandwidth, GB/s")
    ap.add_argument("--warn-busbw", type=float, help="warn (exit 0) under this peak bus bandwidth, GB/s")
    ap.add_argument("--section", type=int, metavar="NODES", help="judge only the NODES-node run of an "
                    "acceptance log")
    ap.add_argument("--ranks", type=int, help="ranks that must reach Init COMPLETE (default: nranks in the log)")
    ap.add_argument("--allow-no-gdr", action="store_true", help="accept RDMA without GPUDirect")
    ap.add_argument("--format", choices=("text", "json"), default="text")
    args = ap.parse_args(argv)
    current: list[Path] = []

    def lines() -> Iterator[str]:
        for path in args.logs:
            current[:] = [path]
            yield from read_lines(path)

    try:
        report, found = parse(lines(), args.section)
    except OSError as err:
        print(f"{current[0] if current else ''}: cannot read log: {err.strerror or err}", file=sys.stderr)
        return 2
    except Exception as err:  # a bug, not the input: one line naming the file, never a traceback
        print(f"{current[0] if current else ''}: ncclcheck failed reading this log: {type(err).__name__}: {err}",
              file=sys.stderr)
        return 2
    if not found:
        report.verdict = "incomplete"
        report.reasons = report.not_in_log = [
            f"no {args.section}-node run in this log (no '{SECTION_BEGIN.format(n=args.section)}' line): the "
            "launcher stopped before it, or this is another job's log"]
    else:
        judge(report, args.expect, args.min_busbw, args.ranks, args.allow_no_gdr, args.warn_busbw)
    try:
        print(json.dumps(to_json(report), indent=2) if args.format == "json" else render_text(report, args.ranks))
        sys.stdout.flush()
    except BrokenPipeError:  # `| head`: the reader has what it wanted
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keeps the interpreter's final flush quiet
    return 0 if report.verdict in ("pass", "warn") else 1


if __name__ == "__main__":
    sys.exit(main())
