"""The CrossGuard policies, built from the rule catalogue. Importable (tests use it); __main__.py only hands
them to PolicyPack, which serves them and never returns."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyConfigSchema,
    ReportViolation,
    ResourceRemediation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)

from policies.rules import ADVISORY, MANDATORY, RULES, Rule, evaluate, normalize

LEVELS = {MANDATORY: EnforcementLevel.MANDATORY, ADVISORY: EnforcementLevel.ADVISORY}
JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}


def _kubernetes_object(args: ResourceValidationArgs) -> dict | None:
    if not args.resource_type.startswith("kubernetes:"):
        return None
    obj = normalize(args.props)  # the one place engine props become plain dicts with integers
    return obj if obj.get("kind") else None


def validator(rule: Rule, level: str) -> Callable[[ResourceValidationArgs, ReportViolation], None]:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        obj = _kubernetes_object(args)
        if obj is None:
            return
        config = {rule.id: {**dict(args.get_config()), "enforcementLevel": rule.level}}
        for v in evaluate(obj, config, rules=[rule]):
            if v.level == level:
                report_violation(v.message, None)

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
    props: dict = {name: {"type": JSON_TYPES[type(default)], "default": default, "description": desc}
                   for name, (default, desc) in rule.params.items()}
    props["exemptNamespaces"] = {"type": "array", "items": {"type": "string"}, "default": [],
                                 "description": "Namespaces this rule does not apply to."}
    props["exemptLabels"] = {"type": "object", "additionalProperties": {"type": "string"}, "default": {},
                             "description": "Objects with any of these labels (key: value) are exempt."}
    return PolicyConfigSchema(properties=props)


def policies() -> list[Policy]:
    out: list[Policy] = []
    for rule in RULES:
        out.append(ResourceValidationPolicy(
            name=rule.id, description=f"{rule.title}. {rule.description}",
            validate=validator(rule, rule.level), enforcement_level=LEVELS[rule.level],
            config_schema=config_schema(rule), remediate=_as_sdk_remediation(remediation(rule)),
            remediation_steps=rule.remediation))
        if rule.mixed:
            out.append(ResourceValidationPolicy(
                name=f"{rule.id}-advisory", description=f"{rule.title} (advisory findings). {rule.description}",
                validate=validator(rule, ADVISORY), enforcement_level=EnforcementLevel.ADVISORY,
                config_schema=config_schema(rule), remediation_steps=rule.remediation))
    return out
