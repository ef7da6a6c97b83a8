"""Dynamic Resource Allocation for the `dra` attachment: the drivers that publish a GPU node's GPUs and rail NICs as
devices, the DeviceClass that names the rails, and the whole-node claim template the Trainer v2 runtimes name.

- kubernetes-sigs/dranet (chart 1.4.0) on the GPU nodes: every NIC as a `dra.net` device with its PCIe root; an
  allocated NIC's netdev moves into the pod with its addresses, and only its RDMA character devices are added
  (pkg/driver/nri_hooks.go). It needs NRI on in containerd (README "On a real cluster").
- NVIDIA's GPU DRA driver (chart dra-driver-nvidia-gpu 0.4.1): with `dra` its GPU kubelet plugin on (it refuses to
  render beside the device plugin unless told, `gpuResourcesEnabledOverride`, and the GPU Operator then runs no
  device plugin: components/platform/gpu_operator.py) and ComputeDomains off; with multi-node NVLink
  (gpu.nvlinkDomain) ComputeDomains only, the GPUs staying the device plugin's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

from components import k8s, versions
from components.fabric import dra
from components.model.config import PlatformConfig
from components.platform import mirrors, placement

COMPONENT = "dra"
DRANET_NAMESPACE = "dranet"
GPU_NAMESPACE = "nvidia-dra-driver-gpu"


def dranet_values(platform: PlatformConfig) -> dict[str, Any]:
    """dranet on the GPU nodes only (its default tolerates every NoSchedule taint and runs everywhere), image
    pinned."""
    v = {
        "image": {"repository": versions.DRANET_IMAGE_REPOSITORY, "tag": versions.DRANET_IMAGE_TAG},
        "nodeSelector": {k8s.NFD_GPU_LABEL: "true"},
        # No cloud metadata probing at start on these nodes (cmd/dranet/app.go --cloud-provider-hint).
        "args": {"cloudProviderHint": "NONE"},
    }
    return k8s.merge_values(v, placement.site_values(versions.DRANET_CHART, platform))


def gpu_driver_values(platform: PlatformConfig) -> dict[str, Any]:
    """NVIDIA's GPU DRA driver, the driver root where the GPU Operator's driver container puts it:
    - `dra`: GPUs on (past the chart's guard against the device plugin, which the GPU Operator does not run then),
      ComputeDomains off;
    - multi-node NVLink: ComputeDomains only, the GPUs staying the device plugin's (as upstream's own MNNVL demo,
      demo/specs/imex/nvbandwidth-test-job-1.yaml)."""
    v: dict[str, Any] = {
        "image": {"repository": versions.GPU_DRA_IMAGE_REPOSITORY, "tag": versions.GPU_DRA_IMAGE_TAG},
        # The DeviceClasses' API, stated: the chart otherwise asks the cluster (templates/_helpers.tpl), which a
        # preview may not reach.
        "resourceApiVersion": dra.API,
    }
    if platform.fabric.claims:
        v["gpuResourcesEnabledOverride"] = True
        v["resources"] = {"computeDomains": {"enabled": False}}
    else:
        v["resources"] = {"gpus": {"enabled": False}}
    if platform.gpu.taint_key != k8s.DEFAULT_GPU_TAINT or platform.health.enabled:
        # As the GPU Operator's operands: the stack's GPU taint and, with node health, the quarantine taint (a
        # quarantined node keeps its plugin, or it never reports healthy again).
        tolerations = k8s.operand_tolerations(platform.gpu.taint_key, platform.health.enabled)
        v["kubeletPlugin"] = {"tolerations": tolerations}
    if not platform.gpu.driver_preinstalled:
        v["nvidiaDriverRoot"] = "/run/nvidia/driver"
    return k8s.merge_values(v, placement.site_values(versions.GPU_DRA_CHART, platform))


def objects(platform: PlatformConfig) -> list[dict[str, Any]]:
    """With `dra`: the rail DeviceClass and, where Trainer v2 runs, each training namespace's whole-node claim
    template."""
    if not platform.fabric.claims:
        return []
    out = [dra.device_class(platform.fabric, k8s.meta(dra.NIC_CLASS, platform.cluster, COMPONENT))]
    if "v2" in platform.job_apis:
        per_node = platform.gpu.per_node
        claim = dra.fabric_claim(dra.RUNTIME_TEMPLATE, per_node, per_node, len(platform.fabric.rails))
        out += [
            dra.claim_template(claim, k8s.meta(dra.RUNTIME_TEMPLATE, platform.cluster, COMPONENT, namespace=ns))
            for ns in platform.training_namespaces
        ]
    return out


@dataclass
class DraArgs:
    platform: PlatformConfig


class Dra(pulumi.ComponentResource):
    """Installs dranet (namespace `dranet`) and NVIDIA's GPU DRA driver (`nvidia-dra-driver-gpu`), both privileged
    node plugins, the rail DeviceClass `fastpath-rail-nic` and the runtimes' claim templates.

    Needs: Kubernetes 1.34+ (resource.k8s.io/v1), CDI and NRI in containerd, the training namespaces, and the GPU
    Operator without its device plugin (set by fastpath).

    Example:
        Dra("dra", DraArgs(platform=cfg.platform), opts=pulumi.ResourceOptions(parent=p, depends_on=namespaces))
    """

    def __init__(self, name: str, args: DraArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("fastpath:platform:Dra", name, None, opts)
        p = args.platform
        self.dranet = None
        if p.fabric.claims:
            self.dranet = self._dranet(p)
        _, self.gpu_driver = k8s.operator_install(
            self,
            p.cluster,
            COMPONENT,
            GPU_NAMESPACE,
            "privileged",
            "the kubelet plugins prepare GPUs and IMEX channels through CDI from the host's driver",
            "dra-driver-nvidia-gpu",
            *mirrors.chart_source(versions.GPU_DRA_CHART, None, p.mirrors),
            versions.GPU_DRA_VERSION,
            gpu_driver_values(p),
        )
        # The GPU and channel DeviceClasses come with the GPU driver's chart; the rails' and the templates' are ours.
        # A claim template's spec cannot change (a new GPU or rail count replaces it, deleted first).
        after = pulumi.ResourceOptions(
            parent=self,
            depends_on=[self.gpu_driver, *k8s.inherited_depends_on(opts)],
            replace_on_changes=["spec"],
            delete_before_replace=True,
        )
        self.objects = [k8s.apply(m, after) for m in objects(p)]
        self.register_outputs({"deviceClass": dra.NIC_CLASS if p.fabric.claims else None})

    def _dranet(self, p: PlatformConfig) -> Any:
        _, release = k8s.operator_install(
            self,
            p.cluster,
            COMPONENT,
            DRANET_NAMESPACE,
            "privileged",
            "the kubelet plugin moves NICs between network namespaces, on the host network",
            "dranet",
            *mirrors.chart_source(versions.DRANET_CHART, None, p.mirrors),
            versions.DRANET_VERSION,
            dranet_values(p),
        )
        return release
