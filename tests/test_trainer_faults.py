"""Faults and cleanup of a v2 run, as JobSet v0.12.0 and the Job controller handle them (tests/jobset_v012.py
restates the rules), applied to every ClusterTrainingRuntime the committed v2 stack publishes and the JobSet its
jobs become: a crash restarts the whole gang from the checkpoint within the budget, a preemption restarts it
without spending the budget, a lost node holds the run until the Node is remediated, a failed preflight ends the
run, a finished run frees its GPUs. The trainer sets none of this (kubeflow/trainer@v2.3.0: no failurePolicy,
backoffLimit or restartPolicy anywhere in pkg/): the runtime decides it, and a TrainJob cannot change it."""

import pytest

from components.jobs.runtime_v2.build import MPI_HOSTS, PREFLIGHT
from components.jobs.runtime_v2.controller import effective_jobset
from components.jobs.trainjob import ACCEPTANCE_RUNTIME
from tests import jobset_v012 as js
from tests import trainer_v230 as tv2
from tests.conftest import STACKS

V2 = "prod-v2"
MAX_RESTARTS = 5  # stacks/Pulumi.prod-v2.yaml trainer.maxRestarts


def runtimes(rendered) -> list[dict]:
    return [o for o in rendered(V2).objects if o["kind"] == "ClusterTrainingRuntime"]


def jobset_of(rendered, job: str) -> tuple[dict, dict]:
    objs = rendered(V2).objects
    tj = next(o for o in objs if o["kind"] == "TrainJob" and o["metadata"]["name"] == job)
    rt = next(o for o in objs if o["kind"] == "ClusterTrainingRuntime" and o["metadata"]["name"] == tj["spec"]["runtimeRef"]["name"])
    return tj, effective_jobset(tj, rt)["jobset"]


def rjob(spec: dict, name: str) -> dict:
    return next(r for r in spec["replicatedJobs"] if r["name"] == name)


def test_nothing_restarts_in_place(rendered):
    """JobSet's webhook makes an empty restartPolicy OnFailure (kubernetes-sigs/jobset@v0.12.0:pkg/webhooks/
    jobset_webhook.go Default) and a Job's backoffLimit defaults to 6: a crashed rank would come back alone while
    its peers hang in NCCL. Every pod is Never and every Job fails at its first failed pod."""
    for rt in runtimes(rendered):
        for r in rt["spec"]["template"]["spec"]["replicatedJobs"]:
            assert r["template"]["spec"]["backoffLimit"] == 0, rt["metadata"]["name"]
            assert r["template"]["spec"]["template"]["spec"]["restartPolicy"] == "Never"
        policy = rt["spec"]["template"]["spec"]["failurePolicy"]
        budget = 0 if rt["metadata"]["name"] == ACCEPTANCE_RUNTIME else MAX_RESTARTS  # a failed size fails it
        assert policy["restartStrategy"] == "BlockingRecreate" and policy["maxRestarts"] == budget


# (job, replicated job that loses a pod)
# (the acceptance has no restart budget: test_v2_acceptance_fails_when_a_size_fails)
LOST = [("llama-pretrain", "node"), ("ds-moe", "node"), ("ds-moe", "launcher")]


@pytest.mark.parametrize(("job", "where"), LOST, ids=[f"{j}:{w}" for j, w in LOST])
def test_crashed_pod_restarts_the_gang_from_the_checkpoint_within_the_budget(rendered, job, where):
    """A crashed or OOM-killed pod (any exit but FAIL_RUN_EXIT of the runtime's own containers, no disruption)
    fails its Job (BackoffLimitExceeded); no rule matches that reason, so RestartJobSet recreates every Job, the
    new gang only once the old one is gone (BlockingRecreate), MAX_RESTARTS times; the next crash fails the run and
    frees its nodes. Each new pod mounts the same directory of the claim (subPathExpr on the JobSet's name, which a
    restart keeps), so the run resumes from its last checkpoint."""
    _, spec = jobset_of(rendered, job)
    job_spec = rjob(spec, where)["template"]["spec"]
    status = js.JobSetStatus()
    for attempt in range(MAX_RESTARTS + 1):
        failure = js.job_failure(job_spec, js.PodFailure(f"{job}-{where}-0-0", "node", 137))
        assert failure is not None and failure[0] == "BackoffLimitExceeded"
        action = js.failure_action(spec, where, *failure)
        assert action == "RestartJobSet"
        js.apply_action(spec, status, action)
        if attempt < MAX_RESTARTS:
            assert status.condition is None and status.restarts == attempt + 1
            assert not js.may_create_jobs(spec, previous_jobs_left=1), "old and new gang would mix"
            assert js.may_create_jobs(spec, previous_jobs_left=0)
    assert (status.condition, status.reason) == ("Failed", "ReachedMaxRestarts")
    assert js.after_finish({"node", "launcher"}) == set()
    pod = rjob(spec, where)["template"]["spec"]["template"]["spec"]
    (mount,) = [m for c in pod["containers"] for m in c["volumeMounts"] if m["name"] == "checkpoints"]
    assert mount == {"name": "checkpoints", "mountPath": "/checkpoints", "subPathExpr": "$(FASTPATH_TRAINJOB)"}
    (env,) = [e for c in pod["containers"] for e in c["env"] if e["name"] == "FASTPATH_TRAINJOB"]
    assert env["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['jobset.sigs.k8s.io/jobset-name']"


JOBS = ["llama-pretrain", "llama-sft", "ds-moe", "nccl-acceptance"]
# (replicated job, container, exit code) that fail the run at once: the preflight on any node; on MPI runs also the
# `node` pods' sshd wrapper (no sshd in the image) and the launcher's wait for the hosts (no ssh client).
FATAL = {"node": [PREFLIGHT], "launcher": [PREFLIGHT]}
FATAL_MPI = {"node": [PREFLIGHT, "node"], "launcher": [PREFLIGHT, MPI_HOSTS]}


@pytest.mark.parametrize("job", JOBS)
def test_failed_preflight_fails_the_run_at_once(rendered, job):
    """The preflight exits 3 on a node that is not on the fast path (an MPI node pod's sshd wrapper and the
    launcher's host wait likewise, on an image without ssh): the Job's podFailurePolicy fails it with reason
    PodFailurePolicy, and the JobSet's first rule, matching that container's message, turns it into FailJobSet: no
    restart (another attempt would land on the same broken node or image), no budget spent, the gang's GPUs
    freed."""
    _, spec = jobset_of(rendered, job)
    fatal = FATAL_MPI if len(spec["replicatedJobs"]) == 2 else FATAL
    for r in spec["replicatedJobs"]:
        job_spec = r["template"]["spec"]
        assert [c["name"] for c in job_spec["template"]["spec"]["initContainers"]][0] == PREFLIGHT
        for container in fatal[r["name"]]:
            failure = js.job_failure(job_spec, js.PodFailure(f"{job}-{r['name']}-0-0", container, 3))
            assert failure is not None and failure[0] == "PodFailurePolicy", (r["name"], container)
            status = js.JobSetStatus()
            js.apply_action(spec, status, js.failure_action(spec, r["name"], *failure))
            assert (status.condition, status.reason, status.restarts) == ("Failed", "FailJobSetAction", 0)
    # Any other preflight exit (a kill during it, say) is an ordinary failure: a gang restart.
    job_spec = rjob(spec, "node")["template"]["spec"]
    failure = js.job_failure(job_spec, js.PodFailure(f"{job}-node-0-0", PREFLIGHT, 137))
    assert failure is not None and js.failure_action(spec, "node", *failure) == "RestartJobSet"


@pytest.mark.parametrize("job", ["ds-moe", "nccl-acceptance"])
def test_exit_3_of_the_train_jobs_own_command_is_a_crash_not_a_broken_node(rendered, job):
    """The launcher's `node` container runs the TrainJob's mpirun: its exit 3 is the job's, not the platform's, so
    no podFailurePolicy rule names it and the gang restarts within the budget; the host wait timing out (exit 1)
    likewise."""
    _, spec = jobset_of(rendered, job)
    job_spec = rjob(spec, "launcher")["template"]["spec"]
    for container, code in (("node", 3), (MPI_HOSTS, 1)):
        failure = js.job_failure(job_spec, js.PodFailure(f"{job}-launcher-0-0", container, code))
        assert failure is not None and failure[0] == "BackoffLimitExceeded"
        assert js.failure_action(spec, "launcher", *failure) == "RestartJobSet"


@pytest.mark.parametrize(("job", "where"), LOST, ids=[f"{j}:{w}" for j, w in LOST])
def test_preemption_restarts_the_gang_without_spending_the_budget(rendered, job, where):
    """Volcano's gangpreempt/gangreclaim evict a whole gang, setting DisruptionTarget on each pod before deleting it
    (volcano-sh/volcano@v1.15.1:pkg/scheduler/cache/cache.go defaultEvictor.Evict); a drain (Eviction API) and
    taint eviction set it too. The Job's DisruptionTarget rule fails it with a message naming the condition, and
    the JobSet's `disruption` rule restarts the gang with RestartJobSetAndIgnoreMaxRestarts: a preemptible run
    preempted more often than maxRestarts is still not Failed. A crash after that still spends the budget."""
    _, spec = jobset_of(rendered, job)
    job_spec = rjob(spec, where)["template"]["spec"]
    status = js.JobSetStatus()
    for _ in range(3 * MAX_RESTARTS):
        failure = js.job_failure(job_spec, js.PodFailure(f"{job}-{where}-0-1", "node", 143, ("DisruptionTarget",)))
        assert failure is not None and failure[0] == "PodFailurePolicy"
        action = js.failure_action(spec, where, *failure)
        assert action == "RestartJobSetAndIgnoreMaxRestarts"
        js.apply_action(spec, status, action)
    assert status.condition is None and status.restarts_count_towards_max == 0
    crash = js.job_failure(job_spec, js.PodFailure(f"{job}-{where}-0-1", "node", 1))
    assert crash is not None and js.failure_action(spec, where, *crash) == "RestartJobSet"


@pytest.mark.parametrize("job", JOBS)
def test_lost_node_holds_the_run_until_the_node_is_out_of_service_and_the_summary_says_so(rendered, job):
    """A pod on a NotReady node is deleted but stays Terminating. With a podFailurePolicy it does not count as
    failed until terminal, and the Job's Failed condition waits for it even after the survivors failed the Job
    (FailureTarget); JobSet acts only on Failed. PodGC ends it once the Node is tainted
    node.kubernetes.io/out-of-service (or deleted), and only then does the gang restart. SUMMARY.md says so."""
    _, spec = jobset_of(rendered, job)
    job_spec = rjob(spec, "node")["template"]["spec"]
    assert not js.counts_as_failed(job_spec, phase="Running", terminating=True)
    assert js.job_condition(failure_target=True, terminating_pods=1) == "FailureTarget"  # no JobSet action
    assert not js.pod_gc_ends(node_ready=False, taints={"node.kubernetes.io/unreachable"})
    assert js.pod_gc_ends(node_ready=False, taints={"node.kubernetes.io/unreachable", "node.kubernetes.io/out-of-service"})
    assert js.pod_gc_ends(node_ready=False, taints=set(), node_exists=False)
    assert js.job_condition(failure_target=True, terminating_pods=0) == "Failed"
    summary = rendered(V2).files["SUMMARY.md"]
    section = summary[summary.index(f"### `{job}`") :] if f"### `{job}`" in summary else summary
    assert (
        "a lost node holds the run (its pod stays Terminating, the healthy nodes' pods are deleted) until the Node is tainted node.kubernetes.io/out-of-service=nodeshutdown:NoExecute or deleted"
    ) in section


def test_finished_run_deletes_its_active_pods_and_frees_the_gpus(rendered):
    """torch: the run completes when every node pod succeeded. MPI: when the launcher did (successPolicy All over
    [launcher]); the sshd `node` pods never end on their own, and the JobSet controller deletes every still-active
    Job of a finished JobSet (kubernetes-sigs/jobset@v0.12.0:pkg/controllers/jobset_controller.go reconcile)."""
    _, torch = jobset_of(rendered, "llama-pretrain")
    assert js.completed(torch, succeeded={"node"}, all_jobs={"node"})
    _, mpi = jobset_of(rendered, "ds-moe")
    assert mpi["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["launcher"]}
    assert not js.completed(mpi, succeeded=set(), all_jobs={"node", "launcher"})
    assert js.completed(mpi, succeeded={"launcher"}, all_jobs={"node", "launcher"})
    assert js.after_finish(active_jobs={"node"}) == set()


def test_the_model_refuses_what_upstream_refuses():
    """Without a failurePolicy JobSet fails at the first failed Job; with Recreate a Job comes back as soon as its
    own predecessor is gone (so the old and new gang can mix under one PodGroup)."""
    assert js.failure_action({}, "node", "BackoffLimitExceeded") == "FailJobSet"
    assert js.may_create_jobs({"failurePolicy": {"restartStrategy": "Recreate"}}, previous_jobs_left=3)
    assert js.job_failure_reason({}, "node", 1) is None  # backoffLimit 6 by default: the pod is retried


@pytest.mark.parametrize("job", JOBS)
def test_a_failed_run_stays_failed(rendered, job):
    """kubeflow-trainer v2.3.0 clears a TrainJob's Failed condition on every reconcile and applies its JobSet again
    (tests/trainer_v230.py): a run whose JobSet a TTL deletes starts over, on all its GPUs, with a fresh budget.
    The runtimes set no TTL, so a failed run's JobSet stays and the TrainJob is never run again; the runtimes of
    earlier fastpath versions (259200 s) would have rerun it every three days."""
    _, jobset = jobset_of(rendered, job)
    assert tv2.reruns(jobset, days=30) == 0
    assert tv2.reruns({**jobset, "ttlSecondsAfterFinished": 259200}, days=30) == 10
    # Only the trainer's own deadline failure is kept, whatever the JobSet does.
    assert tv2.reconcile(tv2.DEADLINE_EXCEEDED, jobset_exists=False, jobset_failed=False) == (tv2.DEADLINE_EXCEEDED, False)


@pytest.mark.parametrize("ttl", [0, 259200])
def test_a_stack_cannot_give_runs_a_ttl(ttl):
    from components.model.config import TrainerConfig

    with pytest.raises(ValueError, match="recreates a failed run once its JobSet is deleted"):
        TrainerConfig(ttlSecondsAfterFinished=ttl)


def test_v2_acceptance_fails_when_a_size_fails(rendered):
    """The acceptance TrainJob names its own runtime, the MPI one without restarts: a size whose mpirun fails makes
    the launcher exit 1 after the series, its Job fails (backoffLimit 0) and the JobSet fails at once
    (RestartJobSet at maxRestarts 0: ReachedMaxRestarts), so the TrainJob is Failed, not Complete. A preemption
    still restarts it."""
    tj, jobset = jobset_of(rendered, "nccl-acceptance")
    assert tj["spec"]["runtimeRef"]["name"] == "fastpath-mpi-acceptance"
    series = tj["spec"]["trainer"]["command"][-1]
    assert series.rstrip().endswith("exit $status") and "|| status=1" in series
    launcher = rjob(jobset, "launcher")["template"]["spec"]
    reason, message = js.job_failure(launcher, js.PodFailure("nccl-acceptance-launcher-0-0", container="node", exit_code=1))
    status = js.JobSetStatus()
    js.apply_action(jobset, status, js.failure_action(jobset, "launcher", reason, message))
    assert (status.condition, status.reason) == ("Failed", "ReachedMaxRestarts")
    preempted = js.PodFailure("nccl-acceptance-node-0-0", container="node", exit_code=143, conditions=("DisruptionTarget",))
    reason, message = js.job_failure(rjob(jobset, "node")["template"]["spec"], preempted)
    assert js.failure_action(jobset, "node", reason, message) == "RestartJobSetAndIgnoreMaxRestarts"
    # The training runtimes keep their budget: only the acceptance's is 0.
    _, training = jobset_of(rendered, "ds-moe")
    assert training["failurePolicy"]["maxRestarts"] == MAX_RESTARTS


@pytest.mark.parametrize("stack", STACKS)
def test_every_jobset_a_runtime_makes_passes_the_jobset_webhook(rendered, stack):
    """JobSet's webhook refuses a failure policy rule named outside `^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`, or
    naming an unknown replicated job or failure reason (kubernetes-sigs/jobset@v0.12.0:pkg/webhooks/jobset_webhook.go
    validateFailurePolicy); the trainer's webhook checks none of it, so such a runtime is accepted and every TrainJob
    naming it never starts (the controller's JobSet apply is refused). Every runtime of every stack, as the JobSet the
    controller builds from it."""
    objs = rendered(stack).objects
    runtimes = [o for o in objs if o["kind"] in ("ClusterTrainingRuntime", "TrainingRuntime")]
    for rt in runtimes:
        assert js.failure_policy_problems(rt["spec"]["template"]["spec"]) == [], rt["metadata"]["name"]
    for tj in (o for o in objs if o["kind"] == "TrainJob"):
        ref = tj["spec"]["runtimeRef"]
        rt = next(o for o in runtimes if (o["kind"], o["metadata"]["name"]) == (ref["kind"], ref["name"]))
        assert js.failure_policy_problems(effective_jobset(tj, rt)["jobset"]) == [], tj["metadata"]["name"]


def test_the_webhook_rule_refuses_what_jobset_refuses():
    """The restated rule fails: a hyphen in a rule name (what fastpath once rendered), a repeated name, an unknown
    reason."""
    bad = {
        "replicatedJobs": [{"name": "node"}],
        "failurePolicy": {
            "rules": [
                {"name": "start-failed", "action": "FailJobSet"},
                {"name": "a", "action": "FailJobSet", "onJobFailureReasons": ["Evicted"]},
                {"name": "a", "action": "FailJobSet", "targetReplicatedJobs": ["launcher"]},
            ]
        },
    }
    assert len(js.failure_policy_problems(bad)) == 4
