"""One pod-template extractor for every workload kind the rules look at.

pod_templates(obj) returns each pod template an object will create, with its replica count and role, so a rule
written once for a pod spec applies to Pods, Deployments, Jobs, Kubeflow jobs, Trainer v2, Volcano Jobs, JobSets,
Ray clusters and LeaderWorkerSets alike. An unknown kind is searched for pod specs (a mapping with a `containers`
list), each judged as one pod.

Every template comes back in the shapes the rules expect, whatever the input held: `containers`, `env`,
`volumes`, `volumeMounts`, `tolerations` are lists of mappings, `resources`, `securityContext`, `metadata` are
mappings, names are strings. What had to be dropped or guessed on the way (`Master: null`, an env entry without a
name, `replicas: "$N"`, containers given as a mapping) is listed in `extract(obj).problems`, so a rule never
meets a shape it cannot read and the linter can say what it did not judge.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from itertools import repeat
from typing import Any


@dataclass(frozen=True)
class PodTemplate:
    role: str  # Master, Worker, Launcher, task name, replicated job name, "pod"
    replicas: int
    template: dict  # {"metadata": ..., "spec": PodSpec}
    path: str  # where it sits in the object, for messages
    generic: bool = False  # found by searching an unknown kind, not where a known kind keeps it
    # Runs to completion before another part of the workload starts (a JobSet replicated job that another one
    # dependsOn with status Complete, kubernetes-sigs/jobset@v0.12.0:api/jobset/v1alpha2/jobset_types.go
    # DependsOn): its pods are never scheduled together with the rest, so they are no part of the gang.
    precedes: bool = False


@dataclass
class Extracted:
    templates: list[PodTemplate] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # what was not judged, and why
    known: bool = True  # a kind whose pod templates the extractor knows where to find


# Kubeflow jobs: kind -> the spec key holding {replica type: ReplicaSpec} (kubeflow/trainer@v1.9.4
# pkg/apis/kubeflow.org/v1/*_types.go).
REPLICA_SPECS = {
    "PyTorchJob": "pytorchReplicaSpecs",
    "MPIJob": "mpiReplicaSpecs",
    "TFJob": "tfReplicaSpecs",
    "XGBoostJob": "xgbReplicaSpecs",
    "PaddleJob": "paddleReplicaSpecs",
    "JAXJob": "jaxReplicaSpecs",
}
# Kinds that never hold a pod template: not searched.
NO_PODS = {
    "Namespace",
    "Service",
    "ConfigMap",
    "Secret",
    "PersistentVolumeClaim",
    "PersistentVolume",
    "StorageClass",
    "PriorityClass",
    "ServiceAccount",
    "Role",
    "ClusterRole",
    "RoleBinding",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "NetworkAttachmentDefinition",
    "Queue",
    "PodGroup",
    "LimitRange",
    "ResourceQuota",
    "NetworkPolicy",
    "Ingress",
    "Endpoints",
    "EndpointSlice",
    "PodDisruptionBudget",
    "HorizontalPodAutoscaler",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "APIService",
    "Lease",
    "Event",
    "ResourceFlavor",
    "ClusterQueue",
    "LocalQueue",
    "Workload",
    # NVIDIA Network Operator, NV-IPAM and SR-IOV operator objects (the platform renders thousands on a big
    # fabric): network settings whose CRDs hold no pod template.
    "NicClusterPolicy",
    "MacvlanNetwork",
    "HostDeviceNetwork",
    "IPoIBNetwork",
    "IPPool",
    "CIDRPool",
    "SriovNetwork",
    "SriovIBNetwork",
    "SriovNetworkNodePolicy",
    "SriovNetworkPoolConfig",
    "SriovOperatorConfig",
    # Dynamic Resource Allocation (resource.k8s.io) and NVIDIA's ComputeDomain: devices and claims, no pods.
    "DeviceClass",
    "ResourceClaim",
    "ResourceClaimTemplate",
    "ResourceSlice",
    "ComputeDomain",
}


# The type checks below map isinstance over a field's items with these: repeat() never runs out, so one of each
# serves every check, and making a new one per check cost more than checking a short list.
DICTS, STRS = repeat(dict), repeat(str)


def _what(value: Any) -> str:
    if value is None:
        return "null"
    text = repr(value)
    return f"{type(value).__name__} {text[:40] + '...' if len(text) > 40 else text}"


class _Reader:
    """Reads one object, collecting what it had to skip."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def note(self, message: str) -> None:
        if message not in self.problems:
            self.problems.append(message)

    # `path` + `at` is where the value sits, joined only for a note: the reader meets thousands of fields for each
    # one it has to mention.
    def mapping(self, value: Any, path: str, at: str = "") -> dict:
        if isinstance(value, dict):
            return value
        if value is not None:
            self.note(f"{path}{at} is {_what(value)}, not a mapping: not judged")
        return {}

    def sequence(self, value: Any, path: str, at: str = "") -> list:
        if isinstance(value, list):
            return value
        if value is not None:
            self.note(f"{path}{at} is {_what(value)}, not a list: not judged")
        return []

    def mappings(self, value: Any, path: str, at: str = "") -> list[dict]:
        if type(value) is list and all(map(isinstance, value, DICTS)):
            return value  # the common case, checked without a step in Python per item
        if value is None:
            return []
        out = []
        for i, item in enumerate(self.sequence(value, path, at)):
            if isinstance(item, dict):
                out.append(item)
            else:
                self.note(f"{path}{at}[{i}] is {_what(item)}, not a mapping: not judged")
        return out

    def count(self, value: Any, path: str, default: int = 1) -> int:
        if value is None:
            return default
        if isinstance(value, bool):
            self.note(f"{path} is {_what(value)}, not a number: counted as {default}")
            return default
        try:
            return int(value) if isinstance(value, int | float) else int(str(value).strip())
        except (TypeError, ValueError, OverflowError):
            self.note(
                f"{path} is {_what(value)}, not a number (a template variable?): counted as {default}; "
                "lint the rendered manifest"
            )
            return default

    def strings(self, value: Any, path: str, at: str = "") -> dict:
        """A string-keyed mapping (labels, annotations, nodeSelector, resources): other keys made strings, values
        kept. Nearly every manifest has string keys already, and then gets its own mapping back, not a copy."""
        if type(value) is dict and all(map(isinstance, value, STRS)):
            return value
        if value is None:
            return {}
        mapping = self.mapping(value, path, at)
        return mapping if all(map(isinstance, mapping, STRS)) else {str(k): v for k, v in mapping.items()}

    def words(self, value: Any, path: str, at: str) -> list[str]:
        """A command or args: a list of words, each a string (a list of strings already is kept, not copied)."""
        if type(value) is list and all(map(isinstance, value, STRS)):
            return value
        if value is None:
            return []
        if isinstance(value, str):
            self.note(f"{path}{at} is a string, not a list of words: read as one word")
            value = [value]
        return [str(w) for w in self.sequence(value, path, at) if w is not None]

    # Most fields of most containers are absent or in shape already: the checks for those come first, each saving
    # the steps that repair what is not.
    def container(self, c: dict, path: str) -> dict:
        out = dict(c)
        name, image = c.get("name"), c.get("image")
        if name is not None and not isinstance(name, str):
            out["name"] = str(name)
        if image is not None and not isinstance(image, str):
            out["image"] = str(image)
        envs = self.mappings(c.get("env"), path, ".env")
        names = [e.get("name") for e in envs]
        if all(names) and all(map(isinstance, names, STRS)):
            out["env"] = envs
        else:
            out["env"] = []
            for i, (e, name) in enumerate(zip(envs, names, strict=True)):
                if not isinstance(name, str) or not name:
                    self.note(
                        f"{path}.env[{i}] has {'no name' if name in (None, '') else 'name ' + _what(name)}: "
                        "not judged (the API server refuses it)"
                    )
                    continue
                out["env"].append(e)
        out["envFrom"] = self.mappings(c.get("envFrom"), path, ".envFrom")
        out["command"] = self.words(c.get("command"), path, ".command")
        out["args"] = self.words(c.get("args"), path, ".args")
        mounts = c.get("volumeMounts")
        out["volumeMounts"] = (
            [
                m
                if type(m.get("name")) is str and type(m.get("mountPath")) is str
                else {**m, "name": str(m.get("name") or ""), "mountPath": str(m.get("mountPath") or "")}
                for m in self.mappings(mounts, path, ".volumeMounts")
            ]
            if mounts is not None
            else []
        )
        res = self.mapping(c.get("resources"), path, ".resources")
        out["resources"] = {
            **res,
            "requests": self.strings(res.get("requests"), path, ".resources.requests"),
            "limits": self.strings(res.get("limits"), path, ".resources.limits"),
        }
        sc = c.get("securityContext")
        sc = dict(self.mapping(sc, path, ".securityContext")) if sc is not None else {}
        caps = sc.get("capabilities")
        caps = dict(self.mapping(caps, path, ".securityContext.capabilities")) if caps is not None else {}
        add = caps.get("add")
        caps["add"] = (
            [str(a) for a in self.sequence(add, path, ".securityContext.capabilities.add")] if add is not None else []
        )
        sc["capabilities"] = caps
        out["securityContext"] = sc
        return out

    def pod_spec(self, spec: dict, path: str) -> dict:
        out = dict(spec)
        for key in ("containers", "initContainers"):
            cs = spec.get(key)
            out[key] = (
                [self.container(c, f"{path}.{key}[{i}]") for i, c in enumerate(self.mappings(cs, path, f".{key}"))]
                if cs is not None
                else []
            )
        volumes = spec.get("volumes")
        out["volumes"] = (
            [
                v if type(v.get("name")) is str else {**v, "name": str(v.get("name") or "")}
                for v in self.mappings(volumes, path, ".volumes")
            ]
            if volumes is not None
            else []
        )
        out["tolerations"] = self.mappings(spec.get("tolerations"), path, ".tolerations")
        out["nodeSelector"] = self.strings(spec.get("nodeSelector"), path, ".nodeSelector")
        affinity = dict(self.mapping(spec.get("affinity"), path, ".affinity"))
        affinity["nodeAffinity"] = self.mapping(affinity.get("nodeAffinity"), path, ".affinity.nodeAffinity")
        out["affinity"] = affinity
        return out

    def template(self, template: Any, role: str, replicas: int, path: str, generic: bool = False) -> list[PodTemplate]:
        if template is None:
            return []
        template = self.mapping(template, path)
        spec_path = path if path == "spec" else f"{path}.spec"  # a Pod's own spec sits at `spec`
        spec = self.mapping(template.get("spec"), spec_path)
        if not spec:
            return []
        md_path = "metadata" if path == "spec" else f"{path}.metadata"
        md = dict(self.mapping(template.get("metadata"), md_path))
        md["annotations"] = self.strings(md.get("annotations"), md_path, ".annotations")
        md["labels"] = self.strings(md.get("labels"), md_path, ".labels")
        spec = self.pod_spec(spec, spec_path)
        return [PodTemplate(str(role), replicas, {**template, "metadata": md, "spec": spec}, path, generic)]


def _replica_specs(r: _Reader, spec: dict, key: str) -> list[PodTemplate]:
    out: list[PodTemplate] = []
    for role, rs in r.mapping(spec.get(key), f"spec.{key}").items():
        path = f"spec.{key}.{role}"
        if rs is None:
            r.note(f"{path} is null: no pods judged for it")
        rs = r.mapping(rs, path)
        out += r.template(rs.get("template"), role, r.count(rs.get("replicas"), f"{path}.replicas"), f"{path}.template")
    return out


def _jobset_jobs(r: _Reader, jobs: Any, base: str, num_nodes: int | None = None) -> list[PodTemplate]:
    out = []
    before = {
        str(d.get("name"))
        for rj in r.mappings(jobs, base)
        for d in (rj["dependsOn"] if isinstance(rj.get("dependsOn"), list) else [])
        if isinstance(d, dict) and d.get("status") == "Complete"
    }
    for i, rj in enumerate(r.mappings(jobs, base)):
        job = r.mapping(rj.get("template"), f"{base}[{i}].template")
        job_spec = r.mapping(job.get("spec"), f"{base}[{i}].template.spec")
        per_job = r.count(job_spec.get("parallelism"), f"{base}[{i}].template.spec.parallelism")
        replicas = r.count(rj.get("replicas"), f"{base}[{i}].replicas") * per_job
        # Trainer v2 runtimes: the `node` job runs mlPolicy.numNodes pods.
        if num_nodes is not None and rj.get("name") == "node":
            replicas = num_nodes
        tpls = r.template(
            job_spec.get("template"), rj.get("name", str(i)), replicas, f"{base}[{i}].template.spec.template"
        )
        out += [replace(t, precedes=True) for t in tpls] if str(rj.get("name")) in before else tpls
    return out


def jobset_templates(replicated_jobs: Any) -> Extracted:
    """The pod templates of a runtime's JobSet spec as the trainer controller fills it in for a TrainJob
    (components.jobs.runtime_v2.controller.effective_jobset: parallelism set to each job's pod count), at the paths
    and with the roles the runtime's own templates have, so a finding reads the same on both."""
    r = _Reader()
    return Extracted(_jobset_jobs(r, replicated_jobs, RUNTIME_JOBS), r.problems)


RUNTIME_JOBS = "spec.template.spec.replicatedJobs"


def _train_job(r: _Reader, spec: dict) -> list[PodTemplate]:
    """TrainJob carries no pod template: its trainer (image, command, env, resourcesPerNode) is what the node
    pods get on top of the runtime's template. This is what is judged when the runtime is not among the objects
    checked (policies/runtimes.py pairs the two when it is)."""
    trainer = r.mapping(spec.get("trainer"), "spec.trainer")
    if not trainer:
        return []
    container = {
        "name": "node",
        "image": trainer.get("image"),
        "command": trainer.get("command"),
        "args": trainer.get("args"),
        "env": trainer.get("env"),
        "resources": trainer.get("resourcesPerNode") or {},
    }
    container = {k: v for k, v in container.items() if v is not None}
    return r.template(
        {"metadata": {}, "spec": {"containers": [container]}},
        "node",
        r.count(trainer.get("numNodes"), "spec.trainer.numNodes"),
        "spec.trainer",
    )


def _ray_cluster(r: _Reader, spec: dict, base: str) -> list[PodTemplate]:
    """KubeRay's RayCluster spec (also RayJob.spec.rayClusterSpec, RayService.spec.rayClusterConfig)."""
    head = r.mapping(spec.get("headGroupSpec"), f"{base}.headGroupSpec")
    out = r.template(head.get("template"), "head", 1, f"{base}.headGroupSpec.template")
    for i, g in enumerate(r.mappings(spec.get("workerGroupSpecs"), f"{base}.workerGroupSpecs")):
        path = f"{base}.workerGroupSpecs[{i}]"
        n = r.count(g.get("replicas", g.get("minReplicas")), f"{path}.replicas")
        # A multi-host group's replica is numOfHosts pods (kubernetes-sigs/kueue@v0.19.2:pkg/controller/jobs/
        # raycluster/common.go effectiveWorkerCount: replicas scaled by numOfHosts above 1).
        n *= max(r.count(g.get("numOfHosts"), f"{path}.numOfHosts"), 1)
        out += r.template(g.get("template"), str(g.get("groupName") or f"worker{i}"), n, f"{path}.template")
    return out


def _leader_worker_set(r: _Reader, spec: dict) -> list[PodTemplate]:
    """LeaderWorkerSet: `replicas` groups of `size` pods, one leader (leaderTemplate, else workerTemplate)."""
    lwt = r.mapping(spec.get("leaderWorkerTemplate"), "spec.leaderWorkerTemplate")
    groups = r.count(spec.get("replicas"), "spec.replicas")
    size = r.count(lwt.get("size"), "spec.leaderWorkerTemplate.size")
    if lwt.get("leaderTemplate") is None:
        return r.template(
            lwt.get("workerTemplate"), "worker", groups * size, "spec.leaderWorkerTemplate.workerTemplate"
        )
    return r.template(
        lwt.get("leaderTemplate"), "leader", groups, "spec.leaderWorkerTemplate.leaderTemplate"
    ) + r.template(
        lwt.get("workerTemplate"), "worker", groups * max(size - 1, 0), "spec.leaderWorkerTemplate.workerTemplate"
    )


def walk(value: Any, path: str, visit: Callable[[dict, str], bool], limit: int, depth: int = 0) -> None:
    """Call visit(mapping, path) on every mapping under `value`, parents first, leaving out metadata and status;
    when it returns True nothing below that mapping is visited. Paths read `spec.a[0].b`. `limit` bounds the
    depth (a mapping and a list each count one), so no document nests deep enough to exhaust the stack.
    The one walk over input of unknown shape: the pod-spec search here and the linter's GPU search use it."""
    if depth > limit:
        return
    if isinstance(value, dict):
        if visit(value, path):
            return
        for k, v in value.items():
            if isinstance(v, (dict, list)) and k not in ("metadata", "status"):
                walk(v, f"{path}.{k}" if path else str(k), visit, limit, depth + 1)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            if isinstance(v, (dict, list)):
                walk(v, f"{path}[{i}]", visit, limit, depth + 1)


def _search(r: _Reader, value: Any, path: str) -> list[PodTemplate]:
    """Pod specs anywhere in an unknown kind: a mapping whose `containers` is a list of mappings (a PodSpec), or
    whose `spec` is one (a PodTemplateSpec). Each is judged as one pod."""
    found: list[PodTemplate] = []

    def pod_spec(value: dict, path: str) -> bool:
        cs = value.get("containers")
        if isinstance(cs, list) and cs and all(isinstance(c, dict) for c in cs):
            found.extend(
                r.template(
                    {"metadata": value.get("metadata") if path.endswith("template") else {}, "spec": value},
                    path or "spec",
                    1,
                    path,
                    generic=True,
                )
            )
            return True
        inner = value.get("spec")
        if isinstance(inner, dict) and isinstance(inner.get("containers"), list):
            found.extend(r.template(value, path, 1, path, generic=True))
            return True
        return False

    walk(value, path, pod_spec, limit=12)
    return found


def extract(obj: dict) -> Extracted:
    kind = obj.get("kind")
    if not isinstance(kind, str):
        return Extracted([], [f"kind is {_what(kind)}, not a string: not judged"], False)
    spec = obj.get("spec")
    if spec is not None and not isinstance(spec, dict):
        return Extracted([], [f"spec is {_what(spec)}, not a mapping: not judged"])
    if kind in NO_PODS:  # most objects of a lint
        return Extracted()
    r = _Reader()
    spec = spec or {}
    known = True
    if kind == "Pod":
        tpls = r.template({"metadata": obj.get("metadata") or {}, "spec": spec}, "pod", 1, "spec")
        tpls = [PodTemplate(t.role, t.replicas, t.template, "spec") for t in tpls]
    elif kind in ("Deployment", "StatefulSet", "ReplicaSet"):
        tpls = r.template(spec.get("template"), "pod", r.count(spec.get("replicas"), "spec.replicas"), "spec.template")
    elif kind == "DaemonSet":
        tpls = r.template(spec.get("template"), "daemon", 1, "spec.template")
    elif kind == "Job" and is_volcano_job(obj):  # batch.volcano.sh Job: same kind name as batch/v1 Job
        tpls = [
            t
            for i, task in enumerate(r.mappings(spec.get("tasks"), "spec.tasks"))
            for t in r.template(
                task.get("template"),
                task.get("name", str(i)),
                r.count(task.get("replicas"), f"spec.tasks[{i}].replicas"),
                f"spec.tasks[{i}].template",
            )
        ]
    elif kind == "Job":
        tpls = r.template(
            spec.get("template"), "pod", r.count(spec.get("parallelism"), "spec.parallelism"), "spec.template"
        )
    elif kind == "CronJob":
        job = r.mapping(r.mapping(spec.get("jobTemplate"), "spec.jobTemplate").get("spec"), "spec.jobTemplate.spec")
        parallelism = r.count(job.get("parallelism"), "spec.jobTemplate.spec.parallelism")
        tpls = r.template(job.get("template"), "pod", parallelism, "spec.jobTemplate.spec.template")
    elif kind in REPLICA_SPECS:  # MPIJob: v1 (Training Operator) and v2beta1 (mpi-operator) share the layout
        tpls = _replica_specs(r, spec, REPLICA_SPECS[kind])
    elif kind == "TrainJob":
        tpls = _train_job(r, spec)
    elif kind in ("TrainingRuntime", "ClusterTrainingRuntime"):
        num_nodes = r.mapping(spec.get("mlPolicy"), "spec.mlPolicy").get("numNodes")
        inner = r.mapping(r.mapping(spec.get("template"), "spec.template").get("spec"), "spec.template.spec")
        tpls = _jobset_jobs(
            r,
            inner.get("replicatedJobs"),
            RUNTIME_JOBS,
            r.count(num_nodes, "spec.mlPolicy.numNodes") if num_nodes is not None else None,
        )
    elif kind == "JobSet":
        tpls = _jobset_jobs(r, spec.get("replicatedJobs"), "spec.replicatedJobs")
    elif kind == "RayCluster":
        tpls = _ray_cluster(r, spec, "spec")
    elif kind == "RayJob":
        tpls = _ray_cluster(
            r, r.mapping(spec.get("rayClusterSpec"), "spec.rayClusterSpec"), "spec.rayClusterSpec"
        ) + r.template(spec.get("submitterPodTemplate"), "submitter", 1, "spec.submitterPodTemplate")
    elif kind == "RayService":
        tpls = _ray_cluster(
            r, r.mapping(spec.get("rayClusterConfig"), "spec.rayClusterConfig"), "spec.rayClusterConfig"
        )
    elif kind == "LeaderWorkerSet":
        tpls = _leader_worker_set(r, spec)
    else:
        known = False
        tpls = _search(r, spec, "spec")
    return Extracted(tpls, r.problems, known)


def clean_container(c: dict) -> dict:
    """One container in the shapes the rules expect (what pod_templates does to every container)."""
    return _Reader().container(c, "container")


def pod_templates(obj: dict) -> list[PodTemplate]:
    return extract(obj).templates


def is_volcano_job(obj: dict) -> bool:
    return obj.get("kind") == "Job" and str(obj.get("apiVersion", "")).startswith("batch.volcano.sh/")


def total_replicas(tpls: list[PodTemplate]) -> int:
    """The pods that run together: a gang's size (steps that complete before it starts are not in it)."""
    return sum(t.replicas for t in tpls if not t.precedes)
