"""Volcano (components/platform/volcano.py): the scheduler configuration, queues and priority tiers."""

import pytest
import yaml

from components.jobs.runtime_v2.controller import effective_jobset
from components.model.config import PlatformConfig
from components.platform import volcano
from components.platform.component import training_namespaces
from tests.conftest import stack_platform
from tests.helpers import cfg, stack_raw
from tools import upstream


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
