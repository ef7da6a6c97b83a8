"""What Kueue v0.19.2 does with the objects prod-kueue renders: admission, the three tiers, reclaim between queues,
a gang larger than its queue's quota, and Topology Aware Scheduling. The rules are restated in tests/kueue_v019.py
(each citing kubernetes-sigs/kueue@v0.19.2); here they run on the render itself."""

from __future__ import annotations

import pytest
import yaml

from components.jobs import topology as job_topology
from components.platform import kueue
from tests import kueue_v019 as kq
from tests.helpers import cfg
from tools import upstream

STACK = "prod-kueue"
GANG = 8  # GPUs per node: a gang of n nodes asks n * GANG


@pytest.fixture
def objs(rendered) -> list[dict]:
    return rendered(STACK).objects


def kinds(objs: list[dict], kind: str) -> list[dict]:
    return [o for o in objs if o["kind"] == kind and o["apiVersion"].startswith(("kueue.x-k8s.io", "scheduling.k8s.io"))]


def jobs(objs: list[dict]) -> list[dict]:
    return [o for o in objs if o["kind"] in ("PyTorchJob", "TFJob", "MPIJob", "TrainJob")]


def wl(objs, name: str, queue: str, nodes: int, tier: str, at: int = 0) -> kq.Workload:
    """A workload of `nodes` whole nodes in ClusterQueue `queue` at the rendered WorkloadPriorityClass `tier`."""
    priority = kq.priority_of({kq.PRIORITY_LABEL: tier}, kinds(objs, "WorkloadPriorityClass"))
    return kq.Workload(name, queue, nodes * GANG, priority, admitted_at=at, created_at=at)


def test_every_job_reaches_a_cluster_queue_that_admits_its_namespace(objs):
    """Each rendered job's labels name a LocalQueue of its namespace (Kueue otherwise leaves the Workload pending)
    and a WorkloadPriorityClass that exists (otherwise no Workload is built), and the LocalQueue's ClusterQueue
    selects the namespace (a null selector would select none)."""
    lqs, cqs = kinds(objs, "LocalQueue"), {o["metadata"]["name"]: o for o in kinds(objs, "ClusterQueue")}
    wpcs = kinds(objs, "WorkloadPriorityClass")
    seen = set()
    for job in jobs(objs):
        ns, labels = job["metadata"]["namespace"], job["metadata"]["labels"]
        cq = kq.cluster_queue_for(labels, ns, lqs)
        assert cq is not None, f"{job['metadata']['name']} carries no queue label: Kueue would leave it unmanaged"
        assert kq.admits_namespace(cqs[cq], {"kubernetes.io/metadata.name": ns})
        kq.priority_of(labels, wpcs)
        seen.add(job["metadata"]["name"])
    assert seen == {"llama-pretrain", "llama-sft", "ds-moe", "nccl-acceptance"}


def test_an_unlabelled_job_in_a_training_namespace_lands_in_its_namespace_queue(objs):
    """A hand-written job without the label gets `queue-name: default` from Kueue's webhooks when the namespace has
    a LocalQueue `default` (pkg/controller/jobframework/defaults.go defaultLocalQueueApplies): research's points at
    research, training's at the default queue."""
    lqs = kinds(objs, "LocalQueue")
    defaulted = {kq.QUEUE_LABEL: kueue.DEFAULT_LOCAL_QUEUE}
    assert kq.cluster_queue_for(defaulted, "research", lqs) == "research"
    assert kq.cluster_queue_for(defaulted, "training", lqs) == "production"


def test_jobs_are_admitted_whole_and_bound_by_the_default_scheduler(objs):
    """Kueue admits a Kubeflow job or TrainJob whole (no minCount: pkg/controller/jobs/kubeflow/kubeflowjob,
    trainjob) and ungates its pods to kube-scheduler: no Volcano PodGroup, queue or schedulerName is left."""
    for job in jobs(objs):
        assert "schedulingPolicy" not in job["spec"].get("runPolicy", {}), job["metadata"]["name"]
        assert "runtimePatches" not in job["spec"] or all(p["manager"] != "volcano" for p in job["spec"]["runtimePatches"])
    for rt in (o for o in objs if o["kind"] == "ClusterTrainingRuntime"):
        assert "podGroupPolicy" not in rt["spec"], rt["metadata"]["name"]
        for rj in rt["spec"]["template"]["spec"]["replicatedJobs"]:
            assert "schedulerName" not in rj["template"]["spec"]["template"]["spec"]


def test_the_manager_config_enables_the_integrations_fastpath_uses_and_only_counts_gpus(objs):
    """The chart leaves PyTorchJob and TFJob off; batch/job, pod, deployment and statefulset would queue fastpath's
    rendezvous store under the namespace's `default` LocalQueue. The pods also request CPU, memory and RDMA devices,
    which no ClusterQueue covers: under BlockUndeclared (the default) none would ever be admitted."""
    conf = kueue.manager_config(cfg(STACK))
    frameworks = set(conf["integrations"]["frameworks"])
    assert {"kubeflow.org/pytorchjob", "kubeflow.org/tfjob", "trainer.kubeflow.org/trainjob"} <= frameworks
    assert not frameworks & {"batch/job", "pod", "deployment", "statefulset", "kubeflow.org/mpijob"}
    covered = {r for cq in kinds(objs, "ClusterQueue") for g in cq["spec"]["resourceGroups"] for r in g["coveredResources"]}
    requested = {r for job in jobs(objs) if job["kind"] == "PyTorchJob" for c in job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"] for r in c["resources"]["requests"]}
    assert requested - covered and conf["resources"]["quotaCheckStrategy"] == "IgnoreUndeclared"
    # Requeued without limit: the count never resets in a Workload's life, so a limit would one day deactivate a
    # week-long run for its lost nodes (pkg/controller/core/workload_controller.go reconcileNotReadyTimeout).
    assert "backoffLimitCount" not in conf["waitForPodsReady"]["requeuingStrategy"]
    # Kueue's job webhooks fail closed wherever this selects: the training namespaces only, so no other install's Job
    # (cert-manager's, NVSentinel's) waits on Kueue (charts/kueue/templates/webhook/manifests.yaml).
    assert conf["managedJobsNamespaceSelector"]["matchExpressions"][0]["values"] == ["research", "training"]


def test_a_kueue_stack_renders_nothing_of_volcano(objs, rendered):
    """No Volcano Queue, PodGroup or scheduler name: Volcano is not installed, so its kinds would be refused."""
    assert not [o["kind"] for o in objs if "volcano.sh" in o["apiVersion"]]
    assert "volcano" not in {p["name"] for p in rendered(STACK).packages}


def test_the_manager_config_keeps_every_chart_default_it_does_not_change():
    """The chart's value replaces the whole Configuration (kubernetes-sigs/kueue@v0.19.2:charts/kueue/templates/
    manager/manager-config.yaml parses and re-emits it): every key of the chart's default that fastpath does not
    set on purpose is restated with the chart's value, so nothing the chart relied on is lost."""
    chart = yaml.safe_load(yaml.safe_load(upstream.path("values/kueue.values.yaml").read_text())["managerConfig"]["controllerManagerConfigYaml"])
    ours = kueue.manager_config(cfg(STACK))
    changed = {"integrations"}  # fastpath's own list (test above says which and why)
    assert {k: v for k, v in chart.items() if k not in changed} == {k: ours[k] for k in chart if k not in changed}


def test_the_pods_never_preempt_one_another(objs):
    """Kueue preempts whole workloads; a pod's own PriorityClass must not let kube-scheduler evict single pods of
    another gang for it, so every training PriorityClass is preemptionPolicy Never."""
    pcs = [o for o in objs if o["kind"] == "PriorityClass"]
    assert {o["metadata"]["name"] for o in pcs} == {o["metadata"]["name"] for o in kinds(objs, "WorkloadPriorityClass")}
    assert all(o["preemptionPolicy"] == "Never" for o in pcs)


def quotas(objs) -> kq.Quotas:
    return kq.quotas(kinds(objs, "ClusterQueue"))


def test_the_rendered_quotas_are_the_weight_shares_in_whole_nodes(objs):
    """production weight 5 and research weight 3 of 32 nodes: 20 and 12 nodes guaranteed; research may borrow up
    to its 192-GPU cap, production without limit; the acceptance guarantees nothing and borrows its largest run."""
    q = quotas(objs)
    assert {n: (v.nominal, v.borrowing_limit) for n, v in q.queues.items()} == {
        "production": (160, None),
        "research": (96, 96),
        "fastpath-acceptance": (0, 64),
    }
    assert kq.potential_available(q, "research") == 192


# (running workloads as (name, queue, nodes, tier), the pending one, what Kueue does, its victims)
CASES = [
    # Tiers within a queue, on a full cluster (research holds its 12 nodes): critical evicts the lowest tier first,
    # whole, the fewest that make room; a tier evicts nothing of its own tier or above.
    (
        [("a", "production", 12, "training-standard"), ("b", "production", 8, "training-preemptible"), ("r", "research", 12, "training-standard")],
        ("p", "production", 8, "training-critical"),
        "preempt",
        ("b",),
    ),
    ([("a", "production", 20, "training-standard"), ("r", "research", 12, "training-standard")], ("p", "production", 4, "training-critical"), "preempt", ("a",)),
    ([("a", "production", 20, "training-standard"), ("r", "research", 12, "training-standard")], ("p", "production", 4, "training-standard"), "wait", ()),
    ([("a", "production", 20, "training-preemptible"), ("r", "research", 12, "training-standard")], ("p", "production", 4, "training-preemptible"), "wait", ()),
    # Idle quota elsewhere in the cohort: borrowed, nothing evicted.
    ([("a", "production", 20, "training-standard")], ("p", "production", 8, "training-standard"), "admit", ()),
    # Across queues: research within its quota reclaims from production borrowing beyond its own, any tier.
    ([("a", "production", 24, "training-critical"), ("r", "research", 8, "training-standard")], ("p", "research", 4, "training-preemptible"), "preempt", ("a",)),
    # ...but a queue within its quota is never a victim, whatever the tiers.
    ([("a", "production", 20, "training-critical"), ("r", "research", 12, "training-preemptible")], ("p", "production", 4, "training-critical"), "wait", ()),
    # Larger than its queue's guarantee: runs on idle quota (borrowing), never preempts for it.
    ([], ("p", "research", 16, "training-critical"), "admit", ()),
    ([("a", "production", 20, "training-preemptible")], ("p", "research", 16, "training-critical"), "wait", ()),
    # Beyond what research could ever hold (its 192-GPU cap): never admitted.
    ([], ("p", "research", 25, "training-critical"), "nofit", ()),
    # The acceptance runs on idle GPUs only and is reclaimed by training within its quota.
    ([("a", "production", 24, "training-standard")], ("acc", "fastpath-acceptance", 8, "training-standard"), "admit", ()),
    ([("acc", "fastpath-acceptance", 8, "training-standard"), ("a", "production", 20, "training-preemptible")], ("p", "research", 12, "training-preemptible"), "preempt", ("acc",)),
]


@pytest.mark.parametrize(("running", "pending", "kind", "victims"), CASES)
def test_admission_tiers_and_reclaim_on_the_rendered_queues(objs, running, pending, kind, victims):
    admitted = [wl(objs, *w, at=i) for i, w in enumerate(running)]
    got = kq.decide(quotas(objs), wl(objs, *pending, at=len(running)), admitted)
    assert (got.kind, got.victims) == (kind, victims), got.reason


def test_a_16_node_gang_on_a_4_leaf_fabric_takes_one_leaf_when_one_fits(objs):
    """The rendered Topology and flavor on 4 leaves of 16 nodes in 2 blocks: a 16-node gang asking for the leaf
    (preferred, as the runtimes do) takes the fullest leaf that still fits it whole (best fit); with no leaf free
    enough it spills inside one block (preferred walks one level up), and required waits."""
    flavor = next(o for o in kinds(objs, "ResourceFlavor"))
    topo = next(o for o in kinds(objs, "Topology"))
    block_key, leaf_key, host_key = kq.levels(topo)

    def nodes(free: dict[str, int]) -> list[kq.Node]:
        out = []
        for leaf, block in (("l1", "b1"), ("l2", "b1"), ("l3", "b2"), ("l4", "b2")):
            for i in range(16):
                labels = {block_key: block, leaf_key: leaf, host_key: f"{leaf}-{i:02}", **flavor["spec"]["nodeLabels"]}
                out.append(kq.Node(f"{leaf}-{i:02}", labels, 8 if i < free[leaf] else 0))
        return out

    def leaves(got: dict[str, int] | None) -> set[str]:
        return {n.split("-")[0] for n, c in (got or {}).items() if c}

    # What the rendered runtimes' pods ask for (the TrainJobs' podsets), not a key picked here.
    runtime = next(o for o in objs if o["kind"] == "ClusterTrainingRuntime")
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    asked = pod["metadata"]["annotations"][job_topology.PREFERRED]

    assert leaves(kq.place(nodes({"l1": 16, "l2": 16, "l3": 16, "l4": 16}), flavor, topo, 16, 8, preferred=asked)) == {"l1"}
    assert leaves(kq.place(nodes({"l1": 16, "l2": 10, "l3": 16, "l4": 16}), flavor, topo, 16, 8, preferred=asked)) == {"l1"}
    spilled = kq.place(nodes({"l1": 12, "l2": 10, "l3": 8, "l4": 6}), flavor, topo, 16, 8, preferred=asked)
    assert leaves(spilled) == {"l1", "l2"} and sum(spilled.values()) == 16
    assert kq.place(nodes({"l1": 12, "l2": 10, "l3": 8, "l4": 6}), flavor, topo, 16, 8, required=asked) is None
    # A node Topograph has not labelled yet is invisible to TAS: it takes no pod.
    unlabelled = [kq.Node(n.name, {k: v for k, v in n.labels.items() if k != leaf_key}, n.free_gpus) for n in nodes({"l1": 16, "l2": 0, "l3": 0, "l4": 0})]
    assert kq.place(unlabelled, flavor, topo, 1, 8, preferred=asked) is None


def test_every_job_template_asks_for_its_placement(objs):
    """The PyTorchJob requires its block (its own `topology`); TrainJobs take the runtimes' leaf preference."""
    pytorch = next(o for o in jobs(objs) if o["kind"] == "PyTorchJob")
    worker = pytorch["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]
    assert worker == {job_topology.REQUIRED: "fabric.topograph.run/tier-1"}
    for rt in (o for o in objs if o["kind"] == "ClusterTrainingRuntime"):
        for rj in rt["spec"]["template"]["spec"]["replicatedJobs"]:
            assert rj["template"]["spec"]["template"]["metadata"]["annotations"][job_topology.PREFERRED] == "fabric.topograph.run/tier-0"


# kubeflow/trainer@v1.9.4:pkg/controller.v1/register_controller.go SupportedSchemeReconciler (kinds, matched
# case-insensitively by EnabledSchemes.Set) and cmd/training-operator.v1/main.go setupControllers: only the enabled
# schemes get a reconciler and a webhook handler; an empty list enables all.
OPERATOR_SCHEMES = {"tfjob", "pytorchjob", "xgboostjob", "mpijob", "paddlejob", "jaxjob"}
# kubernetes-sigs/kueue@v0.19.2:pkg/controller/jobs/kubeflow/jobs/{pytorchjob,tfjob}: the kubeflow.org/v1 kinds Kueue
# admits (its mpijob integration is mpi-operator's v2beta1).
KUEUE_V1_KINDS = {"pytorchjob", "tfjob"}


def test_on_kueue_the_training_operator_serves_only_the_kinds_kueue_admits():
    """Every other v1 kind has neither controller nor webhook handler, so the overlay's webhook (failurePolicy Fail)
    refuses its creation instead of letting it run outside quota; and every scheme named is one the operator knows
    (an unknown one exits the manager at start)."""
    from components.platform import training_operator

    flags = training_operator.manager_flags(cfg(STACK))
    schemes = {f.split("=", 1)[1].lower() for f in flags if f.startswith("--enable-scheme=")}
    assert schemes == KUEUE_V1_KINDS and schemes <= OPERATOR_SCHEMES


# kubernetes-sigs/kueue@v0.19.2:charts/kueue/templates/_helpers.tpl kueue.selectorLabels: the manager pods' labels
# (kueue.name is the chart name, `kueue`, without nameOverride).
KUEUE_MANAGER_LABELS = {"app.kubernetes.io/name": "kueue", "control-plane": "controller-manager"}


def test_the_managers_spread_selects_the_managers_own_pods():
    """A spread constraint whose selector matches no pod spreads nothing: both webhook replicas could land on one
    node and a single drain would take Kueue's fail-closed webhooks away."""
    values = kueue.values(cfg(STACK))
    (spread,) = values["controllerManager"]["topologySpreadConstraints"]
    selector = spread["labelSelector"]["matchLabels"]
    assert selector and selector.items() <= KUEUE_MANAGER_LABELS.items()


def test_the_summary_says_what_an_eviction_does_to_a_pytorchjob(rendered):
    """Kueue evicts by suspending the job (kubernetes-sigs/kueue@v0.19.2:pkg/controller/jobframework/reconciler.go
    stopJob): every agent gets SIGTERM, and the readmitted pods meet the same c10d store, which is not Kueue's to
    restart. The reviewer is told when that resumes and what it costs, not a promise it always does."""
    summary = rendered(STACK).files["SUMMARY.md"]
    section = summary[summary.index("### `llama-pretrain`") :]
    faults = next(line for line in section.splitlines() if line.startswith("| faults |"))
    assert "leaves the rendezvous open on SIGTERM" in faults and "each readmission spends one of its" in faults
