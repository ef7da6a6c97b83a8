"""What JobSet v0.12.0 and the Kubernetes Job controller do with a failed or finished run, as small pure functions
the tests apply to the runtimes fastpath publishes. Each restates the upstream rule it models, read at
kubernetes-sigs/jobset@v0.12.0 (J: below); the Job controller's rules are the batch/v1 API's (Kubernetes,
not read in source here). If upstream changes, these and tests/test_trainer_faults.py move together, on purpose."""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_ACTION = "RestartJobSet"  # J:pkg/controllers/failure_policy.go defaultFailurePolicyRuleAction


def job_failure_reason(job_spec: dict, container: str, exit_code: int, failures_so_far: int = 0) -> str | None:
    """The reason a Job fails with when a pod's `container` exits `exit_code` (None: the Job goes on).
    batch/v1: podFailurePolicy rules are checked in order (FailJob on a matching container and exit code fails the
    Job with reason PodFailurePolicy); otherwise the pod counts as a failure, and more failures than backoffLimit
    (default 6) fail the Job with BackoffLimitExceeded."""
    for rule in (job_spec.get("podFailurePolicy") or {}).get("rules", []):
        codes = rule.get("onExitCodes") or {}
        if codes.get("containerName") not in (None, container):
            continue
        matched = (exit_code in codes.get("values", [])) == (codes.get("operator", "In") == "In")
        if matched and rule["action"] == "FailJob":
            return "PodFailurePolicy"
        if matched and rule["action"] == "Ignore":
            return None
    if failures_so_far + 1 > job_spec.get("backoffLimit", 6):
        return "BackoffLimitExceeded"
    return None


def failure_action(jobset_spec: dict, replicated_job: str, reason: str) -> str:
    """J:pkg/controllers/failure_policy.go executeFailurePolicy: no failurePolicy fails the JobSet at the first
    failed Job (FailedJobs); otherwise the first rule whose onJobFailureReasons and targetReplicatedJobs (each empty
    = any) match decides (ruleIsApplicable), and no match means RestartJobSet."""
    policy = jobset_spec.get("failurePolicy")
    if policy is None:
        return "FailJobSet"
    for rule in policy.get("rules") or []:
        if rule.get("onJobFailureReasons") and reason not in rule["onJobFailureReasons"]:
            continue
        if rule.get("targetReplicatedJobs") and replicated_job not in rule["targetReplicatedJobs"]:
            continue
        return rule["action"]
    return DEFAULT_ACTION


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
    status.restarts is then deleted and recreated, the whole gang (jobset_controller.go getChildJobs/deleteJobs)."""
    if action == "FailJobSet":
        status.condition, status.reason = "Failed", "FailJobSetAction"
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
