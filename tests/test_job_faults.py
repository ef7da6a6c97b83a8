"""What the Training Operator v1.9.4 and the kubelet will do with the jobs fastpath emits when they finish, when a
node is lost or drained and when a preflight fails: the operator's rules (tests/operator_v1.py, each citing
kubeflow/trainer@v1.9.4) applied to the real manifests, and the entrypoint scripts run for real."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from components.jobs import component
from components.jobs.launch import LAUNCH, LAUNCHER, RDZV_STORE
from components.jobs.operator_v1 import RDZV_PORT, join_timeout, rendezvous
from components.jobs.resolve import resolve
from components.jobs.shell import program
from components.model.job import JobSpec
from tests import operator_v1 as op
from tests.helpers import init_checks
from tests.posix_sh import DASH, needs_dash
from tests.test_training_job import job, profile_for

KINDS = [("pytorch", "fixed"), ("pytorch", "elastic"), ("mpi", "fixed"), ("tensorflow", "fixed")]
IDS = [f"{fw}-{size}" for fw, size in KINDS]


def manifest(fw: str, size: str, fab: str = "ib-sriov", **extra) -> dict:
    return component.manifest(resolve(job(fw, size, **extra), profile_for(fab)))


def gpu_replicas(m: dict) -> dict[str, dict]:
    return {k: v for k, v in op.replicas(m).items() if k != "Launcher"}


@pytest.mark.parametrize(("fw", "size"), KINDS, ids=IDS)
def test_finished_job_gives_its_gpus_back(fw, size):
    """kubeflow/trainer@v1.9.4:pkg/apis/kubeflow.org/v1/{mpi,pytorch,tensorflow}_defaults.go default
    cleanPodPolicy to None, and pkg/controller.v1/common/job.go DeletePodsAndServices deletes nothing for None:
    MPI workers (`sleep 365d`) would keep 8 GPUs and 8 VFs each until the TTL. Every kind states Running, which
    deletes every pod that still holds its node (Running, Pending) and keeps finished pods for their logs."""
    m = manifest(fw, size)
    pods = [op.Pod(r, "Running") for r in op.replicas(m)] + [op.Pod("Worker", "Pending"), op.Pod("Worker", "Failed"), op.Pod("Worker", "Succeeded")]
    deleted = op.deleted_when_finished(m, pods)
    assert {(p.replica, p.phase) for p in deleted} == {(p.replica, p.phase) for p in pods if p.phase in ("Running", "Pending")}
    default = {**m, "spec": {**m["spec"], "runPolicy": {k: v for k, v in m["spec"]["runPolicy"].items() if k != "cleanPodPolicy"}}}
    assert op.deleted_when_finished(default, pods) == []  # what the explicit policy is for


@pytest.mark.parametrize(("fw", "size"), KINDS, ids=IDS)
def test_nothing_restarts_in_place_so_no_budget_is_spent(fw, size):
    """kubeflow/trainer@v1.9.4:pkg/core/job.go PastBackoffLimit sums container restarts over all Running pods of
    OnFailure/Always/ExitCode replicas: with OnFailure one lost node of a static torchrun job restarted every
    survivor's container and a 16-node job passed backoffLimit 3 at once. fastpath's pods run under Never or
    ExitCode (pkg/core/pod.go SetRestartPolicy: pod restartPolicy Never), so the count stays 0, and no
    backoffLimit is set."""
    m = manifest(fw, size)
    assert {op.pod_restart_policy(r["restartPolicy"]) for r in op.replicas(m).values()} == {"Never"}
    assert "backoffLimit" not in m["spec"]["runPolicy"]


@pytest.mark.parametrize(("fw", "size"), KINDS, ids=IDS)
def test_a_failed_preflight_ends_the_pod_and_the_job(fw, size):
    """A failed preflight must not loop while the gang holds every node. Under OnFailure the kubelet retries a
    failing init container forever (the pod never Running, so PastBackoffLimit never counts it); under ExitCode
    the operator reads the main container's exit code (kubeflow/trainer@v1.9.4 pkg/controller.v1/common/pod.go),
    which never ran after an init failure: the placeholder 0xbeef is retryable (pkg/util/train
    IsRetryableExitCode >= 128) and the pod is recreated forever. So: an init container only under Never, and
    under ExitCode the preflight is the main container's first step, exiting 3 (not retryable)."""
    m = manifest(fw, size)
    for name, replica in gpu_replicas(m).items():
        spec = replica["template"]["spec"]
        if replica["restartPolicy"] == "ExitCode":
            assert not init_checks(spec), name  # native sidecars (telemetry) never fail their pod
            (c,) = spec["containers"]
            env = {e["name"]: e.get("value") for e in c["env"]}
            assert env["FASTPATH_PREFLIGHT"] == "/fastpath/preflight.sh" and "PREFLIGHT_GPUS" in env
            assert c["command"][:3] == ["sh", "-c", LAUNCH]
            assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
            failed = op.Pod(name, "Failed", exit_code=3)
            assert op.pytorch_outcome(m, [failed]) == "Failed"
        else:
            assert replica["restartPolicy"] == "Never", name
            (init,) = init_checks(spec)
            assert init["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert op.is_retryable(op.PLACEHOLDER_EXIT_CODE)  # why an init container under ExitCode would loop


@pytest.mark.parametrize(
    ("pod", "outcome"),
    [
        (op.Pod("Worker", "Running", deleting=True), "recreated"),  # its node is gone: Terminating, not Failed
        (op.Pod("Worker", "Failed", exit_code=143), "recreated"),  # drained, evicted, preempted: LAUNCH's 143
        (op.Pod("Worker", "Failed", exit_code=1), "Failed"),  # torchrun gave up (max restarts, join timeout)
        (op.Pod("Worker", "Failed", exit_code=3), "Failed"),  # preflight
    ],
    ids=["node-lost", "drained", "torchrun-gave-up", "preflight"],
)
def test_pytorch_job_survives_a_lost_or_drained_pod_and_fails_on_a_real_failure(pod, outcome):
    """kubeflow/trainer@v1.9.4:pkg/core/status.go counts a Running pod with a deletionTimestamp as failed, and
    pytorchjob_controller.go UpdateJobStatus fails the job for a failed pod under Never: a lost node or a drain
    would fail every 16-node job. Under ExitCode the operator waits for the pod to go and makes it again
    (retryable codes), and only torchrun's own failure or the preflight's end the job."""
    m = manifest("pytorch", "fixed", nodes=16)
    survivors = [op.Pod("Worker", "Running") for _ in range(15)]
    assert op.pytorch_outcome(m, [*survivors, pod]) == outcome
    never = {**m, "spec": {**m["spec"], "pytorchReplicaSpecs": {"Worker": {**m["spec"]["pytorchReplicaSpecs"]["Worker"], "restartPolicy": "Never"}}}}
    assert op.pytorch_outcome(never, [*survivors, pod]) == "Failed"  # what Never would have done


def test_operator_env_points_torchrun_at_the_store_we_create():
    """kubeflow/trainer@v1.9.4:pkg/controller.v1/pytorch/elastic.go: PET_RDZV_ENDPOINT is rdzvHost:rdzvPort
    (default <job>-worker-0, a worker Volcano may not admit when minNodes < maxNodes). Ours names the
    `<job>-rdzv` Service, which is not part of the gang, with the store's port."""
    r = resolve(job("pytorch", "elastic"), profile_for("roce-shared"))
    m = component.manifest(r)
    env = op.pytorch_env(m)
    store, service, pdb = rendezvous(r)
    assert env["PET_RDZV_ENDPOINT"] == f"{service['metadata']['name']}:{service['spec']['ports'][0]['port']}"
    assert env["PET_NNODES"] == "2:6"
    # prod-ib's health releases a lost node after 10 min: survivors wait for that and the replacement.
    assert env["PET_RDZV_CONF"] == f"is_host=false,join_timeout={join_timeout(r.profile)},read_timeout=600"
    assert join_timeout(r.profile) == 1500
    assert m["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == 2
    assert op.job_succeeds_when(m) == "any worker"
    # On CPU nodes only (the cluster has them by default): a lost GPU node, or a drain fastpath causes, never
    # takes the store along.
    aff = store["spec"]["template"]["spec"]["affinity"]
    assert aff == {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "feature.node.kubernetes.io/pci-10de.present", "operator": "DoesNotExist"}]}]}
        }
    }
    assert pdb["spec"]["minAvailable"] == 1


@pytest.mark.parametrize(("fw", "size"), KINDS, ids=IDS)
def test_every_container_is_guaranteed_and_on_whole_cores(fw, size):
    """CPU pinning and Topology Manager alignment need Guaranteed pods: every container, init containers
    included, with requests == limits. The operator's own `init-pytorch` is not (requests below limits,
    kubeflow/trainer@v1.9.4:pkg/controller.v1/pytorch/initcontainer.go) but is injected only with a Master
    replica, which fastpath's PyTorchJobs do not have. CPUs come in whole cores: the static CPU manager's
    full-pcpus-only refuses an odd count (SMTAlignmentError)."""
    m = manifest(fw, size)
    assert not (fw == "pytorch" and op.injects_init_pytorch(m))
    for name, replica in op.replicas(m).items():
        spec = replica["template"]["spec"]
        for c in spec["containers"] + spec.get("initContainers", []):
            res = c["resources"]
            assert res["limits"] == res["requests"], (name, c["name"])
            assert {"cpu", "memory"} <= set(res["limits"]), (name, c["name"])
        main = spec["containers"][0]["resources"]["limits"]["cpu"]
        assert name == "Launcher" or main % 2 == 0, (name, main)


def test_rendezvous_store_script_is_what_the_restart_test_runs():
    """The store the pods run is the one tests/test_restart.py starts: the same code and port variable."""
    r = resolve(JobSpec(name="x", image="nvcr.io/nvidia/pytorch:25.10-py3", command=["python", "t.py"], nodes=2), profile_for("tcp"))
    (c,) = rendezvous(r)[0]["spec"]["template"]["spec"]["containers"]
    assert c["command"] == ["python", "-c", RDZV_STORE]
    assert {"name": "FASTPATH_RDZV_PORT", "value": str(RDZV_PORT)} in c["env"]
    # It knows the rendezvous it serves (the job's rdzvId) and how long a run may go quiet before it is over.
    assert {"name": "FASTPATH_RDZV_ID", "value": "x"} in c["env"]
    assert {"name": "FASTPATH_RDZV_IDLE_SECONDS", "value": str(2 * join_timeout(r.profile))} in c["env"]


# ------------------------------------------------------------------------------------ the entrypoints, for real


def test_a_program_reaches_the_manifest_without_its_comments_and_with_its_values(tmp_path):
    """The .sh files explain themselves in comment lines; what a container runs is the code alone, with each
    __NAME__ given, and a name without a value is refused at import, not shipped."""
    f = tmp_path / "p.sh"
    f.write_text("# shellcheck shell=sh\n# why\nsleep __GRACE__\n  # indented\nexit 0\n")
    assert program(f, {"GRACE": 30}) == "sleep 30\nexit 0\n"
    with pytest.raises(ValueError, match="p.sh: no value for GRACE"):
        program(f)


def launch(tmp_path: Path, child: list[str], preflight: str | None = None) -> subprocess.Popen:
    env = {"PATH": os.environ["PATH"]}
    if preflight is not None:
        script = tmp_path / "preflight.sh"
        script.write_text(preflight)
        env["FASTPATH_PREFLIGHT"] = str(script)
    return subprocess.Popen([DASH, "-c", LAUNCH, "fastpath", *child], env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@needs_dash
@pytest.mark.parametrize(
    ("child", "preflight", "code"),
    [
        (["true"], None, 0),
        (["sh", "-c", "exit 1"], None, 1),  # torchrun gave up: not retryable, the job fails
        (["sh", "-c", "kill -9 $$"], None, 1),  # an OOM kill is not a reason to come back forever
        (["true"], "echo 'preflight FAIL: 4 GPUs visible'; exit 1", 3),
        (["true"], "exit 0", 0),
    ],
    ids=["ok", "torchrun-failed", "oom-killed", "preflight-failed", "preflight-passed"],
)
def test_pytorch_entrypoint_exit_codes(tmp_path, child, preflight, code):
    p = launch(tmp_path, child, preflight)
    out, _ = p.communicate(timeout=30)
    assert p.returncode == code, out
    if code:  # what the operator then does with the pod: the job fails, no recreation loop
        job = manifest("pytorch", "fixed")
        assert op.pytorch_outcome(job, [op.Pod("Worker", "Failed", exit_code=p.returncode)]) == "Failed"


@needs_dash
def test_pytorch_entrypoint_answers_sigterm_with_a_retryable_code(tmp_path):
    """A drain or an eviction sends SIGTERM: torchrun alone exits 1 (pytorch/pytorch@v2.13.0:
    torch/distributed/launcher/api.py launch_agent re-raises the SignalException; not retryable, the job would
    fail); the entrypoint stops it and exits 143, so the operator recreates the pod and it rejoins."""
    marker = tmp_path / "child-got-term"
    p = launch(tmp_path, ["sh", "-c", f"trap 'touch {marker}; exit 1' TERM; while :; do sleep 0.1; done"])
    time.sleep(0.5)
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=30)
    assert p.returncode == 143 and op.is_retryable(143), out
    assert marker.exists()  # torchrun was told to stop its workers


def mpi_world(tmp_path: Path, workers: dict[str, str], mpirun_fails: int) -> tuple[list[str], dict]:
    """A launcher pod's world: /etc/mpi (hostfile, kubexec.sh) and kubectl, as fakes; workers maps each worker to
    `up`, `Failed` or `deleting`; the fake mpirun fails `mpirun_fails` times, then succeeds."""
    mpi = tmp_path / "etc-mpi"
    mpi.mkdir()
    (mpi / "hostfile").write_text("".join(f"{w} slots=8\n" for w in workers))
    log = tmp_path / "calls"
    up = " ".join(w for w, s in workers.items() if s == "up")
    (mpi / "kubexec.sh").write_text(f'#!/bin/sh\necho "exec $*" >> {log}\ncase " {up} " in *" $1 "*) exit 0;; esac\nexit 1\n')
    states = "".join(f'  {w}) echo "{"Failed" if s == "Failed" else "Running"}{" 2026-11-22T10:00:00Z" if s == "deleting" else ""}";;\n' for w, s in workers.items())
    kubectl = tmp_path / "kubectl"
    kubectl.write_text(f'#!/bin/sh\ncase "$3" in\n{states}esac\n')
    count = tmp_path / "count"
    mpirun = tmp_path / "mpirun"
    mpirun.write_text(f'#!/bin/sh\nn=$(cat {count} 2>/dev/null || echo 0); echo $((n + 1)) > {count}\necho "mpirun $*" >> {log}\n[ "$n" -ge {mpirun_fails} ]\n')
    for f in (mpi / "kubexec.sh", kubectl, mpirun):
        f.chmod(0o755)
    env = {"PATH": os.environ["PATH"], "FASTPATH_MPI_DIR": str(mpi), "FASTPATH_KUBECTL": str(kubectl)}
    return [str(mpirun), "-np", "16", "all_reduce_perf_mpi"], env


@needs_dash
@pytest.mark.parametrize(
    ("workers", "fails", "max_restarts", "code", "mpiruns"),
    [
        ({"w-0": "up", "w-1": "up"}, 0, 3, 0, 1),
        ({"w-0": "up", "w-1": "up"}, 2, 3, 0, 3),  # relaunched twice, then through
        ({"w-0": "up", "w-1": "up"}, 5, 3, 1, 4),  # 1 + maxRestarts attempts, then the job fails
        ({"w-0": "up", "w-1": "Failed"}, 0, 3, 2, 0),  # a worker's preflight failed: stop at once
        ({"w-0": "up", "w-1": "deleting"}, 0, 3, 2, 0),  # a worker's node is gone: stop at once
    ],
    ids=["ok", "two-failures", "out-of-restarts", "worker-failed", "worker-deleting"],
)
def test_mpi_launcher_waits_retries_and_stops(tmp_path, workers, fails, max_restarts, code, mpiruns):
    """The v1 launcher starts before its workers run and the operator never recreates a worker
    (kubeflow/trainer@v1.9.4 pkg/controller.v1/mpi): the launcher's entrypoint waits for each worker through
    kubexec.sh, stops at once on a worker that failed or is being deleted, and relaunches mpirun itself."""
    cmd, env = mpi_world(tmp_path, workers, fails)
    env["FASTPATH_MAX_RESTARTS"] = str(max_restarts)
    p = subprocess.run([DASH, "-c", LAUNCHER, "launcher", *cmd], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == code, p.stderr
    calls = (tmp_path / "calls").read_text().splitlines() if (tmp_path / "calls").exists() else []
    assert sum(c.startswith("mpirun") for c in calls) == mpiruns
    if 0 < mpiruns and fails:
        assert any("kill -9 -1" in c for c in calls)  # leftover ranks cleared before a relaunch


def test_jobs_wait_for_the_training_operators_own_objects(rendered):
    """A job created before the operator's CRDs, its Deployment (webhook server) and its
    ValidatingWebhookConfiguration is refused (failurePolicy Fail, kubeflow/trainer@v1.9.4
    manifests/base/webhook), and the provider retries a missing CRD for ~30 s only. The provider builds those
    objects inside the kustomize Directory (a remote component, which the SDK never expands into children): a job
    that depends on the Directory itself waits until the provider has created every one, the Deployment ready."""
    run = rendered("dev").run
    by = {r.urn: r for r in run.registrations}
    (m,) = [r for r in run.registrations if r.type.endswith(":PyTorchJob")]
    types = {by[d].type for d in m.dependencies if d in by}
    assert "kubernetes:kustomize/v2:Directory" in types


def start_store(idle_seconds: int) -> tuple[int, subprocess.Popen]:
    """The real store program (launch.RDZV_STORE) on a free local port, for run `run`."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "FASTPATH_RDZV_PORT": str(port), "FASTPATH_RDZV_ID": "run", "FASTPATH_RDZV_IDLE_SECONDS": str(idle_seconds)}
    return port, subprocess.Popen([sys.executable, "-c", RDZV_STORE], env=env, stdout=subprocess.PIPE, text=True)


@pytest.mark.slow
@needs_dash
def test_a_pod_that_keeps_dying_stops_after_its_start_budget(tmp_path):
    """ExitCode recreations are never counted by the operator (kubeflow/trainer@v1.9.4 pkg/core/job.go
    PastBackoffLimit sees restarts of Running pods only, and a recreated pod starts at 0), so a one-node job
    that is OOM-killed (137, retryable) would come back forever. The entrypoint counts each start of its pod in
    the job's rendezvous store (the real store script) and fails the job past FASTPATH_MAX_STARTS."""
    port, store = start_store(idle_seconds=600)
    try:
        assert "listening" in store.stdout.readline()
        env = {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "FASTPATH_MAX_STARTS": "2", "PET_RDZV_ENDPOINT": f"127.0.0.1:{port}", "HOSTNAME": "run-worker-0"}
        codes = []
        for _ in range(3):
            p = subprocess.run([DASH, "-c", LAUNCH, "fastpath", "true"], env=env, capture_output=True, text=True, timeout=120)
            codes.append(p.returncode)
        assert codes == [0, 0, 1], p.stderr
        assert "started 3 times (at most 2)" in p.stderr
        other = subprocess.run([DASH, "-c", LAUNCH, "fastpath", "true"], env={**env, "HOSTNAME": "run-worker-1"}, capture_output=True, text=True, timeout=120)
        assert other.returncode == 0  # per pod, not per job
    finally:
        store.terminate()
        store.wait(timeout=30)


@needs_dash
def test_sigterm_during_the_preflight_is_retryable_too(tmp_path):
    p = launch(tmp_path, ["true"], preflight="sleep 2")
    time.sleep(0.5)
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=30)
    assert p.returncode == 143, out


@pytest.mark.slow  # two real stores and a client, torch imported three times: about 15 s
def test_the_store_ends_once_no_agent_keeps_the_rendezvous_alive(tmp_path):
    """The store (launch.RDZV_STORE) runs until the first rendezvous state appears and then until that state has
    not changed for FASTPATH_RDZV_IDLE_SECONDS: a run's agents rewrite it at every keep-alive
    (torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py, key `torch.rendezvous.<run id>`). It then
    exits 0, which completes its batch Job; a SIGTERM (an eviction) exits 1, so the Job makes it again."""
    from datetime import timedelta

    dist = pytest.importorskip("torch.distributed")
    port, store = start_store(idle_seconds=2)
    try:
        client = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=20))
        time.sleep(3)
        assert store.poll() is None  # no run has started: it waits for one, however long
        for beat in range(6):  # agents keep the rendezvous alive: it stays
            client.set("torch.rendezvous.run", f"state {beat}")
            time.sleep(0.5)
        assert store.poll() is None
        assert store.wait(timeout=20) == 0  # then nothing: the run is over
        assert "the run is over" in store.stdout.read()
    finally:
        store.kill()
    _, again = start_store(idle_seconds=2)
    try:
        assert again.stdout.readline().startswith("c10d rendezvous store listening")
        again.terminate()
        assert again.wait(timeout=20) == 1
    finally:
        again.kill()
