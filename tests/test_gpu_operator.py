"""GPU Operator (components/platform/gpu_operator.py): its Helm values."""

import pytest
import yaml

from components import versions
from components.model import stack
from components.platform import gpu_operator
from tests.helpers import DEDICATED, GPU_TAINT, cfg, stack_raw
from tools import render, upstream

CONTROL_PLANE = {"key": "node-role.kubernetes.io/control-plane", "operator": "Equal", "value": "", "effect": "NoSchedule"}
QUARANTINED = {"key": "fastpath.dev/quarantined", "operator": "Exists", "effect": "NoSchedule"}
KPS_MONITOR = {"serviceMonitor": {"enabled": True, "additionalLabels": {"release": "kube-prometheus-stack"}}}
# A managed driver's upgrades wait for the training pods on a node (tests/test_day2.py).
WAITS = {"waitForCompletion": {"podSelector": "fastpath.dev/role"}}
# (id, config changes, exact gpu-operator values); prod-ib is a DGX stack: driver and DOCA-OFED on the hosts.
GPU_CASES = [
    (
        "dmabuf-operator-driver",
        {"gpu__driverPreinstalled": False, "gpu__hostMofed": False},
        {"driver": {"enabled": True, "upgradePolicy": WAITS}, "nfd": {"enabled": True}, "dcgmExporter": KPS_MONITOR},
    ),
    (
        "peermem-legacy",
        {"gpu__gpuDirect": "peermem", "gpu__driverPreinstalled": False, "gpu__hostMofed": False},
        {"driver": {"enabled": True, "upgradePolicy": WAITS, "rdma": {"enabled": True}}, "nfd": {"enabled": True}, "dcgmExporter": KPS_MONITOR},
    ),
    # useHostMofed is read only on the peermem path: under DMA-BUF it would say something it does not do.
    ("host-mofed-dmabuf", {}, {"driver": {"enabled": False}, "nfd": {"enabled": True}, "dcgmExporter": KPS_MONITOR}),
    ("host-mofed-peermem", {"gpu__gpuDirect": "peermem"}, {"driver": {"enabled": False, "rdma": {"enabled": True, "useHostMofed": True}}, "nfd": {"enabled": True}, "dcgmExporter": KPS_MONITOR}),
    # NVSentinel reads GPU health from the operator's standalone hostengine (gpu-operator@v26.7.0 dcgm.enabled,
    # false by default: the exporter embeds its own).
    # With health the operands also tolerate the quarantine taint (k8s.QUARANTINE_TAINT), or a rollout would leave a
    # quarantined node without them; the chart's own nvidia.com/gpu toleration repeated (Helm replaces the list).
    (
        "health",
        {"health__enabled": True},
        {
            "driver": {"enabled": False},
            "nfd": {"enabled": True},
            "daemonsets": {"tolerations": [GPU_TAINT, QUARANTINED]},
            "node-feature-discovery": {"worker": {"tolerations": [CONTROL_PLANE, GPU_TAINT, QUARANTINED]}},
            "dcgm": {"enabled": True},
            "dcgmExporter": KPS_MONITOR,
        },
    ),
    ("no-monitoring", {"monitoring": False}, {"driver": {"enabled": False}, "nfd": {"enabled": True}, "dcgmExporter": {"serviceMonitor": {"enabled": False}}}),
    (
        "monitoring-labels",
        {"monitoring": {"enabled": True, "serviceMonitorLabels": {"release": "kps"}}},
        {"driver": {"enabled": False}, "nfd": {"enabled": True}, "dcgmExporter": {"serviceMonitor": {"enabled": True, "additionalLabels": {"release": "kps"}}}},
    ),
    ("monitoring-bool", {"monitoring": True}, {"driver": {"enabled": False}, "nfd": {"enabled": True}, "dcgmExporter": {"serviceMonitor": {"enabled": True}}}),
    (
        "custom-taint",
        {"gpu__taintKey": "dedicated"},
        {
            "driver": {"enabled": False},
            "nfd": {"enabled": True},
            "daemonsets": {"tolerations": [GPU_TAINT, DEDICATED]},
            "node-feature-discovery": {"worker": {"tolerations": [CONTROL_PLANE, GPU_TAINT, DEDICATED]}},
            "dcgmExporter": KPS_MONITOR,
        },
    ),
]


@pytest.mark.parametrize(("changes", "expected"), [c[1:] for c in GPU_CASES], ids=[c[0] for c in GPU_CASES])
def test_gpu_operator_values(changes, expected):
    """gpu-operator@v26.7.0: `IsHostMOFED()` (api/nvidia/v1/clusterpolicy_types.go) is `IsEnabled() &&
    UseHostMOFED`, so useHostMofed goes only with rdma.enabled (peermem). `daemonsets.tolerations` replaces each
    operand DaemonSet's tolerations (controllers/object_controls.go `applyCommonDaemonsetConfig`) and Helm
    replaces list values, so a custom taint comes with the defaults of deployments/gpu-operator/values.yaml
    (`daemonsets.tolerations`, `node-feature-discovery.worker.tolerations`) repeated. The DCGM ServiceMonitor
    takes `additionalLabels` (same values.yaml, `dcgmExporter.serviceMonitor`)."""
    assert gpu_operator.values(cfg("prod-ib", **{"health__enabled": False, **changes})) == expected


def test_every_stacks_driver_runs_the_job_images_cuda():
    """The job image (versions.JOB_IMAGE, NGC PyTorch 25.10) is built on CUDA 13.0.2, which NVIDIA pairs with driver
    580.95.05 (Triton's compatibility table, the nv25.10 torch build): CUDA 13 runs on the R580 branch and later. The
    driver each committed stack's nodes run must be of that branch or later, or its jobs fail at CUDA init: the
    precompiled branch it names, the driver it states its hosts run, or the GPU Operator's default
    (NVIDIA/gpu-operator@v26.7.0:deployments/gpu-operator/values.yaml driver.version)."""
    assert versions.JOB_IMAGE == "nvcr.io/nvidia/pytorch:25.10-py3"  # the release the floor was read for
    stated, on_default = {}, []
    for name in render.stack_names():
        gpu = stack.parse(stack_raw(name), f"stacks/Pulumi.{name}.yaml").platform.gpu
        if gpu.precompiled_driver is not None:
            stated[name] = gpu.precompiled_driver.branch
        elif gpu.nvlink_domain is not None:
            stated[name] = gpu.nvlink_domain.driver_version
        elif not gpu.driver_preinstalled:  # else the hosts' own, which the stack does not state
            on_default.append(name)
    assert len(stated) + len(on_default) >= 3  # dev, prod-roce, prod-gb200
    for name, driver in stated.items():
        assert int(driver.split(".")[0]) >= 580, (name, driver)
    # The chart's default last: without the upstream file only this part is skipped.
    default = yaml.safe_load(upstream.path("values/gpu-operator.values.yaml").read_text())["driver"]["version"]
    assert int(default.split(".")[0]) >= 580, (on_default, default)
