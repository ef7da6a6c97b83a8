"""TrainingJob: a researcher's job description in, a job on the fast path out.

The job is resolved against the cluster's profile (resolve.resolve: refused, with every bad key, before anything is
registered) and built by pure functions: a Training Operator v1 job (operator_v1) or a Trainer v2 TrainJob
(trainjob), its files ConfigMap (files) and, for a PyTorchJob, its rendezvous store; contract.contract is what
reviewers see. TrainingJob only registers the result.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from components import k8s
from components.jobs.contract import contract
from components.jobs.files import files_configmap
from components.jobs.operator_v1 import BUILDERS, rendezvous
from components.jobs.pod import compute_domain, fabric_claim_template
from components.jobs.resolve import Resolved, resolve
from components.jobs.trainjob import has_own_runtime, own_runtime, train_job
from components.model.job import JobSpec
from components.model.profile import Profile
from components.platform.trainer import RUNTIME_IMMUTABLE

# runPolicy fields the Training Operator reads only when a job ends (kubeflow/trainer@v1.9.4:pkg/controller.v1/
# common/job.go CleanupJob, DeletePodsAndServices): an edit of them is patched in place, not a new run.
IN_PLACE = frozenset({"runPolicy.ttlSecondsAfterFinished", "runPolicy.cleanPodPolicy"})
# Every other field of the v1 job specs (kubeflow/trainer@v1.9.4:pkg/apis/kubeflow.org/v1/pytorch_types.go,
# mpi_types.go, tensorflow_types.go, common_types.go RunPolicy), listed whole so that a field added or removed
# later still replaces the job: replace_on_changes matches the paths it is given, not their absence.
V1_REPLACE = (
    "spec.pytorchReplicaSpecs",
    "spec.elasticPolicy",
    "spec.nprocPerNode",
    "spec.mpiReplicaSpecs",
    "spec.slotsPerWorker",
    "spec.mainContainer",
    "spec.cleanPodPolicy",
    "spec.tfReplicaSpecs",
    "spec.successPolicy",
    "spec.enableDynamicWorker",
    "spec.runPolicy.schedulingPolicy",
    "spec.runPolicy.backoffLimit",
    "spec.runPolicy.activeDeadlineSeconds",
    "spec.runPolicy.suspend",
    "spec.runPolicy.managedBy",
)


def replace_paths(obj: dict) -> list[str]:
    """The property paths whose change makes the job a new one (replace_on_changes): a v1 job's spec but
    IN_PLACE; a TrainJob's whole spec."""
    return list(V1_REPLACE) if "runPolicy" in obj["spec"] else ["spec"]


def in_place_part(obj: dict) -> dict:
    """The IN_PLACE fields of a job's spec, present or not (an edit of only these updates the job in place)."""
    out = {}
    for path in sorted(IN_PLACE):
        head, _, tail = path.partition(".")
        out[path] = (obj["spec"].get(head) or {}).get(tail)
    return out


def prerequisites(r: Resolved, max_restarts: int | None = None) -> list[tuple[dict, list[str]]]:
    """What a job's pods need made before them, in order, each with the fields whose change replaces it:
    - its ComputeDomain (multi-node NVLink), whose controller makes the channel template the pods claim;
    - a TrainJob's own TrainingRuntime there (trainjob.own_runtime, `max_restarts` for it), replaced as the
      cluster runtimes are (a running TrainJob keeps its snapshot);
    - its ResourceClaimTemplate (`dra`), whose spec cannot change: a new one (a new GPU count) replaces it, as the
      job is replaced."""
    out: list[tuple[dict, list[str]]] = []
    if (domain := compute_domain(r)) is not None:
        out.append((domain, ["spec"]))
    if has_own_runtime(r):
        out.append((own_runtime(r, max_restarts), RUNTIME_IMMUTABLE))
    if (claim := fabric_claim_template(r)) is not None:
        out.append((claim, ["spec"]))
    return out


def register_prerequisites(
    objects: list[tuple[dict, list[str]]], parent: pulumi.Resource, depends_on: list[pulumi.Resource]
) -> list[pulumi.Resource]:
    """Registers `objects` (prerequisites) one after another, deleted before they are replaced; what comes after
    them depends on the returned list."""
    for obj, replace_on in objects:
        opts = pulumi.ResourceOptions(
            parent=parent, depends_on=depends_on, replace_on_changes=replace_on, delete_before_replace=True
        )
        depends_on = k8s.plus(depends_on, k8s.apply(obj, opts))
    return depends_on


def manifest(r: Resolved) -> dict:
    """The job's object: a TrainJob on Trainer v2, else its framework's Training Operator v1 job."""
    if r.api == "v2":
        return train_job(r)
    return BUILDERS[r.spec.framework](r)


@dataclass
class TrainingJobArgs:
    spec: JobSpec
    profile: Profile  # Platform.profile, or components.model.profile.from_stack("org/fastpath/prod-ib")


class TrainingJob(pulumi.ComponentResource):
    """A distributed training job wired for the cluster the profile describes: a PyTorchJob (torchrun), MPIJob
    (mpirun) or TFJob with the fabric's networks, RDMA resources, IPC_LOCK, NCCL env, /dev/shm, gang scheduling,
    GPU placement and the checkpoint claim.

    Needs: a fastpath platform (its profile) with the Training Operator; Volcano for queues.
    Output: `contract`, the job's effective wiring.

    Example:
        TrainingJob("llama-ft", TrainingJobArgs(
            spec=JobSpec(name="llama-ft", image="nvcr.io/nvidia/pytorch:25.10-py3",
                         command=["python", "train.py"], nodes=4),
            profile=platform.profile), opts=pulumi.ResourceOptions(depends_on=[platform]))
    """

    def __init__(self, name: str, args: TrainingJobArgs, opts: pulumi.ResourceOptions | None = None):
        resolved = resolve(args.spec, args.profile, f"TrainingJob {name}")  # refuse before registering anything
        super().__init__("fastpath:jobs:TrainingJob", name, None, opts)
        self.manifest = manifest(resolved)
        self.contract = contract(resolved)
        if (verdict := self.contract.get("fullCluster")) and verdict.startswith("never"):
            # Not refused: on a cluster whose other queues are idle it starts. Said before it waits for days.
            pulumi.log.warn(f"job {args.spec.name}: its gang {verdict}", self)
        # Passed on, or the job could be created before the Training Operator's CRD or the Volcano queue exists.
        depends_on = k8s.inherited_depends_on(opts)
        files = files_configmap(resolved)
        if files is not None:  # before the pods that mount it
            cm = k8s.apply(files, pulumi.ResourceOptions(parent=self, depends_on=depends_on))
            depends_on = k8s.plus(depends_on, cm)
        depends_on = register_prerequisites(prerequisites(resolved), self, depends_on)
        # A changed job is a new job: the operator would take a spec edit in place, and only pods recreated
        # later would run the new code beside survivors on the old (the v1.9.4 webhook does not refuse it). Only
        # what the operator reads when the job ends is patched in place (IN_PLACE).
        self.job = k8s.apply(
            self.manifest,
            pulumi.ResourceOptions(
                parent=self,
                depends_on=depends_on,
                replace_on_changes=replace_paths(self.manifest),
                delete_before_replace=True,
            ),
        )
        self.rendezvous = []
        if args.spec.framework == "pytorch" and resolved.api == "v1":
            # Owned by the job: deleted with it (kubectl delete, a replacement), never left behind.
            owner = self.job.metadata.apply(
                lambda m: [
                    {
                        "apiVersion": self.manifest["apiVersion"],
                        "kind": self.manifest["kind"],
                        "name": self.manifest["metadata"]["name"],
                        "uid": (m or {}).get("uid"),
                    }
                ]
            )
            # A replaced job is a new owner: the old job's foreground deletion has taken these objects along, so an
            # update would find nothing (404) and fail the `up`. Replaced too, deleted first (a delete of what is
            # already gone succeeds), they come back for the new job.
            for m in rendezvous(resolved):
                m["metadata"]["ownerReferences"] = owner
                self.rendezvous.append(
                    k8s.apply(
                        m,
                        pulumi.ResourceOptions(
                            parent=self,
                            depends_on=depends_on,
                            replace_on_changes=["metadata.ownerReferences"],
                            delete_before_replace=True,
                        ),
                    )
                )
        self.register_outputs({"contract": self.contract})
