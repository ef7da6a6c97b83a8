"""Faults and cleanup of a v2 run, as JobSet v0.12.0 handles them (tests/jobset_v012.py restates the rules), applied
to every ClusterTrainingRuntime the committed v2 stack publishes and the JobSet its jobs become: a lost node
restarts the whole gang from the checkpoint within the budget, a failed preflight ends the run, a finished run
frees its GPUs. The trainer sets none of this (kubeflow/trainer@v2.3.0: no failurePolicy, backoffLimit or
restartPolicy anywhere in pkg/): the runtime decides it, and a TrainJob cannot change it."""

import pytest

from components.trainer_v2_runtime import PREFLIGHT, effective_jobset
from tests import jobset_v012 as js

V2 = "prod-v2"
MAX_RESTARTS = 5  # stacks/Pulumi.prod-v2.yaml trainer.maxRestarts


def runtimes(rendered) -> list[dict]:
    return [o for o in rendered(V2).objects if o["kind"] == "ClusterTrainingRuntime"]


def jobset_of(rendered, job: str) -> tuple[dict, dict]:
    objs = rendered(V2).objects
    tj = next(o for o in objs if o["kind"] == "TrainJob" and o["metadata"]["name"] == job)
    rt = next(o for o in objs if o["kind"] == "ClusterTrainingRuntime"
              and o["metadata"]["name"] == tj["spec"]["runtimeRef"]["name"])
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
        assert policy["restartStrategy"] == "BlockingRecreate" and policy["maxRestarts"] == MAX_RESTARTS


# (job, replicated job that loses a pod)
LOST = [("llama-pretrain", "node"), ("ds-moe", "node"), ("ds-moe", "launcher"), ("nccl-acceptance", "node")]


@pytest.mark.parametrize(("job", "where"), LOST, ids=[f"{j}:{w}" for j, w in LOST])
def test_lost_node_restarts_the_gang_from_the_checkpoint_within_the_budget(rendered, job, where):
    """A pod on a lost node (or OOM-killed, evicted, crashed: any exit but the preflight's) fails its Job
    (BackoffLimitExceeded); no rule matches that reason, so RestartJobSet recreates every Job, the new gang only
    once the old one is gone (BlockingRecreate), MAX_RESTARTS times; the next loss fails the run and frees its
    nodes. Each new pod mounts the same directory of the claim (subPathExpr on the JobSet's name, which a restart
    keeps), so the run resumes from its last checkpoint."""
    _, spec = jobset_of(rendered, job)
    job_spec = rjob(spec, where)["template"]["spec"]
    status = js.JobSetStatus()
    for attempt in range(MAX_RESTARTS + 1):
        reason = js.job_failure_reason(job_spec, container="node", exit_code=137)
        assert reason == "BackoffLimitExceeded"
        action = js.failure_action(spec, where, reason)
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


@pytest.mark.parametrize("job", ["llama-pretrain", "llama-sft", "ds-moe", "nccl-acceptance"])
def test_failed_preflight_fails_the_run_at_once(rendered, job):
    """The preflight exits 3 on a node that is not on the fast path: the Job's podFailurePolicy fails it with
    reason PodFailurePolicy, and the JobSet's first rule turns that into FailJobSet: no restart (another attempt
    would land on the same broken node), no budget spent, the gang's GPUs freed."""
    _, spec = jobset_of(rendered, job)
    for r in spec["replicatedJobs"]:
        job_spec = r["template"]["spec"]
        assert [c["name"] for c in job_spec["template"]["spec"]["initContainers"]] == [PREFLIGHT]
        reason = js.job_failure_reason(job_spec, container=PREFLIGHT, exit_code=3)
        assert reason == "PodFailurePolicy"
        status = js.JobSetStatus()
        js.apply_action(spec, status, js.failure_action(spec, r["name"], reason))
        assert (status.condition, status.reason, status.restarts) == ("Failed", "FailJobSetAction", 0)
    # Any other preflight exit (a kill during it, say) is an ordinary failure: a gang restart.
    job_spec = rjob(spec, "node")["template"]["spec"]
    assert js.failure_action(spec, "node", js.job_failure_reason(job_spec, PREFLIGHT, 137)) == "RestartJobSet"


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
    # The JobSet (its pods and logs) goes after the runtime's TTL; the TrainJob and its status stay.
    assert mpi["ttlSecondsAfterFinished"] == torch["ttlSecondsAfterFinished"] == 259200


def test_the_model_refuses_what_upstream_refuses():
    """Without a failurePolicy JobSet fails at the first failed Job; with Recreate a Job comes back as soon as its
    own predecessor is gone (so the old and new gang can mix under one PodGroup)."""
    assert js.failure_action({}, "node", "BackoffLimitExceeded") == "FailJobSet"
    assert js.may_create_jobs({"failurePolicy": {"restartStrategy": "Recreate"}}, previous_jobs_left=3)
    assert js.job_failure_reason({}, "node", 1) is None  # backoffLimit 6 by default: the pod is retried
