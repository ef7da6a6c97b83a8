"""Volcano (components/platform/volcano.py): the scheduler configuration, queues and priority tiers."""

import pytest
import yaml

from components.jobs.runtime_v2.controller import effective_jobset
from components.model.config import PlatformConfig
from components.platform import shares, volcano
from components.platform.component import training_namespaces
from tests.conftest import stack_platform
from tests.helpers import cfg, stack_raw
from tools import render, upstream


def scheduler_conf(platform) -> dict:
    return yaml.safe_load(volcano.values(platform)["custom"]["scheduler_config_override"])


def test_volcano_scheduler_takes_whole_gangs():
    """volcano-sh/volcano@v1.15.1: `gangpreempt`/`gangreclaim` (pkg/scheduler/actions/factory.go, lowercase names
    from their `Name()`; a misspelt action makes the scheduler keep its previous conf) evict whole victim jobs
    (actions/utils/bundle.go `CreateJobBundles`) and commit only when the whole preemptor gang is pipelined.
    No `enqueue`: allocate then moves Pending PodGroups to Inqueue (actions/allocate/allocate.go
    `buildAllocateContext`), so the Training Operator creates the gang's pods and it can preempt (gangpreempt
    skips `job.IsPending()`). Legacy `preempt`/`reclaim` evict task by task and split gangs."""
    conf = scheduler_conf(cfg("prod-ib"))
    actions = [a.strip() for a in conf["actions"].split(",")]
    assert actions == ["allocate", "backfill", "gangreclaim", "gangpreempt"]
    assert not {"enqueue", "preempt", "reclaim"} & set(actions)
    assert conf["configurations"] == [{"name": "gangpreempt", "arguments": {"allowWholeBundle": True}}, {"name": "gangreclaim", "arguments": {"allowWholeBundle": True}}]
    tiers = [[p["name"] for p in t["plugins"]] for t in conf["tiers"]]
    assert tiers == [["priority", "gang", "conformance"], ["drf", "predicates", "proportion", "nodeorder", "binpack"]]
    plugins = {p["name"]: p for t in conf["tiers"] for p in t["plugins"]}
    assert "overcommit" not in plugins  # an enqueue vote only: nothing without the enqueue action
    assert plugins["drf"]["enablePreemptable"] is False
    assert plugins["binpack"]["arguments"]["binpack.resources"] == "nvidia.com/gpu"


def test_chart_default_scheduler_never_preempts():
    """Why fastpath overrides it: the chart's file (volcano-sh/volcano@v1.15.1:installer/helm/chart/volcano/
    config/volcano-scheduler.conf) has neither preempt nor reclaim action, and its `enqueue` keeps a gang that
    does not fit Pending."""
    default = yaml.safe_load(upstream.path("values/volcano.volcano-scheduler.conf").read_text())
    actions = {a.strip() for a in default["actions"].split(",")}
    assert actions == {"enqueue", "allocate", "backfill"}
    assert scheduler_conf(cfg("dev")) != default


def test_priority_classes_say_what_the_scheduler_does():
    """The descriptions promise only what the configured scheduler does (volcano-sh/volcano@v1.15.1
    actions/gangpreempt/gangpreempt.go: same queue only, strictly lower priority; gangreclaim ignores priority)."""
    tiers = {pc["metadata"]["name"]: pc["description"] for pc in volcano.priority_classes(cfg("dev"))}
    for description in tiers.values():
        assert "same queue" in description and "whole" in description
        assert "Across queues tiers do not apply" in description and "reserves nothing" in description
    assert "may preempt lower tiers" not in tiers["training-critical"]


def test_volcano_queues_and_tiers():
    qs = volcano.queues(cfg("prod-ib"))
    assert [(q["metadata"]["name"], q["spec"]["weight"], q["spec"].get("capability")) for q in qs] == [
        ("research", 3, {"nvidia.com/gpu": 192}),
        ("production", 5, None),
        ("eval", 1, {"nvidia.com/gpu": 32}),
    ]
    tiers = {pc["metadata"]["name"]: pc for pc in volcano.priority_classes(cfg("dev"))}
    assert tiers["training-critical"]["value"] > tiers["training-standard"]["value"] > tiers["training-preemptible"]["value"]
    assert tiers["training-preemptible"]["preemptionPolicy"] == "Never"


def test_our_volcano_conf_passes_the_gang_actions_rule():
    """The scheduler configuration fastpath installs, as the chart renders it into the scheduler's ConfigMap
    (volcano-sh/volcano@v1.15.1 installer/helm/chart/volcano/templates/scheduler.yaml), is what the policy pack's
    volcano-gang-actions rule asks of anyone's."""
    from tools.lint import lint

    conf = volcano.values(cfg("prod-ib"))["custom"]["scheduler_config_override"]
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "volcano-scheduler-configmap", "namespace": "volcano-system"}, "data": {"volcano-scheduler.conf": conf}}
    assert [v for v in lint([cm]) if v.rule == "volcano-gang-actions"] == []


def podgroup_webhook(queue: str | None, namespace_annotations: dict) -> str:
    """Restates volcano-sh/volcano@v1.15.1:pkg/webhooks/admission/podgroups/mutate/mutate_podgroup.go
    createPodGroupPatch, on the PodGroup as created: the CRD defaults an unset spec.queue to `default`
    (config/crd/volcano/bases/scheduling.volcano.sh_podgroups.yaml), and only a PodGroup in `default` takes the
    queue its namespace's `scheduling.volcano.sh/queue-name` annotation names."""
    queue = queue or "default"
    if queue != "default":
        return queue
    return namespace_annotations.get(volcano.QUEUE_ANNOTATION, queue)


def test_the_podgroup_webhook_is_on_with_the_charts_own():
    """The chart enables /podgroups/mutate only when told (volcano-sh/volcano@v1.15.1:installer/helm/chart/volcano/
    values.yaml custom.enabled_admissions; templates/admission.yaml grants namespace reads only then): fastpath keeps
    every webhook the chart turns on and adds it."""
    admissions = volcano.values(cfg("prod-v2"))["custom"]["enabled_admissions"].split(",")
    chart = yaml.safe_load(upstream.path("values/volcano.values.yaml").read_text())["custom"]["enabled_admissions"]
    assert admissions == [*chart.split(","), "/podgroups/mutate"]


@pytest.mark.parametrize("stack_name", ["prod-v2", "prod-ib", "dev"])
def test_a_job_naming_no_queue_lands_in_its_namespaces_queue(rendered, stack_name):
    """Each training namespace's PodGroups that name no queue end in the queue the stack gives that namespace:
    a TrainJob written by hand, on any published runtime (the trainer's PodGroup takes the runtime's queue
    annotation, kubeflow/trainer@v2.3.0:pkg/runtime/framework/plugins/volcano/volcano.go Build), through the
    webhook restated above and the Namespace as rendered; and stack-file jobs carry it themselves."""
    platform = cfg(stack_name)
    run = rendered(stack_name)
    namespaces = {o["metadata"]["name"]: o for o in run.objects if o["kind"] == "Namespace"}
    runtimes = [o for o in run.objects if o["kind"] == "ClusterTrainingRuntime" and not o["metadata"]["name"].endswith("-acceptance")]
    for ns in platform.training_namespaces:
        want = platform.scheduler.queue_of(ns)
        annotations = namespaces[ns]["metadata"].get("annotations") or {}
        for rt in runtimes:
            job = {"metadata": {"name": "by-hand", "namespace": ns}, "spec": {"runtimeRef": {"name": rt["metadata"]["name"]}, "trainer": {"numNodes": 2}}}
            group = effective_jobset(job, rt)["podGroup"]
            assert podgroup_webhook(group.get("queue"), annotations) == want, (ns, rt["metadata"]["name"])
    for name, contract in (run.run.outputs.get("jobs") or {}).items():
        spec = next(j for j in stack_raw(stack_name)["jobs"] if j["name"] == name)
        assert contract["queue"] == (spec.get("queue") or platform.scheduler.queue_of(contract["namespace"])), name


def test_namespace_queues_default_to_the_default_queue():
    platform = cfg("prod-v2")
    assert platform.scheduler.queue_of("research") == "research"
    assert platform.scheduler.queue_of("training") == platform.scheduler.queue_for_jobs == "research"
    raw = stack_platform("prod-v2")
    raw["scheduler"]["queues"][1]["namespaces"] = ["training"]
    moved = PlatformConfig.model_validate(raw)
    assert moved.scheduler.queue_of("training") == "production"
    assert {o["metadata"]["name"]: o["metadata"]["annotations"][volcano.QUEUE_ANNOTATION] for o in training_namespaces(moved)} == {
        "training": "production",
        "research": "research",
    }


# ------------------------------------------------------------------------------- deserved shares on a full cluster
# volcano-sh/volcano@v1.15.1:pkg/scheduler/plugins/proportion/proportion.go OnSessionOpen (the water-filling of
# `deserved`), AllocatableFn and PreemptiveFn (allocated + request <= deserved, strict): shares.py restates them.
PROD_IB = [shares.Queue("research", 3, 192), shares.Queue("production", 5, None), shares.Queue("eval", 1, 32)]


@pytest.mark.parametrize(
    ("queues", "requests", "want"),
    [
        # Every queue asks for more than the cluster: weights split it, no cap binds.
        (PROD_IB, None, {"research": 256 * 3 / 9, "production": 256 * 5 / 9, "eval": 256 / 9}),
        # Only two queues have jobs: the third takes no part.
        (PROD_IB, {"research": 1e9, "production": 1e9}, {"research": 96, "production": 160, "eval": 0}),
        # A capability caps a share; what it leaves goes to the others in later rounds, up to their caps.
        (PROD_IB, {"research": 1e9, "eval": 1e9}, {"research": 192, "production": 0, "eval": 32}),
        (PROD_IB, {"production": 1e9, "eval": 1e9}, {"research": 0, "production": 224, "eval": 32}),
        # A queue asking less than its weight's part gets its request; the rest goes to the others, up to their caps.
        (PROD_IB, {"research": 16, "production": 1e9, "eval": 1e9}, {"research": 16, "production": 256 - 16 - 32, "eval": 32}),
    ],
)
def test_deserved_shares(queues, requests, want):
    got = shares.deserved(queues, 256, requests)
    assert got == pytest.approx(want)


def test_a_gang_larger_than_its_queues_share_never_starts_on_a_full_cluster_and_the_fix_is_named():
    assert shares.full_cluster(PROD_IB, 256, "research", 85).starts
    big = shares.full_cluster(PROD_IB, 256, "research", 86)  # 86 > 85.33: AllocatableFn's comparison is strict
    assert not big.starts and "a weight of 4 for research" in str(big)
    assert shares.deserved([*PROD_IB[1:], shares.Queue("research", 4, 192)], 256)["research"] >= 86
    assert "raise eval's gpus to 40" in str(shares.full_cluster(PROD_IB, 256, "eval", 40))


def test_the_render_says_per_job_whether_its_gang_starts_on_a_full_cluster(rendered, caplog):
    """Every stack job's contract says it (SUMMARY.md's job table shows it); a job that never starts while every
    queue wants more than its share is warned at preview with the weight that would fix it."""
    for stack_name in ("prod-ib", "prod-v2"):
        for name, contract in rendered(stack_name).run.outputs["jobs"].items():
            assert contract["fullCluster"].startswith("starts: "), (stack_name, name, contract["fullCluster"])
        assert "| fullCluster | starts: " in rendered(stack_name).files["SUMMARY.md"]
    raw = stack_raw("prod-ib")
    job = next(j for j in raw["jobs"] if j["name"] == "resnet-horovod")
    caplog.set_level("WARNING")
    render.run_program("prod-ib", extra_config={"fastpath:jobs": [{**job, "nodes": 11}, *[j for j in raw["jobs"] if j is not job]]})
    warned = [r.getMessage() for r in caplog.records]
    # prod-ib's acceptance queue (weight 1, capped above its part) competes too: research's share is 3/10 of 256.
    assert any("job resnet-horovod: its gang never while every queue wants more than its share: 88 GPUs over research's share of 76.8 " in w and "a weight of 4 for research" in w for w in warned), (
        warned
    )


def test_the_scheduler_and_controllers_take_a_leader_lease():
    """Off in the chart (volcano-sh/volcano@v1.15.1:installer/helm/chart/volcano/values.yaml
    custom.leader_elect_enable: false; templates/scheduler.yaml and controllers.yaml pass --leader-elect from it):
    during a rollout the old and the new scheduler would both bind pods, two gangs onto the same GPUs."""
    chart = yaml.safe_load(upstream.path("values/volcano.values.yaml").read_text())["custom"]
    assert chart["leader_elect_enable"] is False
    assert volcano.values(cfg("dev"))["custom"]["leader_elect_enable"] is True
