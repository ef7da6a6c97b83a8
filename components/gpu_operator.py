"""NVIDIA GPU Operator: driver, container toolkit, device plugin, DCGM exporter, GPUDirect RDMA."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from components import k8s, versions
from components.config import PlatformConfig

NAMESPACE = "gpu-operator"
COMPONENT = "gpu-operator"


def values(platform: PlatformConfig) -> dict:
    """Helm values for nvidia/gpu-operator.

    GPUDirect RDMA: DMA-BUF (default) needs no rdma flag at all; `driver.rdma.enabled` is only the legacy
    nvidia-peermem path, and `driver.rdma.useHostMofed` tells the driver that MOFED lives on the host.
    Exactly one node-feature-discovery runs in a cluster: this chart's, while the GPU Operator is installed.
    """
    gpu = platform.gpu
    driver: dict = {"enabled": not gpu.driver_preinstalled}
    rdma: dict = {}
    if gpu.gpu_direct == "peermem":
        rdma["enabled"] = True
    if gpu.host_mofed and gpu.gpu_direct != "none":
        rdma["useHostMofed"] = True
    if rdma:
        driver["rdma"] = rdma
    return {
        "driver": driver,
        "nfd": {"enabled": True},
        "dcgmExporter": {"enabled": True, "serviceMonitor": {"enabled": platform.monitoring}},
    }


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
            self, p.cluster, COMPONENT, NAMESPACE, "privileged",
            "driver and toolkit DaemonSets load kernel modules and mount host paths",
            "gpu-operator", versions.GPU_OPERATOR_CHART, versions.GPU_OPERATOR_REPO, p.versions.gpu_operator, values(p))
        self.register_outputs({"namespace": NAMESPACE})
