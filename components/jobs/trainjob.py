"""A job on Kubeflow Trainer v2, and the runtimes its TrainJobs name.

A v2 job is a TrainJob naming one of the ClusterTrainingRuntimes the platform publishes
(components/platform/trainer.py), chosen by framework and priority tier (components/model/profile.py
runtime_name): the runtime holds the fabric wiring, sizing, preflight, checkpoint claim, placement, gang
scheduling and failure policy for a whole node; the TrainJob holds only what the controller lets it set
(kubeflow/trainer@v2.3.0:pkg/apis/trainer/v1alpha1/trainjob_types.go, merged by pkg/runtime/core/trainingruntime.go
and pkg/runtime/framework/plugins/jobset/builder.go): image, command, node count, its own env, and through runtime
patches its queue and the volumes of its files and datasets. This module turns the cluster's profile into the
runtimes' node shape and a resolved job into its TrainJob; components/jobs/runtime_v2/build.py builds both objects.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from components import k8s, versions
from components.fabric import dra
from components.jobs import topology as job_topology
from components.jobs.files import FILES_MOUNT, files_configmap_name
from components.jobs.launch import IMEX_CHECK, MPI_LAUNCH, mpirun_command, torchrun_command
from components.jobs.pod import pod_preflight_env, primary_interface
from components.jobs.resolve import JOB_LABEL, Resolved, job_meta
from components.jobs.runtime_v2 import build, controller
from components.jobs.runtime_v2.build import NodeShape
from components.jobs.sizing import sizing
from components.model.job import JobSpec
from components.model.profile import DEFAULT_PRIORITY_CLASS, RUNTIME_PREFIX, Profile, runtime_name
from components.platform import mirrors

V2_FRAMEWORK = {"pytorch": "torch", "mpi": "mpi"}  # tensorflow has no v2 runtime (checks.api_problems)
RUNTIME_COMPONENT = "trainer"


def node_shape(profile: Profile, framework: str, tier: str | None, imex_template: str | None = None) -> NodeShape:
    """A whole node of this cluster as a runtime's pods see it: every GPU on every rail, sized as a whole-node v1
    job, with the preflight, checkpoint claim, placement, gang scheduler and the platform's failure policy.

    On a multi-node NVLink cluster, with `imex_template` (one job's own runtime) the pods claim that ComputeDomain's
    IMEX channel, check it first and stay in one clique; without it (the cluster-wide runtimes a hand-written
    TrainJob names) they have no channel, so NCCL is told to leave MNNVL off and use the network."""
    trainer = profile.trainer
    assert trainer is not None, "runtimes are built for clusters serving v2"
    image = trainer.mpi_image if framework == "mpi" else trainer.image
    assert image is not None, "no MPI runtime without trainer.mpiImage (TrainerProfile.frameworks)"
    gpus, memory, shm, cpus = sizing(JobSpec(name="runtime", image=image, command=["true"], nodes=1), profile)
    # No namespace in the Multus annotation: one cluster-wide runtime serves every training namespace, each with
    # its own network attachments.
    wiring = profile.pod_wiring(None, gpus, claim_template=dra.RUNTIME_TEMPLATE, imex_template=imex_template)
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
        # With namespace queues the runtime names none: Volcano's PodGroup webhook puts each TrainJob's PodGroup in
        # its namespace's queue (components/platform/volcano.py), so one cluster-wide runtime serves every team.
        queue=None if not sched.name or sched.namespace_queues else sched.default_queue,
        priority_class=tier if sched.name else None,
        topology_key=profile.nodes.affinity_key,
        imex_check=IMEX_CHECK if imex_template is not None else None,
        **_placement(profile, framework),
        checkpoint_claim=cp.claim if cp else None,
        checkpoint_mount=cp.mount_root if cp else "/checkpoints",
        preflight_config_map=pf.config_map if pf else None,
        namespaces=profile.namespaces,
        preflight_key=pf.key if pf else "preflight.sh",
        preflight_env=pod_preflight_env(profile, wiring, gpus, shm),
        max_restarts=trainer.max_restarts,
        pod_annotations=primary_interface(profile),
        nccl_inspector_image=profile.nccl_inspector_image,
        metrics_image=mirrors.under(versions.OPS_PYTHON_IMAGE, profile.image_mirror),
    )


def _placement(profile: Profile, framework: str) -> dict[str, Any]:
    """The runtime's place in the fabric topology (the platform's: a TrainJob cannot change its pods' annotations
    nor its PodGroup, kubeflow/trainer@v2.3.0 PodSpecPatch): Volcano's networkTopology or Kueue's annotations,
    the MPI launcher grouped with its nodes."""
    topology = profile.nodes.topology
    if topology is None:
        return {}
    placement = topology.default_placement
    if profile.scheduler.name == "volcano":
        return {"network_topology": job_topology.volcano_network_topology(placement, topology)}
    if profile.scheduler.name == "kueue":
        group = "launcher-and-nodes" if framework == "mpi" else None
        return {"topology_annotations": job_topology.kueue_annotations(placement, topology, group)}
    return {}


def runtime(profile: Profile, framework: str, tier: str | None) -> dict:
    """The ClusterTrainingRuntime `runtime_name(framework, tier)` of this cluster."""
    return build.cluster_training_runtime(
        runtime_name(framework, tier),
        framework,
        node_shape(profile, framework, tier),
        labels=k8s.labels(profile.cluster, RUNTIME_COMPONENT),
    )


# The fabric acceptance's own runtime (MPI, no gang restart): a size that fails fails the acceptance TrainJob, where
# the training runtimes would measure the whole series again maxRestarts times. A preemption still restarts it
# (the disruption rule ignores maxRestarts).
ACCEPTANCE_RUNTIME = f"{RUNTIME_PREFIX}-mpi-acceptance"


def acceptance_runtime(profile: Profile) -> dict:
    """The ClusterTrainingRuntime the v2 fabric acceptance names: the MPI runtime without restarts."""
    shape = replace(
        node_shape(profile, "mpi", DEFAULT_PRIORITY_CLASS if profile.scheduler.name else None), max_restarts=0
    )
    return build.cluster_training_runtime(
        ACCEPTANCE_RUNTIME, "mpi", shape, labels=k8s.labels(profile.cluster, RUNTIME_COMPONENT)
    )


def has_own_runtime(r: Resolved) -> bool:
    """A v2 job whose pods claim its ComputeDomain's IMEX channel names a TrainingRuntime of its own (own_runtime)."""
    return r.api == "v2" and r.wiring.imex_template is not None


def runtime_of(r: Resolved) -> str:
    """The runtime a TrainJob names: its own TrainingRuntime on a multi-node NVLink cluster, else the cluster's."""
    if has_own_runtime(r):
        return own_runtime_name(r)
    return runtime_name(V2_FRAMEWORK[r.spec.framework], r.priority_class)


def own_runtime_name(r: Resolved) -> str:
    return f"{r.spec.name}-runtime"


def _trainer_env(r: Resolved) -> list[dict]:
    """What the TrainJob adds to the runtime's env: the job's own variables and deliberate overrides (NCCL_DEBUG
    with debugNccl included), merged by name into the `node` container; secrets by reference."""
    base = node_shape(r.profile, V2_FRAMEWORK[r.spec.framework], r.priority_class, r.wiring.imex_template).wiring.env
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
    names = [controller.NODE] + ([controller.LAUNCHER] if spec.framework == "mpi" else [])
    pod = {"volumes": volumes, "containers": [{"name": controller.NODE, "volumeMounts": mounts}]}
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
        part = {build.GPU_RESOURCE: r.gpus, "memory": f"{r.memory_gib}Gi", "cpu": r.cpus}
        resources = {"limits": part, "requests": dict(part)}
    # Volcano: a queue other than the namespace's goes in the PodGroup through a runtime patch; Kueue's queue is
    # the TrainJob's label (job_meta).
    queue = r.queue if r.scheduler == "volcano" and r.queue != r.profile.scheduler.queue_of(r.namespace) else None
    if spec.framework == "pytorch":
        command = torchrun_command(spec.command)
    else:
        # mpirun as a child that SIGTERM reaches, and a failure held for MPI_FAILURE_GRACE (mpi_launcher_v2.sh).
        command = ["sh", "-c", MPI_LAUNCH, "mpirun", *mpirun_command(r)]
    job = build.train_job(
        spec.name,
        runtime_of(r),
        image=spec.image,
        command=command,
        num_nodes=spec.nodes,
        namespace=r.namespace,
        num_proc_per_node=r.gpus if spec.framework == "pytorch" else None,
        resources_per_node=resources,
        queue=queue,
        labels=job_meta(r)["labels"],
        runtime_kind="TrainingRuntime" if has_own_runtime(r) else "ClusterTrainingRuntime",
    )
    if env := _trainer_env(r):
        job["spec"]["trainer"]["env"] = env
    if patch := _volume_patch(r):
        patches = job["spec"].setdefault(
            "runtimePatches", [{"manager": build.PATCH_MANAGER, "trainingRuntimeSpec": {"template": {}}}]
        )
        patches[0]["trainingRuntimeSpec"]["template"]["spec"] = patch
    return job


def job_runtime(r: Resolved) -> dict:
    """The runtime a v2 job's TrainJob names (runtime_of)."""
    if has_own_runtime(r):
        return own_runtime(r)
    return runtime(r.profile, V2_FRAMEWORK[r.spec.framework], r.priority_class)


def own_runtime(r: Resolved, max_restarts: int | None = None) -> dict:
    """A v2 job's own TrainingRuntime on a multi-node NVLink cluster: the cluster runtime of its framework and tier
    whose pods claim the IMEX channel of the job's ComputeDomain. Trainer v2.3.0 lets a TrainJob add no claim (no
    `resourceClaimsPerNode`, KEP-2782, and a runtime patch takes none), and a cluster-wide runtime can only name one
    template for every job, where each job's domain makes its own (components/fabric/dra.py compute_domain)."""
    framework = V2_FRAMEWORK[r.spec.framework]
    labels = {**k8s.labels(r.profile.cluster, RUNTIME_COMPONENT), JOB_LABEL: r.spec.name}
    shape = node_shape(r.profile, framework, r.priority_class, imex_template=r.wiring.imex_template)
    if max_restarts is not None:
        shape = replace(shape, max_restarts=max_restarts)
    return build.cluster_training_runtime(own_runtime_name(r), framework, shape, labels=labels, namespace=r.namespace)
