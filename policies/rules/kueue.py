"""Kueue: topology requests its webhook accepts, one gang scheduler per job, and labels that reach a queue."""

# What Kueue v0.19.2 does with a job's labels and its pod templates' annotations, restated from
# kubernetes-sigs/kueue@v0.19.2. No manifest shows Kueue's config: an integration is taken as enabled, and the
# TopologyAwareScheduling gate as on (beta and on by default at this tag, pkg/features/kube_features.go).

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from components.jobs.resolve import KUEUE_PRIORITY_LABEL, KUEUE_QUEUE_LABEL
from policies.engine import ADVISORY, MANDATORY, Context, Finding, rule
from policies.pods import dict_or_empty, int_or_none, pod_annotations
from policies.podspecs import REPLICA_SPECS, PodTemplate
from policies.rules.gang import (
    KUEUE_INTEGRATIONS,
    KUEUE_MPIJOB_VERSION,
    kueue_gap,
    kueue_integrated,
    ungang,
)

# Podset annotations on a pod template's metadata (kubernetes-sigs/kueue@v0.19.2:apis/kueue/v1beta2/topology_types.go).
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"
SLICE = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
CONSTRAINTS = "kueue.x-k8s.io/podset-slice-required-topology-constraints"
GROUP = "kueue.x-k8s.io/podset-group-name"
PODSET = "kueue.x-k8s.io/podset-"

RUNTIMES = ("TrainingRuntime", "ClusterTrainingRuntime")
# The kinds whose own webhook also bounds the slice size by the podset's pod count
# (ValidateSliceSizeAnnotationUpperBound): job_webhook.go, jobset_webhook.go, kubeflowjob_controller.go,
# mpijob_webhook.go, leaderworkerset_webhook.go, raycluster/common.go and raycluster_webhook.go, trainjob_webhook.go.
# A runtime is not: its pod count is each TrainJob's numNodes, bounded on the TrainJob.
BOUNDED = frozenset({"Job", "JobSet", "MPIJob", "LeaderWorkerSet", "RayCluster", "RayJob", "RayService", "TrainJob"})
# The kinds whose webhook checks podset groups (ValidatePodSetGroupingTopology): jobset, leaderworkerset, mpijob,
# raycluster, rayjob and rayservice; not the Kubeflow v1 jobs nor TrainJob.
GROUPED = frozenset({"JobSet", "LeaderWorkerSet", "MPIJob", "RayCluster", "RayJob", "RayService"})
# Kinds validated at create by the pod webhook only, through the pods they make (validate--v1-pod, on for every pod of
# the namespaces Kueue manages when the pod integration is enabled, as in the chart).
POD_LEVEL = frozenset({"Pod", "Deployment", "StatefulSet"})

# k8s.io/apimachinery validation.IsQualifiedName, which metavalidation.ValidateLabelName applies.
_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# Go's strconv.ParseBool and ParseInt(s, 10, 32).
_BOOLS = frozenset({"1", "t", "T", "TRUE", "true", "True", "0", "f", "F", "FALSE", "false", "False"})
_INT = re.compile(r"^[+-]?[0-9]+$")
INT32 = (-(2**31), 2**31 - 1)


def _text(value: Any) -> str:
    """An annotation's value as the API server would hold it (a YAML number or boolean written unquoted)."""
    if isinstance(value, bool):
        return str(value).lower()
    return value if isinstance(value, str) else str(value)


def _label_name(value: str) -> bool:
    prefix, _, name = value.rpartition("/")
    if "/" in prefix or (value.count("/") == 1 and (not prefix or len(prefix) > 253 or not _SUBDOMAIN.match(prefix))):
        return False
    return 0 < len(name) <= 63 and bool(_NAME.match(name))


def _int32(value: str) -> int | None:
    if not _INT.match(value):
        return None
    n = int(value)
    return n if INT32[0] <= n <= INT32[1] else None


def _constraints(raw: str) -> tuple[list[tuple[str, int]] | None, list[str]]:
    """The multi-layer constraints annotation parsed as Kueue's JSON decoding would, and what its validation
    refuses (validateSliceRequiredTopologyConstraintsAnnotation)."""
    try:
        entries = json.loads(raw)
    except ValueError as err:
        return None, [f"{CONSTRAINTS} is not a JSON array ({err})"]
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        return None, [f"{CONSTRAINTS} is not a JSON array of {{topology, size}} objects"]
    parsed = []
    for e in entries:
        fields = {str(k).lower(): v for k, v in e.items()}  # encoding/json matches field names case-insensitively
        topology, size = fields.get("topology", ""), fields.get("size", 0)
        if not isinstance(topology, str) or isinstance(size, bool) or not isinstance(size, int):
            return None, [f"{CONSTRAINTS} entry {e} is not {{topology: string, size: integer}}"]
        parsed.append((topology, size))
    if not 1 <= len(parsed) <= 3:
        return None, [f"{CONSTRAINTS} has {len(parsed)} entries: topology constraints take between 1 and 3"]
    out = []
    seen: dict[str, int] = {}
    for i, (topology, size) in enumerate(parsed):
        if not _label_name(topology):
            out.append(f"{CONSTRAINTS}[{i}].topology {topology!r} is not a label name")
        if size < 1:
            out.append(f"{CONSTRAINTS}[{i}].size is {size}, not 1 or more")
        if topology in seen:
            out.append(f"{CONSTRAINTS}[{i}].topology {topology} repeats entry {seen[topology]}")
        seen.setdefault(topology, i)
    for i in range(len(parsed) - 1):
        outer, inner = parsed[i][1], parsed[i + 1][1]
        if inner > 0 and outer % inner:
            out.append(f"{CONSTRAINTS}[{i + 1}].size {inner} does not divide the layer above it ({outer})")
    return parsed, out


def tas_problems(annotations: dict) -> list[str]:
    """What kubernetes-sigs/kueue@v0.19.2:pkg/controller/jobframework/tas_validation.go ValidateTASPodSetRequest
    refuses in one pod template's annotations."""
    a = {k: _text(v) for k, v in annotations.items() if isinstance(k, str) and k.startswith(PODSET)}
    if not a:
        return []
    out = []
    modes = [k for k in (REQUIRED, PREFERRED, UNCONSTRAINED) if k in a]
    if len(modes) > 1:
        out.append(f"{' and '.join(modes)} are both set: a podset takes one of required, preferred or unconstrained")
    for key in (REQUIRED, PREFERRED, SLICE):
        if key in a and not _label_name(a[key]):
            out.append(f"{key} is {a[key]!r}, not a node label name")
    if GROUP in a:
        if a[GROUP].isascii() and a[GROUP].isdigit() and int(a[GROUP]) < 2**64:  # Go's ParseUint succeeds
            out.append(f"{GROUP} is {a[GROUP]!r}: a group name must not be a number")
        out += [f"{GROUP} may not be set with {key}" for key in (SLICE_SIZE, SLICE) if key in a]
        if REQUIRED not in a and PREFERRED not in a:
            out.append(f"{GROUP} needs {REQUIRED} or {PREFERRED}")
    if UNCONSTRAINED in a and a[UNCONSTRAINED] not in _BOOLS:
        out.append(f"{UNCONSTRAINED} is {a[UNCONSTRAINED]!r}, not a boolean")
    if SLICE_SIZE in a:
        size = _int32(a[SLICE_SIZE])
        if size is None:
            out.append(f"{SLICE_SIZE} is {a[SLICE_SIZE]!r}, not an integer")
        elif size < 1:
            out.append(f"{SLICE_SIZE} is {size}, not 1 or more")
    if SLICE in a and SLICE_SIZE not in a:
        out.append(f"{SLICE} is set without {SLICE_SIZE}, which says how many pods each slice holds")
    if SLICE_SIZE in a and SLICE not in a:
        out.append(f"{SLICE_SIZE} is set without {SLICE}, the level each slice must fit in")
    if CONSTRAINTS in a:
        out += [f"{CONSTRAINTS} may not be set with {key}" for key in (SLICE, SLICE_SIZE) if key in a]
        if GROUP in a:
            out.append(f"{GROUP} may not be set with {CONSTRAINTS}")
        out += _constraints(a[CONSTRAINTS])[1]
    return out


def _count(value: Any, default: int = 1) -> int | None:
    return default if value is None else int_or_none(value)


def _index(path: str, key: str) -> int | None:
    m = re.search(re.escape(key) + r"\[(\d+)\]", path)
    return int(m.group(1)) if m else None


def podset_count(obj: dict, t: PodTemplate) -> int | None:
    """The pod count Kueue gives the template's podset (its PodSets for the kind), or None when not readable."""
    kind, spec = obj.get("kind"), dict_or_empty(obj.get("spec"))
    if kind == "Job":  # job_controller.go podsCount: parallelism, or completions when fewer
        parallelism, completions = _count(spec.get("parallelism")), _count(spec.get("completions"), 0)
        if parallelism is None or completions is None:
            return None
        return min(parallelism, completions) if spec.get("completions") is not None else parallelism
    if kind == "JobSet":  # jobset_controller.go podsCount: replicas x (parallelism, or completions when fewer)
        i = _index(t.path, "spec.replicatedJobs")
        jobs = spec.get("replicatedJobs")
        if i is None or not isinstance(jobs, list) or i >= len(jobs):
            return None
        rj = dict_or_empty(jobs[i])
        job = dict_or_empty(dict_or_empty(rj.get("template")).get("spec"))
        replicas, parallelism = _count(rj.get("replicas")), _count(job.get("parallelism"))
        completions = _count(job.get("completions"), 0)
        if replicas is None or parallelism is None or completions is None:
            return None
        return replicas * (min(parallelism, completions) if job.get("completions") is not None else parallelism)
    if kind == "LeaderWorkerSet":  # leaderworkerset_reconciler.go podSets: one group's leader and workers
        lwt = dict_or_empty(spec.get("leaderWorkerTemplate"))
        size = _count(lwt.get("size"))
        if size is None:
            return None
        return 1 if t.role == "leader" else size - (1 if lwt.get("leaderTemplate") is not None else 0)
    if kind in ("RayCluster", "RayJob", "RayService"):  # raycluster/common.go BuildPodSets, effectiveWorkerCount
        if t.role in ("head", "submitter"):
            return 1
        i = _index(t.path, "workerGroupSpecs")
        base = {"RayCluster": spec, "RayJob": spec.get("rayClusterSpec"), "RayService": spec.get("rayClusterConfig")}
        groups = dict_or_empty(base[kind]).get("workerGroupSpecs")
        if i is None or not isinstance(groups, list) or i >= len(groups):
            return None
        group = dict_or_empty(groups[i])
        replicas, hosts = _count(group.get("replicas")), _count(group.get("numOfHosts"))
        if replicas is None or hosts is None:
            return None
        return replicas * hosts if hosts > 1 else replicas
    # Kubeflow jobs and MPIJob: the replica type's replicas (default 1); a runtime and a TrainJob: each replicated
    # job's pods as the trainer sets them (mlPolicy.numNodes for `node`), which the extractor counted.
    return t.replicas


def _bounded(obj: dict) -> bool:
    """Whether Kueue bounds the slice size by the podset's pods at create. Not judged on a runtime: its pod count
    is each TrainJob's numNodes, judged on the TrainJob."""
    kind = obj.get("kind")
    return (kind in BOUNDED or kind in REPLICA_SPECS) and kueue_integrated(obj)


def _refusal(obj: dict) -> str:
    """Who refuses the object, and when."""
    kind = obj.get("kind")
    if kind in RUNTIMES or kind == "TrainJob":
        return "Kueue's webhook refuses any TrainJob on this runtime at create"
    if kind == "CronJob":
        return "Kueue's webhook refuses each Job it creates"
    if kind == "Pod":
        return "Kueue's pod webhook refuses the Pod at create"
    if kind in POD_LEVEL or not kueue_integrated(obj):
        return "Kueue's pod webhook refuses its pods at create"
    return f"Kueue's webhook refuses the {kind} at create"


def _unreadable(ctx: Context) -> bool:
    """A count the extractor had to guess (a template variable): the bound is not judged (judgeable says so)."""
    return any("not a number" in p for p in ctx.problems)


def _group_problems(obj: dict, tpls: list[PodTemplate], counts: dict[str, int | None]) -> list[str]:
    """ValidatePodSetGroupingTopology: a podset group is two podsets, one of them a single pod, with the same
    required or preferred level."""
    groups: dict[str, list[PodTemplate]] = {}
    for t in tpls:
        name = pod_annotations(t).get(GROUP)
        if name is not None:
            groups.setdefault(_text(name), []).append(t)
    out = []
    for name, members in groups.items():
        if len(members) != 2:
            out.append(f"{GROUP} {name!r} names {len(members)} podset(s): a group is exactly 2")
            continue
        sizes = [counts.get(t.path) for t in members]
        if None not in sizes and 1 not in sizes:
            out.append(f"{GROUP} {name!r} joins podsets of {sizes[0]} and {sizes[1]} pods: one must be a single pod")
        asks = [tuple(_text(pod_annotations(t).get(k, "")) for k in (REQUIRED, PREFERRED)) for t in members]
        if asks[0] != asks[1] or asks[0] == ("", ""):
            out.append(f"{GROUP} {name!r}: both podsets must name the same {REQUIRED} or {PREFERRED}")
    return out


@rule(
    "kueue-topology-annotations",
    "Kueue topology annotations are ones its webhook accepts",
    level=MANDATORY,
    description="The Kueue podset annotations on pod templates (podset-required-topology, -preferred-topology, "
    "-unconstrained-topology, podset-slice-required-topology with podset-slice-size, "
    "-slice-required-topology-constraints, podset-group-name) pass Kueue v0.19.2's own validation "
    "(ValidateTASPodSetRequest, ValidateSliceSizeAnnotationUpperBound, ValidatePodSetGroupingTopology): one of "
    "required, preferred or unconstrained; a slice level and a slice size together, the size an integer from 1 to "
    "the podset's pod count; label names for levels; groups of two podsets. Kueue's webhook refuses anything else "
    "when the job is created (for kinds Kueue does not integrate, when each pod is).",
    remediation="keep one of required, preferred or unconstrained per pod template, and set "
    "podset-slice-required-topology and podset-slice-size together, the size at most the podset's pods",
    kinds=None,
)
def kueue_topology_annotations(ctx: Context) -> Iterator[Finding]:
    """Restates kubernetes-sigs/kueue@v0.19.2:pkg/controller/jobframework/tas_validation.go, which every
    integration's ValidateCreate calls (job_webhook.go validateTopologyRequest, jobset_webhook.go,
    kubeflowjob_controller.go ValidateOnCreate, mpijob_webhook.go, leaderworkerset_webhook.go, raycluster/common.go,
    trainjob_webhook.go; pod_webhook.go validateTopologyRequest for every pod) whatever the job's queue label: a
    refused create, found before `pulumi up` half-applies the stack."""
    obj, tpls = ctx.obj, ctx.templates
    if not any(k.startswith(PODSET) for t in tpls for k in pod_annotations(t) if isinstance(k, str)):
        return
    refused = _refusal(obj)
    bounded = _bounded(obj) and not _unreadable(ctx)
    counts = {t.path: podset_count(obj, t) for t in tpls} if bounded else {}
    found = False
    for t in tpls:
        annotations = pod_annotations(t)
        problems = tas_problems(annotations)
        count = counts.get(t.path)
        if count is not None and not problems:
            size = _int32(_text(annotations[SLICE_SIZE])) if SLICE_SIZE in annotations else None
            if size is not None and size > count:
                problems.append(f"{SLICE_SIZE} is {size}, more than the podset's {count} pods")
            if CONSTRAINTS in annotations:
                layers = _constraints(_text(annotations[CONSTRAINTS]))[0]
                if layers and layers[0][1] > count:
                    problems.append(f"{CONSTRAINTS}[0].size is {layers[0][1]}, more than the podset's {count} pods")
        where = "metadata.annotations" if t.path == "spec" else f"{t.path}.metadata.annotations"
        for problem in problems:
            found = True
            yield Finding(f"{'pods' if t.role == 'pod' else t.role + ' pods'} ({where}): {problem}: {refused}")
    if not found and obj.get("kind") in GROUPED and kueue_integrated(obj) and not _unreadable(ctx):
        for problem in _group_problems(obj, tpls, counts or {t.path: podset_count(obj, t) for t in tpls}):
            yield Finding(f"{problem}: {refused}")


def _volcano(ctx: Context) -> list[str]:
    """What asks Volcano to gang-schedule or queue the job's pods."""
    obj, spec = ctx.obj, dict_or_empty(ctx.obj.get("spec"))
    out = []
    roles = [t.role for t in ctx.templates if t.template["spec"].get("schedulerName") == "volcano"]
    if roles:
        out.append(f"schedulerName volcano ({', '.join(roles)})")
    policy = dict_or_empty(spec.get("runPolicy")).get("schedulingPolicy")
    if obj.get("kind") in REPLICA_SPECS and isinstance(policy, dict):
        out.append("runPolicy.schedulingPolicy")
    runtime = ctx.pairing.runtime if ctx.pairing is not None else None
    if obj.get("kind") == "TrainJob" and runtime is not None:
        pgp = dict_or_empty(dict_or_empty(runtime.get("spec")).get("podGroupPolicy"))
        if pgp.get("volcano") is not None:
            out.append(f"podGroupPolicy.volcano of {ctx.pairing.ref if ctx.pairing else 'its runtime'}")
    return out


# Where a Kueue-queued job gets its Volcano PodGroup, and what follows.
_TRAINING_OPERATOR = (
    "once Kueue admits it against its ClusterQueue's quota and unsuspends it, the Training Operator (run with "
    "--gang-scheduler-name=volcano) makes its Volcano PodGroup and creates no pod until Volcano's own queue admits "
    "that PodGroup (kubeflow/trainer@v1.9.4:pkg/controller.v1/common/job.go ReconcileJobs, "
    "pkg/controller.v1/control/podgroup_control.go DelayPodCreationDueToPodGroup; suspended, it deletes the "
    "PodGroup): the job holds Kueue quota with no pod running until waitForPodsReady (on by default at Kueue "
    "v0.19, 30 minutes) evicts and requeues it, over and over while Volcano's queue is full"
)
_TRAINER = (
    "the Trainer makes the Volcano PodGroup, minResources the whole job, even while Kueue keeps the TrainJob "
    "suspended (kubeflow/trainer@v2.3.0:pkg/runtime/framework/plugins/volcano/volcano.go Build), and Volcano's "
    "enqueue reserves that much of its queue for a PodGroup it marks Inqueue "
    "(volcano-sh/volcano@v1.15.1:pkg/scheduler/plugins/proportion/proportion.go): a job Kueue has not admitted "
    "holds Volcano's queue, and one Kueue admitted waits on it"
)
_GENERIC = (
    "Kueue admits it against its ClusterQueue's quota, then Volcano puts its pods through PodGroups and a queue of "
    "its own (volcano-sh/volcano@v1.15.1:pkg/controllers/podgroup/pg_controller_handler.go): a job Kueue admitted "
    "can wait in Volcano's queue holding Kueue quota until waitForPodsReady (on by default at Kueue v0.19) evicts "
    "it, and Volcano's preemption and reclaim evict pods of a job Kueue counts as admitted"
)


@rule(
    "kueue-volcano-gang",
    "A Kueue-queued job does not also go through Volcano",
    level=ADVISORY,
    description="A job with the kueue.x-k8s.io/queue-name label, of a kind Kueue admits, does not also ask Volcano "
    "for its gang (schedulerName volcano, runPolicy.schedulingPolicy, a runtime's podGroupPolicy.volcano): "
    "Kueue and Volcano then each admit it against a quota of their own, in turn. Kueue-admitted jobs wait for "
    "Volcano's queue while holding Kueue quota (waitForPodsReady evicts and requeues them), a TrainJob's PodGroup "
    "holds Volcano's queue while Kueue still keeps the job suspended, and two preemption policies evict the same "
    "pods.",
    remediation="drop the Volcano side (schedulerName, runPolicy.schedulingPolicy, podGroupPolicy.volcano; the "
    "Training Operator without --gang-scheduler-name), or the queue label",
    kinds={k for _, k in KUEUE_INTEGRATIONS},
)
def kueue_volcano_gang(ctx: Context) -> Iterator[Finding]:
    """Two gang schedulers on one job, from the sources cited in the messages. Kueue's TAS itself works under
    Volcano (its scheduling gate is honoured: volcano-sh/volcano@v1.15.1:pkg/scheduler/api/job_info.go
    calSchedulingGated); the two admissions and preemptions are the trouble."""
    obj = ctx.obj
    labels = dict_or_empty(dict_or_empty(obj.get("metadata")).get("labels"))
    if not ctx.templates or KUEUE_QUEUE_LABEL not in labels or not kueue_integrated(obj):
        return
    asks = _volcano(ctx)
    if not asks:
        return
    kind = obj.get("kind")
    if kind == "TrainJob":
        why, also = _TRAINER, ""
    elif kind in REPLICA_SPECS and obj.get("apiVersion") != KUEUE_MPIJOB_VERSION:
        why = _TRAINING_OPERATOR
        also = " (and run the Training Operator without --gang-scheduler-name, which gives every job a PodGroup)"
    else:
        why, also = _GENERIC, ""
    yield Finding(
        f"queued in Kueue ({KUEUE_QUEUE_LABEL}: {labels[KUEUE_QUEUE_LABEL]}) and sent to Volcano "
        f"({', '.join(asks)}): {why}. Keep one: drop {', '.join(asks)}{also}, or the queue label"
    )


def _job_labels(obj: dict) -> dict:
    """The labels Kueue reads the queue from: a CronJob's are its jobTemplate's (each Job's), the docs say
    (kubernetes-sigs/kueue@v0.19.2:site/content/en/docs/tasks/run/run_cronjobs.md)."""
    if obj.get("kind") == "CronJob":
        template = dict_or_empty(dict_or_empty(obj.get("spec")).get("jobTemplate"))
        return dict_or_empty(dict_or_empty(template.get("metadata")).get("labels"))
    return dict_or_empty(dict_or_empty(obj.get("metadata")).get("labels"))


@rule(
    "kueue-queue-label",
    "Kueue's labels sit on a job Kueue queues",
    level=ADVISORY,
    description="kueue.x-k8s.io/priority-class comes with kueue.x-k8s.io/queue-name (without it Kueue, whose "
    "manageJobsWithoutQueueName defaults to false, leaves the job alone unless the namespace has a LocalQueue "
    "named default), and the queue label is on a kind Kueue v0.19.2 has an integration for (not a "
    "kubeflow.org/v1 MPIJob, a Volcano Job, a TrainingRuntime, or a CronJob's own metadata instead of its "
    "jobTemplate's): elsewhere it does nothing, and the job runs outside every Kueue quota.",
    remediation="add kueue.x-k8s.io/queue-name next to the priority class; put the queue label on an object Kueue "
    "queues (a CronJob's jobTemplate, the TrainJob, mpi-operator's v2beta1 MPIJob)",
    kinds=None,
    trainer_alone=True,
)
def kueue_queue_label(ctx: Context) -> Iterator[Finding]:
    """kubernetes-sigs/kueue@v0.19.2:pkg/controller/constants/constants.go QueueLabel, WorkloadPriorityClassLabel;
    pkg/controller/jobframework/reconciler.go ExtractPriority reads the priority label of a job Kueue manages, and
    defaults.go ApplyDefaultLocalQueue adds the queue label only when a LocalQueue named `default` exists."""
    obj = ctx.obj
    if not ctx.templates:
        return  # no workload: nothing for Kueue to queue
    labels = _job_labels(obj)
    own = dict_or_empty(dict_or_empty(obj.get("metadata")).get("labels"))
    if KUEUE_PRIORITY_LABEL in labels and KUEUE_QUEUE_LABEL not in labels:
        fix = (
            f"add {KUEUE_QUEUE_LABEL}"
            if obj.get("kind") == "CronJob" or kueue_integrated(obj)
            else f"and Kueue v0.19.2 has no integration for {obj.get('apiVersion') or ''} {obj.get('kind')} at all"
        )
        yield Finding(
            f"{KUEUE_PRIORITY_LABEL}: {labels[KUEUE_PRIORITY_LABEL]} without {KUEUE_QUEUE_LABEL}: Kueue manages "
            "only jobs with a queue (manageJobsWithoutQueueName defaults to false), so the priority class does "
            f"nothing unless the namespace has a LocalQueue named default; {fix}"
        )
    if obj.get("kind") == "CronJob" and KUEUE_QUEUE_LABEL in own and KUEUE_QUEUE_LABEL not in labels:
        yield Finding(
            f"{KUEUE_QUEUE_LABEL} is on the CronJob's own metadata, which Kueue never reads: each Job it creates "
            "goes unqueued; put the label in spec.jobTemplate.metadata.labels"
        )
        return
    if KUEUE_QUEUE_LABEL not in labels or obj.get("kind") == "CronJob" or kueue_integrated(obj):
        return
    kind = obj.get("kind")
    if kind in REPLICA_SPECS or kind in RUNTIMES or kind == "Job":
        if ungang(ctx) is not None:
            return  # gang-scheduling reports the same label, with what to do about the gang
        if kind in RUNTIMES:
            yield Finding(f"{kueue_gap(obj)}; put the label on each TrainJob")
            return
        if kind == "MPIJob":
            fix = f"drop the label, or use mpi-operator's {KUEUE_MPIJOB_VERSION} MPIJob, which Kueue queues"
        else:
            fix = "drop the label, or use a kind Kueue queues"
        yield Finding(f"{kueue_gap(obj)}, so the job runs outside every Kueue quota and Kueue never preempts it; {fix}")
