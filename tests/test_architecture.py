"""The house rules that keep fastpath's structure simple enough to extend (docs/architecture.md)."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

COMPONENTS = Path(__file__).resolve().parent.parent / "components"
PACKAGES = ("fabric", "model", "platform", "jobs", "impact")


def module_name(path: Path) -> str:
    """`fabric.kinds` for components/fabric/kinds.py, `k8s` for components/k8s.py."""
    return ".".join(path.relative_to(COMPONENTS).with_suffix("").parts)


def imports_of(path: Path, known: set[str]) -> set[str]:
    """Every components module `path` imports, at module level or inside a function."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "components":
            base = node.module.removeprefix("components").removeprefix(".")
            for alias in node.names:
                name = f"{base}.{alias.name}" if base else alias.name
                out.add(name if name in known else base)
        elif isinstance(node, ast.Import):
            out.update(a.name.removeprefix("components.") for a in node.names if a.name.startswith("components."))
    return out


def import_graph() -> dict[str, set[str]]:
    paths = [p for p in COMPONENTS.rglob("*.py") if p.stem != "__init__"]
    known = {module_name(p) for p in paths}
    return {module_name(p): imports_of(p, known) - {module_name(p)} for p in paths}


def test_components_import_no_circle():
    """A circle among components/ is how the knot starts: config needing jobs needing config. Local imports
    count too: they hide a circle, they do not remove it."""
    try:
        order = list(graphlib.TopologicalSorter(import_graph()).static_order())
    except graphlib.CycleError as err:
        pytest.fail(f"components/ import circle: {' -> '.join(err.args[1])}")
    assert "model.config" in order


def test_the_circle_detector_sees_a_circle():
    graph = {**import_graph(), "model.config": {"jobs.checks"}}
    with pytest.raises(graphlib.CycleError):
        list(graphlib.TopologicalSorter(graph).static_order())


def test_every_module_lives_in_a_room():
    """components/ holds the packages and the three helpers every room uses; a new module goes in a room."""
    loose = {m for m in import_graph() if "." not in m}
    assert loose <= {"k8s", "k8s_syntax", "versions"}, loose


def within(modules: set[str], *prefixes: str) -> set[str]:
    return {m for m in modules if m.startswith(prefixes)}


@pytest.mark.parametrize(
    ("module", "may_import"),
    [
        # The tables are pure data: everyone reads them, they read nothing but each other.
        ("fabric.kinds", {"fabric.nccl", "k8s_syntax", "versions"}),
        ("fabric.nccl", {"fabric.kinds", "k8s_syntax", "versions"}),
        # Pure arithmetic on the attachment rows (NV-IPAM blocks, Multus names): the schema checks subnets with it,
        # so it reads no model.
        ("fabric.addressing", {"fabric.kinds"}),
        # Models know no builders: the schema reads the tables and nothing built from it.
        ("model.base", {"k8s_syntax"}),
        ("model.config", {"model.base", "model.topology", "fabric.kinds", "fabric.nccl", "fabric.addressing", "k8s_syntax", "versions"}),
        # The topology's levels and placement: shared by the platform's and a job's config, reading nothing else.
        ("model.topology", {"model.base"}),
        # A job is described without a cluster: judging it against one is the job side's (jobs.checks).
        ("model.job", {"model.base", "model.topology", "fabric.nccl", "k8s_syntax"}),
        # What stack.py runs on every job: the checks know no builder, so loading a stack builds nothing.
        ("jobs.checks", {"jobs.launchers", "jobs.sizing", "fabric.nccl", "fabric.wiring", "model.base", "model.config", "model.job", "model.profile"}),
        ("jobs.launchers", set()),  # which launcher a command starts: words only
        ("platform.shares", set()),  # Volcano's deserved shares: arithmetic on queues, read by jobs and the render
        ("jobs.shell", set()),  # the shell programs' loader reads files, nothing of fastpath's
        # The impact model is a pure function of two states: it reads no builder and no config.
        ("impact.model", {"impact.state"}),
        ("impact.ack", {"impact.model"}),
        # Shipped into the cluster as one file: the reaper and the metrics sidecar read nothing of fastpath's.
        ("ops.reaper", set()),
        ("jobs.nccl_metrics", set()),
    ],
)
def test_layering(module, may_import):
    assert import_graph()[module] <= may_import


@pytest.mark.parametrize(
    ("room", "must_not_import"),
    [
        ("fabric.", ("jobs.", "platform.", "model.job", "model.profile", "model.stack")),  # the fabric model knows no jobs
        ("platform.", ("model.stack",)),  # components take a validated model; loading is the program's
        ("jobs.", ("model.stack", "platform.component")),
        ("ops.", ("jobs.", "platform.", "model.stack", "impact.")),  # operations read the cluster's model only
    ],
)
def test_rooms(room, must_not_import):
    graph = import_graph()
    crossing = {m: within(deps, *must_not_import) for m, deps in graph.items() if m.startswith(room)}
    assert not {m: d for m, d in crossing.items() if d}
