"""The house rules that keep fastpath's structure simple enough to extend (docs/architecture.md)."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

COMPONENTS = Path(__file__).resolve().parent.parent / "components"


def imports_of(path: Path) -> set[str]:
    """Every components module `path` imports, at module level or inside a function."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "components":
                out.update(alias.name for alias in node.names)
            elif node.module.startswith("components."):
                out.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            out.update(a.name.split(".")[1] for a in node.names if a.name.startswith("components."))
    return out


def import_graph() -> dict[str, set[str]]:
    return {p.stem: imports_of(p) - {p.stem} for p in COMPONENTS.glob("*.py") if p.stem != "__init__"}


def test_components_import_no_circle():
    """A circle among components/ is how the knot starts: config needing jobs needing config. Local imports
    count too: they hide a circle, they do not remove it."""
    try:
        order = list(graphlib.TopologicalSorter(import_graph()).static_order())
    except graphlib.CycleError as err:
        pytest.fail(f"components/ import circle: {' -> '.join(err.args[1])}")
    assert "config" in order


def test_the_circle_detector_sees_a_circle():
    graph = {**import_graph(), "config": {"training_job"}}
    with pytest.raises(graphlib.CycleError):
        list(graphlib.TopologicalSorter(graph).static_order())


@pytest.mark.parametrize(
    ("module", "must_not_import"),
    [
        ("kinds", {"config", "fabric", "profile"}),  # the table is pure data: everyone reads it
        ("config", {"fabric", "profile", "training_job", "acceptance", "stack"}),  # models know no builders
        ("fabric", {"profile", "training_job", "stack"}),
    ],
)
def test_layering(module, must_not_import):
    assert not (import_graph()[module] & must_not_import)
