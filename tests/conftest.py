import copy
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tools import render, upstream

ROOT = Path(__file__).resolve().parents[1]
STACKS = render.stack_names()


def _skip_if_missing() -> Iterator[None]:
    """A test that reads an upstream file (tools/upstream.py path()) which is neither cached nor mirrored is skipped
    with one line naming it and `make upstream`; under FASTPATH_REQUIRE_UPSTREAM=1 (CI, with its mirror) it fails."""
    try:
        return (yield)
    except upstream.Missing as err:
        if upstream.required():
            raise
        # At the test's own location, so `-rs` shows which test wanted the file.
        raise pytest.skip.Exception(str(err), _use_item_location=True) from None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    return (yield from _skip_if_missing())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    return (yield from _skip_if_missing())


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
