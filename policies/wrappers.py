"""Objects that carry whole workloads inside them, unwrapped so the rules judge what will run.

An AppWrapper (project-codeflare/appwrapper@v1.2.1:api/v1beta2/appwrapper_types.go AppWrapperSpec.Components)
holds each wrapped object whole in `spec.components[].template`. Its controller creates them in the AppWrapper's
namespace (internal/controller/appwrapper/resource_management.go parseComponent) once Kueue admits the AppWrapper
(the queue label is on the wrapper: internal/webhook/appwrapper_webhook.go), and Kueue admits it as one workload,
every component's pods or none. So a component inherits the wrapper's namespace and queue label: that is its gang.
"""

from __future__ import annotations

from components.jobs.resolve import KUEUE_QUEUE_LABEL
from policies.pods import dict_or_empty


def _appwrapper(obj: dict) -> list[tuple[str, dict]]:
    meta = dict_or_empty(obj.get("metadata"))
    namespace = meta.get("namespace")
    queue = dict_or_empty(meta.get("labels")).get(KUEUE_QUEUE_LABEL)
    out = []
    components = dict_or_empty(obj.get("spec")).get("components")
    for i, component in enumerate(components if isinstance(components, list) else []):
        inner = dict_or_empty(dict_or_empty(component).get("template"))
        if not isinstance(inner.get("kind"), str):
            continue
        inner_meta = dict(dict_or_empty(inner.get("metadata")))
        if namespace and not inner_meta.get("namespace"):
            inner_meta["namespace"] = namespace
        if queue:
            inner_meta["labels"] = {**dict_or_empty(inner_meta.get("labels")), KUEUE_QUEUE_LABEL: queue}
        out.append((f"spec.components[{i}]", {**inner, "metadata": inner_meta}))
    return out


# kind -> the objects it wraps, as (path, object as it will be created).
WRAPPERS = {"AppWrapper": _appwrapper}


def unwrap(obj: dict) -> list[tuple[str, dict]] | None:
    """The objects `obj` wraps, or None when it is not a wrapper."""
    kind = obj.get("kind")
    return WRAPPERS[kind](obj) if kind in WRAPPERS else None
