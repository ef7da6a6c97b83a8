"""The fabric acceptance's log, as both sides spell it: the marker lines around each run, which the launcher's
series writes (components/jobs/acceptance.py) and `tools.ncclcheck --section` reads (the transports its checks
expect, LOCAL and MNNVL beside the kinds' own, are in components/fabric/kinds.py). Pure: the checker imports it."""

from __future__ import annotations

import re

MARKER = "fastpath-acceptance:"
OVER_NVLINK = "nvlink"  # the runs of a size over multi-node NVLink, beside its network run
# `N`, or `N/OVER`: the N-node run over OVER (an NVL72 acceptance runs each size over the network and over NVLink).
SECTION = re.compile(r"([1-9]\d{0,5})(?:/([a-z]{1,16}))?")


def section(nodes: int, over: str | None = None) -> str:
    return f"{nodes}/{over}" if over else str(nodes)


def section_markers(name: str | int) -> tuple[str, str]:
    """The begin and end lines of an acceptance log's section `name` (`4`, `4/nvlink`)."""
    m = SECTION.fullmatch(str(name))
    if m is None:
        raise ValueError(f"section {name!r}: expected NODES or NODES/TRANSPORT (4, 4/nvlink)")
    over = f" over {m.group(2)}" if m.group(2) else ""
    return f"{MARKER} begin {m.group(1)} nodes{over}", f"{MARKER} end {m.group(1)} nodes{over}"
