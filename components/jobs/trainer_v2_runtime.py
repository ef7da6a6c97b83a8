"""Kubeflow Trainer v2: ClusterTrainingRuntimes wired for the fabric, TrainJobs that name them, and the pod the
controller really makes from the two. Pure (no Pulumi imports): data in, plain dicts out.

Read at kubeflow/trainer@v2.3.0 and kubernetes-sigs/jobset@v0.12.0 (../notes/trainer-v2.md has the paths):

    cluster_training_runtime(name, framework, node)   torch (torchrun), mpi (OpenMPI / DeepSpeed shape), plain
    train_job(name, runtime, ...)                     a TrainJob naming a runtime (per-job queue as a runtime patch)
    effective_jobset(train_job, runtime)              the JobSet spec and PodGroup the controller derives
    effective_pod(train_job, runtime)                 the trainer pod of that JobSet, for lint and the contract
    override_problems(train_job, runtime)             the fabric wiring the TrainJob took away, one message each

Choices an experienced reader may look for:
- Everything the fabric needs sits where no TrainJob field replaces a whole object. `trainer.command` replaces the
  `node` container's command, so the preflight is an init container (a TrainJob cannot remove one), never a
  wrapper. `trainer.resourcesPerNode` merges per resource name, so RDMA resources survive a TrainJob that sets GPUs,
  CPU and memory, but not one that names them; `override_problems` says so.
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
import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from components.fabric.wiring import (
    HOST_NETWORK_POD,
    NETWORKS_ANNOTATION,
    PLATFORM_OWNED,
    TORCHRUN_POD_ADDRESS,
    PodWiring,
)

API_VERSION = "trainer.kubeflow.org/v1alpha1"
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"  # T:pkg/constants/constants.go
TRAINER = "trainer"
NODE = "node"  # the trainer's replicated job and container; also the MPI launcher's container
LAUNCHER = "launcher"
TRAINER_PORT = 29500  # constants.ContainerTrainerPort: PET_MASTER_PORT
QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"  # volcanov1beta1.KubeGroupNameAnnotationKey
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"  # J:api/jobset/v1alpha2/jobset_types.go JobSetNameKey
PATCH_MANAGER = "fastpath.dev/jobs"
ROLE_LABEL = "fastpath.dev/role"
PREFLIGHT = "preflight"
PREFLIGHT_EXIT = 3
MPI_HOSTFILE = "/etc/mpi/hostfile"
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
MPI_HOSTFILE_VOLUME = "mpi-hostfile"  # T:pkg/constants/constants.go MPIHostfileVolumeName (added by the mpi plugin)
MPI_SSH_VOLUME = "mpi-ssh-auth"  # MPISSHAuthVolumeName
FAIL_RUN_EXIT = 3  # a container that cannot do its part on this node (preflight, no sshd): fails the run at once
FRAMEWORKS = ("torch", "mpi", "plain")
GPU_RESOURCE = "nvidia.com/gpu"
CORE_RESOURCES = ("cpu", "memory", "ephemeral-storage", GPU_RESOURCE)
JOB_NAME_ENV = "FASTPATH_TRAINJOB"
# Platform-owned names that set how much NCCL logs, not how it reaches the fabric: fastpath's own jobs raise them
# (debugNccl, the acceptance run, whose log ncclcheck reads), so a TrainJob changing them takes no wiring away.
LOGGING_ENV = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS")


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
    """Pod schedulerName; `volcano` also turns on podGroupPolicy.volcano. None: default scheduler, no gang."""
    queue: str | None = None
    """Default Volcano queue for TrainJobs naming this runtime."""
    priority_class: str | None = None
    topology_key: str | None = None
    """Preferred pod affinity domain (rack, leaf); None: none."""
    checkpoint_claim: str | None = None
    checkpoint_mount: str = "/checkpoints"
    preflight_config_map: str | None = None
    """ConfigMap holding the preflight script; None: no preflight."""
    preflight_key: str = "preflight.sh"
    preflight_env: Mapping[str, str] = field(default_factory=dict)
    """What the preflight checks (PREFLIGHT_GPUS, PREFLIGHT_RDMA_DEVICES, ...), as training_job.preflight_env."""
    max_restarts: int = 3
    """Gang restarts (JobSet failurePolicy.maxRestarts) before the run fails."""
    ttl_seconds_after_finished: int | None = None
    """Delete the JobSet (pods, logs) this long after it ends; None: kept until the TrainJob is deleted."""
    ssh_mount_path: str = SSH_MOUNT
    """Where the trainer mounts the ssh Secret (mlPolicy.mpi.sshAuthMountPath): root's ~/.ssh, the user MPI pods
    run as."""
    launcher_extra_env: Mapping[str, str] = field(default_factory=dict)
    pod_annotations: Mapping[str, str] = field(default_factory=dict)
    """Annotations beside the fabric's (fastpath.dev/primary-interface when the pod's primary is not eth0)."""


# ------------------------------------------------------------------------------------------- runtimes


def _resources(shape: NodeShape) -> dict:
    limits: dict = {GPU_RESOURCE: shape.gpus, "memory": f"{shape.memory_gib}Gi", "cpu": shape.cpus}
    limits.update(shape.wiring.resources)
    return {"limits": limits, "requests": dict(limits)}


def _security(shape: NodeShape) -> dict:
    return {"capabilities": {"add": list(shape.wiring.capabilities)}} if shape.wiring.capabilities else {}


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
    if sec := _security(shape):
        container["securityContext"] = sec
    container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    return container


def _preflight(shape: NodeShape) -> dict:
    """The preflight as an init container with the node's GPUs and rail devices (the kubelet hands them on to
    `node`); a failed check exits 3, which the Job's podFailurePolicy turns into a failed run."""
    small = {**_resources(shape)["limits"], "memory": "256Mi", "cpu": 1}
    container: dict = {
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
    if sec := _security(shape):
        container["securityContext"] = sec
    return container


def _pod(shape: NodeShape, container: dict, role: str) -> dict:
    volumes: list[dict] = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{shape.shm_gib}Gi"}}]
    if shape.checkpoint_claim:
        volumes.append({"name": "checkpoints", "persistentVolumeClaim": {"claimName": shape.checkpoint_claim}})
    spec: dict = {"restartPolicy": "Never"}
    if shape.preflight_config_map and shape.wiring.capabilities:
        volumes.append({"name": PREFLIGHT, "configMap": {"name": shape.preflight_config_map}})
        spec["initContainers"] = [_preflight(shape)]
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
    spec["affinity"] = affinity
    if shape.scheduler:
        spec["schedulerName"] = shape.scheduler  # the volcano plugin sets none
    if shape.priority_class:
        spec["priorityClassName"] = shape.priority_class
    if shape.wiring.host_network:  # the JobSet's headless names (torch master, MPI hostfile) must resolve
        spec.update(HOST_NETWORK_POD)
    metadata: dict = {"labels": {ROLE_LABEL: role}}
    if notes := {**shape.wiring.annotations, **shape.pod_annotations}:
        metadata["annotations"] = notes
    return {"metadata": metadata, "spec": spec}


# The MPI `node` container (a TrainJob cannot replace it: its image, command and args reach only the launcher). The
# image needs openssh-server and openssh-client, no prepared configuration: host keys are made at start, every
# option is on the command line (they win over the image's sshd_config, which `-f /dev/null` skips anyway), root
# logs in with the trainer's key only, StrictModes off because the key files are the Secret's (root-owned, 0644).
# SetEnv (server side since OpenSSH 7.8) hands the image's PATH and LD_LIBRARY_PATH to the sessions Open MPI
# starts, which otherwise get sshd's compiled-in PATH and find no `orted`/`prted`. sshd re-executes itself and so
# must be started by its absolute path. A missing tool exits FAIL_RUN_EXIT at once: the run fails with the reason,
# no restart.
# The options are tried first (`sshd -t`): an sshd that refuses them would otherwise exit 255 and restart the gang
# maxRestarts times for nothing. sshd runs as a child, never exec'd: it exits 0 on SIGTERM, and a pod that ends
# Succeeded after an eviction or a preemption is not a failure the Job's podFailurePolicy can see (its
# DisruptionTarget rule would never match, and the restart would be charged to maxRestarts through the launcher
# instead): SIGTERM is answered with 143 from the first line on, and an sshd that ends by itself fails the pod.
SSHD = f"""\
trap 'exit 143' TERM INT
export PATH="$PATH:/usr/sbin:/sbin"
for tool in sshd ssh-keygen ssh; do
  command -v "$tool" >/dev/null 2>&1 || {{
    echo "fastpath: no $tool in this image: the MPI runtime's nodes need openssh-server and openssh-client \
(fastpath:platform.trainer.mpiImage)" >&2; exit {FAIL_RUN_EXIT}; }}
done
mkdir -p /run/sshd {SSH_KEY_DIR}
cp "$0/id_rsa" {SSH_KEY} && chmod 600 {SSH_KEY}
ssh-keygen -A >/dev/null
set -- -f /dev/null -p {SSHD_PORT} -o PermitRootLogin=prohibit-password -o AuthorizedKeysFile="$0/authorized_keys" \
  -o StrictModes=no -o PasswordAuthentication=no -o "SetEnv=PATH=$PATH LD_LIBRARY_PATH=${{LD_LIBRARY_PATH:-}}"
err=$("$(command -v sshd)" -t "$@" 2>&1) || {{
  echo "fastpath: this image's sshd refuses fastpath's options (OpenSSH 7.8 or later is needed): $err" >&2
  exit {FAIL_RUN_EXIT}; }}
"$(command -v sshd)" -De "$@" &
sshd=$!
trap 'kill -TERM "$sshd" 2>/dev/null; wait "$sshd"; exit 143' TERM INT
wait "$sshd"
rc=$?
echo "fastpath: sshd exited $rc" >&2
[ "$rc" -ne 0 ] || rc=1
exit "$rc"
"""

# The launcher's init container: every host of the hostfile but the launcher itself must take an ssh login before
# the TrainJob's mpirun starts. Not JobSet `dependsOn: node Ready`: the launcher would not exist until the nodes are
# Ready, while Volcano places none of them until the whole gang, launcher included, exists
# (volcano-sh/volcano@v1.15.1:pkg/scheduler/plugins/gang/gang.go validJobFn). An init container holds the TrainJob's
# command back wherever it comes from (a TrainJob replaces the container's command, it cannot remove an init
# container), and a real login also proves the image's ssh end to end. Bounded: a host that never answers fails the
# launcher with the last ssh error, and the gang restarts.
MPI_HOSTS_SCRIPT = f"""\
export PATH="$PATH:/usr/sbin:/sbin"
command -v ssh >/dev/null 2>&1 || {{
  echo "fastpath: no ssh client in this image (fastpath:platform.trainer.mpiImage needs openssh-client)" >&2
  exit {FAIL_RUN_EXIT}; }}
mkdir -p {SSH_KEY_DIR} && cp "$0/id_rsa" {SSH_KEY} && chmod 600 {SSH_KEY}
deadline=$(( $(date +%s) + {MPI_HOSTS_TIMEOUT} ))
for host in $(awk '{{print $1}}' {MPI_HOSTFILE}); do
  case "$host" in "$FASTPATH_TRAINJOB-{LAUNCHER}-"*) continue;; esac
  until err=$(ssh {SSH_OPTIONS} -o BatchMode=yes -o ConnectTimeout=5 "$host" true 2>&1); do
    [ "$(date +%s)" -lt "$deadline" ] || {{
      echo "fastpath: $host took no ssh login on port {SSHD_PORT} within {MPI_HOSTS_TIMEOUT}s: $err" >&2; exit 1; }}
    sleep 5
  done
done
"""


def _mpi_key_volume() -> dict:
    return {"name": SSH_KEY_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}


def _mpi_hosts(shape: NodeShape) -> dict:
    """The launcher's init container (MPI_HOSTS_SCRIPT). It mounts the hostfile and ssh Secret volumes the mpi
    plugin adds to the launcher pod by name (kubeflow/trainer@v2.3.0:pkg/runtime/framework/plugins/mpi/mpi.go
    EnforceMLPolicy: `mpi-hostfile` on the launcher, `mpi-ssh-auth` on both), and hands the 0600 key to the
    launcher's `node` container through an emptyDir."""
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


def _job(pod: dict, shape: NodeShape, ancestor: str | None, fail_run: list[str] | None = None) -> dict:
    spec: dict = {"backoffLimit": 0}
    inits = [c["name"] for c in pod["spec"].get("initContainers", [])]
    fatal = [PREFLIGHT] if PREFLIGHT in inits else []
    # kubernetes/kubernetes pkg/controller/job/pod_failure_policy.go matchPodFailurePolicy: rules in order, init
    # containers' exit codes included; a podFailurePolicy needs restartPolicy Never, which every pod has.
    spec["podFailurePolicy"] = {"rules": [*_fail_run_rules(fatal + (fail_run or [])), DISRUPTION_RULE]}
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
            "name": "disruption",
            "action": "RestartJobSetAndIgnoreMaxRestarts",
            "onJobFailureReasons": ["PodFailurePolicy"],
            "onJobFailureMessagePatterns": [DISRUPTION_PATTERN],
        }
    )
    return {"maxRestarts": max_restarts, "restartStrategy": "BlockingRecreate", "rules": rules}


def cluster_training_runtime(
    name: str, framework: str, node: NodeShape, labels: Mapping[str, str] | None = None
) -> dict:
    """A ClusterTrainingRuntime whose pods are on the fast path.

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
    fatal = [PREFLIGHT] if node.preflight_config_map and node.wiring.capabilities else []
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
        # No `dependsOn` on the launcher: MPI_HOSTS_SCRIPT waits instead (why there).
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
        spec["podGroupPolicy"] = {"volcano": {}}
    template_spec["failurePolicy"] = _failure_policy(fatal, node.max_restarts)
    if node.ttl_seconds_after_finished is not None:
        template_spec["ttlSecondsAfterFinished"] = node.ttl_seconds_after_finished
    template: dict = {}
    if node.queue and node.scheduler == "volcano":
        template["metadata"] = {"annotations": {QUEUE_ANNOTATION: node.queue}}
    template["spec"] = template_spec
    spec["template"] = template
    metadata: dict = {"name": name, "labels": {"trainer.kubeflow.org/framework": framework, **(labels or {})}}
    return {"apiVersion": API_VERSION, "kind": "ClusterTrainingRuntime", "metadata": metadata, "spec": spec}


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
) -> dict:
    """A TrainJob naming the ClusterTrainingRuntime `runtime`. A queue other than the runtime's goes in as a
    runtime patch of fastpath's own (the only way a TrainJob reaches the PodGroup's queue)."""
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
    spec: dict = {"runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": runtime}}
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


# ------------------------------------------------------------------------------------------- the merge

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
    """T:pkg/apply/apply.go upsert: replace in place by key, else append."""
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
    """T:pkg/util/trainingruntime/trainingruntime.go MergeResourceRequirements: limits and requests per key."""
    out = copy.deepcopy(base)
    for part in ("limits", "requests"):
        if override.get(part):
            out[part] = {**out.get(part, {}), **override[part]}
    if override.get("claims"):
        out["claims"] = strategic_merge(out.get("claims", []), override["claims"], "volumes")
    return out


def _ancestor(rjob: dict) -> str | None:
    return ((rjob["template"].get("metadata") or {}).get("labels") or {}).get(ANCESTOR_LABEL)


def _containers(pod_spec: dict, name: str) -> list[dict]:
    return [c for c in pod_spec.get("containers", []) if c["name"] == name]


def _gpus(resources: dict) -> int:
    """T:pkg/runtime/runtime.go GetNumGPUPerNode: the first resource naming "gpu", requests before limits."""
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


def effective_jobset(train_job: dict, runtime: dict) -> dict:
    """What the v2.3.0 controller builds from `train_job` and `runtime`: {"jobset": spec, "podGroup": spec or
    None, "counts": {replicated job: pods}}. Follows T:pkg/runtime/core/trainingruntime.go newRuntimeInfo, the
    torch / mpi / plainml / volcano plugins' EnforceMLPolicy and Build, and jobset/builder.go; JobSet webhook
    defaults (J:pkg/webhooks/jobset_webhook.go Default) are filled in. Names that change per run (JobSet labels,
    the SSH key) are left out."""
    name = train_job["metadata"]["name"]
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
        ancestor = _ancestor(rjob)
        count = rjob["template"]["spec"].get("parallelism", 1)
        if ancestor == TRAINER and ml is not None:
            count = ml.get("numNodes", 1)
        pod_spec = rjob["template"]["spec"]["template"]["spec"]
        if (
            trainer.get("resourcesPerNode")
            and ml is not None
            and (ancestor == TRAINER or (launcher_as_node and rjob["name"] == NODE))
        ):
            for c in _containers(pod_spec, NODE)[:1]:
                c["resources"] = merge_resources(c.get("resources") or {}, trainer["resourcesPerNode"])
        counts[rjob["name"]] = max(count, 1)
    trainer_job = next((r for r in rjobs if _ancestor(r) == TRAINER), None)
    trainer_spec = trainer_job["template"]["spec"]["template"]["spec"] if trainer_job else None
    trainer_node = next(iter(_containers(trainer_spec, NODE)), None) if trainer_spec else None
    job_env = trainer.get("env") or []

    def runtime_resources() -> dict:
        # ExtractResourcePerNodeFromRuntime reads the merged template; a TrainJob's resourcesPerNode then wins whole.
        if trainer.get("resourcesPerNode"):
            return trainer["resourcesPerNode"]
        for r in rjobs:
            if r["name"] == NODE or _ancestor(r) == TRAINER:
                for c in _containers(r["template"]["spec"]["template"]["spec"], NODE):
                    if c.get("resources"):
                        return c["resources"]
        return {}

    if mpi is not None:
        if trainer.get("numNodes") is not None and NODE in counts:
            counts[NODE] = max(trainer["numNodes"] - 1, 1) if launcher_as_node else trainer["numNodes"]
        if trainer.get("numProcPerNode") is not None:
            mpi["numProcPerNode"] = trainer["numProcPerNode"]
        elif mpi.get("numProcPerNode", 1) == 1 and (gpus := _gpus(runtime_resources())) > 1:
            mpi["numProcPerNode"] = gpus
        ssh = {
            "name": "mpi-ssh-auth",
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
            "name": "mpi-hostfile",
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
            for c in _containers(pod_spec, NODE):
                upsert(
                    c.setdefault("volumeMounts", []),
                    [{"name": "mpi-ssh-auth", "mountPath": mpi.get("sshAuthMountPath", "/root/.ssh")}],
                    "mountPath",
                )
                if rjob["name"] == LAUNCHER:
                    upsert(c["volumeMounts"], [{"name": "mpi-hostfile", "mountPath": "/etc/mpi"}], "mountPath")
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
        if nproc == "auto" and _gpus(res) == 0:
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
    elif ml is not None and not any(k in ml for k in ("jax", "xgboost", "flux")):
        if trainer_job is not None and trainer.get("numNodes") is not None:
            counts[trainer_job["name"]] = trainer["numNodes"]
    # jobset/builder.go Trainer: image, command, args on the trainer's `node`; env there and, with
    # runLauncherAsNode, on the `node` job's `node` container.
    for rjob in rjobs:
        pod_spec = rjob["template"]["spec"]["template"]["spec"]
        if _ancestor(rjob) == TRAINER:
            for c in _containers(pod_spec, NODE):
                for f in ("image", "command", "args"):
                    if trainer.get(f) is not None:
                        c[f] = copy.deepcopy(trainer[f])
        if _ancestor(rjob) == TRAINER or (launcher_as_node and rjob["name"] == NODE):
            for c in _containers(pod_spec, NODE):
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
        if _ancestor(rjob) in (TRAINER, "dataset-initializer", "model-initializer"):
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
        if (rjob["name"] == replicated_job) if replicated_job else _ancestor(rjob) == TRAINER:
            return rjob["template"]["spec"]["template"]
    raise ValueError(
        f"runtime {runtime['metadata']['name']} has no replicated job "
        f"{replicated_job or 'labelled ' + ANCESTOR_LABEL + ': trainer'}"
    )


# ------------------------------------------------------------------------------------------- judging


def _fabric_resources(resources: dict) -> dict:
    return {k: v for k, v in (resources.get("limits") or {}).items() if k not in CORE_RESOURCES}


def _capabilities(container: dict) -> list[str]:
    return ((container.get("securityContext") or {}).get("capabilities") or {}).get("add") or []


def override_problems(train_job: dict, runtime: dict, derived: dict | None = None) -> list[str]:
    """Each way the pods of `train_job` lost fabric wiring `runtime` gave them, as `cause: consequence; fix`.
    `derived`: effective_jobset(train_job, runtime), when the caller has it already."""
    where = f"TrainJob {train_job['metadata']['name']}"
    trainer = (train_job.get("spec") or {}).get("trainer") or {}
    found: list[str] = []
    if trainer.get("resourcesPerNode") and trainer.get("numProcPerNode") is None:
        rt_gpus = _gpus(
            next(
                (
                    c.get("resources") or {}
                    for r in runtime["spec"]["template"]["spec"]["replicatedJobs"]
                    if r["name"] == NODE or _ancestor(r) == TRAINER
                    for c in _containers(r["template"]["spec"]["template"]["spec"], NODE)
                ),
                {},
            )
        )
        if rt_gpus and not _gpus(trainer["resourcesPerNode"]):
            found.append(
                f"{where}: spec.trainer.resourcesPerNode names no GPU, so the controller counts none "
                f"(it reads the TrainJob's resourcesPerNode alone) and starts one process per node on "
                f"{rt_gpus}-GPU pods; add nvidia.com/gpu: {rt_gpus} to its requests and limits, or set "
                f"numProcPerNode"
            )
    derived = derived if derived is not None else effective_jobset(train_job, runtime)
    for original, rjob in zip(
        runtime["spec"]["template"]["spec"]["replicatedJobs"], derived["jobset"]["replicatedJobs"], strict=True
    ):
        before, after = original["template"]["spec"]["template"], rjob["template"]["spec"]["template"]
        at = f"{where} ({rjob['name']} pods)"
        nets = ((before.get("metadata") or {}).get("annotations") or {}).get(NETWORKS_ANNOTATION)
        if nets and ((after.get("metadata") or {}).get("annotations") or {}).get(NETWORKS_ANNOTATION) != nets:
            found.append(
                f"{at}: runtimePatches replace the {NETWORKS_ANNOTATION} annotation: the pods lose their "
                f"rail interfaces; remove that annotation from the patch"
            )
        bspec, aspec = before["spec"], after["spec"]
        missing = [t for t in bspec.get("tolerations") or [] if t not in (aspec.get("tolerations") or [])]
        if missing:
            found.append(
                f"{at}: runtimePatches tolerations replace the runtime's (a list is replaced whole) and "
                f"drop {', '.join(t.get('key', '*') for t in missing)}: the pods cannot go to GPU nodes; "
                f"repeat the runtime's tolerations in the patch"
            )
        for key, value in (bspec.get("nodeSelector") or {}).items():
            if (aspec.get("nodeSelector") or {}).get(key) != value:
                found.append(
                    f"{at}: runtimePatches change nodeSelector {key} from {value!r}: the runtime's wiring "
                    f"and sizing are for those nodes; use a runtime published for the other nodes"
                )
        shm = next((v for v in bspec.get("volumes") or [] if v["name"] == "dshm"), None)
        if shm and next((v for v in aspec.get("volumes") or [] if v["name"] == "dshm"), None) != shm:
            found.append(
                f"{at}: runtimePatches replace volume dshm: /dev/shm is no longer the runtime's "
                f"memory-backed {shm['emptyDir'].get('sizeLimit')}; name the patch's volume differently"
            )
        for bc in bspec.get("containers", []) + bspec.get("initContainers", []):
            ac = next(
                c for c in aspec.get("containers", []) + aspec.get("initContainers", []) if c["name"] == bc["name"]
            )
            name = f"{at}: container {bc['name']}"
            bres, ares = bc.get("resources") or {}, ac.get("resources") or {}
            for res, value in _fabric_resources(bres).items():
                for part in ("limits", "requests"):
                    got = (ares.get(part) or {}).get(res)
                    if got is None or quantity(got) != quantity(value):
                        found.append(
                            f"{name}: resourcesPerNode sets {part}.{res} to {got}, the runtime gives "
                            f"{value}: the pod loses its fabric device (NCCL falls back or fails); "
                            f"remove {res} from resourcesPerNode"
                        )
            for part_res in sorted(set(ares.get("limits") or {}) | set(ares.get("requests") or {})):
                lim, req = (ares.get("limits") or {}).get(part_res), (ares.get("requests") or {}).get(part_res)
                if part_res in ("cpu", "memory", "ephemeral-storage"):
                    if lim is not None and req is not None and quantity(req) > quantity(lim):
                        found.append(
                            f"{name}: {part_res} requests {req} exceed limits {lim} after the merge "
                            f"(resourcesPerNode merges per key): the pod is invalid; set requests and "
                            f"limits both in resourcesPerNode"
                        )
                    continue
                if lim is None or req is None or quantity(lim) != quantity(req):
                    found.append(
                        f"{name}: {part_res} requests {req} and limits {lim} after the merge "
                        f"(resourcesPerNode merges per key): the Job controller cannot create the pod, "
                        f"extended resources need requests equal to limits; set both in resourcesPerNode"
                    )
            if shm and bc["name"] == NODE and (mem := (ares.get("limits") or {}).get("memory")) is not None:
                if quantity(mem) <= quantity(shm["emptyDir"]["sizeLimit"]):
                    found.append(
                        f"{name}: memory limit {mem} is not above /dev/shm "
                        f"{shm['emptyDir']['sizeLimit']} (tmpfs pages count against it: OOM kill); "
                        f"raise memory in resourcesPerNode or leave it to the runtime"
                    )
            lost = [c for c in _capabilities(bc) if c not in _capabilities(ac)]
            if lost:
                found.append(
                    f"{name}: runtimePatches securityContext replaces capabilities.add and drops "
                    f"{', '.join(lost)}: RDMA cannot pin memory; keep {', '.join(lost)} in the patch"
                )
            benv = {e["name"]: e.get("value") for e in bc.get("env") or []}
            aenv = {e["name"]: e.get("value") for e in ac.get("env") or []}
            for var in PLATFORM_OWNED:
                if var in benv and var not in LOGGING_ENV and aenv.get(var) != benv[var]:
                    found.append(
                        f"{name}: env {var}={aenv.get(var)!r} replaces the runtime's {benv[var]!r} "
                        f"(env is merged by name); remove it from the TrainJob or ask for a runtime "
                        f"with that value"
                    )
            if bc.get("command") and ac.get("command") != bc["command"]:
                found.append(
                    f"{name}: spec.trainer.command replaces the runtime's command "
                    f"{json.dumps(bc['command'])}; put it in spec.trainer.args instead"
                )
    return found
