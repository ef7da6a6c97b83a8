"""What JobSet v0.12.0 and the Kubernetes Job controller do with a failed or finished run, as small pure functions
the tests apply to the runtimes fastpath publishes. Each restates the upstream rule it models, read at
kubernetes-sigs/jobset@v0.12.0 (J: below) and, for the Job controller, in kubernetes/kubernetes
pkg/controller/job/ (K: below; read through the code search, main branch, not at a fetched tag). If upstream
changes, these and tests/test_trainer_faults.py move together, on purpose."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

DEFAULT_ACTION = "RestartJobSet"  # J:pkg/controllers/failure_policy.go defaultFailurePolicyRuleAction
NAMESPACE = "training"


@dataclass(frozen=True)
class PodFailure:
    """A pod that reached phase Failed: its name, the container that exited non-zero (and how), its conditions."""

    pod: str
    container: str | None = None
    exit_code: int = 1
    conditions: tuple[str, ...] = ()
    """Pod condition types with status True, e.g. DisruptionTarget (set by Volcano's evictor, taint eviction,
    the Eviction API, PodGC)."""


def job_failure(job_spec: dict, failed: PodFailure, failures_so_far: int = 0) -> tuple[str, str] | None:
    """The (reason, message) of the Job's failure condition when `failed` becomes terminal (None: the Job goes on).
    K:pod_failure_policy.go matchPodFailurePolicy: rules in order; onExitCodes matches a terminated container
    (containers, then init containers) with that name and a non-zero code In/NotIn the values; onPodConditions
    matches a condition of that type and status. FailJob fails the Job with reason PodFailurePolicy and the
    message "Container %s for pod %s/%s failed with exit code %v matching %v rule at index %d" or
    "Pod %s/%s has condition %v matching %v rule at index %d"; Ignore does not count the pod. Otherwise more failed
    pods than backoffLimit (default 6) fail it with BackoffLimitExceeded (K:job_controller.go)."""
    pod = f"{NAMESPACE}/{failed.pod}"
    for index, rule in enumerate((job_spec.get("podFailurePolicy") or {}).get("rules", [])):
        if codes := rule.get("onExitCodes"):
            if failed.container is None or failed.exit_code == 0 or codes.get("containerName") not in (None, failed.container):
                continue
            if (failed.exit_code in codes["values"]) != (codes["operator"] == "In"):
                continue
            message = f"Container {failed.container} for pod {pod} failed with exit code {failed.exit_code} matching {rule['action']} rule at index {index}"
        else:
            matched = next((p["type"] for p in rule["onPodConditions"] if p.get("status", "True") == "True" and p["type"] in failed.conditions), None)
            if matched is None:
                continue
            message = f"Pod {pod} has condition {matched} matching {rule['action']} rule at index {index}"
        if rule["action"] == "Ignore":
            return None
        if rule["action"] == "FailJob":
            return "PodFailurePolicy", message
        break  # Count: an ordinary failure
    if failures_so_far + 1 > job_spec.get("backoffLimit", 6):
        return "BackoffLimitExceeded", "Job has reached the specified backoff limit"
    return None


def job_failure_reason(job_spec: dict, container: str, exit_code: int, failures_so_far: int = 0) -> str | None:
    """job_failure's reason for a pod `<job>-0` whose `container` exited `exit_code`."""
    got = job_failure(job_spec, PodFailure("job-0", container, exit_code), failures_so_far)
    return got[0] if got else None


def failure_action(jobset_spec: dict, replicated_job: str, reason: str, message: str = "") -> str:
    """J:pkg/controllers/failure_policy.go executeFailurePolicy: no failurePolicy fails the JobSet at the first
    failed Job (FailedJobs); otherwise the first rule whose onJobFailureReasons, onJobFailureMessagePatterns (RE2,
    unanchored: anyMatchFound uses regexp.MatchString) and targetReplicatedJobs (each empty = any) all match decides
    (ruleIsApplicable), and no match means RestartJobSet."""
    policy = jobset_spec.get("failurePolicy")
    if policy is None:
        return "FailJobSet"
    for rule in policy.get("rules") or []:
        if rule.get("onJobFailureReasons") and reason not in rule["onJobFailureReasons"]:
            continue
        if rule.get("onJobFailureMessagePatterns") and not any(re.search(p, message) for p in rule["onJobFailureMessagePatterns"]):
            continue
        if rule.get("targetReplicatedJobs") and replicated_job not in rule["targetReplicatedJobs"]:
            continue
        return rule["action"]
    return DEFAULT_ACTION


# J:pkg/webhooks/jobset_webhook.go validateFailurePolicy (ValidateCreate): what the webhook refuses in a JobSet's
# failurePolicy. The trainer's own webhook does not check these (kubeflow/trainer@v2.3.0:pkg/webhooks/
# trainingruntime_webhook.go), so a runtime that breaks them is accepted and every JobSet made from it refused.
RULE_NAME = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")  # ruleNameFmt, 1..128 characters
VALID_FAILURE_REASONS = ("BackoffLimitExceeded", "DeadlineExceeded", "FailedIndexes", "MaxFailedIndexesExceeded", "PodFailurePolicy")


def failure_policy_problems(jobset_spec: dict) -> list[str]:
    """The webhook's refusals of `jobset_spec`'s failurePolicy (the RestartJob feature-gate checks left out: no
    fastpath rule uses RestartJob). Rules without a name are named failurePolicyRule<i> by the defaulting webhook
    first (Default, defaultRuleNameFmt)."""
    policy = jobset_spec.get("failurePolicy")
    if policy is None:
        return []
    names = {r["name"] for r in jobset_spec.get("replicatedJobs") or []}
    out, seen = [], set()
    for i, rule in enumerate(policy.get("rules") or []):
        name = rule.get("name") or f"failurePolicyRule{i}"
        if not 1 <= len(name) <= 128 or not RULE_NAME.match(name):
            out.append(f"invalid failure policy rule name '{name}'")
        if name in seen:
            out.append(f"rule names are not unique: '{name}'")
        seen.add(name)
        out += [f"invalid replicatedJob name '{t}'" for t in rule.get("targetReplicatedJobs") or [] if t not in names]
        out += [f"invalid job failure reason '{r}'" for r in rule.get("onJobFailureReasons") or [] if r not in VALID_FAILURE_REASONS]
    return out


@dataclass
class JobSetStatus:
    restarts: int = 0
    restarts_count_towards_max: int = 0
    condition: str | None = None  # Completed, Failed
    reason: str | None = None
    events: list[str] = field(default_factory=list)


def apply_action(jobset_spec: dict, status: JobSetStatus, action: str) -> None:
    """J:pkg/controllers/failure_policy.go: FailJobSet fails the JobSet (FailJobSetAction); RestartJobSet fails it
    with ReachedMaxRestarts once restartsCountTowardsMax >= maxRestarts, else bumps restarts and
    restartsCountTowardsMax (failurePolicyRecreateAll): every Job whose restart-attempt label is below
    status.restarts is then deleted and recreated, the whole gang (jobset_controller.go getChildJobs/deleteJobs).
    RestartJobSetAndIgnoreMaxRestarts (restartJobSetAndIgnoreMaxRestartsActionApplier) recreates the gang the same
    way, bumping restarts only: never ReachedMaxRestarts."""
    if action == "FailJobSet":
        status.condition, status.reason = "Failed", "FailJobSetAction"
        return
    if action == "RestartJobSetAndIgnoreMaxRestarts":
        status.restarts += 1
        return
    assert action == "RestartJobSet", action
    if status.restarts_count_towards_max >= jobset_spec["failurePolicy"].get("maxRestarts", 0):
        status.condition, status.reason = "Failed", "ReachedMaxRestarts"
        return
    status.restarts += 1
    status.restarts_count_towards_max += 1


def may_create_jobs(jobset_spec: dict, previous_jobs_left: int) -> bool:
    """J:pkg/controllers/jobset_controller.go constructJobsFromTemplate: under restartStrategy BlockingRecreate no
    Job of the new attempt is created while any Job of a previous attempt remains; Recreate (the default) recreates
    each as soon as its own predecessor is gone."""
    blocking = (jobset_spec.get("failurePolicy") or {}).get("restartStrategy") == "BlockingRecreate"
    return previous_jobs_left == 0 if blocking else True


def completed(jobset_spec: dict, succeeded: set[str], all_jobs: set[str]) -> bool:
    """J:pkg/controllers/jobset_controller.go executeSuccessPolicy: operator All over targetReplicatedJobs (empty:
    every replicated job) completes the JobSet when all of them succeeded."""
    policy = jobset_spec.get("successPolicy") or {"operator": "All"}
    targets = set(policy.get("targetReplicatedJobs") or all_jobs)
    assert policy["operator"] == "All", policy
    return targets <= succeeded


def after_finish(active_jobs: set[str]) -> set[str]:
    """J:pkg/controllers/jobset_controller.go reconcile: once the JobSet is Completed or Failed, every still-active
    child Job is deleted (deleteJobs, foreground: their pods go, and with them their GPUs). Returns what is left
    active: nothing."""
    return set()


def counts_as_failed(job_spec: dict, phase: str, terminating: bool) -> bool:
    """K:job_controller.go isPodFailed: with a podFailurePolicy (onlyReplaceFailedPods) a pod is failed only in
    phase Failed; without one a terminating pod counts as failed too."""
    if job_spec.get("podFailurePolicy") is not None or job_spec.get("podReplacementPolicy") == "Failed":
        return phase == "Failed"
    return phase == "Failed" or terminating


def job_condition(failure_target: bool, terminating_pods: int) -> str | None:
    """K:job_controller.go: once the Job has its FailureTarget its active pods are deleted, and with JobManagedBy or
    JobPodReplacementPolicy on (delayTerminalCondition; both on by default on current Kubernetes) Failed is added
    only when no pod is terminating any more (trackTerminatingPods). JobSet acts on Failed alone."""
    if not failure_target:
        return None
    return "Failed" if terminating_pods == 0 else "FailureTarget"


def pod_gc_ends(node_ready: bool, taints: set[str], node_exists: bool = True) -> bool:
    """K:../podgc/gc_controller.go: gcTerminating force-deletes (as Failed) a terminating pod whose Node is NotReady
    and tainted node.kubernetes.io/out-of-service; gcOrphaned does so for a pod whose Node is gone. Nothing else
    ends a pod no kubelet confirms."""
    if not node_exists:
        return True
    return not node_ready and "node.kubernetes.io/out-of-service" in taints
