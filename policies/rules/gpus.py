"""GPUs and processes: each GPU of a pod gets one training process."""

from __future__ import annotations

from collections.abc import Iterator

from policies.engine import MANDATORY, Context, Finding, rule
from policies.pods import containers, dict_or_empty, int_or_none, where

# Kinds that declare processes per node.
NPROC_KINDS = frozenset({"PyTorchJob", "MPIJob", "TrainJob", "TrainingRuntime", "ClusterTrainingRuntime"})


def _nproc(obj: dict) -> tuple[str, str | None, list[str]]:
    """(field name, declared processes per node, roles it applies to)."""
    kind, spec = obj.get("kind"), dict_or_empty(obj.get("spec"))
    if kind == "PyTorchJob":
        return "nprocPerNode", spec.get("nprocPerNode"), ["Master", "Worker"]
    if kind == "MPIJob":
        return "slotsPerWorker", spec.get("slotsPerWorker"), ["Worker"]
    if kind == "TrainJob":
        return "trainer.numProcPerNode", dict_or_empty(spec.get("trainer")).get("numProcPerNode"), ["node"]
    if kind in ("TrainingRuntime", "ClusterTrainingRuntime"):
        ml = dict_or_empty(spec.get("mlPolicy"))
        value = dict_or_empty(ml.get("torch")).get("numProcPerNode") or dict_or_empty(ml.get("mpi")).get(
            "numProcPerNode"
        )
        return "mlPolicy.numProcPerNode", value, ["node"]
    return "", None, []


@rule(
    "gpu-procs-match",
    "GPU limit equals processes per node",
    level=MANDATORY,
    description="nprocPerNode (PyTorchJob), slotsPerWorker (MPIJob) or numProcPerNode (Trainer) equals the GPUs per "
    "pod.",
    remediation="set processes per node to the GPUs per pod",
    kinds=NPROC_KINDS,
    trainer_alone=True,
)
def gpu_procs_match(ctx: Context) -> Iterator[Finding]:
    field_name, declared, roles = _nproc(ctx.obj)
    procs = int_or_none(declared)
    if procs is None:  # unset, auto/gpu/cpu, or a template (judgeable reports that)
        return
    for t in ctx.templates:
        if t.role not in roles:
            continue
        for c in containers(t):
            own = ctx.facts(c)
            if (n := own.gpus) and not own.unknown_gpus and n != procs:
                yield Finding(
                    f"{where(t, c)} has {n} GPUs but {field_name} is {procs}: "
                    + ("GPUs sit idle" if procs < n else "processes share GPUs")
                    + f"; set {field_name} to {n}"
                )
