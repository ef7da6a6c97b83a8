"""What is wrong with a job on a cluster, as (key, message) pairs: the cluster's limits, the command, what the job
API allows, the fabric's environment, the files and the sizing. components/model/stack.py reports them for every
job of a stack at once; resolve refuses a job that has any. Nothing here builds an object.
"""

from __future__ import annotations

from pathlib import Path

from components.fabric import nccl
from components.fabric import wiring as fabric
from components.jobs.launchers import launcher_in
from components.jobs.sizing import sizing
from components.model.base import JobApi
from components.model.config import tcp_on_rdma
from components.model.job import JobSpec
from components.model.profile import Profile

FILES_LIMIT = 1024 * 1024 - 16 * 1024  # a ConfigMap's 1 MiB, less room for its metadata


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
                f"queue {job.queue!r} asked but the cluster has no gang scheduler "
                "(fastpath:platform.components.volcano is off): enable it or remove queue",
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


def scheduler_problems(spec: JobSpec, profile: Profile) -> list[tuple[str, str]]:
    """What the job asks that its cluster's gang scheduler cannot do, and where it asks for a topology it cannot
    get."""
    out: list[tuple[str, str]] = []
    api, sched, topology = api_of(spec, profile), profile.scheduler.name, profile.nodes.topology
    if sched == "kueue" and api == "v1" and spec.framework == "mpi":
        out.append(
            (
                "framework",
                "a Training Operator MPIJob is not admitted by Kueue v0.19.2 (its kubeflow.org/mpijob integration is "
                "mpi-operator's v2beta1; kubernetes-sigs/kueue@v0.19.2:pkg/controller/jobs/mpijob), so it would run "
                "without gang nor quota: use api v2 (a TrainJob through the MPI runtime)",
            )
        )
    if sched == "kueue" and spec.elastic is not None:
        out.append(
            (
                "elastic",
                f"Kueue v0.19.2 admits a Kubeflow job or TrainJob at its full size (here {spec.elastic.max_nodes} "
                "nodes) and has no elastic admission for them, so the job would wait for maxNodes: give nodes: N",
            )
        )
    if topology is None:
        if spec.topology is not None:
            out.append(("topology", "the cluster declares no topology (fastpath:platform.nodes.topology): remove it"))
        return out
    names = [lv.name for lv in topology.levels]
    placement = topology.placement_of(spec.topology)
    if placement.level not in names:
        return [*out, ("topology.level", f"{placement.level!r} is not a level of this cluster ({', '.join(names)})")]
    if api == "v2" and spec.topology is not None and spec.topology != topology.default_placement:
        out.append(
            (
                "topology",
                "a TrainJob is placed as its runtime says (the platform's nodes.topology.placement): Trainer v2.3.0 "
                "lets a TrainJob patch neither its pods' annotations nor its PodGroup; remove it",
            )
        )
    if sched == "volcano" and api == "v1" and placement.mode == "required":
        out.append(
            (
                "topology.mode",
                "required placement on Volcano is the PodGroup's networkTopology, which the Training Operator v1.9.4 "
                "never sets (its schedulingPolicy has no such field): give this job topology {mode: preferred}, or "
                "api v2",
            )
        )
    size = topology.level(placement.level).nodes
    if placement.mode == "required" and size is not None and spec.max_nodes > size:
        out.append(
            (
                "topology",
                f"{spec.max_nodes} nodes never fit in one {placement.level} of {size} nodes, so a required "
                "placement would wait forever: give this job topology {level: <an outer level>} or {mode: preferred}",
            )
        )
    return out


def clique_problems(spec: JobSpec, profile: Profile) -> list[tuple[str, str]]:
    """A job larger than one NVLink clique cannot use multi-node NVLink across it."""
    clique = profile.gpu.clique_nodes
    if clique is None:
        return []
    out = []
    if spec.gpus_per_node is not None and spec.gpus_per_node < profile.gpu.per_node:
        out.append(
            (
                "gpusPerNode",
                "a node serves one ComputeDomain at a time (the IMEX channel's kubelet plugin labels the node with "
                "its domain and refuses another: kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1 cmd/compute-domain-"
                "kubelet-plugin/computedomain.go), so jobs with part of a node could not share it: use whole nodes",
            )
        )
    if spec.max_nodes <= clique:
        return out
    key = "nodes" if spec.nodes is not None else "elastic.maxNodes"
    return [
        *out,
        (
            key,
            f"{spec.max_nodes} nodes are more than one NVLink clique of {clique} (gpu.nvlinkDomain.nodesPerClique): "
            "fastpath keeps a job inside one clique, where all its traffic rides NVLink (across cliques NCCL would "
            f"use the network between them); give at most {clique} nodes",
        ),
    ]


def dra_problems(spec: JobSpec, profile: Profile) -> list[tuple[str, str]]:
    """A `dra` pod with part of a node reads its NICs at start (components/jobs/dra_hca.sh): where that cannot run
    yet, refused with the reason."""
    per_node = profile.gpu.per_node
    if not profile.fabric.claims or spec.gpus_per_node is None or spec.gpus_per_node >= per_node:
        return []
    if api_of(spec, profile) == "v2":
        return [
            (
                "gpusPerNode",
                "a TrainJob with part of a node sets resourcesPerNode, and Trainer v2.3.0 then drops the node "
                "container's resource claims (kubeflow/trainer@v2.3.0:pkg/runtime/core/trainingruntime.go "
                "newRuntimeInfo): its GPUs and NICs would not reach it; use whole nodes, or api v1",
            )
        ]
    if spec.framework != "pytorch":
        return [
            (
                "gpusPerNode",
                f"a {spec.framework} job with part of a node on 'dra': its ranks start under their own launcher, which "
                "does not yet read the NICs the claim gave (NCCL_IB_HCA); use whole nodes, or framework pytorch",
            )
        ]
    return []


def problems(spec: JobSpec, profile: Profile) -> list[tuple[str, str]]:
    """(key, message) for everything wrong with `spec` on this cluster; sizing is judged once the rest is sound."""
    found = cluster_problems(spec, profile) + command_problems(spec) + api_problems(spec, profile)
    found += scheduler_problems(spec, profile) + dra_problems(spec, profile) + clique_problems(spec, profile)
    fab = profile.fabric
    for name, value in spec.env_overrides.items():
        if (p := tcp_on_rdma(fab, name, value)) is not None:
            found.append(("envOverrides", p))
    if (ifname := spec.env_overrides.get("NCCL_SOCKET_IFNAME")) is not None:
        if (p := nccl.socket_ifname_problem(ifname, fabric.pod_interfaces(fab))) is not None:
            found.append(("envOverrides", p))
    if spec.max_restarts is not None and spec.framework == "tensorflow" and api_of(spec, profile) == "v1":
        found.append(
            (
                "maxRestarts",
                "tensorflow workers cannot re-form a cluster after a fault: the job fails and "
                "frees its nodes, and a new job resumes from the checkpoint; remove maxRestarts",
            )
        )
    if (mirror := profile.image_mirror) is not None and not spec.image.startswith(f"{mirror}/"):
        found.append(
            (
                "image",
                f"{spec.image} is not from mirrors.registry {mirror!r}, which this disconnected cluster pulls from: "
                f"mirror it and name it as `{mirror}/<source registry>/<path>:<tag>`",
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
