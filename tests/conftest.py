import copy
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tools import render, schemas, upstream

ROOT = Path(__file__).resolve().parents[1]
STACKS = render.stack_names()


# Upstream files a test's schema checks wanted and did not find (schema_problems): the test runs its other asserts
# and is then skipped, instead of skipping before any of them.
_DEFERRED: list[str] = []


def schema_problems(obj: dict) -> list[str]:
    """tools.schemas.validate for a check that is one of several in a test: without the locked CRDs it reports no
    problem and the test, once its other asserts pass, is skipped with the missing file (failed under
    FASTPATH_REQUIRE_UPSTREAM=1, as CI runs)."""
    try:
        return schemas.validate(obj)
    except upstream.Missing as err:
        if upstream.required():
            raise
        _DEFERRED.append(str(err))
        return []


def schema_problems_at(obj: dict, version: str) -> list[str]:
    """schema_problems with the core kinds checked at Kubernetes `version` (a stack's kubernetesVersion)."""
    try:
        return schemas.validate(obj, version=version)
    except upstream.Missing as err:
        if upstream.required():
            raise
        _DEFERRED.append(str(err))
        return []


def _skip_if_missing() -> Iterator[None]:
    """A test that reads an upstream file (tools/upstream.py path()) which is neither cached nor mirrored is skipped
    with one line naming it and `make upstream`; under FASTPATH_REQUIRE_UPSTREAM=1 (CI, with its mirror) it fails."""
    _DEFERRED.clear()
    try:
        result = yield
    except upstream.Missing as err:
        if upstream.required():
            raise
        # At the test's own location, so `-rs` shows which test wanted the file.
        raise pytest.skip.Exception(str(err), _use_item_location=True) from None
    if _DEFERRED:
        missing = _DEFERRED[0]
        _DEFERRED.clear()
        raise pytest.skip.Exception(f"{missing} (its other checks passed)", _use_item_location=True)
    return result


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
