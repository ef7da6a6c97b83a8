"""Loading a stack: the `fastpath:*` keys of a stack file (or the Pulumi runtime's config) into a StackConfig,
each job checked on its own and against the cluster, or one ConfigError naming the file and every bad key path.

The models and their own rules are components/model/config.py (the cluster) and components/model/job.py (a
job); what a job may ask of a cluster is components/jobs/checks.py (`problems`). This module is the only one
that knows both, so neither imports the other's side.
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any, get_args

from pydantic import BaseModel, ValidationError

from components import k8s_syntax
from components.jobs import acceptance, checks
from components.model.base import ChangeClass, Model
from components.model.config import ConfigError, PlatformConfig
from components.model.job import JobSpec, references
from components.model.profile import profile as make_profile

NAMESPACE = "fastpath"
ACK_CLASSES = get_args(ChangeClass)
ACK_VALUE = re.compile(rf"^({'|'.join(ACK_CLASSES)}) [0-9a-f]{{8}}$")
KNOWN_KEYS = ("platform", "jobs", "acknowledge", "existing")
QUALIFIED = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-.a-z0-9]*[a-z0-9])?$")


class ExistingObjects(Model):
    """Objects the jobs use that the stack does not make, as `namespace/name`. On a real cluster the program reads
    each through the provider, so a preview fails while one is missing; the offline render takes the list as the
    cluster's truth. A job that names one not listed here is refused before anything is registered."""

    secrets: list[str] = []
    """Secrets that jobs' secretEnv read."""
    claims: list[str] = []
    """PersistentVolumeClaims that jobs' datasets mount."""


class StackConfig(Model):
    """A stack file's `fastpath:*` keys (docs/config.md's preamble documents them)."""

    platform: PlatformConfig
    jobs: list[JobSpec] = []
    acknowledge: dict[str, str] = {}
    """Change id -> `<class> <fingerprint>`, as the impact prints it (components/impact/ack.py)."""
    existing: ExistingObjects = ExistingObjects()


SIMPLE_KEY = re.compile(r"^[A-Za-z0-9_.$-][A-Za-z0-9_. $/-]*$")


def _loc(prefix: str, loc: tuple) -> str:
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            # A key with control characters, quotes or nothing at all is shown quoted, so the path stays one line.
            out += f".{part}" if SIMPLE_KEY.match(str(part)) else f"[{k8s_syntax.short(str(part), 40)}]"
    return out


def _model_at(model: type[BaseModel], loc: tuple) -> type[BaseModel] | None:
    """The model whose keys sit at `loc` under `model` (through lists, dicts and optional fields), or None."""
    current: Any = model
    for part in loc:
        if isinstance(part, int) or not (isinstance(current, type) and issubclass(current, BaseModel)):
            continue  # a list index: the item type is already current
        by_alias = {f.alias or n: f for n, f in current.model_fields.items()}
        field = by_alias.get(part) or current.model_fields.get(part)
        if field is None:
            return None
        current = next(
            (t for t in _flatten(field.annotation) if isinstance(t, type) and issubclass(t, BaseModel)), None
        )
        if current is None:
            return None
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _flatten(annotation: Any) -> list[Any]:
    args = get_args(annotation)
    return [t for a in args for t in _flatten(a)] if args else [annotation]


def _suggest(model: type[BaseModel] | None, loc: tuple) -> str:
    """`did you mean X?` for an unknown key close to a known one (docs/config.md otherwise)."""
    within = _model_at(model, loc[:-1]) if model is not None else None
    if within is not None and isinstance(loc[-1], str):
        keys = [f.alias or n for n, f in within.model_fields.items()]
        if close := difflib.get_close_matches(loc[-1], keys, n=1, cutoff=0.6):
            return f"unknown key: did you mean `{close[0]}`?"
    return "unknown key: check its spelling against docs/config.md"


def _problems(err: ValidationError, prefix: str, model: type[BaseModel] | None = None) -> list[str]:
    problems = []
    for e in err.errors():
        # Pydantic appends the failing member's type name to unions' locations; it means nothing to a user.
        loc = tuple(p for p in e["loc"] if not (isinstance(p, str) and ("[" in p or p in ("str", "int", "bool"))))
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = _suggest(model, loc)
        problems.append(f"{_loc(prefix, loc)}: {msg}")
    return problems


def parse(raw: dict[str, Any], source: str) -> StackConfig:
    """Validate the stack's `fastpath:*` config (key without namespace -> decoded value).

    Raises ConfigError naming `source` (the stack file) and each failing key path.
    """
    unknown = sorted(set(raw) - set(KNOWN_KEYS))
    if unknown:
        raise ConfigError(
            source,
            [
                f"{NAMESPACE}:{k}: unknown key (fastpath reads only "
                f"{', '.join(NAMESPACE + ':' + k for k in KNOWN_KEYS)})"
                for k in unknown
            ],
        )
    if raw.get("platform") is None:
        raise ConfigError(source, [f"{NAMESPACE}:platform: required: describe the cluster (see docs/config.md)"])
    try:
        platform = PlatformConfig.model_validate(raw["platform"])
    except ValidationError as err:
        raise ConfigError(source, _problems(err, f"{NAMESPACE}:platform", PlatformConfig)) from None
    jobs = raw.get("jobs") or []
    if not isinstance(jobs, list):
        raise ConfigError(source, [f"{NAMESPACE}:jobs: must be a list of jobs"])
    acks = raw.get("acknowledge") or {}
    if not isinstance(acks, dict) or not all(isinstance(v, str) and ACK_VALUE.match(v) for v in acks.values()):
        raise ConfigError(
            source,
            [
                f"{NAMESPACE}:acknowledge: must map a change id to the class and fingerprint the impact printed for "
                f"it ({' or '.join(ACK_CLASSES)}, a space, 8 hex digits), for example `fabric.sriov: disruptive "
                "3f9a1c2e`: copy the lines `pulumi preview` or `make diff` prints"
            ],
        )
    try:
        existing = ExistingObjects.model_validate(raw.get("existing") or {})
    except ValidationError as err:
        raise ConfigError(source, _problems(err, f"{NAMESPACE}:existing")) from None
    bad = [
        f"{NAMESPACE}:existing: {ref!r} is not namespace/name"
        for ref in [*existing.secrets, *existing.claims]
        if not QUALIFIED.match(ref)
    ]
    if bad:
        raise ConfigError(source, bad)
    specs = validate_jobs(jobs, platform, source)
    if missing := missing_objects(specs, existing, platform):
        raise ConfigError(source, missing)
    return StackConfig(platform=platform, jobs=specs, acknowledge=acks, existing=existing)


def missing_objects(jobs: list[JobSpec], existing: ExistingObjects, platform: PlatformConfig) -> list[str]:
    """A job naming a Secret or claim the stack does not declare would sit in CreateContainerConfigError (or
    unschedulable) holding its gang's GPUs: refused here, with the key to add."""
    declared = {"secrets": set(existing.secrets), "claims": set(existing.claims)}
    out = []
    for i, spec in enumerate(jobs):
        ns = spec.namespace or platform.training_namespaces[0]
        for kind, ref, path in references(spec, ns):
            if ref not in declared[kind]:
                what = "Secret" if kind == "secrets" else "PersistentVolumeClaim"
                out.append(
                    f"{NAMESPACE}:jobs[{i}].{path}: the {what} {ref} is not in {NAMESPACE}:existing.{kind}: its pods "
                    f"could never start; create it on the cluster and add {ref!r} to {NAMESPACE}:existing.{kind} (a "
                    "preview then reads it from the cluster)"
                )
    return out


def validate_jobs(jobs: list, platform: PlatformConfig, source: str) -> list[JobSpec]:
    """Each job on its own (JobSpec), then against this cluster's profile (checks.problems), then names."""
    prof = make_profile(platform)
    problems: list[str] = []
    out: list[JobSpec] = []
    for i, raw in enumerate(jobs):
        prefix = f"{NAMESPACE}:jobs[{i}]"
        try:
            job = JobSpec.model_validate(raw)
        except ValidationError as err:
            problems += _problems(err, prefix, JobSpec)
            continue
        problems += [f"{prefix}.{key}: {msg}" for key, msg in checks.problems(job, prof)]
        out.append(job)
    names = [(j.namespace or prof.namespaces[0], j.name) for j in out]
    first: dict[tuple[str, str], int] = {}
    for i, n in enumerate(names):
        if first.setdefault(n, i) != i:
            problems.append(f"{NAMESPACE}:jobs[{i}].name: {n[1]!r} is already a job in namespace {n[0]!r}")
    # The acceptance job lives in the first training namespace under a fixed name.
    if platform.acceptance.enabled:
        reserved = {acceptance.JOB_NAME}
        for i, (ns, name) in enumerate(names):
            if ns == prof.namespaces[0] and name in reserved:
                problems.append(
                    f"{NAMESPACE}:jobs[{i}].name: {name!r} is the name of a fabric acceptance job "
                    "(fastpath:platform.acceptance): rename the job"
                )
    if problems:
        raise ConfigError(source, problems)
    return out


def decode(value: Any) -> Any:
    """Pulumi hands structured config to the program as JSON text; plain strings stay strings."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def from_pulumi() -> StackConfig:
    """Read and validate the current stack's config through the Pulumi runtime (real engine or mocks)."""
    import pulumi
    from pulumi.runtime import config as runtime_config

    # The language host may pass config in PULUMI_CONFIG or set it in-process (mocks do the latter): read both.
    merged = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    raw = {}
    for key, value in merged.items():
        ns, _, name = key.partition(":")
        if ns == NAMESPACE:
            raw[name] = decode(value)
    return parse(raw, stack_file(pulumi.get_stack()))


# Where the stack files are, as messages name them: Pulumi.yaml's stackConfigDir; the offline renderer's
# --stacks-dir sets it to the folder it reads, so a message names the file actually read.
STACKS_DIR = "stacks"


def stack_file(stack: str) -> str:
    return f"{STACKS_DIR}/Pulumi.{stack}.yaml"
