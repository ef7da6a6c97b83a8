"""Read the fabric acceptance's pairwise stage from its log and name every node and rail below the floor.

    python -m tools.pairwise LOG --floor GBPS [--format text|json]

The stage (components/jobs/pairwise.py) measures each rail alone between the nodes of a ring, node i with node i+1,
so every node is in two pairs per rail, and prints `fastpath-pairwise: RAIL HOST_A HOST_B GBPS` (or `FAILED`) per
measurement between a `begin` line (its plan) and an `end` line. Per rail, a pair under GBPS (GB/s) or failed is
placed:

- on a node, when every pair it is in is below the floor and a neighbour reaches it with its other partner: that
  node's NIC, port or cable, or its GPU-to-NIC path;
- on the link between the two nodes, when each reaches the floor with its other partner: a cable or switch port on
  the path between them;
- nowhere, when no pair on that rail tells (two nodes, or neighbours slow too): the pair is named as it is.

Exit 0 when every measurement of a finished stage reaches the floor; 1 when one is below it or failed (`fail`), or
when the log holds no stage or a cut one (`incomplete`, with how many measurements are missing); 2 when the log
cannot be read. Prefixes before a line (`kubectl logs --timestamps`, `--prefix`, mpirun's `--tag-output`) are
ignored; a stage that starts again is judged on its last start.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tools.ncclcheck.parse import read_lines, strip_prefix

MARKER = "fastpath-pairwise:"  # components/jobs/pairwise.py MARKER
BEGIN = re.compile(r"fastpath-pairwise: begin (\d{1,6}) rails x (\d{1,9}) pairs\b")
END = re.compile(r"fastpath-pairwise: end\b")
MEASUREMENT = re.compile(
    r"fastpath-pairwise: (\S{1,253}) (\S{1,253}) (\S{1,253}) (FAILED|\d{1,9}(?:\.\d{1,9})?(?:[eE][+-]?\d{1,3})?)"
)


@dataclass(frozen=True)
class Measurement:
    rail: str
    a: str
    b: str
    gbps: float | None  # None: FAILED

    def bad(self, floor: float) -> bool:
        return self.gbps is None or self.gbps < floor

    def other(self, node: str) -> str:
        return self.b if node == self.a else self.a

    def said(self, floor: float) -> str:
        if self.gbps is None:
            return "failed (no bandwidth: its mpirun output follows its marker line in the log)"
        return f"{self.gbps:g} GB/s, under the floor of {floor:g} GB/s"


@dataclass
class Stage:
    """What the log holds of the last run of the stage."""

    found: bool = False  # a begin line
    finished: bool = False  # its end line
    planned: int | None = None  # rails x pairs, from the begin line
    measurements: list[Measurement] = field(default_factory=list)
    cut: str | None = None  # a marker line the log ends in the middle of


@dataclass
class Verdict:
    floor_gbps: float
    measurements: int
    planned: int | None
    nodes: list[dict] = field(default_factory=list)  # {rail, node, pairs: [{with, gbps}]}
    links: list[dict] = field(default_factory=list)  # {rail, a, b, gbps}
    unplaced: list[dict] = field(default_factory=list)  # {rail, a, b, gbps}
    verdict: str = "pass"  # pass, fail, incomplete
    reasons: list[str] = field(default_factory=list)


def read(lines: Iterable[str]) -> Stage:
    """The stage's lines out of a log (raw lines, each with its line end but perhaps the last)."""
    stage = Stage()
    latest: dict[tuple[str, frozenset[str]], Measurement] = {}  # a pair measured again: its last result
    for raw in lines:
        if MARKER not in raw:
            continue
        line = strip_prefix(raw)
        if not line.startswith(MARKER):
            continue
        if not raw.endswith(("\n", "\r")):  # the log ends inside this line: its number may be cut too
            stage.cut = line
            continue
        if m := BEGIN.match(line):
            stage, latest = Stage(found=True, planned=int(m.group(1)) * int(m.group(2))), {}
        elif END.match(line):
            stage.finished = True
        elif m := MEASUREMENT.fullmatch(line):
            rail, a, b, value = m.groups()
            latest[(rail, frozenset((a, b)))] = Measurement(rail, a, b, None if value == "FAILED" else float(value))
    stage.measurements = list(latest.values())
    return stage


def judge(stage: Stage, floor: float) -> Verdict:
    """Place every measurement below `floor` or failed on a node, a link, or neither, per rail."""
    v = Verdict(floor_gbps=floor, measurements=len(stage.measurements), planned=stage.planned)
    blamed: dict[str, list[str]] = {}  # node -> rails it is blamed on
    rails = list(dict.fromkeys(m.rail for m in stage.measurements))
    for rail in rails:
        on = [m for m in stage.measurements if m.rail == rail]
        pairs_of: dict[str, list[Measurement]] = {}
        for m in on:
            pairs_of.setdefault(m.a, []).append(m)
            pairs_of.setdefault(m.b, []).append(m)
        nodes = _bad_nodes(pairs_of, floor)
        for node, neighbours in nodes.items():
            own = pairs_of[node]
            v.nodes.append(
                {"rail": rail, "node": node, "pairs": [{"with": m.other(node), "gbps": m.gbps} for m in own]}
            )
            blamed.setdefault(node, []).append(rail)
            v.reasons.append(
                f"{node} on {rail}: every pair it is in is "
                + ("below the floor" if all(m.gbps is not None for m in own) else "below the floor or failed")
                + " ("
                + "; ".join(f"with {m.other(node)}: {m.said(floor)}" for m in own)
                + f") while {' and '.join(neighbours)} reach{'es' if len(neighbours) == 1 else ''} the floor with "
                + ("its other partner" if len(neighbours) == 1 else "their other partners")
                + f": this node's {rail} NIC, its port or "
                "cable, or its GPU-to-NIC path (GPUDirect RDMA)"
            )
        for m in on:
            if not m.bad(floor) or m.a in nodes or m.b in nodes:
                continue
            entry = {"rail": rail, "a": m.a, "b": m.b, "gbps": m.gbps}
            if all(any(not o.bad(floor) for o in pairs_of[n] if o is not m) for n in (m.a, m.b)):
                v.links.append(entry)
                v.reasons.append(
                    f"{rail} between {m.a} and {m.b}: {m.said(floor)}, while each reaches the floor with its other "
                    "partner: the link between them (a cable or switch port on their path)"
                )
            else:
                v.unplaced.append(entry)
                v.reasons.append(
                    f"{rail} between {m.a} and {m.b}: {m.said(floor)}; no other pair on {rail} tells the node from "
                    "the link (neither node reaches the floor with another partner)"
                )
    for node, on_rails in blamed.items():
        if len(rails) > 1 and len(on_rails) == len(rails):
            v.reasons.append(
                f"{node} is below the floor on every rail ({len(rails)}): look at the host (PCIe, GPU clocks, "
                "NUMA placement) before the cables"
            )
    v.verdict = "fail" if v.reasons else "pass"
    cut = f"; its last line is cut: {stage.cut!r}" if stage.cut else ""
    if not stage.found and not stage.measurements:
        v.reasons.append(
            f"no pairwise stage in this log (no '{MARKER} begin' line): the launcher stopped before it, or this is "
            "another job's log"
        )
    elif not stage.found:
        v.reasons.append(f"the log starts after the pairwise stage did (no '{MARKER} begin' line): not all of it")
    elif not stage.finished:
        missing = "some" if stage.planned is None else f"{stage.planned - v.measurements} of {stage.planned}"
        v.reasons.append(
            f"the log ends before the pairwise stage did (no '{MARKER} end' line): {missing} measurements are not in "
            f"it{cut}"
        )
    elif stage.planned is not None and v.measurements < stage.planned:
        v.reasons.append(f"{stage.planned - v.measurements} of {stage.planned} measurements are not in this log")
    if v.verdict == "pass" and v.reasons:
        v.verdict = "incomplete"
    return v


def _bad_nodes(pairs_of: dict[str, list[Measurement]], floor: float) -> dict[str, list[str]]:
    """The nodes whose every pair is bad while a neighbour reaches the floor with another partner; each with those
    neighbours."""
    out = {}
    for node, own in pairs_of.items():
        if not all(m.bad(floor) for m in own):
            continue
        fine = [
            m.other(node)
            for m in own
            if any(not o.bad(floor) for o in pairs_of[m.other(node)] if node not in (o.a, o.b))
        ]
        if fine:
            out[node] = list(dict.fromkeys(fine))
    return out


def render_text(v: Verdict) -> str:
    """The counts, the verdict, then each node, link and pair below the floor and what the log lacks."""
    planned = f" of {v.planned}" if v.planned is not None else ""
    lines = [
        f"pairwise: {v.measurements}{planned} measurements, floor {v.floor_gbps:g} GB/s; below it: "
        f"{len(v.nodes)} node(s), {len(v.links)} link(s), {len(v.unplaced)} pair(s) not placed",
        f"verdict: {v.verdict}",
        *(f"  - {reason}" for reason in v.reasons),
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Read the log, place what is below the floor, print it; the exit code (0 pass, 1 fail or incomplete, 2 a log
    that cannot be read)."""
    ap = argparse.ArgumentParser(prog="python -m tools.pairwise", description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("log", type=Path)
    ap.add_argument("--floor", type=float, required=True, metavar="GBPS", help="floor of one rail's pair, GB/s")
    ap.add_argument("--format", choices=("text", "json"), default="text")
    args = ap.parse_args(argv)
    try:
        stage = read(read_lines(args.log))
    except OSError as err:
        print(f"{args.log}: cannot read log: {err.strerror or err}", file=sys.stderr)
        return 2
    except Exception as err:  # a bug, not the input: one line naming the file, never a traceback
        print(f"{args.log}: pairwise failed reading this log: {type(err).__name__}: {err}", file=sys.stderr)
        return 2
    v = judge(stage, args.floor)
    try:
        print(json.dumps(asdict(v), indent=2) if args.format == "json" else render_text(v))
        sys.stdout.flush()
    except BrokenPipeError:  # `| head`: the reader has what it wanted
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keeps the interpreter's final flush quiet
    return 0 if v.verdict == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
