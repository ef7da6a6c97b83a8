"""A job resolved against its cluster: every default and derived value filled in from the profile (Resolved), once
the job is found sound (checks.problems), and the names and labels every object of the job carries.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from components import k8s
from components.fabric import dra
from components.fabric import wiring as fabric
from components.jobs.checks import api_of, problems
from components.jobs.sizing import sizing
from components.model.base import JobApi
from components.model.config import ConfigError
from components.model.job import JobSpec
from components.model.profile import PreflightProfile, Profile
from components.model.topology import TopologyPlacement

DEFAULT_MAX_RESTARTS = 3
RDZV_NO_SHARED_STORE = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
COMPONENT = "training-job"
JOB_LABEL = "fastpath.dev/job"
ROLE_LABEL = "fastpath.dev/role"
# Every training pod fastpath builds carries ROLE_LABEL (v1 workers, launchers and stores, v2 runtime pods, the
# acceptance job): the label selector a driver upgrade waits for (GPU Operator and Network Operator upgrade policies).
TRAINING_POD_SELECTOR = ROLE_LABEL


@dataclass(frozen=True)
class Resolved:
    """A job with every default and derived value filled in from the profile."""

    spec: JobSpec
    profile: Profile
    namespace: str
    gpus: int
    memory_gib: int
    shm_gib: int
    cpus: int
    queue: str | None
    priority_class: str | None
    scheduler: str | None
    wiring: fabric.PodWiring
    env: dict[str, str] = field(default_factory=dict)
    overridden: tuple[str, ...] = ()
    checkpoint_dir: str | None = None
    api: JobApi = "v1"
    placement: TopologyPlacement | None = None
    """Where its pods go in the fabric topology (the job's own, else the platform's); None: no topology."""

    @property
    def replicas(self) -> int:
        return self.spec.max_nodes

    @property
    def checkpoint_claim(self) -> str:
        assert self.profile.checkpoints is not None, "checkpoint_dir is set only with a checkpoint claim"
        return self.profile.checkpoints.claim

    @property
    def preflight(self) -> PreflightProfile:
        assert self.profile.preflight is not None, "has_preflight() is checked first"
        return self.profile.preflight

    @property
    def min_available(self) -> int:
        # Fixed size: the whole gang or nothing. Elastic: the minimum size (it may grow later); any minNodes
        # workers can start, since the rendezvous store is not one of them. MPI adds its launcher pod to the gang.
        return self.spec.min_nodes + (1 if self.spec.framework == "mpi" else 0)

    @property
    def max_restarts(self) -> int:
        return DEFAULT_MAX_RESTARTS if self.spec.max_restarts is None else self.spec.max_restarts


def resolve(spec: JobSpec, profile: Profile, source: str = "TrainingJob") -> Resolved:
    """Check `spec` against the cluster and fill in everything. Raises ConfigError naming each bad key."""
    found = problems(spec, profile)
    if found:
        raise ConfigError(source, [f"{spec.name}.{k}: {m}" for k, m in found])
    gpus, memory, shm, cpus = sizing(spec, profile)
    namespace = spec.namespace or profile.namespaces[0]
    sched = profile.scheduler
    api = api_of(spec, profile)
    # `dra`: a v1 job's pods claim from its own template; a TrainJob's from its namespace's (the runtime names it).
    template = dra.RUNTIME_TEMPLATE if api == "v2" else fabric_template(spec)
    wiring = profile.pod_wiring(
        namespace,
        gpus,
        debug=spec.debug_nccl,
        claim_template=template,
        imex_template=imex_template(spec) if profile.gpu.clique_nodes else None,
    )
    env = dict(wiring.env)
    env.update(spec.env_overrides)
    env.update(spec.env)
    checkpoint_dir = None
    if api == "v2":
        # The runtime holds the fabric, the checkpoint mount (a directory per TrainJob) and the rendezvous.
        checkpoint_dir = profile.checkpoints.mount_root if profile.checkpoints else None
    else:
        if spec.framework == "pytorch":
            # torch >= 2.4 lets the rank-0 agent's store double as the workers' store; a replacement agent then
            # never rejoins (it waits for a MASTER_ADDR nobody re-publishes: pytorch/pytorch#135712). Each group
            # gets its own store instead, so a lost node's replacement can rejoin (tests/test_restart.py shows both).
            env[RDZV_NO_SHARED_STORE] = "1"
        if profile.checkpoints:
            checkpoint_dir = f"{profile.checkpoints.mount_root}/{spec.name}"
            env["CHECKPOINT_DIR"] = checkpoint_dir
    return Resolved(
        spec=spec,
        profile=profile,
        namespace=namespace,
        gpus=gpus,
        memory_gib=memory,
        shm_gib=shm,
        cpus=cpus,
        queue=(spec.queue or sched.queue_of(namespace)) if sched.name else None,
        priority_class=(spec.priority_class or sched.default_priority_class) if sched.name else None,
        scheduler=sched.name,
        wiring=wiring,
        env=env,
        overridden=tuple(spec.env_overrides),
        checkpoint_dir=checkpoint_dir,
        api=api,
        placement=placement_of(spec, profile),
    )


def placement_of(spec: JobSpec, profile: Profile) -> TopologyPlacement | None:
    topology = profile.nodes.topology
    if topology is None:
        return None
    return topology.placement_of(spec.topology)


def imex_template(spec: JobSpec) -> str:
    """The IMEX channel template of a job's ComputeDomain (multi-node NVLink), which its controller makes."""
    return f"{spec.name}-imex"


def fabric_template(spec: JobSpec) -> str:
    """The ResourceClaimTemplate of a v1 job's pods on a `dra` fabric (components/fabric/dra.py)."""
    return f"{spec.name}-fabric"


def job_labels(r: Resolved, role: str) -> dict[str, str]:
    return {**k8s.labels(r.profile.cluster, COMPONENT), JOB_LABEL: r.spec.name, ROLE_LABEL: role}


def job_meta(r: Resolved) -> dict:
    return k8s.meta(
        r.spec.name,
        r.profile.cluster,
        COMPONENT,
        namespace=r.namespace,
        extra_labels={JOB_LABEL: r.spec.name, **queue_labels(r)},
    )


# On the job object: the LocalQueue and the WorkloadPriorityClass Kueue admits it under
# (kubernetes-sigs/kueue@v0.19.2:pkg/controller/constants/constants.go QueueLabel, WorkloadPriorityClassLabel).
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
# The LocalQueue Kueue's webhooks put an unlabelled job in (pkg/controller/constants DefaultLocalQueueName).
DEFAULT_LOCAL_QUEUE = "default"


def queue_labels(r: Resolved) -> dict[str, str]:
    """Kueue's labels on the job (its queue is a LocalQueue of that name in the job's namespace); none on Volcano,
    whose queue is in the PodGroup."""
    if r.scheduler != "kueue" or r.queue is None or r.priority_class is None:
        return {}
    return {KUEUE_QUEUE_LABEL: r.queue, KUEUE_PRIORITY_LABEL: r.priority_class}
