"""How fast `tools.ncclcheck` reads the log of a 1,000-rank job, and in how much memory (called by `make bench`).

    python -m tools.ncclcheck_bench [SIZE_MB]

`generate` writes what nccl-tests' all_reduce_perf prints on 125 nodes x 8 GPUs with NCCL_DEBUG=INFO and
NCCL_DEBUG_SUBSYS=INIT,NET, in the shapes of the fixtures in tests/ncclcheck/ (NCCL 2.27 on InfiniBand with
GPUDirect RDMA): every rank's bootstrap, device list, `Using network IB`, Init START, its ring and tree channels
(P2P/CUMEM inside a node, NET/IB/<rail>/GDRDMA between nodes), Init COMPLETE and init timings, then the results
table, the `# Avg bus bandwidth` footer and every rank's Destroy COMPLETE. One run of 1,000 ranks is about 6 MB, so
a log of a few hundred MB is the same run repeated, as a launcher that loops over the test writes it. `bench` times
`python -m tools.ncclcheck` on such a log in a fresh interpreter and checks that its verdict is still a pass on IB.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NODES = 125
GPUS = 8
CHANNELS = 16  # what NCCL picks on H100 nodes with 8 NICs
RAILS = (0, 3, 4, 5, 6, 9, 10, 11)  # mlx5_N of each GPU's rail, as ib_gdr_linerate.log lists them
SIZES = [1 << n for n in range(10, 34, 2)]  # 1 KiB .. 4 GiB by factor 4
RESULTS = {  # message size -> (out-of-place busbw, in-place busbw), GB/s, shaped like a healthy NDR fabric
    size: (round(372.1 * size / (size + (1 << 24)), 2), round(371.4 * size / (size + (1 << 24)), 2)) for size in SIZES
}


def _rank_init(rank: int, nranks: int, nodes: int, run: int) -> list[str]:
    """One rank's INIT,NET lines: the shapes of tests/ncclcheck/ib_gdr_linerate.log, at 2.27's verbosity."""
    node, gpu = divmod(rank, GPUS)
    host, pid, tid = f"llm-ib-worker-{node}", 41 + gpu, 90 + gpu
    at = f"{host}:{pid}:{tid} [{gpu}] NCCL INFO "
    boot = f"{host}:{pid}:{pid} [{gpu}] NCCL INFO "
    ip = f"10.244.{node // 250}.{node % 250 + 1}"
    comm = f"0x{0x55D0C8E000 + 0x10 * rank + run:x}"
    commid = f"0x{0x7D3F0C2A1B9E4F11 + run:x}"
    devices = " ".join(f"[{i}]mlx5_{hca}:1/IB" for i, hca in enumerate(RAILS))
    nxt, prev = (rank + 1) % nranks, (rank - 1) % nranks
    lines = [f"{boot}Bootstrap: Using eth0:{ip}<0>", f"{boot}cudaDriverVersion 12090"]
    if rank == 0:
        lines.append(f"{boot}NCCL version 2.27.7+cuda12.9")
    lines += [
        f"{boot}NCCL_SOCKET_IFNAME set by environment to eth0",
        f"{boot}NCCL_IB_HCA set by environment to =mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11",
        f"{at}NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin.",
        f"{at}NET/IB : Using {devices} [RO]; OOB eth0:{ip}<0>",
        f"{at}Using network IB",
        f"{at}DMA-BUF is available on GPU device {gpu}",
        f"{at}ncclCommInitRank comm {comm} rank {rank} nranks {nranks} cudaDev {gpu} nvmlDev {gpu} busId "
        f"{0x18 + 0x10 * gpu:x}000 commId {commid} - Init START",
        f"{at}Bootstrap timings total 0.{512 + rank % 97} (create 0.00, send 0.01, recv 0.41, ring 0.08, delay 0.00)",
        f"{at}Setting affinity for GPU {gpu} to 0-55,112-167",
        f"{at}NET/IB : GPU Direct RDMA (DMABUF) enabled for HCA {gpu} 'mlx5_{RAILS[gpu]}'",
        f"{at}comm {comm} rank {rank} nRanks {nranks} nNodes {nodes} localRanks {GPUS} localRank {gpu} MNNVL 0",
    ]
    if rank == 0:
        order = " ".join(str(r) for r in range(nranks))
        lines += [f"{at}Channel {c:02d}/{CHANNELS} : {order}" for c in range(CHANNELS)]
    lines += [
        f"{at}Trees "
        + " ".join(
            f"[{c}] {nxt if gpu < GPUS - 1 else -1}/-1/-1->{rank}->{prev if gpu else -1}" for c in range(CHANNELS)
        ),
        f"{at}P2P Chunksize set to 524288",
    ]
    for c in range(CHANNELS):  # rings: P2P inside the node, the rail of the channel between nodes
        rail = c % GPUS
        if gpu == GPUS - 1:
            lines.append(f"{at}Channel {c:02d}/0 : {rank}[{gpu}] -> {nxt}[0] [send] via NET/IB/{rail}/GDRDMA")
        else:
            lines.append(f"{at}Channel {c:02d}/0 : {rank}[{gpu}] -> {nxt}[{gpu + 1}] via P2P/CUMEM/read")
        if gpu == 0:
            lines.append(f"{at}Channel {c:02d}/0 : {prev}[{GPUS - 1}] -> {rank}[0] [receive] via NET/IB/{rail}/GDRDMA")
    lines.append(f"{at}Connected all rings, use ring PXN 0 GDR 1")
    for c in range(CHANNELS):  # trees: each GPU to its rail peer on the parent node
        peer = (rank + GPUS) % nranks
        lines.append(f"{at}Channel {c:02d}/0 : {rank}[{gpu}] -> {peer}[{gpu}] [send] via NET/IB/{gpu}/GDRDMA/Shared")
    lines += [
        f"{at}Connected all trees",
        f"{at}threadThresholds 8/8/64 | 8000/8/64 | 512 | 512",
        f"{at}{CHANNELS} coll channels, {CHANNELS} collnet channels, 0 nvls channels, {CHANNELS} p2p channels, "
        f"{CHANNELS // 2} p2p channels per peer",
        f"{at}CC Off, workFifoBytes 1048576",
        f"{at}TUNER/Plugin: Could not find: libnccl-tuner.so. Using internal tuner plugin.",
        f"{at}ncclCommInitRank comm {comm} rank {rank} nranks {nranks} cudaDev {gpu} nvmlDev {gpu} busId "
        f"{0x18 + 0x10 * gpu:x}000 commId {commid} - Init COMPLETE",
        f"{at}Init timings - ncclCommInitRank: rank {rank} nranks {nranks} total 2.{150 + rank % 89} "
        "(kernels 0.18, alloc 0.02, bootstrap 0.52, allgathers 0.05, topo 0.31, graphs 0.02, connections "
        "0.98, rest 0.07)",
    ]
    return lines


def one_run(nodes: int = NODES, run: int = 0) -> str:
    """The whole log of one all_reduce_perf run on `nodes` x 8 GPUs."""
    nranks = nodes * GPUS
    lines = [
        f"# nThread 1 nGpus 1 minBytes {SIZES[0]} maxBytes {SIZES[-1]} step: 4(factor) warmup iters: 5 "
        "iters: 20 agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
    ]
    lines += [
        f"#  Rank {rank:>4} Group  0 Pid {41 + rank % GPUS:>6} on llm-ib-worker-{rank // GPUS} device  "
        f"{rank % GPUS} [0x{0x18 + 0x10 * (rank % GPUS):02x}] NVIDIA H100 80GB HBM3"
        for rank in range(nranks)
    ]
    for rank in range(nranks):
        lines += _rank_init(rank, nranks, nodes, run)
    lines += [
        "#",
        "#                                                              out-of-place                       in-place",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw "
        "  busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)",
    ]
    factor = 2 * (nranks - 1) / nranks  # busbw = algbw * 2(n-1)/n for all_reduce
    for size in SIZES:
        out, inplace = RESULTS[size]
        t_out, t_in = size / (out / factor) / 1e3, size / (inplace / factor) / 1e3
        lines.append(
            f"{size:>15} {size // 4:>13}     float     sum      -1 {t_out:>8.1f} {out / factor:>7.2f} "
            f"{out:>7.2f}      0 {t_in:>8.1f} {inplace / factor:>7.2f} {inplace:>7.2f}      0"
        )
    avg = sum(out for out, _ in RESULTS.values()) / len(RESULTS)
    lines += [
        "# Out of bounds values : 0 OK",
        f"# Avg bus bandwidth    : {avg:.4f} ",
        "#",
        "# Collective test concluded: all_reduce_perf",
        "#",
    ]
    for rank in range(nranks):
        node, gpu = divmod(rank, GPUS)
        lines.append(
            f"llm-ib-worker-{node}:{41 + gpu}:{41 + gpu} [{gpu}] NCCL INFO comm "
            f"0x{0x55D0C8E000 + 0x10 * rank + run:x} rank {rank} nranks {nranks} cudaDev {gpu} busId "
            f"{0x18 + 0x10 * gpu:x}000 - Destroy COMPLETE"
        )
    return "\n".join(lines) + "\n"


def generate(path: Path, size_mb: float, nodes: int = NODES) -> int:
    """Write runs of all_reduce_perf on `nodes` x 8 GPUs to `path` until it holds at least `size_mb` MB (at least
    one run); the bytes written."""
    # Two runs alternate, so that consecutive runs' comm ids differ as relaunches' do, without generating each anew.
    runs = [one_run(nodes, 0), one_run(nodes, 1)]
    written, count = 0, 0
    with path.open("w") as out:
        while count == 0 or written < size_mb * 1e6:
            out.write(runs[count % 2])
            written += len(runs[count % 2])
            count += 1
    return written


def bench(size_mb: int) -> dict:
    """Time `python -m tools.ncclcheck` on a generated 1,000-rank log of `size_mb` MB: {mb, seconds, mb_per_s,
    max_rss_mb, cpu_seconds, cpu_mb_per_s}; raises if the verdict is not a pass on IB with every rank initialised."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "all_reduce_perf.log"
        size = generate(path, size_mb)
        args = [
            sys.executable,
            "-m",
            "tools.ncclcheck",
            str(path),
            "--format",
            "json",
            "--expect",
            "ib",
            "--ranks",
            str(NODES * GPUS),
        ]
        # RUSAGE_CHILDREN's ru_maxrss is the largest of all children this process ever waited for, so the checker
        # runs under a probe process of its own, whose only child it is.
        probe = [sys.executable, "-c", _PROBE, *args]
        res = subprocess.run(probe, cwd=ROOT, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"ncclcheck on the generated log exited {res.returncode}:\n{res.stdout}{res.stderr}")
    measured = json.loads(res.stdout.strip().splitlines()[-1])
    report = measured["report"]
    if (report["transport"], report["gdr"], report["verdict"], report["init_complete"]) != (
        "ib",
        True,
        "pass",
        NODES * GPUS,
    ):
        raise RuntimeError(f"ncclcheck's verdict on the generated log changed: {report}")
    seconds, cpu = measured["seconds"], measured["cpu_seconds"]
    # CPU time too: on a shared machine the wall clock also counts the time other processes held the CPU.
    return {
        "mb": round(size / 1e6, 1),
        "seconds": round(seconds, 3),
        "mb_per_s": round(size / 1e6 / seconds, 1),
        "max_rss_mb": round(measured["max_rss_kb"] / 1024, 1),
        "cpu_seconds": round(cpu, 3),
        "cpu_mb_per_s": round(size / 1e6 / cpu, 1),
    }


# Runs ncclcheck as its only child and reports that child's wall time and peak RSS (ru_maxrss is in KiB on Linux).
_PROBE = """
import json, resource, subprocess, sys, time
start = time.perf_counter()
res = subprocess.run(sys.argv[1:], capture_output=True, text=True)
seconds = time.perf_counter() - start
if res.returncode != 0:
    sys.stdout.write(res.stdout + res.stderr)
    sys.exit(res.returncode)
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"seconds": seconds, "cpu_seconds": usage.ru_utime + usage.ru_stime, "max_rss_kb": usage.ru_maxrss,
                  "report": json.loads(res.stdout)}))
"""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    print(json.dumps(bench(int(argv[0]) if argv else 300)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
