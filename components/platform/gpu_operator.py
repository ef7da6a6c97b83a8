"""NVIDIA GPU Operator: driver, container toolkit, device plugin, DCGM exporter, GPUDirect RDMA."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from components import k8s, versions
from components.jobs.resolve import TRAINING_POD_SELECTOR
from components.model.config import PlatformConfig
from components.platform import mirrors, placement

NAMESPACE = "gpu-operator"
COMPONENT = "gpu-operator"


# The chart's default for a list we extend (Helm replaces a list value wholesale, so ours must repeat it):
# gpu-operator@v26.7.0:deployments/gpu-operator/values.yaml `node-feature-discovery.worker.tolerations`.
_CONTROL_PLANE = {
    "key": "node-role.kubernetes.io/control-plane",
    "operator": "Equal",
    "value": "",
    "effect": "NoSchedule",
}


# The chart's driver.upgradePolicy.maxParallelUpgrades (gpu-operator@v26.7.0:deployments/gpu-operator/values.yaml).
DRIVER_UPGRADES_AT_ONCE = 1


def values(platform: PlatformConfig) -> dict:
    """Helm values for nvidia/gpu-operator; only what differs from the chart's defaults, each for a reason.

    - GPUDirect RDMA: DMA-BUF (default) needs no rdma value at all. `driver.rdma.enabled` is the legacy
      nvidia-peermem path, and `driver.rdma.useHostMofed` is read only on that path (gpu-operator@v26.7.0
      `IsHostMOFED()` is gated on rdma enabled), so it is set only with peermem.
    - A custom GPU taint (`gpu.taintKey`) must reach every operand DaemonSet and NFD's worker, or the driver,
      device plugin and NFD never run on the GPU nodes.
    - Exactly one node-feature-discovery runs in a cluster: this chart's. Its default PCI whitelist (classes
      02/0200/0207, vendor field) already labels Mellanox NICs `feature.node.kubernetes.io/pci-15b3.present`.
    """
    gpu = platform.gpu
    # Pinned (the chart's default is true): fastpath's gpu.driverPreinstalled decides, in both directions.
    v: dict = {"driver": {"enabled": not gpu.driver_preinstalled}}
    if not gpu.driver_preinstalled:
        # A driver upgrade (a chart bump moves the driver version) cordons a node and, before it evicts the GPU
        # pods, waits for the pods this selector matches on it: every training pod fastpath makes carries the role
        # label, so a running gang is never hit; the node just takes no new pod meanwhile. The chart's
        # timeoutSeconds 0 waits for as long as the run lasts (NVIDIA/gpu-operator@v26.7.0: vendor/github.com/
        # NVIDIA/k8s-operator-libs/pkg/upgrade/common_manager.go ProcessWaitForJobsRequiredNodes, pod_manager.go).
        # The rest of the policy keeps the chart's defaults: autoUpgrade, one node at a time, at most 25% down.
        v["driver"]["upgradePolicy"] = {"waitForCompletion": {"podSelector": TRAINING_POD_SELECTOR}}
    if gpu.precompiled_driver is not None:
        # NVIDIA/gpu-operator@v26.7.0:deployments/gpu-operator/values.yaml driver.usePrecompiled with driver.version
        # the branch: the operator picks `driver:<branch>-<kernel>-<os>` per node kernel (no build, no package
        # repositories: the path for disconnected clusters).
        v["driver"]["usePrecompiled"] = True
        v["driver"]["version"] = gpu.precompiled_driver.branch
    if gpu.gpu_direct == "peermem":
        v["driver"]["rdma"] = {"enabled": True, **({"useHostMofed": True} if gpu.host_mofed else {})}
    if platform.fabric.claims:
        # GPUs by DRA (components/platform/dra.py): NVIDIA's GPU DRA driver cannot share a node with the device
        # plugin (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:deployments/helm/dra-driver-nvidia-gpu/templates/
        # validation.yaml), so the operator runs none; GPU feature discovery (the product label) stays.
        v["devicePlugin"] = {"enabled": False}
    v["nfd"] = {"enabled": True}  # the chart's default, pinned: the network operator relies on this NFD
    if gpu.taint_key != k8s.DEFAULT_GPU_TAINT or platform.health.enabled:
        # The operator replaces each operand DaemonSet's tolerations with this list (applyCommonDaemonsetConfig);
        # with node health the operands also tolerate the quarantine taint, or a rollout would leave a quarantined
        # node without its driver, device plugin and DCGM (a DaemonSet makes no new pod on a node whose NoSchedule
        # taint it does not tolerate), and it would never report healthy again.
        tolerations = k8s.operand_tolerations(gpu.taint_key, platform.health.enabled)
        v["daemonsets"] = {"tolerations": tolerations}
        v["node-feature-discovery"] = {"worker": {"tolerations": [_CONTROL_PLANE, *tolerations]}}
    if platform.health.enabled:
        # NVSentinel's GPU monitor talks to a standalone DCGM hostengine (Service nvidia-dcgm, port 5555:
        # gpu-operator@v26.7.0:assets/state-dcgm/); the chart's default (false) embeds one in the exporter only.
        v["dcgm"] = {"enabled": True}
    mon = platform.monitoring
    # Pinned (the chart's default is true): fastpath's monitoring.enabled decides, in both directions.
    v["dcgmExporter"] = {"serviceMonitor": {"enabled": mon.enabled}}
    if mon.enabled and mon.service_monitor_labels:
        v["dcgmExporter"]["serviceMonitor"]["additionalLabels"] = dict(mon.service_monitor_labels)
    return k8s.merge_values(v, placement.site_values(versions.GPU_OPERATOR_CHART, platform))


@dataclass
class GpuOperatorArgs:
    platform: PlatformConfig


class GpuOperator(pulumi.ComponentResource):
    """Installs the NVIDIA GPU Operator (chart nvidia/gpu-operator, version pinned in components/versions.py)
    into a privileged `gpu-operator` namespace.

    Needs: a cluster whose GPU nodes the operator may label and run privileged DaemonSets on.

    Example:
        GpuOperator("gpu", GpuOperatorArgs(platform=cfg.platform), opts=pulumi.ResourceOptions(parent=p))
    """

    def __init__(self, name: str, args: GpuOperatorArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("fastpath:platform:GpuOperator", name, None, opts)
        p = args.platform
        self.namespace, self.release = k8s.operator_install(
            self,
            p.cluster,
            COMPONENT,
            NAMESPACE,
            "privileged",
            "driver and toolkit DaemonSets load kernel modules and mount host paths",
            "gpu-operator",
            *mirrors.chart_source(versions.GPU_OPERATOR_CHART, versions.GPU_OPERATOR_REPO, p.mirrors),
            p.versions.gpu_operator,
            values(p),
        )
        self.register_outputs({"namespace": NAMESPACE})
