"""Per-kind knowledge lives in one place: every decision that depends on a fabric kind or a rail attachment is a
column of its row in components/fabric/kinds.py or a `match` that ends in `case other: assert_never(other)`, so a
new row is either described by its columns or named by mypy wherever it needs code. A string comparison
(`fabric.kind == "roce"`) would silently take the new row down the `else` branch."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

from components.fabric import kinds

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "components" / "fabric" / "kinds.py"
NAMES = frozenset(get_args(kinds.FabricKind)) | frozenset(get_args(kinds.Attachment))
# Methods that look a key up: `.get("roce")` is a per-kind table as much as `{"roce": ...}[kind]` is.
LOOKUPS = {"get", "pop", "setdefault"}
FIX = (
    "make the decision a column of the Kind or AttachmentKind row in components/fabric/kinds.py (read it as "
    "fabric.kind_row.<column> or fabric.attachment_row.<column>), or a `match` on the kind or attachment that ends "
    "in `case other: assert_never(other)`, so a new row is described by its columns or named by mypy"
)


def named(node: ast.expr | None) -> set[str]:
    """The kind and attachment names a literal (or a tuple, list or set of literals) spells."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value} & NAMES
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return set().union(*(named(e) for e in node.elts))
    return set()


def ends_in_assert_never(match: ast.Match) -> bool:
    last = match.cases[-1]
    return any(isinstance(n, ast.Call) and (getattr(n.func, "id", None) or getattr(n.func, "attr", None)) == "assert_never" for stmt in last.body for n in ast.walk(stmt))


def kind_decisions(source: str) -> list[tuple[int, str]]:
    """(line, what) for each decision on a kind or attachment name outside the table."""
    found = []
    for node in ast.walk(ast.parse(source)):
        what = None
        if isinstance(node, ast.Compare) and any(named(x) for x in (node.left, *node.comparators)):
            what = f"compares a kind or attachment to a string: {ast.unparse(node)}"
        elif isinstance(node, ast.Match) and not ends_in_assert_never(node):
            patterns = {v for c in node.cases for p in ast.walk(c.pattern) if isinstance(p, ast.MatchValue) for v in named(p.value)}
            if patterns:
                what = f"`match {ast.unparse(node.subject)}` on {sorted(patterns)} without a last `case other: assert_never(other)`"
        elif isinstance(node, ast.Dict) and (keys := set().union(*(named(k) for k in node.keys))):
            what = f"a table keyed by {sorted(keys)} outside the kinds table"
        elif isinstance(node, ast.Subscript) and named(node.slice):
            what = f"looks a kind or attachment up by name: {ast.unparse(node)}"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in LOOKUPS and node.args and named(node.args[0]):
            what = f"looks a kind or attachment up by name: {ast.unparse(node)}"
        if what is not None:
            found.append((getattr(node, "lineno", 0), what[:160]))
    return sorted(found)


def scanned() -> list[Path]:
    files = [*ROOT.glob("components/**/*.py"), *ROOT.glob("policies/**/*.py"), *ROOT.glob("tools/**/*.py"), ROOT / "__main__.py"]
    return sorted(p for p in files if p != TABLE)


def test_no_kind_is_compared_to_a_string_outside_the_table():
    places = [f"{p.relative_to(ROOT)}:{line}: {what}" for p in scanned() for line, what in kind_decisions(p.read_text())]
    assert not places, f"{len(places)} per-kind decisions outside the kinds table; {FIX}:\n" + "\n".join(places)


def test_the_detector_finds_planted_decisions_and_accepts_exhaustive_matches():
    kind, other_kind = sorted(get_args(kinds.FabricKind))[:2]
    attachment = sorted(get_args(kinds.Attachment))[0]
    planted = {
        f"fabric.kind == {kind!r}": 1,
        f"fabric.kind != {kind!r}": 1,
        f"{attachment!r} == fabric.attachment": 1,
        f"fabric.kind in ({kind!r}, {other_kind!r})": 1,
        f"fabric.attachment not in {{{attachment!r}}}": 1,
        f"{{{kind!r}: 1}}[fabric.kind]": 1,
        f"sizes.get({kind!r})": 1,
        f"kinds.KINDS[{kind!r}].rdma": 1,
        f"match fabric.kind:\n    case {kind!r}:\n        pass\n    case _:\n        pass": 1,
        f"match fabric.attachment:\n    case {attachment!r} if fabric.kind == {kind!r}:\n        pass\n    case other:\n        assert_never(other)": 1,
    }
    for source, count in planted.items():
        assert len(kind_decisions(source)) == count, source
    exhaustive = f"match fabric.kind:\n    case {kind!r} | {other_kind!r}:\n        pass\n    case other:\n        assert_never(other)"
    not_a_kind = 'fabric.kind_row.rdma and provider == "not-a-kind" and match_value == ["x"]'
    reading_the_row = "fabric.kind_row.gid_from_address or fabric.attachment_row.host_network"
    assert kind_decisions(exhaustive) == kind_decisions(not_a_kind) == kind_decisions(reading_the_row) == []
    assert "assert_never" in FIX and "column" in FIX
