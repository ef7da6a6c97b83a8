"""What the kubeflow-trainer v2.3.0 TrainJob controller does with a finished run, restated as pure functions the
tests apply to the runtimes fastpath publishes. Read at kubeflow/trainer@v2.3.0:pkg/controller/trainjob_controller.go
(T: below) and kubernetes-sigs/jobset@v0.12.0 (J: below). If upstream changes, these and the tests move together."""

from __future__ import annotations

DEADLINE_EXCEEDED = "DeadlineExceeded"  # T: trainer.TrainJobDeadlineExceededReason


def jobset_deleted_by_ttl(jobset_spec: dict, seconds_since_finished: float) -> bool:
    """J:pkg/controllers/ttl_after_finished.go: a finished JobSet is deleted ttlSecondsAfterFinished after it
    finished; without the field it is never deleted."""
    ttl = jobset_spec.get("ttlSecondsAfterFinished")
    return ttl is not None and seconds_since_finished >= ttl


def reconcile(failed_reason: str | None, jobset_exists: bool, jobset_failed: bool) -> tuple[str | None, bool]:
    """One Reconcile of a TrainJob: (its Failed reason afterwards, whether a JobSet is created).
    T: Reconcile calls removeFailedCondition, which drops every Failed condition but DeadlineExceeded; then, for a
    TrainJob that is not finished (IsTrainJobFinished reads the conditions just edited), reconcileObjects applies
    the JobSet with ForceOwnership, creating it when it is missing; setTrainJobStatus then copies the runtime's
    view of the JobSet (a failed JobSet makes the TrainJob Failed again)."""
    kept = failed_reason if failed_reason == DEADLINE_EXCEEDED else None
    created = kept is None and not jobset_exists
    if kept is None and jobset_exists and jobset_failed:
        kept = "JobSetFailed"
    return kept, created


def reruns(jobset_spec: dict, days: int, reconciles_per_day: int = 24) -> int:
    """How many times a failed run starts again within `days`: every time the JobSet is gone and the TrainJob is
    reconciled, a fresh JobSet (a new run, with a fresh restart budget, on all its GPUs) is created."""
    failed: str | None = "JobSetFailed"
    exists, jobset_failed, finished_at, runs = True, True, 0.0, 0
    for tick in range(1, days * reconciles_per_day + 1):
        now = tick * 86400 / reconciles_per_day
        if exists and jobset_failed and jobset_deleted_by_ttl(jobset_spec, now - finished_at):
            exists = False
        failed, created = reconcile(failed, exists, jobset_failed)
        if created:
            runs += 1
            exists, jobset_failed, finished_at = True, True, now  # the rerun fails again, as the first did
            failed = "JobSetFailed"
    return runs
