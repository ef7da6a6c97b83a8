"""How fast `tools.ncclcheck` reads the logs it meets, and in how much memory (`bench` is called by `make bench`).

    python -m tools.ncclcheck_bench [SIZE_MB] [--repeat N]

`one_run` writes what nccl-tests' all_reduce_perf prints on N nodes x 8 GPUs with NCCL_DEBUG=INFO and
NCCL_DEBUG_SUBSYS=INIT,NET, in the shapes of the fixtures in tests/ncclcheck/ (NCCL 2.27 on InfiniBand with
GPUDirect RDMA): every rank's bootstrap, device list, `Using network IB`, Init START, its ring and tree channels
(P2P/CUMEM inside a node, NET/IB/<rail>/GDRDMA between nodes), Init COMPLETE and init timings, then the results
table, the `# Avg bus bandwidth` footer and every rank's Destroy COMPLETE. Two log shapes are timed:

- one 1,000-rank run (125 nodes, about 6 MB), repeated to the size asked for, as a launcher that loops over the test
  writes it (`generate`), checked whole;
- many runs in one log, as the acceptance series writes them (components/jobs/acceptance.py: each node count in
  turn, smallest first, between its marker lines): every node count from 1 up to the size asked for
  (`generate_series`), checked as the acceptance plan checks its largest run (`--section`, which reads every run
  before it) and whole.

Each check runs `python -m tools.ncclcheck` in a fresh interpreter (startup counts), best of `repeat` for wall and
CPU time apart, with the peak resident set, and must keep its verdict (a pass on IB with every rank initialised).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from components.jobs.sections import section_markers

ROOT = Path(__file__).resolve().parent.parent
NODES = 125
GPUS = 8
CHANNELS = 16  # what NCCL picks on H100 nodes with 8 NICs
RAILS = (0, 3, 4, 5, 6, 9, 10, 11)  # mlx5_N of each GPU's rail, as ib_gdr_linerate.log lists them
SIZES = [1 << n for n in range(10, 34, 2)]  # 1 KiB .. 4 GiB by factor 4
RESULTS = {  # message size -> (out-of-place busbw, in-place busbw), GB/s, shaped like a healthy NDR fabric
    size: (round(372.1 * size / (size + (1 << 24)), 2), round(371.4 * size / (size + (1 << 24)), 2)) for size in SIZES
}


def _rank_init(rank: int, nranks: int, nodes: int, run: int, host: str) -> list[str]:
    """One rank's INIT,NET lines: the shapes of tests/ncclcheck/ib_gdr_linerate.log, at 2.27's verbosity. On one
    node every ring step is P2P and there is no tree over the network."""
    node, gpu = divmod(rank, GPUS)
    host, pid, tid = f"{host}-{node}", 41 + gpu, 90 + gpu
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
        if gpu == GPUS - 1 and nodes > 1:
            lines.append(f"{at}Channel {c:02d}/0 : {rank}[{gpu}] -> {nxt}[0] [send] via NET/IB/{rail}/GDRDMA")
        else:
            lines.append(f"{at}Channel {c:02d}/0 : {rank}[{gpu}] -> {nxt}[{gpu + 1}] via P2P/CUMEM/read")
        if gpu == 0 and nodes > 1:
            lines.append(f"{at}Channel {c:02d}/0 : {prev}[{GPUS - 1}] -> {rank}[0] [receive] via NET/IB/{rail}/GDRDMA")
    lines.append(f"{at}Connected all rings, use ring PXN 0 GDR 1")
    for c in range(CHANNELS if nodes > 1 else 0):  # trees: each GPU to its rail peer on the parent node
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


def one_run(nodes: int = NODES, run: int = 0, host: str = "llm-ib-worker") -> str:
    """The whole log of one all_reduce_perf run on `nodes` x 8 GPUs, named `host`-0, `host`-1, ..."""
    nranks = nodes * GPUS
    lines = [
        f"# nThread 1 nGpus 1 minBytes {SIZES[0]} maxBytes {SIZES[-1]} step: 4(factor) warmup iters: 5 "
        "iters: 20 agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
    ]
    lines += [
        f"#  Rank {rank:>4} Group  0 Pid {41 + rank % GPUS:>6} on {host}-{rank // GPUS} device  "
        f"{rank % GPUS} [0x{0x18 + 0x10 * (rank % GPUS):02x}] NVIDIA H100 80GB HBM3"
        for rank in range(nranks)
    ]
    for rank in range(nranks):
        lines += _rank_init(rank, nranks, nodes, run, host)
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
            f"{host}-{node}:{41 + gpu}:{41 + gpu} [{gpu}] NCCL INFO comm "
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


def generate_series(path: Path, size_mb: float) -> tuple[int, list[int]]:
    """Write an acceptance series to `path`: a run on 1 node, 2 nodes, ... (as series_script runs them, between
    their marker lines) until it holds at least `size_mb` MB; the bytes written and the node counts."""
    written, counts = 0, list[int]()
    with path.open("w") as out:
        while not counts or written < size_mb * 1e6:
            nodes = len(counts) + 1
            begin, end = section_markers(nodes)
            text = f"{begin}\n" + one_run(nodes, nodes, "nccl-acceptance-worker") + f"{end}\n"
            out.write(text)
            written += len(text)
            counts.append(nodes)
    return written, counts


def measure(path: Path, args: list[str], want: dict, repeat: int = 1) -> dict:
    """Run `python -m tools.ncclcheck path *args --format json` `repeat` times: {mb, seconds, mb_per_s, cpu_seconds,
    cpu_mb_per_s, max_rss_mb}, the best wall and the best CPU time (user + sys) apart, the largest resident set.
    Raises if the exit code is not 0 or the report differs from `want` in a field it names."""
    size = path.stat().st_size
    command = [sys.executable, "-m", "tools.ncclcheck", str(path), *args, "--format", "json"]
    # RUSAGE_CHILDREN's ru_maxrss is the largest of all children this process ever waited for, so the checker
    # runs under a probe process of its own, whose only child it is.
    runs = []
    for _ in range(repeat):
        res = subprocess.run([sys.executable, "-c", _PROBE, *command], cwd=ROOT, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"ncclcheck {' '.join(args)} exited {res.returncode}:\n{res.stdout}{res.stderr}")
        runs.append(json.loads(res.stdout.strip().splitlines()[-1]))
        report = runs[-1]["report"]
        if {key: report[key] for key in want} != want:
            raise RuntimeError(f"ncclcheck's verdict on the generated log changed: {report}")
    seconds = min(run["seconds"] for run in runs)
    # CPU time too: on a shared machine the wall clock also counts the time other processes held the CPU.
    cpu = min(run["cpu_seconds"] for run in runs)
    return {
        "mb": round(size / 1e6, 1),
        "seconds": round(seconds, 3),
        "mb_per_s": round(size / 1e6 / seconds, 1),
        "max_rss_mb": round(max(run["max_rss_kb"] for run in runs) / 1024, 1),
        "cpu_seconds": round(cpu, 3),
        "cpu_mb_per_s": round(size / 1e6 / cpu, 1),
    }


def _passes(ranks: int) -> dict:
    return {"verdict": "pass", "transport": "ib", "gdr": True, "init_complete": ranks}


def bench(size_mb: int, repeat: int = 1) -> dict:
    """`measure` of the check of a generated 1,000-rank log of `size_mb` MB."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "all_reduce_perf.log"
        generate(path, size_mb)
        ranks = NODES * GPUS
        return measure(path, ["--expect", "ib", "--ranks", str(ranks)], _passes(ranks), repeat)


def bench_series(size_mb: int, repeat: int = 1) -> dict[str, dict]:
    """`measure` of the checks of a generated acceptance series of `size_mb` MB: its largest run's, as
    acceptance.plan writes it (`section`), and the whole log's (`whole`)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "nccl-acceptance.log"
        _, counts = generate_series(path, size_mb)
        nodes = counts[-1]
        ranks = nodes * GPUS
        checks = ["--expect", "ib", "--ranks", str(ranks), "--bootstrap", "eth0"]
        floors = ["--min-busbw", "300", "--warn-busbw", "368"]
        return {
            "section": measure(path, ["--section", str(nodes), *checks, *floors], _passes(ranks), repeat),
            "whole": measure(path, checks, _passes(ranks), repeat),
        }


# Runs ncclcheck as its only child and reports that child's wall time, CPU time and peak RSS (ru_maxrss is in KiB on
# Linux).
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
    ap = argparse.ArgumentParser(prog="python -m tools.ncclcheck_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("size_mb", nargs="?", type=int, default=300, help="size of each generated log, MB")
    ap.add_argument("--repeat", type=int, default=3, help="runs per check, best kept; default 3")
    args = ap.parse_args(argv)
    results = {"1,000-rank run, whole": bench(args.size_mb, args.repeat)}
    for check, result in bench_series(args.size_mb, args.repeat).items():
        results[f"acceptance series, {check}"] = result
    for shape, result in results.items():
        print(json.dumps({"log": shape, **result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
