"""The mock runtime: run a Pulumi program with no CLI and no cluster, and record what it registers.

    run = mocks.run("prod-ib", config, secrets)            # __main__.py, or program=callable
    run.registrations                                       # every resource, in registration order

What the mock provider answers: an object's inputs as its state, plus a stable stand-in `metadata.uid` for
Kubernetes objects (so ownerReferences resolve; the recorded inputs leave it out); StackReferences from
`references`. A provider component (kustomize.v2.Directory) is one registration with its inputs, aliases and
transforms: what it builds at `pulumi up` is the provider's business, and the transforms, which the engine runs on
those objects, never run here. It reads no file but the program and knows nothing of stack files:
tools/render.py reads those and turns a Run into files.
"""

from __future__ import annotations

import runpy
import sys
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


class ProgramError(Exception):
    """The program stopped with a pulumi.RunError. `registered` counts the resources it had registered by then."""

    def __init__(self, message: str, registered: int = 0):
        super().__init__(message)
        self.registered = registered


@dataclass
class Registration:
    urn: str
    type: str
    name: str
    parent: str
    custom: bool
    inputs: dict
    dependencies: list[str]
    protect: bool
    retain_on_delete: bool
    outputs: dict = field(default_factory=dict)
    deleted_with: str = ""
    """The URN of the resource whose deletion takes this one along (its own delete is skipped)."""
    property_dependencies: dict[str, list[str]] = field(default_factory=dict)
    """Per input property, the URNs it was computed from (what an Output input carried)."""
    replace_on_changes: list[str] = field(default_factory=list)
    delete_before_replace: bool = False
    remote: bool = False
    """A provider's component (kustomize.v2.Directory): the provider builds its children at `pulumi up`."""
    aliases: list[dict[str, Any]] = field(default_factory=list)
    """As the SDK sends them: `{"urn": ...}`, or a spec's set fields (`type`, `name`, `parentUrn`, `noParent`...)."""
    transforms: list[Callable[..., Any]] = field(default_factory=list)
    """The `transforms` option's functions (pulumi.ResourceTransform), to call on a stand-in child."""


@dataclass
class Run:
    stack: str
    registrations: list[Registration]
    invokes: list[tuple[str, dict]]
    outputs: dict[str, Any]
    reads: dict[str, str] = field(default_factory=dict)
    """URN -> the id a `.get` read asked for (an object the stack uses but does not make)."""


def _without_uid(state: dict) -> dict:
    md = state.get("metadata")
    if isinstance(md, dict) and "uid" in md:
        return {**state, "metadata": {k: v for k, v in md.items() if k != "uid"}}
    return state


def _alias(alias: Any) -> dict[str, Any]:
    if alias.HasField("spec"):
        # An empty parentUrn (the oneof's default) is the resource's own parent: left out, like any unset field.
        return {f.name: v for f, v in alias.spec.ListFields() if v not in ("", False)}
    return {"urn": alias.urn}


def run(
    stack: str,
    config: dict[str, str],
    secrets: list[str],
    program: Callable[[], None] | None = None,
    references: dict[str, dict] | None = None,
    project: str = "fastpath",
) -> Run:
    """Run __main__.py (or `program`) as stack `stack` with `config` (values as the CLI passes them: strings,
    structured ones as JSON text); every registration, invoke and stack output recorded. `references` gives the
    outputs of StackReferences by stack name. Raises ProgramError when the program stops with a RunError."""
    import pulumi
    from pulumi.runtime import rpc
    from pulumi.runtime.mocks import MockCallArgs, MockMonitor, MockResourceArgs
    from pulumi.runtime.settings import get_root_resource, set_root_resource
    from pulumi.runtime.stack import Stack, wait_for_rpcs
    from pulumi.runtime.sync_await import _sync_await

    registrations: list[Registration] = []
    invokes: list[tuple[str, dict]] = []
    reads: dict[str, str] = {}
    by_urn: dict[str, Registration] = {}
    # The SDK resolves a registration's transforms for new_resource only, which the monitor calls on its own thread.
    resolved = threading.local()

    class Mocks(pulumi.runtime.Mocks):
        def new_resource(self, args: MockResourceArgs) -> tuple[str | None, dict]:
            resolved.transforms = list(args.transforms)
            if args.typ == "pulumi:pulumi:StackReference":
                name = str(args.inputs.get("name"))
                return name, {"name": name, "outputs": (references or {}).get(name, {}), "secretOutputNames": []}
            if args.typ.startswith("kubernetes:") and isinstance(args.inputs.get("metadata"), dict):
                # The API server's uid, so ownerReferences to this object resolve (a stable stand-in).
                uid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{stack}/{args.typ}/{args.name}"))
                return f"{args.name}-id", {**args.inputs, "metadata": {**args.inputs["metadata"], "uid": uid}}
            return f"{args.name}-id", args.inputs

        def call(self, args: MockCallArgs) -> Any:  # the SDK takes a plain dict of outputs too
            invokes.append((args.token, dict(args.args)))
            return {}

    class Monitor(MockMonitor):
        def ReadResource(self, request: Any) -> Any:
            response = super().ReadResource(request)
            if request.type.startswith("kubernetes:"):  # not the StackReferences
                reads[response.urn] = request.id
            return response

        def RegisterResource(self, request: Any) -> Any:
            resolved.transforms = []
            response = super().RegisterResource(request)
            if request.type != "pulumi:pulumi:Stack":
                reg = Registration(
                    urn=response.urn,
                    type=request.type,
                    name=request.name,
                    parent=request.parent,
                    custom=bool(request.custom),
                    inputs=_without_uid(self.resources[response.urn].state),
                    dependencies=list(request.dependencies),
                    protect=bool(request.protect),
                    retain_on_delete=bool(request.retainOnDelete),
                    deleted_with=str(request.deletedWith or ""),
                    property_dependencies={k: list(v.urns) for k, v in request.propertyDependencies.items()},
                    replace_on_changes=list(request.replaceOnChanges),
                    delete_before_replace=bool(request.deleteBeforeReplace),
                    remote=bool(request.remote),
                    aliases=[_alias(a) for a in request.aliases],
                    transforms=resolved.transforms,
                )
                registrations.append(reg)
                by_urn[reg.urn] = reg
            return response

        def RegisterResourceOutputs(self, request: Any) -> Any:
            if request.urn in by_urn:
                by_urn[request.urn].outputs = rpc.deserialize_properties(request.outputs) or {}
            return super().RegisterResourceOutputs(request)

    mocks = Mocks()
    # A fresh root Stack per run: set_mocks keeps an existing one, which would name the previous stack.
    set_root_resource(None)  # type: ignore[arg-type]  # annotated without None, which the SDK takes
    pulumi.runtime.set_mocks(mocks, project=project, stack=stack, preview=False, monitor=Monitor(mocks))
    pulumi.runtime.set_all_config(config, secrets)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    try:
        if program is None:
            runpy.run_path(str(ROOT / "__main__.py"), run_name="__main__")
        else:
            program()
        _sync_await(wait_for_rpcs())
    except pulumi.RunError as err:
        raise ProgramError(str(err), registered=len(registrations)) from None

    def resolve(value: Any) -> Any:
        # Await only real Outputs: Output.from_input on a large plain dict walks it at great cost.
        if isinstance(value, pulumi.Output):
            return _sync_await(value.future())
        if isinstance(value, dict):
            return {k: resolve(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [resolve(v) for v in value]
        return value

    root = get_root_resource()
    assert isinstance(root, Stack)
    outputs = {k: resolve(v) for k, v in root.outputs.items()}
    return Run(stack, registrations, invokes, outputs, reads)
