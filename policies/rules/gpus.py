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


WORKLOAD_DAEMONS = frozenset({"DaemonSet"})


@rule(
    "gpu-pod-tolerates-quarantine",
    "A GPU training pod does not tolerate every taint",
    level=MANDATORY,
    description="A toleration with operator Exists and no key tolerates every taint: the pod lands on a node that "
    "health monitoring quarantined (a NoSchedule taint) and stays on one tainted NoExecute, including a lost "
    "node's `node.kubernetes.io/out-of-service`, so its gang restarts onto the sick node or never leaves it. "
    "Node agents (DaemonSets) are not judged.",
    remediation="tolerate the GPU taint by its key (e.g. {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule})",
)
def gpu_pod_tolerates_quarantine(ctx: Context) -> Iterator[Finding]:
    """kubernetes/kubernetes staging/src/k8s.io/api/core/v1/toleration.go ToleratesTaint: an empty key with
    operator Exists matches every taint, of every effect when the effect is empty too."""
    if ctx.obj.get("kind") in WORKLOAD_DAEMONS:
        return
    seen: set[int] = set()
    for t, _ in ctx.gpu_containers:
        if id(t) in seen:
            continue
        seen.add(id(t))
        spec = dict_or_empty(dict_or_empty(t.template).get("spec"))
        for tol in spec.get("tolerations") or []:
            tol = dict_or_empty(tol)
            if (
                not tol.get("key")
                and tol.get("operator") == "Exists"
                and tol.get("effect") in (None, "", "NoSchedule", "NoExecute")
            ):
                effect = tol.get("effect") or "every effect"
                yield Finding(
                    f"{t.role} pod tolerates every taint ({effect}): it is scheduled onto quarantined GPU nodes and "
                    "never evicted from a lost one; tolerate the GPU taint by its key instead"
                )
                break
