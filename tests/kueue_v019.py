"""What Kueue v0.19.2 decides for a workload, as small pure functions the tests apply to the Kueue objects fastpath
renders (the plain dicts of a manifests.yaml: kueue.x-k8s.io/v1beta2 ClusterQueue, Cohort, ResourceFlavor,
Topology, WorkloadPriorityClass, LocalQueue). Each one restates the upstream rule it models, read at
kubernetes-sigs/kueue@v0.19.2 (commit 8eab68778fc1; K: below) with the chart's default configuration: fair
sharing off (classical preemption), feature gates at their defaults. If upstream changes, these and
tests/test_kueue_rules.py move together, on purpose.

What is left out, on purpose:
- one resource (nvidia.com/gpu by default) in one flavor per ClusterQueue: no flavor fungibility, no
  resource groups with several flavors, no cpu/memory (K: a CQ must still cover every resource a pod requests
  under the default BlockUndeclared quota check, flavorassigner.go findFlavorForPodSets);
- flat cohorts (a Cohort with parentName is refused), no fair sharing, no admission-fair-sharing ordering;
- a workload's podsets are summed (gpus) and placed as one TAS podset (no leader/worker groups);
- no evicted-but-not-yet-gone victims, no scheduling cycle with several heads (one pending workload at a time).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

GPU = "nvidia.com/gpu"
HOSTNAME = "kubernetes.io/hostname"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # K:pkg/controller/constants/constants.go QueueLabel
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"  # same file, WorkloadPriorityClassLabel
NEVER = "Never"


@dataclass(frozen=True)
class Workload:
    """An admitted or pending workload (one Kueue Workload: a whole job, every podset)."""

    name: str
    queue: str  # ClusterQueue name
    gpus: int  # total nvidia.com/gpu it requests (sum over podsets)
    priority: int  # effective priority (WPC value)
    admitted_at: int = 0  # order of admission (QuotaReserved time), larger = later
    pods: int = 0  # pods (for TAS), 0 = not TAS
    gpus_per_pod: int = 0
    created_at: int = 0  # queue-order timestamp (creationTimestamp), read only by LowerOrNewerEqualPriority


@dataclass(frozen=True)
class Queue:
    """One ClusterQueue's quota for the modelled resource and its preemption policy."""

    name: str
    cohort: str | None
    covered: bool  # some resource group covers the resource
    nominal: int
    borrowing_limit: int | None  # None: unlimited
    lending_limit: int | None  # None: lends all of nominal
    within_cluster_queue: str = NEVER
    reclaim_within_cohort: str = NEVER
    borrow_within_cohort: str = NEVER
    max_priority_threshold: int | None = None
    namespace_selector: Mapping | None = None


@dataclass(frozen=True)
class Quotas:
    queues: Mapping[str, Queue]
    cohorts: Mapping[str, int]  # cohort name -> the Cohort object's own nominal quota (0 when only named by CQs)


@dataclass(frozen=True)
class Decision:
    kind: str  # admit | preempt | wait | nofit
    borrows: bool = False  # after admission (for preempt: once the victims are gone) usage > nominal
    victims: tuple[str, ...] = ()
    reason: str = ""  # the Workload's QuotaReserved reason, or the flavor assigner's message


# --- objects -> numbers ------------------------------------------------------------------------------------------


def _amount(value: object) -> int:
    """A whole-number resource.Quantity ("8", 8). GPUs are counted; anything with a suffix is refused."""
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    raise ValueError(f"not a whole-number quantity: {value!r}")


def _resource_quota(groups: Iterable[Mapping], resource: str, flavor: str | None) -> Mapping | None:
    """The {name, nominalQuota, borrowingLimit?, lendingLimit?} entry for `resource` in the one flavor that covers
    it (K:apis/kueue/v1beta2/clusterqueue_types.go ResourceGroup, FlavorQuotas, ResourceQuota)."""
    found = [(f["name"], r) for g in groups if resource in g.get("coveredResources", []) for f in g.get("flavors", []) for r in f.get("resources", []) if r["name"] == resource]
    if flavor is not None:
        found = [(name, r) for name, r in found if name == flavor]
    if len(found) > 1:
        raise ValueError(f"{resource} is in flavors {[n for n, _ in found]}: the model handles one flavor (pass flavor=)")
    return found[0][1] if found else None


def quotas(cluster_queues: Iterable[Mapping], cohorts: Iterable[Mapping] = (), resource: str = GPU, flavor: str | None = None) -> Quotas:
    """Read each ClusterQueue's nominalQuota, borrowingLimit, lendingLimit, cohortName, preemption and
    namespaceSelector. Preemption defaults are the CRD's (K:apis/kueue/v1beta2/clusterqueue_types.go
    ClusterQueuePreemption: withinClusterQueue, reclaimWithinCohort and borrowWithinCohort.policy all Never).
    A cohortName with no Cohort object behind it is an empty cohort that only links CQs (CohortName doc); a Cohort
    object may hold quota of its own (K:apis/kueue/v1beta2/cohort_types.go CohortSpec.ResourceGroups)."""
    own: dict[str, int] = {}
    for c in cohorts:
        if c["spec"].get("parentName"):
            raise NotImplementedError("hierarchical cohorts are not modelled")
        rq = _resource_quota(c["spec"].get("resourceGroups") or [], resource, flavor)
        own[c["metadata"]["name"]] = _amount(rq["nominalQuota"]) if rq else 0
    queues: dict[str, Queue] = {}
    for cq in cluster_queues:
        spec = cq["spec"]
        rq = _resource_quota(spec.get("resourceGroups") or [], resource, flavor)
        pre = spec.get("preemption") or {}
        bwc = pre.get("borrowWithinCohort") or {}
        cohort = spec.get("cohortName") or None
        if cohort is not None:
            own.setdefault(cohort, 0)
        queues[cq["metadata"]["name"]] = Queue(
            name=cq["metadata"]["name"],
            cohort=cohort,
            covered=rq is not None,
            nominal=_amount(rq["nominalQuota"]) if rq else 0,
            borrowing_limit=_amount(rq["borrowingLimit"]) if rq and rq.get("borrowingLimit") is not None else None,
            lending_limit=_amount(rq["lendingLimit"]) if rq and rq.get("lendingLimit") is not None else None,
            within_cluster_queue=pre.get("withinClusterQueue", NEVER),
            reclaim_within_cohort=pre.get("reclaimWithinCohort", NEVER),
            borrow_within_cohort=bwc.get("policy", NEVER),
            max_priority_threshold=bwc.get("maxPriorityThreshold"),
            namespace_selector=spec.get("namespaceSelector"),
        )
    return Quotas(queues, own)


def priority_of(job_labels: Mapping[str, str], wpcs: Iterable[Mapping], priority_class_value: int = 0) -> int:
    """K:pkg/controller/jobframework/reconciler.go ExtractPriority: a non-empty kueue.x-k8s.io/priority-class label
    names a WorkloadPriorityClass and its `value` is the priority; a name with no WPC fails the Get in
    pkg/util/priority/priority.go GetPriorityFromWorkloadPriorityClass, so the Workload is never built (raised
    here). Without the label the pods' PriorityClass decides, else the global default, else 0
    (GetPriorityFromPriorityClass): pass that as priority_class_value."""
    name = job_labels.get(PRIORITY_LABEL, "")
    if not name:
        return priority_class_value
    for wpc in wpcs:
        if wpc["metadata"]["name"] == name:
            return int(wpc["value"])
    raise LookupError(f'workloadpriorityclasses.kueue.x-k8s.io "{name}" not found')


def cluster_queue_for(job_labels: Mapping[str, str], namespace: str, local_queues: Iterable[Mapping]) -> str | None:
    """The ClusterQueue a job's Workload queues in: the LocalQueue named by its kueue.x-k8s.io/queue-name label
    (K:pkg/controller/jobframework/utils.go QueueNameForObject) in the job's namespace, and that LQ's
    spec.clusterQueue. None: no label, so with manageJobsWithoutQueueName false (the default) Kueue leaves the
    job alone. A missing LQ leaves the Workload pending (K:pkg/cache/queue/manager.go
    ErrLocalQueueDoesNotExistOrInactive): raised here."""
    name = job_labels.get(QUEUE_LABEL, "")
    if not name:
        return None
    for lq in local_queues:
        if lq["metadata"]["name"] == name and lq["metadata"].get("namespace") == namespace:
            return lq["spec"]["clusterQueue"]
    raise LookupError(f"localQueue {namespace}/{name} doesn't exist")


def admits_namespace(cq: Mapping, namespace_labels: Mapping[str, str]) -> bool:
    """K:pkg/cache/scheduler/clusterqueue.go converts spec.namespaceSelector with metav1.LabelSelectorAsSelector:
    null selects nothing, {} everything; pkg/workload/resources.go ValidateAdmissibility refuses a workload whose
    namespace's labels do not match (ErrNamespaceMismatch). matchLabels and matchExpressions (In, NotIn, Exists,
    DoesNotExist; NotIn matches a missing key) must all hold."""
    selector = cq["spec"].get("namespaceSelector")
    if selector is None:
        return False
    if any(namespace_labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        present = key in namespace_labels
        ok = {
            "In": present and namespace_labels.get(key) in values,
            "NotIn": not present or namespace_labels.get(key) not in values,
            "Exists": present,
            "DoesNotExist": not present,
        }[op]
        if not ok:
            return False
    return True


# --- quota arithmetic (K:pkg/cache/scheduler/resource_node.go) ------------------------------------------------------


def _usage(admitted: Iterable[Workload], cq: str) -> int:
    return sum(w.gpus for w in admitted if w.queue == cq)


def _local_quota(q: Queue) -> int:
    """resourceNode.localQuota: the part of nominal never lent, nominal - lendingLimit (at least 0), else 0."""
    return max(0, q.nominal - q.lending_limit) if q.lending_limit is not None else 0


def _members(q: Quotas, cohort: str) -> list[Queue]:
    return [c for c in q.queues.values() if c.cohort == cohort]


def _cohort_free(q: Quotas, cohort: str, admitted: Iterable[Workload]) -> int:
    """available() at the (root) cohort: SubtreeQuota - Usage, where accumulateFromChild adds each child's
    nominal - localQuota to the quota and its usage beyond localQuota to the usage."""
    admitted = list(admitted)
    members = _members(q, cohort)
    quota = q.cohorts.get(cohort, 0) + sum(m.nominal - _local_quota(m) for m in members)
    return quota - sum(max(0, _usage(admitted, m.name) - _local_quota(m)) for m in members)


def available(q: Quotas, cq: str, admitted: list[Workload]) -> int:
    """K:pkg/cache/scheduler/resource_node.go available, clamped at 0 by clusterqueue_snapshot.go Available.
    Without a cohort: nominal - usage. In a cohort: what is left of its localQuota plus what the cohort has free,
    the latter capped, when borrowingLimit is set, at (nominal - localQuota) - usage beyond localQuota +
    borrowingLimit."""
    c = q.queues[cq]
    used = _usage(admitted, cq)
    if c.cohort is None:
        return max(0, c.nominal - used)
    lq = _local_quota(c)
    parent = _cohort_free(q, c.cohort, admitted)
    if c.borrowing_limit is not None:
        parent = min(parent, (c.nominal - lq) - max(0, used - lq) + c.borrowing_limit)
    return max(0, max(0, lq - used) + parent)


def potential_available(q: Quotas, cq: str) -> int:
    """K:pkg/cache/scheduler/resource_node.go potentialAvailable, the most the CQ could ever hold: nominal without a
    cohort; else localQuota + the cohort's whole quota, capped at nominal + borrowingLimit when that is set."""
    c = q.queues[cq]
    if c.cohort is None:
        return c.nominal
    most = _local_quota(c) + _cohort_free(q, c.cohort, ())
    return min(most, c.nominal + c.borrowing_limit) if c.borrowing_limit is not None else most


# --- classical preemption (K:pkg/scheduler/preemption/) -------------------------------------------------------------


def _satisfies(policy: str, preemptor: Workload, candidate: Workload) -> bool:
    """K:pkg/scheduler/preemption/common/preemption_policy.go SatisfiesPreemptionPolicy: LowerPriority = strictly
    lower priority; LowerOrNewerEqualPriority also takes an equal-priority candidate queued later than the
    preemptor (SchedulerTimestampPreemptionBuffer, alpha and off, would add 5 minutes); Any always; Never never."""
    if policy == "LowerPriority":
        return preemptor.priority > candidate.priority
    if policy == "LowerOrNewerEqualPriority":
        newer = preemptor.priority == candidate.priority and preemptor.created_at < candidate.created_at
        return preemptor.priority > candidate.priority or newer
    return policy == "Any"


def _variant(c: Queue, preemptor: Workload, candidate: Workload, advantage: bool) -> str:
    """K:pkg/scheduler/preemption/classical/hierarchical_preemption.go classifyPreemptionVariant for a candidate of
    another CQ that reclaimWithinCohort allows: HierarchicalReclaim when the preemptor has the hierarchical
    advantage (in a flat cohort: its own usage + request stays within its nominal, QuantitiesFitInQuota); else
    ReclaimWithoutBorrowing when borrowWithinCohort is Never, or the candidate's priority is not lower, or is above
    maxPriorityThreshold (isAboveBorrowingThreshold); else ReclaimWhileBorrowing."""
    if advantage:
        return "HierarchicalReclaim"
    if c.borrow_within_cohort == NEVER or candidate.priority >= preemptor.priority:
        return "ReclaimWithoutBorrowing"
    above = c.max_priority_threshold is not None and candidate.priority > c.max_priority_threshold
    return "ReclaimWithoutBorrowing" if above else "ReclaimWhileBorrowing"


def _candidates(q: Quotas, preemptor: Workload, admitted: list[Workload]) -> list[tuple[Workload, str]]:
    """K:pkg/scheduler/preemption/classical/candidate_generator.go NewCandidateIterator: own-CQ workloads that
    withinClusterQueue allows (collectSameQueueCandidates); with a cohort and reclaimWithinCohort not Never, the
    workloads it allows in every other CQ of the cohort that is over nominal (collectCandidatesInSubtree skips a CQ
    within nominal, IsWithinNominalInResources). Only workloads using the resource count (WorkloadUsesResources).
    Order: other CQs before the own (the iterator puts the hierarchy and priority lists before the same-queue
    list), then common/ordering.go CandidatesOrdering: lower priority, then most recently admitted, then UID (the
    name here)."""
    c = q.queues[preemptor.queue]
    out: list[tuple[Workload, str]] = []
    if c.within_cluster_queue != NEVER:
        out += [(w, "WithinCQ") for w in admitted if w.queue == c.name and w.gpus > 0 and _satisfies(c.within_cluster_queue, preemptor, w)]
    if c.cohort is not None and c.reclaim_within_cohort != NEVER:
        advantage = _usage(admitted, c.name) + preemptor.gpus <= c.nominal
        for other in _members(q, c.cohort):
            if other.name == c.name or _usage(admitted, other.name) <= other.nominal:
                continue
            for w in admitted:
                if w.queue == other.name and w.gpus > 0 and _satisfies(c.reclaim_within_cohort, preemptor, w):
                    out.append((w, _variant(c, preemptor, w, advantage)))
    return sorted(out, key=lambda cv: (cv[0].queue == c.name, cv[0].priority, -cv[0].admitted_at, cv[0].name))


TopologyFits = Callable[[frozenset[str]], bool]
"""Whether the pending workload has a TAS placement once the named workloads are gone (their nodes freed)."""


def _fits(q: Quotas, p: Workload, removed: list[Workload], admitted: list[Workload], borrowing: bool, topology_fits: TopologyFits) -> bool:
    """K:pkg/scheduler/preemption/preemption.go workloadFits: with borrowing not allowed the preemptor's CQ must
    stay within nominal (BorrowingWith); the request must fit available(); and a TAS placement must exist."""
    gone = {w.name for w in removed}
    rest = [w for w in admitted if w.name not in gone]
    if not borrowing and _usage(rest, p.queue) + p.gpus > q.queues[p.queue].nominal:
        return False
    return p.gpus <= available(q, p.queue, rest) and topology_fits(frozenset(gone))


def preemption_targets(q: Quotas, preemptor: Workload, admitted: list[Workload], topology_fits: TopologyFits | None = None) -> tuple[str, ...]:
    """K:pkg/scheduler/preemption/preemption.go classicalPreemptions. Attempts, with borrowing allowed or not:
    only allowed when no other CQ has a candidate, or borrowWithinCohort is Never and the CQ is not strictly under
    nominal; not-allowed first when borrowWithinCohort is Never and no candidate has the hierarchical advantage;
    else allowed first. Each attempt removes candidates in order, skipping one of another CQ whose CQ is no longer
    over nominal, and a ReclaimWithoutBorrowing one while borrowing is allowed (candidateIsValid), until the
    workload fits; then fillBackWorkloads adds back, newest removal first but never the last one, every victim
    without which it still fits. Empty: no candidates, the workload waits."""
    fits = topology_fits or (lambda _: True)
    c = q.queues[preemptor.queue]
    candidates = _candidates(q, preemptor, admitted)
    others = [v for w, v in candidates if w.queue != c.name]
    forbidden = c.borrow_within_cohort == NEVER
    if not others or (forbidden and not _usage(admitted, c.name) < c.nominal):
        attempts: tuple[bool, ...] = (True,)
    elif forbidden and "HierarchicalReclaim" not in others:
        attempts = (False, True)
    else:
        attempts = (True, False)
    for borrowing in attempts:
        removed: list[Workload] = []
        for w, variant in candidates:
            rest = [x for x in admitted if x.name not in {r.name for r in removed}]
            if w.queue != c.name and ((borrowing and variant == "ReclaimWithoutBorrowing") or _usage(rest, w.queue) <= q.queues[w.queue].nominal):
                continue
            removed.append(w)
            if _fits(q, preemptor, removed, admitted, borrowing, fits):
                for i in range(len(removed) - 2, -1, -1):
                    trial = removed[:i] + removed[i + 1 :]
                    if _fits(q, preemptor, trial, admitted, borrowing, fits):
                        removed = trial
                return tuple(v.name for v in removed)
    return ()


def decide(q: Quotas, pending: Workload, admitted: list[Workload], topology_fits: TopologyFits | None = None) -> Decision:
    """One scheduling attempt for `pending`, the flavor assigner then the preemptor.
    K:pkg/scheduler/flavorassigner/flavorassigner.go fitsResourceQuota: a request above potentialAvailable is NoFit
    (ExceedsMaxQuota); within available it fits (borrowing when usage + request > nominal); otherwise preemption is
    tried only if nominal >= request or canPreemptWhileBorrowing (borrowWithinCohort not Never; the fair-sharing
    half is off; mayReclaimInHierarchy is false in a flat cohort when borrowing), else NoFit: it waits.
    assignFlavors (TAS): quota fits but no placement makes it Preempt; no placement even with every TAS workload
    gone (WithSimulateEmpty) is NoFit, TopologyPlacementFailed. pkg/scheduler/scheduler.go processEntry: Preempt
    without targets waits (WaitingForQuota), with targets evicts them (WaitingForPreemptedWorkloads)."""
    c = q.queues[pending.queue]
    fits = topology_fits or (lambda _: True)
    if pending.gpus > 0 and not c.covered:
        return Decision("nofit", reason=f"resource {GPU} unavailable in ClusterQueue")
    if pending.gpus > potential_available(q, c.name):
        return Decision("nofit", reason="ExceedsMaxQuota")
    used = _usage(admitted, c.name)
    if pending.gpus <= available(q, c.name, admitted):
        if fits(frozenset()):
            return Decision("admit", borrows=used + pending.gpus > c.nominal, reason="QuotaReserved")
    elif not (c.nominal >= pending.gpus or c.borrow_within_cohort != NEVER):
        return Decision("wait", reason="WaitingForQuota")
    if not fits(frozenset(w.name for w in admitted if w.pods)):
        return Decision("nofit", reason="TopologyPlacementFailed")
    victims = preemption_targets(q, pending, admitted, fits)
    if not victims:
        return Decision("wait", reason="WaitingForQuota")
    rest = [w for w in admitted if w.name not in victims]
    return Decision("preempt", borrows=_usage(rest, c.name) + pending.gpus > c.nominal, victims=victims, reason="WaitingForPreemptedWorkloads")


# --- Topology Aware Scheduling (K:pkg/cache/scheduler/tas_flavor_snapshot.go) ---------------------------------------


@dataclass(frozen=True)
class Node:
    name: str
    labels: dict[str, str]
    free_gpus: int  # allocatable minus TAS and non-TAS usage; a NotReady or unschedulable node is left out


def levels(topology: Mapping) -> list[str]:
    """K:apis/kueue/v1beta2/topology_types.go: spec.levels[].nodeLabel, outermost first, hostname last if present."""
    return [lv["nodeLabel"] for lv in topology["spec"]["levels"]]


def tas_nodes(nodes: Iterable[Node], flavor: Mapping, topology: Mapping) -> list[Node]:
    """K:pkg/cache/scheduler/tas_nodes_cache.go find with pkg/util/tas/node.go NodeMatchesFlavor: a node counts
    only if it carries every nodeLabel of the flavor with its value and every level label (any value); any other
    node is invisible to TAS. The flavor must name the topology (spec.topologyName)."""
    if flavor["spec"].get("topologyName") != topology["metadata"]["name"]:
        raise ValueError(f"flavor {flavor['metadata']['name']} is not a TAS flavor of {topology['metadata']['name']}")
    want = flavor["spec"].get("nodeLabels") or {}
    keys = levels(topology)
    return [n for n in nodes if all(n.labels.get(k, "") == v for k, v in want.items()) and all(k in n.labels for k in keys)]


class _Tree:
    """fillInCounts: leaves are the lowest level's domains (a node when that is the hostname, else the nodes'
    summed capacity); podCount = pods of gpus_per_pod that fit (countIn); parents sum their children. sliceCount
    is podCount // slice_size at the slice level, the children's sum above it, 0 below (fillInCountsHelper)."""

    def __init__(self, nodes: Iterable[Node], keys: list[str], gpus_per_pod: int, slice_idx: int, slice_size: int) -> None:
        free: dict[tuple[str, ...], int] = {}
        for n in nodes:
            leaf = tuple(n.labels[k] for k in keys)
            free[leaf] = free.get(leaf, 0) + n.free_gpus
        self.pod = {leaf: max(0, f) // gpus_per_pod for leaf, f in free.items()}
        self.by_level = [sorted({leaf[: i + 1] for leaf in free}) for i in range(len(keys))]
        self.kids = {d: [c for c in self.by_level[len(d)] if c[: len(d)] == d] for lv in self.by_level[:-1] for d in lv}
        self.sl: dict[tuple[str, ...], int] = {}
        for i in range(len(keys) - 1, -1, -1):
            for d in self.by_level[i]:
                if d in self.kids:
                    self.pod[d] = sum(self.pod[c] for c in self.kids[d])
                below = sum(self.sl[c] for c in self.kids.get(d, []))
                self.sl[d] = self.pod[d] // slice_size if i == slice_idx else (below if i < slice_idx else 0)

    def order(self, domains: Iterable[tuple[str, ...]], unconstrained: bool) -> list[tuple[str, ...]]:
        """sortedDomains: sliceCount descending (ascending for an unconstrained podset: TASProfileMixed, beta and
        on, uses LeastFreeCapacity), then podCount ascending, then the level values as strings."""
        sign = 1 if unconstrained else -1
        return sorted(domains, key=lambda d: (sign * self.sl[d], self.pod[d], d))


def _best_fit(domains: list[tuple[str, ...]], need: int, count: Mapping[tuple[str, ...], int]) -> tuple[str, ...]:
    """findBestFitDomainBy: the first domain with the smallest count still >= need; none: the first domain."""
    fitting = [d for d in domains if count[d] >= need]
    return min(fitting, key=lambda d: count[d]) if fitting else domains[0]


def _fit_level(t: _Tree, idx: int, need: int, required: bool, unconstrained: bool) -> tuple[int, list[tuple[str, ...]]] | None:
    """findLevelWithFitDomains: at the requested level, if the first domain in order holds all slices take the best
    fit (unconstrained: the first that holds them, least free first); else required fails, preferred retries one
    level up, and at the top level (or an unconstrained podset at its own level) the domains are taken greedily in
    order, the last one by best fit."""
    doms = t.order(t.by_level[idx], unconstrained)
    if not doms:
        return None
    if unconstrained:
        fitting = [d for d in doms if t.sl[d] >= need]
        if fitting:
            return idx, fitting[:1]
    elif t.sl[doms[0]] >= need:
        return idx, [_best_fit(doms, need, t.sl)]
    if required:
        return None
    if idx > 0 and not unconstrained:
        return _fit_level(t, idx - 1, need, required, unconstrained)
    chosen: list[tuple[str, ...]] = []
    left = need
    for i, d in enumerate(doms):
        if left <= 0:
            break
        if not unconstrained and t.sl[d] >= left:
            d = _best_fit(doms[i:], left, t.sl)
        chosen.append(d)
        left -= t.sl[d]
    return (idx, chosen) if left <= 0 else None


def _to_minimum(t: _Tree, doms: list[tuple[str, ...]], count: int, size: int, unconstrained: bool, slices: bool) -> list[tuple[str, ...]]:
    """updateCountsToMinimumGeneric: take the domains in the given order, each whole, until the rest fits in one;
    that last one is chosen by best fit among those left (not for unconstrained) and given just the rest."""
    have = t.sl if slices else t.pod
    left = count // size if slices else count
    out: list[tuple[str, ...]] = []
    for i, d in enumerate(doms):
        if not unconstrained and have[d] >= left:
            d = _best_fit(doms[i:], left, have)
        if have[d] >= left:
            t.pod[d] = left * size if slices else left
            t.sl[d] = left if slices else t.sl[d]
            return out + [d]
        if slices:
            t.pod[d] = have[d] * size
        left -= have[d]
        out.append(d)
    raise AssertionError("counts do not add up")  # upstream logs errCodeAssumptionsViolated


def place(
    nodes: Iterable[Node],
    flavor: Mapping,
    topology: Mapping,
    pods: int,
    gpus_per_pod: int,
    required: str | None = None,
    preferred: str | None = None,
    slice_level: str | None = None,
    slice_size: int = 1,
) -> dict[str, int] | None:
    """K:pkg/cache/scheduler/tas_flavor_snapshot.go findTopologyAssignment for one podset: lowest-level value
    (hostname) -> pods, or None ("TopologyPlacementFailed"). Level: required or preferred (podset-required- /
    podset-preferred-topology); neither is unconstrained (the annotation, or implied in a TAS-only CQ) at the lowest
    level, or at the highest with only a slice request (levelKey). Slices: podset-slice-required-topology +
    podset-slice-size (default: one pod at the lowest level). After the fit level (_fit_level), each level down to
    the slice level pools the children of every chosen domain, sorts them together and fills them greedily with the
    whole count (the counts given to the parents are not kept); below the slice level each parent's count is split
    among its own children."""
    keys = levels(topology)
    if pods % slice_size:
        raise ValueError("the model needs pods to be a multiple of slice_size")
    unconstrained = required is None and preferred is None
    level = required or preferred or (keys[0] if slice_level else keys[-1])
    slice_idx = keys.index(slice_level) if slice_level else len(keys) - 1
    if keys.index(level) > slice_idx:
        return None  # "podset slice topology ... is above the podset topology"
    t = _Tree(tas_nodes(nodes, flavor, topology), keys, gpus_per_pod, slice_idx, slice_size)
    found = _fit_level(t, keys.index(level), pods // slice_size, required is not None, unconstrained)
    if found is None:
        return None
    fit_idx, chosen = found
    chosen = _to_minimum(t, chosen, pods, slice_size, unconstrained, True)
    for _ in range(fit_idx, slice_idx):  # above the slice level: pooled
        chosen = _to_minimum(t, t.order([c for d in chosen for c in t.kids[d]], unconstrained), pods, slice_size, unconstrained, True)
    for _ in range(slice_idx, len(keys) - 1):  # at and below it: per parent
        chosen = [c for d in chosen for c in _to_minimum(t, t.order(t.kids[d], unconstrained), t.pod[d], 1, unconstrained, False)]
    return {d[-1]: t.pod[d] for d in sorted(chosen) if t.pod[d] > 0}


def replacement(
    nodes: Iterable[Node],
    flavor: Mapping,
    topology: Mapping,
    assignment: Mapping[str, int],
    failed: str,
    gpus_per_pod: int,
    required: str | None = None,
    preferred: str | None = None,
    unhealthy: Iterable[str] = (),
) -> dict[str, int] | None:
    """The new assignment of an admitted TAS workload after node `failed` (hostname = Node name) fails, or None:
    the workload is evicted and requeued whole.
    K:pkg/controller/tas/node_controller.go evictWorkloadIfNeeded: a failure while another node is still in
    status.unhealthyNodes (`unhealthy`; cleared once a replacement is admitted, scheduler.go admit) evicts.
    K:pkg/cache/scheduler/tas_flavor_snapshot.go findReplacementAssignment: only the failed node's pods are placed
    again, with the podset's own request; for a required podset inside the domain, at the required level, of the
    first remaining node (requiredReplacementDomain; no constraint if it was the only node), for a preferred one
    anywhere. No placement: evicted (scheduler.go handleFailedTASReplacement, TASFailedNodeReplacementFailFast,
    beta and on). Slices are not modelled here. The failed node is out of the candidates (deleted, NotReady or
    tainted)."""
    keys = levels(topology)
    if keys[-1] != HOSTNAME:
        raise ValueError("replacement is modelled for topologies whose lowest level is the hostname")
    if any(n != failed for n in unhealthy):
        return None
    rest = {h: c for h, c in assignment.items() if h != failed}
    by_host = {n.labels[HOSTNAME]: n for n in tas_nodes(nodes, flavor, topology)}
    if any(h not in by_host for h in rest):
        return None  # IsTopologyAssignmentStale: a remaining node left the snapshot
    candidates = [n for h, n in by_host.items() if h != failed]
    if required is not None and rest:
        depth = keys.index(required) + 1
        domain = tuple(by_host[min(rest)].labels[k] for k in keys[:depth])
        candidates = [n for n in candidates if tuple(n.labels[k] for k in keys[:depth]) == domain]
    placed = place(candidates, flavor, topology, assignment[failed], gpus_per_pod, required=required, preferred=preferred)
    if placed is None:
        return None
    return {h: rest.get(h, 0) + placed.get(h, 0) for h in sorted(set(rest) | set(placed))}
