"""Kubeflow Trainer v2: a TrainJob is judged by the pods its runtime gives it, and may not take the runtime's
wiring away.
"""

from __future__ import annotations

from collections.abc import Iterator

from components.jobs.runtime_v2.judge import override_problems
from policies.engine import ADVISORY, MANDATORY, TRAINJOB_RUNTIME, Context, Finding, rule
from policies.runtimes import MERGE_ERRORS


@rule(
    TRAINJOB_RUNTIME,
    "TrainJobs are judged by the pods their runtime gives them",
    level=MANDATORY,
    description="A TrainJob is judged together with the ClusterTrainingRuntime it names (or the TrainingRuntime of "
    "that name in its namespace) when that is among the objects checked: every rule reads the pods the "
    "trainer controller makes from the two, and this rule flags the fabric wiring the TrainJob takes "
    "away from its runtime (an RDMA resource overridden in resourcesPerNode, a GPU limit without the "
    "request, resourcesPerNode without the GPU count so torchrun starts one process per node, memory "
    "at or under /dev/shm, a fabric NCCL variable replaced; IPC_LOCK, tolerations, the dshm volume, "
    "the networks annotation or the GPU node selector replaced by a runtime patch). A runtime that is "
    "not among the objects is an advisory finding naming it, as judgeable does: only the trainer's "
    "image and env were judged. What a runtime gets wrong is reported on the runtime, once, not again "
    "on each TrainJob that names it. Under CrossGuard this is a stack policy (it needs the runtime), "
    "and it carries the other rules' findings on TrainJobs, each prefixed with its rule id.",
    remediation="leave the runtime's wiring alone (the message names the TrainJob field); lint a TrainJob together "
    "with its runtime",
    mixed=True,
    kinds={"TrainJob"},
    pods=False,
    stack=True,
    trainer_alone=True,
)
def trainjob_runtime(ctx: Context) -> Iterator[Finding]:
    """A TrainJob cannot carry wiring of its own, only take some away: kubeflow/trainer@v2.3.0 merges
    resourcesPerNode per resource name, upserts env by name and applies runtimePatches as a strategic merge patch
    that replaces lists whole (components/jobs/runtime_v2/judge.py override_problems, where the upstream paths are)."""
    pairing = ctx.pairing
    if ctx.obj.get("kind") != "TrainJob" or pairing is None:
        return
    if pairing.runtime is None or pairing.effective is None:
        yield Finding(pairing.problem or "its runtime was not judged", level=ADVISORY)
        return
    try:
        problems = override_problems(ctx.obj, pairing.runtime, pairing.derived)
    except MERGE_ERRORS as err:  # pair() merged the two already; a shape only the comparison trips on
        yield Finding(
            f"could not be compared with {pairing.ref} ({type(err).__name__}: {str(err)[:160]}): what it "
            "overrides was not judged",
            level=ADVISORY,
        )
        return
    for message in problems:
        yield Finding(message)
