"""Restart from checkpoint, proven: a real two-process torchrun (gloo, CPU) is killed mid-run and relaunched with
the same command; it resumes from the last saved step and ends bit-identical to a run that was never killed."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.posix_sh import DASH, needs_dash

torch = pytest.importorskip("torch")  # pinned in requirements.txt; skipped only outside `make setup`

ROOT = Path(__file__).resolve().parents[1]
STEPS, SAVE_EVERY, KEEP = 30, 5, 2


def command() -> list[str]:
    torchrun = Path(sys.executable).with_name("torchrun")
    return [
        str(torchrun),
        "--standalone",
        "--nproc-per-node",
        "2",
        str(ROOT / "examples" / "train.py"),
        "--steps",
        str(STEPS),
        "--save-every",
        str(SAVE_EVERY),
        "--keep",
        str(KEEP),
        "--step-seconds",
        "0.05",
    ]


def launch(ckpt: Path) -> subprocess.Popen:
    env = {**os.environ, "CHECKPOINT_DIR": str(ckpt), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(command(), env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def kill_like_a_node_failure(proc: subprocess.Popen) -> None:
    """SIGKILL torchrun and every worker at once, as a pod's container dies (torch elastic puts its workers in
    sessions of their own, so killing torchrun's process group alone would leave them training)."""
    for pid in descendants(proc.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=30)


def finish(proc: subprocess.Popen) -> list[str]:
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, out
    return out.splitlines()


def steps(lines: list[str]) -> list[int]:
    return [int(m.group(1)) for line in lines if (m := re.match(r"step (\d+) ", line))]


def digest(lines: list[str]) -> str:
    (d,) = [line.split()[-1] for line in lines if line.startswith("done digest")]
    return d


@pytest.mark.slow
def test_killed_run_resumes_from_last_checkpoint_without_repeating_or_losing_steps(tmp_path):
    reference = finish(launch(tmp_path / "uninterrupted"))
    assert steps(reference) == list(range(1, STEPS + 1))

    ckpt = tmp_path / "job"
    proc = launch(ckpt)
    seen: list[str] = []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:  # kill once step 17 ran: checkpoint 15 is complete, 16-17 are not saved
        line = proc.stdout.readline()
        seen.append(line.strip())
        if line.startswith("step 17 "):
            break
    kill_like_a_node_failure(proc)  # no clean shutdown, no final save
    assert steps(seen)[-1] == 17
    saved = sorted(int(p.name[5:13]) for p in ckpt.glob("step-*.pt"))
    assert saved[-1] == 15 and len(saved) <= KEEP, saved  # keeps the last K

    resumed = finish(launch(ckpt))
    assert resumed[0] == "resumed from step 15"
    assert steps(resumed) == list(range(16, STEPS + 1))  # nothing before 16 repeated, nothing skipped
    assert digest(resumed) == digest(reference)  # same parameters as never being killed


@pytest.mark.slow
def test_unreadable_newest_checkpoint_falls_back_to_the_previous(tmp_path):
    ckpt = tmp_path / "job"
    first = launch(ckpt)
    finish(first)
    newest = sorted(ckpt.glob("step-*.pt"))[-1]
    newest.write_bytes(newest.read_bytes()[:100])  # truncated as by a crash mid-write on a non-atomic writer
    proc = subprocess.run(
        command()[:-4] + ["--save-every", "1000", "--steps", str(STEPS)], env={**os.environ, "CHECKPOINT_DIR": str(ckpt), "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0
    assert proc.stdout.splitlines()[0] == f"resumed from step {STEPS - SAVE_EVERY}"


# ------------------------------------------------------------------------------------ a lost node, N agents

AGENTS = 3


def pytorch_job_here(tmp_path: Path, shared_store: bool = False) -> tuple[list[str], dict, list[str], dict]:
    """The worker command and env, and the rendezvous store's command and env, exactly as fastpath emits them for
    a 3-node job (plus what the operator adds: tests/operator_v1.pytorch_env), with only what must differ on one
    machine changed: the store's address (127.0.0.1 and a free port), loopback for gloo, and local paths."""
    from components.jobs.component import manifest
    from components.jobs.operator_v1 import RDZV_PORT, rendezvous
    from components.jobs.resolve import RDZV_NO_SHARED_STORE, resolve
    from components.model.config import PlatformConfig
    from components.model.job import JobSpec
    from components.model.profile import profile
    from tests import operator_v1
    from tests.conftest import stack_platform

    spec = JobSpec(
        name="restart",
        image="nvcr.io/nvidia/pytorch:25.10-py3",
        nodes=AGENTS,
        gpusPerNode=1,
        command=["python", "-u", "/workspace/files/train.py", "--steps", str(STEPS), "--save-every", str(SAVE_EVERY), "--keep", str(KEEP), "--step-seconds", "0.1"],
    )
    cluster = stack_platform("dev")
    cluster["nodes"]["count"] = AGENTS + 1  # a spare for the replacement pod
    r = resolve(spec, profile(PlatformConfig.model_validate(cluster)))
    job = manifest(r)
    (worker,) = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    (store,) = rendezvous(r)[0]["spec"]["template"]["spec"]["containers"]
    port = free_port()
    env = {e["name"]: e["value"] for e in worker["env"] if "value" in e}
    env.update(operator_v1.pytorch_env(job))
    assert env["PET_RDZV_ENDPOINT"] == f"restart-rdzv:{RDZV_PORT}"
    env["PET_RDZV_ENDPOINT"] = f"127.0.0.1:{port}"
    env.update(GLOO_SOCKET_IFNAME="lo", NCCL_SOCKET_IFNAME="lo", CHECKPOINT_DIR=str(tmp_path / "ckpt"), OMP_NUM_THREADS="1", PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    if shared_store:
        env.pop(RDZV_NO_SHARED_STORE)
    cmd = [str(Path(sys.executable).with_name("torchrun")) if a == "torchrun" else a for a in worker["command"]]
    assert cmd[:2] == ["sh", "-c"]
    cmd[0] = DASH  # the entrypoint under a POSIX sh, as an image without bash runs it
    cmd = [str(ROOT / "examples" / "train.py") if a == "/workspace/files/train.py" else a for a in cmd]
    store_env = {e["name"]: e["value"] for e in store["env"]}
    store_env["FASTPATH_RDZV_PORT"] = str(port)
    store_cmd = [sys.executable if a == "python" else a for a in store["command"]]
    return cmd, env, store_cmd, store_env


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd: list[str], env: dict, log: Path) -> subprocess.Popen:
    out = open(log, "a")  # noqa: SIM115 - the process writes to it until it ends
    return subprocess.Popen(cmd, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def wait_for(logs: list[Path], needle: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(needle in p.read_text() for p in logs if p.exists()):
            return True
        time.sleep(0.2)
    return False


def run_gang(tmp_path: Path, kill_at_step: int | None, shared_store: bool = False, give_up_after: float = 300) -> tuple[list[str], list]:
    """Three torchrun agents (the job's three pods) on the c10d store pod; optionally SIGKILL one agent and its
    worker when `kill_at_step` ran (a node lost), then start it again (the operator's replacement pod)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    cmd, env, store_cmd, store_env = pytorch_job_here(tmp_path, shared_store)
    store = start(store_cmd, store_env, tmp_path / "store.log")
    assert wait_for([tmp_path / "store.log"], "rendezvous store listening", 60), (tmp_path / "store.log").read_text()
    logs = [tmp_path / f"agent{i}.log" for i in range(AGENTS)]
    agents = [start(cmd, env, log) for log in logs]
    try:
        if kill_at_step is not None:
            assert wait_for(logs, f"step {kill_at_step} ", 180), "\n".join(p.read_text() for p in logs)
            kill_like_a_node_failure(agents[-1])
            time.sleep(2)  # the replacement pod is scheduled and starts
            agents[-1] = start(cmd, env, logs[-1])
        deadline = time.monotonic() + give_up_after
        while time.monotonic() < deadline and any(a.poll() is None for a in agents):
            time.sleep(0.5)
        codes = [a.poll() for a in agents]  # None: still running when we gave up
    finally:
        for a in agents:
            if a.poll() is None:
                kill_like_a_node_failure(a)
        store.terminate()
        store.wait(timeout=30)
    # One list per agent: rank 0 (which prints the steps) may be another agent after the re-rendezvous.
    return [p.read_text().splitlines() for p in logs], codes


@pytest.mark.slow
@needs_dash
def test_lost_node_of_a_gang_rejoins_and_resumes_from_checkpoint(tmp_path):
    """The README's claim at any size: one of the job's pods dies mid-run (SIGKILL of its torchrun agent and
    worker), the operator's replacement starts, and the survivors, which never exit, re-rendezvous with it on
    the c10d store pod and every rank resumes from the last checkpoint; no container restarted, every agent
    ends 0, and the model is bit-identical to a run that lost nothing."""
    reference, codes = run_gang(tmp_path / "reference", kill_at_step=None)
    assert codes == [0] * AGENTS
    agents, codes = run_gang(tmp_path / "lost", kill_at_step=17)
    everything = "\n".join(line for log in agents for line in log)
    assert codes == [0] * AGENTS, everything
    resumed = [line for log in agents for line in log if line.startswith("resumed from step")]
    assert resumed == ["resumed from step 15"], everything
    (log,) = [log for log in agents if "resumed from step 15" in log]  # the new rank 0's
    assert steps(log[log.index("resumed from step 15") :]) == list(range(16, STEPS + 1))
    assert digest(log) == digest([line for ref in reference for line in ref])


@pytest.mark.slow
@needs_dash
def test_replacement_cannot_rejoin_with_torchs_shared_store(tmp_path):
    """Why the pods carry TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: with torch's default (the rank-0 agent's store
    shared with the workers) the replacement waits for a MASTER_ADDR nobody re-publishes and the gang fails
    (pytorch/pytorch#135712); torch 2.13.0 here."""
    # With the shared store the gang resumes in ~20 s; this one is still stuck (or has failed) after 50.
    agents, codes = run_gang(tmp_path, kill_at_step=17, shared_store=True, give_up_after=50)
    assert codes != [0] * AGENTS
    assert not any(line.startswith("resumed from step") for log in agents for line in log)
