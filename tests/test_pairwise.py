"""The pairwise stage names the node and the rail below the floor: the plan pairs every node twice per rail in O(N)
runs, the program runs under dash and prints a marker line per measurement, and tools.pairwise places each slow or
failed pair on a node, a link, or neither."""

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from components.jobs import pairwise
from tests.conftest import ROOT
from tests.posix_sh import DASH, needs_dash
from tools.pairwise import main

FLOOR = 40.0
HOSTS = [f"node-{i}" for i in range(6)]
RAILS = [("rail0", "mlx5_0"), ("rail1", "mlx5_3")]
GOOD = 48.31


def fake_log(hosts=HOSTS, rails=("rail0", "rail1"), slow=None, begin=True, end=True, cut_after=None, prefix=""):
    """The stage's marker lines, as pairwise.script prints them for a ring of `hosts`: `slow` maps (rail, a, b) to a
    value (None: FAILED); `cut_after` measurements, then a cut line."""
    slow = slow or {}
    pairs = pairwise.ring(hosts)
    lines = [f"fastpath-pairwise: begin {len(rails)} rails x {len(pairs)} pairs, floor {FLOOR:g} GB/s"] if begin else []
    lines.insert(0, "unrelated launcher output")
    done = 0
    for rail in rails:
        for a, b in pairs:
            if cut_after is not None and done == cut_after:
                return "".join(f"{prefix}{line}\n" for line in lines) + f"{prefix}fastpath-pairwise: {rail} {a} {b} 4"
            value = slow.get((rail, a, b), GOOD)
            lines.append(f"fastpath-pairwise: {rail} {a} {b} {'FAILED' if value is None else value}")
            done += 1
    if end:
        lines.append(f"fastpath-pairwise: end {done} measurements, 0 below {FLOOR:g} GB/s, 0 failed")
    return "".join(f"{prefix}{line}\n" for line in lines)


# (id, log, exit code, verdict, nodes, links, unplaced, the reasons in full)
CASES = [
    ("all-good", fake_log(), 0, "pass", [], [], [], []),
    (
        "bad-link",
        fake_log(slow={("rail1", "node-2", "node-3"): 20.1}),
        1,
        "fail",
        [],
        [{"rail": "rail1", "a": "node-2", "b": "node-3", "gbps": 20.1}],
        [],
        ["rail1 between node-2 and node-3: 20.1 GB/s, under the floor of 40 GB/s, while each reaches the floor with its other partner: the link between them (a cable or switch port on their path)"],
    ),
    (
        "bad-node",
        fake_log(slow={("rail0", "node-3", "node-4"): 11.5, ("rail0", "node-4", "node-5"): 11.6}),
        1,
        "fail",
        [{"rail": "rail0", "node": "node-4", "pairs": [{"with": "node-3", "gbps": 11.5}, {"with": "node-5", "gbps": 11.6}]}],
        [],
        [],
        [
            "node-4 on rail0: every pair it is in is below the floor (with node-3: 11.5 GB/s, under the floor of 40 GB/s; with node-5: 11.6 GB/s, under the floor of 40 GB/s) while node-3 and node-5 "
            "reach the floor with their other partners: this node's rail0 NIC, its port or cable, or its GPU-to-NIC path (GPUDirect RDMA)"
        ],
    ),
    (
        "failed-measurement",
        fake_log(slow={("rail1", "node-5", "node-0"): None}),
        1,
        "fail",
        [],
        [{"rail": "rail1", "a": "node-5", "b": "node-0", "gbps": None}],
        [],
        [
            "rail1 between node-5 and node-0: failed (no bandwidth: its mpirun output follows its marker line in the log), while each reaches the floor with its other partner: the link between them (a cable or switch port on their path)"
        ],
    ),
    (
        "node-on-every-rail",
        fake_log(slow={(rail, a, b): 9.0 for rail in ("rail0", "rail1") for a, b in (("node-0", "node-1"), ("node-5", "node-0"))}),
        1,
        "fail",
        [{"rail": rail, "node": "node-0", "pairs": [{"with": "node-1", "gbps": 9.0}, {"with": "node-5", "gbps": 9.0}]} for rail in ("rail0", "rail1")],
        [],
        [],
        [
            "node-0 on rail0: every pair it is in is below the floor (with node-1: 9 GB/s, under the floor of 40 GB/s; with node-5: 9 GB/s, under the floor of 40 GB/s) while node-1 and node-5 reach the floor "
            "with their other partners: this node's rail0 NIC, its port or cable, or its GPU-to-NIC path (GPUDirect RDMA)",
            "node-0 on rail1: every pair it is in is below the floor (with node-1: 9 GB/s, under the floor of 40 GB/s; with node-5: 9 GB/s, under the floor of 40 GB/s) while node-1 and node-5 reach the floor "
            "with their other partners: this node's rail1 NIC, its port or cable, or its GPU-to-NIC path (GPUDirect RDMA)",
            "node-0 is below the floor on every rail (2): look at the host (PCIe, GPU clocks, NUMA placement) before the cables",
        ],
    ),
    (
        "two-nodes-cannot-tell",
        fake_log(hosts=["node-0", "node-1"], rails=("rail0",), slow={("rail0", "node-0", "node-1"): 30.0}),
        1,
        "fail",
        [],
        [],
        [{"rail": "rail0", "a": "node-0", "b": "node-1", "gbps": 30.0}],
        ["rail0 between node-0 and node-1: 30 GB/s, under the floor of 40 GB/s; no other pair on rail0 tells the node from the link (neither node reaches the floor with another partner)"],
    ),
    (
        "truncated",
        fake_log(cut_after=9, end=False),
        1,
        "incomplete",
        [],
        [],
        [],
        ["the log ends before the pairwise stage did (no 'fastpath-pairwise: end' line): 3 of 12 measurements are not in it; its last line is cut: 'fastpath-pairwise: rail1 node-3 node-4 4'"],
    ),
    (
        "no-stage",
        "launcher output\nfastpath-acceptance: begin 2 nodes\n",
        1,
        "incomplete",
        [],
        [],
        [],
        ["no pairwise stage in this log (no 'fastpath-pairwise: begin' line): the launcher stopped before it, or this is another job's log"],
    ),
    ("run-again", fake_log(slow={("rail0", "node-0", "node-1"): 1.0}, end=False) + fake_log(), 0, "pass", [], [], [], []),
    ("kubectl-prefixes", fake_log(prefix="2025-02-11T09:14:03.512894117Z [pod/nccl-acceptance-launcher/launcher] "), 0, "pass", [], [], [], []),
]


@pytest.mark.parametrize(("text", "code", "verdict", "nodes", "links", "unplaced", "reasons"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_every_slow_pair_is_placed_on_a_node_a_link_or_neither(tmp_path, capsys, text, code, verdict, nodes, links, unplaced, reasons):
    path = tmp_path / "launcher.log"
    path.write_text(text)
    rc = main([str(path), "--floor", f"{FLOOR:g}", "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert (rc, out["verdict"]) == (code, verdict), out["reasons"]
    assert (out["nodes"], out["links"], out["unplaced"], out["reasons"]) == (nodes, links, unplaced, reasons)


def test_text_output_names_node_and_rail(tmp_path):
    path = tmp_path / "launcher.log"
    path.write_text(fake_log(slow={("rail1", "node-2", "node-3"): 10.0, ("rail1", "node-1", "node-2"): 10.0}))
    res = subprocess.run([sys.executable, "-m", "tools.pairwise", str(path), "--floor", "40"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and res.stderr == ""
    assert res.stdout.splitlines()[:3] == [
        "pairwise: 12 of 12 measurements, floor 40 GB/s; below it: 1 node(s), 0 link(s), 0 pair(s) not placed",
        "verdict: fail",
        "  - node-2 on rail1: every pair it is in is below the floor (with node-1: 10 GB/s, under the floor of 40 GB/s; with node-3: 10 GB/s, under the floor of 40 GB/s) while node-1 and node-3 reach the floor "
        "with their other partners: this node's rail1 NIC, its port or cable, or its GPU-to-NIC path (GPUDirect RDMA)",
    ]


@pytest.mark.parametrize(("name", "content"), [("missing.log", None), (".", None), ("binary.log", bytes(range(256)) * 64), ("empty.log", b"")])
def test_unreadable_or_hostile_input_never_tracebacks(tmp_path, name, content):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    res = subprocess.run([sys.executable, "-m", "tools.pairwise", str(path), "--floor", "40"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "Traceback" not in res.stderr
    if content is None:
        assert res.returncode == 2 and res.stderr.startswith(f"{path}: cannot read log: ")
    else:
        assert res.returncode == 1 and "verdict: incomplete" in res.stdout


@pytest.mark.parametrize("nodes", range(1, 10))
def test_the_plan_pairs_every_node_twice_per_rail_in_n_runs_and_runs_disjoint_pairs_at_once(nodes):
    """A ring: N runs per rail (one for two nodes), every node in two of them (one for two nodes), O(N) not O(N^2);
    a round (the starts before a `wait`) never uses a node twice, and a rail takes two rounds, three for an odd ring."""
    hosts = [f"h{i}" for i in range(nodes)]
    text = pairwise.script(hosts, RAILS, FLOOR)
    steps = [line.split() for line in text.splitlines() if line.split()[:1] in (["start"], ["wait"], ["report"])]
    starts = [s for s in steps if s[0] == "start"]
    assert len(starts) == len(RAILS) * (nodes if nodes > 2 else nodes - 1)
    for hca in ("mlx5_0", "mlx5_3"):
        on_rail = [s[4:] for s in starts if s[2] == hca]
        if nodes > 2:
            assert all(sum(h in pair for pair in on_rail) == 2 for h in hosts)
        assert {frozenset(p) for p in on_rail} == {frozenset(p) for p in pairwise.ring(hosts)}
    batches, batch = [], []
    for step in steps:
        if step[0] == "start":
            batch.append(step[4:])
        elif step[0] == "wait":
            batches.append(batch)
            batch = []
    for b in batches:
        assert len({h for pair in b for h in pair}) == 2 * len(b)
    if nodes > 2:
        assert len(batches) == len(RAILS) * (3 if nodes % 2 else 2)
    assert text.count("\nreport ") == len(starts)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"hosts": ["a", "a"]}, "hosts must be distinct: a"),
        ({"hosts": ["a b", "c"]}, "host, rail and HCA names must be words without blanks: 'a b'"),
        ({"rails": []}, "no rails to measure"),
        ({"floor_gbps": 0}, "floor_gbps must be above 0: 0"),
        ({"gpus": [0]}, "gpus must give one GPU index per rail (2): [0]"),
    ],
)
def test_a_plan_that_cannot_be_written_is_refused(kwargs, message):
    args = {"hosts": HOSTS, "rails": RAILS, "floor_gbps": FLOOR, **kwargs}
    with pytest.raises(ValueError, match=re.escape(message)):
        pairwise.script(args.pop("hosts"), args.pop("rails"), args.pop("floor_gbps"), **args)


def test_rail_floor_is_line_rate_in_gigabytes_times_efficiency():
    assert (pairwise.rail_floor_gbps(400, 0.75), pairwise.rail_floor_gbps(200, 0.9)) == (37.5, 22.5)


# What sendrecv_perf_mpi prints on two ranks, one GPU each (NVIDIA/nccl-tests@v2.17.6:src/util.cu
# writeResultHeader, writeBenchmarkLineBody: in-place #wrong is N/A for sendrecv; writeResultFooter), for the pair
# and HCA a fake mpirun is given: a node `HCA:HOST` or link `HCA:HOST:HOST` in FAKE_SLOW is slow, one in FAKE_FAIL
# fails, one in FAKE_HANG never returns. Every call is recorded in FAKE_CALLS.
FAKE_MPIRUN = r"""#!/bin/sh
hosts= hca= gpu= binary=
for arg in "$@"; do
    case $prev in -H) hosts=$arg ;; esac
    case $arg in
        NCCL_IB_HCA=*) hca=${arg#NCCL_IB_HCA=} ;;
        CUDA_VISIBLE_DEVICES=*) gpu=${arg#CUDA_VISIBLE_DEVICES=} ;;
        sendrecv_perf_mpi) binary=$arg ;;
    esac
    prev=$arg
done
a=${hosts%%:*}
b=${hosts#*,}
b=${b%%:*}
hca=${hca#=}
echo "$a $b $hca $gpu $binary $*" >>"$FAKE_CALLS"
bw=48.31
for rule in $FAKE_SLOW; do
    case $rule in "$hca:$a:$b" | "$hca:$b:$a") bw=20.1 ;; "$hca:$a" | "$hca:$b") bw=11.52 ;; esac
done
for rule in $FAKE_HANG; do
    case $rule in "$hca:$a:$b") exec sleep 30 ;; esac
done
for rule in $FAKE_FAIL; do
    case $rule in "$hca:$a:$b") echo "fake-mpirun: rank 1 on $b exited with status 1"; exit 1 ;; esac
done
cat <<EOF
# nThread 1 nGpus 1 minBytes 1073741824 maxBytes 1073741824 step: 1048576(bytes) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid     41 on     $a device  0 [0000:18:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid     41 on     $b device  0 [0000:18:00] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
  1073741824     268435456     float     sum      -1  22226.1  $bw  $bw       0  22230.4  $bw  $bw     N/A
# Out of bounds values : 0 OK
EOF
printf '# Avg bus bandwidth    : %s \n#\n# Collective test concluded: sendrecv_perf\n' "$bw"
"""


def run_stage(tmp_path: Path, env: dict, **kwargs) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    """pairwise.script for HOSTS and RAILS under dash, with the fake mpirun first on PATH; its result and calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "mpirun"
    fake.write_text(FAKE_MPIRUN)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    calls = tmp_path / "calls"
    text = pairwise.script(HOSTS, RAILS, FLOOR, gpus=[0, 3], **kwargs)
    full_env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "TMPDIR": str(tmp_path), "FAKE_CALLS": str(calls), **env}
    res = subprocess.run([DASH, "-c", text], env=full_env, capture_output=True, text=True, timeout=120)
    return res, [line.split() for line in calls.read_text().splitlines()]


@needs_dash
def test_the_program_under_dash_names_the_planted_node_and_link(tmp_path, capsys):
    """Node node-3 slow on rail1 (mlx5_3), the link node-0 - node-1 slow on rail0: the program exits 1 after every
    measurement, and tools.pairwise names both from its output."""
    res, calls = run_stage(tmp_path, {"FAKE_SLOW": "mlx5_3:node-3 mlx5_0:node-0:node-1"})
    assert res.returncode == 1 and res.stderr == "", res.stderr
    markers = [line for line in res.stdout.splitlines() if line.startswith("fastpath-pairwise:")]
    assert markers[0] == "fastpath-pairwise: begin 2 rails x 6 pairs, floor 40 GB/s"
    assert markers[-1] == "fastpath-pairwise: end 12 measurements, 3 below 40 GB/s, 0 failed"
    assert "fastpath-pairwise: rail0 node-0 node-1 20.10" in markers and "fastpath-pairwise: rail1 node-3 node-4 11.52" in markers
    assert "    # Avg bus bandwidth    : 11.52 " in res.stdout.splitlines()  # a slow pair's output, indented
    # One mpirun per pair and rail: two ranks, one on each node, over one HCA by its exact name, one GPU.
    assert len(calls) == 12
    assert {(a, b, hca, gpu) for a, b, hca, gpu, *_ in calls} == {(a, b, hca, gpu) for hca, gpu in (("mlx5_0", "0"), ("mlx5_3", "3")) for a, b in pairwise.ring(HOSTS)}
    for a, b, hca, gpu, _, *args in calls:
        assert args == [
            "--allow-run-as-root",
            "-np",
            "2",
            "-H",
            f"{a}:1,{b}:1",
            "env",
            f"NCCL_IB_HCA=={hca}",
            f"CUDA_VISIBLE_DEVICES={gpu}",
            "sendrecv_perf_mpi",
            "-b",
            "1G",
            "-e",
            "1G",
            "-g",
            "1",
            "-n",
            "20",
        ]
    log = tmp_path / "launcher.log"
    log.write_text(res.stdout)
    rc = main([str(log), "--floor", "40", "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert (rc, out["verdict"]) == (1, "fail")
    assert out["nodes"] == [{"rail": "rail1", "node": "node-3", "pairs": [{"with": "node-2", "gbps": 11.52}, {"with": "node-4", "gbps": 11.52}]}]
    assert out["links"] == [{"rail": "rail0", "a": "node-0", "b": "node-1", "gbps": 20.1}]
    assert out["unplaced"] == []
    assert not list(tmp_path.glob("fastpath-pairwise.*"))  # its scratch folder is gone


@needs_dash
def test_the_program_under_dash_passes_a_healthy_fabric(tmp_path, capsys):
    res, calls = run_stage(tmp_path, {})
    assert (res.returncode, res.stdout.splitlines()[-1]) == (0, "fastpath-pairwise: end 12 measurements, 0 below 40 GB/s, 0 failed")
    assert not any(line.startswith("    ") for line in res.stdout.splitlines())  # no output but the markers
    log = tmp_path / "launcher.log"
    log.write_text(res.stdout)
    assert main([str(log), "--floor", "40"]) == 0
    assert "verdict: pass" in capsys.readouterr().out


@needs_dash
def test_a_failed_or_hung_pair_is_failed_with_its_output(tmp_path, capsys):
    """mpirun exits 1 for one pair and never returns for another (ended by timeout): both print FAILED, then their
    output; tools.pairwise places each on the link between its two nodes, which are fine with their other partners."""
    res, _ = run_stage(tmp_path, {"FAKE_FAIL": "mlx5_0:node-4:node-5", "FAKE_HANG": "mlx5_3:node-1:node-2"}, timeout_seconds=1)
    lines = res.stdout.splitlines()
    assert res.returncode == 1
    at = lines.index("fastpath-pairwise: rail0 node-4 node-5 FAILED")
    assert lines[at + 1] == "    fake-mpirun: rank 1 on node-5 exited with status 1"
    at = lines.index("fastpath-pairwise: rail1 node-1 node-2 FAILED")
    assert lines[at + 1] == "    (no result in 1 s: timed out)"
    assert lines[-1] == "fastpath-pairwise: end 12 measurements, 0 below 40 GB/s, 2 failed"
    log = tmp_path / "launcher.log"
    log.write_text(res.stdout)
    main([str(log), "--floor", "40", "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert out["links"] == [{"rail": "rail0", "a": "node-4", "b": "node-5", "gbps": None}, {"rail": "rail1", "a": "node-1", "b": "node-2", "gbps": None}]
