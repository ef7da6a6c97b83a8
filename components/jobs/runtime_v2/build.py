"""Kubeflow Trainer v2 as fastpath publishes it: ClusterTrainingRuntimes wired for the fabric, and TrainJobs that
name them. Pure (no Pulumi imports): data in, plain dicts out.

    cluster_training_runtime(name, framework, node)   torch (torchrun), mpi (OpenMPI / DeepSpeed shape), plain
    train_job(name, runtime, ...)                     a TrainJob naming a runtime (per-job queue as a runtime patch)

What the kubeflow/trainer@v2.3.0 and kubernetes-sigs/jobset@v0.12.0 controllers make of the two is controller.py,
what a TrainJob took away judge.py. The MPI nodes' sshd and the launcher's wait for it are the shell programs
sshd.sh and mpi_hosts.sh beside this module.

Choices an experienced reader may look for:
- Everything the fabric needs sits where no TrainJob field replaces a whole object. `trainer.command` replaces the
  `node` container's command, so the preflight is an init container (a TrainJob cannot remove one), never a
  wrapper. `trainer.resourcesPerNode` merges per resource name, so RDMA resources survive a TrainJob that sets GPUs,
  CPU and memory, but not one that names them; `judge.override_problems` says so.
- Requests equal limits for every resource: a TrainJob that sets only a GPU limit is then visible as a mismatch
  (extended resources must be equal) instead of a pod the Job controller cannot create.
- Failure is a gang restart, sized by the runtime: node pods `Never`, Job `backoffLimit: 0`, a failed preflight
  (exit 3) fails the Job through `podFailurePolicy` and the JobSet through a `FailJobSet` rule; any other failure
  restarts every Job (`RestartJobSet`, `BlockingRecreate`: the old gang is gone before the new one asks Volcano for
  its GPUs) up to `maxRestarts`, and the job resumes from its checkpoint. torchrun's static rendezvous (what the
  torch plugin sets up) cannot take a lone replacement, so there is no per-pod restart.
- Volcano: the plugin creates the PodGroup and annotates pods with it, but sets no scheduler; the pod templates do.
  The queue is an annotation on the JobSet template (the runtime's default), a TrainJob changes it only with a
  runtime patch; TrainJob metadata is not propagated.
- The checkpoint claim is mounted with `subPathExpr` on the JobSet name, so every TrainJob writes to its own
  directory of the claim at the same path, without the runtime knowing job names.
- MPI ranks are started by sshd and do not inherit the pod's environment: the launcher forwards the fabric
  variables (`OMPI_MCA_mca_base_env_list`, Open MPI's `-x` as configuration).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from components import versions
from components.fabric import dra
from components.fabric.wiring import TORCHRUN_POD_ADDRESS, PodWiring, wire_pod
from components.jobs import telemetry
from components.jobs.runtime_v2.controller import (
    ANCESTOR_LABEL,
    LAUNCHER,
    MPI_HOSTFILE,
    MPI_HOSTFILE_VOLUME,
    MPI_SSH_VOLUME,
    NODE,
    QUEUE_ANNOTATION,
    TRAINER,
)
from components.jobs.shell import program

API_VERSION = "trainer.kubeflow.org/v1alpha1"
# kubernetes-sigs/jobset@v0.12.0:api/jobset/v1alpha2/jobset_types.go JobSetNameKey
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
PATCH_MANAGER = "fastpath.dev/jobs"
ROLE_LABEL = "fastpath.dev/role"
PREFLIGHT = "preflight"
IMEX = "imex"  # multi-node NVLink: the init container checking the IMEX channel (imex_check.sh)
PREFLIGHT_EXIT = 3
SSHD_PORT = 2222
# MPI pods run as root: IPC_LOCK (RDMA memory registration) is effective only for root, Kubernetes gives a non-root
# process no ambient capabilities. The trainer mounts the ssh Secret root-owned with id_rsa 0640
# (kubeflow/trainer@v2.3.0:pkg/constants/constants.go MPISSHPrivateKeyFileMode), and OpenSSH ignores a private key
# its own user owns that group or others can read (openssh/openssh-portable:authfile.c sshkey_perm_ok): every MPI
# pod therefore copies the key, 0600, to SSH_KEY and ssh is told to use that one.
SSH_MOUNT = "/root/.ssh"
SSH_KEY_DIR = "/run/fastpath-ssh"
SSH_KEY = f"{SSH_KEY_DIR}/id_rsa"
SSH_KEY_VOLUME = "fastpath-ssh"
SSH_OPTIONS = (
    f"-p {SSHD_PORT} -i {SSH_KEY} -o IdentitiesOnly=yes -o StrictHostKeyChecking=no "
    f"-o UserKnownHostsFile=/dev/null -o ConnectionAttempts=10"
)
MPI_HOSTS = "mpi-hosts"  # the launcher's init container that waits for every host's sshd
MPI_HOSTS_TIMEOUT = 900  # seconds: an image of tens of GB pulled on the slowest node
FAIL_RUN_EXIT = 3  # a container that cannot do its part on this node (preflight, no sshd): fails the run at once
FRAMEWORKS = ("torch", "mpi", "plain")
GPU_RESOURCE = "nvidia.com/gpu"
JOB_NAME_ENV = "FASTPATH_TRAINJOB"


# On a ClusterTrainingRuntime: the namespaces a TrainJob naming it must run in (comma-separated). Elsewhere its
# pods find no network attachment and no checkpoint claim and never start; the policy pack reads it.
SERVED_NAMESPACES = "fastpath.dev/namespaces"


@dataclass(frozen=True)
class NodeShape:
    """What every training node of a runtime is: the fabric wiring, sizing and placement. Resolved by the caller
    (the stack's profile); nothing here is derived again."""

    wiring: PodWiring
    """components.fabric.wiring.pod_wiring for a pod with `gpus` GPUs."""
    image: str
    """Default image of the `node` container (a TrainJob's `trainer.image` replaces it)."""
    gpus: int
    memory_gib: int
    """Memory limit = request, GiB; /dev/shm (tmpfs) is charged to it."""
    shm_gib: int
    cpus: int
    gpu_product: str
    """Node selector value of `nvidia.com/gpu.product`."""
    gpu_taint_key: str
    scheduler: str | None = "volcano"
    """The gang scheduler: `volcano` (pods' schedulerName and podGroupPolicy.volcano) or `kueue` (the default
    scheduler; Kueue admits the TrainJob by its labels). None: default scheduler, no gang."""
    queue: str | None = None
    """Default Volcano queue for TrainJobs naming this runtime."""
    network_topology: Mapping[str, object] | None = None
    """Volcano: the PodGroup's networkTopology (components/jobs/topology.py); None: none."""
    topology_annotations: Mapping[str, str] = field(default_factory=dict)
    """Kueue: every pod template's Topology Aware Scheduling annotations (components/jobs/topology.py)."""
    priority_class: str | None = None
    topology_key: str | None = None
    """Preferred pod affinity domain (rack, leaf); None: none."""
    imex_check: str | None = None
    """Multi-node NVLink: the program (components/jobs/imex_check.sh) the `imex` init container runs with the pod's
    GPUs and IMEX channel before anything else; None: none."""
    checkpoint_claim: str | None = None
    checkpoint_mount: str = "/checkpoints"
    preflight_config_map: str | None = None
    """ConfigMap holding the preflight script; None: no preflight."""
    preflight_key: str = "preflight.sh"
    preflight_env: Mapping[str, str] = field(default_factory=dict)
    """What the preflight checks (PREFLIGHT_GPUS, PREFLIGHT_RDMA_DEVICES, ...), as components.jobs.pod.preflight_env."""
    max_restarts: int = 3
    """Gang restarts (JobSet failurePolicy.maxRestarts) before the run fails."""
    nccl_inspector_image: str | None = None
    """Training-time telemetry (components/jobs/telemetry.py); None: off."""
    metrics_image: str = versions.OPS_PYTHON_IMAGE
    """The telemetry sidecar's (from the mirror on a disconnected cluster)."""
    ssh_mount_path: str = SSH_MOUNT
    """Where the trainer mounts the ssh Secret (mlPolicy.mpi.sshAuthMountPath): root's ~/.ssh, the user MPI pods
    run as."""
    launcher_extra_env: Mapping[str, str] = field(default_factory=dict)
    pod_annotations: Mapping[str, str] = field(default_factory=dict)
    namespaces: tuple[str, ...] = ()
    """The namespaces whose network attachments, claims and preflight the pods rely on (Multus and the volumes are
    resolved in the TrainJob's namespace), stated on the runtime as SERVED_NAMESPACES for the linter."""
    """Annotations beside the fabric's (fastpath.dev/primary-interface when the pod's primary is not eth0)."""


def _resources(shape: NodeShape) -> dict:
    """Without the fabric's devices: _pod wires them in (wire_pod)."""
    limits: dict = {GPU_RESOURCE: shape.gpus, "memory": f"{shape.memory_gib}Gi", "cpu": shape.cpus}
    return {"limits": limits, "requests": dict(limits)}


def _env(shape: NodeShape) -> list[dict]:
    env = [{"name": k, "value": v} for k, v in shape.wiring.env.items()]
    if shape.checkpoint_claim:
        env.append({"name": "CHECKPOINT_DIR", "value": shape.checkpoint_mount})
    return env


def _node_container(shape: NodeShape, command: list[str] | None = None) -> dict:
    container: dict = {"name": NODE, "image": shape.image}
    if command:
        container["command"] = list(command)
    container["env"] = _env(shape)
    container["resources"] = _resources(shape)
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}]
    if shape.checkpoint_claim:
        # One directory per TrainJob: the JobSet (= TrainJob) name, from the label JobSet puts on every pod.
        container["env"].insert(
            0,
            {"name": JOB_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{JOBSET_NAME_LABEL}']"}}},
        )
        mounts.append({"name": "checkpoints", "mountPath": shape.checkpoint_mount, "subPathExpr": f"$({JOB_NAME_ENV})"})
    container["volumeMounts"] = mounts
    container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    return container


def _preflight(shape: NodeShape) -> dict:
    """The preflight as an init container with the node's GPUs and rail devices (the kubelet hands them on to
    `node`); a failed check exits 3, which the Job's podFailurePolicy turns into a failed run."""
    small = {**_resources(shape)["limits"], "memory": "256Mi", "cpu": 1}
    return {
        "name": PREFLIGHT,
        "image": shape.image,
        "command": ["sh", "-c", f'sh "$0" || exit {PREFLIGHT_EXIT}', f"/fastpath/{shape.preflight_key}"],
        "env": [{"name": k, "value": v} for k, v in shape.preflight_env.items()],
        "resources": {"limits": small, "requests": dict(small)},
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": PREFLIGHT, "mountPath": "/fastpath", "readOnly": True},
        ],
    }


def _imex(shape: NodeShape, program: str) -> dict:
    """The IMEX channel and the GPUs' fabric checked first, an init container as the preflight is (a TrainJob's
    command replaces the node container's, so no wrapper there would hold): exit 3 fails the run."""
    small = {**_resources(shape)["limits"], "memory": "256Mi", "cpu": 1}
    return {
        "name": IMEX,
        "image": shape.image,
        "command": ["sh", "-c", program, "fastpath-imex", "true"],
        "resources": {"limits": small, "requests": dict(small)},
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def _pod(shape: NodeShape, container: dict, role: str) -> dict:
    volumes: list[dict] = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{shape.shm_gib}Gi"}}]
    if shape.checkpoint_claim:
        volumes.append({"name": "checkpoints", "persistentVolumeClaim": {"claimName": shape.checkpoint_claim}})
    spec: dict = {"restartPolicy": "Never"}
    inits = [_imex(shape, shape.imex_check)] if shape.imex_check else []
    if shape.preflight_config_map and shape.wiring.capabilities:
        volumes.append({"name": PREFLIGHT, "configMap": {"name": shape.preflight_config_map}})
        inits.append(_preflight(shape))
    if inits:
        spec["initContainers"] = inits
    spec["containers"] = [container]
    spec["volumes"] = volumes
    spec["nodeSelector"] = {"nvidia.com/gpu.product": shape.gpu_product}
    spec["tolerations"] = [{"key": shape.gpu_taint_key, "operator": "Exists", "effect": "NoSchedule"}]
    # One pod per node and job: each owns its node's GPUs and rails. matchLabelKeys scopes the term to the pod's
    # own JobSet without the runtime knowing its name.
    selector = {"matchLabels": {ROLE_LABEL: NODE}}
    affinity: dict = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": selector,
                    "matchLabelKeys": [JOBSET_NAME_LABEL],
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }
    if shape.topology_key:
        term = {"labelSelector": selector, "matchLabelKeys": [JOBSET_NAME_LABEL], "topologyKey": shape.topology_key}
        affinity["podAffinity"] = {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": term}]
        }
    if shape.wiring.imex_template is not None:
        # Multi-node NVLink: the whole run in the clique of its IMEX channel (the first pod matches its own term, so
        # it may start the clique).
        term = {"labelSelector": selector, "matchLabelKeys": [JOBSET_NAME_LABEL], "topologyKey": dra.CLIQUE_LABEL}
        affinity.setdefault("podAffinity", {})["requiredDuringSchedulingIgnoredDuringExecution"] = [term]
    spec["affinity"] = affinity
    if shape.scheduler == "volcano":
        spec["schedulerName"] = shape.scheduler  # the volcano plugin sets none
    if shape.priority_class:
        spec["priorityClassName"] = shape.priority_class
    metadata: dict = {"labels": {ROLE_LABEL: role}}
    if annotations := {**shape.pod_annotations, **shape.topology_annotations}:
        metadata["annotations"] = annotations
    pod = {"metadata": metadata, "spec": spec}
    wire_pod(shape.wiring, pod, [container, *spec.get("initContainers", [])])
    telemetry.wire(spec, [container], shape.nccl_inspector_image, shape.metrics_image)
    return pod


# What the shell programs beside this module share with the manifests, by the __NAME__ they spell it with.
_PROGRAM_VALUES = {
    "FAIL_RUN_EXIT": FAIL_RUN_EXIT,
    "LAUNCHER": LAUNCHER,
    "MPI_HOSTFILE": MPI_HOSTFILE,
    "MPI_HOSTS_TIMEOUT": MPI_HOSTS_TIMEOUT,
    "SSHD_PORT": SSHD_PORT,
    "SSH_KEY": SSH_KEY,
    "SSH_KEY_DIR": SSH_KEY_DIR,
    "SSH_OPTIONS": SSH_OPTIONS,
}
SSHD = program(Path(__file__).with_name("sshd.sh"), _PROGRAM_VALUES)  # the MPI `node` container
MPI_HOSTS_SCRIPT = program(Path(__file__).with_name("mpi_hosts.sh"), _PROGRAM_VALUES)  # the init container MPI_HOSTS


def _mpi_key_volume() -> dict:
    return {"name": SSH_KEY_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}


def _mpi_hosts(shape: NodeShape) -> dict:
    """The launcher's init container (MPI_HOSTS_SCRIPT): every host's sshd takes a login before the TrainJob's
    mpirun starts. Not JobSet `dependsOn: node Ready`: the launcher would not exist until the nodes are Ready, while
    Volcano places none of them until the whole gang, launcher included, exists
    (volcano-sh/volcano@v1.15.1:pkg/scheduler/plugins/gang/gang.go validJobFn). An init container holds the
    TrainJob's command back wherever it comes from (a TrainJob replaces the container's command, it cannot remove
    an init container).

    It mounts the hostfile and ssh Secret volumes the mpi plugin adds to the launcher pod by name
    (kubeflow/trainer@v2.3.0:pkg/runtime/framework/plugins/mpi/mpi.go EnforceMLPolicy: `mpi-hostfile` on the
    launcher, `mpi-ssh-auth` on both), and hands the 0600 key to the launcher's `node` container through an
    emptyDir."""
    small = {"cpu": 1, "memory": "256Mi"}
    return {
        "name": MPI_HOSTS,
        "image": shape.image,
        "command": ["sh", "-c", MPI_HOSTS_SCRIPT, shape.ssh_mount_path],
        "env": [
            {"name": JOB_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{JOBSET_NAME_LABEL}']"}}}
        ],
        "resources": {"limits": small, "requests": dict(small)},
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": MPI_HOSTFILE_VOLUME, "mountPath": MPI_HOSTFILE.rsplit("/", 1)[0]},
            {"name": MPI_SSH_VOLUME, "mountPath": shape.ssh_mount_path},
            {"name": SSH_KEY_VOLUME, "mountPath": SSH_KEY_DIR},
        ],
    }


def _fail_run_rules(containers: list[str]) -> list[dict]:
    return [
        {"action": "FailJob", "onExitCodes": {"containerName": c, "operator": "In", "values": [FAIL_RUN_EXIT]}}
        for c in containers
    ]


# Cluster-made disruptions: Volcano's preempt and reclaim set it before deleting a pod
# (volcano-sh/volcano@v1.15.1:pkg/scheduler/cache/cache.go defaultEvictor.Evict), so do taint eviction, node-pressure
# eviction, the Eviction API (a drain) and PodGC. FailJob turns it into reason PodFailurePolicy with a message
# naming the condition, which the JobSet rule `disruption` restarts without spending the budget.
DISRUPTION_RULE = {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
# The condition the reaper (components/ops/reaper.py) sets on a pod that could not start (a bad image, a missing
# Secret or volume): the Job fails at once, and the run with it (START_FAILED_PATTERN), not a gang restart that
# would be stuck the same way.
START_FAILED_CONDITION = "fastpath.dev/StartFailed"
START_FAILED_RULE = {"action": "FailJob", "onPodConditions": [{"type": START_FAILED_CONDITION, "status": "True"}]}


def _job(pod: dict, shape: NodeShape, ancestor: str | None, fail_run: list[str] | None = None) -> dict:
    spec: dict = {"backoffLimit": 0}
    inits = [c["name"] for c in pod["spec"].get("initContainers", [])]
    fatal = [c for c in (IMEX, PREFLIGHT) if c in inits]
    # kubernetes/kubernetes pkg/controller/job/pod_failure_policy.go matchPodFailurePolicy: rules in order, init
    # containers' exit codes included; a podFailurePolicy needs restartPolicy Never, which every pod has.
    spec["podFailurePolicy"] = {
        "rules": [*_fail_run_rules(fatal + (fail_run or [])), START_FAILED_RULE, DISRUPTION_RULE]
    }
    spec["template"] = pod
    job: dict = {"spec": spec}
    if ancestor:
        job = {"metadata": {"labels": {ANCESTOR_LABEL: ancestor}}, **job}
    return job


# The Job condition messages the rules match (kubernetes/kubernetes pkg/controller/job/pod_failure_policy.go
# matchPodFailurePolicy: "Container %s for pod %s/%s failed with exit code %v matching %v rule at index %d" and
# "Pod %s/%s has condition %v matching %v rule at index %d"); JobSet matches them unanchored
# (kubernetes-sigs/jobset@v0.12.0:pkg/controllers/failure_policy.go anyMatchFound, regexp.MatchString).
def fail_run_pattern(containers: list[str]) -> str:
    return (
        f"^Container ({'|'.join(containers)}) for pod \\S+ failed with exit code {FAIL_RUN_EXIT} matching FailJob rule"
    )


DISRUPTION_PATTERN = "^Pod \\S+ has condition DisruptionTarget matching FailJob rule"
START_FAILED_PATTERN = f"^Pod \\S+ has condition {START_FAILED_CONDITION} matching FailJob rule"


def _failure_policy(fatal: list[str], max_restarts: int) -> dict:
    """`fatal`: the containers whose FAIL_RUN_EXIT fails the run. First rule first: a broken node fails the run
    (another attempt lands on the same node), a disruption the cluster made restarts the gang without spending
    `maxRestarts` (kubernetes-sigs/jobset@v0.12.0:api/jobset/v1alpha2/jobset_types.go FailurePolicyRule,
    RestartJobSetAndIgnoreMaxRestarts), anything else (a crash, an OOM kill) is the default RestartJobSet."""
    rules = []
    if fatal:
        rules.append(
            {
                "name": "preflight",
                "action": "FailJobSet",
                "onJobFailureReasons": ["PodFailurePolicy"],
                "onJobFailureMessagePatterns": [fail_run_pattern(fatal)],
            }
        )
    rules.append(
        {
            "name": "start_failed",
            "action": "FailJobSet",
            "onJobFailureReasons": ["PodFailurePolicy"],
            "onJobFailureMessagePatterns": [START_FAILED_PATTERN],
        }
    )
    rules.append(
        {
            "name": "disruption",
            "action": "RestartJobSetAndIgnoreMaxRestarts",
            "onJobFailureReasons": ["PodFailurePolicy"],
            "onJobFailureMessagePatterns": [DISRUPTION_PATTERN],
        }
    )
    return {"maxRestarts": max_restarts, "restartStrategy": "BlockingRecreate", "rules": rules}


def cluster_training_runtime(
    name: str,
    framework: str,
    node: NodeShape,
    labels: Mapping[str, str] | None = None,
    namespace: str | None = None,
) -> dict:
    """A ClusterTrainingRuntime whose pods are on the fast path; with `namespace`, a TrainingRuntime there (one job's
    own: what only that job's pods may claim, its ComputeDomain's IMEX channel).

    torch: one replicated job `node` (ancestor trainer); the TrainJob's command starts `torchrun`, which reads the
    PET_* variables the torch plugin sets (static rendezvous at `<job>-node-0-0.<job>:29500`).
    mpi: the upstream DeepSpeed shape: `node` pods run sshd, the `launcher` (ancestor trainer, container `node`)
    runs the TrainJob's `mpirun` and is itself a rank host (runLauncherAsNode); a run of N nodes is N GPU pods.
    plain: one replicated job `node`; the TrainJob's command runs as given on every node (no launcher env).
    """
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework {framework!r}: expected one of {', '.join(FRAMEWORKS)}")
    spec: dict = {}
    template_spec: dict = {}
    fatal = [IMEX] if node.imex_check else []
    fatal += [PREFLIGHT] if node.preflight_config_map and node.wiring.capabilities else []
    if framework == "mpi":
        launcher_env = dict(node.launcher_extra_env)
        # ssh to the nodes' sshd on SSHD_PORT with the 0600 key, for every mpirun a TrainJob runs: the agent
        # carries the options (Open MPI splits it into argv: open-mpi/ompi v4.1.x orte/mca/plm/rsh/
        # plm_rsh_module.c orte_plm_rsh_search), since OMPI_MCA_plm_rsh_args is the mpi plugin's, reserved and
        # overwritten. Open MPI 5 (PRRTE) reads none of the ORTE names the plugin sets: their PRRTE names too.
        # The MPI pods run as root (one ssh identity); Open MPI 4 and 5 refuse to start as root without these, and a
        # researcher's plain `mpirun` does not pass --allow-run-as-root.
        launcher_env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        launcher_env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
        launcher_env["OMPI_MCA_plm_rsh_agent"] = f"ssh {SSH_OPTIONS}"
        launcher_env["PRTE_MCA_plm_ssh_agent"] = f"ssh {SSH_OPTIONS}"
        launcher_env["PRTE_MCA_plm_ssh_args"] = "-o ConnectionAttempts=10"
        launcher_env["PRTE_MCA_prte_default_hostfile"] = MPI_HOSTFILE
        launcher_env["PRTE_MCA_prte_keep_fqdn_hostnames"] = "true"
        launcher_env["PRTE_MCA_prte_set_default_slots"] = str(node.gpus)
        launcher_env["OMPI_MCA_mca_base_env_list"] = ";".join(
            [*node.wiring.env, *(["CHECKPOINT_DIR"] if node.checkpoint_claim else [])]
        )
        spec["mlPolicy"] = {
            "numNodes": 1,
            "mpi": {
                "numProcPerNode": node.gpus,
                "mpiImplementation": "OpenMPI",
                "sshAuthMountPath": node.ssh_mount_path,
                "runLauncherAsNode": True,
            },
        }
        sshd = _node_container(node, ["sh", "-c", SSHD, node.ssh_mount_path])
        sshd["readinessProbe"] = {"tcpSocket": {"port": SSHD_PORT}, "initialDelaySeconds": 5}
        sshd["volumeMounts"].append({"name": SSH_KEY_VOLUME, "mountPath": SSH_KEY_DIR})
        launcher = _node_container(node)
        launcher["env"] += [{"name": k, "value": v} for k, v in launcher_env.items()]
        launcher["volumeMounts"].append({"name": SSH_KEY_VOLUME, "mountPath": SSH_KEY_DIR, "readOnly": True})
        launcher_pod = _pod(node, launcher, NODE)
        launcher_pod["spec"]["initContainers"] = [*launcher_pod["spec"].get("initContainers", []), _mpi_hosts(node)]
        node_pod = _pod(node, sshd, NODE)
        for pod in (launcher_pod, node_pod):
            pod["spec"]["volumes"].append(_mpi_key_volume())
            # Explicit, whatever the image's USER: root's ~/.ssh is where the key is mounted, and only root keeps
            # IPC_LOCK.
            pod["spec"]["securityContext"] = {"runAsUser": 0, "runAsGroup": 0}
        # No `dependsOn` on the launcher: MPI_HOSTS_SCRIPT waits instead (_mpi_hosts says why).
        template_spec["network"] = {"publishNotReadyAddresses": True}
        template_spec["successPolicy"] = {"operator": "All", "targetReplicatedJobs": [LAUNCHER]}
        template_spec["replicatedJobs"] = [
            {"name": NODE, "template": _job(node_pod, node, None, [NODE])},
            {"name": LAUNCHER, "template": _job(launcher_pod, node, TRAINER, [MPI_HOSTS])},
        ]
        fatal += [NODE, MPI_HOSTS]
    else:
        spec["mlPolicy"] = {"numNodes": 1, **({"torch": {}} if framework == "torch" else {})}
        trainer_node = _node_container(node)
        if framework == "torch" and node.wiring.host_network:
            trainer_node["env"].append(dict(TORCHRUN_POD_ADDRESS))
        template_spec["replicatedJobs"] = [
            {"name": NODE, "template": _job(_pod(node, trainer_node, NODE), node, TRAINER)}
        ]
    if node.scheduler == "volcano":
        spec["podGroupPolicy"] = {
            "volcano": {"networkTopology": dict(node.network_topology)} if node.network_topology else {}
        }
    template_spec["failurePolicy"] = _failure_policy(fatal, node.max_restarts)
    # No ttlSecondsAfterFinished: kubeflow-trainer v2.3.0 creates a failed run's deleted JobSet again (config.py
    # TrainerConfig refuses one), so a finished run keeps its JobSet until its TrainJob is deleted.
    template: dict = {}
    if node.queue and node.scheduler == "volcano":
        template["metadata"] = {"annotations": {QUEUE_ANNOTATION: node.queue}}
    template["spec"] = template_spec
    spec["template"] = template
    metadata: dict = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    metadata["labels"] = {"trainer.kubeflow.org/framework": framework, **(labels or {})}
    if node.namespaces and not namespace:
        metadata["annotations"] = {SERVED_NAMESPACES: ",".join(node.namespaces)}
    kind = "TrainingRuntime" if namespace else "ClusterTrainingRuntime"
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": metadata, "spec": spec}


def train_job(
    name: str,
    runtime: str,
    *,
    image: str | None = None,
    command: list[str] | None = None,
    args: list[str] | None = None,
    num_nodes: int | None = None,
    namespace: str | None = None,
    env: Mapping[str, str] | None = None,
    num_proc_per_node: int | None = None,
    resources_per_node: dict | None = None,
    queue: str | None = None,
    labels: Mapping[str, str] | None = None,
    runtime_kind: str = "ClusterTrainingRuntime",
) -> dict:
    """A TrainJob naming the ClusterTrainingRuntime `runtime` (or, by `runtime_kind`, the TrainingRuntime of its
    namespace). A queue other than the runtime's goes in as a runtime patch of fastpath's own (the only way a
    TrainJob reaches the PodGroup's queue)."""
    trainer: dict = {}
    if image:
        trainer["image"] = image
    if command:
        trainer["command"] = list(command)
    if args:
        trainer["args"] = list(args)
    if env:
        trainer["env"] = [{"name": k, "value": v} for k, v in env.items()]
    if num_nodes is not None:
        trainer["numNodes"] = num_nodes
    if num_proc_per_node is not None:
        trainer["numProcPerNode"] = num_proc_per_node
    if resources_per_node:
        trainer["resourcesPerNode"] = copy.deepcopy(resources_per_node)
    spec: dict = {"runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": runtime_kind, "name": runtime}}
    if trainer:
        spec["trainer"] = trainer
    if queue:
        spec["runtimePatches"] = [
            {
                "manager": PATCH_MANAGER,
                "trainingRuntimeSpec": {"template": {"metadata": {"annotations": {QUEUE_ANNOTATION: queue}}}},
            }
        ]
    metadata: dict = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    if labels:
        metadata["labels"] = dict(labels)
    return {"apiVersion": API_VERSION, "kind": "TrainJob", "metadata": metadata, "spec": spec}
