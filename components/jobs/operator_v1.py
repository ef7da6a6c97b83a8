"""A job on the Kubeflow Training Operator v1: a PyTorchJob (torchrun, with its rendezvous store), an MPIJob (mpirun
from a launcher pod) or a TFJob, each around the job's pod (pod.pod_template).

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

from typing import Any

from components import k8s
from components.fabric import wiring as fabric
from components.jobs.launch import LAUNCH, LAUNCHER, RDZV_STORE, mpirun_command, torchrun_command
from components.jobs.pod import env_list, host_network, pod_template, primary_interface_annotation
from components.jobs.resolve import COMPONENT, JOB_LABEL, ROLE_LABEL, Resolved, job_labels, job_meta
from components.model.profile import Profile

RDZV_PORT = 29400
# How long survivors wait for a replacement pod before the job fails and frees its nodes, without node health: an
# evicted or drained pod's replacement (Volcano placing it, an image already on the node). A lost node's pod stays
# Terminating, and the operator makes no replacement while it exists, so without health the job fails after this
# and frees the healthy nodes.
RDZV_JOIN_TIMEOUT = 900
# With health (fastpath:platform.health.lostNodeMinutes) a lost node's pods go after those minutes, plus up to the
# object monitor's resync (NVIDIA/NVSentinel@v1.19.0 kubernetes-object-monitor resyncPeriod 5m re-checks a time-based
# predicate), then the replacement needs placing and its image: the survivors wait for all of it.
OBJECT_MONITOR_RESYNC = 300
REPLACEMENT_SECONDS = 600


def join_timeout(profile: Profile) -> int:
    """Seconds torchrun's survivors wait for a replacement agent (rdzv join_timeout)."""
    if profile.lost_node_seconds is None:
        return RDZV_JOIN_TIMEOUT
    return max(RDZV_JOIN_TIMEOUT, profile.lost_node_seconds + OBJECT_MONITOR_RESYNC + REPLACEMENT_SECONDS)


# Under Kueue an evicted PyTorchJob (preempted, reclaimed, a failed node not replaced) is suspended and requeued
# with backoff up to an hour (components/platform/kueue.py BACKOFF_MAX); its store, outside the job, must outlast that.
KUEUE_REQUEUE_SECONDS = 3600


def store_idle_seconds(profile: Profile) -> int:
    """How long the store waits without a keep-alive before it ends (launch.RDZV_STORE): twice the time a
    replacement agent may take to join, so a run that re-forms is never cut short; on Kueue, plus one requeue
    backoff, so a job readmitted after its eviction finds it (one queued longer is resubmitted)."""
    extra = KUEUE_REQUEUE_SECONDS if profile.scheduler.name == "kueue" else 0
    return 2 * join_timeout(profile) + extra


# Failed store pods a store Job tolerates: every eviction or lost node is one; the Job must not give up while the
# run it serves goes on.
STORE_BACKOFF_LIMIT = 1000
RDZV_READ_TIMEOUT = 600
CLEAN_POD_POLICY = "Running"
V1_KINDS = {"pytorch": "PyTorchJob", "mpi": "MPIJob", "tensorflow": "TFJob"}


def run_policy(r: Resolved) -> dict:
    """`cleanPodPolicy: Running`: when the job ends the operator deletes its Running and Pending pods, so GPUs are
    freed at once (the default None deletes nothing). No backoffLimit: no replica restarts a container in place
    (the launchers retry inside their container), so the operator's restart count has nothing to count."""
    # No ttlSecondsAfterFinished: the operator would delete the finished job (kubeflow/trainer@v1.9.4:
    # pkg/controller.v1/common/job.go CleanupJob), `pulumi refresh` would forget it and the next `pulumi up`
    # would run it again. The object stays, without running pods, until the job leaves the stack file.
    policy: dict = {"cleanPodPolicy": CLEAN_POD_POLICY}
    if r.scheduler == "volcano":
        policy["schedulingPolicy"] = {
            "minAvailable": r.min_available,
            "queue": r.queue,
            "priorityClass": r.priority_class,
        }
    return policy


def rdzv_host(r: Resolved) -> str:
    return f"{r.spec.name}-rdzv"


def rendezvous(r: Resolved) -> list[dict]:
    """The rendezvous store of a PyTorchJob: a one-CPU batch Job and its Service `<job>-rdzv`. Not a training pod,
    so it runs whatever subset of an elastic gang Volcano admits, and a lost GPU node never takes the store with
    it. It ends itself once no agent has kept the rendezvous alive for store_idle_seconds (the run is over).
    TrainingJob makes the job its owner, so it goes when the job is deleted."""
    name = rdzv_host(r)
    labels = job_labels(r, "rendezvous")
    selector = {JOB_LABEL: r.spec.name, ROLE_LABEL: "rendezvous"}
    small = {"cpu": 1, "memory": "1Gi"}
    pod: dict[str, Any] = {
        "containers": [
            {
                "name": "rendezvous",
                "image": r.spec.image,
                "command": ["python", "-c", RDZV_STORE],
                "env": [
                    {"name": "FASTPATH_RDZV_PORT", "value": str(RDZV_PORT)},
                    {"name": "FASTPATH_RDZV_ID", "value": r.spec.name},  # the job's rdzvId
                    {"name": "FASTPATH_RDZV_IDLE_SECONDS", "value": str(store_idle_seconds(r.profile))},
                ],
                "ports": [{"name": "rdzv", "containerPort": RDZV_PORT}],
                "readinessProbe": {"tcpSocket": {"port": RDZV_PORT}, "periodSeconds": 5},
                "resources": {"limits": small, "requests": dict(small)},
            }
        ],
        "enableServiceLinks": False,
    }
    # Every agent fails when the store goes. On a cluster with CPU nodes it must run there: the drains fastpath
    # itself causes (SR-IOV reboots, GPU driver upgrades) are of GPU nodes only, so its budget below never holds
    # one of them. On a GPU-only cluster it takes a GPU node's spare CPU, off this job's nodes if it can.
    # NFD's NVIDIA label: there from the node's first minutes, before the driver and the GPU product label.
    off_gpu = {"matchExpressions": [{"key": k8s.NFD_GPU_LABEL, "operator": "DoesNotExist"}]}
    away_from_workers = {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 100,
                "podAffinityTerm": {
                    "labelSelector": {"matchLabels": {JOB_LABEL: r.spec.name, ROLE_LABEL: "worker"}},
                    "topologyKey": "kubernetes.io/hostname",
                },
            }
        ]
    }
    if (system := r.profile.nodes.system) is not None:
        # The stack's system nodes by name (nodes.system): where the operators are, off every GPU node.
        pod["nodeSelector"] = dict(system.node_selector)
        if tolerations := system.tolerations():
            pod["tolerations"] = tolerations
    elif r.profile.nodes.cpu_nodes:
        pod["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [off_gpu]}}
        }
    else:
        pod["tolerations"] = [k8s.toleration(r.profile.gpu.taint_key)]
        pod["affinity"] = {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": off_gpu}]
            },
            "podAntiAffinity": away_from_workers,
        }
    if r.priority_class:
        pod["priorityClassName"] = r.priority_class  # evicted no sooner than the job it serves
    meta = k8s.meta(name, r.profile.cluster, COMPONENT, namespace=r.namespace, extra_labels=labels)
    # Evicting it ends the job (every agent loses the store): on CPU nodes, no voluntary eviction (an admin's drain
    # of that node waits, naming this budget, until the job is gone; no fastpath rollout drains CPU nodes). On a
    # GPU-only cluster a budget would hold fastpath's own SR-IOV and driver drains for as long as the job runs,
    # with the node cordoned: none there, and the drain ends the job as draining its workers would.
    budget = []
    if r.profile.nodes.cpu_nodes:
        budget = [
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": dict(meta),
                # minAvailable, not maxUnavailable 0: a Job has no scale subresource, which the disruption
                # controller needs to read maxUnavailable (it would block by failing to sync).
                "spec": {"minAvailable": 1, "selector": {"matchLabels": selector}},
            }
        ]
    # A batch Job, not a Deployment: the store ends when the run does (RDZV_STORE), and a Job whose pod succeeded
    # is complete, so a finished job's store holds no node, and its budget no drain. A failed or evicted store pod
    # is made again (OnFailure, and a backoff limit no store reaches).
    pod["restartPolicy"] = "OnFailure"
    return [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            # pulumi-kubernetes waits for a Job to complete (provider/pkg/await/job.go): this one completes only
            # when its run is over, so `pulumi up` must not wait for it.
            "metadata": {**meta, "annotations": {**meta.get("annotations", {}), "pulumi.com/skipAwait": "true"}},
            "spec": {
                "completions": 1,
                "parallelism": 1,
                "backoffLimit": STORE_BACKOFF_LIMIT,
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
        *budget,
    ]


def pytorch_job(r: Resolved) -> dict:
    """Worker-only PyTorchJob under c10d rendezvous, for fixed sizes too (min = max): torchrun restarts the worker
    group on a fault and admits the operator's replacement for a lost pod. `Never`: no container restarts in
    place, so a failed preflight or an exhausted torchrun fails the job instead of looping."""
    spec = r.spec
    command = ["sh", "-c", LAUNCH, "fastpath", *torchrun_command(spec.command)]
    template = pod_template(r, command, preflight_in_main=True)
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
                {"key": "join_timeout", "value": str(join_timeout(r.profile))},
                {"key": "read_timeout", "value": str(RDZV_READ_TIMEOUT)},
            ],
        },
        "runPolicy": run_policy(r),
        "pytorchReplicaSpecs": {
            "Worker": {"replicas": spec.max_nodes, "restartPolicy": "ExitCode", "template": template}
        },
    }
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": job_meta(r), "spec": body}


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
    if r.scheduler == "volcano":
        launcher_spec["schedulerName"] = r.scheduler
        launcher_spec["priorityClassName"] = r.priority_class
    if r.wiring.host_network:
        # mpirun keeps Open MPI's TCP traffic on fabric.podInterface, the GPU nodes' interface: the launcher's
        # own daemon must have it too, so it runs on the host network of a GPU node (it takes no GPU).
        host_network(launcher_spec)
        launcher_spec["nodeSelector"] = dict(worker["spec"]["nodeSelector"])
    launcher: dict = {"metadata": {"labels": job_labels(r, "launcher")}, "spec": launcher_spec}
    if notes := primary_interface_annotation(r):
        launcher["metadata"]["annotations"] = notes
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "MPIJob",
        "metadata": job_meta(r),
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
        "metadata": job_meta(r),
        "spec": {"runPolicy": run_policy(r), "tfReplicaSpecs": replicas},
    }


BUILDERS = {"pytorch": pytorch_job, "mpi": mpi_job, "tensorflow": tf_job}
