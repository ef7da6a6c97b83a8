"""The policy engine: what a rule is, the catalogue `@rule` fills, and running rules over objects.

A rule is a pure function over one Kubernetes object (a dict, normalized once by `normalize`) and its pod templates,
seen through a `Context` that also holds the rule's config and the other objects being checked (for cross-object
facts: a claim's access modes, a TrainJob's runtime). `@rule` registers it in RULES with its metadata, right above
the function; the rules themselves live in policies/rules/, one module per area, and importing any part of the pack
registers all of them (policies/__init__.py). The CrossGuard pack (policies/pack.py), the offline linter
(tools/lint.py) and the generated policies/README.md read RULES; the pack and the linter both call `evaluate`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from components.model.profile import normalize as _normalize
from policies import dra
from policies.pods import Facts, containers, dict_or_empty, facts, launcher_exports, namespace_of
from policies.podspecs import Extracted, PodTemplate, extract
from policies.runtimes import Pairing, RuntimeIndex, pair
from policies.wrappers import unwrap

MANDATORY, ADVISORY, DISABLED, REMEDIATE = "mandatory", "advisory", "disabled", "remediate"
LEVELS = (ADVISORY, MANDATORY, REMEDIATE, DISABLED)  # CrossGuard's (pulumi apitype.EnforcementLevel)


def normalize(props: Any) -> Any:
    """The one normalization both paths use: engine props (read-only proxies, every number a float) and YAML
    both become plain dicts with integers. What is plain already is shared, not copied: a caller that edits the
    result copies first (add_ipc_lock)."""
    return _plain(props)


PLAIN = frozenset({str, int, bool, type(None)})


def _plain(value: Any) -> Any:
    """components.model.profile.normalize, copying only the parts it changes. YAML gives dicts, lists, strings and
    ints, which need nothing; asking each node the abstract Mapping/Sequence questions that engine proxies need
    cost more than all the rules together. Anything else (proxies, floats, dates) takes the shared path."""
    kind = type(value)
    if kind is dict:
        out = None
        for k, v in value.items():
            if type(v) in PLAIN:
                continue
            new = _plain(v)
            if new is not v:
                if out is None:
                    out = dict(value)
                out[k] = new
        return value if out is None else out
    if kind is list:
        copied = None
        for i, v in enumerate(value):
            if type(v) in PLAIN:
                continue
            new = _plain(v)
            if new is not v:
                if copied is None:
                    copied = list(value)
                copied[i] = new
        return value if copied is None else copied
    if kind in PLAIN:
        return value
    return _normalize(value)


@dataclass(frozen=True)
class Finding:
    message: str
    level: str | None = None  # overrides the rule's level (e.g. deprecated NCCL names are only advisory)


@dataclass(frozen=True)
class Violation:
    rule: str
    level: str
    kind: str
    namespace: str
    name: str
    message: str

    def as_dict(self) -> dict:
        return {
            "rule": self.rule,
            "level": self.level,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "message": self.message,
        }


@dataclass
class Context:
    obj: dict
    templates: list[PodTemplate]
    config: dict
    # (namespace, name) -> PersistentVolumeClaim among the checked objects, and (kind, namespace, name) -> the DRA
    # objects (policies/dra.py index): claim_index.
    claims: dict[tuple[str, ...], dict | None]
    problems: list[str] = field(default_factory=list)  # what the extractor could not read (podspecs.extract)
    known_kind: bool = True
    pairing: Pairing | None = None  # a TrainJob's runtime, and whether its pods are the templates judged
    kueue_defaulted: frozenset[str] = frozenset()  # namespaces whose unlabelled jobs Kueue queues (RuntimeIndex)
    # rank_env and rank_literals per container, by identity: the extracted containers live as long as the context.
    envs: dict[int, tuple[dict[str, str | None], dict[str, str]]] = field(default_factory=dict)
    _facts: dict[int, Facts] = field(default_factory=dict, init=False, repr=False)
    _consumed: dict[int, dra.Consumed] = field(default_factory=dict, init=False, repr=False)

    def facts(self, c: dict) -> Facts:
        """A container's GPUs, RDMA resources and literal env (pods.facts), with the GPUs and RDMA NICs of the DRA
        claims it consumes (dra.with_claims), worked out once per container of the object, by identity like `envs`."""
        known = self._facts.get(id(c))
        if known is None:
            known = self._facts[id(c)] = dra.with_claims(facts(c), self.consumed(c))
        return known

    def consumed(self, c: dict) -> dra.Consumed:
        """What a container of the object's pods gets from the DRA claims it lists (dra.consumed), once per
        container (a claim none of the objects checked answers is `unresolved`)."""
        known = self._consumed.get(id(c))
        if known is None:
            known = dra.NOTHING
            if (c.get("resources") or {}).get("claims") and (t := self._pod_of.get(id(c))) is not None:
                known = dra.consumed(t, c, self.namespace, self.claims)
            self._consumed[id(c)] = known
        return known

    @cached_property
    def _pod_of(self) -> dict[int, PodTemplate]:
        return {
            id(c): t
            for t in self.templates
            for c in [*containers(t), *(t.template["spec"].get("initContainers") or [])]
        }

    @cached_property
    def namespace(self) -> str | None:
        """Where the object's pods run, for the claims they name: its namespace (`default` when unset), or None for a
        ClusterTrainingRuntime, whose pods run in each TrainJob's namespace."""
        if self.obj.get("kind") == "ClusterTrainingRuntime":
            return None
        return namespace_of(self.obj)

    @cached_property
    def gpu_containers(self) -> list[tuple[PodTemplate, dict]]:
        """Containers that ask for GPUs, counted or not (a templated count still means GPUs)."""
        return [(t, c) for t in self.templates for c in containers(t) if self.facts(c).has_gpus]

    @cached_property
    def exports(self) -> dict[str, str | None]:
        """What an MPIJob launcher exports to every rank (launcher_exports), read once per object."""
        return launcher_exports(self)


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    description: str
    level: str
    check: Callable[[Context], Iterator[Finding]]
    remediation: str  # what the user does about a finding, in a few words (README, CrossGuard's remediation steps)
    params: dict = field(default_factory=dict)  # name -> (default, description)
    mixed: bool = False  # a mandatory rule that also reports advisory findings (CrossGuard gets two policies)
    kinds: frozenset[str] | None = None  # the only kinds it can flag; None: any kind
    pods: bool = True  # it judges pod templates only, so an object without any cannot fail it
    remediate: Callable[[dict], dict | None] | None = None  # the automatic fix under enforcementLevel remediate
    # It reads nothing of a pod beyond one container and the object itself (image, env, a container's GPUs against
    # the declared processes, what could not be read), so it also judges a TrainJob's trainer alone when the runtime
    # holding the rest of the pod is not among the objects. The other rules wait for the runtime.
    trainer_alone: bool = False
    # It needs objects beside the one it flags (a TrainJob's runtime): CrossGuard, which hands a resource policy one
    # resource at a time, runs it as a stack policy over the whole stack (policies/pack.py).
    stack: bool = False
    area: str = ""  # the module of policies/rules/ it lives in (README groups the catalogue by it)


Check = Callable[["Context"], Iterator["Finding"]]

# The catalogue, in the order `@rule` meets the checks: area by area (policies/rules/__init__.py AREAS), each
# area's in its module's order. README, linter and pack list the rules in this order.
RULES: list[Rule] = []
BY_ID: dict[str, Rule] = {}


def rule(
    id: str,
    title: str,
    *,
    level: str,
    description: str,
    remediation: str,
    params: dict | None = None,
    mixed: bool = False,
    kinds: Iterable[str] | None = None,
    pods: bool = True,
    remediate: Callable[[dict], dict | None] | None = None,
    trainer_alone: bool = False,
    stack: bool = False,
) -> Callable[[Check], Check]:
    """Register the decorated check in RULES with its metadata, which the pack, the linter and the generated
    README all read from there."""

    def register(check: Check) -> Check:
        if id in BY_ID:
            raise ValueError(f"rule id {id!r} is registered twice")
        BY_ID[id] = Rule(
            id,
            title,
            description,
            level,
            check,
            remediation,
            dict(params or {}),
            mixed,
            frozenset(kinds) if kinds is not None else None,
            pods,
            remediate,
            trainer_alone,
            stack,
            check.__module__.rpartition(".")[2],
        )
        RULES.append(BY_ID[id])
        return check

    return register


# The rule that judges a TrainJob against its runtime (policies/rules/trainer_v2.py): its findings are about the
# TrainJob itself, not about the pods the runtime gives it, so they are reported as they are.
TRAINJOB_RUNTIME = "trainjob-runtime"


def _entry(config: dict | None, name: str) -> dict:
    """One policy's entry of a config: resolved by parse_config, or written by hand (tests, the CrossGuard
    validator) as {rule-id: {...}} or {rule-id: "level"}."""
    value = (config or {}).get(name)
    if isinstance(value, str):
        return {"enforcementLevel": value}
    return value if isinstance(value, dict) else {}


def rule_config(rule: Rule, config: dict | None, name: str | None = None) -> dict:
    """The rule's defaults merged with the user's config for policy `name` (the rule's id, or `<id>-advisory`
    for the advisory findings of a mixed rule)."""
    name = name or rule.id
    merged = {k: default for k, (default, _) in rule.params.items()}
    level = ADVISORY if name != rule.id else rule.level
    all_level = _entry(config, "all").get("enforcementLevel")
    merged.update({"enforcementLevel": all_level or level, "exemptNamespaces": [], "exemptLabels": {}})
    if name != rule.id:  # the advisory policy shares the rule's settings unless it has its own
        merged.update({k: v for k, v in _entry(config, rule.id).items() if k != "enforcementLevel"})
    merged.update(_entry(config, name))
    return merged


def exempt(obj: dict, cfg: dict) -> bool:
    md = dict_or_empty(obj.get("metadata"))
    if md.get("namespace") in (cfg.get("exemptNamespaces") or []):
        return True
    labels = dict_or_empty(md.get("labels"))
    return any(labels.get(k) == v for k, v in dict_or_empty(cfg.get("exemptLabels")).items())


def claim_index(objects: list[dict]) -> dict[tuple[str, ...], dict | None]:
    """The claims pods name among `objects`: PersistentVolumeClaims under (namespace, name); DRA's
    ResourceClaimTemplates, ResourceClaims, the DeviceClasses they request and ComputeDomains under (kind, namespace,
    name) (dra.index)."""
    out: dict[tuple[str, ...], dict | None] = {}
    for o in objects:
        kind = o.get("kind") if isinstance(o, dict) else None
        if kind == "PersistentVolumeClaim":
            out[(namespace_of(o), str(dict_or_empty(o.get("metadata")).get("name")))] = o
        elif kind in dra.KINDS:
            dra.index(o, out)
    return out


def _level_of(finding: Finding, rule: Rule, cfg: dict, advisory_cfg: dict | None) -> str | None:
    """The level a finding is reported at, or None when its policy is disabled or exempts the object."""
    if finding.level == ADVISORY and advisory_cfg is not None:  # a mixed rule's advisory finding: its own policy
        cfg = advisory_cfg
    elif finding.level == ADVISORY:
        return None if cfg["enforcementLevel"] == DISABLED else ADVISORY
    level = cfg["enforcementLevel"]
    if level == REMEDIATE and rule.remediate is None:
        level = MANDATORY  # CrossGuard: remediate without a remediation acts as mandatory
    return None if level == DISABLED else level


@dataclass(frozen=True)
class Plan:
    """The rules to run under one config, each with its policy settings resolved once: a lint of many objects
    resolves the config once, not once per object and rule."""

    checks: tuple[tuple[Rule, dict, dict | None], ...]  # (rule, its policy's settings, its -advisory policy's)
    _by_kind: dict[tuple[str, bool], tuple] = field(default_factory=dict, compare=False, repr=False)

    def for_kind(self, kind: str, pods: bool = True) -> tuple[tuple[Rule, dict, dict | None], ...]:
        """The checks that can flag an object of `kind`; with `pods` False, of one that has no pod template (most
        objects of a lint: the rules that judge pods only are left out)."""
        found = self._by_kind.get((kind, pods))
        if found is None:
            found = self._by_kind[(kind, pods)] = tuple(
                check
                for check in self.checks
                if (check[0].kinds is None or kind in check[0].kinds) and (pods or not check[0].pods)
            )
        return found


def plan(config: dict | None = None, rules: list[Rule] | None = None) -> Plan:
    """`rules` (default: all) under `config`, the policies it disables left out."""
    checks = []
    for each in rules or RULES:
        cfg = rule_config(each, config)
        adv = rule_config(each, config, f"{each.id}-advisory") if each.mixed else None
        if cfg["enforcementLevel"] == DISABLED and (adv is None or adv["enforcementLevel"] == DISABLED):
            continue
        checks.append((each, cfg, adv))
    return Plan(tuple(checks))


def evaluate(
    obj: Any,
    config: dict | None = None,
    claims: dict | None = None,
    rules: list[Rule] | None = None,
    checks: Plan | None = None,
    runtimes: RuntimeIndex | None = None,
    plain: bool = False,
) -> list[Violation]:
    """Every violation of `obj`. `claims` (claim_index of all objects being checked) lets rules see the access
    modes of the claims a pod mounts; `runtimes` (RuntimeIndex of the same objects) the runtime a TrainJob names,
    whose pods it is judged by. `config` is CrossGuard's format, resolved by parse_config or written directly as
    {policy: {enforcementLevel, <param>, exemptNamespaces, exemptLabels}}; a caller checking many objects passes
    `checks` (plan(config, rules)) instead, resolved once. `plain` says `obj` and the other objects are plain
    already (normalize's output, or tools.manifests.read(plain=True)'s): walking every node again to find nothing
    to change was a fifth of a lint."""
    if not plain:
        obj = normalize(obj)
    if not isinstance(obj, dict) or not isinstance(kind := obj.get("kind"), str):
        return []  # not a Kubernetes object (the loader reports such documents)
    checks = checks or plan(config, rules)
    if (inner := unwrap(obj)) is not None:
        return _wrapped(obj, inner, checks, claims, runtimes)
    todo = checks.for_kind(kind)
    if not todo:
        return []
    if kind == "TrainJob":
        return _train_job(obj, checks, todo, claims, runtimes, plain)
    found = extract(obj)
    queued = frozenset(runtimes.kueue_defaulted) if runtimes is not None else frozenset()
    return _judge(obj, found, todo if found.templates else checks.for_kind(kind, pods=False), claims, queued=queued)


def display_name(md: dict) -> str:
    """An object's name in a finding: metadata.name, or `<generateName>*` for one the API server names on create."""
    if md.get("name"):
        return str(md["name"])
    return f"{md['generateName']}*" if isinstance(md.get("generateName"), str) and md["generateName"] else ""


def _wrapped(
    obj: dict, inner: list[tuple[str, dict]], checks: Plan, claims: dict | None, runtimes: RuntimeIndex | None
) -> list[Violation]:
    """A wrapper's findings are its components', reported on the wrapper (the object the user wrote and applies)
    with the component named."""
    md = dict_or_empty(obj.get("metadata"))
    out = []
    for path, component in inner:
        cmd = dict_or_empty(component.get("metadata"))
        label = f"{path} ({component['kind']}{' ' + str(cmd['name']) if cmd.get('name') else ''})"
        for v in evaluate(component, checks=checks, claims=claims, runtimes=runtimes, plain=True):
            out.append(
                dataclasses.replace(
                    v,
                    kind=str(obj["kind"]),
                    namespace=str(md.get("namespace") or ""),
                    name=display_name(md),
                    message=f"{label}: {v.message}",
                )
            )
    return out


def _train_job(
    obj: dict, checks: Plan, todo: tuple, claims: dict | None, runtimes: RuntimeIndex | None, plain: bool
) -> list[Violation]:
    """A TrainJob by the pods its runtime gives it, less what the runtime is already flagged for; by its trainer
    alone, under the rules that can judge a container by itself, when the runtime is not among the objects."""
    pairing = pair(obj, runtimes)
    trainer = extract(obj)
    if pairing.effective is None:
        todo = tuple(c for c in todo if c[0].trainer_alone)
        return _judge(obj, trainer, todo, claims, pairing)
    effective = Extracted(pairing.effective.templates, trainer.problems + pairing.effective.problems)
    own = _runtime_findings(pairing, runtimes, checks, claims, plain)
    out = []
    for v in _judge(obj, effective, todo, claims, pairing):
        if v.rule == TRAINJOB_RUNTIME:
            out.append(v)
        elif (v.rule, v.level, v.message) not in own:
            out.append(dataclasses.replace(v, message=f"in the pods {pairing.ref} gives it: {v.message}"))
    return out


def _runtime_findings(
    pairing: Pairing, runtimes: RuntimeIndex | None, checks: Plan, claims: dict | None, plain: bool
) -> frozenset[tuple[str, str, str]]:
    """(rule, level, message) of what the runtime is flagged for on its own, worked out once per runtime and lint."""
    if runtimes is None or pairing.runtime is None:
        return frozenset()
    key = (pairing.ref, id(checks))
    if key not in runtimes.memo:  # the plan is kept beside its findings, so its id is not reused meanwhile
        found = evaluate(pairing.runtime, claims=claims, checks=checks, runtimes=runtimes, plain=plain)
        runtimes.memo[key] = (checks, frozenset((v.rule, v.level, v.message) for v in found))
    return runtimes.memo[key][1]


def _judge(
    obj: dict,
    found: Extracted,
    todo: tuple,
    claims: dict | None,
    pairing: Pairing | None = None,
    queued: frozenset[str] = frozenset(),
) -> list[Violation]:
    out = []
    ctx = Context(
        obj, found.templates, {}, claims or {}, found.problems, found.known, pairing=pairing, kueue_defaulted=queued
    )
    for rule, cfg, adv in todo:
        if rule.pods and not found.templates:
            continue
        ctx.config = cfg  # checks run one after another, each drained before the next
        for f in rule.check(ctx):
            level = _level_of(f, rule, cfg, adv)
            if level is None or exempt(obj, adv if (adv is not None and f.level == ADVISORY) else cfg):
                continue
            md = dict_or_empty(obj.get("metadata"))
            out.append(
                Violation(rule.id, level, obj["kind"], str(md.get("namespace") or ""), display_name(md), f.message)
            )
    return out
