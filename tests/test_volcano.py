"""Volcano (components/platform/volcano.py): the scheduler configuration, queues and priority tiers."""

import yaml

from components.platform import volcano
from tests.helpers import cfg
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
