"""TrainJobs and the runtimes they name: a Kubeflow Trainer v2 TrainJob holds no pod template, its pods are its
runtime's, merged with what the TrainJob sets (kubeflow/trainer@v2.3.0:pkg/runtime/core/trainingruntime.go and
pkg/runtime/framework/plugins/jobset/builder.go). The rules judge a TrainJob by those pods when its runtime is among
the objects checked, and say which runtime they could not see otherwise.

    RuntimeIndex(objects)       every ClusterTrainingRuntime and TrainingRuntime of one lint (or one stack), built once
    pair(train_job, index)      the runtime it names, and its effective pods (components.jobs.runtime_v2.controller)
                                or why not

Choices an experienced reader may look for:
- The runtime is found the way the controller finds it (kubeflow/trainer@v2.3.0:
  pkg/runtime/core/clustertrainingruntime.go, trainingruntime.go): `runtimeRef.kind` defaults to
  ClusterTrainingRuntime, and a TrainingRuntime is looked up in the TrainJob's own namespace only, so one of the
  same name elsewhere does not count.
- The effective pods are extracted by the same reader as a runtime's own templates, at the same paths and with
  the same roles (replicated job names), so a finding the runtime already has reads the same on the TrainJob and
  is reported once, on the runtime (engine.evaluate drops it from the TrainJob).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from components.jobs.resolve import DEFAULT_LOCAL_QUEUE
from components.jobs.runtime_v2.controller import effective_jobset
from policies.pods import dict_or_empty, namespace_of
from policies.podspecs import Extracted, jobset_templates

RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")
# What a merge can raise on objects nobody validated (the linter reads manifests the API server never saw).
MERGE_ERRORS = (ValueError, KeyError, TypeError, AttributeError, IndexError)


@dataclass(frozen=True)
class RuntimeRef:
    kind: str
    namespace: str  # "" for a ClusterTrainingRuntime
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace + '/' if self.namespace else ''}{self.name}"

    def kubectl(self) -> str:
        """The command that fetches it, for the message telling the user to lint the two together."""
        namespace = f" -n {self.namespace}" if self.namespace else ""
        return f"kubectl get {self.kind.lower()}{namespace} {self.name} -o yaml"


def runtime_ref(train_job: dict) -> RuntimeRef | None:
    """The runtime a TrainJob names, or None when spec.runtimeRef names none."""
    ref = dict_or_empty(dict_or_empty(train_job.get("spec")).get("runtimeRef"))
    name = ref.get("name")
    if not isinstance(name, str) or not name:
        return None
    kind = str(ref.get("kind") or "ClusterTrainingRuntime")
    return RuntimeRef(kind, namespace_of(train_job) if kind == "TrainingRuntime" else "", name)


class RuntimeIndex:
    """The runtimes among the objects being checked, by the reference a TrainJob would use. `memo` keeps what the
    rules work out once per runtime and lint (its own findings)."""

    def __init__(self, objects: Iterable[Any] = ()) -> None:
        self.runtimes: dict[RuntimeRef, dict] = {}
        self.memo: dict[Any, Any] = {}
        # Namespaces with a Kueue LocalQueue `default`: Kueue's webhooks label every unlabelled TrainJob there with
        # it (kubernetes-sigs/kueue@v0.19.2:pkg/controller/jobframework/defaults.go defaultLocalQueueApplies).
        self.kueue_defaulted: set[str] = set()
        for obj in objects:
            if (
                isinstance(obj, dict)
                and obj.get("kind") == "LocalQueue"
                and dict_or_empty(obj.get("metadata")).get("name") == DEFAULT_LOCAL_QUEUE
            ):
                if str(obj.get("apiVersion", "")).startswith("kueue.x-k8s.io/"):
                    self.kueue_defaulted.add(namespace_of(obj))
            if not isinstance(obj, dict) or obj.get("kind") not in RUNTIME_KINDS:
                continue
            name = dict_or_empty(obj.get("metadata")).get("name")
            if not isinstance(name, str) or not name:
                continue
            kind = obj["kind"]
            self.runtimes[RuntimeRef(kind, namespace_of(obj) if kind == "TrainingRuntime" else "", name)] = obj

    def get(self, ref: RuntimeRef) -> dict | None:
        return self.runtimes.get(ref)


@dataclass
class Pairing:
    """A TrainJob and its runtime: the pods to judge, or why the TrainJob's pods could not be judged."""

    ref: RuntimeRef | None
    runtime: dict | None = None
    effective: Extracted | None = None  # the pods the controller makes, when the runtime was seen and merged
    derived: dict | None = None  # effective_jobset's answer, which those pods come from
    problem: str | None = None  # why not, as a finding's message


def pair(train_job: dict, index: RuntimeIndex | None) -> Pairing:
    ref = runtime_ref(train_job)
    if ref is None:
        return Pairing(
            None,
            problem="spec.runtimeRef names no runtime: the TrainJob's pods could not be judged, only "
            "its trainer's image and env; name a runtime in spec.runtimeRef.name",
        )
    runtime = index.get(ref) if index is not None else None
    if runtime is None:
        return Pairing(
            ref,
            problem=(
                f"runtimeRef names {ref}, which is not among the objects checked: the pods it gives this TrainJob "
                "(shared memory, fabric wiring, gang scheduling) could not be judged, only the trainer's image and "
                f"env; lint the TrainJob together with its runtime ({ref.kubectl()})"
            ),
        )
    try:
        derived = effective_jobset(train_job, runtime)
        effective = jobset_templates(dict_or_empty(derived.get("jobset")).get("replicatedJobs"))
    except MERGE_ERRORS as err:
        return Pairing(
            ref,
            runtime,
            problem=(
                f"could not be merged with {ref} the way the trainer controller would ({type(err).__name__}: "
                f"{str(err)[:160]}): its pods were not judged; fix the TrainJob or the runtime (the trainer's webhook "
                "refuses such objects)"
            ),
        )
    return Pairing(ref, runtime, effective, derived)
