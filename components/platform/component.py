"""Platform: every enabled component of one cluster, in order, and the profile jobs are wired from."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import assert_never

import pulumi

from components import k8s
from components.fabric import wiring as fabric
from components.model.config import PlatformConfig
from components.model.profile import PREFLIGHT_CONFIGMAP, PREFLIGHT_KEY, profile
from components.ops.component import Reaper, ReaperArgs
from components.platform import telemetry
from components.platform.checkpoints import CheckpointStorage, CheckpointStorageArgs
from components.platform.dra import Dra, DraArgs
from components.platform.gpu_operator import GpuOperator, GpuOperatorArgs
from components.platform.health import Health, HealthArgs
from components.platform.kueue import Kueue, KueueArgs
from components.platform.network_operator import NetworkOperator, NetworkOperatorArgs
from components.platform.networks import SecondaryNetworks, SecondaryNetworksArgs
from components.platform.sriov import LEFT_ON_DESTROY as LEFT_ON_DESTROY_SRIOV
from components.platform.sriov import SriovNetworks, SriovNetworksArgs
from components.platform.topology import Topograph, TopographArgs
from components.platform.trainer import Trainer, TrainerArgs
from components.platform.training_operator import TrainingOperator, TrainingOperatorArgs
from components.platform.volcano import QUEUE_ANNOTATION as VOLCANO_QUEUE_ANNOTATION
from components.platform.volcano import Volcano, VolcanoArgs

COMPONENT = "platform"


PREFLIGHT_SCRIPT = Path(__file__).parents[1] / "jobs" / "preflight.sh"


# Beside the script in its ConfigMap: what the platform promises every pod's node (preflight.sh reads it).
PREFLIGHT_PLATFORM_ENV = "platform.env"


def preflight_platform_env(platform: PlatformConfig) -> str:
    """The platform's facts the preflight checks on the node. Kept out of the pods' own env on purpose: a new check
    or a changed gpu.gpuDirect reaches the pods started next, and no job is replaced (and its gang killed) for it."""
    lines = [f"PREFLIGHT_GPUDIRECT={platform.gpu.gpu_direct}"] if platform.gpu.gpu_direct != "none" else []
    return "".join(f"{line}\n" for line in lines)


def preflight_configmaps(platform: PlatformConfig) -> list[dict]:
    if not fabric.is_rdma(platform.fabric):
        return []
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": k8s.meta(PREFLIGHT_CONFIGMAP, platform.cluster, COMPONENT, namespace=ns),
            "data": {
                PREFLIGHT_KEY: PREFLIGHT_SCRIPT.read_text(),
                PREFLIGHT_PLATFORM_ENV: preflight_platform_env(platform),
            },
        }
        for ns in platform.training_namespaces
    ]


def training_namespaces(platform: PlatformConfig) -> list[dict]:
    if fabric.is_rdma(platform.fabric):
        # Pod Security `baseline` forbids adding IPC_LOCK, which RDMA needs to pin memory for the NIC, and
        # `restricted` forbids it too: RDMA training namespaces enforce `privileged`, warn/audit at baseline.
        enforce, why = "privileged", "RDMA training pods add IPC_LOCK (baseline forbids it) to register memory"
        if platform.fabric.host_network:
            why += "; they also run on the host network, which baseline forbids (hostNetwork, hostPort)"
    else:
        enforce, why = "baseline", "TCP fabric: training pods need no added capabilities"
    return [
        k8s.namespace(
            ns,
            platform.cluster,
            COMPONENT,
            enforce,
            why,
            # Volcano's PodGroup webhook reads it: the queue of this namespace's jobs that name none
            # (components/platform/volcano.py CHART_ADMISSIONS).
            {VOLCANO_QUEUE_ANNOTATION: platform.scheduler.queue_of(ns)} if platform.volcano_enabled else None,
        )
        for ns in platform.training_namespaces
    ]


def left_on_destroy(platform: PlatformConfig) -> list[str]:
    """What `pulumi destroy` leaves on the cluster, and why: the stack exports it (`leftOnDestroy`), so it can be
    read before a destroy and cleaned up after it."""
    out = []
    if platform.components.checkpoint_storage:
        out.append(
            "the checkpoint PersistentVolumeClaims (protected, retained) and their volumes' data: checkpoints "
            "outlive the stack; unprotect (`pulumi state unprotect`) before a destroy, delete them with kubectl"
        )
    if platform.training_operator_enabled:
        out.append(
            "the Training Operator's CRDs (protected, retained): deleting one deletes every job of its kind; "
            "`kubectl delete crd` them to remove the job kinds"
        )
    if profile(platform).trainer is not None:
        out.append(
            "the kubeflow-trainer release (protected, retained): its CRDs go with it, and every TrainJob with them; "
            "`helm uninstall` it deliberately"
        )
    if (
        platform.network_operator_enabled
        and platform.fabric.attachment_row
        and platform.fabric.attachment_row.sriov_operator
    ):
        out.append(LEFT_ON_DESTROY_SRIOV)
    return out


@dataclass
class PlatformArgs:
    platform: PlatformConfig


class Platform(pulumi.ComponentResource):
    """One cluster's training platform: training namespaces, GPU Operator, Network Operator with its
    NicClusterPolicy and NV-IPAM pools, SR-IOV or Multus secondary networks per rail, Volcano, the Training
    Operator, checkpoint storage, each as enabled in `fastpath:platform.components`, and Kubeflow Trainer v2 with
    its runtimes as `fastpath:platform.jobApi` says.

    Needs: a validated PlatformConfig (components.model.stack.parse or from_pulumi).
    Output: `profile` (components/model/profile.py), also exported by __main__.py.

    Example:
        cfg = stack.from_pulumi()
        platform = Platform("fastpath", PlatformArgs(platform=cfg.platform))
        pulumi.export("profile", platform.profile.to_data())
    """

    def __init__(self, name: str, args: PlatformArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("fastpath:platform:Platform", name, None, opts)
        p = args.platform
        child = pulumi.ResourceOptions(parent=self)
        self.namespaces = [k8s.apply(m, child) for m in training_namespaces(p)]
        self.preflight = [
            k8s.apply(m, pulumi.ResourceOptions(parent=self, depends_on=self.namespaces))
            for m in preflight_configmaps(p)
        ]
        self.gpu_operator = None
        if p.components.gpu_operator:
            self.gpu_operator = GpuOperator("gpu-operator", GpuOperatorArgs(p), child)
        self.network_operator = None
        if p.network_operator_enabled:
            self.network_operator = NetworkOperator("network-operator", NetworkOperatorArgs(p), child)
            net = self.network_operator
            match p.fabric.attachment:
                case "sriov":
                    SriovNetworks(
                        "sriov",
                        SriovNetworksArgs(p, operator=net.release, policy=net.policy, namespaces=self.namespaces),
                        child,
                    )
                case "shared" | "hostdevice":
                    SecondaryNetworks(
                        "networks", SecondaryNetworksArgs(p, depends_on=[net.policy, *self.namespaces]), child
                    )
                case "hostnetwork" | "rdma-only" | None:  # no network per rail: the device plugin is all
                    pass
                case "dra":  # the NICs are claimed (Dra below); the policy deploys the DOCA driver only
                    pass
                case other:
                    assert_never(other)
        if p.health.enabled:
            Health("health", HealthArgs(p, after=[self.gpu_operator.release] if self.gpu_operator else []), child)
        if p.reaper.enabled:
            Reaper("reaper", ReaperArgs(p, after=self.namespaces), child)
        # Training-time telemetry's scrape config and rules (the pods' side is components/jobs/telemetry.py).
        for m in telemetry.objects(p):
            k8s.apply(m, pulumi.ResourceOptions(parent=self, depends_on=self.namespaces))
        self.volcano = Volcano("volcano", VolcanoArgs(p), child) if p.volcano_enabled else None
        if p.fabric.claims or p.gpu.nvlink_domain is not None:
            # The claim templates (and the jobs' ComputeDomains) live in the training namespaces.
            Dra("dra", DraArgs(p), pulumi.ResourceOptions(parent=self, depends_on=self.namespaces))
        # Kueue's LocalQueues live in the training namespaces.
        self.kueue = (
            Kueue("kueue", KueueArgs(p), pulumi.ResourceOptions(parent=self, depends_on=self.namespaces))
            if p.kueue_enabled
            else None
        )
        if p.nodes.topology is not None and p.nodes.topology.source == "topograph":
            Topograph("topograph", TopographArgs(p), child)
        self.training_operator = None
        if p.training_operator_enabled:
            # With the gang flag the operator exits while the PodGroup CRD (Volcano's release) is missing.
            self.training_operator = TrainingOperator(
                "training-operator",
                TrainingOperatorArgs(p, after=[self.volcano.release] if self.volcano else []),
                child,
            )
        if p.components.checkpoint_storage:
            nfs = p.checkpoints.nfs if p.checkpoints else None
            # With the operator's DOCA driver, NFS over RDMA mounts once the driver (ENABLE_NFSRDMA: rpcrdma) is up,
            # which the policy's readiness says; host DOCA-OFED loads rpcrdma on its own (README).
            doca = self.network_operator is not None and not p.gpu.host_mofed
            after = [self.network_operator.policy] if self.network_operator and nfs and nfs.rdma and doca else []
            CheckpointStorage("checkpoints", CheckpointStorageArgs(p, namespaces=self.namespaces, after=after), child)
        self.profile = profile(p)
        self.trainer = None
        if self.profile.trainer is not None:
            # The trainer's volcano plugin watches PodGroups only if their CRD exists when it starts.
            self.trainer = Trainer(
                "trainer", TrainerArgs(p, self.profile, after=[self.volcano.release] if self.volcano else []), child
            )
        # What a job waits for: this platform and every object of the Training Operator's overlay (its CRDs, its
        # admission webhook, its Deployment until ready). The overlay's objects exist only once the provider built
        # it, so depends_on=[platform] alone would not include them; this Output does.
        if self.training_operator is not None:
            self.job_dependencies = self.training_operator.ready.apply(lambda rs: [self, *rs])
        else:
            self.job_dependencies = pulumi.Output.from_input([self])
        # A TrainJob waits for the runtimes it may name (the trainer's webhook refuses it before its runtime
        # exists) and, through the platform, for the Volcano PriorityClasses and queues the runtimes name.
        self.trainjob_dependencies = (
            pulumi.Output.from_input([self, self.trainer.release, *self.trainer.runtimes])
            if self.trainer is not None
            else self.job_dependencies
        )
        self.register_outputs({"profile": self.profile.to_data()})
