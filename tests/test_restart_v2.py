"""Restart from checkpoint on Kubeflow Trainer v2, proven with real processes as tests/test_restart.py proves it
for v1: the `node` container of a prod-v2 torch TrainJob's effective pod (the published ClusterTrainingRuntime
merged with the TrainJob fastpath renders) runs as two pods, two torchrun agents on gloo/CPU. One pod is killed
mid-run; the survivor cannot recover on its own (torchrun's static rendezvous takes no replacement), so the gang is
deleted and started again, as JobSet's failure policy does, and the new gang resumes from the last checkpoint and
ends bit-identical to a run that was never killed.

Upstream behaviour relied on:
- kubeflow/trainer@v2.3.0:pkg/runtime/framework/plugins/torch/torch.go EnforceMLPolicy: the `node` container gets
  PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK (the Job completion index), PET_MASTER_ADDR (node 0's pod) and
  PET_MASTER_PORT=29500, and no rendezvous backend (components.jobs.runtime_v2.controller.effective_jobset restates it).
- pytorch/pytorch@v2.13.0:torch/distributed/elastic/rendezvous/static_tcp_rendezvous.py: with no --rdzv-backend
  torchrun rendezvouses statically (torch/distributed/run.py get_rdzv_endpoint: MASTER_ADDR:MASTER_PORT) on a
  TCPStore that node rank 0's agent hosts and its workers share (use_agent_store); a fixed world, no
  re-rendezvous, and --max-restarts defaults to 0, so an agent whose worker fails exits.
- kubernetes-sigs/jobset@v0.12.0:pkg/controllers/failure_policy.go: a failed pod fails its Job (backoffLimit 0),
  the RestartJobSet action recreates every Job, BlockingRecreate only once the old gang is gone, up to
  maxRestarts (tests/jobset_v012.py restates the rules; tests/test_trainer_faults.py applies them to the runtimes).
"""

import os
import re
import sys
import time
from pathlib import Path

import pytest

from tests import jobset_v012 as js
from tests.test_restart import KEEP, ROOT, SAVE_EVERY, STEPS, digest, free_port, kill_like_a_node_failure, start, steps

V2 = "prod-v2"
JOB = "restart"
PODS = 2
KILL_AT = 17  # checkpoint 15 is complete, 16 and 17 are not saved
SURVIVOR_WAIT = 30  # seconds the survivor gets to recover on its own before the gang is deleted
COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
JOBSET_NAME = "metadata.labels['jobset.sigs.k8s.io/jobset-name']"


def trainjob_and_runtime(rendered) -> tuple[dict, dict]:
    """A two-node prod-v2 TrainJob built as the renderer builds a `fastpath:jobs` entry, and the
    ClusterTrainingRuntime it names as the rendered stack publishes it."""
    from components.jobs.resolve import resolve
    from components.jobs.trainjob import job_runtime, train_job
    from components.model.config import PlatformConfig
    from components.model.job import JobSpec
    from components.model.profile import profile
    from tests.conftest import stack_platform

    spec = JobSpec(
        name=JOB,
        image="nvcr.io/nvidia/pytorch:25.10-py3",
        nodes=PODS,
        command=["python", "-u", "/workspace/files/train.py", "--steps", str(STEPS), "--save-every", str(SAVE_EVERY), "--keep", str(KEEP), "--step-seconds", "0.1"],
    )
    r = resolve(spec, profile(PlatformConfig.model_validate(stack_platform(V2))))
    job = train_job(r)
    (runtime,) = [o for o in rendered(V2).objects if o["kind"] == "ClusterTrainingRuntime" and o["metadata"]["name"] == job["spec"]["runtimeRef"]["name"]]
    assert runtime == job_runtime(r)
    return job, runtime


def pods_here(rendered, claim: Path, port: int) -> tuple[list[str], list[dict[str, str]]]:
    """The `node` container's command, and its env per pod as the kubelet resolves it, of the effective pod, with
    only what must differ on one CPU machine changed: node 0's address (127.0.0.1 and a free port, not
    <job>-node-0-0.<job>:29500), one process per pod (no 8 GPUs here), loopback for gloo, local paths (the claim's
    directory for this job where the pod mounts it with subPathExpr)."""
    from components.jobs.runtime_v2.controller import NODE, TRAINER_PORT, effective_pod

    job, runtime = trainjob_and_runtime(rendered)
    pod = effective_pod(job, runtime)
    (node,) = [c for c in pod["spec"]["containers"] if c["name"] == NODE]
    values = {e["name"]: e["value"] for e in node["env"] if "value" in e}
    refs = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in node["env"] if "valueFrom" in e}
    # What the torch plugin injected (kubeflow/trainer@v2.3.0 torch.go), and that nothing asks for elastic rendezvous.
    assert {k: v for k, v in values.items() if k.startswith("PET_")} == {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "8", "PET_MASTER_ADDR": f"{JOB}-node-0-0.{JOB}", "PET_MASTER_PORT": str(TRAINER_PORT)}
    assert refs == {"FASTPATH_TRAINJOB": JOBSET_NAME, "PET_NODE_RANK": COMPLETION_INDEX}
    assert values["CHECKPOINT_DIR"] == "/checkpoints"
    mount = next(m for m in node["volumeMounts"] if m["name"] == "checkpoints")
    assert (mount["mountPath"], mount["subPathExpr"]) == ("/checkpoints", "$(FASTPATH_TRAINJOB)")
    assert node["command"][:2] == ["torchrun", "/workspace/files/train.py"]

    here = {
        "PET_MASTER_ADDR": "127.0.0.1",
        "PET_MASTER_PORT": str(port),
        "PET_NPROC_PER_NODE": "1",
        "GLOO_SOCKET_IFNAME": "lo",
        "NCCL_SOCKET_IFNAME": "lo",
        "CHECKPOINT_DIR": str(claim / JOB),
        "OMP_NUM_THREADS": "1",
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    envs = [{**values, "FASTPATH_TRAINJOB": JOB, "PET_NODE_RANK": str(index), **here} for index in range(PODS)]
    cmd = [str(Path(sys.executable).with_name("torchrun")), str(ROOT / "examples" / "train.py"), *node["command"][2:]]
    return cmd, envs


def start_gang(cmd: list[str], envs: list[dict], logs: Path) -> list:
    """Every pod of the JobSet's `node` Job at once (Volcano places the gang whole)."""
    logs.mkdir(parents=True, exist_ok=True)
    return [start(cmd, env, logs / f"node-{index}.log") for index, env in enumerate(envs)]


def wait_all(pods: list, timeout: float) -> list[int | None]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(p.poll() is None for p in pods):
        time.sleep(0.2)
    return [p.poll() for p in pods]


def wait_for_step(log: Path, step: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if re.search(rf"^step {step} ", log.read_text(), re.M):
            return
        time.sleep(0.02)
    raise AssertionError(f"no step {step} in {timeout}s:\n{log.read_text()}")


TRAINING_OUTPUT = re.compile(r"^(resumed from step \d+|step \d+ |done digest )")


def lines(logs: Path, index: int) -> list[str]:
    """What train.py printed in pod `index` (torchrun's and torch's own messages share the log)."""
    return [line for line in (logs / f"node-{index}.log").read_text().splitlines() if TRAINING_OUTPUT.match(line)]


def log(logs: Path, index: int) -> str:
    return (logs / f"node-{index}.log").read_text()


@pytest.fixture(scope="module")
def uninterrupted(rendered, tmp_path_factory) -> list[str]:
    """train.py's output on node 0 of the same two pods, never killed."""
    logs = tmp_path_factory.mktemp("uninterrupted")
    cmd, envs = pods_here(rendered, logs / "claim", free_port())
    codes = wait_all(start_gang(cmd, envs, logs), 120)
    assert codes == [0] * PODS, log(logs, 0) + log(logs, 1)
    assert steps(lines(logs, 0)) == list(range(1, STEPS + 1))
    return lines(logs, 0)


def jobset_action(rendered, pod: int, exit_code: int) -> tuple[str, js.JobSetStatus]:
    """What JobSet v0.12.0 does when pod `pod` of the `node` Job fails with `exit_code`, by the rendered policy."""
    from components.jobs.runtime_v2.controller import NODE, effective_jobset

    jobset = effective_jobset(*trainjob_and_runtime(rendered))["jobset"]
    node_job = next(r for r in jobset["replicatedJobs"] if r["name"] == NODE)["template"]["spec"]
    failure = js.job_failure(node_job, js.PodFailure(f"{JOB}-{NODE}-0-{pod}", NODE, exit_code))
    assert failure is not None and failure[0] == "BackoffLimitExceeded"  # backoffLimit 0: the first failed pod
    action = js.failure_action(jobset, NODE, *failure)
    status = js.JobSetStatus()
    js.apply_action(jobset, status, action)
    assert not js.may_create_jobs(jobset, previous_jobs_left=1)  # BlockingRecreate: the old gang goes first
    return action, status


@pytest.mark.slow
@pytest.mark.parametrize("victim", [0, 1], ids=["node-0-hosts-the-store", "node-1"])
def test_killed_pod_fails_the_gang_and_the_recreated_gang_resumes_from_checkpoint(rendered, uninterrupted, tmp_path, victim):
    """One pod of a two-pod torch TrainJob dies mid-run (SIGKILL of its torchrun agent and worker, exit 137), be
    it node 0, whose agent hosts the static rendezvous store, or node 1. The survivor does not recover: static
    rendezvous has nobody to wait for, its worker's collectives fail and its agent (no restarts) ends non-zero
    (given SURVIVOR_WAIT seconds; one still stuck then counts as not recovering too, and is killed). Either failed
    pod fails the `node` Job and the rendered failure policy restarts the JobSet (tests/jobset_v012.py), which
    deletes what is left of the gang before it creates the new one; both pods start again with the same command
    and env, and every rank resumes from step 15: train.py prints from rank 0 only, and a rank that started
    elsewhere would run a different number of collectives, so the gang could not end 0. The model is
    bit-identical to an uninterrupted run of the same pods."""
    claim = tmp_path / "claim"
    cmd, envs = pods_here(rendered, claim, free_port())
    survivor = 1 - victim
    first = start_gang(cmd, envs, tmp_path / "first")
    try:
        wait_for_step(tmp_path / "first" / "node-0.log", KILL_AT, 120)  # rank 0, on node 0, prints the steps
        kill_like_a_node_failure(first[victim])  # no clean shutdown, no final save
        lost = time.monotonic()
        (code,) = wait_all([first[survivor]], SURVIVOR_WAIT)
        waited = time.monotonic() - lost
    finally:
        for pod in first:  # the JobSet deletes the old gang's Jobs, and their pods with them
            if pod.poll() is None:
                kill_like_a_node_failure(pod)
    print(f"survivor node-{survivor}: {'still running' if code is None else f'exit {code}'} {waited:.1f}s after node-{victim} was killed")
    assert code != 0, log(tmp_path / "first", survivor)
    seen = steps(lines(tmp_path / "first", 0))
    assert KILL_AT <= seen[-1] < 20, seen  # nothing after the loss: the run never reached checkpoint 20
    saved = sorted(int(p.name[5:13]) for p in (claim / JOB).glob("step-*.pt"))
    assert saved[-1] == 15 and len(saved) <= KEEP, saved

    for pod, exit_code in [(victim, 137)] + ([(survivor, code)] if code is not None else []):
        action, status = jobset_action(rendered, pod, exit_code)
        assert (action, status.restarts, status.condition) == ("RestartJobSet", 1, None), (pod, exit_code)

    second = start_gang(cmd, envs, tmp_path / "second")  # the recreated gang: same command, env and claim
    try:
        codes = wait_all(second, 120)
    finally:
        for pod in second:
            if pod.poll() is None:
                kill_like_a_node_failure(pod)
    assert codes == [0] * PODS, log(tmp_path / "second", 0) + log(tmp_path / "second", 1)
    resumed = lines(tmp_path / "second", 0)
    assert resumed[0] == "resumed from step 15"
    assert lines(tmp_path / "second", 1) == []  # rank 1 prints nothing
    assert steps(resumed) == list(range(16, STEPS + 1))  # nothing before 16 repeated, nothing skipped
    assert digest(resumed) == digest(uninterrupted)  # same parameters as never being killed
