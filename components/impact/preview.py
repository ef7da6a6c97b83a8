"""The impact check the program runs before it registers any cluster resource: the new config's state against the
state the stack exported on its last deployment (its own `state` output), reported as warnings, and a refusal for
a disruptive or destructive change the stack file does not acknowledge.

The previous state is read through a StackReference to this very stack (the engine serves the last deployment's
outputs; under the mocks tools/render.py serves the committed render's `state.json`). A first deployment has none.
"""

from __future__ import annotations

from typing import Any

import pulumi

from components.impact import ack
from components.impact.model import Impact, impact, unknown_previous
from components.impact.state import snapshot
from components.model.stack import StackConfig

STATE_OUTPUT = "state"
# The organization a self-managed backend (and the mocks) report when there is none.
DEFAULT_ORGANIZATION = "organization"


def self_reference(stack: str, project: str = "fastpath", organization: str | None = None) -> str:
    """This stack's name for a StackReference: fully qualified on a backend with organizations; the bare stack
    name on a self-managed one (its legacy layout refuses `organization/<project>/<stack>`; both layouts read the
    bare name as a stack of the current project)."""
    if organization in (None, "", DEFAULT_ORGANIZATION):
        return stack
    return f"{organization}/{project}/{stack}"


def _output(ref: pulumi.StackReference, name: str) -> Any:
    from pulumi.runtime.sync_await import _sync_await

    # Synchronously, like the SDK's own invokes: the refusal must come before any cluster resource is registered.
    details = _sync_await(ref.get_output_details(name))
    return details.value if details.value is not None else details.secret_value


def previous_state() -> dict[str, Any] | None:
    """The `state` output of this stack's last deployment; None when it was never deployed; `{"schema": None}`
    when it was deployed by a fastpath that did not export one (its `profile` output is there)."""
    name = self_reference(pulumi.get_stack(), pulumi.get_project(), pulumi.get_organization())
    ref = pulumi.StackReference("fastpath-last-deployment", stack_name=name)
    value = _output(ref, STATE_OUTPUT)
    if isinstance(value, dict):
        return value
    return {"schema": None} if _output(ref, "profile") is not None else None


def check(cfg: StackConfig, source: str) -> tuple[dict[str, Any], Impact]:
    """The new state and its impact; raises pulumi.RunError for an unacknowledged disruptive change."""
    new = snapshot(cfg.platform, cfg.jobs)
    try:
        old = previous_state()
        imp = impact(old, new)
    except Exception as err:  # noqa: BLE001 - unreadable: refused like an unknown state, with the reason
        imp = unknown_previous(new, f"reading it failed ({type(err).__name__}: {str(err)[:200]})")
    for line in ack.warnings(imp, cfg.acknowledge):
        pulumi.log.warn(line)
    if missing := ack.unacknowledged(imp, cfg.acknowledge):
        raise pulumi.RunError(ack.refusal(source, missing))
    return new, imp
