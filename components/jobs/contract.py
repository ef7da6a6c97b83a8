"""What reviewers see of a job: its effective contract (kind, size, fabric, networks, env, scheduling, checkpoints)
and what a fault does to it, on either job API. A change of fabric shows up as a diff of this; TrainingJob exports
it as the output `contract`.
"""

from __future__ import annotations

from components.fabric import wiring as fabric
from components.jobs.operator_v1 import CLEAN_POD_POLICY, V1_KINDS, join_timeout, rdzv_host, store_idle_seconds
from components.jobs.resolve import Resolved
from components.jobs.runtime_v2 import build, controller, judge
from components.jobs.trainjob import job_runtime, train_job
from components.platform import shares


def contract(r: Resolved) -> dict:
    """The effective contract of a job, for review: a change of fabric shows up as a diff of this."""
    if r.api == "v2":
        return _v2_contract(r)
    fab = r.profile.fabric
    size = f"{r.spec.nodes}" if r.spec.elastic is None else f"{r.spec.min_nodes}-{r.spec.elastic.max_nodes} (elastic)"
    return {
        "job": r.spec.name,
        "namespace": r.namespace,
        "kind": V1_KINDS[r.spec.framework],
        "replicas": f"{size} x {r.gpus} GPUs",
        "fabric": fab.kind + (f"/{fab.attachment}" if fab.attachment else ""),
        "transport": r.wiring.transport,
        "networks": fabric.annotation_networks(r.wiring.annotations),
        "rdmaResources": dict(r.wiring.resources),
        **_claims(r),
        "capabilities": list(r.wiring.capabilities),
        "shm": f"{r.shm_gib}Gi of {r.memory_gib}Gi memory limit",
        "env": _env(r),
        "envOverrides": list(r.overridden),
        "secretEnv": sorted(r.spec.secret_env),
        "queue": r.queue,
        "fullCluster": full_cluster_verdict(r, r.spec.min_nodes * r.gpus),  # an elastic gang's minimum
        "priorityClass": r.priority_class,
        # Kueue admits a Kubeflow job whole (pkg/controller/jobs/kubeflow/kubeflowjob: no minCount).
        "minAvailable": (r.replicas if r.scheduler == "kueue" else r.min_available) if r.scheduler else None,
        "faults": fault_summary(r),
        "checkpointDir": r.checkpoint_dir,
    }


def _claims(r: Resolved) -> dict[str, str]:
    """What the pods claim by DRA (components/fabric/dra.py), for review; nothing without claims."""
    parts = []
    if (c := r.wiring.claim) is not None:
        how = "each GPU with the rail NIC on its PCIe root" if c.paired else "every rail"
        parts.append(f"{c.template}: {c.gpus} GPUs and {c.nics} NICs ({how})")
    if r.wiring.imex_template is not None:
        parts.append(
            f"{r.wiring.imex_template}: the IMEX channel of ComputeDomain {r.spec.name} (NCCL's traffic rides "
            "multi-node NVLink inside the job's clique, transport mnnvl)"
        )
    return {"claims": "; ".join(parts)} if parts else {}


def _env(r: Resolved) -> dict[str, str]:
    env = dict(r.env)
    if (claim := r.wiring.claim) is not None and r.wiring.hcas_at_start and "NCCL_IB_HCA" not in env:
        # components/jobs/dra_hca.sh sets it in the pod before NCCL starts.
        env["NCCL_IB_HCA"] = f"(at start: the {claim.nics} HCAs of the NICs its claim gave, one on each GPU's root)"
    return env


def fault_summary(r: Resolved) -> str:
    """What a fault does to this job, in one line, for the contract."""
    return _fault_summary(r) + kueue_faults(r)


def kueue_faults(r: Resolved) -> str:
    """What Kueue adds: an eviction suspends the whole job and requeues it (kubernetes-sigs/kueue@v0.19.2:
    pkg/controller/jobframework/reconciler.go stopJob); with a required topology a failed node is replaced inside
    the domain or the job is evicted (pkg/controller/tas/node_controller.go, scheduler.go
    handleFailedTASReplacement); pods not all ready for recoveryTimeout evict it too (waitForPodsReady)."""
    if r.scheduler != "kueue":
        return ""
    out = "; under Kueue an eviction (preemption, reclaim, pods not ready for its recovery timeout) suspends the "
    out += "whole job and requeues it"
    if r.api == "v1" and r.spec.framework == "pytorch":
        # Every agent gets SIGTERM; the readmitted pods rejoin the same c10d store, whose rendezvous an agent that
        # closes it on SIGTERM has closed, and each readmission counts one of every pod's starts.
        out += (
            ": readmitted, it resumes from its checkpoint only if the image's torchrun leaves the rendezvous open on "
            f"SIGTERM (torch 2.13's does; else the readmitted run fails: resubmit it), only within "
            f"{store_idle_seconds(r.profile)}s while its rendezvous store waits, and each readmission spends one of "
            f"its {r.max_restarts + 1} starts"
        )
    else:
        out += ", resuming from its checkpoint when readmitted"
    if r.placement is not None and r.placement.mode == "required":
        out += f"; a failed node is replaced inside its {r.placement.level}, else the job is evicted"
        topology = r.profile.nodes.topology
        size = topology.level(r.placement.level).nodes if topology is not None else None
        if size is not None and size <= r.replicas:
            out += f" (it fills its {r.placement.level} of {size} nodes: any failed node evicts it)"
    return out


def _fault_summary(r: Resolved) -> str:
    if r.api == "v2":
        return v2_fault_summary(r)
    if r.spec.framework == "pytorch":
        return (
            f"torchrun restarts the group up to {r.max_restarts} times (c10d store {rdzv_host(r)}); a lost "
            f"node's or an evicted pod is recreated (ExitCode) and rejoins within {join_timeout(r.profile)}s, else the "
            f"job fails (an evicted pod's rejoin needs a torchrun that leaves the rendezvous open on SIGTERM, as "
            f"torch 2.13's does); cleanPodPolicy {CLEAN_POD_POLICY}"
        )
    if r.spec.framework == "mpi":
        return (
            f"the launcher relaunches mpirun up to {r.max_restarts} times while every worker is there; a lost "
            f"worker fails the job; cleanPodPolicy {CLEAN_POD_POLICY}"
        )
    return f"a fault fails the job (restartPolicy Never); cleanPodPolicy {CLEAN_POD_POLICY}"


def drain_outcome(r: Resolved) -> tuple[bool, str]:
    """What a drain of one of the job's nodes (an eviction of one pod of the gang) does to a running run: (whether
    the run carries on by itself, how). The impact model (components/impact) tells reviewers this per gang."""
    resume = f", resuming from {r.checkpoint_dir}" if r.checkpoint_dir else " from step 0 (no checkpoint dir)"
    if r.api == "v2":
        return True, f"restarts the whole gang{resume} (a drain does not spend its restart budget)"
    if r.spec.framework == "pytorch":
        # A drain evicts: torchrun gets SIGTERM. torch 2.13's agent leaves the rendezvous open then
        # (torch/distributed/elastic/agent/server/local_elastic_agent.py _shutdown), earlier releases close it for
        # every agent (`if not is_restart and self._rdzv_handler: self._rdzv_handler.shutdown()`), and the
        # replacement meets a closed rendezvous. Told conservatively: the run does not carry on by itself.
        return (
            False,
            f"fails, unless a free node takes the evicted pod within {join_timeout(r.profile)}s and the image's "
            "torchrun "
            f"leaves the rendezvous open on SIGTERM (torch 2.13 does, some earlier releases close it): resubmit "
            f"it{resume}",
        )
    return False, f"fails (a lost worker fails the job): resubmit it{resume}"


def _v2_contract(r: Resolved) -> dict:
    """The contract of a TrainJob read off its effective pod: the runtime merged with the job as the v2.3.0
    controller merges them (runtime_v2.controller.effective_pod), so what the TrainJob changed shows."""
    job, rt = train_job(r), job_runtime(r)
    derived = controller.effective_jobset(job, rt)
    pod = controller.effective_pod(job, rt)
    node = next(c for c in pod["spec"]["containers"] if c["name"] == controller.NODE)
    limits = node["resources"]["limits"]
    shm = next(v for v in pod["spec"]["volumes"] if v["name"] == "dshm")["emptyDir"]["sizeLimit"]
    group = derived["podGroup"] or {}
    env = {}
    for e in node.get("env") or []:
        if "value" in e:
            env[e["name"]] = e["value"]
        else:
            ref = e["valueFrom"]
            env[e["name"]] = (
                f"(secret {ref['secretKeyRef']['name']}/{ref['secretKeyRef']['key']})"
                if "secretKeyRef" in ref
                else f"(field {ref['fieldRef']['fieldPath']})"
            )
    fab = r.profile.fabric
    return {
        "job": r.spec.name,
        "namespace": r.namespace,
        "kind": "TrainJob",
        "runtime": rt["metadata"]["name"],
        "replicas": f"{r.spec.nodes} x {_gpu_count(limits)} GPUs",
        "fabric": fab.kind + (f"/{fab.attachment}" if fab.attachment else ""),
        "transport": r.wiring.transport,
        "networks": fabric.annotation_networks(pod["metadata"].get("annotations") or {}),
        "rdmaResources": {k: v for k, v in limits.items() if k not in judge.CORE_RESOURCES},
        "capabilities": list((node.get("securityContext") or {}).get("capabilities", {}).get("add") or []),
        "shm": f"{shm} of {limits['memory']} memory limit",
        "env": env,
        "envOverrides": [k for k in r.overridden],
        "secretEnv": sorted(r.spec.secret_env),
        # A PodGroup the runtime gives no queue is created in `default`, and Volcano's PodGroup webhook moves it to
        # the queue its namespace is annotated with (components/platform/volcano.py CHART_ADMISSIONS).
        **_v2_scheduling(r, group),
        "fullCluster": full_cluster_verdict(r, r.spec.min_nodes * _gpu_count(limits)),
        "faults": fault_summary(r),
        "checkpointDir": f"{r.checkpoint_dir} (the claim's {r.spec.name}/)" if r.checkpoint_dir else None,
        **_claims(r),
        "runtimeOverrides": judge.override_problems(job, rt),
    }


def _v2_scheduling(r: Resolved, group: dict) -> dict:
    """A TrainJob's queue, tier and gang size: its PodGroup's on Volcano; on Kueue its labels, and every pod (Kueue
    admits a TrainJob whole: kubernetes-sigs/kueue@v0.19.2:pkg/controller/jobs/trainjob)."""
    if r.scheduler == "kueue":
        return {"queue": r.queue, "priorityClass": r.priority_class, "minAvailable": r.spec.max_nodes}
    return {
        "queue": group.get("queue") or (r.profile.scheduler.queue_of(r.namespace) if group else None),
        "priorityClass": group.get("priorityClassName"),
        "minAvailable": group.get("minMember"),
    }


def full_cluster_verdict(r: Resolved, gpus: int) -> str | None:
    """Whether the job's gang starts when every queue of the cluster has jobs waiting (components/platform/shares.py:
    Volcano v1.15.1's proportion, or Kueue's nominal quota), for a job in one of the cluster's queues; None without
    a gang scheduler."""
    sched = r.profile.scheduler
    if not sched.name or r.queue is None or r.queue not in {q.name for q in sched.queues}:
        return None
    if r.profile.fabric.claims:
        # Volcano's proportion counts requested nvidia.com/gpu, which a DRA pod does not request.
        return "not told: this job's GPUs are in its claims, which Volcano's GPU shares do not count"
    if sched.name == "kueue":
        own = [shares.Queue(q.name, q.weight, q.gpus) for q in sched.queues]
        return shares.kueue_full_cluster(own, r.profile.nodes.count, r.profile.gpu.per_node, r.queue, gpus)
    # The acceptance's queue competes too; Volcano's own `default` holds no job of fastpath's (every training
    # namespace names its queue) and is left out.
    queues = [shares.Queue(q.name, q.weight, q.gpus) for q in (*sched.queues, *sched.competing)]
    return str(shares.full_cluster(queues, r.profile.nodes.count * r.profile.gpu.per_node, r.queue, gpus))


def _gpu_count(limits: dict) -> int:
    return int(limits.get(build.GPU_RESOURCE, 0))


# A lost node (NotReady): its pod is deleted (taint eviction, or the Job deleting what is left once the survivors'
# NCCL errors failed it) but stays Terminating, since no kubelet confirms it. With a podFailurePolicy a pod counts
# only once terminal, and the Job's Failed condition waits until no pod is terminating (kubernetes/kubernetes
# pkg/controller/job/job_controller.go onlyReplaceFailedPods, trackTerminatingPods, delayTerminalCondition); JobSet
# acts only on a Failed Job (kubernetes-sigs/jobset@v0.12.0:pkg/controllers/failure_policy.go) and BlockingRecreate
# waits for the old Jobs' foreground deletion. PodGC ends it: it force-deletes, as Failed, a terminating pod on a
# NotReady node tainted node.kubernetes.io/out-of-service (pkg/controller/podgc/gc_controller.go gcTerminating), or
# any pod of a deleted Node (gcOrphaned). Shorter unreachable/not-ready tolerations would only start the eviction
# sooner, not end it, so the runtimes keep the defaults.
LOST_NODE = (
    "a lost node holds the run (its pod stays Terminating, the healthy nodes' pods are deleted) until the "
    "Node is tainted node.kubernetes.io/out-of-service=nodeshutdown:NoExecute or deleted, then the gang "
    "restarts"
)


def v2_fault_summary(r: Resolved) -> str:
    t = r.profile.trainer
    assert t is not None
    # No TTL (config.TrainerConfig refuses one): kubeflow-trainer v2.3.0 would run a failed TrainJob again once
    # its JobSet is gone.
    kept = "the JobSet kept, so a failed run stays failed, until the TrainJob is deleted"
    return (
        f"a crashed or OOM-killed pod restarts the whole gang from the checkpoint (JobSet BlockingRecreate), up "
        f"to {t.max_restarts} times; a preemption, eviction or drain restarts it without spending that budget; "
        f"{LOST_NODE}; a failed preflight fails the run; when it ends its active pods are deleted, {kept}"
    )
