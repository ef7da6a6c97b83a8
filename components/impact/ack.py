"""Acknowledging a change that drains, reboots or deletes: the stack file's `fastpath:acknowledge` key, and how an
impact is told (warnings in `pulumi preview`, the refusal, SUMMARY.md's section).

    fastpath:acknowledge:
      fabric.sriov: disruptive 3f9a1c2e     # the change id, the class it was told as, and its fingerprint

An acknowledgment names the class and the change: a change that turns out worse than acknowledged (destructive
where the file says disruptive), or a different change of the same id later (another VF count), has another
class or fingerprint and is refused again. It may stay in the file after the `pulumi up` that applied it; the
program then says it matches nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

from components.impact.model import CLASSES, NEEDS_ACK, Change, Impact

KEY = "fastpath:acknowledge"


def ack_value(change: Change) -> str:
    """What the stack file's `fastpath:acknowledge.<id>` says for `change`."""
    return f"{change.cls} {change.fingerprint}"


def covered(change: Change, acks: Mapping[str, str]) -> bool:
    cls, _, fingerprint = (acks.get(change.id) or "").partition(" ")
    return cls in CLASSES and CLASSES.index(cls) >= CLASSES.index(change.cls) and fingerprint == change.fingerprint


def unacknowledged(imp: Impact, acks: Mapping[str, str]) -> list[Change]:
    return [c for c in imp.changes if c.cls in NEEDS_ACK and not covered(c, acks)]


def stale(imp: Impact, acks: Mapping[str, str]) -> list[str]:
    """Acknowledgments no change of this impact needs (the change was applied, or never happened, or it is another
    change now)."""
    return sorted(a for a in acks if not any(c.id == a and covered(c, acks) for c in imp.changes))


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
    lines += [f"    {c.id}: {ack_value(c)}" for c in missing]
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
    return out


def markdown(imp: Impact, against: str) -> str:
    """SUMMARY.md's section: what this render's change does to a cluster running the previous one."""
    head = f"## Impact on the running cluster\n\nAgainst {against}.\n\n"
    if imp.first:
        return head + "First deployment of this stack: nothing of it runs yet.\n"
    if not imp.changes:
        return head + "No change a controller acts on.\n"
    rows = ["| class | change | what | consequence | upstream |", "|---|---|---|---|---|"]
    for c in sorted(imp.changes, key=lambda c: -CLASSES.index(c.cls)):
        ident = f"`{c.id}: {ack_value(c)}`" if c.cls in NEEDS_ACK else f"`{c.id}`"
        cells = [c.cls, ident, c.what, c.consequence, "; ".join(c.upstream)]
        rows.append("| " + " | ".join(x.replace("|", "\\|") for x in cells) + " |")
    return head + f"Worst: **{imp.worst}**.\n\n" + "\n".join(rows) + "\n"
