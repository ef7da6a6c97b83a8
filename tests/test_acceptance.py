"""Fabric acceptance: the nccl-tests job is wired like a training job, and its check command is the contract."""

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from components.fabric import wiring as fabric
from components.jobs import acceptance
from components.jobs.launch import LAUNCHER
from components.model import config, stack
from components.model.config import AcceptanceConfig, FabricConfig, PlatformConfig
from components.model.profile import profile as make_profile
from tests.conftest import ROOT, stack_platform

LOGS = Path(__file__).parent / "ncclcheck"


def plan_for(stack: str, **acc) -> tuple[dict, list[dict]]:
    p = stack_platform(stack)
    p["acceptance"] = {"enabled": True, **acc}
    platform = PlatformConfig.model_validate(p)
    return acceptance.plan(platform.acceptance, make_profile(platform))


@pytest.mark.parametrize(
    ("stack", "acc", "floor", "warn"),
    [
        ("prod-ib", {}, 300.0, 368.0),  # 8 x 400G: fail under 0.75 of line rate, warn under 0.92 (46 GB/s per NIC)
        ("prod-ib", {"efficiency": 0.8}, 320.0, 368.0),
        ("prod-roce", {}, 37.5, 46.0),  # 2 x 200G
        ("prod-roce", {"minBusbwGbps": 40}, 40.0, 46.0),
    ],
)
def test_floor_and_warn_band_from_rails_speed_and_efficiency(stack, acc, floor, warn):
    p = PlatformConfig.model_validate({**stack_platform(stack), "acceptance": acc})
    assert acceptance.floor_gbps(p.acceptance, p.fabric) == floor
    assert acceptance.warn_gbps(p.acceptance, p.fabric) == warn


def test_tcp_has_no_derived_floor():
    assert acceptance.floor_gbps(AcceptanceConfig(), FabricConfig(kind="tcp")) is None


def test_warn_band_below_the_floor_is_refused():
    with pytest.raises(ValueError, match="warnEfficiency .* is below acceptance.efficiency"):
        AcceptanceConfig(efficiency=0.9, warn_efficiency=0.8)


@pytest.mark.parametrize(("product", "floor"), [("NVIDIA-H100-80GB-HBM3", 300.0), ("NVIDIA-A100-SXM4-80GB", 150.0), ("NVIDIA-L4", None)])
def test_one_node_run_has_an_nvlink_floor_where_one_is_known(product, floor):
    assert acceptance.nvlink_floor_gbps(AcceptanceConfig(), product) == floor


def test_series_runs_one_size_at_a_time_in_one_job():
    m, runs = plan_for("prod-ib", nodes=4, scaling=[1, 2, 8])
    assert [(r["nodes"], r["ranks"], r["expect"], r["minBusbwGbps"]) for r in runs] == [(1, 8, "local", 300.0), (2, 16, "ib", 300.0), (4, 32, "ib", 300.0), (8, 64, "ib", 300.0)]
    assert m["kind"] == "MPIJob" and m["metadata"]["name"] == "nccl-acceptance"
    assert m["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 8 and m["spec"]["slotsPerWorker"] == 8
    assert m["spec"]["runPolicy"]["schedulingPolicy"]["queue"] == acceptance.QUEUE
    launcher = m["spec"]["mpiReplicaSpecs"]["Launcher"]
    assert launcher["restartPolicy"] == "Never"  # a failed run is a verdict, and its log stays
    cmd = launcher["template"]["spec"]["containers"][0]["command"]
    assert cmd[:4] == ["sh", "-c", LAUNCHER, "launcher"] and cmd[4:6] == ["sh", "-c"]
    env = {e["name"]: e.get("value") for e in launcher["template"]["spec"]["containers"][0]["env"]}
    assert env["FASTPATH_MAX_RESTARTS"] == "0"  # a failed run is not retried
    script = cmd[6].splitlines()
    mpiruns = [shlex.split(line.removesuffix(" || status=1")) for line in script if line.startswith("mpirun")]
    assert [c[c.index("-np") + 1] for c in mpiruns] == ["8", "16", "32", "64"]  # sequential, smallest first
    assert mpiruns[1][mpiruns[1].index("-H") + 1] == "nccl-acceptance-worker-0:8,nccl-acceptance-worker-1:8"
    assert "NCCL_ALGO=Ring" not in mpiruns[0] and "NCCL_ALGO=Ring" in mpiruns[1]
    assert all(c[-9:] == ["all_reduce_perf_mpi", "-b", "8", "-e", "8G", "-f", "2", "-g", "1"] for c in mpiruns)
    assert script[1] == "echo 'fastpath-acceptance: begin 1 nodes'" and script[-1] == "exit $status"
    worker = m["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    env = {e["name"]: e.get("value") for e in worker["spec"]["containers"][0]["env"]}
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_SUBSYS"] == "INIT,NET"
    # The same fabric wiring as any training pod on this cluster.
    platform = PlatformConfig.model_validate(stack_platform("prod-ib"))
    wiring = fabric.pod_wiring(platform.fabric, "training", 8, 8)
    assert worker["metadata"]["annotations"] == wiring.annotations
    limits = worker["spec"]["containers"][0]["resources"]["limits"]
    assert {k: limits[k] for k in wiring.resources} == wiring.resources
    assert worker["spec"]["initContainers"][0]["name"] == "preflight"


def test_acceptance_queue_is_capped_at_the_largest_run():
    p = PlatformConfig.model_validate({**stack_platform("prod-ib"), "acceptance": {"enabled": True, "nodes": 4}})
    q = acceptance.queue(p.acceptance, make_profile(p))
    assert q["metadata"]["name"] == acceptance.QUEUE
    assert q["spec"]["capability"] == {"nvidia.com/gpu": 32} and q["spec"]["reclaimable"] is False


# What each process prints once it loaded the Inspector (NVIDIA/nccl@v2.30.7-1:src/plugin/profiler/profiler_v5.cc),
# and each rank once the Inspector set up its communicator (plugins/profiler/inspector/inspector_plugin.cc): prod-ib's
# acceptance pods load it (monitoring.ncclInspectorImage), so their checks ask for it (--profiler).
INSPECTOR_LOADED = "PROFILER/Plugin: Loaded Inspector (v5)"


def with_plugin(text: str, plugin_line: str | None) -> str:
    """`text` with `plugin_line` after each process's `Using network` line, and the Inspector's line after each
    rank's Init START once it loaded, as NCCL prints them at init."""
    if plugin_line is None:
        return text
    text = re.sub(r"^(.* NCCL INFO )Using network .*$", lambda m: f"{m.group(0)}\n{m.group(1)}{plugin_line}", text, flags=re.M)
    if plugin_line != INSPECTOR_LOADED:
        return text
    return re.sub(
        r"^(.* NCCL INFO ).* rank (\d+) nranks (\d+) .* - Init START$",
        lambda m: f"{m.group(0)}\n{m.group(1)}PROFILER/Plugin: init commName:  commHash: 42 nranks: {m.group(3)} rank: {m.group(2)}",
        text,
        flags=re.M,
    )


def section_log(tmp_path: Path, runs: dict[int, str], plugin_line: str | None = INSPECTOR_LOADED) -> Path:
    text = "".join(f"fastpath-acceptance: begin {n} nodes\n{with_plugin((LOGS / f'{log}.log').read_text(), plugin_line)}\nfastpath-acceptance: end {n} nodes\n" for n, log in runs.items())
    out = tmp_path / "nccl-acceptance.log"
    out.write_text(text)
    return out


@pytest.mark.parametrize(
    ("log", "code", "verdict"), [("ib_gdr_linerate", 0, "pass"), ("below_floor", 1, "fail"), ("ib_no_gdr", 1, "fail"), ("socket_fallback_with_networks", 1, "fail"), ("warn_band", 0, "warn")]
)
def test_rendered_check_command_judges_real_logs(tmp_path, log, code, verdict):
    """The 2-node prod-ib check, as SUMMARY.md prints it, on a launcher log holding a 1-node run and then the
    2-node run (realistic 2 x 8 H100 output)."""
    _, runs = plan_for("prod-ib", nodes=2, scaling=[1])
    (run,) = [r for r in runs if r["nodes"] == 2]
    args = shlex.split(run["check"])
    assert args[:3] == ["python", "-m", "tools.ncclcheck"] and args[4:6] == ["--section", "2"]
    path = section_log(tmp_path, {1: "ib_gdr_linerate", 2: log})
    res = subprocess.run([sys.executable, "-m", "tools.ncclcheck", str(path), *args[4:]], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == code, res.stdout
    assert f"verdict: {verdict}" in res.stdout


def test_check_of_a_run_missing_from_the_log_says_so(tmp_path):
    path = section_log(tmp_path, {1: "ib_gdr_linerate"})
    res = subprocess.run([sys.executable, "-m", "tools.ncclcheck", str(path), "--section", "4"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and "no 4-node run in this log" in res.stdout


def test_acceptance_bigger_than_the_cluster_is_refused():
    p = stack_platform("prod-roce")
    p["acceptance"] = {"enabled": True, "scaling": [2, 32]}
    with pytest.raises(config.ConfigError, match=r"acceptance.scaling\[1\] is 32 but the cluster has 16 nodes"):
        stack.parse({"platform": p}, "stacks/Pulumi.prod-roce.yaml")


@pytest.mark.parametrize(("pod_interface", "code"), [("eth0", 0), ("bond0", 1)])
def test_host_network_check_names_the_bootstrap_interface(tmp_path, pod_interface, code):
    """On the host network fabric.podInterface is the node's own; the check command holds NCCL to it, and a log
    whose NET/IB line bootstrapped elsewhere (here eth0) fails instead of passing on bandwidth alone."""
    p = stack_platform("prod-ib")
    p["fabric"] = {**p["fabric"], "attachment": "hostnetwork", "podInterface": pod_interface}
    p["fabric"].pop("sriovMaxUnavailable", None)
    for rail in p["fabric"]["rails"]:
        rail.pop("rootDevices", None)
        rail.setdefault("interface", f"ib{p['fabric']['rails'].index(rail)}")
    p["acceptance"] = {"enabled": True, "nodes": 2, "scaling": [1]}
    _, runs = acceptance.plan(PlatformConfig.model_validate(p).acceptance, make_profile(PlatformConfig.model_validate(p)))
    (run,) = [r for r in runs if r["nodes"] == 2]
    args = shlex.split(run["check"])
    assert args[args.index("--bootstrap") + 1] == pod_interface
    path = section_log(tmp_path, {1: "ib_gdr_linerate", 2: "ib_gdr_linerate"})
    res = subprocess.run([sys.executable, "-m", "tools.ncclcheck", str(path), *args[4:]], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == code, res.stdout
    if code:
        assert "names bond0 but NCCL used eth0" in res.stdout


@pytest.mark.parametrize(("stack", "rails", "pairwise_stage"), [("prod-ib", 8, False), ("prod-roce", 2, True), ("prod-v2", 8, True)])
def test_acceptance_measures_each_rail_first_and_counts_the_rails(rendered, stack, rails, pairwise_stage):
    """Before the series, each rail of each node alone (components/jobs/pairwise.py, read by tools.pairwise), where
    the pods know their HCA names (not SR-IOV VFs); every multi-node section is checked for the profile's rail count
    (tools.ncclcheck --rails), so a run on 7 of 8 rails fails."""
    (job,) = [o for o in rendered(stack).objects if o["metadata"].get("name") == "nccl-acceptance" and o["kind"] in ("MPIJob", "TrainJob")]
    checks = job["metadata"]["annotations"]["fastpath.dev/check"].split("; ")
    multi = [c for c in checks if "tools.ncclcheck" in c and "--expect local" not in c]
    assert multi and all(f"--rails {rails}" in c for c in multi)
    series = json.dumps(job["spec"])
    assert ("fastpath-pairwise: begin" in series) == pairwise_stage
    assert any("tools.pairwise" in c for c in checks) == pairwise_stage
    if pairwise_stage:
        assert checks[0].startswith("python -m tools.pairwise nccl-acceptance.log --floor ")


@pytest.mark.parametrize(
    ("plugin_line", "code", "reason"),
    [
        (INSPECTOR_LOADED, 0, None),
        # The Inspector on a training image whose NCCL predates profiler interface v5 (NVIDIA/nccl@v2.27.7-1:
        # src/plugin/profiler.cc looks up v4..v1): the job would train with no metrics and no error.
        ("PROFILER/Plugin: failed to find ncclProfiler_v1.", 1, "NCCL 2.27.7 loads profiler interfaces v1-v4 only"),
        ("PROFILER/Plugin: Could not find: /nccl-inspector/lib/libnccl-profiler-inspector.so. ", 1, "could not find the profiler plugin"),
        ("PROFILER/Plugin: Could not find: libnccl-profiler.so. ", 1, "was given no profiler plugin"),
    ],
)
def test_acceptance_with_telemetry_fails_when_a_rank_did_not_load_the_inspector(tmp_path, plugin_line, code, reason):
    """A stack with telemetry (prod-ib) has every acceptance run check that each rank loaded the Inspector: the
    training image's NCCL, the plugin's build and the launcher's env decide it, and none of them shows in the render."""
    _, runs = plan_for("prod-ib", nodes=2, scaling=[1])
    (run,) = [r for r in runs if r["nodes"] == 2]
    args = shlex.split(run["check"])
    assert "--profiler" in args
    path = section_log(tmp_path, {1: "ib_gdr_linerate", 2: "ib_gdr_linerate"}, plugin_line)
    res = subprocess.run([sys.executable, "-m", "tools.ncclcheck", str(path), *args[4:]], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == code, res.stdout
    if reason:
        assert "telemetry: " in res.stdout and reason in res.stdout


@pytest.mark.parametrize("stack", ["prod-ib", "prod-roce", "prod-v2", "prod-airgap", "prod-kueue", "prod-dra", "prod-gb200"])
def test_every_acceptance_check_asks_for_the_profiler_exactly_where_its_pods_load_one(rendered, stack):
    r = rendered(stack)
    (job,) = [o for o in r.objects if o["metadata"].get("name") == "nccl-acceptance" and o["kind"] in ("MPIJob", "TrainJob")]
    runtimes = [o for o in r.objects if o["kind"] in ("ClusterTrainingRuntime", "TrainingRuntime")]
    loads = "NCCL_PROFILER_PLUGIN" in json.dumps(job) + json.dumps(runtimes)
    checks = [c for c in job["metadata"]["annotations"]["fastpath.dev/check"].split("; ") if "tools.ncclcheck" in c]
    assert checks and {("--profiler" in shlex.split(c)) for c in checks} == {loads}
