"""ncclcheck tells the fast path from its failures, by exit code and reason, on realistic NCCL logs, and says what a
log cannot show instead of failing it."""

import json
import random
import re
import subprocess
import sys
import tempfile
import tracemalloc
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tools.ncclcheck import parse as parse_module
from tools.ncclcheck.bulk import parse_files
from tools.ncclcheck.cli import main, to_json
from tools.ncclcheck.judge import EXPECT, judge
from tools.ncclcheck.parse import MAX_LINE, parse, parse_text, read_lines, strip_prefix

LOGS = Path(__file__).parent / "ncclcheck"

# (log, args, exit code, transport, gdr, fell back, substring of the one deciding reason or None)
CASES = [
    ("ib_gdr_linerate", ["--expect", "ib", "--min-busbw", "360"], 0, "ib", True, False, None),
    ("ib_no_gdr", ["--expect", "ib"], 1, "ib", False, False, "RDMA without GPUDirect"),
    ("ib_no_gdr", ["--expect", "ib", "--allow-no-gdr"], 0, "ib", False, False, None),
    ("roce", ["--expect", "roce", "--min-busbw", "45"], 0, "roce", True, False, None),
    ("roce", ["--expect", "ib"], 1, "roce", True, False, "transport is roce, expected ib"),
    ("socket_fallback_with_networks", ["--expect", "ib"], 1, "socket", False, True, "TCP sockets although the pod has secondary networks (net1, net2)"),
    ("rank_missing", ["--expect", "ib", "--ranks", "16"], 1, "ib", True, False, "15 of 16 ranks reached Init COMPLETE"),
    ("below_floor", ["--expect", "ib", "--min-busbw", "360"], 1, "ib", True, False, "under the floor of 360 GB/s"),
    ("init_timeout", ["--expect", "ib"], 1, "ib", True, False, "a timeout"),
    # --rails: every process's `NET/IB : Using` must list a NIC per rail. ib_rail_missing.log is ib_gdr_linerate.log with
    # mlx5_9 gone from both nodes' lists (its port not ACTIVE) and 7/8 of the bandwidth: over prod-ib's floor of 300.
    ("ib_gdr_linerate", ["--expect", "ib", "--min-busbw", "360", "--rails", "8"], 0, "ib", True, False, None),
    ("ib_rail_missing", ["--expect", "ib", "--min-busbw", "300"], 0, "ib", True, False, None),
    ("ib_rail_missing", ["--expect", "ib", "--min-busbw", "300", "--rails", "8"], 1, "ib", True, False, "NCCL found 7 of 8 rails' NICs on llm-ib-worker-0 (mlx5_0:1, mlx5_3:1, mlx5_4:1, "),
    ("socket_fallback_with_networks", ["--expect", "ib", "--rails", "2"], 1, "socket", False, True, "NCCL found 0 of 2 rails' NICs on llm-ib-worker-0 (none)"),
    # GB200 NVL72, two trays of one clique (fastpath's own logs, shaped by NVIDIA/nccl@v2.30.7-1 src/init.cc, src/mnnvl.cc,
    # src/transport/p2p.cc): a network run (NCCL_MNNVL_ENABLE=0) is the network's, and not multi-node NVLink.
    ("mnnvl_off_network", ["--expect", "ib", "--min-busbw", "150", "--rails", "4"], 0, "ib", True, False, None),
    ("mnnvl_off_network", ["--expect", "mnnvl"], 1, "ib", True, False, "a multi-node NVLink run went over ib: NCCL_MNNVL_ENABLE=0 turned it off"),
    ("mnnvl_no_imex_channel", ["--expect", "mnnvl", "--ranks", "8"], 1, "ib", None, False, "the pod has no IMEX channel (its ComputeDomain claim"),
    # --profiler (acceptance with telemetry on): every process must load the Inspector. It exports ncclProfiler_v5
    # only (NVIDIA/nccl@v2.30.7-1:plugins/profiler/inspector/inspector_plugin.cc), which NCCL 2.27 cannot load: it
    # looks up v4..v1 (v2.27.7-1:src/plugin/profiler.cc) and trains on without it.
    ("profiler_inspector_loaded", ["--expect", "ib", "--min-busbw", "360", "--profiler"], 0, "ib", True, False, None),
    (
        "profiler_v5_on_nccl_2_27",
        ["--expect", "ib", "--min-busbw", "360", "--profiler"],
        1,
        "ib",
        True,
        False,
        "telemetry: NCCL found no profiler interface it knows in the plugin: NCCL 2.27.7 loads profiler interfaces v1-v4 only and the Inspector exports v5",
    ),
]


def check(log, *args):
    res = subprocess.run([sys.executable, "-m", "tools.ncclcheck", str(LOGS / f"{log}.log"), "--format", "json", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    return res.returncode, json.loads(res.stdout)


@pytest.mark.parametrize(("log", "args", "code", "transport", "gdr", "fell_back", "reason"), CASES, ids=[f"{c[0]}-{'-'.join(a.lstrip('-') for a in c[1][::2])}-{c[2]}" for c in CASES])
def test_verdicts(log, args, code, transport, gdr, fell_back, reason):
    rc, out = check(log, *args)
    assert rc == code, out["reasons"]
    assert (out["transport"], out["gdr"], out["fell_back_to_socket"]) == (transport, gdr, fell_back)
    assert out["verdict"] == ("pass" if code == 0 else "fail")
    if reason is None:
        assert out["reasons"] == []
    else:
        assert any(reason in r for r in out["reasons"]), out["reasons"]


# Real log shapes, one fixture each, written after the public issue cited at the top of the fixture.
# (log, args, transport, gdr, verdict, the reasons in full (substrings, in order; [] when it passes))
SHAPES = [
    # HPC-X plugin, versioned name, RoCE told by the merged device list although the module line says NET/IB.
    ("ibext_v8_roce_merged", ["--expect", "roce", "--ranks", "8", "--min-busbw", "37.5"], "roce", True, "pass", []),
    ("ibext_v8_roce_merged", ["--expect", "ib"], "roce", True, "fail", ["transport is roce, expected ib"]),
    # HPC-X plugin, unversioned name, IB with SHARP; lines prefixed with the pod name.
    ("ibext_ib_sharp", ["--expect", "ib", "--ranks", "16"], "ib", True, "pass", []),
    # aws-ofi-nccl up to 1.11: `AWS Libfabric` with a space, NCCL 2.4 Ring lines, mpirun --tag-output, no GDR on p3dn.
    ("efa_aws_libfabric_ring_mpi", ["--expect", "efa", "--ranks", "16"], "efa", False, "fail", ["RDMA without GPUDirect (no GDRDMA on the NET channels)"]),
    ("efa_aws_libfabric_ring_mpi", ["--expect", "efa", "--ranks", "16", "--allow-no-gdr", "--min-busbw", "8"], "efa", False, "pass", []),
    # `AWS Libfabric/1/GDRDMA/Shared` channels with collector timestamps before every line.
    ("efa_aws_libfabric_shared_timestamps", ["--expect", "efa", "--ranks", "16"], "efa", True, "pass", []),
    # aws-ofi-nccl today: `Libfabric`, kubectl logs --timestamps on every line, results table included.
    ("efa_libfabric_kubectl_timestamps", ["--expect", "efa", "--ranks", "16", "--min-busbw", "300"], "efa", True, "pass", []),
    # NCCL_NET=OFI: the plugin names itself OFI; srun --label prefixes.
    ("ofi_srun_label", ["--expect", "efa", "--ranks", "16", "--min-busbw", "40"], "efa", True, "pass", []),
    # RoCE through NCCL's own NET/IB.
    ("roce_net_ib", ["--expect", "roce", "--ranks", "2", "--min-busbw", "40"], "roce", True, "pass", []),
    # NCCL 2.8: `Channel 05 : 9[2b000] -> ...` without /0, bus ids, P2P/direct pointer, direct shared memory.
    ("old_channel_format", ["--expect", "ib", "--ranks", "16"], "ib", True, "pass", []),
    # NCCL 2.4: `Ring 00 : 6 -> 2 [receive] via NET/IB/0`, GPUDirect disabled by distance; old results table.
    ("ring_ib_no_gdr", ["--expect", "ib", "--ranks", "8"], "ib", False, "fail", ["RDMA without GPUDirect (no GDRDMA on the NET channels)"]),
    ("ring_ib_no_gdr", ["--min-busbw", "6"], "ib", False, "pass", []),
    # EFA device not in the pod: aws-ofi-nccl fails (NCCL's own `[%F %T]` WARN timestamp), NCCL falls back to TCP.
    (
        "efa_no_device_socket",
        ["--expect", "efa"],
        "socket",
        False,
        "fail",
        [
            "NCCL fell back to TCP sockets: no RDMA device and no secondary networks in the pod",
            "aws-ofi-nccl found no usable EFA device: the pod lacks the vpc.amazonaws.com/efa resource",
            "no RDMA device in the pod",
        ],
    ),
    # nccl-tests without NCCL_DEBUG: bandwidth yes, transport no; only the checks asked for decide.
    ("nccltests_no_debug", ["--min-busbw", "300"], "unknown", None, "pass", []),
    ("nccltests_no_debug", ["--min-busbw", "300", "--ranks", "16"], "unknown", None, "pass", []),
    ("nccltests_no_debug", ["--min-busbw", "400"], "unknown", None, "fail", ["peak bus bandwidth 361.4 GB/s is under the floor of 400 GB/s (90%)"]),
    ("nccltests_no_debug", ["--ranks", "32"], "unknown", None, "fail", ["nccl-tests ran on 16 ranks, not 32: check mpirun -np and the hostfile's slots"]),
    ("nccltests_no_debug", ["--expect", "ib", "--min-busbw", "300"], "unknown", None, "incomplete", ["transport: unknown (run with NCCL_DEBUG=INFO)"]),
    ("nccltests_old_table", ["--min-busbw", "120"], "unknown", None, "pass", []),
    # Cut off during init: what is missing is "not in this log", not a failure, unless asked for.
    ("truncated_during_init", ["--expect", "ib"], "ib", True, "pass", []),
    (
        "truncated_during_init",
        ["--expect", "ib", "--min-busbw", "300"],
        "ib",
        True,
        "incomplete",
        ["bus bandwidth: not in this log (no nccl-tests results table: the run stopped before its first size, or the log was cut); the floor of 300 GB/s cannot be checked"],
    ),
    ("truncated_during_init", ["--expect", "ib", "--ranks", "16"], "ib", True, "fail", ["11 of 16 ranks reached Init COMPLETE: 5 missing"]),
    # --rails on each shape of the NIC list: merged NICs count one by one, SHARP and 2.7's list too.
    ("ibext_v8_roce_merged", ["--expect", "roce", "--rails", "4"], "roce", True, "pass", []),
    ("ibext_v8_roce_merged", ["--expect", "roce", "--rails", "8"], "roce", True, "fail", ["NCCL found 4 of 8 rails' NICs on gpu-roce-01 (mlx5_2:1, mlx5_3:1, mlx5_0:1, mlx5_1:1)"]),
    ("ibext_ib_sharp", ["--expect", "ib", "--rails", "8"], "ib", True, "pass", []),
    ("old_channel_format", ["--expect", "ib", "--rails", "8"], "ib", True, "pass", []),
    ("nccltests_no_debug", ["--rails", "8"], "unknown", None, "incomplete", ["rails: not in this log (no 'NET/IB : Using' line, where NCCL's IB transport lists the NICs it found"]),
]


@pytest.mark.parametrize(("log", "args", "transport", "gdr", "verdict", "reasons"), SHAPES, ids=[f"{s[0]}-{'-'.join(a.lstrip('-') for a in s[1][::2])}-{s[4]}" for s in SHAPES])
def test_real_log_shapes(log, args, transport, gdr, verdict, reasons):
    rc, out = check(log, *args)
    assert (out["transport"], out["gdr"], out["verdict"]) == (transport, gdr, verdict), out["reasons"]
    assert rc == (0 if verdict in ("pass", "warn") else 1)
    assert len(out["reasons"]) == len(reasons), out["reasons"]
    for got, want in zip(out["reasons"], reasons, strict=True):
        assert want in got


def test_every_shape_fixture_cites_the_public_issue_it_follows():
    for log in {s[0] for s in SHAPES}:
        head = (LOGS / f"{log}.log").read_text().splitlines()[0]
        assert re.match(r"# Source: https://github\.com/[\w.-]+/[\w.-]+/(issues|pull)/\d+ ", head), (log, head)


@pytest.mark.parametrize(
    ("log", "networks", "link_layers", "channels"),
    [
        ("ibext_v8_roce_merged", ["IBext_v8"], ["RoCE"], {"NET/IBext_v8/GDRDMA": 8, "P2P/CUMEM": 8}),
        ("ibext_ib_sharp", ["IBext"], ["IB"], {"NET/IBext/GDRDMA": 32, "P2P/IPC": 16}),
        ("efa_aws_libfabric_ring_mpi", ["AWS Libfabric"], [], {"NET/AWS Libfabric": 4, "P2P/IPC": 14}),
        ("efa_aws_libfabric_shared_timestamps", ["AWS Libfabric"], [], {"NET/AWS Libfabric/GDRDMA": 64, "P2P/CUMEM": 16}),
        ("ofi_srun_label", ["OFI"], [], {"NET/OFI/GDRDMA": 32, "P2P/CUMEM": 16}),
        ("old_channel_format", ["IB"], ["IB"], {"NET/IB/GDRDMA": 32, "P2P/direct pointer": 12, "SHM": 4}),
    ],
)
def test_channels_and_network_names_as_the_log_spells_them(log, networks, link_layers, channels):
    _, out = check(log)
    assert (out["networks"], out["link_layers"], out["channels"]) == (networks, link_layers, channels)


def test_json_contract_and_numbers():
    _, out = check("ib_gdr_linerate", "--expect", "ib")
    assert {"transport", "gdr", "fell_back_to_socket", "nranks", "nccl_version", "avg_busbw_gbps", "peak_busbw_gbps", "verdict", "reasons", "not_in_log"} <= set(out)
    assert (out["nranks"], out["init_complete"], out["nccl_version"]) == (16, 16, "2.27.7")
    assert (out["peak_busbw_gbps"], out["peak_message_bytes"], out["avg_busbw_gbps"]) == (372.1, 8589934592, 216.5)
    assert out["channels"] == {"NET/IB/GDRDMA": 8, "P2P/CUMEM": 2}


@pytest.mark.parametrize(
    ("log", "peak", "size", "version"),
    [
        ("efa_libfabric_kubectl_timestamps", 389.7, 8589934592, "2.23.4"),  # every table line timestamped
        ("ofi_srun_label", 45.84, 4294967296, "2.22.3"),  # every line labelled `0: `
        ("efa_aws_libfabric_ring_mpi", 9.03, 4294967296, "2.4.8"),  # `[1,0]<stdout>:`, table without a root column
        ("nccltests_old_table", 132.4, 8589934592, None),  # `error` column with 2e-07
        ("roce_net_ib", 45.62, 8589934592, "2.19.3"),  # bare `NCCL version` line from nccl-tests
    ],
)
def test_results_table_read_through_prefixes_and_old_layouts(log, peak, size, version):
    _, out = check(log)
    assert (out["peak_busbw_gbps"], out["peak_message_bytes"], out["nccl_version"]) == (peak, size, version)


def test_nccl_tests_without_debug_says_what_it_cannot_show():
    """The floor is judged on the table; the transport is unknown, and said so, without failing the run."""
    rc, out = check("nccltests_no_debug", "--min-busbw", "300")
    assert rc == 0 and out["reasons"] == []
    assert out["not_in_log"] == ["transport: unknown (run with NCCL_DEBUG=INFO)"]
    res = subprocess.run([sys.executable, "-m", "tools.ncclcheck", str(LOGS / "nccltests_no_debug.log"), "--min-busbw", "300"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.stdout.startswith("NCCL ?: transport unknown (run with NCCL_DEBUG=INFO), ranks initialised not in this log, peak busbw 361.4 GB/s")


def test_truncated_log_reports_absent_lines_as_not_in_this_log():
    _, out = check("truncated_during_init", "--expect", "ib")
    assert out["verdict"] == "pass"
    assert out["not_in_log"] == [
        "ranks: 11 of 16 ranks reached Init COMPLETE in this log; the others' lines are not in it (give --ranks N to require them)",
        "bus bandwidth: not in this log (no nccl-tests results table: the run stopped before its first size, or the log was cut)",
    ]
    assert not any("fail" in n or "under the floor" in n for n in out["not_in_log"])


CHANNEL = "host-a:41:90 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0/GDRDMA"
ROW = "      8589934592    2147483648     float     sum      -1  48093.8  178.60  334.89      0  48190.0  178.25  334.22  0"
MARK = "fastpath-acceptance: begin 2 nodes"


@pytest.mark.parametrize(
    "prefix",
    [
        "",
        "[1,3]<stdout>:",  # mpirun --tag-output
        "[1,12]<stderr>:",
        "2024-05-01T12:00:00.123Z ",  # kubectl logs --timestamps (milliseconds)
        "2025-02-11T09:14:03.512894117Z ",  # kubectl logs --timestamps (RFC 3339 nano)
        "  | 2025-05-22T14:26:33.403-07:00 | ",  # CloudWatch table copied from a console
        "[2025-10-16 22:16:08] ",  # NCCL_DEBUG_TIMESTAMP_FORMAT default
        "[pod/nccl-acceptance-launcher-7xk2p/launcher] ",  # kubectl logs --prefix
        "12: ",  # srun --label
        "[pod/nccl-acceptance-launcher-7xk2p/launcher] 2024-05-01T12:00:00.123456789Z [1,0]<stdout>:",  # stacked
    ],
)
def test_prefixes_before_a_line_are_ignored(prefix):
    assert strip_prefix(prefix + MARK) == MARK
    r = parse_text(f"{prefix}{CHANNEL}\n{prefix}{ROW}\n")
    assert (r.channels, r.peak_busbw_gbps, r.peak_message_bytes) == ({"NET/IB/GDRDMA": 1}, 334.89, 8589934592)


@pytest.mark.parametrize(
    ("lines", "transport", "detail"),
    [
        # The HPC-X plugin's own module name before the device list: RoCE all the same.
        (["h:1:2 [0] NCCL INFO NET/IBext_v8 : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>", "h:1:2 [0] NCCL INFO Using network IBext_v8"], "roce", ""),
        (
            ["h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_2:1/RoCE ; OOB eth0:10.0.0.1<0>", "h:1:2 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA"],
            "ib",
            "",
        ),  # mixed: not RoCE
        (["h:1:2 [0] NCCL INFO Using network IBext_v11"], "ib", ""),  # NCCL 2.28+ with the v11 plugin, no channel lines
        (["h:1:2 [0] NCCL INFO NET/OFI Selected provider is cxi, fabric is cxi (found 4 nics)", "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/OFI/0/GDRDMA"], "libfabric/cxi", ""),
        (
            ["h:1:2 [0] NCCL INFO Using network GPUDirectTCPX", "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/GPUDirectTCPX/0"],
            "unknown",
            "unknown (NET/GPUDirectTCPX: a network module ncclcheck does not know)",
        ),
        (["h:1:2 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via P2P/IPC/read", "h:1:2 [0] NCCL INFO Channel 01 : 1[1] -> 0[0] via SHM/direct/direct"], "local", ""),
        (["h:1:2 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>"], "unknown", "unknown (no channel or 'Using network' lines: run with NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,NET)"),
    ],
)
def test_transport_from_module_names_and_link_layers(lines, transport, detail):
    r = parse_text("\n".join(lines))
    assert (r.transport, r.transport_note) == (transport, detail)


def test_a_kinds_own_net_module_is_its_transport(monkeypatch):
    """A NET module only one kind's plugin registers (Kind.net_modules) tells that kind's transport, with no edit
    here; none of the table's is a name ncclcheck already reads another way."""
    table = dict(parse_module.PLUGIN_TRANSPORTS)
    monkeypatch.setattr(parse_module, "PLUGIN_TRANSPORTS", {})
    assert {name: parse_module.net_family(name) for name in table} == dict.fromkeys(table)
    monkeypatch.setattr(parse_module, "PLUGIN_TRANSPORTS", {"examplenet": "roce"})
    r = parse_text("h:1:2 [0] NCCL INFO Using network ExampleNet\nh:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/ExampleNet/0/GDRDMA")
    assert (r.transport, r.transport_note, r.gdr) == ("roce", "", True)


def test_an_unknown_network_module_fails_an_expected_transport():
    r = parse_text("h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/GPUDirectTCPX/0/GDRDMA")
    judge(r, "ib", None, None, False)
    assert r.verdict == "fail"
    assert r.reasons[0].startswith("NCCL used NET/GPUDirectTCPX, a network module ncclcheck does not know, where ib was expected")


def test_libfabric_on_another_provider_is_not_efa():
    r = parse_text("h:1:2 [0] NCCL INFO NET/OFI Selected Provider is tcp\nh:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Libfabric/0")
    judge(r, "efa", None, None, False)
    assert (r.transport, r.verdict) == ("libfabric/tcp", "fail")
    assert r.reasons == ["aws-ofi-nccl ran on libfabric's tcp provider, not efa: the pod sees no EFA device (vpc.amazonaws.com/efa resource) or FI_PROVIDER names another provider"]


def test_text_output_names_the_cause():
    res = subprocess.run([sys.executable, "-m", "tools.ncclcheck", str(LOGS / "socket_fallback_with_networks.log"), "--expect", "ib"], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 1
    assert "transport socket" in res.stdout and "RDMA resource is missing from the pod" in res.stdout


def acceptance_log(path: Path, runs: list[tuple[int, str]], prefix: str = "") -> Path:
    with path.open("w") as out:
        for nodes, log in runs:
            out.write(f"{prefix}fastpath-acceptance: begin {nodes} nodes\n")
            out.writelines(f"{prefix}{line}\n" for line in (LOGS / f"{log}.log").read_text().splitlines())
            if log != "truncated_during_init":  # a run cut off: no end marker
                out.write(f"{prefix}fastpath-acceptance: end {nodes} nodes\n")
    return path


@pytest.mark.parametrize("prefix", ["", "2024-05-01T12:00:00.123456789Z ", "[pod/nccl-acceptance-launcher/launcher] "])
def test_section_picks_one_run_while_streaming(tmp_path, prefix):
    """kubectl logs --timestamps / --prefix put their prefix before the marker lines too."""
    path = acceptance_log(tmp_path / "a.log", [(1, "nccltests_old_table"), (2, "below_floor"), (4, "ib_gdr_linerate")], prefix)
    for nodes, peak in [(1, 132.4), (2, 215.82), (4, 372.1)]:
        report, found = parse(read_lines(path), nodes)
        assert found and report.peak_busbw_gbps == peak


def test_section_run_again_is_judged_on_its_last_start_and_a_cut_run_on_what_is_there(tmp_path):
    path = tmp_path / "a.log"
    path.write_text(
        f"{MARK}\nh:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/Socket/0\n"  # relaunched
        + acceptance_log(tmp_path / "b.log", [(2, "truncated_during_init")]).read_text()
    )
    report, found = parse(read_lines(path), 2)
    assert found and (report.transport, report.init_complete, report.peak_busbw_gbps) == ("ib", 11, None)


def test_missing_section_is_incomplete_in_json_too(tmp_path):
    path = acceptance_log(tmp_path / "a.log", [(1, "ib_gdr_linerate")])
    res = subprocess.run([sys.executable, "-m", "tools.ncclcheck", str(path), "--section", "4", "--format", "json"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    out = json.loads(res.stdout)
    assert res.returncode == 1 and out["verdict"] == "incomplete"
    assert out["reasons"][0].startswith("no 4-node run in this log")


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("empty.log", b""),
        ("binary.log", bytes(range(256)) * 64),
        ("latin1.log", "h\xf4te:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE \xe9\n".encode("latin-1")),
        ("nul.log", b"\x00" * 5000 + b"\nNCCL INFO Channel 00/0 : 0[0] -> 1[0] via NET/IB/0\x00\n"),
        ("long-line.log", b"NCCL INFO " + b"rank 1 nranks 2 " * 400_000 + b"\n# Avg bus bandwidth : 3.5\n"),
        ("cr-only.log", b"h:1:2 [0] NCCL INFO Using network IB\r" * 1000),
        ("huge-numbers.log", b"h NCCL INFO rank 1 nranks " + b"9" * 5000 + b" - Init COMPLETE\n" + b"9" * 5000 + b" 1 float sum -1 1 1 1 0 1 1 1 0\n"),
    ],
)
def test_no_traceback_on_hostile_input(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content)
    for args in ([], ["--expect", "ib", "--ranks", "8", "--min-busbw", "10", "--section", "2"]):
        res = subprocess.run([sys.executable, "-m", "tools.ncclcheck", str(path), *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert res.returncode in (0, 1) and res.stderr == "", res.stderr
        assert "verdict: " in res.stdout


@pytest.mark.parametrize("target", ["missing.log", "."])
def test_unreadable_log_exits_2_naming_the_file(tmp_path, target):
    path = tmp_path / target
    res = subprocess.run([sys.executable, "-m", "tools.ncclcheck", str(LOGS / "roce.log"), str(path)], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.startswith(f"{path}: cannot read log: ")


def test_fuzzed_logs_never_raise(tmp_path, capsys):
    """1,000 deterministic cases in-process (hypothesis is not a dependency): random bytes, and real fixtures with
    bytes spliced in, lines cut, dropped and repeated, under random options; each ends in a verdict, exit 0 or 1."""
    rng = random.Random(11)
    options = [
        [],
        ["--expect", "ib"],
        ["--expect", "efa", "--allow-no-gdr"],
        ["--expect", "local"],
        ["--min-busbw", "100", "--warn-busbw", "300"],
        ["--ranks", "16"],
        ["--section", "2"],
        ["--format", "json", "--expect", "roce", "--ranks", "8"],
        ["--bootstrap", "eth0", "--expect", "ib"],
    ]
    path = tmp_path / "fuzz.log"
    for case, data in enumerate(_mutants(rng, 1000)):
        path.write_bytes(data)
        rc = main([str(path), *rng.choice(options)])
        assert rc in (0, 1), (case, capsys.readouterr().err)
    capsys.readouterr()


def test_streaming_reader_memory_stays_bounded(tmp_path):
    """A log of many runs and a 3 MB line without a newline is read holding lines, not the log."""
    path = tmp_path / "big.log"
    block = (LOGS / "ib_gdr_linerate.log").read_text()
    with path.open("w") as out:
        for _ in range(150):
            out.write(block)
        out.write("x" * 3_000_000 + "\n")
        out.write(block)
    assert path.stat().st_size > 4_000_000
    tracemalloc.start()
    report, _ = parse(read_lines(path))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert report.peak_busbw_gbps == 372.1 and report.channels == {"NET/IB/GDRDMA": 1208, "P2P/CUMEM": 302}
    assert peak < 1_000_000, peak


def test_generated_1000_rank_log_passes_on_ib_with_every_rank():
    """tools/ncclcheck_bench.py's log (one all_reduce_perf run on 125 x 8 GPUs, INIT,NET lines in the shapes of the
    fixtures above) is what `make bench` times: its verdict must be a pass on IB, every rank and channel counted."""
    from tools import ncclcheck_bench

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "all_reduce_perf.log"
        assert ncclcheck_bench.generate(path, 2) >= 2_000_000
        res = subprocess.run([sys.executable, "-m", "tools.ncclcheck", str(path), "--format", "json", "--expect", "ib", "--ranks", "1000"], cwd=ROOT, capture_output=True, text=True, timeout=60)
        line_by_line, _ = parse(read_lines(path), devices=False)  # as the CLI reads it without --rails
    out = json.loads(res.stdout)
    assert res.returncode == 0 and (out["verdict"], out["transport"], out["gdr"]) == ("pass", "ib", True)
    assert (out["nranks"], out["init_complete"], out["nccl_version"]) == (1000, 1000, "2.27.7")
    # rings: 125 nodes x 16 channels x (GPU 7 sends, GPU 0 receives) on NET, GPUs 0-6 on P2P; trees: all on NET
    assert out["channels"] == {"NET/IB/GDRDMA": 125 * 16 * 2 + 1000 * 16, "P2P/CUMEM": 125 * 7 * 16}
    assert (out["peak_busbw_gbps"], out["peak_message_bytes"]) == (370.65, 4294967296)
    assert (out["networks"], out["link_layers"]) == (["IB"], ["IB"])
    assert to_json(judge(line_by_line, "ib", None, 1000, False)) == out


def test_generated_acceptance_series_passes_section_by_section_as_line_by_line():
    """tools/ncclcheck_bench.py's other log shape, many runs in one log as the acceptance series writes them (a run on
    1, 2, ... nodes, each between its marker lines; components/jobs/acceptance.py series_script): the block reader
    reports what the line reader does, by section and for the whole log, and the largest run passes the check
    acceptance gives it."""
    from tools import ncclcheck_bench

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "nccl-acceptance.log"
        _, counts = ncclcheck_bench.generate_series(path, 1)
        assert counts == list(range(1, len(counts) + 1)) and len(counts) >= 5
        for section in (None, 1, counts[-1]):
            report, found = parse_files([path], section)
            assert found and asdict(report) == asdict(parse(read_lines(path), section)[0]), section
        report, _ = parse_files([path], counts[-1])
        judge(report, "ib", 300, counts[-1] * 8, False, 368, "eth0")
        assert (report.verdict, report.reasons, report.init_complete) == ("pass", [], counts[-1] * 8)


def _mutants(rng: random.Random, count: int) -> Iterator[bytes]:
    """Fixtures repeated, cut, spliced with bytes, with CR and CRLF line ends, marker lines and the P2P stand-in."""
    fixtures = [p.read_bytes() for p in sorted(LOGS.glob("*.log"))]
    extra = [
        b"fastpath-acceptance: begin 2 nodes\n",
        b"fastpath-acceptance: end 2 nodes\n",
        b"h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via PQP/x\n",
        b"h:1:2 [0] NCCL INFO NCCL_IB_HCA set by environment to mlx5_1\n",
        b"a\x1cNCCL INFO rank 1 nranks 9 - Init COMPLETE\n",
        b"x" * (MAX_LINE + 5) + b" via NET/IB/0\n",
        b"h:1:2 [0] NCCL INFO Bootstrap: Using bond1:10.0.0.9<0>\n",
        b"h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB eth1:10.0.0.9<0>\n",
        b"h:1:2 [0] NCCL INFO Bootstrap : Using [0]ib1:10.0.0.9<0> [1]eth0:10.1.0.9<0>; OOB eth2:1.2.3.4<5>\n",
        b"node-7:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1:1/IB [RO]; OOB eth0:10.0.0.9<0>\n",
        b"node-8:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB eth0:10.0.0.8<0>\n",
        b"node-9:1:2 [0] NCCL INFO NET/IB : Using [RO]; OOB eth0:10.0.0.7<0>\n",
        b"h\xf4te:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_5:1/IB [1]mlx5_6:1/IB [2]mlx5_7:1/IB ; OOB eth0:10.0.0.6<0>\n",
        b"node-9:1:2 [0] NCCL INFO NET/IB : No device found.\n",
        b"h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/12/GDRDMA\n",
        b"h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/ 3/GDRDMA via NET/IB/4\n",
    ]
    for case in range(count):
        if case % 5 == 0:
            yield rng.randbytes(rng.randrange(0, 4096))
            continue
        lines = rng.choice(fixtures).splitlines(keepends=True) * rng.randrange(1, 4)
        for _ in range(rng.randrange(0, 12)):
            i = rng.randrange(len(lines))
            match rng.randrange(6):
                case 0:
                    cut = rng.randrange(len(lines[i]) + 1)
                    lines[i] = lines[i][:cut] + rng.randbytes(rng.randrange(1, 40)) + lines[i][cut:]
                case 1:
                    lines[i] = lines[i][: rng.randrange(len(lines[i]) + 1)]
                case 2:
                    del lines[i : i + rng.randrange(1, 50)]
                case 3:
                    lines[i:i] = lines[i : i + rng.randrange(1, 20)] * rng.randrange(1, 4)
                case 4:
                    lines[i] = lines[i].replace(b"\n", rng.choice([b"\r\n", b"\r", b"\n\r"]))
                case _:
                    lines[i:i] = [rng.choice(extra)]
            lines = lines or [b""]
        yield b"".join(lines)


def test_block_reader_gives_the_line_readers_report(tmp_path):
    """`main` reads blocks and judges each distinct line shape once (BlockParser.feed_block, bulk.py); the report must be the one
    of feeding every line in turn, whatever the log holds and wherever the blocks end: every fixture, and 300
    mutants of them, read with chunks of 1 to 300 bytes (a line cut at every place) and of 1 MiB, whole and by
    section."""
    rng = random.Random(5)
    path = tmp_path / "log"
    logs = [p.read_bytes() for p in sorted(LOGS.glob("*.log"))] + list(_mutants(rng, 300))
    for case, data in enumerate(logs):
        path.write_bytes(data)
        for section in (None, 2):
            want = asdict(parse(read_lines(path), section)[0])
            for chunk in (rng.randrange(1, 300), 1 << 20):
                assert asdict(parse_files([path], section, chunk)[0]) == want, (case, section, chunk)


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144])
def test_a_line_split_across_blocks_is_read_whole(tmp_path, chunk):
    path = tmp_path / "a.log"
    path.write_text(f"{CHANNEL}\r\n{ROW}\n{MARK}\n2024-05-01T12:00:00.123Z {CHANNEL}\nh:1:2 [0] NCCL INFO comm 0xa1 rank 3 nranks 4 cudaDev 0 busId 18000 - Init COMPLETE")
    report, _ = parse_files([path], chunk_size=chunk)
    assert (report.channels, report.peak_busbw_gbps, report.peak_message_bytes) == ({"NET/IB/GDRDMA": 2}, 334.89, 8589934592)
    assert (report.nranks, report.init_complete, report.net_channels) == (4, 1, 2)
    report, found = parse_files([path], section=2, chunk_size=chunk)
    assert found and report.channels == {"NET/IB/GDRDMA": 1} and report.peak_busbw_gbps is None


def test_block_reader_memory_stays_bounded(tmp_path):
    """Blocks of 64 KiB and a 3 MB line without a newline: the reader holds a block and the head of the line."""
    path = tmp_path / "big.log"
    block = (LOGS / "ib_gdr_linerate.log").read_text()
    with path.open("w") as out:
        out.write(block * 150 + "x" * 3_000_000 + "\n" + block)
    tracemalloc.start()
    report, _ = parse_files([path], chunk_size=1 << 16)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert report.peak_busbw_gbps == 372.1 and report.channels == {"NET/IB/GDRDMA": 1208, "P2P/CUMEM": 302}
    assert peak < 4_000_000, peak


@pytest.mark.parametrize("chunk", [1, 40, 1 << 20])
def test_a_run_ended_on_the_line_after_its_start_is_empty_in_blocks_too(tmp_path, chunk):
    path = tmp_path / "a.log"
    path.write_text(f"{MARK}\nfastpath-acceptance: end 2 nodes\n{CHANNEL}\n")
    report, found = parse_files([path], section=2, chunk_size=chunk)
    assert found and (report.channels, report.nccl_lines) == ({}, 0)


# A healthy multi-node run on each transport components/fabric/kinds.py names: tests/ncclcheck/expect/<transport>.log
# (a link to the fixture that shows it best, or a log of its own), judged `pass` by `--expect <transport>`. A new
# fabric kind's transport is accepted by `--expect` from its row in kinds.py alone; its log here is its test.
EXPECT_LOGS = LOGS / "expect"
# The other side: (--expect, log, substring of the first reason) that must fail.
EXPECT_FAILS = [
    # A TCP fabric expects no RDMA device: the socket fallback log passes --expect socket (test_corpus_2 below).
    ("socket", "ib_gdr_linerate", "transport is ib, expected socket"),
    ("local", "ib_gdr_linerate", "a one-node run used the network (ib)"),
]


def test_every_transport_of_the_kinds_table_has_a_healthy_log():
    from components.fabric.kinds import TRANSPORTS

    assert EXPECT == (*TRANSPORTS, "local", "mnnvl")
    multi_node = {*TRANSPORTS, "mnnvl"}  # every --expect but local has a healthy multi-node log
    missing = sorted(multi_node - {p.stem for p in EXPECT_LOGS.glob("*.log")})
    assert not missing, f"add tests/ncclcheck/expect/<transport>.log (an NCCL_DEBUG=INFO log of a healthy multi-node run) for {missing}"
    assert sorted(p.stem for p in EXPECT_LOGS.glob("*.log")) == sorted(multi_node)


@pytest.mark.parametrize("transport", sorted(p.stem for p in EXPECT_LOGS.glob("*.log")))
def test_expect_passes_a_healthy_run_on_each_transport(capsys, transport):
    rc = main([str(EXPECT_LOGS / f"{transport}.log"), "--expect", transport, "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert (rc, out["verdict"], out["reasons"]) == (0, "pass", [])


@pytest.mark.parametrize(("expect", "log", "reason"), EXPECT_FAILS, ids=[row[0] for row in EXPECT_FAILS])
def test_expect_fails_a_run_on_another_transport(capsys, expect, log, reason):
    rc = main([str(LOGS / f"{log}.log"), "--expect", expect, "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert (rc, out["verdict"]) == (1, "fail")
    assert reason in out["reasons"][0]


@pytest.mark.parametrize("expect", [t for t in EXPECT if t != "local"])
def test_expect_fails_every_other_transports_healthy_run(capsys, expect):
    """A healthy run is healthy only on the transport it was expected on: each other transport's log fails."""
    for other in EXPECT_LOGS.glob("*.log"):
        if other.stem == expect:
            continue
        rc = main([str(other), "--expect", expect, "--format", "json"])
        out = json.loads(capsys.readouterr().out)
        assert (rc, out["verdict"]) == (1, "fail"), (expect, other.stem, out["reasons"])


def test_expect_refuses_a_transport_no_kind_names(capsys):
    with pytest.raises(SystemExit) as exc:
        main([str(LOGS / "roce.log"), "--expect", "infiniband"])
    assert exc.value.code == 2 and "invalid choice: 'infiniband'" in capsys.readouterr().err


# The lines NCCL prints for the interface it bootstraps on (its out-of-band sockets), by version:
# - NVIDIA/nccl@v2.7.8-1:src/bootstrap.cc `Bootstrap : Using [0]ib0:10.90.43.152<0>` (the interfaces found, the
#   first one used);
# - NVIDIA/nccl@v2.18.5-1:src/bootstrap.cc `Bootstrap : Using eth0:10.224.3.48<0>` (INIT; BOOTSTRAP from 2.23);
# - NVIDIA/nccl@v2.27.7-1:src/bootstrap.cc `Bootstrap: Using eth0:10.244.1.17<0>` (BOOTSTRAP, from 2.24), and
#   `Bootstrap: Using mlx5_0:1` for NCCL_OOB_NET_ENABLE (a NET device and port: not an interface);
# - NVIDIA/nccl@v2.27.7-1:src/transport/net_ib.cc (v2.30.7-1:src/transport/net_ib/init.cc)
#   `NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB eth0:10.244.1.17<0>` (INIT,NET), every version.
# ncclSocketToString (NVIDIA/nccl@v2.27.7-1:src/misc/socket.cc) prints the address as `<host><<port>>`.
HOSTNET = "node-7:311:311 [0] NCCL INFO "
# (id, log: a fixture's name or its lines, --bootstrap, verdict, the reason in full (substrings) or None)
BOOTSTRAPS = [
    ("2.27-bootstrap-and-oob", "ib_gdr_linerate", "eth0", "pass", None),
    ("2.27-other-interface", "ib_gdr_linerate", "bond0", "fail", "NCCL bootstrapped on eth0, not bond0: NCCL_SOCKET_IFNAME / fabric.podInterface names bond0 but NCCL used eth0"),
    ("2.18-spaced", "ibext_ib_sharp", "eth0", "pass", None),
    ("2.7-indexed", "old_channel_format", "ib0", "pass", None),
    ("2.7-indexed-other", "old_channel_format", "eth0", "fail", "names eth0 but NCCL used ib0"),
    ("oob-only-vlan", "ibext_v8_roce_merged", "bond0.526", "pass", None),
    ("not-in-log", "nccltests_old_table", "eth0", "incomplete", "bootstrap interface: not in this log (no 'Bootstrap: Using' or NET/IB '; OOB' line"),
    # A host-network pod: NCCL_SOCKET_IFNAME=bond0 (the node's primary interface) was not set, and NCCL took the
    # first interface it found on the host.
    (
        "hostnetwork-first-found",
        [f"{HOSTNET}Bootstrap: Using enp1s0f0:10.0.0.5<0>", f"{HOSTNET}NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB enp1s0f0:10.0.0.5<0>"],
        "bond0",
        "fail",
        "NCCL bootstrapped on enp1s0f0, not bond0: NCCL_SOCKET_IFNAME / fabric.podInterface names "
        "bond0 but NCCL used enp1s0f0; set them to the interface that routes between the nodes (on the host network: "
        "the node's primary interface)",
    ),
    (
        "hostnetwork-right",
        [f"{HOSTNET}Bootstrap: Using bond0:10.0.0.5<0>", f"{HOSTNET}Bootstrap: Using mlx5_0:1", f"{HOSTNET}NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB bond0:10.0.0.5<0>"],
        "bond0",
        "pass",
        None,
    ),
    (
        "socket-and-oob-differ",
        [f"{HOSTNET}Bootstrap : Using bond0:10.0.0.5<0>", f"{HOSTNET}NET/IB : Using [0]mlx5_0:1/IB ; OOB eth1:192.168.0.5<0>"],
        "bond0",
        "fail",
        "NCCL bootstrapped on eth1, not bond0",
    ),
]


@pytest.mark.parametrize(("log", "interface", "verdict", "reason"), [row[1:] for row in BOOTSTRAPS], ids=[row[0] for row in BOOTSTRAPS])
def test_bootstrap_interface(tmp_path, capsys, log, interface, verdict, reason):
    if isinstance(log, list):
        path = tmp_path / "bootstrap.log"
        path.write_text("\n".join(log) + "\n")
    else:
        path = LOGS / f"{log}.log"
    rc = main([str(path), "--bootstrap", interface, "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert (rc, out["verdict"]) == (0 if verdict == "pass" else 1, verdict), out["reasons"]
    if reason is None:
        assert out["reasons"] == []
    else:
        assert any(reason in r for r in out["reasons"]), out["reasons"]
    # the same interfaces read line by line and in blocks, wherever the blocks end
    want = parse(read_lines(path))[0].bootstrap_interfaces
    for chunk in (7, 1 << 18):
        assert parse_files([path], chunk_size=chunk)[0].bootstrap_interfaces == want


def test_bootstrap_is_read_only_when_asked():
    """Reading the interfaces costs a regex pass over the log, so the CLI reads them only under --bootstrap."""
    path = LOGS / "ib_gdr_linerate.log"
    assert parse_files([path], bootstrap=False)[0].bootstrap_interfaces == []
    assert parse_files([path])[0].bootstrap_interfaces == ["eth0"]


ONE_NODE = "h:1:2 [0] NCCL INFO Using network {net}\nh:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via {via}\n"


# A one-node run picks a network at init (IB where there are HCAs, Socket where there are none) and then connects
# every channel inside the node: the acceptance series' 1-node run expects `local`, never a fallback.
@pytest.mark.parametrize(
    ("text", "transport", "fell_back"),
    [
        (ONE_NODE.format(net="IB", via="P2P/CUMEM/read"), "local", False),
        (ONE_NODE.format(net="Socket", via="SHM/direct/direct"), "local", False),
        (ONE_NODE.format(net="IB", via="NET/IB/0"), "ib", False),
        (ONE_NODE.format(net="IB", via="NET/Socket/0"), "socket", True),
        ("h:1:2 [0] NCCL INFO Using network Socket\n", "socket", True),  # no channel lines: what was picked counts
    ],
    ids=["ib-picked-p2p", "socket-picked-shm", "net-ib", "net-socket", "picked-socket-only"],
)
def test_what_the_channels_used_decides_over_the_network_picked(text, transport, fell_back):
    r = parse_text(text)
    assert (r.transport, r.fell_back_to_socket) == (transport, fell_back)


# The NIC list NCCL's IB transport prints once per process, after leaving out ports that are not ACTIVE and NICs
# NCCL_IB_HCA does not match (NVIDIA/nccl@v2.30.7-1:src/transport/net_ib/init.cc ncclIbInitDevices), in each shape it
# has had: `[d]dev:port/LL` (every version), merged NICs `[d]={[i] dev:port/LL, ...}` (2.20 to v2.23.4-1:src/
# transport/net_ib.cc), the HPC-X plugin's `/IB/SHARP`, 2.30's rail and plane from NCCL_IB_HCA (`dev:port:rail/LL`,
# `dev:port::plane/LL`), and `No device found` (a list of none; from v2.24.3-1 an empty `Using` list follows it).
W0 = "node-0:41:90 [0] NCCL INFO "
W1 = "node-1:41:98 [0] NCCL INFO "
# (id, lines, nics (the longest list), fewest, its host, net_devices)
NIC_LISTS = [
    ("2.27", [f"{W0}NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB [RO]; OOB eth0:10.0.0.1<0>"], ["mlx5_0:1", "mlx5_3:1"], ["mlx5_0:1", "mlx5_3:1"], "node-0", []),
    (
        "merged",
        [f"{W0}NET/IB : Using [0]={{[0] mlx5_2:1/RoCE, [1] mlx5_3:1/RoCE}} [1]={{[2] mlx5_0:1/RoCE, [3] mlx5_1:1/RoCE}} [RO]; OOB bond0:10.0.0.1<0>"],
        ["mlx5_2:1", "mlx5_3:1", "mlx5_0:1", "mlx5_1:1"],
        ["mlx5_2:1", "mlx5_3:1", "mlx5_0:1", "mlx5_1:1"],
        "node-0",
        [],
    ),
    ("sharp-ibext", [f"{W0}NET/IBext : Using [0]mlx5_9:1/IB/SHARP [1]mlx5_10:1/IB/SHARP ; OOB eth0:10.0.0.1<0>"], ["mlx5_9:1", "mlx5_10:1"], ["mlx5_9:1", "mlx5_10:1"], "node-0", []),
    (
        "2.30-rail-plane",
        [f"{W0}NET/IB : Using [0]mlx5_0:1:0/IB [1]mlx5_1:1::1/IB [2]mlx5_2:1:2:0/IB [RO]; OOB eth0:10.0.0.1<0>"],
        ["mlx5_0:1", "mlx5_1:1", "mlx5_2:1"],
        ["mlx5_0:1", "mlx5_1:1", "mlx5_2:1"],
        "node-0",
        [],
    ),
    (
        "one-node-short",
        [
            f"{W0}NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB [RO]; OOB eth0:10.0.0.1<0>",
            f"{W1}NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB eth0:10.0.0.2<0>",
            f"{W0}Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/1/GDRDMA",
        ],
        ["mlx5_0:1", "mlx5_3:1"],
        ["mlx5_0:1"],
        "node-1",
        [1],
    ),
    ("none-found", [f"{W1}NET/IB : No device found.", f"{W1}NET/IB : Using [RO]; OOB eth0:10.0.0.2<0>", f"{W0}NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>"], ["mlx5_0:1"], [], "node-1", []),
    ("no-list", [f"{W0}Using network IB", f"{W0}Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/10/GDRDMA/Shared", f"{W0}Channel 01/0 : 0[0] -> 1[0] via NET/Socket/0"], [], None, "", [0, 10]),
]


@pytest.mark.parametrize(("lines", "nics", "fewest", "host", "devices"), [row[1:] for row in NIC_LISTS], ids=[row[0] for row in NIC_LISTS])
def test_nic_lists_and_net_devices_in_every_shape(tmp_path, lines, nics, fewest, host, devices):
    path = tmp_path / "nics.log"
    path.write_text("\n".join(lines) + "\n")
    for report in (parse(read_lines(path))[0], parse_files([path])[0], parse_files([path], chunk_size=11)[0]):
        assert (report.nics, report.fewest_nics, report.fewest_nics_host, report.net_devices) == (nics, fewest, host, devices)


def test_a_node_with_a_rail_down_is_named_with_the_nic_it_lacks(capsys, tmp_path):
    """One node's mlx5_9 port is down: its processes list 7 NICs, the other node's 8; NCCL_IB_HCA names the missing
    one. The node, the NICs it found, the one the others found and the NCCL_IB_HCA entry are all in the reason."""
    text = (
        (LOGS / "ib_gdr_linerate.log")
        .read_text()
        .replace(
            "llm-ib-worker-1:41:98 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB [2]mlx5_4:1/IB [3]mlx5_5:1/IB [4]mlx5_6:1/IB [5]mlx5_9:1/IB [6]mlx5_10:1/IB [7]mlx5_11:1/IB",
            "llm-ib-worker-1:41:98 [0] NCCL INFO NCCL_IB_HCA set by environment to =mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11\n"
            "llm-ib-worker-1:41:98 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB [2]mlx5_4:1/IB [3]mlx5_5:1/IB [4]mlx5_6:1/IB [5]mlx5_10:1/IB [6]mlx5_11:1/IB",
        )
    )
    path = tmp_path / "one_node_rail_down.log"
    path.write_text(text)
    rc = main([str(path), "--expect", "ib", "--rails", "8", "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert (rc, out["verdict"], len(out["nics"])) == (1, "fail", 8)
    assert out["reasons"] == [
        "NCCL found 7 of 8 rails' NICs on llm-ib-worker-1 (mlx5_0:1, mlx5_3:1, mlx5_4:1, mlx5_5:1, mlx5_6:1, mlx5_10:1, mlx5_11:1); other processes found mlx5_9:1 too; "
        "NCCL_IB_HCA==mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11 names mlx5_9, which it did not find: NCCL leaves out a port that is not ACTIVE (a link down or not yet up: "
        "ibstat on that node) and a NIC that NCCL_IB_HCA does not match, and a pod has no NIC of a rail whose resource it does not request; check that port, NCCL_IB_HCA and the pod's rail resources"
    ]
    assert out["net_devices"] == [0, 1]
    assert out["not_in_log"] == ["rails in use: the channel lines in this log use NET devices 0, 1 (2 of 8); the other ranks' channel lines are not in it, so this is not judged"]


@pytest.mark.parametrize(
    ("hca", "nics", "missing"),
    [
        ("=mlx5_0,mlx5_9", ["mlx5_0:1"], ["mlx5_9"]),
        ("mlx5_1", ["mlx5_10:1", "mlx5_11:1"], []),  # a prefix: mlx5_1 matches mlx5_10 (matchIf without `=`)
        ("=mlx5_1", ["mlx5_10:1", "mlx5_11:1"], ["mlx5_1"]),
        ("mlx5_0:1,mlx5_3:2", ["mlx5_0:1", "mlx5_3:1"], ["mlx5_3:2"]),  # ports must match when given
        ("^mlx5_2", ["mlx5_0:1"], []),  # an exclusion list names no NIC that must be found
        ("mlx5", [], ["mlx5"]),
    ],
)
def test_nccl_ib_hca_entries_matched_as_nccl_matches_them(hca, nics, missing):
    from tools.ncclcheck.judge import hca_entries_not_found

    assert hca_entries_not_found(hca, nics) == missing


def test_net_devices_are_read_only_when_rails_are_checked():
    """Reading the channel lines' NET devices costs a pass over the blocks that hold them: the CLI reads them under
    --rails only, and says so with null."""
    path = LOGS / "ib_gdr_linerate.log"
    assert parse_files([path], devices=False)[0].net_devices is None
    assert parse_files([path])[0].net_devices == [0, 1]


@pytest.mark.parametrize("value", ["0", "-1", "eight"])
def test_rails_must_be_a_count(capsys, value):
    with pytest.raises(SystemExit) as exc:
        main([str(LOGS / "roce.log"), "--rails", value])
    assert exc.value.code == 2 and "--rails" in capsys.readouterr().err


def test_a_one_tray_run_under_mnnvl_is_local_and_two_trays_are_mnnvl():
    """NCCL labels every P2P connection of an MNNVL communicator P2P/MNNVL, within a tray too (NVIDIA/nccl@v2.30.7-1
    src/transport/p2p.cc p2pSendSetup), so the label alone is not multi-node: one host's lines are a local run."""
    text = (LOGS / "expect" / "mnnvl.log").read_text()
    one_tray = "\n".join(line for line in text.splitlines() if "gb200-tray-07" not in line)
    r = parse_text(one_tray)
    assert (r.transport, r.mnnvl, r.clique_size) == ("local", True, 72)
    assert parse_text(text).transport == "mnnvl"
    # A communicator that says MNNVL 0 is not an MNNVL run, whatever a channel line claims.
    assert parse_text(text.replace("MNNVL 1\n", "MNNVL 0\n")).transport != "mnnvl"


PLUGIN = "/nccl-inspector/lib/libnccl-profiler-inspector.so"
LOADED_V5 = ["PROFILER/Plugin: Loaded Inspector (v5)", f"Successfully loaded external profiler plugin {PLUGIN}"]
ALL_RANKS = frozenset(range(16))
# (id, NCCL version, what each process printed of its profiler plugin as that release prints it under INIT
# (NVIDIA/nccl@v2.27.7-1 and @v2.30.7-1: src/plugin/plugin_open.cc, src/plugin/profiler.cc,
# src/plugin/profiler/profiler_v*.cc), the ranks whose Inspector set up its communicator (its `init commName` line:
# plugins/profiler/inspector/inspector_plugin.cc), the plugin loaded, the verdict with --profiler --ranks 16 and
# without --profiler, the reason's substring)
PROFILER_LINES = [
    ("loaded-2.30", "2.30.7", LOADED_V5, ALL_RANKS, "Inspector (v5)", "pass", "pass", None),
    # A rank whose Inspector did not set up: it loaded, and exports nothing there.
    ("silent-rank", "2.30.7", LOADED_V5, ALL_RANKS - {5}, "Inspector (v5)", "fail", "pass", "set up a communicator on 15 of 16 ranks"),
    # Loaded but inert everywhere (NCCL_INSPECTOR_ENABLE unset: from 2.29.3 its init returns success, logs under
    # PROFILE only, and NCCL prints no failure).
    ("inert", "2.30.7", LOADED_V5, frozenset(), "Inspector (v5)", "fail", "pass", "set up a communicator on 0 of 16 ranks"),
    ("not-the-inspector", "2.30.7", ["PROFILER/Plugin: Loaded example (v6)"], ALL_RANKS, "example (v6)", "fail", "pass", "not the Inspector"),
    # 2.27 tries v4 first and logs each miss: a plugin of an older interface still loads (not the Inspector).
    (
        "v4-miss-then-loaded-2.27",
        "2.27.7",
        [f"PROFILER/Plugin: Plugin name set by env to {PLUGIN}", "PROFILER/Plugin: failed to find ncclProfiler_v4", "PROFILER/Plugin: loaded example"],
        frozenset(),
        "example",
        "fail",
        "pass",
        "not the Inspector",
    ),
    # No NCCL_PROFILER_PLUGIN (or `none`): NCCL looks for its default library; no failure of a job.
    ("unset-2.30", "2.30.7", ["PROFILER/Plugin: Could not find: libnccl-profiler.so"], frozenset(), None, "fail", "pass", "a process was given no profiler plugin"),
    ("unset-2.27", "2.27.7", ["PROFILER/Plugin: Could not find: libnccl-profiler.so. "], frozenset(), None, "fail", "pass", "the launcher did not pass the Inspector's variables"),
    ("none-2.27", "2.27.7", ["PROFILER/Plugin: Could not find: none libnccl-profiler-none.so. "], frozenset(), None, "fail", "pass", "NCCL_PROFILER_PLUGIN was none"),
    ("missing-2.30", "2.30.7", [f"PROFILER/Plugin: Could not find: {PLUGIN}"], frozenset(), None, "fail", "warn", "NCCL could not find the profiler plugin NCCL_PROFILER_PLUGIN names"),
    ("missing-2.27", "2.27.7", [f"PROFILER/Plugin: Could not find: {PLUGIN}. "], frozenset(), None, "fail", "warn", "the init container that copies it from monitoring.ncclInspectorImage"),
    ("unsupported-2.30", "2.30.7", [f"External profiler plugin {PLUGIN} is unsupported"], frozenset(), None, "fail", "warn", "NCCL 2.30.7 loads the Inspector's v5: the file is not the Inspector"),
    (
        "v5-on-2.27",
        "2.27.7",
        ["PROFILER/Plugin: failed to find ncclProfiler_v4", "PROFILER/Plugin: failed to find ncclProfiler_v1."],
        frozenset(),
        None,
        "fail",
        "warn",
        "NCCL 2.27.7 loads profiler interfaces v1-v4 only",
    ),
    (
        "libstdcxx-2.30",
        "2.30.7",
        [f"PROFILER/Plugin: {PLUGIN}: /lib/x86_64-linux-gnu/libstdc++.so.6: version `GLIBCXX_3.4.32' not found (required by {PLUGIN})"],
        frozenset(),
        None,
        "fail",
        "warn",
        "built against a newer glibc or libstdc++",
    ),
    ("elf-2.27", "2.27.7", [f"PROFILER/Plugin: {PLUGIN}: wrong ELF class: ELFCLASS32"], frozenset(), None, "fail", "warn", "could not load the profiler plugin"),
    (
        "init-failed-2.30",
        "2.30.7",
        [*LOADED_V5, "Profiler init failed with error '5': Input/output error. Continue without profiler."],
        frozenset(),
        "Inspector (v5)",
        "fail",
        "warn",
        "the profiler plugin failed to start",
    ),
    (
        "init-failed-2.27",
        "2.27.7",
        ["PROFILER/Plugin: loaded Inspector", "NCCL WARN Profiler init failed with error (5). Continue without profiler."],
        frozenset(),
        "Inspector",
        "fail",
        "warn",
        "the profiler plugin failed to start",
    ),
    # Loaded with NCCL_INSPECTOR_ENABLE unset (or `true`: read as an integer): each process says so, bare.
    ("disabled", "2.30.7", [*LOADED_V5, "NCCL Inspector Plugin DISABLED (NCCL_INSPECTOR_ENABLE=0)"], frozenset(), "Inspector (v5)", "fail", "warn", "NCCL_INSPECTOR_ENABLE must be 1"),
    # No plugin line at all (INIT not logged): not judged, where it was asked for.
    ("no-lines", "2.30.7", [], frozenset(), None, "incomplete", "pass", "profiler plugin: not in this log"),
]


def profiler_log(version: str, process_lines: list[str], ranks: frozenset[int]) -> str:
    """ib_gdr_linerate.log (two processes' init lines, 16 ranks) with `version`, `process_lines` after each
    process's `Using network` line and the Inspector's line after the Init START of each of `ranks`."""
    out = []
    for line in (LOGS / "ib_gdr_linerate.log").read_text().replace("2.27.7+cuda12.9", f"{version}+cuda13.0").splitlines():
        out.append(line)
        head = line.split("NCCL INFO ")[0]
        if "NCCL INFO Using network IB" in line:
            out += [text if text.startswith("NCCL Inspector") else f"{head}{'' if text.startswith('NCCL WARN') else 'NCCL INFO '}{text}" for text in process_lines]
        if (m := re.search(r"rank (\d+) nranks (\d+) .* - Init START", line)) and int(m.group(1)) in ranks:
            out.append(f"{head}NCCL INFO PROFILER/Plugin: init commName:  commHash: 9024011226335993617 nranks: {m.group(2)} rank: {m.group(1)}")
    return "\n".join(out) + "\n"


@pytest.mark.parametrize(("version", "lines", "ranks", "loaded", "required", "otherwise", "reason"), [row[1:] for row in PROFILER_LINES], ids=[row[0] for row in PROFILER_LINES])
def test_profiler_plugin_loading_as_each_release_prints_it(tmp_path, version, lines, ranks, loaded, required, otherwise, reason):
    """With --profiler the Inspector must have set up every rank's communicator; without it a plugin that did not
    load is a warning: the job trains on, with no telemetry. The block reader gives the same report."""
    text = profiler_log(version, lines, ranks)
    path = tmp_path / "run.log"
    path.write_text(text)
    report = parse_files([path], None)[0]
    assert asdict(report) == asdict(parse(read_lines(path))[0])
    assert (report.profiler, report.profiler_ranks) == (loaded, len(ranks))
    for flag, verdict in ((True, required), (False, otherwise)):
        r = judge(parse_text(text), "ib", 360, 16, False, profiler=flag)
        assert r.verdict == verdict, r.reasons
        if verdict != "pass" and reason is not None:
            assert any(reason in why for why in r.reasons), r.reasons
        if not flag:
            assert not any("Profiler init failed" in w for w in r.warnings)  # read as the plugin's, not an unknown WARN
