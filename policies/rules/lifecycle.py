"""Restarts, failures and the end of a Training Operator v1 job: one fault does not exhaust backoffLimit, a
failing init container fails the job instead of holding the gang, and the pods are freed when the job ends.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass

from policies.engine import ADVISORY, MANDATORY, Context, Finding, rule
from policies.pods import containers, dict_or_empty, int_or_none
from policies.podspecs import REPLICA_SPECS, PodTemplate
from policies.shell import argv

# Training Operator v1: each kind's default replica restartPolicy (kubeflow/trainer@v1.9.4
# pkg/apis/kubeflow.org/v1/*_types.go `<Kind>DefaultRestartPolicy`, applied by the *_defaults.go files).
KUBEFLOW_V1_RESTART = {
    "PyTorchJob": "OnFailure",
    "PaddleJob": "OnFailure",
    "TFJob": "Never",
    "MPIJob": "Never",
    "XGBoostJob": "Never",
    "JAXJob": "Never",
}

# Replica policies the operator hands to the pod unchanged (pkg/core/pod.go SetRestartPolicy): the kubelet restarts
# containers in place. ExitCode becomes pod restartPolicy Never and the operator recreates the pod instead.
IN_PLACE = ("OnFailure", "Always")

# Init containers the operator injects itself (init-pytorch, the MPI launcher's kubectl-delivery).
OPERATOR_INIT = {"init-pytorch", "kubectl-delivery"}
KUBEFLOW_V1 = frozenset(KUBEFLOW_V1_RESTART)


@dataclass(frozen=True)
class Replica:
    role: str
    replicas: int
    restart: str  # the replica's restartPolicy, or the kind's default when unset
    template: PodTemplate


def is_kubeflow_v1(obj: dict) -> bool:
    return obj.get("kind") in KUBEFLOW_V1_RESTART and obj.get("apiVersion") == "kubeflow.org/v1"


def kubeflow_replicas(ctx: Context) -> list[Replica]:
    """The replicas of a Training Operator v1 job with their effective restartPolicy; [] for anything else."""
    obj = ctx.obj
    if not is_kubeflow_v1(obj):
        return []
    specs = dict_or_empty(dict_or_empty(obj.get("spec")).get(REPLICA_SPECS[obj["kind"]]))
    default = KUBEFLOW_V1_RESTART[obj["kind"]]
    return [
        Replica(t.role, t.replicas, str(dict_or_empty(specs.get(t.role)).get("restartPolicy") or default), t)
        for t in ctx.templates
    ]


def _idle_mpi_worker(r: Replica) -> bool:
    """An MPIJob worker that only hosts the ranks mpirun execs into it: no command (the operator then runs
    `sleep 365d`, kubeflow/trainer@v1.9.4:pkg/controller.v1/mpi/mpijob_controller.go newWorker), sleep or sshd.
    Its container never exits, so neither the job's end nor a lost rank stops or restarts it."""
    cs = containers(r.template)
    if not cs or not cs[0].get("command"):
        return True
    words = argv(cs[0])
    return not words or posixpath.basename(words[0]) in ("sleep", "sshd")


@rule(
    "clean-pod-policy",
    "Kubeflow jobs free their pods when they end",
    level=MANDATORY,
    description="Training Operator v1 jobs (kubeflow.org/v1 PyTorchJob, MPIJob, TFJob, XGBoostJob, PaddleJob, "
    "JAXJob) set runPolicy.cleanPodPolicy to Running or All: the default None deletes no pod when the "
    "job succeeds or fails, so MPI workers (`sleep 365d`) and the survivors of a failed job keep their "
    "GPUs.",
    remediation="set runPolicy.cleanPodPolicy: Running (or All)",
    kinds=KUBEFLOW_V1,
    pods=False,
)
def clean_pod_policy(ctx: Context) -> Iterator[Finding]:
    """A Training Operator v1 job says which pods to delete when it ends. Every kind defaults
    runPolicy.cleanPodPolicy to None (kubeflow/trainer@v1.9.4:pkg/apis/kubeflow.org/v1/mpi_defaults.go,
    pytorch_defaults.go, tensorflow_defaults.go, and the xgboost/paddlepaddle/jax ones), and for None
    DeletePodsAndServices deletes nothing (kubeflow/trainer@v1.9.4:pkg/controller.v1/common/job.go). MPIJob
    workers run `sleep 365d` and never exit; in every kind the failure paths (backoffLimit, activeDeadlineSeconds,
    one replica failing) mark the job Failed while the other pods are still running. Either way they keep their
    GPUs until the job is deleted or its TTL expires, so this is mandatory for every kind, not only MPIJob."""
    obj = ctx.obj
    if not is_kubeflow_v1(obj):
        return
    spec = dict_or_empty(obj.get("spec"))
    policy = dict_or_empty(spec.get("runPolicy")).get("cleanPodPolicy")
    if policy is None and obj["kind"] == "MPIJob":
        policy = spec.get("cleanPodPolicy")  # the deprecated top-level field; the MPI controller syncs the two
    if policy not in (None, "None"):
        return
    held = sum(ctx.facts(c).gpus * t.replicas for t in ctx.templates for c in containers(t))
    cause = (
        "runPolicy.cleanPodPolicy is unset, so the operator defaults it to None"
        if policy is None
        else "runPolicy.cleanPodPolicy is None"
    )
    reps = kubeflow_replicas(ctx)
    if obj["kind"] == "MPIJob" and any(r.role == "Worker" and _idle_mpi_worker(r) for r in reps):
        still = "the workers, which only run `sleep 365d` for mpirun, never exit"
    else:
        still = (
            "pods still running when it ends (the peers of a failed rank, pods cut off by backoffLimit or "
            "activeDeadlineSeconds) keep running"
        )
    yield Finding(
        f"{cause}: when the job ends the operator deletes none of its pods and {still}, holding "
        f"{f'{held} GPUs' if held else 'their nodes'} until the job is deleted or its TTL expires; set "
        "runPolicy.cleanPodPolicy: Running (deletes the pods still running or pending, keeps finished "
        "ones for their logs) or All"
    )


def _external_rendezvous(obj: dict) -> bool:
    """A PyTorchJob whose torchrun agents ride out a lost peer in place: elasticPolicy.maxRestarts >= 1 (the
    agents restart their workers and re-rendezvous instead of exiting) and a rendezvous store outside the job's
    pods. The c10d store is served by the agent whose host matches the rendezvous endpoint (pytorch/pytorch
    torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py `_create_tcp_store`), and that host is
    `<job>-worker-0` unless rdzvHost says otherwise (kubeflow/trainer@v1.9.4:pkg/controller.v1/pytorch/elastic.go):
    when that pod goes, every agent loses the store and exits."""
    ep = dict_or_empty(dict_or_empty(obj.get("spec")).get("elasticPolicy"))
    name = str(dict_or_empty(obj.get("metadata")).get("name") or "")
    host = str(ep.get("rdzvHost") or "")
    restarts = int_or_none(ep.get("maxRestarts")) or 0
    job_pod = re.match(rf"^{re.escape(name)}-(master|worker)-\d+(\.|$)", host)  # the operator's pod names
    return restarts >= 1 and bool(host) and not job_pod


@rule(
    "restart-budget",
    "backoffLimit outlasts one fault",
    level=MANDATORY,
    description="A set runPolicy.backoffLimit is above the container restarts one lost node or crashed rank causes: "
    "every pod of the OnFailure/Always replicas (PyTorchJob, TFJob, ...; one for an elastic PyTorchJob "
    "with maxRestarts and an external rdzvHost), the launcher of an MPIJob. With ExitCode replicas it "
    "is not 0. Never replicas do not count.",
    remediation="raise runPolicy.backoffLimit above the restarts one fault causes, or use restartPolicy: Never",
    kinds=KUBEFLOW_V1,
)
def restart_budget(ctx: Context) -> Iterator[Finding]:
    """runPolicy.backoffLimit outlasts one fault. PastBackoffLimit
    (kubeflow/trainer@v1.9.4:pkg/core/job.go) sums the container restart counts of every Running pod of the
    OnFailure/Always/ExitCode replicas and fails the job at `sum >= backoffLimit` (any restart when it is 0);
    counts only grow over the pods' lives. One lost node or crashed rank breaks the collective: every torchrun
    agent of a static (or worker-0-hosted elastic) job exits and its container restarts, so one fault costs as
    many restarts as there are pods; in an MPIJob it is the launcher (mpirun exits), not the sleeping workers.
    ExitCode pods run with restartPolicy Never and are recreated, not restarted (pkg/core/pod.go
    SetRestartPolicy), but backoffLimit 0 fails the job at the first Failed pod (pkg/controller.v1/common/job.go
    ReconcileJobs, exceedsBackoffLimit). Never replicas are not counted. An unset backoffLimit means no limit."""
    obj = ctx.obj
    reps = kubeflow_replicas(ctx)
    limit = int_or_none(dict_or_empty(dict_or_empty(obj.get("spec")).get("runPolicy")).get("backoffLimit"))
    if not reps or limit is None:  # unset, or not a number (judgeable reports that)
        return
    kind = obj["kind"]
    in_place = [
        r
        for r in reps
        if r.restart in IN_PLACE and not (kind == "MPIJob" and r.role == "Worker" and _idle_mpi_worker(r))
    ]
    count = sum(r.replicas for r in in_place)
    if kind == "MPIJob":
        why = "mpirun exits when any rank is lost and the launcher's container restarts"
    elif kind == "PyTorchJob" and _external_rendezvous(obj):
        count = min(count, 1)
        why = "the failed pod's container restarts in place while the other agents re-rendezvous"
    elif kind == "PyTorchJob" and dict_or_empty(obj.get("spec")).get("elasticPolicy"):
        why = (
            "the c10d rendezvous store lives in the agent on the rendezvous host, worker-0 unless rdzvHost points "
            "outside the job, and every agent exits when that pod goes, or at the first failure without "
            "maxRestarts"
        )
    else:
        why = "the collective breaks and every pod's training process exits and is restarted in place"
    who = ", ".join(f"{r.replicas} {r.role}" for r in in_place)
    if count and limit <= count:
        yield Finding(
            f"runPolicy.backoffLimit {limit} is not above the {count} container "
            f"restart{'s' if count > 1 else ''} one lost node "
            f"or crashed rank causes ({why}; {who} under restartPolicy "
            f"{'/'.join(sorted({r.restart for r in in_place}))}): the operator sums restarts over all "
            "running pods and fails the job when the sum reaches backoffLimit, so the first fault ends "
            f"the run instead of resuming it; set backoffLimit to at least {count + 1} (counts never "
            f"reset: add {count} for each further fault to survive), or restartPolicy: Never if the job "
            "should fail on its first fault"
        )
    elif limit == 0 and (exit_code := [r for r in reps if r.restart == "ExitCode"]):
        yield Finding(
            f"runPolicy.backoffLimit 0 with restartPolicy ExitCode "
            f"({', '.join(f'{r.replicas} {r.role}' for r in exit_code)}): the operator fails the job at "
            "the first Failed pod, even one that exited with a retryable code, so no pod is ever "
            "recreated; set backoffLimit to 1 or more (recreated pods are not counted against it: bound "
            "the retries with runPolicy.activeDeadlineSeconds)"
        )


@rule(
    "init-fail-fast",
    "Init containers of Kubeflow jobs fail the job",
    level=MANDATORY,
    description="A Training Operator v1 replica with initContainers uses restartPolicy Never: under "
    "OnFailure/Always a failing init container is retried forever, under ExitCode the pod is recreated "
    "forever, and the gang keeps its nodes.",
    remediation="set the replica's restartPolicy: Never, or run the check in the main container's command",
    kinds=KUBEFLOW_V1,
)
def init_fail_fast(ctx: Context) -> Iterator[Finding]:
    """A failing init container ends the pod. Under replica restartPolicy OnFailure or Always the kubelet
    retries it forever (Init:CrashLoopBackOff): the pod never reaches Running, so PastBackoffLimit
    (kubeflow/trainer@v1.9.4:pkg/core/job.go) never counts it. Under ExitCode the pod fails, but the operator
    reads only the default container's exit code; that container never ran, the placeholder 0xbeef stays, and
    IsRetryableExitCode (>= 128) calls it retryable (kubeflow/trainer@v1.9.4:pkg/controller.v1/common/pod.go
    ReconcilePods, pkg/util/train/train_util.go): the pod is recreated without end. Either way the gang keeps
    every node. Native sidecars (restartPolicy Always on the init container) and the operator's own init
    containers are not checks and are skipped."""
    reps = kubeflow_replicas(ctx)
    gang = sum(r.replicas for r in reps) > 1
    for r in reps:
        if r.restart not in (*IN_PLACE, "ExitCode"):
            continue
        inits = [
            c.get("name")
            for c in r.template.template["spec"].get("initContainers") or []
            if c.get("restartPolicy") != "Always" and c.get("name") not in OPERATOR_INIT
        ]
        if not inits:
            continue
        if r.restart == "ExitCode":
            why = (
                "the operator judges a failed pod by its main container's exit code alone; after an init "
                "failure that container never ran, the placeholder code 0xbeef counts as retryable, and the "
                "pod is deleted and recreated without end"
            )
        else:
            why = (
                "the kubelet retries a failing init container forever (Init:CrashLoopBackOff) and the pod "
                "never reaches Running, so backoffLimit never counts it"
            )
        held = "the rest of the gang holds its nodes" if gang else "the pod holds its node"
        yield Finding(
            f"{r.role} replica (restartPolicy {r.restart}) runs init container(s) "
            f"{', '.join(repr(n) for n in inits)}: {why}, while {held}; set the replica's "
            "restartPolicy: Never (a failed check fails the pod and the job, and cleanPodPolicy frees "
            "the nodes) or run the check at the start of the main container's command"
        )


@rule(
    "job-ttl-reruns",
    "A finished Kubeflow job is not deleted under a Pulumi stack",
    level=ADVISORY,
    description="A Training Operator v1 job with runPolicy.ttlSecondsAfterFinished is deleted by the operator that "
    "long after it ends. In a Pulumi stack that still declares it, `pulumi refresh` then forgets it and the next "
    "`pulumi up` creates it again: the run starts over, days later, taking its GPUs. Keep the finished job "
    "(cleanPodPolicy frees its pods) and remove it from the program to delete it.",
    remediation="remove runPolicy.ttlSecondsAfterFinished; delete the job by removing it from the stack",
    kinds=KUBEFLOW_V1,
    pods=False,
)
def job_ttl_reruns(ctx: Context) -> Iterator[Finding]:
    """kubeflow/trainer@v1.9.4:pkg/controller.v1/common/job.go CleanupJob deletes the job ttlSecondsAfterFinished
    after its completionTime (no default: unset keeps it). A resource deleted outside Pulumi is dropped from the
    state by `pulumi refresh` and created again by the next `pulumi up`."""
    obj = ctx.obj
    if not is_kubeflow_v1(obj):
        return
    ttl = dict_or_empty(dict_or_empty(obj.get("spec")).get("runPolicy")).get("ttlSecondsAfterFinished")
    if ttl is not None:
        yield Finding(
            f"runPolicy.ttlSecondsAfterFinished {ttl}: the operator deletes the job {ttl}s after it ends, and "
            "under Pulumi a refresh then an up submits it again (a second run, days later); remove it and delete "
            "the job by removing it from the stack"
        )


RUNTIME_KINDS = frozenset({"TrainingRuntime", "ClusterTrainingRuntime"})


@rule(
    "runtime-ttl-reruns",
    "A failed TrainJob's JobSet is not deleted by a TTL",
    level=ADVISORY,
    description="A Trainer v2 runtime whose JobSet template sets ttlSecondsAfterFinished lets JobSet delete a "
    "finished run's JobSet. kubeflow-trainer v2.3.0 clears a TrainJob's Failed condition on every reconcile and "
    "applies its JobSet again, so a failed run then starts over on all its GPUs, with a fresh restart budget, and "
    "again after every TTL (kubeflow/trainer#3779; fixed after v2.3.0).",
    remediation="remove spec.template.spec.ttlSecondsAfterFinished from the runtime; delete a finished run by "
    "deleting its TrainJob",
    kinds=RUNTIME_KINDS,
    pods=False,
)
def runtime_ttl_reruns(ctx: Context) -> Iterator[Finding]:
    """kubeflow/trainer@v2.3.0:pkg/controller/trainjob_controller.go Reconcile (removeFailedCondition keeps only a
    DeadlineExceeded failure; reconcileObjects applies the JobSet of a TrainJob that is not finished) and
    kubernetes-sigs/jobset@v0.12.0:pkg/controllers/ttl_after_finished.go (a finished JobSet is deleted after its
    TTL). tests/trainer_v230.py restates both."""
    obj = ctx.obj
    if obj.get("kind") not in RUNTIME_KINDS or not str(obj.get("apiVersion", "")).startswith("trainer.kubeflow.org/"):
        return
    template = dict_or_empty(dict_or_empty(dict_or_empty(obj.get("spec")).get("template")).get("spec"))
    ttl = template.get("ttlSecondsAfterFinished")
    if ttl is not None:
        yield Finding(
            f"spec.template.spec.ttlSecondsAfterFinished {ttl}: {ttl}s after a run fails JobSet deletes its JobSet, "
            "and kubeflow-trainer v2.3.0 then creates it again: the failed run starts over on all its GPUs, every "
            f"{ttl}s; remove it"
        )
