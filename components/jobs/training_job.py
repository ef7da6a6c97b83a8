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

Faults and cleanup (kubeflow/trainer@v1.9.4 behaviour, named in tests/test_job_faults.py):
- Every job ends with `cleanPodPolicy: Running`: the operator's default is None, which deletes nothing, and MPI
  workers run `sleep 365d`; Running deletes the Running and Pending pods (the GPU holders) and keeps finished
  pods' logs.
- No container restarts in place: the operator's budget (PastBackoffLimit) sums restarts over all pods, and a
  failing init container under OnFailure retries forever while the gang holds every node.
- PyTorch workers run under ExitCode: a pod that is deleted, evicted or drained (SIGTERM, answered with 143) is
  recreated, and a Terminating pod does not fail the job (under Never it would: pkg/core/status.go counts it
  Failed). The preflight is the first step of the main container, so its failure (exit 3) is the exit code the
  operator reads and fails the job on. Recovery is torchrun's: c10d rendezvous (also for fixed sizes, N:N) on a
  store that is not a training pod (`<job>-rdzv`, CPU only, outside the gang): a crashed process or a lost node
  restarts the worker group (`--max-restarts`), survivors re-rendezvous with the replacement and resume from
  the checkpoint. A gang that cannot re-form within the join timeout fails (exit 1) and gives its nodes back.
- MPI: workers under Never (the operator never recreates one; a lost worker fails the job and frees the
  gang); the launcher, under Never too, waits for its workers and relaunches mpirun itself after a failure.
- TensorFlow: Never; its workers cannot take a replacement into a running cluster.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import pulumi

from components import k8s
from components.fabric import nccl
from components.fabric import wiring as fabric
from components.jobs import trainer_v2_runtime
from components.jobs.trainer_v2_runtime import NodeShape
from components.model.config import ConfigError, JobApi, JobSpec, tcp_on_rdma
from components.model.profile import PreflightProfile, Profile, runtime_name

SHM_GIB_PER_GPU = 16
DEFAULT_MAX_RESTARTS = 3
RDZV_PORT = 29400
# How long survivors wait for a replacement pod before the job fails and frees its nodes: the kubelet's
# not-ready eviction (300 s by default), Volcano placing the new pod and an image already on the node.
RDZV_JOIN_TIMEOUT = 900
RDZV_READ_TIMEOUT = 600
CLEAN_POD_POLICY = "Running"
RDZV_NO_SHARED_STORE = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
FILES_MOUNT = "/workspace/files"
FILES_LIMIT = 1024 * 1024 - 16 * 1024  # a ConfigMap's 1 MiB, less room for its metadata
NODE_SHARE = 0.9
JOB_LABEL = "fastpath.dev/job"
ROLE_LABEL = "fastpath.dev/role"
COMPONENT = "training-job"
CONTAINER = {"pytorch": "pytorch", "mpi": "worker", "tensorflow": "tensorflow"}  # pytorch/tensorflow: required


@dataclass(frozen=True)
class Resolved:
    """A job with every default and derived value filled in from the profile."""

    spec: JobSpec
    profile: Profile
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
    api: JobApi = "v1"

    @property
    def replicas(self) -> int:
        return self.spec.max_nodes

    @property
    def checkpoint_claim(self) -> str:
        assert self.profile.checkpoints is not None, "checkpoint_dir is set only with a checkpoint claim"
        return self.profile.checkpoints.claim

    @property
    def preflight(self) -> PreflightProfile:
        assert self.profile.preflight is not None, "has_preflight() is checked first"
        return self.profile.preflight

    @property
    def min_available(self) -> int:
        # Fixed size: the whole gang or nothing. Elastic: the minimum size (it may grow later); any minNodes
        # workers can start, since the rendezvous store is not one of them. MPI adds its launcher pod to the gang.
        return self.spec.min_nodes + (1 if self.spec.framework == "mpi" else 0)

    @property
    def max_restarts(self) -> int:
        return DEFAULT_MAX_RESTARTS if self.spec.max_restarts is None else self.spec.max_restarts


def _share(total: int, gpus: int, per_node: int) -> int:
    return max(1, math.floor(total * gpus / per_node * NODE_SHARE))


def _cores(cpus: int) -> int:
    """Whole cores (an even count of hyperthreads): a kubelet with the static CPU manager's full-pcpus-only
    policy refuses a Guaranteed pod asking for an odd count (SMTAlignmentError), which would fail the job."""
    return cpus if cpus < 2 else cpus - cpus % 2


def sizing(spec: JobSpec, profile: Profile) -> tuple[int, int, int, int]:
    """(gpus, memory GiB, shm GiB, cpus) of each pod."""
    per_node = profile.gpu.per_node
    gpus = spec.gpus_per_node or per_node
    memory = spec.memory_gib or _share(profile.nodes.memory_gib, gpus, per_node)
    shm = spec.shm_gib or max(1, min(SHM_GIB_PER_GPU * gpus, memory // 4))
    cpus = spec.cpus or _cores(_share(profile.nodes.cpus, gpus, per_node))
    return gpus, memory, shm, cpus


def sizing_problems(spec: JobSpec, profile: Profile) -> list[tuple[str, str]]:
    _, memory, shm, _ = sizing(spec, profile)
    if shm >= memory:
        key = "shmGiB" if spec.shm_gib else "memoryGiB"
        return [
            (
                key,
                f"/dev/shm of {shm} GiB does not fit in the {memory} GiB memory limit (tmpfs pages count "
                "against it: the pod would be OOM-killed): lower shmGiB or raise memoryGiB",
            )
        ]
    return []


# Launchers fastpath runs itself: a command that starts one would run a launcher inside a launcher.
LAUNCHERS = {
    "torchrun": "torchrun",
    "torch.distributed.run": "torchrun",
    "torch.distributed.launch": "torchrun",
    "deepspeed": "deepspeed",
    "accelerate": "accelerate launch",
    "mpirun": "mpirun",
    "mpiexec": "mpirun",
    "horovodrun": "horovodrun",
    "srun": "srun",
}
PYTHON = re.compile(r"^(.*/)?python(3(\.\d+)?)?$")


def launcher_in(command: list[str]) -> str | None:
    """The distributed launcher `command` starts, if any (`torchrun ...`, `python -m torch.distributed.run ...`,
    `deepspeed ...`, `accelerate launch ...`, `mpirun ...`)."""
    exe = command[0].rsplit("/", 1)[-1]
    if exe in LAUNCHERS:
        return LAUNCHERS[exe]
    if PYTHON.match(command[0]) and "-m" in command[:-1]:
        module = command[command.index("-m") + 1]
        return LAUNCHERS.get(module) or ("accelerate launch" if module.startswith("accelerate") else None)
    return None


def command_problems(spec: JobSpec) -> list[tuple[str, str]]:
    found = launcher_in(spec.command)
    if found is None:
        return []
    runs = {
        "pytorch": "torchrun (nodes, processes per node and rendezvous come from the job)",
        "mpi": "mpirun over every GPU",
        "tensorflow": "one process per pod",
    }[spec.framework]
    return [
        (
            "command",
            f"starts {found}, but fastpath launches the command itself with {runs}: a launcher "
            f"inside it would start the wrong number of processes; give what one process runs, "
            f"e.g. [python, train.py, ...]",
        )
    ]


def cluster_problems(job: JobSpec, profile: Profile) -> list[tuple[str, str]]:
    """(key, message) for everything wrong with `job` on the cluster `profile` describes."""
    out: list[tuple[str, str]] = []
    gpu, nodes, sched = profile.gpu, profile.nodes, profile.scheduler
    if job.namespace is not None and job.namespace not in profile.namespaces:
        out.append(
            (
                "namespace",
                f"{job.namespace!r} is not a training namespace of this cluster ({', '.join(profile.namespaces)})",
            )
        )
    if job.gpus_per_node is not None and job.gpus_per_node > gpu.per_node:
        out.append(
            (
                "gpusPerNode",
                f"{job.gpus_per_node} is more than the {gpu.per_node} GPUs a node of this "
                f"cluster has (fastpath:platform.gpu.perNode)",
            )
        )
    if job.max_nodes > nodes.count:
        key = "nodes" if job.nodes is not None else "elastic.maxNodes"
        out.append((key, f"{job.max_nodes} nodes asked, the cluster has {nodes.count} (fastpath:platform.nodes.count)"))
    queues = [q.name for q in sched.queues]
    if job.queue is not None and sched.name is None:
        out.append(
            (
                "queue",
                f"queue {job.queue!r} asked but Volcano is disabled "
                "(fastpath:platform.components.volcano): enable it or remove queue",
            )
        )
    elif job.queue is not None and job.queue not in queues:
        out.append(("queue", f"{job.queue!r} is not a queue of this cluster ({', '.join(queues)})"))
    if job.priority_class is not None and job.priority_class not in sched.priority_classes:
        out.append(("priorityClass", f"{job.priority_class!r} is not one of {', '.join(sched.priority_classes)}"))
    if job.memory_gib is not None and job.memory_gib > nodes.memory_gib:
        out.append(
            (
                "memoryGiB",
                f"{job.memory_gib} GiB is more than a node's {nodes.memory_gib} GiB "
                "(fastpath:platform.nodes.memoryGiB)",
            )
        )
    if job.cpus is not None and job.cpus > nodes.cpus:
        out.append(("cpus", f"{job.cpus} is more than a node's {nodes.cpus} CPUs"))
    return out


def api_of(spec: JobSpec, profile: Profile) -> JobApi:
    """The job API `spec` runs on: its own choice on a cluster serving both, else the cluster's first."""
    return spec.api if spec.api in profile.job_apis else profile.job_apis[0]


def api_problems(spec: JobSpec, profile: Profile) -> list[tuple[str, str]]:
    """What a job may not ask of the job API it runs on."""
    apis = profile.job_apis
    if spec.api is not None and len(apis) == 1:
        return [
            (
                "api",
                f"this cluster serves only {apis[0]} (fastpath:platform.jobApi); a job chooses its API only "
                "on a cluster with jobApi 'both': remove api",
            )
        ]
    if api_of(spec, profile) != "v2":
        return []
    out: list[tuple[str, str]] = []
    fixed = profile.trainer
    assert fixed is not None, "a cluster serving v2 has a trainer profile"
    why_v1 = " (or api v1 on a jobApi 'both' cluster)" if "v1" in apis else ""
    if spec.framework == "tensorflow":
        out.append(
            (
                "framework",
                "Trainer v2 has no TensorFlow runtime (kubeflow/trainer@v2.3.0 runs torch, MPI, "
                "JAX, MLX and XGBoost; TFJob is v1 only): use framework pytorch or mpi" + why_v1,
            )
        )
    if spec.elastic is not None:
        out.append(
            (
                "elastic",
                "Trainer v2.3.0 has no elastic PyTorch (the torch plugin sets a static rendezvous; "
                "numNodes is one number): set nodes" + why_v1,
            )
        )
    if spec.gpus_per_node is not None and spec.gpus_per_node < profile.gpu.per_node:
        out.append(
            (
                "gpusPerNode",
                f"v2 runtimes are whole nodes: their preflight checks all {profile.gpu.per_node} "
                "GPUs and their /dev/shm is sized for them, and a TrainJob can change neither; "
                "remove gpusPerNode" + why_v1,
            )
        )
    if spec.shm_gib is not None:
        out.append(
            (
                "shmGiB",
                "on v2 /dev/shm is the runtime's (a TrainJob that replaced the volume would lose its "
                "memory medium): remove shmGiB",
            )
        )
    if spec.max_restarts is not None:
        out.append(
            (
                "maxRestarts",
                "a v2 run's restarts are its runtime's JobSet failure policy, which a TrainJob "
                "cannot change: remove maxRestarts (fastpath:platform.trainer.maxRestarts sets "
                "it for every run)",
            )
        )
    if "ttl_seconds_after_finished" in spec.model_fields_set:
        out.append(
            (
                "ttlSecondsAfterFinished",
                "a v2 run's cleanup is its runtime's, which a TrainJob cannot change: "
                "remove it (fastpath:platform.trainer.ttlSecondsAfterFinished)",
            )
        )
    if not spec.preflight:
        out.append(
            (
                "preflight",
                "the v2 runtime's preflight is an init container a TrainJob cannot remove: remove preflight: false",
            )
        )
    if spec.framework == "mpi":
        if fixed.mpi_image is None:
            out.append(
                (
                    "framework",
                    "this cluster publishes no MPI runtime (fastpath:platform.trainer.mpiImage is "
                    "not set)" + (": use api v1" if "v1" in apis else ""),
                )
            )
        elif spec.image != fixed.mpi_image:
            out.append(
                (
                    "image",
                    f"the MPI runtime's node pods run {fixed.mpi_image} (fastpath:platform.trainer."
                    "mpiImage) and a TrainJob's image replaces only the launcher's, so ranks would "
                    f"run in two images: set image to {fixed.mpi_image}" + why_v1,
                )
            )
        if spec.nodes == 1:
            out.append(
                (
                    "nodes",
                    "an MPI run of one node still gets a second GPU pod on v2 (the launcher is a rank "
                    "host and the MPI plugin makes at least one node pod): use framework pytorch, or "
                    "nodes 2 or more",
                )
            )
    if spec.memory_gib is not None:
        _, _, shm, _ = sizing(spec.model_copy(update={"memory_gib": None}), profile)
        if spec.memory_gib <= shm:
            out.append(
                (
                    "memoryGiB",
                    f"{spec.memory_gib} GiB is not above the runtime's /dev/shm of {shm} GiB (tmpfs "
                    "pages count against the memory limit: OOM kill); raise memoryGiB or remove it",
                )
            )
    return out


def problems(spec: JobSpec, profile: Profile) -> list[tuple[str, str]]:
    """(key, message) for everything wrong with `spec` on this cluster; sizing is judged once the rest is sound."""
    found = cluster_problems(spec, profile) + command_problems(spec) + api_problems(spec, profile)
    fab = profile.fabric
    for name, value in spec.env_overrides.items():
        if (p := tcp_on_rdma(fab, name, value)) is not None:
            found.append(("envOverrides", p))
    if (ifname := spec.env_overrides.get("NCCL_SOCKET_IFNAME")) is not None:
        if (p := nccl.socket_ifname_problem(ifname, fab.pod_interfaces)) is not None:
            found.append(("envOverrides", p))
    if spec.max_restarts is not None and spec.framework == "tensorflow" and api_of(spec, profile) == "v1":
        found.append(
            (
                "maxRestarts",
                "tensorflow workers cannot re-form a cluster after a fault: the job fails and "
                "frees its nodes, and a new job resumes from the checkpoint; remove maxRestarts",
            )
        )
    per_node = profile.gpu.per_node
    if (p := fabric.partial_node_problem(fab, spec.gpus_per_node or per_node, per_node)) is not None:
        found.append(("gpusPerNode", p))
    for name, local in spec.files.items():
        if not (Path.cwd() / local).is_file():
            found.append((f"files.{name}", f"{local} is not a file under the Pulumi project ({Path.cwd()})"))
    if all((Path.cwd() / local).is_file() for local in spec.files.values()):
        size = sum((Path.cwd() / local).stat().st_size for local in spec.files.values())
        if size > FILES_LIMIT:
            found.append(
                (
                    "files",
                    f"{size} bytes in all; a ConfigMap holds at most 1 MiB: put large files in the "
                    "image or a dataset claim",
                )
            )
    return found or sizing_problems(spec, profile)


def resolve(spec: JobSpec, profile: Profile, source: str = "TrainingJob") -> Resolved:
    """Check `spec` against the cluster and fill in everything. Raises ConfigError naming each bad key."""
    found = problems(spec, profile)
    if found:
        raise ConfigError(source, [f"{spec.name}.{k}: {m}" for k, m in found])
    gpus, memory, shm, cpus = sizing(spec, profile)
    namespace = spec.namespace or profile.namespaces[0]
    sched = profile.scheduler
    wiring = fabric.pod_wiring(profile.fabric, namespace, gpus, profile.gpu.per_node, debug=spec.debug_nccl)
    api = api_of(spec, profile)
    env = dict(wiring.env)
    env.update(spec.env_overrides)
    env.update(spec.env)
    checkpoint_dir = None
    if api == "v2":
        # The runtime holds the fabric, the checkpoint mount (a directory per TrainJob) and the rendezvous.
        checkpoint_dir = profile.checkpoints.mount_root if profile.checkpoints else None
    else:
        if spec.framework == "pytorch":
            # torch >= 2.4 lets the rank-0 agent's store double as the workers' store; a replacement agent then
            # never rejoins (it waits for a MASTER_ADDR nobody re-publishes: pytorch/pytorch#135712). Each group
            # gets its own store instead, so a lost node's replacement can rejoin (tests/test_restart.py shows both).
            env[RDZV_NO_SHARED_STORE] = "1"
        if profile.checkpoints:
            checkpoint_dir = f"{profile.checkpoints.mount_root}/{spec.name}"
            env["CHECKPOINT_DIR"] = checkpoint_dir
    return Resolved(
        spec=spec,
        profile=profile,
        namespace=namespace,
        gpus=gpus,
        memory_gib=memory,
        shm_gib=shm,
        cpus=cpus,
        queue=(spec.queue or sched.default_queue) if sched.name else None,
        priority_class=(spec.priority_class or sched.default_priority_class) if sched.name else None,
        scheduler=sched.name,
        wiring=wiring,
        env=env,
        overridden=tuple(spec.env_overrides),
        checkpoint_dir=checkpoint_dir,
        api=api,
    )


# ------------------------------------------------------------------------------------------- pods


def env_list(r: Resolved) -> list[dict]:
    out: list[dict] = [{"name": k, "value": v} for k, v in r.env.items()]
    out += [
        {"name": k, "valueFrom": {"secretKeyRef": {"name": s.secret, "key": s.key}}}
        for k, s in r.spec.secret_env.items()
    ]
    return out


def _labels(r: Resolved, role: str) -> dict[str, str]:
    return {**k8s.labels(r.profile.cluster, COMPONENT), JOB_LABEL: r.spec.name, ROLE_LABEL: role}


def pod_template(r: Resolved, command: list[str], role: str = "worker", preflight_in_main: bool = False) -> dict:
    """A GPU pod of this job: fabric wiring, GPU placement, shm, checkpoints, datasets, gang scheduler, and the
    preflight: an init container, or with `preflight_in_main` the first step of the main container (for
    ExitCode replicas, whose operator reads only the main container's exit code)."""
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
        container["volumeMounts"].append({"name": "checkpoints", "mountPath": r.checkpoint_dir, "subPath": spec.name})
        volumes.append({"name": "checkpoints", "persistentVolumeClaim": {"claimName": r.checkpoint_claim}})
    if spec.files:
        container["volumeMounts"].append({"name": "files", "mountPath": FILES_MOUNT, "readOnly": True})
        volumes.append({"name": "files", "configMap": {"name": files_configmap_name(spec)}})
    for i, d in enumerate(spec.datasets):
        container["volumeMounts"].append({"name": f"dataset-{i}", "mountPath": d.mount_path, "readOnly": True})
        volumes.append({"name": f"dataset-{i}", "persistentVolumeClaim": {"claimName": d.claim, "readOnly": True}})
    job_selector = {"matchLabels": {JOB_LABEL: spec.name, ROLE_LABEL: "worker"}}
    pod: dict = {
        "containers": [container],
        "volumes": volumes,
        "nodeSelector": {k8s.GPU_PRODUCT_LABEL: prof.gpu.product},
        "tolerations": [k8s.toleration(prof.gpu.taint_key)],
        "affinity": {
            # One pod per node: each pod owns its node's GPUs and rails.
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": job_selector, "topologyKey": "kubernetes.io/hostname"}
                ]
            },
            # Packed toward one topology domain (zone, rack or leaf): fewer switch hops between ranks.
            "podAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {"labelSelector": job_selector, "topologyKey": prof.nodes.topology_key},
                    }
                ]
            },
        },
    }
    if r.scheduler:
        pod["schedulerName"] = r.scheduler
        pod["priorityClassName"] = r.priority_class
    if r.wiring.host_network:
        host_network(pod)
    if has_preflight(r):
        volumes.append({"name": "preflight", "configMap": {"name": r.preflight.config_map}})
        if preflight_in_main:
            container["env"] += [
                {"name": "FASTPATH_PREFLIGHT", "value": preflight_script(r)},
                *({"name": k, "value": v} for k, v in preflight_env(r).items()),
            ]
            container["volumeMounts"].append({"name": "preflight", "mountPath": "/fastpath", "readOnly": True})
            container["terminationMessagePolicy"] = "FallbackToLogsOnError"
        else:
            pod["initContainers"] = [preflight_container(r, limits)]
    metadata: dict = {"labels": _labels(r, role)}
    notes = {**r.wiring.annotations, **primary_interface_annotation(r)}
    if notes:
        metadata["annotations"] = notes
    return {"metadata": metadata, "spec": pod}


def host_network(pod: dict) -> None:
    """A pod spec on the node's network (components/fabric/wiring.py HOST_NETWORK_POD says why the DNS policy)."""
    pod.update(fabric.HOST_NETWORK_POD)


def primary_interface_annotation(r: Resolved) -> dict[str, str]:
    """A pod whose primary interface is not eth0 (fabric.podInterface) says so, so the policy pack judges
    NCCL_SOCKET_IFNAME against the interfaces the pod has."""
    return _primary_interface(r.profile)


def _primary_interface(profile: Profile) -> dict[str, str]:
    iface = profile.fabric.pod_interface
    return {} if iface == "eth0" else {nccl.PRIMARY_INTERFACE_ANNOTATION: iface}


def has_preflight(r: Resolved) -> bool:
    return bool(r.spec.preflight and r.profile.preflight and r.wiring.capabilities)


def preflight_script(r: Resolved) -> str:
    return f"/fastpath/{r.preflight.key}"


def preflight_env(r: Resolved) -> dict[str, str]:
    """What components/preflight.sh checks this pod for."""
    return pod_preflight_env(r.profile, r.wiring, r.gpus, r.shm_gib)


def pod_preflight_env(profile: Profile, wiring: fabric.PodWiring, gpus: int, shm_gib: int) -> dict[str, str]:
    fab = profile.fabric
    rdma_devices = sum(wiring.resources.values())
    hcas = " ".join(fabric.visible_hcas(fab, list(wiring.rails)))
    env = {"PREFLIGHT_GPUS": str(gpus), "PREFLIGHT_RDMA_DEVICES": str(rdma_devices), "PREFLIGHT_HCAS": hcas}
    if hcas and (layer := fab.kind_row.link_layer) is not None:
        env["PREFLIGHT_LINK_LAYER"] = layer
    # The interfaces whose addresses NCCL uses on the rails: the pod's own (net1..), or on the host network of a
    # RoCE cluster the node's rail netdevs, whose IPv4 addresses are the GIDs NCCL picks (without one it falls back
    # to the link-local GID 0, which does not route between leaves). InfiniBand verbs need no rail address.
    rail_ifaces = list(wiring.interfaces)
    if wiring.host_network and fab.kind == "roce":
        rail_ifaces = [rail.host_interface for rail in wiring.rails if rail.host_interface]
    env.update({"PREFLIGHT_INTERFACES": " ".join(rail_ifaces), "PREFLIGHT_SHM_BYTES": str(shm_gib * 2**30)})
    if wiring.host_network:
        env["PREFLIGHT_BOOTSTRAP"] = fab.pod_interface
    if fab.kind == "roce" and hcas and rail_ifaces:
        # On a shared RoCE port the pod's own address must be in the HCA's GID table for NCCL to pick it.
        env["PREFLIGHT_ROCE_GIDS"] = " ".join(
            f"{iface}:{rail.hca}" for iface, rail in zip(rail_ifaces, wiring.rails, strict=True)
        )
    return env


def preflight_container(r: Resolved, limits: dict) -> dict:
    """Checks the pod is on the fast path before the job starts. It requests the same GPUs and rail devices (the
    kubelet hands an init container's devices on to the app container) and little memory."""
    small = {**limits, "memory": "256Mi", "cpu": 1}
    return {
        "name": "preflight",
        "image": r.spec.image,
        "command": ["sh", preflight_script(r)],
        "env": [{"name": k, "value": v} for k, v in preflight_env(r).items()],
        "resources": {"limits": small, "requests": dict(small)},
        # The reason a check failed, in the pod's status (kubectl describe), not only in its logs.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {"capabilities": {"add": list(r.wiring.capabilities)}},
        "volumeMounts": [
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "preflight", "mountPath": "/fastpath", "readOnly": True},
        ],
    }


def run_policy(r: Resolved) -> dict:
    """`cleanPodPolicy: Running`: when the job ends the operator deletes its Running and Pending pods, so GPUs are
    freed at once (the default None deletes nothing). No backoffLimit: no replica restarts a container in place
    (the launchers retry inside their container), so the operator's restart count has nothing to count."""
    policy: dict = {"cleanPodPolicy": CLEAN_POD_POLICY}
    policy["ttlSecondsAfterFinished"] = r.spec.ttl_seconds_after_finished
    if r.scheduler:
        policy["schedulingPolicy"] = {
            "minAvailable": r.min_available,
            "queue": r.queue,
            "priorityClass": r.priority_class,
        }
    return policy


def torchrun_command(command: list[str]) -> list[str]:
    """The user's one-process command under torchrun, which reads sizes and rendezvous from the PET_* variables
    the operator sets. `python [-u] script|-m module ...` becomes `torchrun script|-m module ...` (torchrun runs
    Python with -u itself, and the operator sets PYTHONUNBUFFERED); other interpreter flags, and any other
    program, run as given under `torchrun --no-python`."""
    if PYTHON.match(command[0]):
        rest = [a for a in command[1:]]
        while rest and rest[0] == "-u":
            rest.pop(0)
        if rest and (rest[0] == "-m" or not rest[0].startswith("-")):
            return ["torchrun", *rest]
    return ["torchrun", "--no-python", *command]


# The PyTorch worker's entrypoint (restartPolicy ExitCode: the operator reads this container's exit code, kubeflow/
# trainer@v1.9.4 pkg/controller.v1/common/pod.go, and recreates the pod only for codes >= 128, pkg/util/train):
# - SIGTERM (drain, eviction, preemption) is answered with 143 from the first line on: retryable, the pod comes
#   back and rejoins (torchrun itself exits 1 on SIGTERM, which would fail the job);
# - the preflight first: a failure exits 3, which the operator does not retry: the job fails, the gang is freed;
# - a start budget: the operator recreates an ExitCode pod without counting, so a pod that keeps dying (an OOM
#   kill takes the whole container on cgroup v2, 137) would come back forever when no survivor's torchrun budget
#   ends the job (a one-node job). Each start is counted in the job's own rendezvous store, and a pod started
#   more than FASTPATH_MAX_STARTS times exits 1;
# - torchrun as a child, its own exit passed on; a signal that killed it (not our SIGTERM) as 1.
LAUNCH = """\
trap 'exit 143' TERM INT
if [ -n "${FASTPATH_PREFLIGHT:-}" ]; then
  sh "$FASTPATH_PREFLIGHT" || { echo "fastpath: preflight failed: the job stops here, nodes released" >&2; exit 3; }
fi
if [ -n "${FASTPATH_MAX_STARTS:-}" ]; then
  starts=$(python -c 'import datetime, os, torch.distributed as d
host, port = os.environ["PET_RDZV_ENDPOINT"].rsplit(":", 1)
store = d.TCPStore(host, int(port), is_master=False, timeout=datetime.timedelta(seconds=600))
key = os.environ.get("FASTPATH_POD") or os.environ.get("HOSTNAME", "pod")
print(store.add("fastpath/starts/" + key, 1))' 2>/dev/null) || starts=0
  if [ "$starts" -gt "$FASTPATH_MAX_STARTS" ]; then
    echo "fastpath: this pod started $starts times (at most $FASTPATH_MAX_STARTS): failing the job" >&2; exit 1
  fi
fi
"$@" &
child=$!
trap 'kill -TERM "$child" 2>/dev/null; wait "$child"; exit 143' TERM INT
wait "$child"
rc=$?
if [ "$rc" -gt 128 ]; then
  echo "fastpath: $1 was killed by signal $((rc - 128)) (out of memory?)" >&2
  exit 1
fi
exit "$rc"
"""


def rdzv_host(r: Resolved) -> str:
    return f"{r.spec.name}-rdzv"


# The c10d store torchrun agents rendezvous on, served by a pod of its own: PID 1 must handle SIGTERM itself.
RDZV_STORE = """\
import os, signal, sys, time
import torch.distributed as dist
port = int(os.environ["FASTPATH_RDZV_PORT"])
store = dist.TCPStore("0.0.0.0", port, is_master=True, multi_tenant=True, wait_for_workers=False)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
print(f"c10d rendezvous store listening on :{port}", flush=True)
while True:
    time.sleep(3600)
"""


def rendezvous(r: Resolved) -> list[dict]:
    """The rendezvous store of a PyTorchJob: a one-CPU Deployment and its Service `<job>-rdzv`. Not a training pod,
    so it runs whatever subset of an elastic gang Volcano admits, and a lost GPU node never takes the store with
    it. TrainingJob makes the job its owner, so it goes when the job is deleted."""
    name = rdzv_host(r)
    labels = _labels(r, "rendezvous")
    selector = {JOB_LABEL: r.spec.name, ROLE_LABEL: "rendezvous"}
    small = {"cpu": 1, "memory": "1Gi"}
    pod = {
        "containers": [
            {
                "name": "rendezvous",
                "image": r.spec.image,
                "command": ["python", "-c", RDZV_STORE],
                "env": [{"name": "FASTPATH_RDZV_PORT", "value": str(RDZV_PORT)}],
                "ports": [{"name": "rdzv", "containerPort": RDZV_PORT}],
                "readinessProbe": {"tcpSocket": {"port": RDZV_PORT}, "periodSeconds": 5},
                "resources": {"limits": small, "requests": dict(small)},
            }
        ],
        # Every agent fails when the store goes, so keep it off the GPU nodes and off this job's nodes when it can
        # (a lost GPU node then never takes it along), but let it fall back to a GPU node's spare CPU.
        "tolerations": [k8s.toleration(r.profile.gpu.taint_key)],
        "affinity": {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "preference": {
                            "matchExpressions": [{"key": k8s.GPU_PRODUCT_LABEL, "operator": "DoesNotExist"}]
                        },
                    }
                ]
            },
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "labelSelector": {"matchLabels": {JOB_LABEL: r.spec.name, ROLE_LABEL: "worker"}},
                            "topologyKey": "kubernetes.io/hostname",
                        },
                    }
                ]
            },
        },
        "enableServiceLinks": False,
    }
    if r.priority_class:
        pod["priorityClassName"] = r.priority_class  # evicted no sooner than the job it serves
    meta = k8s.meta(name, r.profile.cluster, COMPONENT, namespace=r.namespace, extra_labels=labels)
    # Evicting it ends the job (every agent loses the store): no voluntary eviction (a drain waits, naming this
    # budget, until the job is gone) and no cluster-autoscaler scale-down of its node.
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": dict(meta),
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": selector}},
    }
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {
                "replicas": 1,
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {
                        "labels": labels,
                        "annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"},
                    },
                    "spec": pod,
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": dict(meta),
            "spec": {"selector": selector, "ports": [{"name": "rdzv", "port": RDZV_PORT, "targetPort": RDZV_PORT}]},
        },
        pdb,
    ]


def _meta(r: Resolved) -> dict:
    return k8s.meta(
        r.spec.name, r.profile.cluster, COMPONENT, namespace=r.namespace, extra_labels={JOB_LABEL: r.spec.name}
    )


def pytorch_job(r: Resolved) -> dict:
    """Worker-only PyTorchJob under c10d rendezvous, for fixed sizes too (min = max): torchrun restarts the worker
    group on a fault and admits the operator's replacement for a lost pod. `Never`: no container restarts in
    place, so a failed preflight or an exhausted torchrun fails the job instead of looping."""
    spec = r.spec
    template = pod_template(
        r, ["sh", "-c", LAUNCH, "fastpath", *torchrun_command(spec.command)], preflight_in_main=True
    )
    # One start, and one more per fault torchrun may recover from (each recreation of this pod is one).
    template["spec"]["containers"][0]["env"].append({"name": "FASTPATH_MAX_STARTS", "value": str(r.max_restarts + 1)})
    if r.wiring.host_network:
        # The agent that becomes rank 0 publishes its address for the workers' store: its FQDN unless told,
        # and on the host network that is the node's name, which pods need not resolve. torchrun reads
        # --local-addr from PET_LOCAL_ADDR (torch/distributed/run.py, action=env); the pod IP is the node's.
        template["spec"]["containers"][0]["env"].append(dict(fabric.TORCHRUN_POD_ADDRESS))
        # The start budget is per pod; on the host network HOSTNAME is the node's name, shared by whichever pod
        # lands there next.
        template["spec"]["containers"][0]["env"].append(
            {"name": "FASTPATH_POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
        )
    # torchrun takes up to 30 s to stop its workers on SIGTERM: room for that before the kubelet's SIGKILL.
    template["spec"]["terminationGracePeriodSeconds"] = 90
    body: dict = {
        "nprocPerNode": str(r.gpus),
        "elasticPolicy": {
            "minReplicas": spec.min_nodes,
            "maxReplicas": spec.max_nodes,
            "maxRestarts": r.max_restarts,
            "rdzvBackend": "c10d",
            "rdzvHost": rdzv_host(r),
            "rdzvPort": RDZV_PORT,
            "rdzvId": spec.name,
            # is_host=false: no agent hosts the store (its name is not theirs anyway); join_timeout: how long
            # survivors wait for a replacement before giving up; read_timeout: how long an agent waits for the
            # store pod to answer (it may still be pulling its image when the workers start).
            "rdzvConf": [
                {"key": "is_host", "value": "false"},
                {"key": "join_timeout", "value": str(RDZV_JOIN_TIMEOUT)},
                {"key": "read_timeout", "value": str(RDZV_READ_TIMEOUT)},
            ],
        },
        "runPolicy": run_policy(r),
        "pytorchReplicaSpecs": {
            "Worker": {"replicas": spec.max_nodes, "restartPolicy": "ExitCode", "template": template}
        },
    }
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": _meta(r), "spec": body}


def mpirun_command(r: Resolved) -> list[str]:
    """mpirun over every GPU of the job, forwarding (-x) every variable the pods get, with Open MPI's own TCP
    traffic on the pod's primary interface (it would otherwise try rail subnets that do not route)."""
    iface = r.profile.fabric.pod_interface
    cmd = [
        "mpirun",
        "--allow-run-as-root",
        "-np",
        str(r.replicas * r.gpus),
        "-bind-to",
        "none",
        "-map-by",
        "slot",
        "-mca",
        "btl_tcp_if_include",
        iface,
        "-mca",
        "oob_tcp_if_include",
        iface,
    ]
    if r.api == "v2":
        # The trainer's hostfile, by name: Open MPI 5 does not read the ORTE variable the MPI plugin sets.
        cmd[1:1] = ["--hostfile", trainer_v2_runtime.MPI_HOSTFILE]
        # The runtime's sshd port and key, stated on the command line too (the runtime's launcher env carries
        # them as the ssh agent for any TrainJob; this wins over the plugin's OMPI_MCA_plm_rsh_args in Open MPI 4).
        cmd += ["-mca", "plm_rsh_args", trainer_v2_runtime.SSH_OPTIONS]
    for name in [*r.env, *r.spec.secret_env, "PATH", "LD_LIBRARY_PATH"]:
        cmd += ["-x", name]
    return [*cmd, *r.spec.command]


# The MPI launcher's entrypoint. The v1 launcher starts as soon as it is created, not when its workers run
# (kubeflow/trainer@v1.9.4 pkg/controller.v1/mpi), and the operator never recreates a worker: so wait until each
# worker takes an exec (kubexec.sh, as Open MPI will) for at most 10 minutes, stop at once on a worker that failed
# (its preflight) or is being deleted (its node is gone), then run mpirun, and after a failure clear what is left
# of the ranks on the workers and relaunch it, FASTPATH_MAX_RESTARTS times. The launcher runs under Never, so
# the pod that ends keeps its log (cleanPodPolicy Running deletes only Running and Pending pods).
LAUNCHER = """\
mpi=${FASTPATH_MPI_DIR:-/etc/mpi}
kubectl=${FASTPATH_KUBECTL:-/opt/kube/kubectl}
workers() { awk '{print $1}' "$mpi/hostfile"; }
limit=$(command -v timeout >/dev/null 2>&1 && echo "timeout 30")
gone() {
  state=$("$kubectl" get pod "$1" -o 'jsonpath={.status.phase} {.metadata.deletionTimestamp}' 2>/dev/null)
  case "$state" in
    Failed*|Succeeded*|*T*) echo "fastpath: worker $1 is gone ($state): kubectl describe pod $1" >&2; return 0;;
  esac
  return 1
}
wait_workers() {
  deadline=$(( $(date +%s) + 600 ))
  for w in $(workers); do
    while :; do
      if gone "$w"; then exit 2; fi
      $limit "$mpi/kubexec.sh" "$w" true >/dev/null 2>&1 && break
      [ "$(date +%s)" -lt "$deadline" ] || { echo "fastpath: worker $w unreachable for 10 minutes" >&2; exit 3; }
      sleep 2
    done
  done
}
wait_workers
attempt=0
while :; do
  "$@" && exit 0
  rc=$?
  attempt=$((attempt + 1))
  if [ "$attempt" -gt "${FASTPATH_MAX_RESTARTS:-0}" ]; then
    echo "fastpath: $1 failed $attempt times (last exit $rc)" >&2; exit "$rc"
  fi
  echo "fastpath: $1 exited $rc; relaunch $attempt of $FASTPATH_MAX_RESTARTS" >&2
  for w in $(workers); do "$mpi/kubexec.sh" "$w" 'kill -9 -1' >/dev/null 2>&1; done
  wait_workers
done
"""


# The operator sets Open MPI 4's (ORTE) names on the launcher: OMPI_MCA_plm_rsh_agent=/etc/mpi/kubexec.sh and
# OMPI_MCA_orte_default_hostfile=/etc/mpi/hostfile (kubeflow/trainer@v1.9.4 pkg/controller.v1/mpi). Open MPI 5
# reads its runtime's (PRRTE) names, and 5.0.0 does not translate the old ones: with these as well, mpirun finds
# kubexec and the hostfile whatever the image's major version.
LAUNCHER_PRTE_ENV = [
    {"name": "PRTE_MCA_plm_ssh_agent", "value": "/etc/mpi/kubexec.sh"},
    {"name": "PRTE_MCA_prte_default_hostfile", "value": "/etc/mpi/hostfile"},
]


def mpi_job(r: Resolved) -> dict:
    """MPIJob v1: workers only wait (`sleep 365d`, Never: a failed preflight fails the pod), the launcher waits for
    them, runs mpirun and relaunches it after a failure, maxRestarts times, all inside its one container
    (Never): no restart budget to size, and the launcher's log survives the job's cleanup."""
    # The v1 launcher execs into workers (kubexec), they only wait; `sleep` as PID 1 ignores SIGTERM and would
    # hold the GPUs for the whole grace period: 143 at once (a Failed worker fails the job, its gang freed).
    worker = pod_template(r, ["sh", "-c", "trap 'exit 143' TERM INT; sleep 365d & wait"])
    launcher_container = {
        "name": "launcher",
        "image": r.spec.image,
        "command": ["sh", "-c", LAUNCHER, "launcher", *mpirun_command(r)],
        "env": env_list(r) + LAUNCHER_PRTE_ENV + [{"name": "FASTPATH_MAX_RESTARTS", "value": str(r.max_restarts)}],
        "resources": {"limits": {"cpu": 2, "memory": "4Gi"}, "requests": {"cpu": 2, "memory": "4Gi"}},
    }
    # The launcher is one of the gang (it counts in the PodGroup): it must be able to go where its workers go, or
    # it stays Pending and so does every worker. No GPU, no node selector: any node the workers' taint allows.
    launcher_spec: dict = {"containers": [launcher_container], "tolerations": worker["spec"]["tolerations"]}
    if r.scheduler:
        launcher_spec["schedulerName"] = r.scheduler
        launcher_spec["priorityClassName"] = r.priority_class
    if r.wiring.host_network:
        # mpirun keeps Open MPI's TCP traffic on fabric.podInterface, the GPU nodes' interface: the launcher's
        # own daemon must have it too, so it runs on the host network of a GPU node (it takes no GPU).
        host_network(launcher_spec)
        launcher_spec["nodeSelector"] = dict(worker["spec"]["nodeSelector"])
    launcher: dict = {"metadata": {"labels": _labels(r, "launcher")}, "spec": launcher_spec}
    if notes := primary_interface_annotation(r):
        launcher["metadata"]["annotations"] = notes
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "MPIJob",
        "metadata": _meta(r),
        "spec": {
            "slotsPerWorker": r.gpus,
            "runPolicy": run_policy(r),
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "restartPolicy": "Never", "template": launcher},
                "Worker": {"replicas": r.replicas, "restartPolicy": "Never", "template": worker},
            },
        },
    }


def tf_job(r: Resolved) -> dict:
    """TFJob: Chief and Workers under Never. MultiWorkerMirroredStrategy cannot take a replacement worker into a
    running cluster, so a fault fails the job, cleanup frees the nodes, and the next job resumes from the
    checkpoint."""
    template = pod_template(r, list(r.spec.command))
    replicas: dict = {"Chief": {"replicas": 1, "restartPolicy": "Never", "template": template}}
    if r.replicas > 1:
        replicas["Worker"] = {"replicas": r.replicas - 1, "restartPolicy": "Never", "template": template}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": _meta(r),
        "spec": {"runPolicy": run_policy(r), "tfReplicaSpecs": replicas},
    }


def files_data(spec: JobSpec, root: Path | None = None) -> dict[str, str]:
    base = root or Path.cwd()
    return {name: (base / local).read_text() for name, local in sorted(spec.files.items())}


def files_configmap_name(spec: JobSpec) -> str:
    """`<job>-files-<hash>`: an edited file is a new, immutable ConfigMap and a changed job (a review diff), never
    new code under a running job's feet at its next torchrun restart."""
    digest = hashlib.sha256(json.dumps(files_data(spec), sort_keys=True).encode()).hexdigest()[:8]
    return f"{spec.name}-files-{digest}"


def files_configmap(r: Resolved) -> dict | None:
    """The job's `files`, read from the Pulumi project, as the ConfigMap its pods mount at /workspace/files."""
    if not r.spec.files:
        return None
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": k8s.meta(
            files_configmap_name(r.spec),
            r.profile.cluster,
            COMPONENT,
            namespace=r.namespace,
            extra_labels={JOB_LABEL: r.spec.name},
        ),
        "immutable": True,
        "data": files_data(r.spec),
    }


# ------------------------------------------------------------------------------------------- Trainer v2
#
# A v2 job is a TrainJob naming one of the ClusterTrainingRuntimes the platform publishes
# (components/platform/trainer.py), chosen by framework and priority tier (components/model/profile.py
# runtime_name): the runtime holds the fabric wiring, sizing, preflight, checkpoint claim, placement, gang
# scheduling and failure policy for a whole node; the TrainJob holds only what the controller lets it set
# (../notes/trainer-v2.md a): image, command, node count, its own env, and through runtime patches its queue and
# the volumes of its files and datasets.

V2_FRAMEWORK = {"pytorch": "torch", "mpi": "mpi"}  # tensorflow has no v2 runtime (api_problems)
RUNTIME_COMPONENT = "trainer"


def node_shape(profile: Profile, framework: str, tier: str | None) -> NodeShape:
    """A whole node of this cluster as a runtime's pods see it: every GPU on every rail, sized as a whole-node v1
    job, with the preflight, checkpoint claim, placement, gang scheduler and the platform's failure policy."""
    trainer = profile.trainer
    assert trainer is not None, "runtimes are built for clusters serving v2"
    image = trainer.mpi_image if framework == "mpi" else trainer.image
    assert image is not None, "no MPI runtime without trainer.mpiImage (TrainerProfile.frameworks)"
    gpus, memory, shm, cpus = sizing(JobSpec(name="runtime", image=image, command=["true"], nodes=1), profile)
    # No namespace in the Multus annotation: one cluster-wide runtime serves every training namespace, each with
    # its own network attachments.
    wiring = fabric.pod_wiring(profile.fabric, None, gpus, profile.gpu.per_node)
    sched, cp, pf = profile.scheduler, profile.checkpoints, profile.preflight
    return NodeShape(
        wiring=wiring,
        image=image,
        gpus=gpus,
        memory_gib=memory,
        shm_gib=shm,
        cpus=cpus,
        gpu_product=profile.gpu.product,
        gpu_taint_key=profile.gpu.taint_key,
        scheduler=sched.name,
        queue=sched.default_queue if sched.name else None,
        priority_class=tier if sched.name else None,
        topology_key=profile.nodes.topology_key,
        checkpoint_claim=cp.claim if cp else None,
        checkpoint_mount=cp.mount_root if cp else "/checkpoints",
        preflight_config_map=pf.config_map if pf else None,
        preflight_key=pf.key if pf else "preflight.sh",
        preflight_env=pod_preflight_env(profile, wiring, gpus, shm),
        max_restarts=trainer.max_restarts,
        ttl_seconds_after_finished=trainer.ttl_seconds_after_finished,
        pod_annotations=_primary_interface(profile),
    )


def runtime(profile: Profile, framework: str, tier: str | None) -> dict:
    """The ClusterTrainingRuntime `runtime_name(framework, tier)` of this cluster."""
    return trainer_v2_runtime.cluster_training_runtime(
        runtime_name(framework, tier),
        framework,
        node_shape(profile, framework, tier),
        labels=k8s.labels(profile.cluster, RUNTIME_COMPONENT),
    )


def runtime_of(r: Resolved) -> str:
    return runtime_name(V2_FRAMEWORK[r.spec.framework], r.priority_class)


def _trainer_env(r: Resolved) -> list[dict]:
    """What the TrainJob adds to the runtime's env: the job's own variables and deliberate overrides (NCCL_DEBUG
    with debugNccl included), merged by name into the `node` container; secrets by reference."""
    base = fabric.pod_wiring(r.profile.fabric, None, r.gpus, r.profile.gpu.per_node).env
    env: list[dict] = [{"name": k, "value": v} for k, v in r.env.items() if base.get(k) != v and k != "CHECKPOINT_DIR"]
    env += [
        {"name": k, "valueFrom": {"secretKeyRef": {"name": s.secret, "key": s.key}}}
        for k, s in r.spec.secret_env.items()
    ]
    return env


def _volume_patch(r: Resolved) -> dict | None:
    """The job's files and datasets as a runtime patch (volumes and the `node` container's mounts, the fields a
    TrainJob may patch) on every replicated job whose pods run ranks."""
    spec = r.spec
    volumes: list[dict] = []
    mounts: list[dict] = []
    if spec.files:
        volumes.append({"name": "files", "configMap": {"name": files_configmap_name(spec)}})
        mounts.append({"name": "files", "mountPath": FILES_MOUNT, "readOnly": True})
    for i, d in enumerate(spec.datasets):
        volumes.append({"name": f"dataset-{i}", "persistentVolumeClaim": {"claimName": d.claim, "readOnly": True}})
        mounts.append({"name": f"dataset-{i}", "mountPath": d.mount_path, "readOnly": True})
    if not volumes:
        return None
    names = [trainer_v2_runtime.NODE] + ([trainer_v2_runtime.LAUNCHER] if spec.framework == "mpi" else [])
    pod = {"volumes": volumes, "containers": [{"name": trainer_v2_runtime.NODE, "volumeMounts": mounts}]}
    return {"replicatedJobs": [{"name": n, "template": {"spec": {"template": {"spec": pod}}}} for n in names]}


def train_job(r: Resolved) -> dict:
    """The TrainJob of a v2 job: its runtime by framework and tier, torchrun or mpirun as the command, the node
    count, the job's env, and the queue, files and datasets as fastpath's runtime patch. Memory and CPU overrides go
    in resourcesPerNode with the GPU count repeated, requests = limits: the torch plugin counts GPUs in a TrainJob's
    resourcesPerNode alone (kubeflow/trainer@v2.3.0:pkg/runtime/framework/plugins/torch/torch.go), and a per-key
    merge of a lone limit would leave requests and limits apart."""
    spec = r.spec
    resources = None
    if spec.memory_gib is not None or spec.cpus is not None:
        part = {trainer_v2_runtime.GPU_RESOURCE: r.gpus, "memory": f"{r.memory_gib}Gi", "cpu": r.cpus}
        resources = {"limits": part, "requests": dict(part)}
    queue = r.queue if r.queue != r.profile.scheduler.default_queue else None
    if spec.framework == "pytorch":
        command = torchrun_command(spec.command)
    else:
        # A failed mpirun waits before the launcher fails: when a node pod was evicted or preempted, its Job must
        # fail first (DisruptionTarget: a restart that spends no budget), not the launcher's ordinary failure,
        # which JobSet would act on first and charge to maxRestarts. mpirun runs as a child so that SIGTERM (the
        # launcher deleted, the gang restarted) reaches it and ends the launcher with 143 at once: a shell that is
        # PID 1 ignores a signal it has no handler for.
        command = ["sh", "-c", MPI_LAUNCH, "mpirun", *mpirun_command(r)]
    job = trainer_v2_runtime.train_job(
        spec.name,
        runtime_of(r),
        image=spec.image,
        command=command,
        num_nodes=spec.nodes,
        namespace=r.namespace,
        num_proc_per_node=r.gpus if spec.framework == "pytorch" else None,
        resources_per_node=resources,
        queue=queue,
        labels=_meta(r)["labels"],
    )
    if env := _trainer_env(r):
        job["spec"]["trainer"]["env"] = env
    if patch := _volume_patch(r):
        patches = job["spec"].setdefault(
            "runtimePatches", [{"manager": trainer_v2_runtime.PATCH_MANAGER, "trainingRuntimeSpec": {"template": {}}}]
        )
        patches[0]["trainingRuntimeSpec"]["template"]["spec"] = patch
    return job


def job_runtime(r: Resolved) -> dict:
    return runtime(r.profile, V2_FRAMEWORK[r.spec.framework], r.priority_class)


def _v2_contract(r: Resolved) -> dict:
    """The contract of a TrainJob read off its effective pod: the runtime merged with the job as the v2.3.0
    controller merges them (trainer_v2_runtime.effective_pod), so what the TrainJob changed shows."""
    job, rt = train_job(r), job_runtime(r)
    derived = trainer_v2_runtime.effective_jobset(job, rt)
    pod = trainer_v2_runtime.effective_pod(job, rt)
    node = next(c for c in pod["spec"]["containers"] if c["name"] == trainer_v2_runtime.NODE)
    limits = node["resources"]["limits"]
    shm = next(v for v in pod["spec"]["volumes"] if v["name"] == "dshm")["emptyDir"]["sizeLimit"]
    nets = json.loads((pod["metadata"].get("annotations") or {}).get(fabric.NETWORKS_ANNOTATION) or "[]")
    group = derived["podGroup"] or {}
    env = {}
    for e in node.get("env") or []:
        if "value" in e:
            env[e["name"]] = e["value"]
        else:
            ref = e["valueFrom"]
            env[e["name"]] = (
                f"(secret {ref['secretKeyRef']['name']}/{ref['secretKeyRef']['key']})"
                if "secretKeyRef" in ref
                else f"(field {ref['fieldRef']['fieldPath']})"
            )
    fab = r.profile.fabric
    return {
        "job": r.spec.name,
        "namespace": r.namespace,
        "kind": "TrainJob",
        "runtime": rt["metadata"]["name"],
        "replicas": f"{r.spec.nodes} x {_gpu_count(limits)} GPUs",
        "fabric": fab.kind + (f"/{fab.attachment}" if fab.attachment else ""),
        "transport": r.wiring.transport,
        "networks": [n["name"] for n in nets],
        "rdmaResources": {k: v for k, v in limits.items() if k not in trainer_v2_runtime.CORE_RESOURCES},
        "capabilities": list((node.get("securityContext") or {}).get("capabilities", {}).get("add") or []),
        "shm": f"{shm} of {limits['memory']} memory limit",
        "env": env,
        "envOverrides": [k for k in r.overridden],
        "secretEnv": sorted(r.spec.secret_env),
        "queue": group.get("queue"),
        "priorityClass": group.get("priorityClassName"),
        "minAvailable": group.get("minMember"),
        "faults": fault_summary(r),
        "checkpointDir": f"{r.checkpoint_dir} (the claim's {r.spec.name}/)" if r.checkpoint_dir else None,
        "runtimeOverrides": trainer_v2_runtime.override_problems(job, rt),
    }


def _gpu_count(limits: dict) -> int:
    return int(limits.get(trainer_v2_runtime.GPU_RESOURCE, 0))


# A lost node (NotReady): its pod is deleted (taint eviction, or the Job deleting what is left once the survivors'
# NCCL errors failed it) but stays Terminating, since no kubelet confirms it. With a podFailurePolicy a pod counts
# only once terminal, and the Job's Failed condition waits until no pod is terminating (kubernetes/kubernetes
# pkg/controller/job/job_controller.go onlyReplaceFailedPods, trackTerminatingPods, delayTerminalCondition); JobSet
# acts only on a Failed Job (kubernetes-sigs/jobset@v0.12.0:pkg/controllers/failure_policy.go) and BlockingRecreate
# waits for the old Jobs' foreground deletion. PodGC ends it: it force-deletes, as Failed, a terminating pod on a
# NotReady node tainted node.kubernetes.io/out-of-service (pkg/controller/podgc/gc_controller.go gcTerminating), or
# any pod of a deleted Node (gcOrphaned). Shorter unreachable/not-ready tolerations would only start the eviction
# sooner, not end it, so the runtimes keep the defaults.
LOST_NODE = (
    "a lost node holds the run (its pod stays Terminating, the healthy nodes' pods are deleted) until the "
    "Node is tainted node.kubernetes.io/out-of-service=nodeshutdown:NoExecute or deleted, then the gang "
    "restarts"
)


def v2_fault_summary(r: Resolved) -> str:
    t = r.profile.trainer
    assert t is not None
    kept = (
        f"the JobSet (pods, logs) kept {t.ttl_seconds_after_finished}s"
        if t.ttl_seconds_after_finished is not None
        else "the JobSet kept until the TrainJob is deleted"
    )
    return (
        f"a crashed or OOM-killed pod restarts the whole gang from the checkpoint (JobSet BlockingRecreate), up "
        f"to {t.max_restarts} times; a preemption, eviction or drain restarts it without spending that budget; "
        f"{LOST_NODE}; a failed preflight fails the run; when it ends its active pods are deleted, {kept}"
    )


BUILDERS = {"pytorch": pytorch_job, "mpi": mpi_job, "tensorflow": tf_job}
V1_KINDS = {"pytorch": "PyTorchJob", "mpi": "MPIJob", "tensorflow": "TFJob"}
# Seconds a v2 launcher whose mpirun failed waits before failing (train_job): room for an evicted node's Job to
# fail first, with its DisruptionTarget reason.
MPI_FAILURE_GRACE = 30
MPI_LAUNCH = f"""\
"$@" &
child=$!
trap 'kill -TERM "$child" 2>/dev/null; wait "$child"; exit 143' TERM INT
wait "$child"
rc=$?
[ "$rc" -eq 0 ] || sleep {MPI_FAILURE_GRACE}
exit "$rc"
"""


def manifest(r: Resolved) -> dict:
    if r.api == "v2":
        return train_job(r)
    return BUILDERS[r.spec.framework](r)


def contract(r: Resolved) -> dict:
    """The effective contract of a job, for review: a change of fabric shows up as a diff of this."""
    if r.api == "v2":
        return _v2_contract(r)
    fab = r.profile.fabric
    size = (
        f"{r.spec.nodes}"
        if r.spec.elastic is None
        else f"{r.spec.elastic.min_nodes}-{r.spec.elastic.max_nodes} (elastic)"
    )
    return {
        "job": r.spec.name,
        "namespace": r.namespace,
        "kind": V1_KINDS[r.spec.framework],
        "replicas": f"{size} x {r.gpus} GPUs",
        "fabric": fab.kind + (f"/{fab.attachment}" if fab.attachment else ""),
        "transport": r.wiring.transport,
        "networks": [rail.network for rail in r.wiring.rails if rail.network is not None],
        "rdmaResources": dict(r.wiring.resources),
        "capabilities": list(r.wiring.capabilities),
        "shm": f"{r.shm_gib}Gi of {r.memory_gib}Gi memory limit",
        "env": dict(r.env),
        "envOverrides": list(r.overridden),
        "secretEnv": sorted(r.spec.secret_env),
        "queue": r.queue,
        "priorityClass": r.priority_class,
        "minAvailable": r.min_available if r.scheduler else None,
        "faults": fault_summary(r),
        "checkpointDir": r.checkpoint_dir,
    }


def fault_summary(r: Resolved) -> str:
    """What a fault does to this job, in one line, for the contract."""
    if r.api == "v2":
        return v2_fault_summary(r)
    if r.spec.framework == "pytorch":
        return (
            f"torchrun restarts the group up to {r.max_restarts} times (c10d store {rdzv_host(r)}); an evicted "
            f"or deleted pod is recreated (ExitCode) and rejoins within {RDZV_JOIN_TIMEOUT}s, else the job "
            f"fails; cleanPodPolicy {CLEAN_POD_POLICY}"
        )
    if r.spec.framework == "mpi":
        return (
            f"the launcher relaunches mpirun up to {r.max_restarts} times while every worker is there; a lost "
            f"worker fails the job; cleanPodPolicy {CLEAN_POD_POLICY}"
        )
    return f"a fault fails the job (restartPolicy Never); cleanPodPolicy {CLEAN_POD_POLICY}"


@dataclass
class TrainingJobArgs:
    spec: JobSpec
    profile: Profile  # Platform.profile, or components.model.profile.from_stack("org/fastpath/prod-ib")


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
        files = files_configmap(resolved)
        if files is not None:  # before the pods that mount it
            cm = k8s.apply(files, pulumi.ResourceOptions(parent=self, depends_on=depends_on))
            depends_on = k8s.plus(depends_on, cm)
        # A changed job is a new job: the operator would take a spec edit in place, and only pods recreated
        # later would run the new code beside survivors on the old (the v1.9.4 webhook does not refuse it).
        self.job = k8s.apply(
            self.manifest,
            pulumi.ResourceOptions(
                parent=self, depends_on=depends_on, replace_on_changes=["spec"], delete_before_replace=True
            ),
        )
        self.rendezvous = []
        if args.spec.framework == "pytorch" and resolved.api == "v1":
            # Owned by the job: deleted with it (ttlSecondsAfterFinished, kubectl delete), never left behind.
            owner = self.job.metadata.apply(
                lambda m: [
                    {
                        "apiVersion": self.manifest["apiVersion"],
                        "kind": self.manifest["kind"],
                        "name": self.manifest["metadata"]["name"],
                        "uid": (m or {}).get("uid"),
                    }
                ]
            )
            for m in rendezvous(resolved):
                m["metadata"]["ownerReferences"] = owner
                self.rendezvous.append(k8s.apply(m, pulumi.ResourceOptions(parent=self, depends_on=depends_on)))
        self.register_outputs({"contract": self.contract})
