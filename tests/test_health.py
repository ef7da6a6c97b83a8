"""Node health on the committed prod stacks: what NVSentinel (tests/nvsentinel_v119.py restates it) does with the
values fastpath renders, and what the job controllers then do with the pods of a sick or lost node (tests/
jobset_v012.py, tests/operator_v1.py). The chain each test walks: a health event, the quarantine it causes, the
drain, the gang's restart from its checkpoint on healthy nodes."""

from datetime import timedelta

import pytest

from components.jobs.runtime_v2.controller import effective_jobset
from components.model import config, stack
from components.model.config import PlatformConfig
from components.platform import health
from policies.podspecs import extract
from tests import jobset_v012 as js
from tests import nvsentinel_v119 as nvs
from tests import operator_v1 as op
from tests.conftest import stack_platform

PROD = ["prod-ib", "prod-roce", "prod-v2"]
NODE = {"metadata": {"name": "gpu-07", "labels": {"nvidia.com/gpu.present": "true"}}}


def nvsentinel_values(rendered, stack: str) -> dict:
    (pkg,) = [p for p in rendered(stack).packages if p["name"] == "nvsentinel"]
    return pkg["values"]


# (id, the health event a monitor publishes, quarantined?)
EVENTS = [
    ("gpu-dcgm-fatal", {"agent": "gpu-health-monitor", "componentClass": "GPU", "checkName": "GpuNvlinkWatch", "isFatal": True}, True),
    # The monitor's own link to the hostengine, down for seconds whenever the GPU Operator rolls DCGM: not the GPU.
    ("dcgm-connectivity", {"agent": "gpu-health-monitor", "componentClass": "GPU", "checkName": "GpuDcgmConnectivityFailure", "isFatal": True}, False),
    ("gpu-dcgm-warning", {"agent": "gpu-health-monitor", "componentClass": "GPU", "checkName": "GpuThermalWatch", "isFatal": False}, False),
    ("xid-79-fallen-off", {"agent": "syslog-health-monitor", "componentClass": "GPU", "checkName": "SysLogsXIDError", "isFatal": True}, True),
    ("rail-port-down", {"agent": "nic-health-monitor", "componentClass": "NIC", "checkName": "InfiniBandStateCheck", "isFatal": True}, True),
    ("rail-symbol-errors", {"agent": "nic-health-monitor", "componentClass": "NIC", "checkName": "InfiniBandDegradationCheck", "isFatal": False}, False),
    ("store-only", {"agent": "nic-health-monitor", "componentClass": "NIC", "checkName": "InfiniBandStateCheck", "isFatal": True, "processingStrategy": "STORE_ONLY"}, False),
]


@pytest.mark.parametrize("stack", PROD)
@pytest.mark.parametrize(("event", "quarantined"), [e[1:] for e in EVENTS], ids=[e[0] for e in EVENTS])
def test_a_fatal_fault_quarantines_the_node_with_the_taint_no_training_pod_tolerates(rendered, stack, event, quarantined):
    fq = nvsentinel_values(rendered, stack)["fault-quarantine"]
    cordoned, taints = nvs.quarantine(fq["ruleSets"], {"nodeName": "gpu-07", **event}, NODE)
    assert cordoned == quarantined and (taints == [health.QUARANTINE_TAINT]) == quarantined
    # A node its owner opted out (the chart's label) is never touched.
    opted_out = {"metadata": {"name": "gpu-07", "labels": {"nvsentinel.dgxc.nvidia.com/managed": "false"}}}
    assert nvs.quarantine(fq["ruleSets"], {"nodeName": "gpu-07", **event}, opted_out) == (False, [])


@pytest.mark.parametrize("stack", PROD)
def test_no_training_pod_lands_on_a_quarantined_node(rendered, stack):
    """Cordon and taint both: a replacement pod (a v1 worker the operator recreates, a v2 gang the JobSet
    recreates) goes to a healthy node, even if someone uncordons the sick one by hand."""
    sick = {"unschedulable": True, "taints": [health.QUARANTINE_TAINT]}
    uncordoned = {"taints": [health.QUARANTINE_TAINT]}
    healthy = {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}
    pods = 0
    for obj in rendered(stack).objects:
        if obj["kind"] == "TrainJob":
            continue  # its pods are its runtime's, checked as the ClusterTrainingRuntime
        for t in extract(obj).templates:
            spec = t.template.get("spec", {})
            if "nvidia.com/gpu" not in str(spec.get("containers")):
                continue
            pods += 1
            assert not nvs.schedulable(spec, sick) and not nvs.schedulable(spec, uncordoned), obj["metadata"]["name"]
            assert nvs.schedulable(spec, healthy), obj["metadata"]["name"]
    assert pods


@pytest.mark.parametrize("stack", PROD)
def test_training_pods_are_evicted_at_once_and_platform_pods_are_not(rendered, stack):
    nd = nvsentinel_values(rendered, stack)["node-drainer"]
    cfg = PlatformConfig.model_validate(stack_platform(stack))
    for ns in cfg.training_namespaces:
        assert nvs.drain_mode(nd, ns) == "Immediate"
    for ns in ("gpu-operator", "nvidia-network-operator", "volcano-system", "kubeflow", "kubeflow-system", "nvsentinel", "cert-manager", "kube-system", "fastpath-system"):
        assert nvs.drain_mode(nd, ns) is None, ns
    assert nvs.drain_mode(nd, "someone-elses") == "AllowCompletion"


@pytest.mark.parametrize("job", ["llama-pretrain", "ds-moe"])
def test_v2_gang_on_a_quarantined_node_restarts_without_spending_its_budget(rendered, job):
    """The drain evicts through the Eviction API: DisruptionTarget, the Job fails by its podFailurePolicy, and the
    JobSet restarts the whole gang (BlockingRecreate) without counting it against maxRestarts."""
    objs = rendered("prod-v2").objects
    tj = next(o for o in objs if o["kind"] == "TrainJob" and o["metadata"]["name"] == job)
    rt = next(o for o in objs if o["kind"] == "ClusterTrainingRuntime" and o["metadata"]["name"] == tj["spec"]["runtimeRef"]["name"])
    jobset = effective_jobset(tj, rt)["jobset"]
    for rj in jobset["replicatedJobs"]:
        failed = js.PodFailure(f"{job}-{rj['name']}-0-0", conditions=tuple(nvs.evicted_pod_conditions()), exit_code=143, container="node")
        reason, message = js.job_failure(rj["template"]["spec"], failed)
        assert js.failure_action(jobset, rj["name"], reason, message) == "RestartJobSetAndIgnoreMaxRestarts"


@pytest.mark.parametrize("stack", ["prod-ib", "prod-roce"])
def test_v1_pytorch_worker_on_a_quarantined_node_is_recreated_elsewhere(rendered, stack):
    """Evicted, torchrun's agent answers SIGTERM with 143; under ExitCode the operator deletes the pod and makes a
    new one (kubeflow/trainer@v1.9.4 IsRetryableExitCode), which the scheduler keeps off the quarantined node; the
    survivors' agents re-rendezvous with it on the job's store and resume from the checkpoint."""
    jobs = [o for o in rendered(stack).objects if o["kind"] == "PyTorchJob"]
    assert jobs
    for job in jobs:
        worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
        assert worker["restartPolicy"] == "ExitCode"
        pods = [op.Pod("Worker", "Running") for _ in range(worker["replicas"] - 1)] + [op.Pod("Worker", "Failed", exit_code=143)]
        assert op.pytorch_outcome(job, pods) == "recreated", job["metadata"]["name"]


@pytest.mark.parametrize("stack", PROD)
def test_a_lost_node_is_released_after_the_stacks_minutes_and_its_run_restarts(rendered, stack):
    """A node whose kubelet stopped posting is Ready Unknown: the object monitor fires after lostNodeMinutes, the
    lost-node rule set taints it out of service, and the pod GC then force-deletes the pods no kubelet confirms,
    which is what lets the Job (v2) or the operator (v1) replace them."""
    values = nvsentinel_values(rendered, stack)
    (policy,) = values["kubernetes-object-monitor"]["policies"]
    minutes = 10  # the stacks leave health.lostNodeMinutes at its default
    went = nvs.utc("2026-11-25T03:00:00Z")
    node = {
        "metadata": {"name": "gpu-07", "labels": {"nvidia.com/gpu.present": "true"}},
        "status": {"conditions": [{"type": "Ready", "status": "Unknown", "lastTransitionTime": "2026-11-25T03:00:00Z"}]},
    }
    # A lost CPU or storage node is not a gang's: its volumes are not force-detached by a rule made for GPU nodes.
    cpu_node = {"metadata": {"name": "cpu-01", "labels": {}}, "status": node["status"]}
    assert not nvs.policy_fires(policy, cpu_node, went + timedelta(hours=2))
    assert not nvs.policy_fires(policy, node, went + timedelta(minutes=minutes - 1))
    assert nvs.policy_fires(policy, node, went + timedelta(minutes=minutes + 1))
    # Ready False (the chart's own policy sees only this one) fires too; a Ready node never does.
    node["status"]["conditions"][0]["status"] = "False"
    assert nvs.policy_fires(policy, node, went + timedelta(minutes=minutes + 1))
    node["status"]["conditions"][0]["status"] = "True"
    assert not nvs.policy_fires(policy, node, went + timedelta(days=3))
    event = {"agent": "kubernetes-object-monitor", "checkName": policy["name"], "componentClass": "Node", "isFatal": True}
    cordoned, taints = nvs.quarantine(values["fault-quarantine"]["ruleSets"], event, NODE)
    assert cordoned and taints == [health.OUT_OF_SERVICE_TAINT]
    assert not js.pod_gc_ends(node_ready=False, taints=set())  # what holds the run without it
    assert js.pod_gc_ends(node_ready=False, taints={t["key"] for t in taints})


def test_the_circuit_breaker_stops_a_cluster_wide_cause(rendered):
    fq = nvsentinel_values(rendered, "prod-ib")["fault-quarantine"]
    assert fq["circuitBreaker"]["enabled"] is True
    assert nvs.breaker_threshold(32, fq["circuitBreaker"]["percentage"]) == 8  # prod-ib: 32 nodes at 25%


@pytest.mark.parametrize(("stack", "hcas", "checks"), [
    ("prod-ib", "^(mlx5_0|mlx5_3|mlx5_4|mlx5_5|mlx5_6|mlx5_9|mlx5_10|mlx5_11)$", health.NIC_CHECKS["InfiniBand"]),
    ("prod-roce", None, health.NIC_CHECKS["Ethernet"]),
])  # fmt: skip
def test_nic_health_watches_exactly_the_rails_and_their_link_layer(rendered, stack, hcas, checks):
    nic = nvsentinel_values(rendered, stack)["nic-health-monitor"]
    assert nic["enabledChecks"] == checks
    pattern = nic["nicInclusionRegexOverride"]
    import re  # noqa: PLC0415

    cfg = PlatformConfig.model_validate(stack_platform(stack))
    for rail in cfg.fabric.rails:
        assert re.search(pattern, rail.hca)
    if hcas:
        assert pattern == hcas
        assert not re.search(pattern, "mlx5_1") and not re.search(pattern, "mlx5_10x")  # storage port; a prefix


@pytest.mark.parametrize("stack", PROD)
def test_gpu_health_reads_the_gpu_operators_hostengine(rendered, stack):
    """NVIDIA/gpu-operator@v26.7.0:assets/state-dcgm/0500_service.yaml: with dcgm.enabled the operator serves its
    hostengine as Service nvidia-dcgm, port 5555, internalTrafficPolicy Local (each node's monitor reaches its own
    node's hostengine); the chart's dcgm.enabled is false (deployments/gpu-operator/values.yaml), so health turns it
    on."""
    values = nvsentinel_values(rendered, stack)
    assert values["global"]["dcgm"]["service"] == {"endpoint": "nvidia-dcgm.gpu-operator.svc", "port": 5555}
    (gpu_op,) = [p for p in rendered(stack).packages if p["name"] == "gpu-operator"]
    assert gpu_op["values"]["dcgm"] == {"enabled": True}


BAD = [
    ({"nodes": {"count": 4}}, {"enabled": True}, "trips NVSentinel's circuit breaker at the first quarantined node"),
    ({"components": {"gpuOperator": False}}, {"enabled": True}, "needs components.gpuOperator true"),
]


@pytest.mark.parametrize(("platform", "health_cfg", "needle"), BAD)
def test_health_settings_that_cannot_work_are_refused(platform, health_cfg, needle):
    base = stack_platform("prod-ib")
    for key, value in platform.items():
        base[key] = {**base.get(key, {}), **value} if isinstance(value, dict) else value
    base["health"] = health_cfg
    with pytest.raises(ValueError, match=needle):
        PlatformConfig.model_validate(base)


@pytest.mark.parametrize("stack", ["prod-ib", "prod-roce"])
def test_torchrun_survivors_wait_long_enough_for_a_lost_nodes_replacement(rendered, stack):
    """The operator makes no replacement while the lost node's pod is Terminating (a pod of that name exists); node
    health releases it after lostNodeMinutes, plus up to the object monitor's 5-minute resync, and the new pod still
    needs a node and its image. The survivors' rendezvous join timeout covers all of it, so the gang re-forms on a
    healthy node instead of failing just before the replacement arrives."""
    from components.jobs.operator_v1 import OBJECT_MONITOR_RESYNC  # noqa: PLC0415

    lost = 10 * 60  # health.lostNodeMinutes default
    for job in (o for o in rendered(stack).objects if o["kind"] == "PyTorchJob"):
        conf = {c["key"]: int(c["value"]) for c in job["spec"]["elasticPolicy"]["rdzvConf"] if c["key"] == "join_timeout"}
        assert conf["join_timeout"] >= lost + OBJECT_MONITOR_RESYNC + 300, job["metadata"]["name"]


@pytest.mark.parametrize("stack", PROD)
def test_platform_daemonsets_still_run_on_a_quarantined_node(rendered, stack):
    """A DaemonSet makes no new pod on a node whose NoSchedule taint it does not tolerate: without the toleration a
    rollout would leave a quarantined node without its driver, device plugin and DCGM, and it would never report
    healthy again. The GPU Operator's operands and NFD's worker tolerate it (daemonsets.tolerations), and so do the
    Network Operator's (NicClusterPolicy spec.tolerations, beside the nvidia.com/gpu they tolerate by themselves)."""
    sick = {"unschedulable": False, "taints": [health.QUARANTINE_TAINT, {"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}
    (gpu_op,) = [p for p in rendered(stack).packages if p["name"] == "gpu-operator"]
    assert nvs.schedulable({"tolerations": gpu_op["values"]["daemonsets"]["tolerations"]}, sick)
    assert nvs.schedulable({"tolerations": gpu_op["values"]["node-feature-discovery"]["worker"]["tolerations"]}, sick)
    for ncp in (o for o in rendered(stack).objects if o["kind"] == "NicClusterPolicy"):
        own = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        assert nvs.schedulable({"tolerations": [*own, *ncp["spec"]["tolerations"]]}, sick)


def test_the_datastore_takes_the_stacks_storage_class():
    """Without a default StorageClass the datastore's volumes stay Pending and the install times out: a stack
    names one, or the cluster's default serves (nothing set)."""
    base = stack_platform("prod-ib")
    assert "mongodb-store" not in health.values(PlatformConfig.model_validate(base))
    named = PlatformConfig.model_validate({**base, "health": {"enabled": True, "storageClass": "fast-rwo"}})
    assert health.values(named)["mongodb-store"] == {"mongodb": {"persistence": {"storageClass": "fast-rwo"}}}


@pytest.mark.parametrize(
    ("health", "kubernetes", "refused"),
    [
        ({"enabled": True}, "1.32", True),
        ({"enabled": True}, "1.33", False),
        ({"enabled": True}, None, False),  # not stated: not judged
        ({"enabled": True, "installCertManager": False}, "1.31", False),  # the cluster's own cert-manager
        ({"enabled": False}, "1.30", False),
    ],
)
def test_cert_manager_is_not_installed_on_a_kubernetes_it_does_not_support(health, kubernetes, refused):
    """cert-manager v1.21.1 supports Kubernetes 1.33-1.36: a stack that says its cluster is older is refused, naming
    the key and the way out, before anything is registered."""
    p = stack_platform("prod-ib")
    p["health"] = {**p.get("health", {}), **health}
    if kubernetes:
        p["kubernetesVersion"] = kubernetes
    if refused:
        with pytest.raises(config.ConfigError, match=r"health.installCertManager installs cert-manager v1.21.1, which supports Kubernetes 1.33 and later \(kubernetesVersion is 1.32\)"):
            stack.parse({"platform": p}, "stacks/Pulumi.prod-ib.yaml")
    else:
        stack.parse({"platform": p}, "stacks/Pulumi.prod-ib.yaml")
