"""The platform profile: everything a TrainingJob needs to wire a pod for one cluster. Pure data.

The stack exports it as `profile`; jobs in the same program take it from Platform.profile, jobs in another
project from a StackReference (`from_stack`). The names jobs refer to (scheduler, priority tiers, checkpoint
claim, preflight ConfigMap) are defined here; the Volcano and checkpoint components take them from this module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from components.fabric import kinds
from components.fabric import wiring as fabric
from components.fabric.wiring import PodWiring, Rail
from components.model.base import JobApi
from components.model.config import FabricConfig, NodesConfig, PlatformConfig, acceptance_api
from components.model.job import CHECKPOINT_ROOT

# What Volcano v1.15.1, as components/platform/volcano.py configures it, does with these tiers
# (PodGroup priorityClassName):
# gangpreempt evicts whole gangs of strictly lower tiers in the preemptor's own queue, never part of a gang, and
# only when the preemptor's entire gang then fits; across queues only gangreclaim acts: a starving queue takes
# whole gangs from other reclaimable queues, those furthest over their share first, without checking that the
# victim's queue is over its share and regardless of tier (pkg/scheduler/actions/gangreclaim selectDomainBundles,
# SortBundlesForReclaim). preemptionPolicy Never binds kube-scheduler only (the gang actions do not read it).
_QUEUES = (
    "Across queues tiers do not apply: a queue whose gang does not fit reclaims whole gangs, of any tier, "
    "from other reclaimable queues, those furthest over their weight share first. A queue's GPU capability "
    "is a ceiling it never exceeds and reserves nothing."
)
PRIORITY_CLASSES = (
    (
        "training-critical",
        100000,
        "Deadline runs. If its gang does not fit, Volcano evicts whole gangs of lower tiers in the same queue "
        "(never part of one, only when the whole gang then fits). " + _QUEUES,
    ),
    (
        "training-standard",
        10000,
        "Default tier. If its gang does not fit, Volcano evicts whole training-preemptible gangs in the same queue; "
        "training-critical gangs of the same queue may evict it. " + _QUEUES,
    ),
    (
        "training-preemptible",
        100,
        "Opportunistic runs: the first whole gangs evicted for higher tiers of the same queue; evicts no tier. A job "
        "that loses pods and cannot re-form within its rendezvous timeout fails and frees its nodes. " + _QUEUES,
    ),
)
DEFAULT_PRIORITY_CLASS = "training-standard"
CHECKPOINT_CLAIM = "checkpoints"
PREFLIGHT_CONFIGMAP = "fastpath-preflight"
PREFLIGHT_KEY = "preflight.sh"


@dataclass(frozen=True)
class GpuProfile:
    product: str
    per_node: int
    taint_key: str
    clique_nodes: int | None = None  # multi-node NVLink: nodes of one clique (gpu.nvlinkDomain); None: none


@dataclass(frozen=True)
class QueueProfile:
    name: str
    gpus: int | None
    weight: int = 1  # profiles exported before weights were exported count every queue alike


@dataclass(frozen=True)
class SchedulerProfile:
    name: str | None  # volcano or kueue; None: no gang scheduler, pods go to the default scheduler without a queue
    queues: tuple[QueueProfile, ...]
    default_queue: str
    priority_classes: tuple[str, ...]
    default_priority_class: str
    # (namespace, queue) for every training namespace: where a job that names no queue lands. Profiles exported
    # before namespaces had queues have none: every namespace's jobs then go to default_queue, as they did.
    namespace_queues: tuple[tuple[str, str], ...] = ()
    # Queues jobs do not name but that compete for the GPUs (the fabric acceptance's), for the shares' verdict.
    competing: tuple[QueueProfile, ...] = ()

    def queue_of(self, namespace: str) -> str:
        return dict(self.namespace_queues).get(namespace, self.default_queue)


@dataclass(frozen=True)
class CheckpointProfile:
    claim: str
    mount_root: str


@dataclass(frozen=True)
class PreflightProfile:
    config_map: str
    key: str


# Kubeflow Trainer v2 runtimes: one ClusterTrainingRuntime per framework and priority tier. A TrainJob cannot set
# its pods' priorityClassName (runtimePatches have no such field: kubeflow/trainer@v2.3.0:pkg/apis/trainer/v1alpha1/
# trainjob_types.go PodSpecPatch) and Volcano reads the PodGroup's priority from the pod templates, so the tier is
# in the runtime's name: `fastpath-torch` (the default tier), `fastpath-torch-critical`, `fastpath-mpi-preemptible`.
# The fabric acceptance's own Volcano queue (components/jobs/acceptance.py QUEUE), weight 1.
ACCEPTANCE_QUEUE = "fastpath-acceptance"
RUNTIME_PREFIX = "fastpath"
RUNTIME_FRAMEWORKS = ("torch", "mpi", "plain")


def runtime_name(framework: str, tier: str | None) -> str:
    """The ClusterTrainingRuntime a TrainJob names for `framework` in priority tier `tier` (None: no Volcano,
    one runtime per framework)."""
    if tier is None or tier == DEFAULT_PRIORITY_CLASS:
        return f"{RUNTIME_PREFIX}-{framework}"
    return f"{RUNTIME_PREFIX}-{framework}-{tier.removeprefix('training-')}"


@dataclass(frozen=True)
class TrainerProfile:
    """What the published Trainer v2 runtimes decide for every TrainJob naming them."""

    image: str
    mpi_image: str | None  # None: no MPI runtime
    max_restarts: int

    @property
    def frameworks(self) -> tuple[str, ...]:
        return tuple(f for f in RUNTIME_FRAMEWORKS if f != "mpi" or self.mpi_image)


@dataclass(frozen=True)
class Profile:
    """Everything a TrainingJob needs to wire a pod for one cluster. Frozen and typed; `to_data()` is the plain
    form the stack exports as `profile` (read back by `from_data`, e.g. through a StackReference)."""

    cluster: str
    namespaces: tuple[str, ...]
    gpu: GpuProfile
    nodes: NodesConfig
    fabric: FabricConfig
    scheduler: SchedulerProfile
    checkpoints: CheckpointProfile | None
    preflight: PreflightProfile | None
    job_apis: tuple[JobApi, ...] = ("v1",)
    """The job APIs the cluster serves; a job that names none gets the first."""
    trainer: TrainerProfile | None = None
    """Trainer v2's published runtimes (when job_apis has v2)."""

    nccl_inspector_image: str | None = None
    """The image with NCCL's Inspector plugin every GPU pod loads (monitoring.ncclInspectorImage); None: off."""
    image_mirror: str | None = None
    """The registry every image comes from on a disconnected cluster (platform.mirrors.registry); None: public."""
    lost_node_seconds: int | None = None
    """How long a lost node keeps its pods before node health releases them (health.lostNodeMinutes); None: until
    a person does."""

    @property
    def acceptance_api(self) -> JobApi:
        """What the fabric acceptance runs as (config.acceptance_api)."""
        return acceptance_api(self.job_apis, self.scheduler.name)

    def runtimes(self) -> list[tuple[str, str, str | None]]:
        """(name, framework, priority class) of every runtime the cluster publishes, in a stable order."""
        if self.trainer is None:
            return []
        tiers: tuple[str | None, ...] = self.scheduler.priority_classes if self.scheduler.name else (None,)
        return [(runtime_name(fw, tier), fw, tier) for fw in self.trainer.frameworks for tier in tiers]

    @property
    def transport(self) -> kinds.Transport:
        return self.fabric.kind_row.transport

    @property
    def rails(self) -> tuple[Rail, ...]:
        return tuple(fabric.rails(self.fabric))

    def pod_wiring(
        self,
        namespace: str | None,
        gpus: int,
        *,
        debug: bool = False,
        claim_template: str = "",
        imex_template: str | None = None,
    ) -> PodWiring:
        """fabric.pod_wiring for a pod of this cluster with `gpus` GPUs: its nodes' GPU count, and on a multi-node
        NVLink cluster the MNNVL setting of a pod with (`imex_template`) or without an IMEX channel."""
        return fabric.pod_wiring(
            self.fabric,
            namespace,
            gpus,
            self.gpu.per_node,
            debug=debug,
            claim_template=claim_template,
            imex_template=imex_template,
            nvlink_domain=self.gpu.clique_nodes is not None,
        )

    def to_data(self) -> dict[str, Any]:
        """The exported form: camelCase plain data, stable across releases (StackReference consumers read it)."""
        # The env a pod of the whole node gets that no job wired: on a multi-node NVLink cluster, MNNVL off.
        full_node = self.pod_wiring(self.namespaces[0], self.gpu.per_node)
        s = self.scheduler
        return {
            "cluster": self.cluster,
            "namespaces": list(self.namespaces),
            "gpu": {
                "product": self.gpu.product,
                "perNode": self.gpu.per_node,
                "taintKey": self.gpu.taint_key,
                **({"cliqueNodes": self.gpu.clique_nodes} if self.gpu.clique_nodes else {}),
            },
            "nodes": self.nodes.to_config(),
            "fabric": self.fabric.to_config(),
            "transport": full_node.transport,
            "rails": [
                {
                    "name": r.name,
                    "network": r.network,
                    "resource": r.resource,
                    "hca": r.hca,
                    "subnet": r.subnet,
                    "speedGbps": r.speed_gbps,
                }
                for r in self.rails
            ],
            "ncclEnv": full_node.env,
            "scheduler": {
                "name": s.name,
                "queues": [{"name": q.name, "gpus": q.gpus, "weight": q.weight} for q in s.queues],
                "defaultQueue": s.default_queue,
                "priorityClasses": list(s.priority_classes),
                "defaultPriorityClass": s.default_priority_class,
                "namespaceQueues": dict(s.namespace_queues),
                "competingQueues": [{"name": q.name, "gpus": q.gpus, "weight": q.weight} for q in s.competing],
            },
            "checkpoints": (
                {"claim": self.checkpoints.claim, "mountRoot": self.checkpoints.mount_root}
                if self.checkpoints
                else None
            ),
            "preflight": (
                {"configMap": self.preflight.config_map, "key": self.preflight.key} if self.preflight else None
            ),
            "ncclInspectorImage": self.nccl_inspector_image,
            "imageMirror": self.image_mirror,
            "lostNodeSeconds": self.lost_node_seconds,
        }

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Profile:
        """A profile from its exported form (another stack's output; numbers may arrive as floats). The fabric
        and nodes are validated again: they crossed a process boundary."""
        d = normalize(data)
        s, cp, pf, tr = d["scheduler"], d.get("checkpoints"), d.get("preflight"), d.get("trainer")
        return cls(
            cluster=d["cluster"],
            namespaces=tuple(d["namespaces"]),
            gpu=GpuProfile(d["gpu"]["product"], d["gpu"]["perNode"], d["gpu"]["taintKey"], d["gpu"].get("cliqueNodes")),
            nodes=NodesConfig.model_validate(d["nodes"]),
            fabric=FabricConfig.model_validate(d["fabric"]),
            scheduler=SchedulerProfile(
                name=s["name"],
                queues=tuple(QueueProfile(q["name"], q.get("gpus"), q.get("weight") or 1) for q in s["queues"]),
                default_queue=s["defaultQueue"],
                priority_classes=tuple(s["priorityClasses"]),
                default_priority_class=s["defaultPriorityClass"],
                namespace_queues=tuple(sorted((s.get("namespaceQueues") or {}).items())),
                competing=tuple(
                    QueueProfile(q["name"], q.get("gpus"), q.get("weight") or 1) for q in s.get("competingQueues") or []
                ),
            ),
            checkpoints=CheckpointProfile(cp["claim"], cp["mountRoot"]) if cp else None,
            preflight=PreflightProfile(pf["configMap"], pf["key"]) if pf else None,
            # Profiles exported before Trainer v2 existed name no job API: they served v1 only.
            job_apis=tuple(d.get("jobApis") or ("v1",)),
            trainer=(TrainerProfile(tr["image"], tr.get("mpiImage"), tr["maxRestarts"]) if tr else None),
            nccl_inspector_image=d.get("ncclInspectorImage"),
            image_mirror=d.get("imageMirror"),
            lost_node_seconds=d.get("lostNodeSeconds"),
        )


def profile(platform: PlatformConfig) -> Profile:
    """The profile of the cluster `platform` describes."""
    return Profile(
        cluster=platform.cluster,
        namespaces=tuple(platform.training_namespaces),
        gpu=GpuProfile(
            platform.gpu.product,
            platform.gpu.per_node,
            platform.gpu.taint_key,
            platform.gpu.nvlink_domain.nodes_per_clique if platform.gpu.nvlink_domain else None,
        ),
        nodes=platform.nodes,
        fabric=platform.fabric,
        scheduler=SchedulerProfile(
            name=platform.scheduler.name if platform.volcano_enabled or platform.kueue_enabled else None,
            queues=tuple(QueueProfile(q.name, q.gpus, q.weight) for q in platform.scheduler.queues),
            default_queue=platform.scheduler.queue_for_jobs,
            priority_classes=tuple(name for name, _, _ in PRIORITY_CLASSES),
            default_priority_class=DEFAULT_PRIORITY_CLASS,
            namespace_queues=tuple((ns, platform.scheduler.queue_of(ns)) for ns in platform.training_namespaces),
            competing=(
                (
                    QueueProfile(
                        ACCEPTANCE_QUEUE,
                        platform.acceptance.queue_cap(platform.nodes.count, platform.gpu.per_node),
                        1,
                    ),
                )
                if platform.acceptance.enabled and platform.volcano_enabled
                else ()
            ),
        ),
        checkpoints=(
            CheckpointProfile(CHECKPOINT_CLAIM, CHECKPOINT_ROOT) if platform.components.checkpoint_storage else None
        ),
        # The preflight script ships as a ConfigMap in each training namespace on RDMA fabrics.
        preflight=(PreflightProfile(PREFLIGHT_CONFIGMAP, PREFLIGHT_KEY) if platform.fabric.kind_row.rdma else None),
        job_apis=platform.job_apis,
        trainer=(
            TrainerProfile(t.image, t.mpi_image, t.max_restarts)
            if "v2" in platform.job_apis and (t := platform.trainer_settings)
            else None
        ),
        nccl_inspector_image=platform.monitoring.nccl_inspector_image,
        image_mirror=platform.mirrors.registry if platform.mirrors else None,
        lost_node_seconds=(
            h.lost_node_minutes * 60 if (h := platform.health).enabled and h.lost_node_minutes is not None else None
        ),
    )


def normalize(value: Any, drop_none: bool = False) -> Any:
    """Plain data with integral floats back to ints (and, with drop_none, unset keys removed). Pulumi hands
    every number across the wire (StackReference outputs, mocks, policy props) as a float: 8.0 GPUs would
    render as nprocPerNode "8.0"."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str | bytes):
        return value
    # Mappings and Sequences, not just dict/list: policy props arrive as read-only proxies.
    if isinstance(value, Mapping):
        return {k: normalize(v, drop_none) for k, v in value.items() if not (drop_none and v is None)}
    if isinstance(value, Sequence):
        return [normalize(v, drop_none) for v in value]
    return value


def from_stack(stack: str) -> Profile:
    """The profile exported by another fastpath stack (`org/fastpath/prod-ib`), as plain data, so a
    TrainingJob in another project is wired from it at preview time. Call inside a Pulumi program."""
    import pulumi
    from pulumi.runtime.sync_await import _sync_await

    details = _sync_await(
        pulumi.StackReference(f"fastpath-profile-{stack.replace('/', '-')}", stack_name=stack).get_output_details(
            "profile"
        )
    )
    value = details.value if details.value is not None else details.secret_value
    if not isinstance(value, dict):
        raise ValueError(f"stack {stack} exports no `profile`: is it a fastpath stack that has been deployed?")
    return Profile.from_data(value)
