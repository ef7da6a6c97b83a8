"""The policy-pack config: CrossGuard's `--policy-pack-config` format checked and resolved into every policy's
settings, as the engine resolves it, refusing what the engine would silently ignore (a misspelt policy or setting).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from policies.engine import ADVISORY, BY_ID, LEVELS, RULES, Rule


class ConfigError(ValueError):
    """A policy config CrossGuard would refuse, or one naming a rule or setting this pack does not have."""


def policy_names() -> dict[str, Rule]:
    """CrossGuard policy name -> rule: every rule, and `<id>-advisory` for the advisory findings of mixed ones."""
    return {**BY_ID, **{f"{r.id}-advisory": r for r in RULES if r.mixed}}


def _level(value: Any, where: str) -> str:
    if not isinstance(value, str) or value not in LEVELS:
        raise ConfigError(f"{where}: {value!r} is not an enforcement level: use one of {', '.join(LEVELS)}")
    return value


def _nearest(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(str(name), list(known), n=1, cutoff=0.5)
    return f": did you mean {close[0]!r}?" if close else f" (known: {', '.join(sorted(known))})"


def parse_config(raw: Any) -> dict[str, dict]:
    """A CrossGuard policy-pack config (`pulumi preview --policy-pack-config`) checked and resolved the way the
    engine does (pulumi/pulumi pkg/resource/analyzer/config.go parsePolicyPackConfig, applyConfig): each key is a
    policy name or `all`; each value an enforcement level string (`"rule-id": "disabled"`) or an object with an
    optional `enforcementLevel` and the policy's properties. `all`'s level applies to every policy first, then
    each policy's own entry. Beyond the engine, a policy name or property this pack does not have is refused
    with the nearest one (the engine would ignore a typo silently), and properties are type-checked.
    Returns {policy name: {"enforcementLevel": ..., <property>: ...}} for every policy, ready for `evaluate`."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(
            f"the policy config is {type(raw).__name__}, not a mapping of policy names to levels or "
            'objects (e.g. {"all": "advisory", "shm-size": {"minGiBPerGpu": 2}})'
        )
    names = policy_names()
    entries: dict[str, tuple[str | None, dict]] = {}
    for key, value in raw.items():
        key = str(key)
        if key != "all" and key not in names:
            raise ConfigError(f"{key}: no policy of that name in this pack{_nearest(key, [*names, 'all'])}")
        if isinstance(value, str):
            entries[key] = (_level(value, key), {})
        elif isinstance(value, dict):
            props = {str(k): v for k, v in value.items() if k != "enforcementLevel"}
            level = (
                _level(value["enforcementLevel"], f"{key}.enforcementLevel") if "enforcementLevel" in value else None
            )
            if key != "all":
                _check_props(key, names[key], props)
            entries[key] = (level, props)
        else:
            raise ConfigError(
                f"{key}: {value!r} is not a valid value; must be an enforcement level string or an object"
            )
    all_level = entries.get("all", (None, {}))[0]
    out = {}
    for name, rule in names.items():
        default = ADVISORY if name.endswith("-advisory") and name not in BY_ID else rule.level
        level, props = entries.get(name, (None, {}))
        out[name] = {**props, "enforcementLevel": level or all_level or default}
    return out


def _check_props(name: str, rule: Rule, props: dict) -> None:
    schema = {k: type(d) for k, (d, _) in rule.params.items()}
    for k, v in props.items():
        if k == "exemptNamespaces":
            if not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
                raise ConfigError(f"{name}.exemptNamespaces: {v!r} is not a list of namespace names")
        elif k == "exemptLabels":
            if not (isinstance(v, dict) and all(isinstance(x, str) for x in v.values())):
                raise ConfigError(f"{name}.exemptLabels: {v!r} is not a mapping of label keys to string values")
        elif k not in schema:
            known = [*schema, "enforcementLevel", "exemptNamespaces", "exemptLabels"]
            raise ConfigError(f"{name}.{k}: {rule.id} has no such setting{_nearest(k, known)}")
        elif (
            not (
                isinstance(v, schema[k])
                or (schema[k] is float and isinstance(v, int))
                or (schema[k] is int and isinstance(v, float) and v.is_integer())
            )
            or isinstance(v, bool)
            and schema[k] is not bool
        ):
            raise ConfigError(
                f"{name}.{k}: {v!r} is not a{'n' if schema[k] is int else ''} "
                f"{JSON_TYPE_NAMES.get(schema[k], schema[k].__name__)}"
            )


JSON_TYPE_NAMES = {int: "integer", float: "number", str: "string", bool: "boolean", list: "array", dict: "object"}
