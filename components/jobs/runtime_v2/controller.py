"""What the Kubeflow Trainer v2.3.0 and JobSet v0.12.0 controllers make of a TrainJob and the runtime it names:
the JobSet spec, the Volcano PodGroup and the pods, without a cluster. The policy pack judges a TrainJob's pods
from it (policies/runtimes.py), the job contract shows them. Pure: dicts in, dicts out; inputs are not changed.

    effective_jobset(train_job, runtime)     the JobSet spec, PodGroup and pod counts the controller derives
    effective_pod(train_job, runtime)        the pod template of one replicated job of that JobSet
    strategic_merge(original, patch)         a runtime patch applied (Kubernetes strategic merge)
    merge_resources(base, override)          spec.trainer.resourcesPerNode applied (per resource name)
    quantity(value)                          a Kubernetes quantity as an exact number

A restatement of what was read at kubeflow/trainer@v2.3.0 (pkg/runtime/core/trainingruntime.go, the plugins in
pkg/runtime/framework/plugins/: torch, mpi, plainml, volcano, jobset/builder.go; pkg/apply/apply.go;
pkg/util/trainingruntime/; pkg/runtime/runtime.go; pkg/constants/constants.go) and
kubernetes-sigs/jobset@v0.12.0 (pkg/webhooks/jobset_webhook.go, api/jobset/v1alpha2/jobset_types.go): each
function names the upstream function it follows. tests/test_trainer_v2_runtime.py checks it against upstream's own
runtimes. The names below are upstream's; build.py emits runtimes under the same names.
"""

from __future__ import annotations

import copy
import functools
import re
from fractions import Fraction
from typing import Any

ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"  # kubeflow/trainer@v2.3.0:pkg/constants/constants.go
TRAINER = "trainer"
NODE = "node"  # the trainer's replicated job and container; also the MPI launcher's container
LAUNCHER = "launcher"
TRAINER_PORT = 29500  # constants.ContainerTrainerPort: PET_MASTER_PORT
QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"  # volcanov1beta1.KubeGroupNameAnnotationKey
MPI_HOSTFILE = "/etc/mpi/hostfile"
MPI_HOSTFILE_VOLUME = "mpi-hostfile"  # constants.MPIHostfileVolumeName (added by the mpi plugin)
MPI_SSH_VOLUME = "mpi-ssh-auth"  # constants.MPISSHAuthVolumeName


# Strategic-merge list keys on the paths runtime patches reach (corev1 / batchv1 / jobset patchMergeKey tags);
# any other list is replaced whole (tolerations, capabilities.add, nodeSelectorTerms, command...).
MERGE_KEYS = {
    "replicatedJobs": "name",
    "dependsOn": "name",
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "imagePullSecrets": "name",
    "schedulingGates": "name",
    "ports": "containerPort",
}
RETAIN_KEYS = {"volumes"}  # patchStrategy merge,retainKeys: a volume's source is the patch's


def strategic_merge(original: Any, patch: Any, key: str | None = None) -> Any:
    """Kubernetes strategic merge patch, as far as runtime patches go (no `$patch` directives; the API server
    prunes nulls from a TrainJob, so none arrive)."""
    if isinstance(patch, dict) and isinstance(original, dict):
        out = dict(original)
        for k, v in patch.items():
            out[k] = strategic_merge(original.get(k), v, k) if k in original else copy.deepcopy(v)
        return out
    if isinstance(patch, list) and isinstance(original, list) and key in MERGE_KEYS:
        mk = MERGE_KEYS[key]
        items = [copy.deepcopy(o) for o in original]
        for item in patch:
            at = next((i for i, o in enumerate(items) if o.get(mk) == item.get(mk)), None)
            if at is None:
                items.append(copy.deepcopy(item))
            else:
                merged = strategic_merge(items[at], item)
                if key in RETAIN_KEYS:
                    merged = {k: v for k, v in merged.items() if k in item}
                items[at] = merged
        return items
    return copy.deepcopy(patch)


def upsert(items: list[dict], new: list[dict], key: str = "name") -> None:
    """kubeflow/trainer@v2.3.0:pkg/apply/apply.go upsert: replace in place by key, else append."""
    for item in new:
        at = next((i for i, o in enumerate(items) if o.get(key) == item.get(key)), None)
        if at is None:
            items.append(copy.deepcopy(item))
        else:
            items[at] = copy.deepcopy(item)


_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([a-zA-Z]*)$")
_SUFFIX: dict[str, int | Fraction] = {
    "": 1,
    "m": Fraction(1, 1000),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
}


def quantity(value: object) -> Fraction:
    """A Kubernetes quantity as an exact number (`64Gi`, `500m`, 8)."""
    return _quantity(str(value))


@functools.lru_cache(maxsize=4096)  # the linter compares the same few quantities for every TrainJob of a runtime
def _quantity(value: str) -> Fraction:
    m = _QUANTITY.match(value)
    if not m or m.group(2) not in _SUFFIX:
        raise ValueError(f"not a quantity: {value!r}")
    return Fraction(m.group(1)) * _SUFFIX[m.group(2)]


def _format(q: Fraction, name: str) -> str | int:
    if q.denominator != 1:
        return f"{int(q * 1000)}m"
    if name == "memory" and q % 2**30 == 0:
        return f"{q // 2**30}Gi"
    return int(q)


def _copy(value: Any) -> Any:
    """copy.deepcopy for the JSON-shaped data a runtime is, several times faster: the linter merges every
    TrainJob into its runtime."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def merge_resources(base: dict, override: dict) -> dict:
    """kubeflow/trainer@v2.3.0:pkg/util/trainingruntime/trainingruntime.go MergeResourceRequirements: limits and
    requests per key."""
    out = copy.deepcopy(base)
    for part in ("limits", "requests"):
        if override.get(part):
            out[part] = {**out.get(part, {}), **override[part]}
    if override.get("claims"):
        out["claims"] = strategic_merge(out.get("claims", []), override["claims"], "volumes")
    return out


def ancestor_of(rjob: dict) -> str | None:
    return ((rjob["template"].get("metadata") or {}).get("labels") or {}).get(ANCESTOR_LABEL)


def named_containers(pod_spec: dict, name: str) -> list[dict]:
    return [c for c in pod_spec.get("containers", []) if c["name"] == name]


def gpus_per_node(resources: dict) -> int:
    """kubeflow/trainer@v2.3.0:pkg/runtime/runtime.go GetNumGPUPerNode: the first resource naming "gpu", requests
    before limits."""
    for part in ("requests", "limits"):
        for name, value in (resources.get(part) or {}).items():
            if "gpu" in name.lower() and quantity(value) > 0:
                return int(quantity(value))
    return 0


def _cpus(resources: dict) -> int:
    for part in ("requests", "limits"):
        if (value := (resources.get(part) or {}).get("cpu")) is not None and quantity(value) > 0:
            return int(quantity(value))
    return 0


def _pod_requests(pod_spec: dict) -> dict[str, Fraction]:
    """Requests of one pod: containers summed, init containers' largest when it is larger."""
    total: dict[str, Fraction] = {}
    for c in pod_spec.get("containers", []):
        for name, value in ((c.get("resources") or {}).get("requests") or {}).items():
            total[name] = total.get(name, Fraction(0)) + quantity(value)
    for c in pod_spec.get("initContainers", []):
        for name, value in ((c.get("resources") or {}).get("requests") or {}).items():
            total[name] = max(total.get(name, Fraction(0)), quantity(value))
    return total


def object_name(obj: dict) -> str:
    """metadata.name, or what the API server makes of metadata.generateName (the prefix and five random
    characters, k8s.io/apiserver names.SimpleNameGenerator): a manifest created with `kubectl create` often has only
    the prefix, and the names derived from it (the JobSet, the SSH Secret) only need its shape."""
    meta = obj.get("metadata") or {}
    if meta.get("name"):
        return str(meta["name"])
    if meta.get("generateName"):
        return f"{meta['generateName']}xxxxx"
    raise KeyError("metadata.name (nor metadata.generateName)")


def effective_jobset(train_job: dict, runtime: dict) -> dict:
    """What the v2.3.0 controller builds from `train_job` and `runtime`: {"jobset": spec, "podGroup": spec or
    None, "counts": {replicated job: pods}}. Follows kubeflow/trainer@v2.3.0:pkg/runtime/core/trainingruntime.go
    newRuntimeInfo, the torch / mpi / plainml / volcano plugins' EnforceMLPolicy and Build
    (pkg/runtime/framework/plugins/<plugin>/), and pkg/runtime/framework/plugins/jobset/builder.go; JobSet webhook
    defaults (kubernetes-sigs/jobset@v0.12.0:pkg/webhooks/jobset_webhook.go Default) are filled in. Names that
    change per run (JobSet labels, the SSH key) are left out."""
    name = object_name(train_job)
    tj = train_job.get("spec") or {}
    trainer = tj.get("trainer") or {}
    rt = runtime["spec"]
    template = rt.get("template") or {}
    spec = _copy(template.get("spec") or {})
    annotations = dict((template.get("metadata") or {}).get("annotations") or {})
    for patch in tj.get("runtimePatches") or []:
        tpl = (patch.get("trainingRuntimeSpec") or {}).get("template") or {}
        annotations.update((tpl.get("metadata") or {}).get("annotations") or {})
        if tpl.get("spec"):
            known = {r["name"] for r in spec.get("replicatedJobs", [])}
            for rp in tpl["spec"].get("replicatedJobs") or []:
                if rp["name"] not in known:
                    raise ValueError(
                        f"runtimePatches: replicated job {rp['name']!r} is not in runtime "
                        f"{runtime['metadata']['name']} ({', '.join(sorted(known))})"
                    )
            order = [r["name"] for r in spec["replicatedJobs"]]
            spec = strategic_merge(spec, tpl["spec"])
            spec["replicatedJobs"].sort(key=lambda r: order.index(r["name"]))
    ml = rt.get("mlPolicy")
    mpi = copy.deepcopy((ml or {}).get("mpi"))
    launcher_as_node = bool(mpi and mpi.get("runLauncherAsNode"))
    rjobs = spec.get("replicatedJobs", [])
    counts: dict[str, int] = {}
    for rjob in rjobs:
        ancestor = ancestor_of(rjob)
        count = rjob["template"]["spec"].get("parallelism", 1)
        if ancestor == TRAINER and ml is not None:
            count = ml.get("numNodes", 1)
        pod_spec = rjob["template"]["spec"]["template"]["spec"]
        if (
            trainer.get("resourcesPerNode")
            and ml is not None
            and (ancestor == TRAINER or (launcher_as_node and rjob["name"] == NODE))
        ):
            for c in named_containers(pod_spec, NODE)[:1]:
                c["resources"] = merge_resources(c.get("resources") or {}, trainer["resourcesPerNode"])
        counts[rjob["name"]] = max(count, 1)
    trainer_job = next((r for r in rjobs if ancestor_of(r) == TRAINER), None)
    trainer_spec = trainer_job["template"]["spec"]["template"]["spec"] if trainer_job else None
    trainer_node = next(iter(named_containers(trainer_spec, NODE)), None) if trainer_spec else None
    job_env = trainer.get("env") or []

    def runtime_resources() -> dict:
        # ExtractResourcePerNodeFromRuntime reads the merged template; a TrainJob's resourcesPerNode then wins whole.
        if trainer.get("resourcesPerNode"):
            return trainer["resourcesPerNode"]
        for r in rjobs:
            if r["name"] == NODE or ancestor_of(r) == TRAINER:
                for c in named_containers(r["template"]["spec"]["template"]["spec"], NODE):
                    if c.get("resources"):
                        return c["resources"]
        return {}

    if mpi is not None:
        if trainer.get("numNodes") is not None and NODE in counts:
            counts[NODE] = max(trainer["numNodes"] - 1, 1) if launcher_as_node else trainer["numNodes"]
        if trainer.get("numProcPerNode") is not None:
            mpi["numProcPerNode"] = trainer["numProcPerNode"]
        elif mpi.get("numProcPerNode", 1) == 1 and (gpus := gpus_per_node(runtime_resources())) > 1:
            mpi["numProcPerNode"] = gpus
        ssh = {
            "name": MPI_SSH_VOLUME,
            "secret": {
                "secretName": f"{name}-mpi-ssh-auth",
                "defaultMode": 0o400,
                "items": [
                    {"key": "ssh-privatekey", "path": "id_rsa", "mode": 0o640},
                    {"key": "ssh-publickey", "path": "id_rsa.pub", "mode": 0o644},
                    {"key": "ssh-publickey", "path": "authorized_keys", "mode": 0o644},
                ],
            },
        }
        hostfile = {
            "name": MPI_HOSTFILE_VOLUME,
            "configMap": {
                "name": f"{name}-mpi-hostfile",
                "items": [{"key": "hostfile", "path": "hostfile", "mode": 0o444}],
            },
        }
        for rjob in rjobs:
            if rjob["name"] not in (NODE, LAUNCHER):
                continue
            pod_spec = rjob["template"]["spec"]["template"]["spec"]
            pod_spec.setdefault("volumes", [])
            upsert(pod_spec["volumes"], [ssh] + ([hostfile] if rjob["name"] == LAUNCHER else []))
            for c in named_containers(pod_spec, NODE):
                upsert(
                    c.setdefault("volumeMounts", []),
                    [{"name": MPI_SSH_VOLUME, "mountPath": mpi.get("sshAuthMountPath", "/root/.ssh")}],
                    "mountPath",
                )
                if rjob["name"] == LAUNCHER:
                    upsert(c["volumeMounts"], [{"name": MPI_HOSTFILE_VOLUME, "mountPath": "/etc/mpi"}], "mountPath")
                    upsert(
                        c.setdefault("env", []),
                        [
                            {"name": "OMPI_MCA_orte_default_hostfile", "value": MPI_HOSTFILE},
                            {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
                            {"name": "OMPI_MCA_orte_set_default_slots", "value": str(mpi.get("numProcPerNode", 1))},
                            {"name": "OMPI_MCA_plm_rsh_args", "value": "-o ConnectionAttempts=10"},
                        ],
                    )
    elif ml is not None and "torch" in ml:
        if trainer_job is not None and trainer.get("numNodes") is not None:
            counts[trainer_job["name"]] = trainer["numNodes"]
        nproc: str = str(trainer["numProcPerNode"]) if trainer.get("numProcPerNode") is not None else "auto"
        res = runtime_resources()
        if nproc == "auto" and gpus_per_node(res) == 0:
            nproc = str(max(1, _cpus(res)))
        if trainer_job is not None and trainer_node is not None:  # the node container sits in the trainer job
            upsert(trainer_node.setdefault("env", []), job_env)
            upsert(
                trainer_node["env"],
                [
                    {"name": "PET_NNODES", "value": str(counts[trainer_job["name"]])},
                    {"name": "PET_NPROC_PER_NODE", "value": nproc},
                    {
                        "name": "PET_NODE_RANK",
                        "valueFrom": {
                            "fieldRef": {
                                "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
                            }
                        },
                    },
                ],
            )
            if trainer.get("command") != ["tune", "run"]:
                upsert(
                    trainer_node["env"],
                    [
                        {"name": "PET_MASTER_ADDR", "value": f"{name}-{NODE}-0-0.{name}"},
                        {"name": "PET_MASTER_PORT", "value": str(TRAINER_PORT)},
                    ],
                )
            upsert(trainer_node.setdefault("ports", []), [{"containerPort": TRAINER_PORT}], "containerPort")
    else:
        # Every other policy's trainer pod set counts numNodes, and a runtime without mlPolicy's too: plainml sets
        # it for any policy but torch, mpi and jax (flux and xgboost included), and jax's plugin sets it itself
        # (pkg/runtime/framework/plugins/plainml/plainml.go, jax/jax.go EnforceMLPolicy; the env jax and xgboost
        # add, JAX_* and DMLC_*, is no fabric wiring).
        if trainer_job is not None and trainer.get("numNodes") is not None:
            counts[trainer_job["name"]] = trainer["numNodes"]
    # jobset/builder.go Trainer: image, command, args on the trainer's `node`; env there and, with
    # runLauncherAsNode, on the `node` job's `node` container.
    for rjob in rjobs:
        pod_spec = rjob["template"]["spec"]["template"]["spec"]
        if ancestor_of(rjob) == TRAINER:
            for c in named_containers(pod_spec, NODE):
                for f in ("image", "command", "args"):
                    if trainer.get(f) is not None:
                        c[f] = copy.deepcopy(trainer[f])
        if ancestor_of(rjob) == TRAINER or (launcher_as_node and rjob["name"] == NODE):
            for c in named_containers(pod_spec, NODE):
                upsert(c.setdefault("env", []), job_env)
    volcano = (rt.get("podGroupPolicy") or {}).get("volcano")
    pod_group = None
    if volcano is not None:
        for rjob in rjobs:
            md = rjob["template"]["spec"]["template"].setdefault("metadata", {})
            md["annotations"] = {**(md.get("annotations") or {}), GROUP_ANNOTATION: name}
        total: dict[str, Fraction] = {}
        for rjob in rjobs:
            for resource, q in _pod_requests(rjob["template"]["spec"]["template"]["spec"]).items():
                total[resource] = total.get(resource, Fraction(0)) + q * counts[rjob["name"]]
        pod_group = {
            "minMember": sum(counts.values()),
            "minResources": {k: _format(v, k) for k, v in sorted(total.items())},
        }
        if QUEUE_ANNOTATION in annotations:
            pod_group["queue"] = annotations[QUEUE_ANNOTATION]
        for rjob in rjobs:
            if pc := rjob["template"]["spec"]["template"]["spec"].get("priorityClassName"):
                pod_group["priorityClassName"] = pc
        if volcano.get("networkTopology"):
            pod_group["networkTopology"] = copy.deepcopy(volcano["networkTopology"])
    for rjob in rjobs:
        job_spec = rjob["template"]["spec"]
        if ancestor_of(rjob) in (TRAINER, "dataset-initializer", "model-initializer"):
            rjob["replicas"] = 1
        job_spec["parallelism"] = job_spec["completions"] = counts[rjob["name"]]
        job_spec.setdefault("completionMode", "Indexed")
        job_spec["template"]["spec"].setdefault("restartPolicy", "OnFailure")
    spec.setdefault("successPolicy", {"operator": "All"})
    network = spec.setdefault("network", {})
    network.setdefault("enableDNSHostnames", True)
    network.setdefault("publishNotReadyAddresses", True)
    if tj.get("suspend") is not None:
        spec["suspend"] = tj["suspend"]
    return {"jobset": spec, "podGroup": pod_group, "counts": counts, "annotations": annotations}


def effective_pod(train_job: dict, runtime: dict, replicated_job: str | None = None) -> dict:
    """The pod template of the trainer's replicated job (or `replicated_job`) as the controller will create it."""
    derived = effective_jobset(train_job, runtime)
    for rjob in derived["jobset"]["replicatedJobs"]:
        if (rjob["name"] == replicated_job) if replicated_job else ancestor_of(rjob) == TRAINER:
            return rjob["template"]["spec"]["template"]
    raise ValueError(
        f"runtime {runtime['metadata']['name']} has no replicated job "
        f"{replicated_job or 'labelled ' + ANCESTOR_LABEL + ': trainer'}"
    )
