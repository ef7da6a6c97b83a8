"""NCCL's environment: every NCCL_* variable is one NCCL reads, integer ones hold integers, TRACE stays in debugging."""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache

from components.fabric import nccl
from policies.engine import ADVISORY, MANDATORY, Context, Finding, rule
from policies.pods import containers, rank_env, rank_literals, where

# components.fabric.nccl's judgements, once per distinct name or value: thousands of pods repeat a few dozen.
classify = lru_cache(maxsize=4096)(nccl.classify)
value_problem = lru_cache(maxsize=4096)(nccl.value_problem)


@rule(
    "nccl-int-values",
    "Integer NCCL variables hold integers",
    level=MANDATORY,
    description="NCCL parses integer variables with strtoll: `true` or text silently becomes 0.",
    remediation="give the variable an integer (1 or 0, not true or false)",
    trainer_alone=True,
)
def nccl_int_values(ctx: Context) -> Iterator[Finding]:
    for t in ctx.templates:
        for c in containers(t):
            for name, value in rank_literals(ctx, t, c).items():
                if name.startswith("NCCL_") and (p := value_problem(name, value)):
                    yield Finding(f"{where(t, c)}: {p}")


@rule(
    "nccl-known-vars",
    "Every NCCL_* variable is one NCCL reads",
    level=MANDATORY,
    description="Removed variables are errors; deprecated ones (with the replacement) and unknown ones (with the "
    "nearest known name) are advisory. Source: NCCL v2.30.7's own list.",
    remediation="drop removed variables, rename deprecated ones, correct misspelt ones",
    mixed=True,
    trainer_alone=True,
)
def nccl_known_vars(ctx: Context) -> Iterator[Finding]:
    for t in ctx.templates:
        for c in containers(t):
            for name in rank_env(ctx, t, c):
                if not name.startswith("NCCL_"):
                    continue
                v = classify(name)
                if v.status == "removed":
                    yield Finding(f"{where(t, c)}: {v.hint}")
                elif v.status == "deprecated":
                    yield Finding(f"{where(t, c)}: {v.hint}", level=ADVISORY)
                elif v.status in ("unknown", "not_nccl"):
                    yield Finding(f"{where(t, c)}: {v.hint}", level=ADVISORY)


@rule(
    "nccl-debug-trace",
    "NCCL_DEBUG is not TRACE outside debugging",
    level=ADVISORY,
    description="TRACE is for debugging sessions; exempt those with a label.",
    remediation="use NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS, or exempt debugging workloads by label",
    trainer_alone=True,
)
def nccl_debug_trace(ctx: Context) -> Iterator[Finding]:
    for t in ctx.templates:
        for c in containers(t):
            if rank_literals(ctx, t, c).get("NCCL_DEBUG", "").strip().upper() == "TRACE":
                yield Finding(
                    f"{where(t, c)}: NCCL_DEBUG=TRACE floods logs and slows collectives (and prints "
                    "nothing more unless NCCL was built with TRACE=1): use INFO with NCCL_DEBUG_SUBSYS, "
                    "or label the workload as debugging"
                )
