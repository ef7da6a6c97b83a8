"""Read NCCL_DEBUG=INFO logs and nccl-tests output and say what happened, and whether it is the fast path.

    python -m tools.ncclcheck LOG... [--expect ib|roce|efa|socket|local] [--min-busbw GBPS] [--warn-busbw GBPS]
                              [--ranks N] [--section NODES] [--allow-no-gdr] [--format text|json]

Reports the transport each channel used (NET/IB with or without GDRDMA, NET/Socket, NET/Libfabric, P2P, SHM),
whether any rank fell back to Socket, nranks and how many ranks reached "Init COMPLETE", the NCCL version, the
average and peak bus bandwidth with the message size at the peak, and known failure lines. Exit 0 only when the
transport is the expected one (with GPUDirect RDMA on RDMA fabrics), every expected rank initialised, no failure
line was seen and the peak bus bandwidth meets the floor; otherwise 1, with the likely cause and the knob that
fixes it. Exit 2 when a log cannot be read. Under --warn-busbw (but above the floor) the verdict is `warn`,
exit 0. --section N reads only the N-node run of a fastpath acceptance log (between its marker lines).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)")
CHANNEL = re.compile(r"Channel \d+/\d+ : \d+\[\d+\] -> \d+\[\d+\] (?:\[(?:send|receive)\] )?via (\S+)")
NET_IB_USING = re.compile(r"NET/IB : Using (.*)")
LINK_LAYER = re.compile(r"\[\d+\]\S+:\d+/(IB|RoCE)")
NET_SOCKET_USING = re.compile(r"NET/Socket : Using (.*)")
USING_NETWORK = re.compile(r"Using network (.+?)\s*$")
INIT = re.compile(r"rank (\d+) nranks (\d+) .*- Init COMPLETE")
NRANKS = re.compile(r"rank \d+ nranks (\d+)")
ENV_SET = re.compile(r"(NCCL_\w+) set by environment to (\S*)")
# nccl-tests: size count type redop root | time algbw busbw #wrong | time algbw busbw #wrong
RESULT = re.compile(r"^\s*(\d+)\s+\d+\s+\w+\s+\S+\s+-?\d+"  # size count type redop root
                    r"\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s+\S+"  # out-of-place time algbw busbw #wrong
                    r"\s+[\d.]+\s+[\d.]+\s+([\d.]+)")  # in-place time algbw busbw
AVG_BUSBW = re.compile(r"# Avg bus bandwidth\s*:\s*([\d.]+)")

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
    (re.compile(r"No space left on device|Bus error"),
     "/dev/shm is too small: mount a memory-backed emptyDir with a larger sizeLimit"),
]


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
    failures: list[str] = field(default_factory=list)
    verdict: str = "fail"
    reasons: list[str] = field(default_factory=list)
    # not part of the JSON contract's headline, kept for the reasons
    socket_interfaces: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


def _transport_name(via: str) -> str:
    """`NET/IB/0/GDRDMA` -> `NET/IB/GDRDMA`, `P2P/CUMEM/read` -> `P2P/CUMEM`: per-channel detail without ids."""
    parts = via.split("/")
    if parts[0] == "NET":
        return "/".join([p for p in parts[:2]] + (["GDRDMA"] if "GDRDMA" in parts else []))
    return "/".join(parts[:2])


def parse(text: str) -> Report:
    r = Report()
    channels: Counter[str] = Counter()
    link_layers: set[str] = set()
    networks: set[str] = set()
    complete: set[int] = set()
    results: list[tuple[int, float]] = []
    avgs: list[float] = []
    for line in text.splitlines():
        if (m := VERSION.search(line)) and not r.nccl_version:
            r.nccl_version = m.group(1)
        if m := CHANNEL.search(line):
            channels[_transport_name(m.group(1))] += 1
        if m := NET_IB_USING.search(line):
            link_layers |= set(LINK_LAYER.findall(m.group(1)))
        if m := NET_SOCKET_USING.search(line):
            r.socket_interfaces = re.findall(r"\[\d+\](\w+):", m.group(1))
        if m := USING_NETWORK.search(line):
            networks.add(m.group(1))
        if m := INIT.search(line):
            complete.add(int(m.group(1)))
        if m := NRANKS.search(line):
            r.nranks = max(r.nranks or 0, int(m.group(1)))
        if m := ENV_SET.search(line):
            r.env[m.group(1)] = m.group(2)
        if m := RESULT.match(line):
            results.append((int(m.group(1)), max(float(m.group(2)), float(m.group(3)))))
        if m := AVG_BUSBW.search(line):
            avgs.append(float(m.group(1)))
        if "NCCL WARN" in line or "Watchdog" in line or "Error" in line or "error" in line:
            for pattern, meaning in FAILURES:
                if pattern.search(line) and meaning not in r.failures:
                    r.failures.append(meaning)
    r.channels = dict(sorted(channels.items()))
    r.init_complete = len(complete)
    net = {c for c in channels if c.startswith("NET/")}
    r.fell_back_to_socket = any(c.startswith("NET/Socket") for c in net) or "Socket" in networks
    if r.fell_back_to_socket:
        r.transport = "socket"
    elif any(c.startswith(("NET/Libfabric", "NET/AWS", "NET/OFI")) for c in net) or any(
            "Libfabric" in n for n in networks):
        r.transport = "efa"
    elif any(c.startswith("NET/IB") for c in net) or "IB" in networks:
        r.transport = "roce" if link_layers == {"RoCE"} else "ib"
    elif channels:
        r.transport = "local"
    r.gdr = any(c.endswith("GDRDMA") for c in net)
    if results:
        size, peak = max(results, key=lambda x: (x[1], x[0]))
        r.peak_busbw_gbps, r.peak_message_bytes = peak, size
    if avgs:
        r.avg_busbw_gbps = round(sum(avgs) / len(avgs), 3)
    return r


SECTION_BEGIN = "fastpath-acceptance: begin {n} nodes"
SECTION_END = "fastpath-acceptance: end {n} nodes"


def section(text: str, nodes: int) -> str | None:
    """The lines of the `nodes`-node run of an acceptance log, or None when the log has no such run."""
    begin, end = SECTION_BEGIN.format(n=nodes), SECTION_END.format(n=nodes)
    out: list[str] | None = None
    for line in text.splitlines():
        if line.strip() == begin:
            out = []
        elif line.strip() == end and out is not None:
            return "\n".join(out)
        elif out is not None:
            out.append(line)
    return "\n".join(out) if out is not None else None  # a log cut off mid-run: judge what is there


def judge(r: Report, expect: str | None, min_busbw: float | None, ranks: int | None, allow_no_gdr: bool,
          warn_busbw: float | None = None) -> Report:
    reasons = []
    if expect and r.transport != expect:
        if r.transport == "socket" and any(i.startswith("net") for i in r.socket_interfaces):
            reasons.append("NCCL used TCP sockets although the pod has secondary networks ("
                           f"{', '.join(i for i in r.socket_interfaces if i.startswith('net'))}): it found no usable "
                           "RDMA device; the RDMA resource is missing from the pod or NCCL_IB_HCA matches no device")
        elif r.transport == "socket" and r.env.get("NCCL_IB_DISABLE") == "1":
            reasons.append("NCCL used TCP sockets because NCCL_IB_DISABLE=1: set it to 0 on RDMA fabrics")
        elif r.transport == "socket":
            reasons.append("NCCL fell back to TCP sockets: no RDMA device and no secondary networks in the pod; "
                           "request the fabric's RDMA resources and networks (fastpath wires them from the profile)")
        elif r.transport == "unknown":
            reasons.append("no NCCL channel lines: run with NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,NET")
        elif expect == "local":
            reasons.append(f"a one-node run used the network ({r.transport}): the GPUs did not reach each other "
                           "over NVLink or PCIe P2P; check nvidia-smi topo -m and NCCL_P2P_DISABLE")
        else:
            reasons.append(f"transport is {r.transport}, expected {expect}: check fabric.kind and NCCL_IB_HCA")
    if expect in ("ib", "roce", "efa") and r.transport == expect and not r.gdr and not allow_no_gdr:
        reasons.append("RDMA without GPUDirect (no GDRDMA on the NET channels): data is staged through host "
                       "memory; check gpu.gpuDirect (dmabuf needs the open kernel module, peermem needs nvidia-peermem)"
                       " and NCCL_NET_GDR_LEVEL")
    want = ranks or r.nranks
    if want is None:
        reasons.append("no rank reported its NCCL init: the job did not get that far")
    elif r.init_complete < want:
        reasons.append(f"{r.init_complete} of {want} ranks reached Init COMPLETE: {want - r.init_complete} missing "
                       "(a pod not scheduled, crashed, or blocked on bootstrap)")
    reasons += r.failures
    if min_busbw is not None:
        if r.peak_busbw_gbps is None:
            reasons.append(f"no nccl-tests results in the log to compare with the floor of {min_busbw:g} GB/s")
        elif r.peak_busbw_gbps < min_busbw:
            reasons.append(f"peak bus bandwidth {r.peak_busbw_gbps:g} GB/s is under the floor of {min_busbw:g} GB/s "
                           f"({r.peak_busbw_gbps / min_busbw:.0%}): check that every rail is in use (NCCL_IB_HCA, the "
                           "rail resources) and the fabric's health")
    r.reasons = reasons
    r.verdict = "pass" if not reasons else "fail"
    if not reasons and warn_busbw is not None and r.peak_busbw_gbps is not None and r.peak_busbw_gbps < warn_busbw:
        r.verdict = "warn"
        r.reasons = [f"peak bus bandwidth {r.peak_busbw_gbps:g} GB/s passes the floor but is under "
                     f"{warn_busbw:g} GB/s, what healthy links give ({r.peak_busbw_gbps / warn_busbw:.0%}): look "
                     "for a slow rail (ibdiagnet, port counters) before production runs"]
    return r


def to_json(r: Report) -> dict:
    d = asdict(r)
    d.pop("socket_interfaces")
    d.pop("env")
    return d


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
    try:
        text = "\n".join(p.read_text(errors="replace") for p in args.logs)
    except OSError as err:
        print(f"cannot read log: {err}", file=sys.stderr)
        return 2
    if args.section is not None:
        part = section(text, args.section)
        if part is None:
            print(f"verdict: fail\n  - no {args.section}-node run in this log (no '"
                  f"{SECTION_BEGIN.format(n=args.section)}' line): the launcher stopped before it, or this is "
                  "another job's log")
            return 1
        text = part
    r = judge(parse(text), args.expect, args.min_busbw, args.ranks, args.allow_no_gdr, args.warn_busbw)
    if args.format == "json":
        print(json.dumps(to_json(r), indent=2))
    else:
        bw = (f"peak busbw {r.peak_busbw_gbps:g} GB/s at {r.peak_message_bytes} B, avg {r.avg_busbw_gbps} GB/s"
              if r.peak_busbw_gbps is not None else "no nccl-tests results")
        print(f"NCCL {r.nccl_version or '?'}: transport {r.transport}{' with GDRDMA' if r.gdr else ''}, "
              f"{r.init_complete}/{args.ranks or r.nranks or '?'} ranks initialised, {bw}")
        print("channels: " + (", ".join(f"{k} x{v}" for k, v in r.channels.items()) or "none"))
        print(f"verdict: {r.verdict}")
        for reason in r.reasons:
            print(f"  - {reason}")
    return 0 if r.verdict in ("pass", "warn") else 1


if __name__ == "__main__":
    sys.exit(main())
