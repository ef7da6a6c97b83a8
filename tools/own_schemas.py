"""Schemas for the kinds fastpath renders whose CRDs are not among the locked upstream files: fastpath's own
reductions of the upstream CRD, covering exactly the fields fastpath may emit, with upstream's types and required
fields, and closed (an unknown field is an error, as the API server's strict validation makes it).

- monitoring.coreos.com/v1 PodMonitor and PrometheusRule: reduced from
  prometheus-operator/prometheus-operator@v0.93.0:example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml
  and monitoring.coreos.com_prometheusrules.yaml (the renders were also checked against the full CRDs at that tag).
"""

from __future__ import annotations

from typing import Any


def _obj(required: list[str] | None = None, **props: Any) -> dict:
    out: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        out["required"] = required
    return out


_STR = {"type": "string"}
_STRMAP = {"type": "object", "additionalProperties": _STR}
_SELECTOR = _obj(
    matchLabels=_STRMAP,
    matchExpressions={
        "type": "array",
        "items": _obj(["key", "operator"], key=_STR, operator=_STR, values={"type": "array", "items": _STR}),
    },
)
_RELABEL = _obj(
    sourceLabels={"type": "array", "items": {"type": "string", "pattern": "^[a-zA-Z_][a-zA-Z0-9_]*$"}},
    separator=_STR,
    targetLabel=_STR,
    regex=_STR,
    replacement=_STR,
    action={"type": "string", "enum": ["replace", "keep", "drop", "hashmod", "labelmap", "labeldrop", "labelkeep",
                                       "lowercase", "uppercase", "keepequal", "dropequal"]},
)  # fmt: skip
_DURATION = {
    "type": "string",
    "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
}
_META = {"type": "object"}  # checked by tools.schemas._metadata_errors

OWN = {
    ("monitoring.coreos.com/v1", "PodMonitor"): _obj(
        ["spec"],
        apiVersion=_STR,
        kind=_STR,
        metadata=_META,
        spec=_obj(
            ["selector"],
            selector=_SELECTOR,
            podMetricsEndpoints={
                "type": "array",
                "items": _obj(
                    port=_STR,
                    path=_STR,
                    interval=_DURATION,
                    relabelings={"type": "array", "items": _RELABEL},
                ),
            },
        ),
    ),
    ("monitoring.coreos.com/v1", "PrometheusRule"): _obj(
        ["spec"],
        apiVersion=_STR,
        kind=_STR,
        metadata=_META,
        spec=_obj(
            groups={
                "type": "array",
                "items": _obj(
                    ["name"],
                    name={"type": "string", "minLength": 1},
                    interval=_DURATION,
                    rules={
                        "type": "array",
                        "items": _obj(
                            ["expr"],
                            record=_STR,
                            alert=_STR,
                            expr={"type": "string"},
                            labels=_STRMAP,
                            annotations=_STRMAP,
                            **{"for": _DURATION},
                        ),
                    },
                ),
            }
        ),
    ),
}
