"""The CrossGuard policies, built from the rule catalogue. Importable (tests use it); __main__.py only hands
them to PolicyPack, which serves them and never returns.

A rule is a resource policy: CrossGuard hands it one resource at a time, which is all most rules need. A rule that
needs the objects an object names (`stack` in its metadata: a TrainJob's runtime) is a stack policy instead, which
CrossGuard runs once with every resource of the stack, and the kinds it judges (TrainJob) are judged there only:
a TrainJob's pods are its runtime's, so a resource policy seeing the TrainJob alone would judge a fragment. The
stack policy reports the other rules' findings on those objects too, each prefixed with its rule id, at the rule's
default settings (CrossGuard gives a policy only its own config); its own exemptions apply to all of them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyConfigSchema,
    ReportViolation,
    ResourceRemediation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from policies import dra
from policies.engine import ADVISORY, MANDATORY, RULES, Rule, claim_index, evaluate, exempt, normalize, plan
from policies.runtimes import RUNTIME_KINDS, RuntimeIndex

LEVELS = {MANDATORY: EnforcementLevel.MANDATORY, ADVISORY: EnforcementLevel.ADVISORY}
JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}
# Kinds judged only with the whole stack in view, by the stack policies.
STACK_KINDS: frozenset[str] = frozenset(kind for r in RULES if r.stack for kind in r.kinds or ())
# What a stack policy reads besides the kinds it judges: the runtimes TrainJobs name, the claims pods mount, and the
# DRA claims, DeviceClasses and ComputeDomains that say what a pod's resource claims hold (policies/dra.py).
PEER_KINDS = frozenset(RUNTIME_KINDS) | {"PersistentVolumeClaim"} | frozenset(dra.KINDS)


def _object(resource_type: str, props: Mapping[str, Any]) -> dict | None:
    if not resource_type.startswith("kubernetes:"):
        return None
    obj = normalize(props)  # the one place engine props become plain dicts with integers
    return obj if obj.get("kind") else None


def _kubernetes_object(args: ResourceValidationArgs) -> dict | None:
    return _object(args.resource_type, args.props)


def validator(rule: Rule, level: str) -> Callable[[ResourceValidationArgs, ReportViolation], None]:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        obj = _kubernetes_object(args)
        if obj is None or obj["kind"] in STACK_KINDS:  # judged by the stack policies, with what they name
            return
        config = {rule.id: {**dict(args.get_config()), "enforcementLevel": rule.level}}
        for v in evaluate(obj, config, rules=[rule]):
            if v.level == level:
                report_violation(v.message, None)

    return validate


def stack_validator(rule: Rule, level: str) -> Callable[[StackValidationArgs, ReportViolation], None]:
    """The stack half: every object of the rule's kinds judged with the rest of the stack in view (a TrainJob by
    the pods its runtime gives it), reported on its own URN; `level` picks the mandatory or the advisory findings."""
    kinds = rule.kinds or frozenset()

    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        objects = []
        for resource in args.resources:
            # Read the kind off the proxy first: normalizing every resource of a large stack costs more than
            # judging the few that matter.
            if resource.resource_type.startswith("kubernetes:") and resource.props.get("kind") in kinds | PEER_KINDS:
                if (obj := _object(resource.resource_type, resource.props)) is not None:
                    objects.append((resource.urn, obj))
        peers = [obj for _, obj in objects]
        claims, runtimes, checks = claim_index(peers), RuntimeIndex(peers), plan()
        settings = dict(args.get_config())
        for urn, obj in objects:
            if obj["kind"] not in kinds or exempt(obj, settings):
                continue
            for v in evaluate(obj, claims=claims, checks=checks, runtimes=runtimes):
                if (v.level == ADVISORY) == (level == ADVISORY):
                    report_violation(v.message if v.rule == rule.id else f"{v.rule}: {v.message}", urn)

    return validate


def remediation(rule: Rule) -> Callable[[ResourceValidationArgs], dict | None] | None:
    """The rule's automatic fix as CrossGuard calls it, or None when the rule has none."""
    fix = rule.remediate
    if fix is None:
        return None

    def remediate(args: ResourceValidationArgs) -> dict | None:
        obj = _kubernetes_object(args)
        return fix(obj) if obj is not None else None

    return remediate


def _as_sdk_remediation(fix: Callable[[ResourceValidationArgs], dict | None] | None) -> ResourceRemediation | None:
    # The SDK awaits a remediation's result only when it is awaitable (pulumi_policy/policy.py, the remediate
    # handler: `if isawaitable(result)`), so a plain dict is what it uses; its type names only the awaitable form.
    return cast(ResourceRemediation | None, fix)


def config_schema(rule: Rule) -> PolicyConfigSchema:
    props: dict = {
        name: {"type": JSON_TYPES[type(default)], "default": default, "description": desc}
        for name, (default, desc) in rule.params.items()
    }
    props["exemptNamespaces"] = {
        "type": "array",
        "items": {"type": "string"},
        "default": [],
        "description": "Namespaces this rule does not apply to.",
    }
    props["exemptLabels"] = {
        "type": "object",
        "additionalProperties": {"type": "string"},
        "default": {},
        "description": "Objects with any of these labels (key: value) are exempt.",
    }
    return PolicyConfigSchema(properties=props)


def policies() -> list[Policy]:
    """One policy per rule, and a second, advisory one for a mixed rule's advisory findings; stack policies for rules
    that need every resource at once (a TrainJob and its runtime)."""
    out: list[Policy] = []
    for rule in RULES:
        variants = [(rule.id, rule.level, "")]
        if rule.mixed:
            variants.append((f"{rule.id}-advisory", ADVISORY, " (advisory findings)"))
        for name, level, note in variants:
            common: dict[str, Any] = {
                "name": name,
                "description": f"{rule.title}{note}. {rule.description}",
                "enforcement_level": LEVELS[level],
                "config_schema": config_schema(rule),
                "remediation_steps": rule.remediation,
            }
            if rule.stack:
                out.append(StackValidationPolicy(validate=stack_validator(rule, level), **common))
            elif name == rule.id:  # only the rule's own policy fixes what it finds
                out.append(
                    ResourceValidationPolicy(
                        validate=validator(rule, level), remediate=_as_sdk_remediation(remediation(rule)), **common
                    )
                )
            else:
                out.append(ResourceValidationPolicy(validate=validator(rule, level), **common))
    return out
