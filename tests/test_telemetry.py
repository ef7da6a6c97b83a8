"""Training-time telemetry (components/jobs/telemetry.py, components/platform/telemetry.py) on the committed prod
stacks: every GPU pod loads NCCL's Inspector plugin and serves its metrics, the PodMonitor finds them under the
job's name, and the rules name a slow rank or rail."""

import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from components.jobs import telemetry
from components.jobs.resolve import ROLE_LABEL
from components.model.config import MonitoringConfig
from components.platform import telemetry as platform_telemetry
from policies.podspecs import extract
from tests.posix_sh import DASH, needs_dash

PROD = ["prod-ib", "prod-roce", "prod-v2"]
IMAGE = "registry.example.internal/ml-platform/nccl-inspector:v2.30.7-1"


def gpu_pods(rendered, stack):
    for obj in rendered(stack).objects:
        if obj["kind"] == "TrainJob":
            continue  # its pods are its runtime's
        for t in extract(obj).templates:
            spec = t.template.get("spec", {})
            if "nvidia.com/gpu" in str(spec.get("containers")):
                yield obj, t


@pytest.mark.parametrize("stack", PROD)
def test_every_gpu_pod_loads_the_inspector_and_serves_its_metrics(rendered, stack):
    seen = 0
    for obj, t in gpu_pods(rendered, stack):
        spec, labels = t.template["spec"], t.template.get("metadata", {}).get("labels", {})
        inits = {c["name"]: c for c in spec.get("initContainers", [])}
        assert inits["nccl-inspector-plugin"]["image"] == IMAGE, obj["metadata"]["name"]
        assert inits["nccl-inspector-plugin"]["restartPolicy"] == "Always"
        sidecar = inits["nccl-metrics"]
        # A native sidecar: it does not keep a finished pod running, so the job still completes.
        assert sidecar["restartPolicy"] == "Always"
        assert {"name": telemetry.PORT_NAME, "containerPort": telemetry.PORT} in sidecar["ports"]
        for c in spec["containers"]:
            if "nvidia.com/gpu" not in str(c.get("resources")):
                continue
            env = {e["name"]: e.get("value") for e in c.get("env", [])}
            assert env["NCCL_INSPECTOR_ENABLE"] == "1" and env["NCCL_INSPECTOR_PROM_DUMP"] == "1"
            assert env["NCCL_PROFILER_PLUGIN"] == "/nccl-inspector/lib/libnccl-profiler-inspector.so"
            assert env["NCCL_INSPECTOR_DUMP_DIR"] == sidecar["command"][-2]
            # 30 s is the shortest dump interval the plugin takes with PROM_DUMP, and ENABLE and PROM_DUMP default to 0
            # (NVIDIA/nccl@v2.30.7-1:plugins/profiler/inspector/inspector.cc, its environment table and the dump
            # thread's minimum; plugins/profiler/inspector/README.md says the same).
            assert int(env["NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS"]) >= 30_000_000
        # The PodMonitor selects it by the role label.
        assert ROLE_LABEL in labels, obj["metadata"]["name"]
        seen += 1
    assert seen


@pytest.mark.parametrize("stack", ["prod-ib", "prod-v2"])
def test_mpi_ranks_get_the_inspector_variables(rendered, stack):
    """Ranks sshd or kubectl exec start do not all see their container's env: mpirun forwards them (-x)."""
    launches = []
    for obj in rendered(stack).objects:
        if obj["kind"] == "MPIJob":
            launches.append(obj["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"])
        if obj["kind"] == "TrainJob" and obj["spec"]["runtimeRef"]["name"].startswith("fastpath-mpi"):
            launches.append(obj["spec"]["trainer"]["command"])
    assert launches
    for command in launches:
        text = " ".join(command)
        # With their values: a v1 launcher has no Inspector of its own to forward them from.
        for name, value in telemetry.env().items():
            assert f"-x {name}={value}" in text, (name, text[:200])


@needs_dash
def test_a_missing_plugin_never_fails_the_pod(tmp_path):
    """Both are native sidecars (never fail their pod); the copy reports a missing plugin, marks that it tried (what
    the startup probe waits for) and stays."""
    (copy,) = [c for c in telemetry.init_containers(IMAGE) if c["name"] == "nccl-inspector-plugin"]
    assert copy["restartPolicy"] == "Always" and copy["startupProbe"]["exec"]["command"][-1].endswith("/lib/.tried")
    script = copy["command"][2].replace("while :; do sleep 3600; done", "exit 0")
    res = subprocess.run([DASH, "-c", script, str(tmp_path / "mnt")], capture_output=True, text=True, timeout=10)
    assert res.returncode == 0 and "no training-time telemetry" in res.stdout
    assert (tmp_path / "mnt" / "metrics").is_dir() and (tmp_path / "mnt" / "lib" / ".tried").exists()


def test_the_sidecar_serves_every_gpus_file_as_one_exposition(tmp_path):
    """inspector_prom.cc writes one file per GPU with the same HELP/TYPE lines: Prometheus refuses a repeated
    TYPE, so they come once."""
    head = "# HELP nccl_bus_bandwidth_gbs Bus bandwidth\n# TYPE nccl_bus_bandwidth_gbs gauge\n"
    for gpu, bw in (("GPU-aaa", 45.5), ("GPU-bbb", 21.0)):
        (tmp_path / f"nccl_inspector_metrics_{gpu}.prom").write_text(head + f'nccl_bus_bandwidth_gbs{{node="gpu-07",gpu="{gpu}",collective="AllReduce"}} {bw}\n')
    (tmp_path / "ignored.json").write_text("{}")
    import socket  # noqa: PLC0415

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-c", telemetry.PROGRAM.read_text(), str(tmp_path), str(port)])
    try:
        body = ""
        for _ in range(50):
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
                break
            except OSError:
                time.sleep(0.1)
        assert body.count("# TYPE nccl_bus_bandwidth_gbs gauge") == 1
        assert 'gpu="GPU-aaa"' in body and 'gpu="GPU-bbb"' in body and "{}" not in body
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=2)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize("stack", PROD)
def test_the_pod_monitor_and_rules_name_the_job_the_rank_and_the_rail(rendered, stack):
    objs = rendered(stack).objects
    monitors = [o for o in objs if o["kind"] == "PodMonitor"]
    (rule,) = [o for o in objs if o["kind"] == "PrometheusRule"]
    assert monitors and all(m["metadata"]["labels"]["release"] == "kube-prometheus-stack" for m in monitors)
    for m in monitors:
        (endpoint,) = m["spec"]["podMetricsEndpoints"]
        assert endpoint["port"] == telemetry.PORT_NAME
        (relabel,) = endpoint["relabelings"]
        # v1 pods carry fastpath.dev/job, v2 pods their JobSet's name: one of the two is set, the other empty.
        assert relabel["separator"] == "" and relabel["targetLabel"] == platform_telemetry.JOB_LABEL_OUT
    rules = rule["spec"]["groups"][0]["rules"]
    alerts = {r["alert"]: r for r in rules if "alert" in r}
    assert set(alerts) == {"FastpathNcclSlowRank", "FastpathRailSlow", "FastpathRailDown", "FastpathGpuXid"}
    assert "{{ $labels.node }} GPU {{ $labels.gpu }}" in alerts["FastpathNcclSlowRank"]["annotations"]["description"]
    # Every series a recording rule reads is one the Inspector, node-exporter or DCGM exports.
    exprs = " ".join(r["expr"] for r in rules)
    for metric in ("nccl_bus_bandwidth_gbs", "node_infiniband_port_data_transmitted_bytes_total", "node_infiniband_state_id"):
        assert metric in exprs


def test_an_inspector_image_without_monitoring_is_refused():
    with pytest.raises(ValueError, match="monitoring.enabled is false"):
        MonitoringConfig(ncclInspectorImage=IMAGE)
    with pytest.raises(ValueError, match="ncclInspectorImage"):
        MonitoringConfig(enabled=True, ncclInspectorImage="nccl-inspector:latest")


def test_the_program_needs_only_the_standard_library():
    import ast  # noqa: PLC0415

    tree = ast.parse(Path(telemetry.PROGRAM).read_text())
    modules = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert modules <= set(sys.stdlib_module_names)


def test_the_copy_does_not_hide_the_plugin_it_copies():
    """The shared volume mounted over /nccl-inspector in the copying container would hide the image's own file."""
    (copy,) = [c for c in telemetry.init_containers(IMAGE) if c["name"] == "nccl-inspector-plugin"]
    for m in copy["volumeMounts"]:
        assert not telemetry.PLUGIN_IN_IMAGE.startswith(m["mountPath"].rstrip("/") + "/"), m


def test_a_file_mid_rewrite_is_served_as_it_last_was(tmp_path):
    """The plugin truncates its file and writes it again bucket by bucket: a scrape in between keeps the series."""
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.spec_from_file_location("nccl_metrics_under_test", telemetry.PROGRAM)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    f = tmp_path / "nccl_inspector_metrics_GPU-aaa.prom"
    full = 'nccl_bus_bandwidth_gbs{gpu="GPU-aaa",collective="AllReduce"} 45\nnccl_bus_bandwidth_gbs{gpu="GPU-aaa",collective="AllGather"} 40\n'
    f.write_text(full)
    assert module.collect(str(tmp_path)).decode() == full
    for partial in ("", full.splitlines()[0] + "\n", full[:30]):
        f.write_text(partial)
        assert module.collect(str(tmp_path)).decode() == full, partial
    f.unlink()
    assert module.collect(str(tmp_path)) == b""


@pytest.mark.parametrize("stack", PROD)
def test_every_rule_is_promql_the_operator_accepts(rendered, stack):
    """prometheus-operator@v0.93.0:pkg/admission/admission.go validates each rule's expression: one that does not
    parse denies the PrometheusRule (and without the webhook the operator drops the whole object)."""
    import promql_parser  # noqa: PLC0415

    (rule,) = [o for o in rendered(stack).objects if o["kind"] == "PrometheusRule"]
    for r in rule["spec"]["groups"][0]["rules"]:
        promql_parser.parse(r["expr"])
    with pytest.raises(ValueError):
        promql_parser.parse("x < 0.5 * on (instance) group_left quantile by (instance) (0.5, x)")


def test_a_rank_is_compared_within_its_communicator(rendered):
    (rule,) = [o for o in rendered("prod-ib").objects if o["kind"] == "PrometheusRule"]
    median = next(r for r in rule["spec"]["groups"][0]["rules"] if r.get("record", "").endswith(":median"))
    assert "comm_name" in median["expr"]


# The series the rules read, as upstream writes them: NVIDIA/nccl@v2.30.7-1:plugins/profiler/inspector/
# inspector_prom.cc (the gauge and its comm_name, collective and message_size labels), prometheus/node_exporter@
# v1.12.1:collector/infiniband_linux.go (node_infiniband_*, labels device and port), NVIDIA/dcgm-exporter@
# 4.5.3-4.8.2:etc/default-counters.csv (DCGM_FI_DEV_XID_ERRORS).
UPSTREAM_SERIES = {
    "nccl_bus_bandwidth_gbs": {"comm_name", "collective", "message_size", "node", "gpu"},
    "node_infiniband_port_data_transmitted_bytes_total": {"device", "port"},
    "node_infiniband_state_id": {"device", "port"},
    "node_infiniband_link_downed_total": {"device", "port"},
    "DCGM_FI_DEV_XID_ERRORS": {"gpu"},
}


@pytest.mark.parametrize("stack", PROD)
def test_the_rules_read_series_and_labels_upstream_writes(rendered, stack):
    """Every metric a rule reads is one of those, and every label it groups or matches on is one that metric
    carries (or one the rules or the PodMonitor add): a renamed metric or label would make an alert that never
    fires."""
    import promql_parser  # noqa: PLC0415

    (rule,) = [o for o in rendered(stack).objects if o["kind"] == "PrometheusRule"]
    rules = rule["spec"]["groups"][0]["rules"]
    ours = {r["record"] for r in rules if "record" in r}
    for r in rules:
        metrics = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*(?=\s*[{\[)]|\s*$|\s*[<>!=*/+-])", r["expr"]))
        read = {m for m in metrics if m in UPSTREAM_SERIES or m in ours}
        assert read, r["expr"]
        promql_parser.parse(r["expr"])
        known = set().union(*(UPSTREAM_SERIES.get(m, set()) for m in read)) | {"namespace", "instance", platform_telemetry.JOB_LABEL_OUT}
        grouped = [x.strip() for group in re.findall(r"(?:by|on) \(([^)]*)\)", r["expr"]) for x in group.split(",")]
        matched = re.findall(r"[{,]\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", r["expr"])
        for name in [n for n in grouped + matched if n]:
            assert name in known, (name, r["expr"])
