"""Fabric acceptance: the nccl-tests job is wired like a training job, and its check command is the contract."""

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from components import acceptance, config, fabric
from components.config import AcceptanceConfig, FabricConfig, PlatformConfig
from components.profile import profile as make_profile
from tests.conftest import ROOT, stack_platform

LOGS = Path(__file__).parent / "ncclcheck"


def plan_for(stack: str, **acc) -> list[dict]:
    p = stack_platform(stack)
    p["acceptance"] = {"enabled": True, **acc}
    platform = PlatformConfig.model_validate(p)
    return acceptance.plan(platform.acceptance, make_profile(platform))


@pytest.mark.parametrize(("stack", "acc", "floor"), [
    ("prod-ib", {}, 360.0),  # 8 x 400G x 0.9
    ("prod-ib", {"efficiency": 0.8}, 320.0),
    ("prod-roce", {}, 45.0),  # 2 x 200G x 0.9
    ("prod-roce", {"minBusbwGbps": 40}, 40.0),
])
def test_floor_from_rails_speed_and_efficiency(stack, acc, floor):
    p = PlatformConfig.model_validate({**stack_platform(stack), "acceptance": acc})
    assert acceptance.floor_gbps(p.acceptance, p.fabric) == floor


def test_tcp_has_no_derived_floor():
    assert acceptance.floor_gbps(AcceptanceConfig(), FabricConfig(kind="tcp")) is None


def test_series_and_job_wiring():
    runs = plan_for("prod-ib", nodes=4, scaling=[1, 2, 8])
    assert [(r["job"], r["nodes"], r["ranks"], r.get("expect")) for r in runs] == [
        ("nccl-allreduce-1n", 1, 8, None), ("nccl-allreduce-2n", 2, 16, "ib"), ("nccl-allreduce-4n", 4, 32, "ib"),
        ("nccl-allreduce-8n", 8, 64, "ib")]
    m = runs[2]["manifest"]
    assert m["kind"] == "MPIJob" and m["spec"]["slotsPerWorker"] == 8
    launcher = m["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"]
    assert launcher[:4] == ["mpirun", "--allow-run-as-root", "-np", "32"]
    assert launcher[-9:] == ["all_reduce_perf_mpi", "-b", "8", "-e", "8G", "-f", "2", "-g", "1"]
    worker = m["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    env = {e["name"]: e.get("value") for e in worker["spec"]["containers"][0]["env"]}
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_SUBSYS"] == "INIT,NET" and env["NCCL_ALGO"] == "Ring"
    # The same fabric wiring as any training pod on this cluster.
    platform = PlatformConfig.model_validate(stack_platform("prod-ib"))
    wiring = fabric.pod_wiring(platform.fabric, "training", 8, 8)
    assert worker["metadata"]["annotations"] == wiring.annotations
    limits = worker["spec"]["containers"][0]["resources"]["limits"]
    assert {k: limits[k] for k in wiring.resources} == wiring.resources
    assert worker["spec"]["initContainers"][0]["name"] == "preflight"
    assert m["metadata"]["annotations"][acceptance.FLOOR_ANNOTATION] == "360"


@pytest.mark.parametrize(("log", "code"), [("ib_gdr_linerate", 0), ("below_floor", 1), ("ib_no_gdr", 1),
                                           ("socket_fallback_with_networks", 1)])
def test_rendered_check_command_judges_real_logs(log, code):
    """The 2-node prod-ib check, as SUMMARY.md prints it, run on realistic 2 x 8 H100 logs."""
    (run,) = [r for r in plan_for("prod-ib", nodes=2) if r["nodes"] == 2]
    args = shlex.split(run["check"])
    assert args[:3] == ["python", "-m", "tools.ncclcheck"]
    res = subprocess.run([sys.executable, "-m", "tools.ncclcheck", str(LOGS / f"{log}.log"), *args[4:]], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == code, res.stdout


def test_acceptance_bigger_than_the_cluster_is_refused():
    p = stack_platform("prod-roce")
    p["acceptance"] = {"enabled": True, "scaling": [2, 32]}
    with pytest.raises(config.ConfigError, match=r"acceptance.scaling\[1\] is 32 but the cluster has 16 nodes"):
        config.parse({"platform": p}, "stacks/Pulumi.prod-roce.yaml")
