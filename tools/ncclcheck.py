"""Read NCCL_DEBUG=INFO logs and nccl-tests output and say what happened, and whether it is the fast path.

    python -m tools.ncclcheck LOG... [--expect ib|roce|efa|socket|local] [--min-busbw GBPS] [--warn-busbw GBPS]
                              [--ranks N] [--section NODES] [--bootstrap IFACE] [--allow-no-gdr] [--format text|json]

Reports the transport each channel used (NET/IB with or without GDRDMA, the HPC-X plugin's NET/IBext*, aws-ofi-nccl's
NET/Libfabric, NET/AWS Libfabric and NET/OFI, NET/Socket, P2P, SHM), whether any rank fell back to Socket, nranks and
how many ranks reached "Init COMPLETE", the NCCL version, the average and peak bus bandwidth with the message size at
the peak, and known failure lines. RoCE is told from InfiniBand by the link layer of the devices NCCL lists
(`mlx5_0:1/RoCE`), whichever verbs module (IB, IBext_v8, ...) drives them.

It judges what the log shows and says what it cannot show. Exit 0 (`pass`, or `warn` under --warn-busbw but above
the floor) when every check asked for holds: the expected transport (with GPUDirect RDMA on RDMA fabrics), every
expected rank initialised, no failure line, the peak bus bandwidth at the floor, NCCL's bootstrap on the interface
--bootstrap names. Exit 1 with `fail`, the likely cause and the knob, when the log shows a check failing; exit 1 with
`incomplete` when a check asked for cannot be judged because its lines are not in this log (nccl-tests output without
NCCL INFO lines has bandwidth but no transport; a cut log has no results table). What was not asked for and is not in
the log is only reported. Exit 2 when a log cannot be read.

Logs are read in blocks of whole lines, in bounded memory whatever their size (see `Parser.feed_block` for how a
block is judged without a Python step per line); prefixes that launchers and log collectors put
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
from dataclasses import asdict, dataclass, field, replace
from itertools import accumulate, compress
from pathlib import Path

from components.fabric.kinds import KINDS, TRANSPORTS

# Longest line read whole; the rest of a longer line (binary garbage, a minified blob) is skipped, not held.
MAX_LINE = 1 << 16
# Bytes read at a time. A block costs a few passes in C over it plus a Python step per distinct line shape, and
# holds a few copies of itself and a list of its lines (about ten times its size at the peak): at 256 KiB these
# stay in the CPU's caches between passes (measured 10-20% faster than 1 MiB, no slower than 128 KiB), and the
# resident set near 18 MB.
CHUNK = 1 << 18
# Line shapes remembered between blocks (each a line of the log with its numbers zeroed).
MAX_SHAPES = 1 << 14
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
NET_SOCKET_USING = re.compile(r"NET/Socket : Using (.*)")
# The interface NCCL bootstraps on (its out-of-band sockets), `<name>:<address><<port>>` (ncclSocketToString):
# `Bootstrap : Using [0]ib0:10.1.2.3<0>` (up to 2.7: the interfaces found, the first one used), `Bootstrap : Using
# eth0:10.1.2.3<0>` (2.8 to 2.23; from 2.23 under NCCL_DEBUG_SUBSYS=BOOTSTRAP), `Bootstrap: Using eth0:10.1.2.3<0>`
# (2.24 on), and the IB transport's own `NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB eth0:10.1.2.3<0>` (INIT,NET). Not
# 2.27's `Bootstrap: Using mlx5_0:1` (NCCL_OOB_NET_ENABLE: a NET device, no address).
_BOOTSTRAP_LEADS = (r"Bootstrap ?: Using (?:\[\d{1,3}\])?", r"; OOB ")
_INTERFACE_ADDRESS = r"([^\s:<>\[\]]{1,64}):[^\s<>]{0,64}<\d{1,6}>"
BOOTSTRAP_USING = re.compile(f"(?:{'|'.join(_BOOTSTRAP_LEADS)}){_INTERFACE_ADDRESS}")
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
        re.compile(r"NET/IB : No device found"),
        "no RDMA device in the pod: the RDMA resource (rdma/..., nvidia.com/sriov_...) was not requested or "
        "NCCL_IB_HCA matches no device",
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
        re.compile(r"Bootstrap : no socket interface found"),
        "NCCL_SOCKET_IFNAME matches no interface of the pod; use the primary interface (=eth0)",
    ),
    (
        re.compile(r"No space left on device|Bus error|Error while creating shared memory segment"),
        "/dev/shm is too small: mount a memory-backed emptyDir with a larger sizeLimit",
    ),
    (
        re.compile(r"Got completion (?:from peer .{0,80})?with (?:error|status)"),
        "an RDMA work request completed with an error (status 12: retry count exceeded): a link flapped, the RoCE "
        "fabric dropped packets (PFC/ECN) or the peers' GIDs do not match; check the port counters and "
        "NCCL_IB_GID_INDEX / NCCL_IB_TC",
    ),
    (
        re.compile(r"NET/OFI .{0,80}fi_getinfo\(\) call failed|NET/OFI Couldn't open"),
        "aws-ofi-nccl found no usable EFA device: the pod lacks the vpc.amazonaws.com/efa resource (and with it "
        "/dev/infiniband)",
    ),
    (
        re.compile(r"Test (?:NCCL |CUDA )?failure"),
        "nccl-tests stopped on an error (the line names the NCCL or CUDA call): the results table is incomplete",
    ),
]
FAILURE_HINT = re.compile(r"WARN|Watchdog|rror|ailure|ailed|imeout|imed out|No device found|No space left")

NO_DEBUG = "run with NCCL_DEBUG=INFO"
# What --expect accepts: each fabric kind's transport, and `local` for a one-node run (P2P/SHM only).
EXPECT = (*TRANSPORTS, "local")
# Transports that must run with GPUDirect RDMA.
RDMA_TRANSPORTS = frozenset(kind.transport for kind in KINDS.values() if kind.rdma)


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
    bootstrap_interfaces: list[str] = field(default_factory=list)  # where NCCL bootstrapped (Bootstrap / OOB)
    env: dict[str, str] = field(default_factory=dict)


def strip_prefix(line: str) -> str:
    """The line as the program wrote it: surrounding blanks and collector prefixes removed."""
    line = line.strip()
    if m := PREFIX.match(line):
        line = line[m.end() :].lstrip()
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

    def __init__(self, bootstrap: bool = True) -> None:
        # Whether to read the interfaces NCCL bootstrapped on: a regex pass over every block, so only when asked.
        self.read_bootstrap = bootstrap
        self.r = Report()
        self.channels: Counter[str] = Counter()
        self.link_layers: set[str] = set()
        self.networks: set[str] = set()
        self.bootstrap: list[str] = []  # interfaces in the order first seen (a list: bounded, added in order)
        self.complete: set[int] = set()
        self.test_ranks: set[int] = set()
        self.table: tuple[int, list[int]] | None = None  # columns of the nccl-tests header, busbw positions
        self.avg_sum = 0.0
        self.avg_count = 0
        self.shapes: dict[bytes, Shape] = {}

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

    def feed_block(self, block: bytes) -> None:
        """Whole lines (ending in \\n, \\r\\n or \\r), with the same result as feeding them one at a time.

        Most lines of a big log differ only in their numbers (ranks, pids, pointers), so the block is cut into lines
        with their digits and `0x` pointers zeroed, which every pattern here treats alike (same length, same classes):
        each distinct shape is judged once, by `feed` on one line of it (`Shape.of`), and what it does is applied once
        per line of that shape. Only lines whose effect depends on their numbers or on their order (ranks, versions,
        failures, the results table) are fed one at a time, in order."""
        if b"\r" in block and block.count(b"\r") != block.count(b"\r\n"):
            self._feed_lines(block)  # lone CRs end lines too, as in a text-mode read: rare enough to go slowly
            return
        # The stand-in is in the log itself: it cannot tell P2P from it (`Q` is rare, and memchr finds it at once).
        if b"Q" in block and PROTECTED[1] in block:
            self._feed_lines(block)
            return
        norm = _zero_pointers(block.replace(*PROTECTED)).translate(ZERO_DIGITS)
        lines = norm.split(b"\n")
        cache, judged = self.shapes, {}
        for line, n in Counter(lines).items():
            if (shape := cache.get(line)) is None:
                if len(cache) >= MAX_SHAPES:
                    cache.clear()
                shape = cache[line] = Shape.of(line, self.read_bootstrap)
            judged[line] = (shape, n)
        if not self._order_free(judged.values()):
            self._feed_lines(block)
            return
        for shape, n in judged.values():
            shape.apply(self, n)
        per_line = {line: n for line, (shape, n) in judged.items() if shape.per_line}
        if not per_line:
            return
        slow = {line: n for line, n in per_line.items() if judged[line][0].slow}
        if sum(slow.values()) <= MAX_FOUND and all(shape.in_bulk for shape, _ in judged.values()):
            kinds = [any(shape.hits[kind] for shape, _ in judged.values()) for kind in range(4)]
            env_at = {line: shape.env_at for line, (shape, _) in judged.items() if shape.env_at}
            self._read_in_bulk(block, norm, slow, kinds, env_at)
        else:
            self._read_line_by_line(block, lines, judged, set(per_line))

    def _read_in_bulk(
        self,
        block: bytes,
        norm: bytes,
        slow: dict[bytes, int],
        kinds: list[bool],
        env_at: dict[bytes, tuple[int, int, int, int]],
    ) -> None:
        """Ranks, environment, nccl-tests ranks and bootstrap interfaces by one regex over the block each, for the
        `kinds` its shapes hold (`Shape.in_bulk` made sure each match is one that `feed` takes, as many per line as it
        takes); the few slow lines found by their shape. Variables whose lines have digits (`env_at`: where name and
        value are in lines of that shape) are read from the last line of each shape: the last value set wins, and
        `_order_free` made sure that no bound fills up, so the lines before it change nothing, unless the names
        themselves hold digits."""
        r = self.r
        if kinds[0] and (found := RANKS_BYTES.findall(block)):
            # Sets of the numbers as written first: a block holds each rank's few init lines, and int() is per value.
            r.nranks = max(r.nranks or 0, max(map(int, {nranks for _, nranks, _ in found})))
            _add_bounded(self.complete, [rank for rank, _, complete in found if complete])
        if env_at and not any(b"0" in norm_line[a:b] for norm_line, (a, b, _, _) in env_at.items()):
            for start, (a, b, c, d) in sorted(
                (_line_starts(norm, line, 1, last=True)[0][0], at) for line, at in env_at.items()
            ):
                if (name := block[start + a : start + b].decode("ascii")) in r.env or len(r.env) < MAX_NAMES:
                    r.env[name] = block[start + c : start + d].decode("ascii")
        elif kinds[1]:  # in order: the last value set wins, and a name is first set where it first appears
            for name, value in dict(ENV_BYTES.findall(block)).items():
                if name.decode() in r.env or len(r.env) < MAX_NAMES:
                    r.env[name.decode()] = value.decode()
        if kinds[2]:
            _add_bounded(self.test_ranks, TEST_RANK_BYTES.findall(block))
        if kinds[3]:
            self._bootstrap(_bootstrap_names(block))
        if not slow:
            return
        starts = []
        for line, n in slow.items():  # where each slow line starts: found in `norm`, whose offsets are the block's
            starts += _line_starts(norm, line, n)
        for start, length in sorted(starts):
            self.feed(block[start : start + length].decode("utf-8", "replace")[:MAX_LINE])

    def _read_line_by_line(
        self, block: bytes, lines: list[bytes], judged: dict[bytes, tuple[Shape, int]], per_line: set[bytes]
    ) -> None:
        """The lines whose shapes need them, each in turn."""
        starts = accumulate(map((1).__add__, map(len, lines)), initial=0)  # where each line starts in the block
        vias: Counter[bytes] = Counter()
        for start, line in compress(zip(starts, lines, strict=False), map(per_line.__contains__, lines)):
            shape = judged[line][0]
            if shape.boot and not shape.slow:
                self._bootstrap(_bootstrap_names(block[start : start + len(line)]))
            if shape.via:
                vias[block[start + shape.via[0] : start + shape.via[1]]] += 1
                continue
            raw = block[start : start + len(line)]
            if shape.slow:
                self.feed(raw.decode("utf-8", "replace")[:MAX_LINE])
                continue
            if shape.rank_at is not None:
                if (m := TEST_RANK_BYTES.match(raw, shape.rank_at)) and len(self.test_ranks) < MAX_RANKS:
                    self.test_ranks.add(int(m.group(1)))
                continue
            if shape.env_at:  # the last value set wins, so in order
                a, b, c, d = shape.env_at
                name, value, env = raw[a:b].decode("ascii"), raw[c:d].decode("ascii"), self.r.env
                if name in env or len(env) < MAX_NAMES:
                    env[name] = value
                continue
            # An init line: its one `rank N nranks M`, which `feed` would read (Shape.of checked there is one).
            if shape.nranks and (m := RANKS_BYTES.search(raw)):
                self.r.nranks = max(self.r.nranks or 0, int(m.group(2)))
                if shape.complete and len(self.complete) < MAX_RANKS:
                    self.complete.add(int(m.group(1)))
        for via, n in vias.items():
            name = _transport_name(via.decode("ascii"))
            if name in self.channels or len(self.channels) < MAX_NAMES:
                self.channels[name] += n
            if name.startswith("NET/"):
                self.r.net_channels += n
                self._network(name.split("/")[1])

    def _order_free(self, judged: Iterable[tuple[Shape, int]]) -> bool:
        """Whether applying the block's shapes out of line order gives what feeding its lines in order would: no
        bounded collection fills up in this block, and no environment variable is set both by lines applied by
        shape and by other lines, or to two values (the last one set wins)."""
        channels: set[str | None] = set(self.channels)
        networks: set[str | None] = set(self.networks)
        by_shape: dict[str, str] = {}
        by_line: set[str] = set()
        unsure, read_per_line = False, 0  # read_per_line: names that channels read line by line may add
        for shape, _ in judged:
            channels.add(shape.channel)  # None (no channel) is discarded below
            networks.add(shape.network)
            read_per_line += 4 if shape.via else 0
            if shape.env and (shape.slow or shape.env_at):
                by_line.add(shape.env[0])  # a name with digits zeroed stands for several: none is set by shape
                unsure = unsure or "0" in shape.env[0]
            elif shape.env and by_shape.setdefault(shape.env[0], shape.env[1]) != shape.env[1]:
                return False
        channels.discard(None)
        networks.discard(None)
        return (
            len(channels) + read_per_line <= MAX_NAMES
            and len(networks) + read_per_line <= MAX_NAMES
            and not by_line & by_shape.keys()
            and not (unsure and by_shape)
            and len(self.r.env.keys() | by_line | by_shape.keys()) + 4 * unsure < MAX_NAMES
        )

    def _feed_lines(self, block: bytes | str) -> None:
        """The block one line at a time, split where a text-mode read splits (\\n, \\r\\n, \\r)."""
        text = block if isinstance(block, str) else block.decode("utf-8", "replace")
        for line in EOL.split(text):
            self.feed(line[:MAX_LINE])

    def report(self) -> Report:
        r = self.r
        r.channels = dict(sorted(self.channels.items()))
        r.init_complete = len(self.complete)
        r.test_ranks = len(self.test_ranks)
        r.networks = sorted(self.networks)
        r.bootstrap_interfaces = list(self.bootstrap)
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
            r.transport_note = (
                f"unknown (NET/{', NET/'.join(r.unknown_nets)}: a network module ncclcheck does not know)"
            )
        elif self.channels:
            r.transport = "local"
        elif not r.nccl_lines:
            r.transport_note = f"unknown ({NO_DEBUG})"
        else:
            r.transport_note = (
                "unknown (no channel or 'Using network' lines: run with NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,NET)"
            )
        r.gdr = any(c.endswith("GDRDMA") for c in self.channels if c.startswith("NET/"))
        return r


ZERO_DIGITS = bytes.maketrans(b"0123456789", b"0" * 10)
# A pointer or id printed by %p / 0x%lx (`comm 0x55d0c8e000`): its hex letters are zeroed too, as digits are, so
# that every rank's init lines share a shape. Only whole `0x...` words: no word of a marker is hex.
HEX_POINTER = re.compile(rb"(0x[0-9]*[a-f][0-9a-f]*)(?![\w])")
# NRANKS, INIT, ENV_SET and TEST_RANK over a block, where `\s` must not cross a line. Shape.of checks that they find
# in a line what the str patterns find (lines with whitespace that only str knows as such are read by `feed`).
RANKS_BYTES = re.compile(rb"rank (\d{1,9}) nranks (\d{1,9})( [^\n]*- Init COMPLETE)?")
ENV_BYTES = re.compile(rb"(NCCL_\w{1,64}) set by environment to ([^\s]{0,200})")
TEST_RANK_BYTES = re.compile(rb"#[^\S\n]+Rank[^\S\n]+(\d{1,9})[^\S\n]+(?:Group[^\S\n]+\d+[^\S\n]+)?Pid\b")
RANKS_ANYWHERE = re.compile(rb"rank \d{1,9} nranks \d{1,9}")
# BOOTSTRAP_USING as one pattern per lead, each with its literal prefix for sre's fast scan (the alternation has
# none, and is twenty times slower over a block); their matches never overlap (a lead holds spaces, the interface
# and address none), so together, in order, they find what BOOTSTRAP_USING finds.
BOOTSTRAP_BYTES = tuple(re.compile((lead + _INTERFACE_ADDRESS).encode()) for lead in _BOOTSTRAP_LEADS)
# Whitespace to str (strip, split, \s) but not to bytes patterns: lines holding them are read by `feed`.
STR_ONLY_SPACE = re.compile(rb"[\x1c-\x1f]")
# Past this many slow lines in a block, finding each by its shape costs more than walking the block's lines.
MAX_FOUND = 64
# `via P2P/...`, the transport of most channel lines, keeps its digit under a stand-in of the same length: zeroed, it
# would be P0P and every such line would be read on its own. The 2 sits between two Ps, where no pattern here looks
# for a digit, and the stand-in letter is a word character as 2 is, so every pattern matches the same.
PROTECTED = (b"via P2P/", b"via PQP/")
EOL = re.compile(r"\r\n|\r|\n")


_WORD_BYTES = frozenset(b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_ZEROS = [b"0x".ljust(n, b"0") for n in range(40)]  # by length: %p and 0x%lx print at most 16 digits


def _zero_pointers(block: bytes) -> bytes:
    """`block` with each `0x` pointer word zeroed to the same length: split around them (the capturing group keeps
    them in the list, at odd places) and joined back, so that the only Python step is per pointer, not per call."""
    parts = HEX_POINTER.split(block)
    if len(parts) == 1:
        return block
    for i in range(1, len(parts), 2):
        # A lookbehind in the pattern would cost sre its fast scan for `0x`, so the start of the word is checked
        # here: the text before a pointer is never empty but at the start of the block (a match ends before a
        # non-word byte, and a match starts with `0`).
        before = parts[i - 1]
        if not before or before[-1] not in _WORD_BYTES:
            size = len(parts[i])
            parts[i] = _ZEROS[size] if size < len(_ZEROS) else b"0x".ljust(size, b"0")
    return b"".join(parts)


@dataclass(frozen=True)
class Shape:
    """What every line of one shape (its digits and pointers zeroed) does to a `Parser`, learnt from one of them."""

    nccl_lines: int = 0
    channel: str | None = None
    network: str | None = None
    link_layers: frozenset[str] = frozenset()
    env: tuple[str, str] | None = None
    nranks: bool = False  # carries a rank and nranks, read from each line
    complete: bool = False  # ... and says Init COMPLETE
    via: tuple[int, int] | None = None  # where a channel line's `via` text is, when its name holds digits
    env_at: tuple[int, int, int, int] | None = None  # where the variable and its value are, when they hold digits
    rank_at: int | None = None  # where nccl-tests' `#  Rank N` starts
    slow: bool = False  # fed line by line: its effect depends on its numbers or on what came before
    boot: int = 0  # bootstrap interfaces `feed` reads from each line (BOOTSTRAP_USING), slow or not
    hits: tuple[int, int, int, int] = (0, 0, 0, 0)  # matches of RANKS_ANYWHERE, ENV_BYTES, TEST_RANK_BYTES,
    # BOOTSTRAP_BYTES in the line

    @property
    def in_bulk(self) -> bool:
        """Whether the block-wide regexes of `Parser._read_in_bulk` find in lines of this shape exactly what `feed`
        takes from them: nothing in a line fed whole, one match where `feed` reads one."""
        if self.via is not None:
            return False
        if self.slow:
            return self.hits == (0, 0, 0, 0) and not self.boot
        return self.hits == (int(self.nranks), int(self.env is not None), int(self.rank_at is not None), self.boot)

    @property
    def per_line(self) -> bool:
        return (
            self.slow
            or self.nranks
            or self.via is not None
            or self.env_at is not None
            or self.rank_at is not None
            or self.boot > 0
        )

    @classmethod
    def of(cls, shape: bytes, bootstrap: bool = True) -> Shape:
        """The shape of a line, for a parser that reads bootstrap interfaces or not."""
        boot = boot_hits = 0
        if bootstrap:  # what `feed` reads on every line of the shape (numbers change the name, never the count)
            line = strip_prefix(shape[: MAX_LINE * 4].decode("utf-8", "replace")[:MAX_LINE])
            boot = len(BOOTSTRAP_USING.findall(line)) if "Using " in line else 0
            boot_hits = sum(len(pattern.findall(shape)) for pattern in BOOTSTRAP_BYTES)
        hits = (
            len(RANKS_ANYWHERE.findall(shape)),
            len(ENV_BYTES.findall(shape)),
            len(TEST_RANK_BYTES.findall(shape)),
            boot_hits,
        )
        return replace(cls._judge(shape), hits=hits, boot=boot)

    @classmethod
    def _judge(cls, shape: bytes) -> Shape:
        """Feed the shape to a fresh parser and keep what it did when that is the same for every line of the shape
        (no value holding a digit, which the shape has zeroed) and does not depend on order; else `slow`."""
        slow = cls(slow=True)
        if not shape.isascii() or len(shape) > MAX_LINE or STR_ONLY_SPACE.search(shape):
            return slow
        text = shape.decode("ascii")
        line = strip_prefix(text)
        if line[:1].isdigit():  # a results row: what it gives depends on the table header before it
            return slow
        probe = Parser()
        unset = probe.r.socket_interfaces  # compared by identity: a line may set it to an empty list
        probe.feed(text)
        r, blank = probe.r, Report()
        if r.socket_interfaces is not unset or (
            r.nccl_version,
            r.failures,
            r.ofi_provider,
            probe.table,
            probe.avg_count,
            r.peak_busbw_gbps,
        ) != (blank.nccl_version, blank.failures, blank.ofi_provider, None, 0, None):
            return slow
        lead = len(text) - len(text.lstrip()) + len(text.strip()) - len(line)  # where `line` starts in `text`
        if probe.test_ranks:  # a line of nccl-tests' device list (a comment: nothing else): its rank, per line
            return cls(rank_at=lead) if TEST_RANK_BYTES.match(shape, lead) else slow
        channel = next(iter(probe.channels), None)
        if channel and channel.startswith("PQP/"):
            channel = "P2P/" + channel[4:]
        network = next(iter(probe.networks), None)
        env = next(iter(r.env.items()), None)
        if channel and "0" in channel and (m := CHANNEL.search(line)):  # read from each line, at the same place
            return cls(nccl_lines=r.nccl_lines, via=(lead + m.start(1), lead + m.end(1)))
        if any("0" in value for value in (channel or "", network or "")):
            return cls(slow=True, env=env)
        if env and "0" in "".join(env) and (m := ENV_SET.search(line)) and not probe.complete and r.nranks is None:
            return cls(
                nccl_lines=r.nccl_lines,
                network=network,
                link_layers=frozenset(probe.link_layers),
                env=env,
                env_at=(lead + m.start(1), lead + m.end(1), lead + m.start(2), lead + m.end(2)),
            )
        if env and "0" in "".join(env):
            return cls(slow=True, env=env)
        nranks = r.nranks is not None
        if nranks and len(NRANKS.findall(line)) != 1:
            return cls(slow=True, env=env)
        return cls(
            nccl_lines=r.nccl_lines,
            channel=channel,
            network=network,
            link_layers=frozenset(probe.link_layers),
            env=env,
            nranks=nranks,
            complete=bool(probe.complete),
        )

    def apply(self, parser: Parser, n: int) -> None:
        """What `n` lines of this shape do, but for their ranks (read per line) and for slow shapes."""
        if self.slow:
            return
        r = parser.r
        r.nccl_lines += self.nccl_lines * n
        if self.channel:
            parser.channels[self.channel] += n
            if self.channel.startswith("NET/"):
                r.net_channels += n
        if self.network:
            parser.networks.add(self.network)
        parser.link_layers |= self.link_layers
        if self.env:
            r.env[self.env[0]] = self.env[1]


def _bootstrap_names(text: bytes) -> list[str]:
    """The interfaces BOOTSTRAP_USING finds in `text`, in order (the list they go to is bounded)."""
    found = sorted((m.start(), m.group(1)) for pattern in BOOTSTRAP_BYTES for m in pattern.finditer(text))
    return [name.decode("utf-8", "replace") for _, name in found]


def _add_bounded(ranks: set[int], written: list[bytes]) -> None:
    """Add the ranks `written` (in the log's order and spelling) to `ranks`, which holds at most MAX_RANKS."""
    new = set(map(int, set(written)))
    if len(ranks) + len(new) <= MAX_RANKS:
        ranks |= new
        return
    for rank in map(int, written):  # filling up: in the log's order, as feeding line by line would
        if len(ranks) < MAX_RANKS:
            ranks.add(rank)


def _line_starts(text: bytes, line: bytes, n: int, last: bool = False) -> list[tuple[int, int]]:
    """(start, length) of the first `n` lines of `text` (split at \\n) equal to `line`; with `last`, of the last
    one, which must be there."""
    found, size = [], len(line)
    if last:
        if text.endswith(b"\n" + line) or text == line:
            return [(len(text) - size, size)]
        pos = text.rfind(b"\n" + line + b"\n") + 1
        return [(pos if pos else 0, size)]  # not found in the middle: it is the first line
    if text.startswith(line) and text[size : size + 1] in (b"\n", b""):
        found.append((0, size))
    needle, pos = b"\n" + line + b"\n", 0
    while len(found) < n and (pos := text.find(needle, pos) + 1):
        found.append((pos, size))
    if len(found) < n and text.endswith(b"\n" + line):  # the last line, without a line end after it
        found.append((len(text) - size, size))
    return found[:n]


def read_blocks(path: Path, chunk_size: int = CHUNK) -> Iterator[bytes | str]:
    """A log in blocks of whole lines of about `chunk_size` bytes, for `Parser.feed_block`. A line longer than
    MAX_LINE characters comes alone, as a str cut to MAX_LINE, and the rest of it is skipped, not held."""
    # The first MAX_LINE characters lie within this many bytes, however they are encoded.
    longest = 4 * MAX_LINE
    with open(path, "rb") as f:
        carry, skipping = b"", False
        while chunk := f.read(chunk_size):
            if skipping:  # the rest of a long line, up to its end
                ends = [i for i in (chunk.find(b"\n"), chunk.find(b"\r")) if i >= 0]
                if not ends:
                    continue
                chunk, skipping = chunk[min(ends) :], False
            last = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
            if last < 0:  # no line ends in this chunk: all of it belongs to the line in `carry`
                carry += chunk
            else:  # one copy of the chunk (none when it ends a line and nothing is carried), not a copy per step
                yield b"".join((carry, memoryview(chunk)[: last + 1])) if carry or last + 1 < len(chunk) else chunk
                carry = chunk[last + 1 :]
            if len(carry) > longest:
                yield carry[:longest].decode("utf-8", "replace")[:MAX_LINE]
                carry, skipping = b"", True
        if carry:
            yield carry


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


def parse(lines: Iterable[str], section: int | None = None, bootstrap: bool = True) -> tuple[Report, bool]:
    """The report of a log (of its `section`-node run when given) and whether that run was found. A run that
    starts again starts a fresh report; a log cut off mid-run is judged on what is there. `bootstrap`: read the
    interfaces NCCL bootstrapped on."""
    parser = Parser(bootstrap)
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
                parser, found, inside = Parser(bootstrap), True, True
                continue
            if marker == end and inside:
                break
        if inside:
            parser.feed(line)
    return parser.report(), found


def parse_files(
    paths: Iterable[Path], section: int | None = None, chunk_size: int = CHUNK, bootstrap: bool = True
) -> tuple[Report, bool]:
    """`parse` of the logs' lines, read in blocks: the same report, at the speed of a few passes in C over the log."""
    parser = Parser(bootstrap)

    def blocks() -> Iterator[bytes | str]:
        for path in paths:
            yield from read_blocks(path, chunk_size)

    if section is None:
        for block in blocks():
            parser.feed(block) if isinstance(block, str) else parser.feed_block(block)
        return parser.report(), True
    begin, end = SECTION_BEGIN.format(n=section), SECTION_END.format(n=section)
    found = inside = False
    for block in blocks():
        for lines, marker in _around_markers(block):
            if marker is None:
                if inside:
                    parser.feed(lines) if isinstance(lines, str) else parser.feed_block(lines)
                continue
            if (stripped := strip_prefix(marker)) == begin:
                parser, found, inside = Parser(bootstrap), True, True
            elif stripped == end and inside:
                return parser.report(), found
            elif inside:
                parser.feed(marker)
    return parser.report(), found


def _around_markers(block: bytes | str) -> Iterator[tuple[bytes | str, str | None]]:
    """A block as runs of lines without a section marker, (lines, None), and the lines holding one, ("", line)."""
    if isinstance(block, str):  # one long line
        yield ("", block) if "fastpath-acceptance:" in block else (block, None)
        return
    pos = 0
    while (hit := block.find(b"fastpath-acceptance:", pos)) >= 0:
        start = max(block.rfind(b"\n", pos, hit), block.rfind(b"\r", pos, hit), pos - 1) + 1
        stop = min(i for i in (block.find(b"\n", hit), block.find(b"\r", hit), len(block)) if i >= 0)
        if start > pos:
            yield block[pos:start], None
        yield "", block[start:stop].decode("utf-8", "replace")[:MAX_LINE]
        pos = stop + (2 if block.startswith(b"\r\n", stop) else 1)
    if pos < len(block):
        yield block[pos:], None


def parse_text(text: str, section: int | None = None) -> Report:
    return parse(text.splitlines(), section)[0]


def judge(
    r: Report,
    expect: str | None,
    min_busbw: float | None,
    ranks: int | None,
    allow_no_gdr: bool,
    warn_busbw: float | None = None,
    bootstrap: str | None = None,
) -> Report:
    failed: list[str] = []  # the log shows a check failing
    absent: list[str] = []  # a check asked for whose lines are not in this log
    notes: list[str] = []  # what the log cannot show, not asked for
    if r.unknown_nets and expect:
        failed.append(
            f"NCCL used NET/{', NET/'.join(r.unknown_nets)}, a network module ncclcheck does not know, "
            f"where {expect} was expected: check NCCL_NET and NCCL_NET_PLUGIN"
        )
    elif r.transport_note:
        (absent if expect else notes).append(f"transport: {r.transport_note}")
    if expect and r.transport != expect and not r.transport_note:
        if r.transport == "socket" and any(i.startswith("net") for i in r.socket_interfaces):
            failed.append(
                "NCCL used TCP sockets although the pod has secondary networks ("
                f"{', '.join(i for i in r.socket_interfaces if i.startswith('net'))}): it found no usable "
                "RDMA device; the RDMA resource is missing from the pod or NCCL_IB_HCA matches no device"
            )
        elif r.transport == "socket" and r.env.get("NCCL_IB_DISABLE") == "1":
            failed.append("NCCL used TCP sockets because NCCL_IB_DISABLE=1: set it to 0 on RDMA fabrics")
        elif r.transport == "socket":
            failed.append(
                "NCCL fell back to TCP sockets: no RDMA device and no secondary networks in the pod; "
                "request the fabric's RDMA resources and networks (fastpath wires them from the profile)"
            )
        elif expect == "local":
            failed.append(
                f"a one-node run used the network ({r.transport}): the GPUs did not reach each other "
                "over NVLink or PCIe P2P; check nvidia-smi topo -m and NCCL_P2P_DISABLE"
            )
        elif r.transport.startswith("libfabric/"):
            failed.append(
                f"aws-ofi-nccl ran on libfabric's {r.ofi_provider} provider, not efa: the pod sees no EFA "
                "device (vpc.amazonaws.com/efa resource) or FI_PROVIDER names another provider"
            )
        else:
            failed.append(f"transport is {r.transport}, expected {expect}: check fabric.kind and NCCL_IB_HCA")
    if expect in RDMA_TRANSPORTS and r.transport == expect and not r.gdr and not allow_no_gdr:
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
    failed += r.failures
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
        r.verdict = "warn"
        r.reasons = [
            f"peak bus bandwidth {r.peak_busbw_gbps:g} GB/s passes the floor but is under "
            f"{warn_busbw:g} GB/s, what healthy links give ({r.peak_busbw_gbps / warn_busbw:.0%}): look "
            "for a slow rail (ibdiagnet, port counters) before production runs"
        ]
    return r


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


def to_json(r: Report) -> dict:
    d = asdict(r)
    for key in (
        "nccl_lines",
        "net_channels",
        "test_ranks",
        "transport_note",
        "unknown_nets",
        "ofi_provider",
        "socket_interfaces",
        "bootstrap_interfaces",
        "env",
    ):
        d.pop(key)
    return d


def render_text(r: Report, ranks: int | None) -> str:
    transport = r.transport_note or r.transport + (" with GDRDMA" if r.gdr else "")
    if r.nranks is not None or r.init_complete:
        initialised = f"{r.init_complete}/{ranks or r.nranks or '?'} ranks initialised"
    else:
        initialised = "ranks initialised not in this log"
    bw = (
        f"peak busbw {r.peak_busbw_gbps:g} GB/s at {r.peak_message_bytes} B, avg {r.avg_busbw_gbps} GB/s"
        if r.peak_busbw_gbps is not None
        else "no nccl-tests results"
    )
    lines = [
        f"NCCL {r.nccl_version or '?'}: transport {transport}, {initialised}, {bw}",
        "channels: " + (", ".join(f"{k} x{v}" for k, v in r.channels.items()) or "none"),
        f"verdict: {r.verdict}",
        *(f"  - {reason}" for reason in r.reasons),
    ]
    notes = [n for n in r.not_in_log if n not in r.reasons]
    if notes:
        lines += ["not in this log (not asked for):", *(f"  - {n}" for n in notes)]
    return "\n".join(lines)


def keep_freed_memory() -> None:
    """Ask glibc to keep freed memory for reuse. Each block makes a few buffers of its size; by default glibc gives
    the freed ones back to the kernel (trim, or munmap above its mmap threshold) and faults fresh pages in for the
    next block, which was a seventh of the CPU time, all of it in the kernel. Resident memory stays what the
    largest block needs. Elsewhere (musl, macOS) nothing changes."""
    import ctypes

    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return
    mallopt(-1, 64 << 20)  # M_TRIM_THRESHOLD: keep up to 64 MiB of free heap
    mallopt(-3, 16 << 20)  # M_MMAP_THRESHOLD: blocks come from the heap, not a mapping each


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.ncclcheck", description=__doc__.split("\n\n")[0])
    ap.add_argument("logs", nargs="+", type=Path)
    ap.add_argument(
        "--expect",
        choices=EXPECT,
        help="the transport: a fabric kind's (components/fabric/kinds.py), or local for a one-node run",
    )
    ap.add_argument("--min-busbw", type=float, help="floor for the peak bus bandwidth, GB/s")
    ap.add_argument("--warn-busbw", type=float, help="warn (exit 0) under this peak bus bandwidth, GB/s")
    ap.add_argument("--section", type=int, metavar="NODES", help="judge only the NODES-node run of an acceptance log")
    ap.add_argument("--ranks", type=int, help="ranks that must reach Init COMPLETE (default: nranks in the log)")
    ap.add_argument(
        "--bootstrap",
        metavar="IFACE",
        help="the interface NCCL must bootstrap on (NCCL_SOCKET_IFNAME, "
        "fabric.podInterface; a host-network pod's: the node's primary interface)",
    )
    ap.add_argument("--allow-no-gdr", action="store_true", help="accept RDMA without GPUDirect")
    ap.add_argument("--format", choices=("text", "json"), default="text")
    args = ap.parse_args(argv)
    keep_freed_memory()
    current: list[Path] = []

    def paths() -> Iterator[Path]:
        for path in args.logs:
            current[:] = [path]
            yield path

    try:
        # Bootstrap interfaces only when they are checked: reading them costs a regex pass over the log.
        report, found = parse_files(paths(), args.section, bootstrap=args.bootstrap is not None)
    except OSError as err:
        print(f"{current[0] if current else ''}: cannot read log: {err.strerror or err}", file=sys.stderr)
        return 2
    except Exception as err:  # a bug, not the input: one line naming the file, never a traceback
        print(
            f"{current[0] if current else ''}: ncclcheck failed reading this log: {type(err).__name__}: {err}",
            file=sys.stderr,
        )
        return 2
    if not found:
        report.verdict = "incomplete"
        report.reasons = report.not_in_log = [
            f"no {args.section}-node run in this log (no '{SECTION_BEGIN.format(n=args.section)}' line): the "
            "launcher stopped before it, or this is another job's log"
        ]
    else:
        judge(report, args.expect, args.min_busbw, args.ranks, args.allow_no_gdr, args.warn_busbw, args.bootstrap)
    try:
        print(json.dumps(to_json(report), indent=2) if args.format == "json" else render_text(report, args.ranks))
        sys.stdout.flush()
    except BrokenPipeError:  # `| head`: the reader has what it wanted
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keeps the interpreter's final flush quiet
    return 0 if report.verdict in ("pass", "warn") else 1


if __name__ == "__main__":
    sys.exit(main())
