"""Platform: every enabled component of one cluster, in order, and the profile jobs are wired from."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from components import checkpoints, fabric, k8s, volcano
from components.checkpoints import CheckpointStorage, CheckpointStorageArgs
from components.config import PlatformConfig
from components.gpu_operator import GpuOperator, GpuOperatorArgs
from components.network_operator import NetworkOperator, NetworkOperatorArgs
from components.networks import SecondaryNetworks, SecondaryNetworksArgs
from components.sriov import SriovNetworks, SriovNetworksArgs
from components.training_operator import TrainingOperator, TrainingOperatorArgs
from components.volcano import Volcano, VolcanoArgs

COMPONENT = "platform"


def training_namespaces(platform: PlatformConfig) -> list[dict]:
    if fabric.is_rdma(platform.fabric):
        # Pod Security `baseline` forbids adding IPC_LOCK, which RDMA needs to pin memory for the NIC, and
        # `restricted` forbids it too: RDMA training namespaces enforce `privileged`, warn/audit at baseline.
        enforce, why = "privileged", "RDMA training pods add IPC_LOCK (baseline forbids it) to register memory"
    else:
        enforce, why = "baseline", "TCP fabric: training pods need no added capabilities"
    return [k8s.namespace(ns, platform.cluster, COMPONENT, enforce, why) for ns in platform.training_namespaces]


def profile(platform: PlatformConfig) -> dict:
    """Everything a TrainingJob needs to wire a pod for this cluster: plain data, exported as the stack output
    `profile` and readable from other projects through a StackReference."""
    full_node = fabric.pod_wiring(platform.fabric, platform.training_namespaces[0], platform.gpu.per_node,
                                  platform.gpu.per_node)
    return {
        "cluster": platform.cluster,
        "namespaces": list(platform.training_namespaces),
        "gpu": {"product": platform.gpu.product, "perNode": platform.gpu.per_node,
                "taintKey": platform.gpu.taint_key},
        "nodes": platform.nodes.to_config(),
        "fabric": platform.fabric.to_config(),
        "transport": full_node.transport,
        "rails": [{"name": r.name, "network": r.network, "resource": r.resource, "hca": r.hca,
                   "subnet": r.subnet, "speedGbps": r.speed_gbps} for r in fabric.rails(platform.fabric)],
        "ncclEnv": full_node.env,
        "scheduler": {
            "name": volcano.SCHEDULER_NAME if platform.components.volcano else None,
            "queues": [{"name": q.name, "gpus": q.gpus} for q in platform.scheduler.queues],
            "defaultQueue": platform.scheduler.queue_for_jobs,
            "priorityClasses": [name for name, _, _ in volcano.PRIORITY_CLASSES],
            "defaultPriorityClass": volcano.DEFAULT_PRIORITY_CLASS,
        },
        "checkpoints": ({"claim": checkpoints.CLAIM, "mountRoot": checkpoints.MOUNT_ROOT}
                        if platform.components.checkpoint_storage else None),
    }


@dataclass
class PlatformArgs:
    platform: PlatformConfig


class Platform(pulumi.ComponentResource):
    """One cluster's training platform: training namespaces, GPU Operator, Network Operator with its
    NicClusterPolicy and NV-IPAM pools, SR-IOV or Multus secondary networks per rail, Volcano, the Training
    Operator and checkpoint storage, each as enabled in `fastpath:platform.components`.

    Needs: a validated PlatformConfig (components.config.parse or from_pulumi).
    Output: `profile` (see profile()), also exported by __main__.py.

    Example:
        cfg = config.from_pulumi()
        platform = Platform("fastpath", PlatformArgs(platform=cfg.platform))
        pulumi.export("profile", platform.profile)
    """

    def __init__(self, name: str, args: PlatformArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("fastpath:platform:Platform", name, None, opts)
        p = args.platform
        child = pulumi.ResourceOptions(parent=self)
        self.namespaces = [k8s.apply(m, child) for m in training_namespaces(p)]
        self.gpu_operator = None
        if p.components.gpu_operator:
            self.gpu_operator = GpuOperator("gpu-operator", GpuOperatorArgs(p), child)
        self.network_operator = None
        if p.network_operator_enabled:
            self.network_operator = NetworkOperator("network-operator", NetworkOperatorArgs(p), child)
            net = self.network_operator
            if p.fabric.attachment == "sriov":
                SriovNetworks("sriov", SriovNetworksArgs(p, operator=net.release),
                              pulumi.ResourceOptions(parent=self, depends_on=[net.policy, *self.namespaces]))
            else:
                SecondaryNetworks("networks", SecondaryNetworksArgs(p, depends_on=[net.policy, *self.namespaces]),
                                  child)
        self.volcano = Volcano("volcano", VolcanoArgs(p), child) if p.components.volcano else None
        if p.components.training_operator:
            TrainingOperator("training-operator", TrainingOperatorArgs(p), child)
        if p.components.checkpoint_storage:
            CheckpointStorage("checkpoints", CheckpointStorageArgs(p, namespaces=self.namespaces), child)
        self.profile = profile(p)
        self.register_outputs({"profile": self.profile})
