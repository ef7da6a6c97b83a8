import copy
import functools
import os
from pathlib import Path

import pytest
import yaml

from tools import render

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "upstream"
STACKS = render.stack_names()

if os.environ.get("CI") and not SHARED.is_dir():
    # CI runs with shared/ beside the clone; a missing one must not turn the schema tests into skips.
    raise RuntimeError(f"{SHARED} is missing: the schema and upstream-values tests need it")


@functools.cache
def _rendered(stack: str) -> render.Rendered:
    return render.render_stack(stack)


@pytest.fixture(scope="session")
def rendered():
    """Render a stack once per test session (the real __main__.py under mocks)."""
    return _rendered


def stack_platform(stack: str) -> dict:
    """The `fastpath:platform` object of a committed stack file, as a fresh dict to mutate."""
    doc = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())
    return copy.deepcopy(doc["config"]["fastpath:platform"])


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: runs real processes for tens of seconds (deselect: -m 'not slow')")
