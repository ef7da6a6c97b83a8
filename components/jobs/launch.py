"""How a job's processes start: the launcher commands built from the job (torchrun, mpirun), and the programs that
run them in their containers. The shell programs are POSIX sh files beside this module (a job image may have no
bash), each saying what it does and why; shell.program reads them once, here.
"""

from __future__ import annotations

from pathlib import Path

from components.jobs import telemetry
from components.jobs.launchers import PYTHON
from components.jobs.resolve import Resolved
from components.jobs.runtime_v2 import build, controller
from components.jobs.shell import program

HERE = Path(__file__).parent


def torchrun_command(command: list[str]) -> list[str]:
    """The user's one-process command under torchrun, which reads sizes and rendezvous from the PET_* variables
    the operator sets. `python [-u] script|-m module ...` becomes `torchrun script|-m module ...` (torchrun runs
    Python with -u itself, and the operator sets PYTHONUNBUFFERED); other interpreter flags, and any other
    program, run as given under `torchrun --no-python`."""
    if PYTHON.match(command[0]):
        rest = [a for a in command[1:]]
        while rest and rest[0] == "-u":
            rest.pop(0)
        if rest and (rest[0] == "-m" or not rest[0].startswith("-")):
            return ["torchrun", *rest]
    return ["torchrun", "--no-python", *command]


def mpirun_command(r: Resolved) -> list[str]:
    """mpirun over every GPU of the job, forwarding (-x) every variable the pods get, with Open MPI's own TCP
    traffic on the pod's primary interface (it would otherwise try rail subnets that do not route)."""
    iface = r.profile.fabric.pod_interface
    cmd = [
        "mpirun",
        "--allow-run-as-root",
        "-np",
        str(r.replicas * r.gpus),
        "-bind-to",
        "none",
        "-map-by",
        "slot",
        "-mca",
        "btl_tcp_if_include",
        iface,
        "-mca",
        "oob_tcp_if_include",
        iface,
    ]
    if r.api == "v2":
        # The trainer's hostfile, by name: Open MPI 5 does not read the ORTE variable the MPI plugin sets.
        cmd[1:1] = ["--hostfile", controller.MPI_HOSTFILE]
        # The runtime's sshd port and key, stated on the command line too (the runtime's launcher env carries
        # them as the ssh agent for any TrainJob; this wins over the plugin's OMPI_MCA_plm_rsh_args in Open MPI 4).
        cmd += ["-mca", "plm_rsh_args", build.SSH_OPTIONS]
    for name in [*r.env, *r.spec.secret_env, "PATH", "LD_LIBRARY_PATH"]:
        cmd += ["-x", name]
    if r.profile.nccl_inspector_image:
        # Ranks an sshd or kubectl exec starts do not all see their container's env, and a v1 launcher (no GPU, no
        # Inspector of its own) has none to forward: the Inspector's variables go with their values.
        for name, value in telemetry.env().items():
            cmd += ["-x", f"{name}={value}"]
    return [*cmd, *r.spec.command]


# Entrypoints: the PyTorch worker's and the MPI launcher's on Training Operator v1, the MPI launcher's on Trainer v2.
LAUNCH = program(HERE / "pytorch_worker.sh")
# Before it, on a `dra` pod with part of a node: NCCL_IB_HCA from the NICs the claim gave (dra_hca.sh).
DRA_HCA = program(HERE / "dra_hca.sh")
# First of all, on a multi-node NVLink pod: its IMEX channel and its GPUs' fabric checked (imex_check.sh).
IMEX_CHECK = program(HERE / "imex_check.sh")
LAUNCHER = program(HERE / "mpi_launcher.sh")
# Seconds a v2 launcher whose mpirun failed waits before failing: room for an evicted node's Job to fail first, with
# its DisruptionTarget reason.
MPI_FAILURE_GRACE = 30
MPI_LAUNCH = program(HERE / "mpi_launcher_v2.sh", {"MPI_FAILURE_GRACE": MPI_FAILURE_GRACE})

# The c10d store torchrun agents rendezvous on, served by a pod of its own: PID 1 must handle SIGTERM itself.
# Python for `python -c`, so text here: as a .py file ruff would split its imports, which is a change of the render.
# It ends itself once the run is over: the agents rewrite the rendezvous state (key `torch.rendezvous.<run id>`,
# torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py) at every keep-alive, a few seconds apart, so a
# state unchanged for FASTPATH_RDZV_IDLE_SECONDS after the first one means no agent is left. It then exits 0 and its
# batch Job completes, so a finished job's store holds no node (its budget protects a running pod only). Terminated
# (an eviction, a deleted pod) it exits 1: the Job makes a new one, as a Deployment would.
RDZV_STORE = """\
import os, signal, sys, time
import torch.distributed as dist
port = int(os.environ["FASTPATH_RDZV_PORT"])
key = "torch.rendezvous." + os.environ["FASTPATH_RDZV_ID"]
idle = float(os.environ["FASTPATH_RDZV_IDLE_SECONDS"])
store = dist.TCPStore("0.0.0.0", port, is_master=True, multi_tenant=True, wait_for_workers=False)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
print(f"c10d rendezvous store listening on :{port}", flush=True)
last, since = None, time.monotonic()
while True:
    time.sleep(min(60.0, idle / 4))
    state = store.get(key) if store.check([key]) else None
    if state != last:
        last, since = state, time.monotonic()
    elif last is not None and time.monotonic() - since > idle:
        print(f"no rendezvous keep-alive for {idle:.0f}s: the run is over", flush=True)
        sys.exit(0)
"""
