"""Acknowledging a change that drains, reboots or deletes: the stack file's `fastpath:acknowledge` key, and how an
impact is told (warnings in `pulumi preview`, the refusal, SUMMARY.md's section).

    fastpath:acknowledge:
      fabric.sriov: disruptive        # the change id the impact prints, and the class it was told as

An acknowledgment names the class: a change that turns out worse than acknowledged (destructive where the file
says disruptive) is refused again. It stays in the file until the `pulumi up` that applies the change has run;
afterwards it matches nothing and the program says so.
"""

from __future__ import annotations

from collections.abc import Mapping

from components.impact.model import CLASSES, NEEDS_ACK, Change, Impact

KEY = "fastpath:acknowledge"


def covered(change: Change, acks: Mapping[str, str]) -> bool:
    ack = acks.get(change.id)
    return ack in CLASSES and CLASSES.index(ack) >= CLASSES.index(change.cls)


def unacknowledged(imp: Impact, acks: Mapping[str, str]) -> list[Change]:
    return [c for c in imp.changes if c.cls in NEEDS_ACK and not covered(c, acks)]


def stale(imp: Impact, acks: Mapping[str, str]) -> list[str]:
    """Acknowledgments no change of this impact needs (the change was applied, or never happened)."""
    ids = {c.id for c in imp.changes if c.cls in NEEDS_ACK}
    return sorted(set(acks) - ids)


def _where(change: Change) -> str:
    return ", ".join(
        f"fastpath:platform.{k}" if not k.startswith("jobs[") else f"fastpath:{k}" for k in change.keys
    ) or ("no stack key (a fastpath or chart version moved it)")


def refusal(source: str, missing: list[Change]) -> str:
    """The error `pulumi preview` stops with: file, key paths, consequence, and the lines to add."""
    lines = [f"{source}: {len(missing)} change(s) would disrupt the running cluster and are not acknowledged:"]
    for c in missing:
        lines.append(f"  - {c.cls} `{c.id}` ({_where(c)}): {c.what}. {c.consequence}")
    lines.append("To go ahead (at a time the consequences are acceptable), add to the stack file:")
    lines.append(f"  {KEY}:")
    lines += [f"    {c.id}: {c.cls}" for c in missing]
    lines.append("or undo the edit. `make diff` shows the whole impact.")
    return "\n".join(lines)


def warnings(imp: Impact, acks: Mapping[str, str]) -> list[str]:
    """One line per change for `pulumi preview`, plus stale acknowledgments."""
    out = [f"impact: {c.cls} `{c.id}`: {c.what}: {c.consequence}" for c in imp.changes if c.cls != "no-op"]
    out += (
        []
        if imp.first
        else [
            f"impact: {KEY}.{a} matches no change against the last deployment: remove it once the `pulumi up` that "
            "applied it has run"
            for a in stale(imp, acks)
        ]
    )
    return out + [f"impact: {n}" for n in imp.notes]


def markdown(imp: Impact, against: str) -> str:
    """SUMMARY.md's section: what this render's change does to a cluster running the previous one."""
    head = f"## Impact on the running cluster\n\nAgainst {against}.\n\n"
    if imp.first:
        return head + "First deployment of this stack: nothing of it runs yet.\n"
    if not imp.changes:
        return head + "No change a controller acts on.\n" + "".join(f"\n- {n}" for n in imp.notes)
    rows = ["| class | change | what | consequence | upstream |", "|---|---|---|---|---|"]
    for c in sorted(imp.changes, key=lambda c: -CLASSES.index(c.cls)):
        cells = [c.cls, f"`{c.id}`", c.what, c.consequence, "; ".join(c.upstream)]
        rows.append("| " + " | ".join(x.replace("|", "\\|") for x in cells) + " |")
    return head + f"Worst: **{imp.worst}**.\n\n" + "\n".join(rows) + "\n"
