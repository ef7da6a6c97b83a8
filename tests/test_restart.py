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

torch = pytest.importorskip("torch")  # pinned in requirements.txt; skipped only outside `make setup`

ROOT = Path(__file__).resolve().parents[1]
STEPS, SAVE_EVERY, KEEP = 30, 5, 2


def command() -> list[str]:
    torchrun = Path(sys.executable).with_name("torchrun")
    return [str(torchrun), "--standalone", "--nproc-per-node", "2", str(ROOT / "examples" / "train.py"),
            "--steps", str(STEPS), "--save-every", str(SAVE_EVERY), "--keep", str(KEEP), "--step-seconds", "0.05"]


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


def test_unreadable_newest_checkpoint_falls_back_to_the_previous(tmp_path):
    ckpt = tmp_path / "job"
    first = launch(ckpt)
    finish(first)
    newest = sorted(ckpt.glob("step-*.pt"))[-1]
    newest.write_bytes(newest.read_bytes()[:100])  # truncated as by a crash mid-write on a non-atomic writer
    proc = subprocess.run(command()[:-4] + ["--save-every", "1000", "--steps", str(STEPS)],
                          env={**os.environ, "CHECKPOINT_DIR": str(ckpt), "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0
    assert proc.stdout.splitlines()[0] == f"resumed from step {STEPS - SAVE_EVERY}"
