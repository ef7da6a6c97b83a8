"""Reference training script: the contract a fastpath TrainingJob sets up, and a resume that can be trusted.

    torchrun --nproc-per-node N examples/train.py --steps 1000 --save-every 50 --keep 3

- Distributed setup from torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT); NCCL on GPUs,
  gloo on CPU.
- Checkpoints in $CHECKPOINT_DIR (fastpath mounts the shared ReadWriteMany claim there, one folder per job).
- Resume from the newest *complete* checkpoint: rank 0 writes `step-<n>.pt` under a temporary name, fsyncs and
  renames it (rename is atomic), so a pod killed mid-write leaves no half checkpoint that looks complete. A
  checkpoint that fails to load is skipped for the one before it.
- Keeps the last K checkpoints.
- The batch of step s is a pure function of (s, rank): a resumed run computes exactly what an uninterrupted one
  would, which is how the test proves no step was repeated or lost.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

CHECKPOINT = re.compile(r"^step-(\d{8})\.pt$")


def checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints, oldest first (temporary files never match the name)."""
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := CHECKPOINT.match(p.name))]
    return sorted(found)


def load_latest(folder: Path) -> dict | None:
    for step, path in reversed(checkpoints(folder)):
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 - a truncated or corrupt file: fall back to the previous one
            print(f"skipping unreadable checkpoint {path.name}: {err}", file=sys.stderr, flush=True)
            continue
        if state.get("step") == step:
            return state
    return None


def save(folder: Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer, keep: int) -> None:
    final = folder / f"step-{step:08d}.pt"
    tmp = folder / f".{final.name}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        torch.save({"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict()}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    for _, old in checkpoints(folder)[:-keep]:
        old.unlink(missing_ok=True)


def batch(step: int, rank: int, features: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(step * 1000 + rank)
    x = torch.randn(32, features, generator=g)
    return x, x.sum(dim=1, keepdim=True) * 0.5


def digest(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        # float32 -> Python float is exact and repr round-trips: equal digests mean bit-identical parameters.
        h.update(f"{name}={t.detach().cpu().flatten().tolist()!r}".encode())
    return h.hexdigest()[:16]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--save-every", type=int, default=10)
    ap.add_argument("--keep", type=int, default=3)
    ap.add_argument("--step-seconds", type=float, default=0.0, help="sleep per step (to make kill tests easy)")
    args = ap.parse_args(argv)

    ckpt_dir = Path(os.environ["CHECKPOINT_DIR"])
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank = dist.get_rank()
    if use_cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    device = torch.device("cuda") if use_cuda else torch.device("cpu")

    torch.manual_seed(0)
    features = 16
    model = torch.nn.Linear(features, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    start = 0
    state = load_latest(ckpt_dir)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
        if rank == 0:
            print(f"resumed from step {start}", flush=True)
    ddp = DistributedDataParallel(model)

    for step in range(start + 1, args.steps + 1):
        x, y = batch(step, rank, features)
        loss = torch.nn.functional.mse_loss(ddp(x.to(device)), y.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.6f}", flush=True)
        if step % args.save_every == 0:
            if rank == 0:
                save(ckpt_dir, step, model, optimizer, args.keep)
            dist.barrier()  # nobody runs ahead of a checkpoint that may not exist yet
        if args.step_seconds:
            time.sleep(args.step_seconds)
    if rank == 0:
        print(f"done digest {digest(model)}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
