"""ncclcheck tells the fast path from its failures, by exit code and reason, on realistic NCCL logs."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

LOGS = Path(__file__).parent / "ncclcheck"

# (log, args, exit code, transport, gdr, fell back, substring of the one deciding reason or None)
CASES = [
    ("ib_gdr_linerate", ["--expect", "ib", "--min-busbw", "360"], 0, "ib", True, False, None),
    ("ib_no_gdr", ["--expect", "ib"], 1, "ib", False, False, "RDMA without GPUDirect"),
    ("ib_no_gdr", ["--expect", "ib", "--allow-no-gdr"], 0, "ib", False, False, None),
    ("roce", ["--expect", "roce", "--min-busbw", "45"], 0, "roce", True, False, None),
    ("roce", ["--expect", "ib"], 1, "roce", True, False, "transport is roce, expected ib"),
    ("socket_fallback_with_networks", ["--expect", "ib"], 1, "socket", False, True,
     "TCP sockets although the pod has secondary networks (net1, net2)"),
    ("rank_missing", ["--expect", "ib", "--ranks", "16"], 1, "ib", True, False, "15 of 16 ranks reached Init COMPLETE"),
    ("below_floor", ["--expect", "ib", "--min-busbw", "360"], 1, "ib", True, False, "under the floor of 360 GB/s"),
    ("init_timeout", ["--expect", "ib"], 1, "ib", True, False, "a timeout"),
]


def check(log, *args):
    res = subprocess.run([sys.executable, "-m", "tools.ncclcheck", str(LOGS / f"{log}.log"), "--format", "json", *args],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    return res.returncode, json.loads(res.stdout)


@pytest.mark.parametrize(("log", "args", "code", "transport", "gdr", "fell_back", "reason"), CASES,
                         ids=[f"{c[0]}{'-' + '-'.join(c[1][1:2]) if c[1] else ''}-{c[2]}" for c in CASES])
def test_verdicts(log, args, code, transport, gdr, fell_back, reason):
    rc, out = check(log, *args)
    assert rc == code, out["reasons"]
    assert (out["transport"], out["gdr"], out["fell_back_to_socket"]) == (transport, gdr, fell_back)
    assert out["verdict"] == ("pass" if code == 0 else "fail")
    if reason is None:
        assert out["reasons"] == []
    else:
        assert any(reason in r for r in out["reasons"]), out["reasons"]


def test_json_contract_and_numbers():
    _, out = check("ib_gdr_linerate", "--expect", "ib")
    assert {"transport", "gdr", "fell_back_to_socket", "nranks", "nccl_version", "avg_busbw_gbps", "peak_busbw_gbps",
            "verdict", "reasons"} <= set(out)
    assert (out["nranks"], out["init_complete"], out["nccl_version"]) == (16, 16, "2.27.7")
    assert (out["peak_busbw_gbps"], out["peak_message_bytes"], out["avg_busbw_gbps"]) == (372.1, 8589934592, 216.5)
    assert out["channels"] == {"NET/IB/GDRDMA": 8, "P2P/CUMEM": 2}


def test_text_output_names_the_cause():
    res = subprocess.run([sys.executable, "-m", "tools.ncclcheck", str(LOGS / "socket_fallback_with_networks.log"),
                          "--expect", "ib"], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 1
    assert "transport socket" in res.stdout and "RDMA resource is missing from the pod" in res.stdout


def test_unreadable_log_exits_2(tmp_path):
    res = subprocess.run([sys.executable, "-m", "tools.ncclcheck", str(tmp_path / "missing.log")], cwd=ROOT,
                         capture_output=True, text=True)
    assert res.returncode == 2
