"""What NVIDIA NVSentinel v1.19.0 and the Kubernetes scheduler do with the configuration fastpath gives them,
restated as small functions the tests apply to the committed renders. Read at NVIDIA/NVSentinel@v1.19.0 through
lalitadithya/NVSentinel@e002c5dc (the commit that registers v1.19.0; the tag itself is not in the snapshot; N:
below) and kubernetes/kubernetes (K:). The CEL the rule sets and policies carry is evaluated for real (cel-python),
with the variables NVSentinel binds."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import celpy  # type: ignore[import-untyped]


def _eval(expression: str, **variables: Any) -> bool:
    env = celpy.Environment()
    program = env.program(env.compile(expression))
    bound = {k: (celpy.celtypes.TimestampType(v) if isinstance(v, datetime) else celpy.json_to_cel(v)) for k, v in variables.items()}
    return bool(program.evaluate(bound))


def quarantine(rule_sets: list[dict], event: Mapping[str, Any], node: Mapping[str, Any]) -> tuple[bool, list[dict]]:
    """(cordoned, taints) after fault-quarantine sees `event` about `node`. N:fault-quarantine/pkg/reconciler/
    reconciler.go evaluateRulesets: every enabled rule set is evaluated, and each that matches (all of match.all:
    HealthEvent expressions over `event`, Node expressions over `node`) applies its cordon and taint
    (handleSuccessfulRuleEvaluation); N:.../pkg/initializer/init.go: only EXECUTE_REMEDIATION events are read."""
    if event.get("processingStrategy", "EXECUTE_REMEDIATION") != "EXECUTE_REMEDIATION":
        return False, []
    cordoned, taints = False, []
    for rs in rule_sets:
        if not rs.get("enabled", True):
            continue
        terms = rs["match"].get("all") or []
        if all(_eval(t["expression"], **({"event": dict(event)} if t["kind"] == "HealthEvent" else {"node": dict(node)})) for t in terms):
            cordoned = cordoned or rs.get("cordon", {}).get("shouldCordon", False)
            if rs.get("taint") and rs["taint"] not in taints:
                taints.append(rs["taint"])
    return cordoned, taints


def policy_fires(policy: Mapping[str, Any], resource: Mapping[str, Any], now: datetime) -> bool:
    """N:health-monitors/kubernetes-object-monitor/pkg/cel/environment.go: the predicate sees `resource` (the
    object) and `now`; a policy whose predicate is true publishes its healthEvent, checkName = the policy name
    (pkg/publisher/publisher.go)."""
    return _eval(policy["predicate"]["expression"], resource=dict(resource), now=now)


def breaker_threshold(gpu_nodes: int, percentage: int) -> int:
    """N:fault-quarantine/pkg/breaker (slidingWindowBreaker.IsTripped): ceil(nodes * percentage / 100) quarantined
    nodes within the window trip it, and it then halts every quarantine until a person resets it."""
    return math.ceil(gpu_nodes * percentage / 100)


def drain_mode(values: Mapping[str, Any], namespace: str) -> str | None:
    """How node-drainer treats a pod of `namespace` on a quarantined node (None: never evicted).
    N:node-drainer/pkg/evaluator/evaluator.go getAction and informers.go: system namespaces (a regex) are skipped;
    userNamespaces entries match by glob (filepath.Match), Immediate before DeleteAfterTimeout before
    AllowCompletion. Immediate evicts through the Eviction API at once; AllowCompletion waits for the pod to end."""
    if re.search(values["systemNamespaces"], namespace):
        return None
    modes = [e["mode"] for e in values["userNamespaces"] if e["name"] == "*" or e["name"] == namespace]
    for mode in ("Immediate", "DeleteAfterTimeout", "AllowCompletion"):
        if mode in modes:
            return mode
    return None


def evicted_pod_conditions() -> set[str]:
    """K:pkg/registry/core/pod/storage/eviction.go: an eviction adds DisruptionTarget (reason
    EvictionByEvictionAPI) before it deletes the pod."""
    return {"DisruptionTarget"}


def tolerates(tolerations: list[dict], taint: Mapping[str, str]) -> bool:
    """K:staging/src/k8s.io/api/core/v1/toleration.go ToleratesTaint: same effect (or none given), same key (or none
    given with Exists), and Exists or an equal value."""
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        if t.get("key") and t["key"] != taint["key"]:
            continue
        if not t.get("key") and t.get("operator") != "Exists":
            continue
        if t.get("operator", "Equal") == "Exists" or t.get("value", "") == taint.get("value", ""):
            return True
    return False


def schedulable(pod_spec: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """K:pkg/scheduler/framework/plugins/nodeunschedulable and tainttoleration (Volcano's predicates plugin runs
    the same filters: volcano-sh/volcano@v1.15.1:pkg/scheduler/plugins/predicates/predicates.go): a cordoned node
    takes only pods tolerating node.kubernetes.io/unschedulable, a NoSchedule or NoExecute taint only pods that
    tolerate it."""
    tolerations = pod_spec.get("tolerations") or []
    if node.get("unschedulable") and not tolerates(tolerations, {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}):
        return False
    return all(tolerates(tolerations, t) for t in node.get("taints", []) if t["effect"] in ("NoSchedule", "NoExecute"))


def utc(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
