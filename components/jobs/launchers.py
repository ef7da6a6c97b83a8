"""The distributed launchers a command can start: fastpath runs one itself (torchrun, mpirun), so a job's command
that starts another would run a launcher inside a launcher; a TrainJob's must be the one its runtime wires."""

from __future__ import annotations

import re

# Launchers fastpath runs itself: a command that starts one would run a launcher inside a launcher.
LAUNCHERS = {
    "torchrun": "torchrun",
    "torch.distributed.run": "torchrun",
    "torch.distributed.launch": "torchrun",
    "deepspeed": "deepspeed",
    "accelerate": "accelerate launch",
    "mpirun": "mpirun",
    "mpiexec": "mpirun",
    "horovodrun": "horovodrun",
    "srun": "srun",
}
PYTHON = re.compile(r"^(.*/)?python(3(\.\d+)?)?$")


def launcher_in(command: list[str]) -> str | None:
    """The distributed launcher `command` starts, if any (`torchrun ...`, `python -m torch.distributed.run ...`,
    `deepspeed ...`, `accelerate launch ...`, `mpirun ...`)."""
    exe = command[0].rsplit("/", 1)[-1]
    if exe in LAUNCHERS:
        return LAUNCHERS[exe]
    if PYTHON.match(command[0]) and "-m" in command[:-1]:
        module = command[command.index("-m") + 1]
        return LAUNCHERS.get(module) or ("accelerate launch" if module.startswith("accelerate") else None)
    return None
