"""The fabric acceptance's pairwise stage: before nccl-tests runs on all of a node's rails at once (where a slow rail
only lowers the total), each rail of each node is measured alone against another node, so one below the floor is
named by node and rail (`python -m tools.pairwise LOG --floor GBPS` reads what this prints). Pure (no Pulumi
imports): `script` builds the POSIX sh program the MPI launcher runs; pairwise.sh beside it holds its steps.

Choices an experienced reader may look for:

- The tool is nccl-tests' `sendrecv_perf_mpi`, not perftest's `ib_write_bw --use_cuda`. The acceptance image
  (versions.NCCL_TESTS_IMAGE, NGC's PyTorch container) ships the nccl-tests `*_mpi` binaries: the series already runs
  its all_reduce_perf_mpi, and NVIDIA's CloudAI runs `sendrecv_perf_mpi` in nvcr.io/nvidia/pytorch images
  (NVIDIA/cloudai@1f7f028:src/cloudai/workloads/nccl_test/nccl.py, NCCLCmdArgs). Whether the image holds perftest
  is not documented: the contents NVIDIA lists for the CUDA DL base it is built on name rdma-core, HPC-X, UCX,
  GDRCopy and DOCA, not perftest ("not a complete list": docs.nvidia.com/deeplearning/frameworks/
  cuda-dl-release-notes/rel-26-03.html), and ib_write_bw reads GPU memory only when perftest was configured with
  CUDA (Azure/azurehpc@757093c:experimental/cc_slurm_nhc/cc_slurm_nhc/specs/default/cluster-init/files/
  build_perftest_gdr.sh builds it so, with CUDA_H_PATH). NCCL over one HCA also measures what training uses:
  GPUDirect RDMA from the GPU, NCCL's connection setup, the GID and traffic class the pods are wired with.
- One rail: NCCL_IB_HCA=`=<hca>` (exact: NCCL matches a prefix otherwise, NVIDIA/nccl@v2.30.7-1:src/misc/utils.cc
  matchIf), one GPU per node (CUDA_VISIBLE_DEVICES: the GPU nearest that NIC, `gpus[i]` for rail i, by default GPU
  i: rail-optimised nodes list their HCAs in GPU order, as the profile does DGX H100's mlx5_0,3,4,5,6,9,10,11).
- The number: sendrecv on two ranks sends to the next rank and receives from the previous one, so each node sends
  and receives at once, and nccl-tests reports busbw = algbw = bytes / time per rank (factor 1:
  NVIDIA/nccl-tests@v2.17.6:src/sendrecv.cu SendRecvGetBw): a rail's one-way rate, GB/s, line rate / 8 at best.
  One message size (`size`, 1 GiB), so the `# Avg bus bandwidth` line (src/util.cu writeResultFooter: the mean
  over every size, in and out of place) is that size's.
- Pairing: a ring, node i with node i+1 (the last with the first): N pairs per rail for N nodes (one for two nodes,
  none for one), not N(N-1)/2, and every node is in two pairs, which is what tells a node (both its pairs slow, its
  neighbours fine with their other partners) from a link (one pair slow, both nodes fine elsewhere). Disjoint pairs
  run at once: two rounds per rail, three when N is odd, so the stage lasts 2-3 rounds per rail whatever N (N runs
  per rail in all); rails run one after another, so two never share a node's PCIe switches.
- Each measurement prints `fastpath-pairwise: RAIL HOST_A HOST_B GBPS` (or `FAILED`), between a `begin` line with
  the plan and an `end` line: a cut log is told from a finished one. The program exits 1 if any is below the floor
  or failed; run it as `sh -c SCRIPT || status=1` before the series, so nccl-tests still runs after it. The output
  of a pair that failed or is slow follows its marker line, NCCL INFO lines included: outside the series' sections,
  so `tools.ncclcheck --section N` never reads it.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

from components.jobs.shell import PLACEHOLDER, program

MARKER = "fastpath-pairwise:"
SENDRECV = "sendrecv_perf_mpi"  # nccl-tests, built with MPI: in the image beside versions.NCCL_TESTS_ALL_REDUCE
LAUNCHER = ("mpirun", "--allow-run-as-root")
FIELDS = ("FLOOR", "TIMEOUT", "LAUNCHER", "COMMAND", "PLAN")
# pairwise.sh with its placeholders kept, read once at import: `script` only fills them in.
BODY = program(Path(__file__).with_name("pairwise.sh"), {name: f"__{name}__" for name in FIELDS})


def ring(hosts: Sequence[str]) -> list[tuple[str, str]]:
    """The pairs a rail is measured on: each node with the next, the last with the first; one pair for two nodes."""
    if len(hosts) < 2:
        return []
    if len(hosts) == 2:
        return [(hosts[0], hosts[1])]
    return [(hosts[i], hosts[(i + 1) % len(hosts)]) for i in range(len(hosts))]


def rounds(pairs: Sequence[tuple[str, str]], parallel: bool = True) -> list[list[int]]:
    """The ring's pairs (indices) in rounds whose pairs share no node: even pairs, odd pairs, and the closing pair
    alone when the ring is odd. Without `parallel`, one pair a round."""
    if not parallel:
        return [[i] for i in range(len(pairs))]
    out: list[list[int]] = []
    for i in range(len(pairs)):
        busy = {pairs[i][0], pairs[i][1]}
        room = next((r for r in out if not busy & {h for j in r for h in pairs[j]}), None)
        if room is None:
            out.append([i])
        else:
            room.append(i)
    return out


def rail_floor_gbps(speed_gbps: float, efficiency: float) -> float:
    """The floor of one rail's pairwise measurement, GB/s: its line rate (Gb/s) / 8 times `efficiency`."""
    return round(speed_gbps / 8 * efficiency, 1)


def script(
    hosts: list[str],
    rails: list[tuple[str, str]],
    floor_gbps: float,
    *,
    launcher: Sequence[str] = LAUNCHER,
    gpus: Sequence[int] | None = None,
    size: str = "1G",
    iters: int = 20,
    timeout_seconds: int = 600,
    parallel: bool = True,
    binary: str = SENDRECV,
) -> str:
    """The POSIX sh program that measures each of `rails` (name, HCA as the pods see it) on the ring of `hosts`
    (as mpirun reaches them: `-H host:1`) and prints one marker line per measurement, exiting 1 when one is under
    `floor_gbps` (GB/s) or failed. `launcher`: mpirun and its options before `-np` (the job's: its MCA settings and
    -x forwards); `gpus`: the GPU nearest each rail (default: GPU i for rail i)."""
    problems = _problems(hosts, rails, floor_gbps, gpus)
    if problems:
        raise ValueError("; ".join(problems))
    nearest = list(gpus) if gpus is not None else list(range(len(rails)))
    pairs = ring(hosts)
    plan = [f"echo {shlex.quote(f'{MARKER} begin {len(rails)} rails x {len(pairs)} pairs, floor {floor_gbps:g} GB/s')}"]
    measurement = 0
    for (name, hca), gpu in zip(rails, nearest, strict=True):
        for batch in rounds(pairs, parallel):
            ids = list(range(measurement + 1, measurement + 1 + len(batch)))
            measurement += len(batch)
            plan += [shlex.join(["start", str(n), hca, str(gpu), *pairs[i]]) for n, i in zip(ids, batch, strict=True)]
            plan.append("wait")
            plan += [shlex.join(["report", str(n), name, *pairs[i]]) for n, i in zip(ids, batch, strict=True)]
    command = [binary, "-b", size, "-e", size, "-g", "1", "-n", str(iters)]
    values = {
        "FLOOR": f"{floor_gbps:g}",
        "TIMEOUT": str(timeout_seconds),
        "LAUNCHER": shlex.join(launcher),
        "COMMAND": shlex.join(command),
        "PLAN": "\n".join(plan),
    }
    return PLACEHOLDER.sub(lambda m: values[m.group(1)], BODY)


def _problems(
    hosts: list[str], rails: list[tuple[str, str]], floor_gbps: float, gpus: Sequence[int] | None
) -> list[str]:
    """Why a plan cannot be written, or []: the marker lines are split at blanks, so no name may hold one."""
    out = []
    if len(set(hosts)) != len(hosts):
        out.append(f"hosts must be distinct: {', '.join(sorted({h for h in hosts if hosts.count(h) > 1}))}")
    words = [*hosts, *(name for name, _ in rails), *(hca for _, hca in rails)]
    if bad := [w for w in words if not w or any(c.isspace() for c in w)]:
        out.append(f"host, rail and HCA names must be words without blanks: {', '.join(map(repr, bad))}")
    if not rails:
        out.append("no rails to measure")
    if not floor_gbps > 0:
        out.append(f"floor_gbps must be above 0: {floor_gbps}")
    if gpus is not None and (len(gpus) != len(rails) or any(g < 0 for g in gpus)):
        out.append(f"gpus must give one GPU index per rail ({len(rails)}): {list(gpus)}")
    return out
