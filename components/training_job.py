"""TrainingJob: a researcher's job description in, a job on the fast path out.

resolve(spec, profile) derives everything fabric- and size-specific from the platform profile; pod_template()
wires one pod; pytorch_job(), mpi_job() and tf_job() wrap it for the Kubeflow Training Operator v1; contract()
is what reviewers see. All pure; TrainingJob only registers the result.

Sizing (what an experienced platform engineer expects, stated so it can be argued with):
- memory limit = 90% of the node's allocatable memory for the GPUs used (DaemonSets need the rest), and the
  request equals the limit so the scheduler counts it;
- /dev/shm = a memory-backed emptyDir of 16 GiB per GPU, at most a quarter of the memory limit. tmpfs pages are
  charged to the container, so shm always sits inside the limit, never beside it;
- CPUs = 90% of the node's share, requests = limits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pulumi

from components import fabric, k8s
from components.config import ConfigError, FabricConfig, JobSpec, job_problems
from components.profile import normalize

SHM_GIB_PER_GPU = 16
NODE_SHARE = 0.9
JOB_LABEL = "fastpath.dev/job"
ROLE_LABEL = "fastpath.dev/role"
COMPONENT = "training-job"
CONTAINER = {"pytorch": "pytorch", "mpi": "worker", "tensorflow": "tensorflow"}  # pytorch/tensorflow: required


@dataclass(frozen=True)
class Resolved:
    """A job with every default and derived value filled in from the profile."""

    spec: JobSpec
    profile: dict
    namespace: str
    gpus: int
    memory_gib: int
    shm_gib: int
    cpus: int
    queue: str | None
    priority_class: str | None
    scheduler: str | None
    wiring: fabric.PodWiring
    env: dict[str, str] = field(default_factory=dict)
    overridden: tuple[str, ...] = ()
    checkpoint_dir: str | None = None

    @property
    def replicas(self) -> int:
        return self.spec.max_nodes

    @property
    def min_available(self) -> int:
        # Fixed size: the whole gang or nothing. Elastic: the minimum size (it may grow later). MPI adds its
        # launcher pod to the gang.
        return self.spec.min_nodes + (1 if self.spec.framework == "mpi" else 0)


def _share(total: int, gpus: int, per_node: int) -> int:
    return max(1, math.floor(total * gpus / per_node * NODE_SHARE))


def sizing(spec: JobSpec, profile: dict) -> tuple[int, int, int, int]:
    """(gpus, memory GiB, shm GiB, cpus) of each pod."""
    per_node = profile["gpu"]["perNode"]
    gpus = spec.gpus_per_node or per_node
    memory = spec.memory_gib or _share(profile["nodes"]["memoryGiB"], gpus, per_node)
    shm = spec.shm_gib or max(1, min(SHM_GIB_PER_GPU * gpus, memory // 4))
    cpus = spec.cpus or _share(profile["nodes"]["cpus"], gpus, per_node)
    return gpus, memory, shm, cpus


def sizing_problems(spec: JobSpec, profile: dict) -> list[tuple[str, str]]:
    _, memory, shm, _ = sizing(spec, profile)
    if shm >= memory:
        key = "shmGiB" if spec.shm_gib else "memoryGiB"
        return [(key, f"/dev/shm of {shm} GiB does not fit in the {memory} GiB memory limit (tmpfs pages count "
                      "against it: the pod would be OOM-killed): lower shmGiB or raise memoryGiB")]
    return []


def problems(spec: JobSpec, profile: dict) -> list[tuple[str, str]]:
    """(key, message) for everything wrong with `spec` on this cluster; sizing is judged once the rest is sound."""
    return job_problems(spec, profile) or sizing_problems(spec, profile)


def resolve(spec: JobSpec, profile: dict, source: str = "TrainingJob") -> Resolved:
    """Check `spec` against the cluster and fill in everything. Raises ConfigError naming each bad key."""
    profile = normalize(profile)
    found = problems(spec, profile)
    if found:
        raise ConfigError(source, [f"{spec.name}.{k}: {m}" for k, m in found])
    gpus, memory, shm, cpus = sizing(spec, profile)
    namespace = spec.namespace or profile["namespaces"][0]
    sched = profile["scheduler"]
    wiring = fabric.pod_wiring(FabricConfig.model_validate(profile["fabric"]), namespace, gpus,
                               profile["gpu"]["perNode"], debug=spec.debug_nccl)
    env = dict(wiring.env)
    env.update(spec.env_overrides)
    env.update(spec.env)
    checkpoint_dir = None
    if profile.get("checkpoints"):
        checkpoint_dir = f"{profile['checkpoints']['mountRoot']}/{spec.name}"
        env["CHECKPOINT_DIR"] = checkpoint_dir
    return Resolved(
        spec=spec, profile=profile, namespace=namespace, gpus=gpus, memory_gib=memory, shm_gib=shm, cpus=cpus,
        queue=(spec.queue or sched["defaultQueue"]) if sched["name"] else None,
        priority_class=(spec.priority_class or sched["defaultPriorityClass"]) if sched["name"] else None,
        scheduler=sched["name"], wiring=wiring, env=env, overridden=tuple(spec.env_overrides),
        checkpoint_dir=checkpoint_dir,
    )


# ------------------------------------------------------------------------------------------- pods


def env_list(r: Resolved) -> list[dict]:
    out: list[dict] = [{"name": k, "value": v} for k, v in r.env.items()]
    out += [{"name": k, "valueFrom": {"secretKeyRef": {"name": s.secret, "key": s.key}}}
            for k, s in r.spec.secret_env.items()]
    return out


def _labels(r: Resolved, role: str) -> dict[str, str]:
    return {**k8s.labels(r.profile["cluster"], COMPONENT), JOB_LABEL: r.spec.name, ROLE_LABEL: role}


def pod_template(r: Resolved, command: list[str], role: str = "worker") -> dict:
    """A GPU pod of this job: fabric wiring, GPU placement, shm, checkpoints, datasets, gang scheduler."""
    spec, prof = r.spec, r.profile
    limits: dict = {"nvidia.com/gpu": r.gpus, "memory": f"{r.memory_gib}Gi", "cpu": r.cpus}
    limits.update(r.wiring.resources)
    container: dict = {
        "name": CONTAINER[spec.framework],
        "image": spec.image,
        "command": command,
        "env": env_list(r),
        "resources": {"limits": limits, "requests": dict(limits)},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    if r.wiring.capabilities:
        # RDMA registers (pins) memory for the NIC: IPC_LOCK lifts the memlock limit for it.
        container["securityContext"] = {"capabilities": {"add": list(r.wiring.capabilities)}}
    volumes: list[dict] = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{r.shm_gib}Gi"}}]
    if r.checkpoint_dir:
        container["volumeMounts"].append({"name": "checkpoints", "mountPath": r.checkpoint_dir,
                                          "subPath": spec.name})
        volumes.append({"name": "checkpoints",
                        "persistentVolumeClaim": {"claimName": prof["checkpoints"]["claim"]}})
    for i, d in enumerate(spec.datasets):
        container["volumeMounts"].append({"name": f"dataset-{i}", "mountPath": d.mount_path, "readOnly": True})
        volumes.append({"name": f"dataset-{i}", "persistentVolumeClaim": {"claimName": d.claim, "readOnly": True}})
    job_selector = {"matchLabels": {JOB_LABEL: spec.name, ROLE_LABEL: "worker"}}
    pod: dict = {
        "containers": [container],
        "volumes": volumes,
        "nodeSelector": {"nvidia.com/gpu.product": prof["gpu"]["product"]},
        "tolerations": [{"key": prof["gpu"]["taintKey"], "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            # One pod per node: each pod owns its node's GPUs and rails.
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": job_selector, "topologyKey": "kubernetes.io/hostname"}]},
            # Packed toward one topology domain (zone, rack or leaf): fewer switch hops between ranks.
            "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": {"labelSelector": job_selector,
                                                    "topologyKey": prof["nodes"]["topologyKey"]}}]},
        },
    }
    if r.scheduler:
        pod["schedulerName"] = r.scheduler
        pod["priorityClassName"] = r.priority_class
    if r.spec.preflight and prof.get("preflight") and r.wiring.capabilities:
        pod["initContainers"] = [preflight_container(r, limits)]
        volumes.append({"name": "preflight", "configMap": {"name": prof["preflight"]["configMap"]}})
    metadata: dict = {"labels": _labels(r, role)}
    if r.wiring.annotations:
        metadata["annotations"] = dict(r.wiring.annotations)
    return {"metadata": metadata, "spec": pod}


def preflight_container(r: Resolved, limits: dict) -> dict:
    """Checks the pod is on the fast path before the job starts. It requests the same GPUs and rail devices (the
    kubelet hands an init container's devices on to the app container) and little memory."""
    fab = FabricConfig.model_validate(r.profile["fabric"])
    rdma_devices = sum(r.wiring.resources.values())
    hcas = " ".join(fabric.visible_hcas(fab, list(r.wiring.rails)))
    env = {"PREFLIGHT_GPUS": str(r.gpus), "PREFLIGHT_RDMA_DEVICES": str(rdma_devices), "PREFLIGHT_HCAS": hcas,
           "PREFLIGHT_INTERFACES": " ".join(r.wiring.interfaces), "PREFLIGHT_SHM_BYTES": str(r.shm_gib * 2**30)}
    small = {**limits, "memory": "256Mi", "cpu": 1}
    return {
        "name": "preflight",
        "image": r.spec.image,
        "command": ["sh", f"/fastpath/{r.profile['preflight']['key']}"],
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "resources": {"limits": small, "requests": dict(small)},
        "securityContext": {"capabilities": {"add": list(r.wiring.capabilities)}},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"},
                         {"name": "preflight", "mountPath": "/fastpath", "readOnly": True}],
    }


def run_policy(r: Resolved) -> dict:
    policy: dict = {"backoffLimit": r.spec.backoff_limit, "ttlSecondsAfterFinished": r.spec.ttl_seconds_after_finished}
    if r.scheduler:
        policy["schedulingPolicy"] = {"minAvailable": r.min_available, "queue": r.queue,
                                      "priorityClass": r.priority_class}
    return policy


def torchrun_command(command: list[str]) -> list[str]:
    """torchrun reads its sizes and rendezvous from the PET_* variables the operator sets; the user's command
    keeps the form it has on a laptop."""
    if command[0] in ("python", "python3"):
        return ["torchrun", *command[1:]]
    return ["torchrun", "--no-python", *command]


def _meta(r: Resolved) -> dict:
    return k8s.meta(r.spec.name, r.profile["cluster"], COMPONENT, namespace=r.namespace,
                    extra_labels={JOB_LABEL: r.spec.name})


def pytorch_job(r: Resolved) -> dict:
    spec = r.spec
    template = pod_template(r, torchrun_command(spec.command))
    replicas: dict = {}
    body: dict = {"nprocPerNode": str(r.gpus), "runPolicy": run_policy(r)}
    if spec.elastic is None:
        # A Master replica is what makes the operator set MASTER_ADDR, WORLD_SIZE and RANK.
        replicas["Master"] = {"replicas": 1, "restartPolicy": "OnFailure", "template": template}
        if spec.nodes > 1:
            replicas["Worker"] = {"replicas": spec.nodes - 1, "restartPolicy": "OnFailure", "template": template}
    else:
        # Worker-only with c10d rendezvous at <job>-worker-0: the operator sets PET_RDZV_* and PET_NNODES=min:max.
        replicas["Worker"] = {"replicas": spec.elastic.max_nodes, "restartPolicy": "OnFailure", "template": template}
        body["elasticPolicy"] = {"minReplicas": spec.elastic.min_nodes, "maxReplicas": spec.elastic.max_nodes,
                                 "maxRestarts": spec.elastic.max_restarts, "rdzvBackend": "c10d",
                                 "rdzvId": spec.name}
    body["pytorchReplicaSpecs"] = replicas
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": _meta(r), "spec": body}


def mpirun_command(r: Resolved) -> list[str]:
    """mpirun over every GPU of the job, forwarding (-x) every variable the pods get, with Open MPI's own TCP
    traffic on the pod's primary interface (it would otherwise try rail subnets that do not route)."""
    iface = FabricConfig.model_validate(r.profile["fabric"]).pod_interface
    cmd = ["mpirun", "--allow-run-as-root", "-np", str(r.replicas * r.gpus), "-bind-to", "none", "-map-by", "slot",
           "-mca", "btl_tcp_if_include", iface, "-mca", "oob_tcp_if_include", iface]
    for name in [*r.env, *r.spec.secret_env, "PATH", "LD_LIBRARY_PATH"]:
        cmd += ["-x", name]
    return [*cmd, *r.spec.command]


def mpi_job(r: Resolved) -> dict:
    worker = pod_template(r, ["sleep", "365d"])  # the v1 launcher execs into workers (kubexec), they only wait
    launcher_container = {
        "name": "launcher",
        "image": r.spec.image,
        "command": mpirun_command(r),
        "env": env_list(r),
        "resources": {"limits": {"cpu": 2, "memory": "4Gi"}, "requests": {"cpu": 2, "memory": "4Gi"}},
    }
    launcher_spec: dict = {"containers": [launcher_container]}
    if r.scheduler:
        launcher_spec["schedulerName"] = r.scheduler
        launcher_spec["priorityClassName"] = r.priority_class
    launcher = {"metadata": {"labels": _labels(r, "launcher")}, "spec": launcher_spec}
    return {
        "apiVersion": "kubeflow.org/v1", "kind": "MPIJob", "metadata": _meta(r),
        "spec": {
            "slotsPerWorker": r.gpus,
            "runPolicy": run_policy(r),
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "restartPolicy": "OnFailure", "template": launcher},
                "Worker": {"replicas": r.replicas, "restartPolicy": "OnFailure", "template": worker},
            },
        },
    }


def tf_job(r: Resolved) -> dict:
    template = pod_template(r, list(r.spec.command))
    replicas: dict = {"Chief": {"replicas": 1, "restartPolicy": "OnFailure", "template": template}}
    if r.replicas > 1:
        replicas["Worker"] = {"replicas": r.replicas - 1, "restartPolicy": "OnFailure", "template": template}
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": _meta(r),
            "spec": {"runPolicy": run_policy(r), "tfReplicaSpecs": replicas}}


BUILDERS = {"pytorch": pytorch_job, "mpi": mpi_job, "tensorflow": tf_job}


def manifest(r: Resolved) -> dict:
    return BUILDERS[r.spec.framework](r)


def contract(r: Resolved) -> dict:
    """The effective contract of a job, for review: a change of fabric shows up as a diff of this."""
    fab = r.profile["fabric"]
    size = (f"{r.spec.nodes}" if r.spec.nodes is not None
            else f"{r.spec.elastic.min_nodes}-{r.spec.elastic.max_nodes} (elastic)")
    return {
        "job": r.spec.name,
        "namespace": r.namespace,
        "kind": manifest(r)["kind"],
        "replicas": f"{size} x {r.gpus} GPUs",
        "fabric": fab["kind"] + (f"/{fab['attachment']}" if fab.get("attachment") else ""),
        "transport": r.wiring.transport,
        "networks": [rail.network for rail in r.wiring.rails],
        "rdmaResources": dict(r.wiring.resources),
        "capabilities": list(r.wiring.capabilities),
        "shm": f"{r.shm_gib}Gi of {r.memory_gib}Gi memory limit",
        "env": dict(r.env),
        "envOverrides": list(r.overridden),
        "secretEnv": sorted(r.spec.secret_env),
        "queue": r.queue,
        "priorityClass": r.priority_class,
        "minAvailable": r.min_available if r.scheduler else None,
        "checkpointDir": r.checkpoint_dir,
    }


@dataclass
class TrainingJobArgs:
    spec: JobSpec
    profile: dict  # Platform.profile, or components.profile.from_stack("org/fastpath/prod-ib")


class TrainingJob(pulumi.ComponentResource):
    """A distributed training job wired for the cluster the profile describes: a PyTorchJob (torchrun), MPIJob
    (mpirun) or TFJob with the fabric's networks, RDMA resources, IPC_LOCK, NCCL env, /dev/shm, gang scheduling,
    GPU placement and the checkpoint claim.

    Needs: a fastpath platform (its profile) with the Training Operator; Volcano for queues.
    Output: `contract`, the job's effective wiring.

    Example:
        TrainingJob("llama-ft", TrainingJobArgs(
            spec=JobSpec(name="llama-ft", image="nvcr.io/nvidia/pytorch:25.10-py3",
                         command=["python", "train.py"], nodes=4),
            profile=platform.profile), opts=pulumi.ResourceOptions(depends_on=[platform]))
    """

    def __init__(self, name: str, args: TrainingJobArgs, opts: pulumi.ResourceOptions | None = None):
        resolved = resolve(args.spec, args.profile, f"TrainingJob {name}")  # refuse before registering anything
        super().__init__("fastpath:jobs:TrainingJob", name, None, opts)
        self.manifest = manifest(resolved)
        self.contract = contract(resolved)
        # Passed on, or the job could be created before the Training Operator's CRD or the Volcano queue exists.
        depends_on = k8s.inherited_depends_on(opts)
        self.job = k8s.apply(self.manifest, pulumi.ResourceOptions(parent=self, depends_on=depends_on))
        self.register_outputs({"contract": self.contract})
