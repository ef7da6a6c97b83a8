"""One pod-template extractor for every workload kind the rules look at.

pod_templates(obj) returns each pod template an object will create, with its replica count and role, so a rule
written once for a pod spec applies to Pods, Deployments, Jobs, Kubeflow jobs, Trainer v2, Volcano Jobs and
JobSets alike.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PodTemplate:
    role: str  # Master, Worker, Launcher, task name, replicated job name, "pod"
    replicas: int
    template: dict  # {"metadata": ..., "spec": PodSpec}
    path: str  # where it sits in the object, for messages


# Kubeflow jobs: kind -> the spec key holding {replica type: ReplicaSpec} (kubeflow/trainer@v1.9.4
# pkg/apis/kubeflow.org/v1/*_types.go).
REPLICA_SPECS = {"PyTorchJob": "pytorchReplicaSpecs", "MPIJob": "mpiReplicaSpecs", "TFJob": "tfReplicaSpecs",
                 "XGBoostJob": "xgbReplicaSpecs", "PaddleJob": "paddleReplicaSpecs", "JAXJob": "jaxReplicaSpecs"}


def _n(value, default: int = 1) -> int:
    try:
        return int(value) if value is not None else default
    except (TypeError, ValueError):
        return default


def _tpl(template: dict | None, role: str, replicas: int, path: str) -> list[PodTemplate]:
    if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
        return []
    return [PodTemplate(role, replicas, template, path)]


def _replica_specs(spec: dict, key: str) -> list[PodTemplate]:
    out = []
    for role, rs in (spec.get(key) or {}).items():
        out += _tpl(rs.get("template"), role, _n(rs.get("replicas")), f"spec.{key}.{role}.template")
    return out


def _jobset_jobs(jobs: list, base: str, num_nodes: int | None = None) -> list[PodTemplate]:
    out = []
    for i, rj in enumerate(jobs or []):
        job_spec = (rj.get("template") or {}).get("spec") or {}
        per_job = _n(job_spec.get("parallelism"))
        replicas = _n(rj.get("replicas")) * per_job
        # Trainer v2 runtimes: the `node` job runs mlPolicy.numNodes pods.
        if num_nodes is not None and rj.get("name") == "node":
            replicas = num_nodes
        out += _tpl(job_spec.get("template"), rj.get("name", str(i)), replicas,
                    f"{base}[{i}].template.spec.template")
    return out


def _train_job(spec: dict) -> list[PodTemplate]:
    """TrainJob carries no pod template: its trainer (image, command, env, resourcesPerNode) is what the node
    pods get on top of the runtime's template."""
    trainer = spec.get("trainer") or {}
    if not trainer:
        return []
    container = {"name": "node", "image": trainer.get("image"), "command": trainer.get("command"),
                 "args": trainer.get("args"), "env": trainer.get("env"),
                 "resources": trainer.get("resourcesPerNode") or {}}
    container = {k: v for k, v in container.items() if v is not None}
    return [PodTemplate("node", _n(trainer.get("numNodes")), {"metadata": {}, "spec": {"containers": [container]}},
                        "spec.trainer")]


def pod_templates(obj: dict) -> list[PodTemplate]:
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    if not isinstance(spec, dict):
        return []
    if kind == "Pod":
        return [PodTemplate("pod", 1, {"metadata": obj.get("metadata") or {}, "spec": spec}, "spec")]
    if kind in ("Deployment", "StatefulSet", "ReplicaSet"):
        return _tpl(spec.get("template"), "pod", _n(spec.get("replicas")), "spec.template")
    if kind == "DaemonSet":
        return _tpl(spec.get("template"), "daemon", 1, "spec.template")
    if kind == "Job" and is_volcano_job(obj):  # batch.volcano.sh Job: same kind name as batch/v1 Job
        return [t for i, task in enumerate(spec.get("tasks") or [])
                for t in _tpl(task.get("template"), task.get("name", str(i)), _n(task.get("replicas")),
                              f"spec.tasks[{i}].template")]
    if kind == "Job":
        return _tpl(spec.get("template"), "pod", _n(spec.get("parallelism")), "spec.template")
    if kind == "CronJob":
        job = (spec.get("jobTemplate") or {}).get("spec") or {}
        return _tpl(job.get("template"), "pod", _n(job.get("parallelism")), "spec.jobTemplate.spec.template")
    if kind in REPLICA_SPECS:  # MPIJob: v1 (Training Operator) and v2beta1 (mpi-operator) share the layout
        return _replica_specs(spec, REPLICA_SPECS[kind])
    if kind == "TrainJob":
        return _train_job(spec)
    if kind in ("TrainingRuntime", "ClusterTrainingRuntime"):
        num_nodes = (spec.get("mlPolicy") or {}).get("numNodes")
        jobs = ((spec.get("template") or {}).get("spec") or {}).get("replicatedJobs")
        return _jobset_jobs(jobs, "spec.template.spec.replicatedJobs", _n(num_nodes) if num_nodes else None)
    if kind == "JobSet":
        return _jobset_jobs(spec.get("replicatedJobs"), "spec.replicatedJobs")
    return []


def is_volcano_job(obj: dict) -> bool:
    return obj.get("kind") == "Job" and str(obj.get("apiVersion", "")).startswith("batch.volcano.sh/")


def total_replicas(tpls: list[PodTemplate]) -> int:
    return sum(t.replicas for t in tpls)
