"""The command line: `python -m tools.ncclcheck LOG...`, its options, the text and JSON output and the exit code."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

from tools import ncclcheck
from tools.ncclcheck.bulk import keep_freed_memory, parse_files
from tools.ncclcheck.judge import EXPECT, judge, missing_section
from tools.ncclcheck.parse import Report, section_markers


def to_json(r: Report) -> dict:
    """The JSON contract: the report without the fields kept for the reasons."""
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
        "fewest_nics",
        "fewest_nics_host",
        "failure_seen",
        "quoted_warn",
        "rdma_absent",
    ):
        d.pop(key)
    return d


def render_text(r: Report, ranks: int | None) -> str:
    """What was used, the verdict with its reasons, then what this log cannot show that was not asked for."""
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
    devices = (
        ""
        if r.net_devices is None
        else f"; channel lines used NET devices {', '.join(map(str, r.net_devices)) or 'none'}"
    )
    lines = [
        f"NCCL {r.nccl_version or '?'}: transport {transport}, {initialised}, {bw}",
        "channels: " + (", ".join(f"{k} x{v}" for k, v in r.channels.items()) or "none"),
        *(
            [f"NICs: {len(r.nics)} ({', '.join(r.nics) or 'none'}){devices}"]
            if r.fewest_nics is not None or r.net_devices
            else []
        ),
        f"verdict: {r.verdict}",
        *(f"  - {reason}" for reason in r.reasons),
    ]
    notes = [n for n in r.not_in_log if n not in r.reasons]
    if notes:
        lines += ["not in this log (not asked for):", *(f"  - {n}" for n in notes)]
    return "\n".join(lines)


def positive(text: str) -> int:
    """An argparse type: a whole number above 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more: {value}")
    return value


def section(text: str) -> str:
    """An argparse type: an acceptance log's section, `4` or `4/nvlink` (parse.section_markers)."""
    try:
        section_markers(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def main(argv: list[str] | None = None) -> int:
    """Read the logs, judge them, print the report; the exit code (0 pass or warn, 1 fail or incomplete, 2 a log
    that cannot be read)."""
    description = (ncclcheck.__doc__ or "").split("\n\n")[0]
    ap = argparse.ArgumentParser(prog="python -m tools.ncclcheck", description=description)
    ap.add_argument("logs", nargs="+", type=Path)
    ap.add_argument(
        "--expect",
        choices=EXPECT,
        help="the transport: a fabric kind's (components/fabric/kinds.py), or local for a one-node run",
    )
    ap.add_argument("--min-busbw", type=float, help="floor for the peak bus bandwidth, GB/s")
    ap.add_argument("--warn-busbw", type=float, help="warn (exit 0) under this peak bus bandwidth, GB/s")
    ap.add_argument(
        "--section",
        type=section,
        metavar="NODES[/OVER]",
        help="judge only the NODES-node run of an acceptance log (NODES/nvlink: its run over multi-node NVLink)",
    )
    ap.add_argument("--ranks", type=int, help="ranks that must reach Init COMPLETE (default: nranks in the log)")
    ap.add_argument(
        "--bootstrap",
        metavar="IFACE",
        help="the interface NCCL must bootstrap on (NCCL_SOCKET_IFNAME, "
        "fabric.podInterface; a host-network pod's: the node's primary interface)",
    )
    ap.add_argument(
        "--rails",
        type=positive,
        metavar="N",
        help="NICs every process's IB transport must find (the profile's rails): fewer fails, naming those found; "
        "also reads the NET devices the channel lines used (net_devices)",
    )
    ap.add_argument(
        "--profiler",
        action="store_true",
        help="every process must load the profiler plugin NCCL_PROFILER_PLUGIN names (fastpath's telemetry: NCCL's "
        "Inspector); without it, a plugin that did not load is a warning",
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
        # Bootstrap interfaces and NET devices only when they are checked: each costs a regex pass over the log.
        report, found = parse_files(
            paths(), args.section, bootstrap=args.bootstrap is not None, devices=args.rails is not None
        )
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
        missing_section(report, args.section)
    else:
        judge(
            report,
            args.expect,
            args.min_busbw,
            args.ranks,
            args.allow_no_gdr,
            args.warn_busbw,
            args.bootstrap,
            args.rails,
            args.profiler,
        )
    try:
        print(json.dumps(to_json(report), indent=2) if args.format == "json" else render_text(report, args.ranks))
        sys.stdout.flush()
    except BrokenPipeError:  # `| head`: the reader has what it wanted
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keeps the interpreter's final flush quiet
    return 0 if report.verdict in ("pass", "warn") else 1
