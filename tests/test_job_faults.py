"""What the Training Operator v1.9.4 and the kubelet will do with the jobs fastpath emits when they finish, when a
node is lost and when a preflight fails: the operator's rules (tests/operator_v1.py, each citing
kubeflow/trainer@v1.9.4) applied to the real manifests of every committed stack and of every framework."""

import pytest

from components import training_job
from components.config import JobSpec
from tests import operator_v1 as op
from tests.test_training_job import job, profile_for

KINDS = [("pytorch", "fixed"), ("pytorch", "elastic"), ("mpi", "fixed"), ("tensorflow", "fixed")]
IDS = [f"{fw}-{size}" for fw, size in KINDS]


def manifest(fw: str, size: str, fab: str = "ib-sriov", **extra) -> dict:
    return training_job.manifest(training_job.resolve(job(fw, size, **extra), profile_for(fab)))


def gpu_replicas(m: dict) -> dict[str, dict]:
    return {k: v for k, v in op.replicas(m).items() if k != "Launcher"}


@pytest.mark.parametrize(("fw", "size"), KINDS, ids=IDS)
def test_finished_job_gives_its_gpus_back(fw, size):
    """kubeflow/trainer@v1.9.4:pkg/apis/kubeflow.org/v1/{mpi,pytorch,tensorflow}_defaults.go default
    cleanPodPolicy to None, and pkg/controller.v1/common/job.go DeletePodsAndServices deletes nothing for None:
    MPI workers (`sleep 365d`) would keep 8 GPUs and 8 VFs each until the TTL. Every kind states Running, which
    deletes every pod that still holds its node (Running, Pending) and keeps finished pods for their logs."""
    m = manifest(fw, size)
    pods = [op.Pod(r, "Running") for r in gpu_replicas(m)] + [op.Pod("Worker", "Pending"),
                                                            op.Pod("Worker", "Failed"), op.Pod("Worker", "Succeeded")]
    deleted = op.deleted_when_finished(m, pods)
    assert {(p.replica, p.phase) for p in deleted} == {(p.replica, p.phase) for p in pods
                                                       if p.phase in ("Running", "Pending")}
    default = {**m, "spec": {**m["spec"], "runPolicy": {k: v for k, v in m["spec"]["runPolicy"].items()
                                                        if k != "cleanPodPolicy"}}}
    assert op.deleted_when_finished(default, pods) == []  # what the explicit policy is for


@pytest.mark.parametrize(("fw", "size"), KINDS, ids=IDS)
def test_a_failed_preflight_ends_the_pod_and_the_job(fw, size):
    """A GPU pod with the preflight init container must not retry it: under OnFailure the kubelet retries a
    failing init container forever (Init:CrashLoopBackOff; the pod never Running, so
    kubeflow/trainer@v1.9.4:pkg/core/job.go PastBackoffLimit never counts it) while the gang holds every node;
    under ExitCode (pkg/core/pod.go SetRestartPolicy -> Never) the operator reads the default container's exit
    code, which never ran: the placeholder 0xbeef is retryable (pkg/util/train IsRetryableExitCode >= 128) and
    the pod is recreated forever. Never: the pod fails, the replica fails the job, cleanPodPolicy frees the gang."""
    m = manifest(fw, size)
    for name, replica in gpu_replicas(m).items():
        assert "initContainers" in replica["template"]["spec"], name
        assert replica["restartPolicy"] == "Never", name
        assert op.pod_restart_policy(replica["restartPolicy"]) == "Never"
    assert op.is_retryable(op.PLACEHOLDER_EXIT_CODE)  # why ExitCode would loop
    # The reason is in the pod's status, not only its logs.
    init = next(iter(gpu_replicas(m).values()))["template"]["spec"]["initContainers"][0]
    assert init["terminationMessagePolicy"] == "FallbackToLogsOnError"


@pytest.mark.parametrize("nodes", [2, 16, 32])
def test_a_lost_node_costs_no_restart_budget_at_any_size(nodes):
    """kubeflow/trainer@v1.9.4:pkg/core/job.go PastBackoffLimit sums container restarts over all Running pods:
    with OnFailure one lost node of a static torchrun job restarted every survivor's container and a 16-node job
    passed backoffLimit 3 at once. fastpath's PyTorch workers never restart in place: the lost pod is recreated
    by the operator and the survivors' torchrun agents re-rendezvous with it (c10d, torchrun --max-restarts),
    so no restart is counted whatever the size."""
    m = manifest("pytorch", "fixed", nodes=nodes)
    survivors = [op.Pod("Worker", "Running", restarts=0) for _ in range(nodes - 1)]
    replacement = [op.Pod("Worker", "Pending")]
    assert op.counted_restarts(m, survivors + replacement) == 0
    assert not op.past_backoff_limit(m, survivors + replacement)
    env = op.pytorch_env(m)
    assert env["PET_NNODES"] == f"{nodes}:{nodes}" and env["PET_MAX_RESTARTS"] == "3"


def test_mpi_with_no_restarts_fails_at_the_first_fault():
    """maxRestarts 0 (the acceptance job): the launcher runs under Never, no budget at all, and its failed pod
    (with its log) survives cleanPodPolicy Running."""
    m = manifest("mpi", "fixed", maxRestarts=0)
    assert op.replicas(m)["Launcher"]["restartPolicy"] == "Never"
    assert "backoffLimit" not in m["spec"]["runPolicy"]
    assert op.deleted_when_finished(m, [op.Pod("Launcher", "Failed")]) == []


@pytest.mark.parametrize("max_restarts", [1, 3])
def test_mpi_survives_exactly_max_restarts_faults(max_restarts):
    """An MPI fault restarts one container, the launcher (OnFailure); workers (Never) are only recreated.
    PastBackoffLimit fails the job at restarts >= backoffLimit (kubeflow/trainer@v1.9.4:pkg/core/job.go), and
    with backoffLimit 0 at the first restart, so maxRestarts faults need backoffLimit maxRestarts + 1."""
    m = manifest("mpi", "fixed", maxRestarts=max_restarts)
    workers = [op.Pod("Worker", "Running") for _ in range(4)]
    ok = workers + [op.Pod("Launcher", "Running", restarts=max_restarts)]
    over = workers + [op.Pod("Launcher", "Running", restarts=max_restarts + 1)]
    assert not op.past_backoff_limit(m, ok)
    assert op.past_backoff_limit(m, over)


def test_operator_env_points_torchrun_at_the_store_we_create():
    """kubeflow/trainer@v1.9.4:pkg/controller.v1/pytorch/elastic.go: PET_RDZV_ENDPOINT is rdzvHost:rdzvPort
    (default <job>-worker-0, a worker Volcano may not admit when minNodes < maxNodes). Ours names the
    `<job>-rdzv` Service, which is not part of the gang, with the store's port."""
    r = training_job.resolve(job("pytorch", "elastic"), profile_for("roce-shared"))
    m = training_job.manifest(r)
    env = op.pytorch_env(m)
    deployment, service = training_job.rendezvous(r)
    assert env["PET_RDZV_ENDPOINT"] == f"{service['metadata']['name']}:{service['spec']['ports'][0]['port']}"
    assert env["PET_NNODES"] == "2:6" and env["PET_RDZV_CONF"] == "is_host=false,join_timeout=900"
    assert m["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == 2
    assert op.job_succeeds_when(m) == "any worker"


@pytest.mark.parametrize(("fw", "size"), KINDS, ids=IDS)
def test_every_container_is_guaranteed(fw, size):
    """CPU pinning and Topology Manager alignment need Guaranteed pods: every container, init containers
    included, with requests == limits. The operator's own `init-pytorch` is not (requests below limits,
    kubeflow/trainer@v1.9.4:pkg/controller.v1/pytorch/initcontainer.go) but is injected only with a Master
    replica, which fastpath's PyTorchJobs do not have."""
    m = manifest(fw, size)
    assert not (fw == "pytorch" and op.injects_init_pytorch(m))
    for name, replica in op.replicas(m).items():
        spec = replica["template"]["spec"]
        for c in spec["containers"] + spec.get("initContainers", []):
            res = c["resources"]
            assert res["limits"] == res["requests"], (name, c["name"])
            assert {"cpu", "memory"} <= set(res["limits"]), (name, c["name"])


def test_rendezvous_store_script_is_what_the_restart_test_runs():
    """The store the pods run is the one tests/test_restart.py starts: the same code and port variable."""
    r = training_job.resolve(JobSpec(name="x", image="nvcr.io/nvidia/pytorch:25.10-py3", command=["python", "t.py"],
                                     nodes=2), profile_for("tcp"))
    (c,) = training_job.rendezvous(r)[0]["spec"]["template"]["spec"]["containers"]
    assert c["command"] == ["python", "-c", training_job.RDZV_STORE]
    assert {"name": "FASTPATH_RDZV_PORT", "value": str(training_job.RDZV_PORT)} in c["env"]
