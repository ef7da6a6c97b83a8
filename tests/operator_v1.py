"""What the Kubeflow Training Operator v1.9.4 does with a job, as small pure functions the tests apply to the
manifests fastpath emits. Each one restates the upstream rule it models, read at kubeflow/trainer@v1.9.4 (the
Training Operator v1 lives in that repository since the rename); if upstream changes, these and the tests move
together, on purpose."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

PLACEHOLDER_EXIT_CODE = 0xBEEF  # pkg/controller.v1/common/pod.go: the default container never terminated


def replicas(job: dict) -> dict[str, dict]:
    spec = job["spec"]
    for key in ("pytorchReplicaSpecs", "mpiReplicaSpecs", "tfReplicaSpecs"):
        if key in spec:
            return spec[key]
    raise KeyError("not a Training Operator v1 job")


def pod_restart_policy(replica_policy: str) -> str:
    """kubeflow/trainer@v1.9.4:pkg/core/pod.go SetRestartPolicy: ExitCode pods run under Never (the operator
    recreates them); Always, OnFailure and Never pass through to the pod."""
    return "Never" if replica_policy == "ExitCode" else replica_policy


def is_retryable(exit_code: int) -> bool:
    """kubeflow/trainer@v1.9.4:pkg/util/train IsRetryableExitCode: exitCode >= 128."""
    return exit_code >= 128


@dataclass
class Pod:
    replica: str
    phase: str  # Pending, Running, Succeeded, Failed
    restarts: int = 0
    deleting: bool = False  # metadata.deletionTimestamp set (its node is gone, or it is being evicted)
    exit_code: int | None = None  # the default container's, when it terminated


def counts_failed(pod: Pod) -> bool:
    """kubeflow/trainer@v1.9.4:pkg/core/status.go UpdateJobReplicaStatuses: a Failed pod, and a Running pod with a
    deletionTimestamp ("when node is not ready"), count as failed."""
    return pod.phase == "Failed" or (pod.phase == "Running" and pod.deleting)


def pytorch_outcome(job: dict, pods: Iterable[Pod]) -> str:
    """What one reconcile of a PyTorchJob makes of its pods: "recreated" (pods deleted and made again),
    "Failed", or "Running". kubeflow/trainer@v1.9.4:pkg/controller.v1/common/pod.go ReconcilePods: under
    ExitCode a Failed pod whose default container exit code is retryable (>= 128, or the 0xbeef placeholder when
    it never terminated) is deleted and recreated, a non-retryable one fails the job;
    pkg/controller.v1/pytorch/pytorchjob_controller.go UpdateJobStatus: failed pods under any other policy than
    Never mean Restarting, under Never the job fails."""
    out = "Running"
    for name, spec in replicas(job).items():
        policy = spec.get("restartPolicy")
        for p in (p for p in pods if p.replica == name and counts_failed(p)):
            if policy == "ExitCode":
                if p.phase == "Failed" and not is_retryable(PLACEHOLDER_EXIT_CODE if p.exit_code is None else p.exit_code):
                    return "Failed"
                out = "recreated"
            elif policy == "Never":
                return "Failed"
            else:
                out = "recreated"
    return out


def counted_restarts(job: dict, pods: Iterable[Pod]) -> int:
    """kubeflow/trainer@v1.9.4:pkg/core/job.go PastBackoffLimit: sums init and app container restarts of pods in
    phase Running, over every replica whose restartPolicy is OnFailure, Always or ExitCode."""
    policies = {name: spec.get("restartPolicy") for name, spec in replicas(job).items()}
    return sum(p.restarts for p in pods if p.phase == "Running" and policies.get(p.replica) in ("OnFailure", "Always", "ExitCode"))


def past_backoff_limit(job: dict, pods: Iterable[Pod]) -> bool:
    """Same function: with backoffLimit 0 any counted restart fails the job, otherwise `>= backoffLimit`; no
    backoffLimit, no check."""
    limit = job["spec"]["runPolicy"].get("backoffLimit")
    if limit is None:
        return False
    n = counted_restarts(job, pods)
    return n > 0 if limit == 0 else n >= limit


def deleted_when_finished(job: dict, pods: Iterable[Pod]) -> list[Pod]:
    """kubeflow/trainer@v1.9.4:pkg/controller.v1/common/job.go DeletePodsAndServices on a finished job: None (the
    default of every kind: pkg/apis/kubeflow.org/v1/{mpi,pytorch,tensorflow}_defaults.go) deletes nothing,
    Running deletes Running and Pending pods, All deletes every pod."""
    policy = job["spec"]["runPolicy"].get("cleanPodPolicy") or "None"
    if policy == "None":
        return []
    if policy == "Running":
        return [p for p in pods if p.phase in ("Running", "Pending")]
    return list(pods)


def pytorch_env(job: dict, replica: str = "Worker") -> dict[str, str]:
    """The variables the operator adds to every container of a PyTorchJob pod
    (kubeflow/trainer@v1.9.4:pkg/controller.v1/pytorch/envvar.go setPodEnv, elastic.go Generate):
    PYTHONUNBUFFERED=1 always; PET_NPROC_PER_NODE from nprocPerNode; with elasticPolicy PET_RDZV_ENDPOINT =
    (rdzvHost or <job>-worker-0):(rdzvPort or the worker's port), PET_RDZV_BACKEND (default c10d),
    PET_NNODES=min:max, and PET_MAX_RESTARTS, PET_RDZV_ID, PET_RDZV_CONF (k=v,k=v) when set. MASTER_* only with
    a Master replica."""
    spec = job["spec"]
    name = job["metadata"]["name"]
    env = {"PYTHONUNBUFFERED": "1"}
    if "nprocPerNode" in spec:
        env["PET_NPROC_PER_NODE"] = str(spec["nprocPerNode"])
    ep = spec.get("elasticPolicy")
    if ep is None:
        env["PET_NNODES"] = str(sum(r.get("replicas", 1) for r in replicas(job).values()))
        return env
    host = ep.get("rdzvHost") or f"{name}-worker-0"
    env["PET_RDZV_ENDPOINT"] = f"{host}:{ep.get('rdzvPort', 23456)}"
    env["PET_RDZV_BACKEND"] = ep.get("rdzvBackend", "c10d")
    env["PET_NNODES"] = f"{ep['minReplicas']}:{ep['maxReplicas']}"
    if "maxRestarts" in ep:
        env["PET_MAX_RESTARTS"] = str(ep["maxRestarts"])
    if "rdzvId" in ep:
        env["PET_RDZV_ID"] = ep["rdzvId"]
    if ep.get("rdzvConf"):
        env["PET_RDZV_CONF"] = ",".join(f"{kv['key']}={kv['value']}" for kv in ep["rdzvConf"])
    return env


def injects_init_pytorch(job: dict) -> bool:
    """kubeflow/trainer@v1.9.4:pkg/controller.v1/pytorch/initcontainer.go: workers get `init-pytorch` (waits for
    <job>-master-0, requests below limits: Burstable) only when a Master replica exists."""
    return "Master" in replicas(job)


def job_succeeds_when(job: dict) -> str:
    """kubeflow/trainer@v1.9.4:pkg/controller.v1/pytorch UpdateJobStatus: with a Master the master alone decides;
    worker-only with elasticPolicy succeeds when any worker succeeds, without it when all do."""
    if "Master" in replicas(job):
        return "master"
    return "any worker" if job["spec"].get("elasticPolicy") else "all workers"
