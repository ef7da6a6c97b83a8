"""Kueue v0.19.2's admission, preemption and topology-aware placement (tests/kueue_v019.py restates them) on hand-built
ClusterQueues, Cohorts, WorkloadPriorityClasses, ResourceFlavors, Topologies and nodes, before the model is applied
to what fastpath renders. Every case says which upstream behaviour it shows; the citations are in the model."""

import pytest

from tests import kueue_v019 as kq
from tests.kueue_v019 import Decision, Node, Workload

CRITICAL, STANDARD, PREEMPTIBLE = 100000, 10000, 100  # the three tiers' WorkloadPriorityClass values
BLOCK, LEAF, HOST = "fabric.topograph.run/tier-1", "fabric.topograph.run/tier-0", kq.HOSTNAME
POOL = {"fastpath.io/pool": "gpu"}


def cq(name: str, nominal: int | None, cohort: str | None = None, borrowing: int | None = None, lending: int | None = None, **preemption) -> dict:
    """A v1beta2 ClusterQueue as a manifest holds it: one resource group, one flavor `gpu`, every namespace.
    nominal None: the group does not cover nvidia.com/gpu. preemption: withinClusterQueue=..., and so on."""
    gpu = {"name": kq.GPU, "nominalQuota": str(nominal)}
    if borrowing is not None:
        gpu["borrowingLimit"] = str(borrowing)
    if lending is not None:
        gpu["lendingLimit"] = str(lending)
    resources = [{"name": "cpu", "nominalQuota": "1000"}] + ([gpu] if nominal is not None else [])
    spec = {
        "namespaceSelector": {},
        "resourceGroups": [{"coveredResources": [r["name"] for r in resources], "flavors": [{"name": "gpu", "resources": resources}]}],
        "preemption": preemption,
    }
    if cohort:
        spec["cohortName"] = cohort
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def wpc(name: str, value: int) -> dict:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value}


def lq(namespace: str, name: str, cluster_queue: str) -> dict:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": name, "namespace": namespace}, "spec": {"clusterQueue": cluster_queue}}


def wl(name: str, queue: str, gpus: int, priority: int, admitted_at: int = 0, **kw) -> Workload:
    return Workload(name, queue, gpus, priority, admitted_at, **kw)


# --- objects -----------------------------------------------------------------------------------------------------

WPCS = [wpc("training-critical", CRITICAL), wpc("training-standard", STANDARD), wpc("training-preemptible", PREEMPTIBLE)]
PRIORITY = [
    ({"kueue.x-k8s.io/priority-class": "training-critical"}, 0, CRITICAL),  # the label names the WPC, its value is the priority
    ({"kueue.x-k8s.io/priority-class": "training-preemptible"}, 0, PREEMPTIBLE),
    ({}, 0, 0),  # no label, no PriorityClass, no global default: 0
    ({}, 1000, 1000),  # no label: the pods' PriorityClass decides
    ({"kueue.x-k8s.io/priority-class": ""}, 7, 7),  # an empty label is no label
]


@pytest.mark.parametrize(("labels", "pc_value", "want"), PRIORITY)
def test_priority_comes_from_the_workload_priority_class(labels, pc_value, want):
    assert kq.priority_of(labels, WPCS, pc_value) == want


def test_a_missing_workload_priority_class_fails_the_workload():
    # The Get of the WPC fails, so the job's Workload is never built: the job is never admitted.
    with pytest.raises(LookupError, match="training-urgent"):
        kq.priority_of({"kueue.x-k8s.io/priority-class": "training-urgent"}, WPCS)


LQS = [lq("team-a", "training", "team-a"), lq("team-b", "training", "team-b")]
LOCAL_QUEUE = [
    ({"kueue.x-k8s.io/queue-name": "training"}, "team-a", "team-a"),  # the LQ of the job's own namespace
    ({"kueue.x-k8s.io/queue-name": "training"}, "team-b", "team-b"),
    ({}, "team-a", None),  # no queue label: not managed (manageJobsWithoutQueueName false)
]


@pytest.mark.parametrize(("labels", "namespace", "want"), LOCAL_QUEUE)
def test_the_queue_label_names_a_local_queue_of_the_jobs_namespace(labels, namespace, want):
    assert kq.cluster_queue_for(labels, namespace, LQS) == want


def test_a_missing_local_queue_leaves_the_workload_pending():
    with pytest.raises(LookupError):
        kq.cluster_queue_for({"kueue.x-k8s.io/queue-name": "training"}, "team-c", LQS)


NAME = "kubernetes.io/metadata.name"
NAMESPACES = [
    (None, {NAME: "team-a"}, False),  # null selects no namespace: nothing is ever admitted
    ({}, {NAME: "team-a"}, True),  # {} selects every namespace
    ({"matchExpressions": [{"key": NAME, "operator": "In", "values": ["team-a"]}]}, {NAME: "team-a"}, True),
    ({"matchExpressions": [{"key": NAME, "operator": "In", "values": ["team-a"]}]}, {NAME: "team-b"}, False),
    ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["sandbox"]}]}, {NAME: "team-b"}, True),  # NotIn matches a missing key
    ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, {NAME: "team-b"}, False),
    ({"matchLabels": {"tier": "prod"}}, {"tier": "prod", NAME: "x"}, True),
    ({"matchLabels": {"tier": "prod"}, "matchExpressions": [{"key": NAME, "operator": "In", "values": ["y"]}]}, {"tier": "prod", NAME: "x"}, False),  # all must hold
]


@pytest.mark.parametrize(("selector", "labels", "want"), NAMESPACES)
def test_namespace_selector(selector, labels, want):
    queue = cq("team-a", 8)
    queue["spec"]["namespaceSelector"] = selector
    if selector is None:
        del queue["spec"]["namespaceSelector"]
    assert kq.admits_namespace(queue, labels) is want


def test_quotas_read_defaults_and_refuse_what_the_model_does_not_cover():
    q = kq.quotas([cq("a", 8, "pool", borrowing=0, lending=2), cq("cpu-only", None)])
    a = q.queues["a"]
    # The CRD defaults every preemption policy to Never.
    assert (a.within_cluster_queue, a.reclaim_within_cohort, a.borrow_within_cohort) == ("Never", "Never", "Never")
    assert (a.nominal, a.borrowing_limit, a.lending_limit, a.cohort) == (8, 0, 2, "pool")
    assert not q.queues["cpu-only"].covered and q.cohorts == {"pool": 0}
    two = cq("two", 8)
    two["spec"]["resourceGroups"][0]["flavors"].append({"name": "spot", "resources": [{"name": kq.GPU, "nominalQuota": "4"}]})
    with pytest.raises(ValueError, match="one flavor"):
        kq.quotas([two])
    assert kq.quotas([two], flavor="spot").queues["two"].nominal == 4
    nested = {"metadata": {"name": "pool"}, "spec": {"parentName": "org"}}
    with pytest.raises(NotImplementedError):
        kq.quotas([], [nested])


# --- quota arithmetic --------------------------------------------------------------------------------------------

COHORT_QUOTA = {"metadata": {"name": "pool"}, "spec": {"resourceGroups": [{"coveredResources": [kq.GPU], "flavors": [{"name": "gpu", "resources": [{"name": kq.GPU, "nominalQuota": "4"}]}]}]}}
# (case, cluster queues, cohort objects, admitted, queue, available, potentialAvailable)
AVAILABLE = [
    ("alone", [cq("a", 8)], [], [wl("x", "a", 3, 0)], "a", 5, 8),  # no cohort: nominal - usage, at most nominal
    ("alone-over", [cq("a", 8)], [], [wl("x", "a", 10, 0)], "a", 0, 8),  # overadmitted: clamped at 0
    ("borrowed-from", [cq("a", 8, "pool"), cq("b", 8, "pool")], [], [wl("x", "b", 12, 0)], "a", 4, 16),  # b borrowed 4 of a's idle 8
    ("borrower", [cq("a", 8, "pool"), cq("b", 8, "pool")], [], [wl("x", "b", 12, 0)], "b", 4, 16),  # a CQ lends its whole nominal without lendingLimit
    ("borrowing-limit", [cq("a", 8, "pool", borrowing=4), cq("b", 8, "pool")], [], [], "a", 12, 12),  # at most nominal + borrowingLimit
    ("borrowing-limit-0", [cq("a", 8, "pool", borrowing=0), cq("b", 8, "pool")], [], [wl("x", "a", 4, 0)], "a", 4, 8),  # never beyond nominal
    ("lending-limit", [cq("a", 16, "pool", lending=2), cq("b", 16, "pool")], [], [], "b", 18, 18),  # a lends only 2 of its 16
    ("lending-limit-own", [cq("a", 16, "pool", lending=2), cq("b", 16, "pool")], [], [wl("x", "b", 18, 0)], "a", 14, 32),  # a keeps its 14 even when b took the lent 2
    ("cohort-quota", [cq("a", 8, "pool"), cq("b", 8, "pool")], [COHORT_QUOTA], [], "a", 20, 20),  # a Cohort's own quota is lent to every member
]


@pytest.mark.parametrize(("case", "cqs", "cohorts", "admitted", "queue", "avail", "potential"), AVAILABLE, ids=[c[0] for c in AVAILABLE])
def test_available_and_potential_available(case, cqs, cohorts, admitted, queue, avail, potential):
    q = kq.quotas(cqs, cohorts)
    assert (kq.available(q, queue, admitted), kq.potential_available(q, queue)) == (avail, potential)


# --- admission and preemption ------------------------------------------------------------------------------------

LOWER = {"withinClusterQueue": "LowerPriority"}
RECLAIM = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}
BORROW = {**RECLAIM, "borrowWithinCohort": {"policy": "LowerPriority"}}
# One CQ, 32 GPUs, the three tiers in it, full: two standard and two preemptible 8-GPU gangs.
TEAM = [cq("team", 32, **LOWER)]
FULL = [wl("std-a", "team", 8, STANDARD, 1), wl("pre-a", "team", 8, PREEMPTIBLE, 2), wl("pre-b", "team", 8, PREEMPTIBLE, 3), wl("std-b", "team", 8, STANDARD, 4)]
# Two CQs of 16 in one cohort, each may reclaim from the other.
PAIR = [cq("a", 16, "pool", **RECLAIM), cq("b", 16, "pool", **RECLAIM)]
B_BORROWS = [wl(f"b{i}", "b", 8, CRITICAL, i) for i in range(1, 5)]  # b holds 32: 16 of them a's
# Three CQs of 8: a third, idle, lends what a may borrow.
TRIO = [cq("a", 8, "pool", **BORROW), cq("b", 8, "pool", **RECLAIM), cq("c", 8, "pool", **RECLAIM)]
TRIO_B = [wl("b1", "b", 8, PREEMPTIBLE, 1), wl("b2", "b", 8, PREEMPTIBLE, 2)]  # b borrows 8 of c's
P, W, N = "WaitingForPreemptedWorkloads", "WaitingForQuota", "ExceedsMaxQuota"

# (case, cluster queues, admitted, pending, decision)
DECIDE = [
    # Free quota: admitted at once.
    ("room", TEAM, FULL[:3], wl("crit", "team", 8, CRITICAL), Decision("admit", reason="QuotaReserved")),
    # Critical takes whole gangs, lowest priority first and, among equals, the most recently admitted first.
    ("critical-16", TEAM, FULL, wl("crit", "team", 16, CRITICAL), Decision("preempt", victims=("pre-b", "pre-a"), reason=P)),
    ("critical-24", TEAM, FULL, wl("crit", "team", 24, CRITICAL), Decision("preempt", victims=("pre-b", "pre-a", "std-b"), reason=P)),
    ("standard-16", TEAM, FULL, wl("std", "team", 16, STANDARD), Decision("preempt", victims=("pre-b", "pre-a"), reason=P)),
    # Standard may take only the preemptible 16: not enough for 24, so nothing is evicted at all.
    ("standard-24", TEAM, FULL, wl("std", "team", 24, STANDARD), Decision("wait", reason=W)),
    # Preemptible is the lowest tier: LowerPriority gives it no victim.
    ("preemptible", TEAM, FULL, wl("pre", "team", 8, PREEMPTIBLE), Decision("wait", reason=W)),
    # withinClusterQueue Never (the default): even critical waits.
    ("within-never", [cq("team", 32)], FULL, wl("crit", "team", 16, CRITICAL), Decision("wait", reason=W)),
    # More than the CQ could ever hold (no cohort: nominal): never admitted, never preempts.
    ("over-max", TEAM, FULL, wl("crit", "team", 40, CRITICAL), Decision("nofit", reason=N)),
    # The add-back: pre-x (newest, lowest) goes first but std-y alone frees enough, so pre-x stays.
    (
        "add-back",
        TEAM,
        [wl("crit-z", "team", 20, CRITICAL, 0), wl("std-y", "team", 8, STANDARD, 1), wl("pre-x", "team", 4, PREEMPTIBLE, 5)],
        wl("crit", "team", 8, CRITICAL),
        Decision("preempt", victims=("std-y",), reason=P),
    ),
    # LowerOrNewerEqualPriority: an equal-priority gang queued after the preemptor is a victim, an older one is not.
    (
        "newer-equal",
        [cq("team", 32, withinClusterQueue="LowerOrNewerEqualPriority")],
        [wl("crit-z", "team", 16, CRITICAL, 0), wl("pre-old", "team", 8, PREEMPTIBLE, 1, created_at=1), wl("pre-new", "team", 8, PREEMPTIBLE, 2, created_at=5)],
        wl("pre", "team", 8, PREEMPTIBLE, created_at=3),
        Decision("preempt", victims=("pre-new",), reason=P),
    ),
    # A CQ within its nominal reclaims from one over nominal: under Any whatever the priorities, newest first.
    ("reclaim", PAIR, B_BORROWS, wl("pre", "a", 16, PREEMPTIBLE), Decision("preempt", victims=("b4", "b3"), reason=P)),
    # reclaimWithinCohort LowerPriority: b's critical gangs are safe from a standard one.
    (
        "reclaim-lower",
        [cq("a", 16, "pool", withinClusterQueue="LowerPriority", reclaimWithinCohort="LowerPriority"), cq("b", 16, "pool")],
        B_BORROWS,
        wl("std", "a", 16, STANDARD),
        Decision("wait", reason=W),
    ),
    # reclaimWithinCohort Never (the default): a waits for b's borrowed gangs to finish.
    ("reclaim-never", [cq("a", 16, "pool", **LOWER), cq("b", 16, "pool")], B_BORROWS, wl("crit", "a", 16, CRITICAL), Decision("wait", reason=W)),
    # b sits exactly at its nominal: never a reclaim victim, whatever its priorities; a evicts its own gang instead.
    (
        "within-nominal",
        PAIR,
        [wl("a1", "a", 8, PREEMPTIBLE, 1), wl("b1", "b", 8, PREEMPTIBLE, 2), wl("b2", "b", 8, PREEMPTIBLE, 3)],
        wl("crit", "a", 16, CRITICAL),
        Decision("preempt", victims=("a1",), reason=P),
    ),
    ("within-nominal-no-own", PAIR, [wl("a1", "a", 8, CRITICAL, 1), wl("b1", "b", 8, PREEMPTIBLE, 2), wl("b2", "b", 8, PREEMPTIBLE, 3)], wl("crit", "a", 16, CRITICAL), Decision("wait", reason=W)),
    # a would borrow without its own gang, so it takes b's newest (b is over nominal) and its own a1, then stops
    # reclaiming from b as soon as b is back at its nominal: b1 and b2 stay.
    (
        "reclaim-and-own",
        PAIR,
        [wl("a1", "a", 8, STANDARD, 0), wl("b1", "b", 8, STANDARD, 1), wl("b2", "b", 8, STANDARD, 2), wl("b3", "b", 8, STANDARD, 3)],
        wl("crit", "a", 16, CRITICAL),
        Decision("preempt", victims=("b3", "a1"), reason=P),
    ),
    # More than its nominal with borrowWithinCohort Never: it only runs on idle quota and never preempts for it,
    # though b borrows with preemptible gangs.
    ("borrow-never", [cq("a", 8, "pool", **RECLAIM)] + TRIO[1:], TRIO_B, wl("crit", "a", 12, CRITICAL), Decision("wait", reason=W)),
    # borrowWithinCohort LowerPriority: it may reclaim while borrowing from lower-priority gangs.
    ("borrow-lower", TRIO, TRIO_B, wl("crit", "a", 12, CRITICAL), Decision("preempt", borrows=True, victims=("b2",), reason=P)),
    # ... but not from gangs above maxPriorityThreshold.
    (
        "borrow-threshold",
        [cq("a", 8, "pool", **{**RECLAIM, "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 50}})] + TRIO[1:],
        TRIO_B,
        wl("crit", "a", 12, CRITICAL),
        Decision("wait", reason=W),
    ),
    # Idle quota of the cohort is borrowed without preempting anyone.
    ("borrow-idle", TRIO, TRIO_B[:1], wl("std", "a", 12, STANDARD), Decision("admit", borrows=True, reason="QuotaReserved")),
    # More than potentialAvailable (the whole cohort): never admitted.
    ("over-cohort", PAIR, [], wl("crit", "a", 40, CRITICAL), Decision("nofit", reason=N)),
    # borrowingLimit 0: the CQ never borrows, though b is idle; more than nominal never fits.
    ("no-borrow", [cq("a", 8, "pool", borrowing=0, **RECLAIM), cq("b", 8, "pool")], [wl("a1", "a", 4, STANDARD)], wl("std", "a", 8, STANDARD), Decision("wait", reason=W)),
    ("no-borrow-max", [cq("a", 8, "pool", borrowing=0, **RECLAIM), cq("b", 8, "pool")], [wl("a1", "a", 4, STANDARD)], wl("std", "a", 12, STANDARD), Decision("nofit", reason=N)),
    ("may-borrow", [cq("a", 8, "pool", **RECLAIM), cq("b", 8, "pool")], [wl("a1", "a", 4, STANDARD)], wl("std", "a", 12, STANDARD), Decision("admit", borrows=True, reason="QuotaReserved")),
    # A CQ that does not cover nvidia.com/gpu admits no GPU workload (BlockUndeclared).
    ("undeclared", [cq("cpu", None)], [], wl("job", "cpu", 8, STANDARD), Decision("nofit", reason="resource nvidia.com/gpu unavailable in ClusterQueue")),
]


@pytest.mark.parametrize(("case", "cqs", "admitted", "pending", "want"), DECIDE, ids=[c[0] for c in DECIDE])
def test_decide(case, cqs, admitted, pending, want):
    assert kq.decide(kq.quotas(cqs), pending, admitted) == want


# Cases of Kueue's own TestPreemption (kubernetes-sigs/kueue@v0.19.2:pkg/scheduler/preemption/preemption_test.go),
# restated: its cohort "with_shared_cq" (cpu, every workload admitted at the same time) and "cohort-lend".
BWC0 = {"policy": "LowerPriority", "maxPriorityThreshold": 0}
SHARED = [
    cq("a_standard", 1, "s", borrowing=12, withinClusterQueue="Never", reclaimWithinCohort="LowerPriority", borrowWithinCohort=BWC0),
    cq("b_standard", 1, "s", borrowing=12, withinClusterQueue="LowerPriority", reclaimWithinCohort="Any", borrowWithinCohort=BWC0),
    cq("a_best_effort", 1, "s", borrowing=12, withinClusterQueue="Never", reclaimWithinCohort="LowerPriority", borrowWithinCohort=BWC0),
    cq("b_best_effort", 0, "s", borrowing=13, withinClusterQueue="Never", reclaimWithinCohort="LowerPriority", borrowWithinCohort=BWC0),
    cq("shared", 10, "s"),
]
LEND = [cq(n, 6, "l", lending=lend, withinClusterQueue="LowerPriority", reclaimWithinCohort="LowerPriority") for n, lend in (("lend1", 4), ("lend2", 2))]
# (upstream case, cluster queues, admitted, incoming, victims)
UPSTREAM_PREEMPTION = [
    (
        "use BorrowWithinCohort; allow preempting a lower-priority workload from another ClusterQueue while borrowing",
        SHARED,
        [wl("a_best_effort_low", "a_best_effort", 10, -1), wl("b_best_effort_low", "b_best_effort", 1, -1)],
        wl("in", "a_standard", 10, 0),
        ("a_best_effort_low",),
    ),
    (
        "use BorrowWithinCohort; don't allow preempting a lower-priority workload with priority above MaxPriorityThreshold, if borrowing is required even after the preemption",
        SHARED,
        [wl("b_standard", "b_standard", 10, 1)],
        wl("in", "a_standard", 10, 2),
        (),
    ),
    (
        "use BorrowWithinCohort; allow preempting a lower-priority workload with priority above MaxPriorityThreshold, if borrowing is not required after the preemption",
        SHARED,
        [wl("b_standard", "b_standard", 13, 1)],
        wl("in", "a_standard", 1, 2),
        ("b_standard",),
    ),
    (
        "use BorrowWithinCohort; only preempt from CQ if no workloads below threshold and already above nominal",
        SHARED,
        [wl("a_standard_1", "a_standard", 10, 1), wl("a_standard_2", "a_standard", 1, 1), wl("b_standard_1", "b_standard", 1, 1), wl("b_standard_2", "b_standard", 1, 2)],
        wl("in", "b_standard", 1, 3),
        ("b_standard_1",),
    ),
    (
        "use BorrowWithinCohort; preempt from CQ and from other CQs with workloads below threshold",
        SHARED,
        [wl("b_standard_high", "b_standard", 10, 2), wl("b_standard_mid", "b_standard", 1, 1), wl("a_best_effort_low", "a_best_effort", 1, -1), wl("a_best_effort_lower", "a_best_effort", 1, -2)],
        wl("in", "b_standard", 2, 2),
        ("a_best_effort_lower", "b_standard_mid"),
    ),
    ("reclaim quota from lender", LEND, [wl("lend1-low", "lend1", 3, -1), wl("lend2-mid", "lend2", 3, 0), wl("lend2-high", "lend2", 4, 1)], wl("in", "lend1", 3, 1), ("lend2-mid",)),
    (
        "preempt from all ClusterQueues in cohort-lend",
        LEND,
        [wl("lend1-low", "lend1", 3, -1), wl("lend1-mid", "lend1", 2, 0), wl("lend2-low", "lend2", 3, -1), wl("lend2-mid", "lend2", 4, 0)],
        wl("in", "lend1", 4, 0),
        ("lend2-low", "lend1-low"),
    ),
    ("cannot preempt from other ClusterQueues if exceeds requestable quota including lending limit", LEND, [wl("lend2-low", "lend2", 10, -1)], wl("in", "lend1", 9, 0), ()),
]


@pytest.mark.parametrize(("case", "cqs", "admitted", "incoming", "victims"), UPSTREAM_PREEMPTION, ids=[c[0][:60] for c in UPSTREAM_PREEMPTION])
def test_upstream_preemption_cases(case, cqs, admitted, incoming, victims):
    assert kq.preemption_targets(kq.quotas(cqs), incoming, admitted) == victims


TAS_ADMITTED = [wl("t1", "team", 8, PREEMPTIBLE, 1, pods=1, gpus_per_pod=8), wl("t2", "team", 8, PREEMPTIBLE, 2, pods=1, gpus_per_pod=8)]
TAS_PENDING = wl("crit", "team", 16, CRITICAL, pods=2, gpus_per_pod=8)
# (case, whether a placement exists once the named workloads are gone, decision)
TOPOLOGY = [
    ("fits", lambda gone: True, Decision("admit", reason="QuotaReserved")),
    # Quota fits but the free GPUs are fragmented: preemption until a placement exists (t2 is tried first).
    ("fragmented", lambda gone: "t2" in gone, Decision("preempt", victims=("t2",), reason=P)),
    # Only t1's node completes the placement: t2 is removed first, then added back.
    ("fragmented-t1", lambda gone: "t1" in gone, Decision("preempt", victims=("t1",), reason=P)),
    # No placement even with every TAS workload gone: never admitted.
    ("never", lambda gone: False, Decision("nofit", reason="TopologyPlacementFailed")),
]


@pytest.mark.parametrize(("case", "topology_fits", "want"), TOPOLOGY, ids=[c[0] for c in TOPOLOGY])
def test_decide_needs_a_topology_placement(case, topology_fits, want):
    assert kq.decide(kq.quotas(TEAM), TAS_PENDING, TAS_ADMITTED, topology_fits) == want


# --- topology-aware placement ------------------------------------------------------------------------------------

TOPOLOGY_OBJ = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": "fabric"}, "spec": {"levels": [{"nodeLabel": BLOCK}, {"nodeLabel": LEAF}, {"nodeLabel": HOST}]}}
FLAVOR = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "gpu"}, "spec": {"nodeLabels": POOL, "topologyName": "fabric"}}


def cluster(free: dict[str, int], per_leaf: int = 20, drop: tuple[str, ...] = ()) -> list[Node]:
    """2 blocks x 2 leaves x `per_leaf` 8-GPU nodes; the first free[leaf] nodes of each leaf are idle, the rest
    busy; nodes of the leaves in `drop` lack the block label."""
    nodes = []
    for leaf, idle in free.items():
        for i in range(per_leaf):
            host = f"{leaf}-n{i:02d}"
            labels = {BLOCK: leaf.split("-")[0], LEAF: leaf, HOST: host, **POOL}
            if leaf in drop:
                del labels[BLOCK]
            nodes.append(Node(host, labels, 8 if i < idle else 0))
    return nodes


def by_leaf(placement: dict[str, int] | None) -> dict[str, int] | None:
    if placement is None:
        return None
    out: dict[str, int] = {}
    for host, pods in placement.items():
        out[host.rsplit("-", 1)[0]] = out.get(host.rsplit("-", 1)[0], 0) + pods
    return out


ONE_LEAF = {"b1-l1": 18, "b1-l2": 12, "b2-l1": 16, "b2-l2": 20}  # three leaves hold 16
NO_LEAF = {"b1-l1": 10, "b1-l2": 8, "b2-l1": 12, "b2-l2": 3}  # no leaf holds 16, block b1 (18) does
NO_LEAF_NAMES = {"b1-l1": 8, "b1-l2": 10, "b2-l1": 12, "b2-l2": 3}  # the same, the most free leaf named second
NO_BLOCK = {"b1-l1": 7, "b1-l2": 6, "b2-l1": 5, "b2-l2": 4}  # no block holds 16 (13 and 9)
# (case, free nodes per leaf, leaves whose nodes lack the block label, placement arguments, pods per leaf)
PLACE = [
    # Some leaf holds the 16 nodes: the best fit, the leaf with the fewest free nodes that still holds them
    # (b2-l1, 16), not the most free (b2-l2, 20); required or preferred alike.
    ("required-best-fit", ONE_LEAF, (), {"required": LEAF}, {"b2-l1": 16}),
    ("preferred-best-fit", ONE_LEAF, (), {"preferred": LEAF}, {"b2-l1": 16}),
    # Equal fits: the first leaf by its label value.
    ("tie", {"b1-l1": 16, "b1-l2": 3, "b2-l1": 16, "b2-l2": 20}, (), {"required": LEAF}, {"b1-l1": 16}),
    # required and no leaf holds 16: no placement (TopologyPlacementFailed), though 33 nodes are free.
    ("required-none", NO_LEAF, (), {"required": LEAF}, None),
    # preferred walks up a level: the best-fit block (b1, 18; b2 has 15), its leaves most free first, the last by
    # best fit: 10 + 6.
    ("preferred-block", NO_LEAF, (), {"preferred": LEAF}, {"b1-l1": 10, "b1-l2": 6}),
    # ... but the leaves' counts are not kept: the hosts of the chosen leaves are pooled and taken in their own
    # order (free pods desc, then label values), so with one pod per node the leaf named first fills first: 8 + 8,
    # not 10 + 6.
    ("preferred-block-pooled", NO_LEAF_NAMES, (), {"preferred": LEAF}, {"b1-l1": 8, "b1-l2": 8}),
    # No block holds 16: at the top level the blocks are taken greedily (b1, 13), the last by best fit (b2), then
    # the leaves of both are pooled: 7 and 6, and b2-l2 (4) as the best fit for the last 3, not b2-l1 (5).
    ("preferred-spread", NO_BLOCK, (), {"preferred": LEAF}, {"b1-l1": 7, "b1-l2": 6, "b2-l2": 3}),
    ("required-block-none", NO_BLOCK, (), {"required": BLOCK}, None),
    # Nodes without a level label are invisible to TAS: b2-l1's 16 free nodes lack the block label.
    ("missing-label", {"b1-l1": 10, "b1-l2": 8, "b2-l1": 16, "b2-l2": 3}, ("b2-l1",), {"required": LEAF}, None),
    ("missing-label-preferred", {"b1-l1": 10, "b1-l2": 8, "b2-l1": 16, "b2-l2": 3}, ("b2-l1",), {"preferred": LEAF}, {"b1-l1": 10, "b1-l2": 6}),
    # Slices keep groups whole: block required, slices of 8 pods per leaf: 8 + 8, never 10 + 6.
    ("slices", NO_LEAF, (), {"required": BLOCK, "slice_level": LEAF, "slice_size": 8}, {"b1-l1": 8, "b1-l2": 8}),
    # b1 holds 18 nodes but one slice of 8 per leaf; b2 holds only one slice (12 // 8 + 3 // 8): no placement.
    ("slices-none", {"b1-l1": 10, "b1-l2": 7, "b2-l1": 12, "b2-l2": 3}, (), {"required": BLOCK, "slice_level": LEAF, "slice_size": 8}, None),
]


@pytest.mark.parametrize(("case", "free", "drop", "kw", "want"), PLACE, ids=[c[0] for c in PLACE])
def test_place_a_16_node_job(case, free, drop, kw, want):
    """1 pod x 8 GPUs per node, 16 pods."""
    assert by_leaf(kq.place(cluster(free, drop=drop), FLAVOR, TOPOLOGY_OBJ, 16, 8, **kw)) == want


def test_place_keeps_the_nodes_of_one_leaf():
    placed = kq.place(cluster(ONE_LEAF), FLAVOR, TOPOLOGY_OBJ, 16, 8, required=LEAF)
    assert placed == {f"b2-l1-n{i:02d}": 1 for i in range(16)}


def test_only_nodes_of_the_flavor_count():
    # A node missing the flavor's nodeLabels is not in the flavor's topology, whatever its level labels.
    nodes = [Node(n.name, {k: v for k, v in n.labels.items() if k not in POOL}, n.free_gpus) if n.labels[LEAF] == "b2-l1" else n for n in cluster(ONE_LEAF)]
    assert by_leaf(kq.place(nodes, FLAVOR, TOPOLOGY_OBJ, 16, 8, required=LEAF)) == {"b1-l1": 16}
    assert kq.tas_nodes(nodes, FLAVOR, TOPOLOGY_OBJ) == [n for n in nodes if n.labels[LEAF] != "b2-l1"]


SMALL = [Node("a", {BLOCK: "b1", LEAF: "l1", HOST: "a", **POOL}, 16), Node("b", {BLOCK: "b1", LEAF: "l1", HOST: "b", **POOL}, 8), Node("c", {BLOCK: "b1", LEAF: "l1", HOST: "c", **POOL}, 8)]
# (case, pods, gpus per pod, placement arguments, placement)
PLACE_SMALL = [
    # Several pods per node: a holds two 8-GPU pods, or four 4-GPU pods.
    ("preferred-host", 3, 8, {"preferred": HOST}, {"a": 2, "b": 1}),  # most free first, the last by best fit
    ("four-gpu-pods", 6, 4, {"required": LEAF}, {"a": 4, "b": 2}),
    # Unconstrained (no annotation; implied in a TAS-only CQ): least free capacity first, no best fit.
    ("unconstrained", 3, 8, {}, {"a": 1, "b": 1, "c": 1}),
    ("unconstrained-one", 1, 8, {}, {"b": 1}),
    ("required-host", 3, 8, {"required": HOST}, None),
    ("required-leaf", 3, 8, {"required": LEAF}, {"a": 2, "b": 1}),
    # Below the slice level the children have no slice count, so they are taken least free first: the 3-pod slice
    # of the leaf lands on 3 nodes where 2 would do.
    ("below-the-slice-level", 3, 8, {"required": LEAF, "slice_level": LEAF, "slice_size": 3}, {"a": 1, "b": 1, "c": 1}),
]


@pytest.mark.parametrize(("case", "pods", "gpus", "kw", "want"), PLACE_SMALL, ids=[c[0] for c in PLACE_SMALL])
def test_place_within_a_leaf(case, pods, gpus, kw, want):
    assert kq.place(SMALL, FLAVOR, TOPOLOGY_OBJ, pods, gpus, **kw) == want


def test_without_a_host_level_a_leaf_pools_its_nodes_capacity():
    # Levels [block, leaf]: a leaf is one domain with its nodes' summed capacity, so two nodes with 4 free GPUs
    # each "hold" one 8-GPU pod that no node can run.
    topology = {"metadata": {"name": "fabric"}, "spec": {"levels": [{"nodeLabel": BLOCK}, {"nodeLabel": LEAF}]}}
    nodes = [Node(h, {BLOCK: "b1", LEAF: "l1", HOST: h, **POOL}, 4) for h in ("x", "y")]
    assert kq.place(nodes, FLAVOR, topology, 1, 8, required=LEAF) == {"l1": 1}


def upstream_node(block: str, rack: str, host: str, cpu: int) -> Node:
    return Node(f"{block}-{rack}-{host}", {BLOCK: block, LEAF: block + rack, HOST: host}, cpu)


UPSTREAM_NODES = [upstream_node("b1", "r1", "x3", 1), upstream_node("b1", "r2", "x5", 1), upstream_node("b1", "r2", "x1", 1), upstream_node("b1", "r2", "x6", 1)]
UPSTREAM_NODES += [upstream_node("b2", "r1", "x2", 1), upstream_node("b2", "r2", "x4", 2)]  # its defaultNodes; rack values made unique
UNBALANCED = [upstream_node("b1", "r1", h, 3) for h in ("x3", "x5", "x1")] + [upstream_node("b2", "r1", "x6", 6)]
RACKS = [
    upstream_node("b1", "r1", "x3", 2),
    upstream_node("b1", "r2", "x5", 2),
    upstream_node("b1", "r3", "x1", 1),
    upstream_node("b1", "r3", "x6", 1),
    upstream_node("b1", "r3", "x2", 1),
    upstream_node("b1", "r3", "x4", 1),
]
SLICED = [upstream_node("b1", "r1", h, 1) for h in ("x3", "x5")] + [upstream_node("b1", "r2", h, 1) for h in ("x1", "x6", "x2")]
SLICED += [upstream_node("b2", "r1", h, 1) for h in ("x4", "x7")]
TWO_LEVELS = {"metadata": {"name": "fabric"}, "spec": {"levels": [{"nodeLabel": BLOCK}, {"nodeLabel": LEAF}]}}
NO_POOL = {"metadata": {"name": "gpu"}, "spec": {"topologyName": "fabric"}}
# Cases of Kueue's own TestFindTopologyAssignments (kubernetes-sigs/kueue@v0.19.2:pkg/cache/scheduler/
# tas_cache_test.go), restated with 1-cpu pods as 1-GPU pods.
# (upstream case, nodes, topology, pods, placement arguments, placement)
UPSTREAM_TAS = [
    ("rack preferred; but only block can accommodate the workload; BestFit", UPSTREAM_NODES, TWO_LEVELS, 4, {"preferred": LEAF}, {"b1r1": 1, "b1r2": 3}),
    ("rack preferred; but only multiple blocks can accommodate the workload; BestFit", UPSTREAM_NODES, TWO_LEVELS, 6, {"preferred": LEAF}, {"b1r1": 1, "b1r2": 3, "b2r2": 2}),
    ("block preferred; but the workload cannot be accommodate in entire topology; BestFit", UPSTREAM_NODES, TWO_LEVELS, 10, {"preferred": BLOCK}, None),
    ("minimize the number of used racks before optimizing the number of nodes; BestFit", RACKS, TOPOLOGY_OBJ, 4, {"required": BLOCK}, {"x1": 1, "x2": 1, "x4": 1, "x6": 1}),
    ("block required for podset; rack required for slices; BestFit", SLICED, TOPOLOGY_OBJ, 4, {"required": BLOCK, "slice_level": LEAF, "slice_size": 2}, {"x3": 1, "x5": 1, "x1": 1, "x2": 1}),
    # Blocks of equal slice count: the one with fewer pods first (b2), racks likewise; hosts under a rack by name.
    ("block preferred for podset; rack required for slices; BestFit", UPSTREAM_NODES, TOPOLOGY_OBJ, 4, {"preferred": BLOCK, "slice_level": LEAF, "slice_size": 2}, {"x1": 1, "x5": 1, "x4": 2}),
    # The blocks' shares (9 and 3) are not kept: the hosts are pooled and x6 takes 6.
    (
        "block preferred for podset; host required for slices; 2 blocks with unbalanced subdomains; BestFit",
        UNBALANCED,
        TOPOLOGY_OBJ,
        12,
        {"preferred": BLOCK, "slice_level": HOST, "slice_size": 3},
        {"x1": 3, "x3": 3, "x6": 6},
    ),
]


@pytest.mark.parametrize(("case", "nodes", "topology", "pods", "kw", "want"), UPSTREAM_TAS, ids=[c[0][:60] for c in UPSTREAM_TAS])
def test_upstream_placement_cases(case, nodes, topology, pods, kw, want):
    assert kq.place(nodes, NO_POOL, topology, pods, 1, **kw) == want


# --- failed-node replacement -------------------------------------------------------------------------------------

JOB = {f"b2-l1-n{i:02d}": 1 for i in range(16)}  # a 16-node job required in leaf b2-l1


def after_admission(free: dict[str, int]) -> list[Node]:
    """cluster(free), with the job's 16 nodes busy."""
    return [Node(n.name, n.labels, 0 if n.name in JOB else n.free_gpus) for n in cluster(free)]


# (case, free nodes per leaf before the job, placement arguments, nodes already being replaced, new assignment)
REPLACE = [
    # Required leaf: the replacement stays in b2-l1, on its spare node n16.
    ("required", {"b1-l1": 20, "b1-l2": 20, "b2-l1": 17, "b2-l2": 20}, {"required": LEAF}, (), {**JOB, "b2-l1-n03": 0, "b2-l1-n16": 1}),
    # No spare node in b2-l1: evicted and requeued whole, though 60 nodes are free elsewhere.
    ("required-no-spare", {"b1-l1": 20, "b1-l2": 20, "b2-l1": 16, "b2-l2": 20}, {"required": LEAF}, (), None),
    # Preferred: anywhere, by the podset's own rule: the best-fit leaf, the one with the fewest free nodes (b2-l2).
    ("preferred", {"b1-l1": 20, "b1-l2": 20, "b2-l1": 16, "b2-l2": 2}, {"preferred": LEAF}, (), {**JOB, "b2-l1-n03": 0, "b2-l2-n00": 1}),
    # A second node fails while the first is still being replaced: evicted.
    ("second-failure", {"b1-l1": 20, "b1-l2": 20, "b2-l1": 17, "b2-l2": 20}, {"required": LEAF}, ("b2-l1-n05",), None),
    # The same node reported again is the one being replaced.
    ("same-node-again", {"b1-l1": 20, "b1-l2": 20, "b2-l1": 17, "b2-l2": 20}, {"required": LEAF}, ("b2-l1-n03",), {**JOB, "b2-l1-n03": 0, "b2-l1-n16": 1}),
]


@pytest.mark.parametrize(("case", "free", "kw", "unhealthy", "want"), REPLACE, ids=[c[0] for c in REPLACE])
def test_replacement_of_a_failed_node(case, free, kw, unhealthy, want):
    got = kq.replacement(after_admission(free), FLAVOR, TOPOLOGY_OBJ, JOB, "b2-l1-n03", 8, unhealthy=unhealthy, **kw)
    assert got == ({h: c for h, c in want.items() if c} if want else None)


def test_replacement_of_the_only_node_has_no_domain_to_keep():
    nodes = after_admission({"b1-l1": 20, "b1-l2": 20, "b2-l1": 16, "b2-l2": 3})
    got = kq.replacement(nodes, FLAVOR, TOPOLOGY_OBJ, {"b2-l1-n03": 1}, "b2-l1-n03", 8, required=LEAF)
    assert got == {"b2-l2-n00": 1}  # the best-fit leaf anywhere (b2-l2, 3 free)
