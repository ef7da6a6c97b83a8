"""What could not be judged: the rules say what they could not read, so a clean run means judged, not skipped."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from policies.dra import UNCOUNTED
from policies.engine import ADVISORY, Context, Finding, rule
from policies.pods import GPU_RESOURCE, containers, dict_or_empty, int_or_none, where
from policies.podspecs import walk
from policies.rules.images import templated_image

# Integer fields the rules read, all below spec: (path, rules that could not judge without it).
INT_FIELDS = [
    (("spec", "minAvailable"), "gang-scheduling"),
    (("spec", "runPolicy", "schedulingPolicy", "minAvailable"), "gang-scheduling"),
    (("spec", "elasticPolicy", "minReplicas"), "gang-scheduling"),
    (("spec", "elasticPolicy", "maxRestarts"), "restart-budget"),
    (("spec", "runPolicy", "backoffLimit"), "restart-budget"),
    (("spec", "nprocPerNode"), "gpu-procs-match"),
    (("spec", "slotsPerWorker"), "gpu-procs-match"),
    (("spec", "trainer", "numProcPerNode"), "gpu-procs-match"),
]
INT_FIELD_KEYS = frozenset(path[1] for path, _ in INT_FIELDS)


def _at(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _gpu_paths(value: Any, path: str) -> list[str]:
    """Where GPUs are requested anywhere in an object (resources.limits/requests with a GPU resource)."""
    found: list[str] = []

    def requests_gpus(value: dict, path: str) -> bool:
        res = value.get("resources")
        if isinstance(res, dict) and any(
            isinstance(res.get(k), dict) and any(GPU_RESOURCE.match(str(r)) for r in res[k])
            for k in ("limits", "requests")
        ):
            found.append(path)
            return True
        return False

    walk(value, path, requests_gpus, limit=20)
    return found


@rule(
    "judgeable",
    "What the rules could not judge is said",
    level=ADVISORY,
    description="Parts in shapes Kubernetes would refuse (`Master: null`, env entries without a name, containers "
    "as a mapping), GPU counts and numbers that a template fills in later (`$GPUS`, `{{ .Values.gpus "
    "}}`), templated images, and GPU pods inside a kind the linter does not know (judged as single "
    "pods, when it finds their pod specs) are listed, so a clean run means judged, not skipped. GPUs "
    "are nvidia.com/gpu, nvidia.com/mig-*, amd.com/gpu, gpu.intel.com/i915|xe and habana.ai/gaudi.",
    remediation="lint the rendered manifest, or the objects an unknown kind creates",
    pods=False,
    trainer_alone=True,
)
def judgeable(ctx: Context) -> Iterator[Finding]:
    """What the rules could not judge, said rather than passed in silence: parts of the object in shapes
    Kubernetes would not give them (podspecs.extract lists them), GPU counts and numbers the rules read that a
    template fills in later, templated images, and GPU pods inside a kind the linter does not know."""
    for problem in ctx.problems:
        yield Finding(problem)
    for t in ctx.templates:
        for c in containers(t):
            for res, value in ctx.facts(c).unknown_gpus.items():
                if isinstance(value, str) and value in UNCOUNTED:  # a DRA claim of a whole node, or of alternatives
                    continue
                yield Finding(
                    f"{where(t, c)}: {res} is {str(value)!r}, not a number (a template variable?): "
                    "shm-size and gpu-procs-match could not count its GPUs (the other rules judged it as "
                    "a GPU container); lint the rendered manifest"
                )
        for c in [*containers(t), *(t.template["spec"].get("initContainers") or [])]:
            image = str(c.get("image") or "").strip()
            if image and templated_image(image):
                yield Finding(
                    f"{where(t, c)}: image {image!r} is filled in later: image-pinned could not judge "
                    "it; lint the rendered manifest"
                )
    spec = dict_or_empty(ctx.obj.get("spec"))
    for path, rule_id in INT_FIELDS if not INT_FIELD_KEYS.isdisjoint(spec) else ():  # most objects have none
        value = _at(spec, path[1:]) if path[1] in spec else None
        if (
            value is not None
            and int_or_none(value) is None
            and not (path[-1] in ("nprocPerNode", "numProcPerNode") and str(value) in ("auto", "gpu", "cpu"))
        ):
            yield Finding(
                f"{'.'.join(path)} is {str(value)!r}, not a number (a template variable?): {rule_id} could "
                "not judge it; lint the rendered manifest"
            )
    if not ctx.known_kind:
        gpu_paths = _gpu_paths(ctx.obj.get("spec"), "spec")
        if gpu_paths:
            kind = f"{ctx.obj.get('apiVersion') or '?'} {ctx.obj.get('kind')}"
            judged = sorted({t.path for t in ctx.templates})
            what = (
                f"its pod specs at {', '.join(judged)} were judged as single pods, but replica counts, gang "
                "scheduling and the job-level rules were not applied"
                if judged
                else "it holds no pod spec the rules can read, so nothing in it was judged"
            )
            yield Finding(
                f"{kind} is not a workload kind the linter knows, and it requests GPUs at "
                f"{', '.join(gpu_paths[:5])}{' ...' if len(gpu_paths) > 5 else ''}: {what}; lint the "
                "objects it creates (kubectl get pods -o yaml), or add the kind to policies/podspecs.py"
            )
