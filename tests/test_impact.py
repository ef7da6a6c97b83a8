"""Day 2: what a stack edit does to a cluster that is already running week-long jobs (components/impact).

Each row is a realistic edit of a committed stack; the impact model must give the change ids and classes the
upstream controllers at the pinned tags imply (the reference of each rule is `UPSTREAM[...]` in
components/impact/model.py, restated in the row's `why`). The previous state is the committed stack as it renders;
the model is a pure function of the two states, so no mocks are needed here. The program's refusal and
SUMMARY.md's section are tested at the end through the mocks, as `pulumi preview` runs it."""

from __future__ import annotations

import copy
import json

import pytest

from components.impact import ack, preview
from components.impact.model import CLASSES, UPSTREAM, _minors_skipped, impact
from components.impact.state import canonical, snapshot
from components.model import stack
from tests.conftest import ROOT
from tests.helpers import DROP, changed, stack_raw
from tools import render


def state_of(raw: dict) -> dict:
    cfg = stack.parse(raw, "test")
    return snapshot(cfg.platform, cfg.jobs)


def edited(name: str, platform: dict | None = None, jobs=None) -> dict:
    raw = copy.deepcopy(stack_raw(name))
    changed(raw["platform"], platform or {})
    if jobs is not None:
        raw["jobs"] = jobs(raw.get("jobs") or [])
    return raw


def job_edit(index: int, **fields):
    def edit(jobs: list) -> list:
        jobs[index] = {**jobs[index], **fields}
        return jobs

    return edit


def rail(i: int) -> dict:
    return {"hca": f"mlx5_{12 + i}", "interface": f"ibp{230 + i}s0", "subnet": f"10.100.{128 + 16 * i}.0/20", "speedGbps": 400}


# (id, stack, platform changes, job edit, {change id: class} that must be there, the worst class,
#  a phrase of the consequence a reviewer must read, the UPSTREAM rules the row rests on)
EDITS = [
    (
        "vfs-per-pf",
        "prod-ib",
        {"fabric.vfsPerPf": 4},
        None,
        {"fabric.sriov": "disruptive", "network.ip-pools": "destructive"},
        "destructive",
        "reboots each GPU node: 32 GPU nodes, 4 at a time",
        ["sriov-reboot", "sriov-pace", "ipam"],
    ),
    (
        "rail-added",
        "prod-ib",
        {"fabric.rails": lambda r: [*r, rail(0)]},
        None,
        {"fabric.sriov": "disruptive", "network.ip-pools-added": "no-op", "jobs.training/llama-pretrain": "disruptive"},
        "disruptive",
        "rewrites the ConnectX firmware",
        ["sriov-reboot", "job-replace"],
    ),
    ("rail-removed", "prod-ib", {"fabric.rails": lambda r: r[:-1]}, None, {"fabric.sriov": "disruptive", "network.ip-pools-removed": "rolling"}, "disruptive", "drains", ["sriov-drain", "ipam"]),
    (
        "mtu-raised",
        "prod-ib",
        {"fabric.mtu": 4092},
        None,
        {"fabric.sriov": "disruptive", "acceptance": "rolling"},
        "disruptive",
        "drains (evicting every pod that requests an nvidia.com/ resource, GPUs included) each GPU node: 32 GPU nodes",
        ["sriov-drain"],
    ),
    # A key written at its default changes nothing, not even the acceptance job's fingerprint of the fabric.
    ("default-written", "prod-ib", {"fabric.podInterface": "eth0"}, None, {"acceptance": None}, None, "", []),
    ("drain-pace", "prod-ib", {"fabric.sriovMaxUnavailable": 8}, None, {"fabric.sriov-pace": "no-op", "acceptance": None}, "no-op", "drains nothing", ["sriov-pace"]),
    ("rail-subnet", "prod-ib", {"fabric.rails": lambda r: [{**r[0], "subnet": "10.101.0.0/20"}, *r[1:]]}, None, {"network.ip-pools": "destructive"}, "destructive", "duplicate addresses", ["ipam"]),
    (
        "queue-weight",
        "prod-ib",
        {"scheduler.queues": lambda q: [{**q[0], "weight": 1}, *q[1:]]},
        None,
        {"scheduler.queues": "disruptive"},
        "disruptive",
        "takes whole running gangs",
        ["volcano-reclaim"],
    ),
    ("queue-added", "prod-ib", {"scheduler.queues": lambda q: [*q, {"name": "burst", "weight": 2}]}, None, {"scheduler.queues": "disruptive"}, "disruptive", "burst added", ["volcano-reclaim"]),
    (
        "queue-cap",
        "prod-ib",
        {"scheduler.queues": lambda q: [q[0], q[1], {**q[2], "gpus": 16}]},
        None,
        {"scheduler.capability": "disruptive"},
        "disruptive",
        "caps a queue's deserved share at its capability",
        ["volcano-capability"],
    ),
    (
        "queue-not-reclaimable",
        "prod-ib",
        {"scheduler.queues": lambda q: [{**q[0], "reclaimable": False}, *q[1:]]},
        None,
        {"scheduler.queues": "disruptive"},
        "disruptive",
        "reclaimable True -> False",
        ["volcano-reclaim"],
    ),
    # Kueue: a queue whose guarantee shrinks below what it runs is reclaimed from, whole gangs.
    (
        "kueue-quota",
        "prod-kueue",
        {"scheduler.queues": lambda q: [{**q[0], "weight": 1}, *q[1:]]},
        None,
        {"scheduler.quota": "disruptive"},
        "disruptive",
        "production nominal 160 -> 64",
        ["kueue-reclaim"],
    ),
    # GPUs by DRA on a live cluster: the device plugin goes, and with it every GPU count the nodes advertise.
    (
        "gpu-allocation-dra",
        "prod-v2",
        {"kubernetesVersion": "1.34", "fabric.attachment": "dra", "scheduler.queues": lambda q: [{k: v for k, v in x.items() if k != "gpus"} for x in q]},
        None,
        # (and the Network Operator, with nothing left to run beside a host DOCA-OFED, is uninstalled: destructive)
        {"gpu.allocation": "disruptive", "charts.network-operator": "destructive"},
        "destructive",
        "stop advertising nvidia.com/gpu",
        ["gpu-dra"],
    ),
    # A runtime changed under Kueue stops the TrainJobs that name it (their podsets no longer match the Workload).
    ("kueue-runtime", "prod-kueue", {"trainer.maxRestarts": 7}, None, {"trainer.runtimes": "disruptive"}, "disruptive", "llama-sft (4 nodes)", ["kueue-runtime"]),
    # The topology: new levels are new Kueue objects and, with Topograph, relabelled nodes; on Volcano, new HyperNodes.
    (
        "topology-keys",
        "prod-kueue",
        {"nodes.topology": lambda t: {**t, "levels": [t["levels"][0], {**t["levels"][1], "nodeLabel": "fabric.example.com/leaf"}]}},
        None,
        # ...and the runtimes' annotations name the new key: under Kueue that stops the TrainJobs naming them.
        {"topology": "rolling", "trainer.runtimes": "disruptive"},
        "disruptive",
        "Topograph removes the level labels it no longer writes",
        ["kueue-topology", "topograph-labels"],
    ),
    (
        "topology-volcano",
        "prod-v2",
        {"nodes.topology": lambda t: {**t, "placement": {"level": "leaf", "mode": "required"}}},
        None,
        {"topology": "rolling"},
        "rolling",
        "HyperNodes",
        ["volcano-hypernodes"],
    ),
    # Another gang scheduler: each keeps its own books.
    ("scheduler-switch", "prod-v2", {"scheduler.name": "kueue"}, None, {"scheduler.name": "destructive"}, "destructive", "drain the queues first", ["job-replace"]),
    ("job-image", "prod-ib", None, job_edit(0, image="nvcr.io/nvidia/pytorch:25.11-py3"), {"jobs.training/llama-pretrain": "disruptive"}, "disruptive", "16-node gang is killed", ["job-replace"]),
    ("job-removed", "prod-ib", None, lambda j: j[1:], {"jobs.training/llama-pretrain": "disruptive"}, "disruptive", "is deleted", ["job-replace"]),
    ("job-added", "prod-ib", None, lambda j: [*j, {**j[1], "name": "resnet-2"}], {"jobs.training/resnet-2": "no-op"}, "no-op", "queues for 4 nodes", ["job-replace"]),
    (
        "nccl-override",
        "prod-ib",
        {"fabric.ncclOverrides": {"NCCL_IB_QPS_PER_CONNECTION": "4"}},
        None,
        {"jobs.training/llama-pretrain": "disruptive", "jobs.training/resnet-horovod": "disruptive"},
        "disruptive",
        "killed",
        ["job-replace"],
    ),
    (
        "namespace-added",
        "prod-ib",
        {"trainingNamespaces": ["training", "eval"]},
        None,
        {"namespaces.added": "no-op", "operations.health": "rolling"},
        "rolling",
        "nothing running changes",
        ["namespace-delete", "nvsentinel"],
    ),
    ("reaper-deadline", "prod-ib", {"reaper": {"startDeadlineMinutes": 10}}, None, {"operations.reaper": "rolling"}, "rolling", "fails at the reaper's first pass", ["reaper"]),
    ("reaper-off", "prod-ib", {"reaper": {"enabled": False}}, None, {"operations.reaper": "rolling"}, "rolling", "holds its GPUs again", ["reaper"]),
    ("health-off", "prod-roce", {"health": {"enabled": False}}, None, {"operations.health": "rolling", "charts.nvsentinel": "destructive"}, "destructive", "no longer taken out", ["nvsentinel"]),
    ("health-lost-node-manual", "prod-v2", {"health": {"enabled": True, "lostNodeMinutes": None}}, None, {"operations.health": "rolling"}, "rolling", "apply to the next fault", ["nvsentinel"]),
    ("namespace-removed", "prod-roce", {"trainingNamespaces": ["research"]}, None, {"namespaces.removed": "destructive"}, "destructive", "deletes every object in it", ["namespace-delete"]),
    (
        "shared-rail-interface",
        "prod-roce",
        {"fabric.rails": lambda r: [{**r[0], "interface": "ens3f0np0"}, r[1]]},
        None,
        {"network.operands": "rolling", "network.attachments": "rolling"},
        "rolling",
        "running pods keep their devices",
        ["nic-operands"],
    ),
    (
        "gpu-operator-bump-managed",
        "prod-roce",
        {"versions.gpuOperator": "v26.10.0"},
        None,
        {"charts.gpu-operator": "disruptive"},
        "disruptive",
        "waits for the training pods on it to finish",
        ["gpu-driver"],
    ),
    ("gpu-operator-bump-preinstalled", "prod-ib", {"versions.gpuOperator": "v26.10.0"}, None, {"charts.gpu-operator": "rolling"}, "rolling", "restart with the new release", ["helm-upgrade"]),
    ("volcano-bump", "prod-ib", {"versions.volcano": "1.15.2"}, None, {"charts.volcano": "rolling"}, "rolling", "1.15.1 -> 1.15.2", ["helm-upgrade"]),
    ("driver-preinstalled", "prod-roce", {"gpu.driverPreinstalled": True}, None, {"gpu.driver": "disruptive"}, "disruptive", "DriverInstallState", ["gpu-driver"]),
    ("checkpoint-size", "prod-ib", {"checkpoints.size": "300Ti"}, None, {"checkpoints.size": "rolling"}, "rolling", "200Ti -> 300Ti", ["pvc-immutable"]),
    ("checkpoint-class", "prod-roce", {"checkpoints.storageClass": "ceph-rbd"}, None, {"checkpoints.claims": "destructive"}, "destructive", "cannot change in place", ["pvc-immutable"]),
    ("acceptance-scaling", "prod-ib", {"acceptance.scaling": [1, 2]}, None, {"acceptance": "rolling"}, "rolling", "runs again", ["job-replace"]),
    # Only the check annotation moves: patched in place (FabricAcceptance replaces on spec), nothing runs again.
    ("acceptance-warn-band", "prod-ib", {"acceptance.warnEfficiency": 0.9}, None, {"acceptance": None}, None, "", []),
    (
        "trainer-image",
        "prod-v2",
        {"trainer.image": "nvcr.io/nvidia/pytorch:25.11-py3"},
        None,
        {"trainer.runtimes": "rolling"},
        "rolling",
        "keep the JobSet made from the old runtime",
        ["runtime-snapshot", "job-replace"],
    ),
    # On NVL72 a TrainJob's own runtime changes too: only that TrainJob names it, and it is not replaced with it.
    (
        "trainer-image-nvl72",
        "prod-gb200",
        {"trainer.image": "nvcr.io/nvidia/pytorch:25.11-py3"},
        None,
        {"trainer.runtimes": "rolling", "trainer.own-runtimes": "rolling"},
        "rolling",
        "only when the TrainJob is made again",
        ["runtime-snapshot", "job-replace"],
    ),
    (
        "monitoring-off",
        "prod-ib",
        {"monitoring.enabled": False, "monitoring.serviceMonitorLabels": DROP, "monitoring.ncclInspectorImage": DROP},
        None,
        {"charts.gpu-operator": "rolling", "jobs.training/llama-pretrain": "disruptive"},
        "disruptive",
        "values changed",
        ["helm-upgrade", "job-replace"],
    ),
    # Telemetry lives in every GPU pod: turning it on or off replaces the running v1 jobs (their pod templates).
    (
        "telemetry-off",
        "prod-ib",
        {"monitoring.ncclInspectorImage": DROP},
        None,
        {"jobs.training/llama-pretrain": "disruptive", "jobs.training/resnet-horovod": "disruptive"},
        "disruptive",
        "replaced",
        ["job-replace"],
    ),
    ("cluster-renamed", "dev", {"cluster": "dev2"}, None, {"cluster": "destructive"}, "destructive", "another cluster", ["job-replace"]),
    (
        "tcp-queue-weight",
        "dev",
        {"scheduler.queues": [{"name": "training", "weight": 2, "gpus": 8}]},
        None,
        {"scheduler.queues": "disruptive"},
        "disruptive",
        "example-train (2 nodes)",
        ["volcano-reclaim"],
    ),
    (
        "roce-shared-to-hostdevice",
        "prod-roce",
        {"fabric.attachment": "hostdevice"},
        None,
        {"network.operands": "rolling", "network.ip-pools": "destructive", "jobs.research/mistral-sft": "disruptive"},
        "destructive",
        "duplicate addresses",
        ["ipam", "nic-operands", "job-replace"],
    ),
    (
        "roce-shared-to-hostnetwork",
        "prod-roce",
        {"fabric.attachment": "hostnetwork", "fabric.podInterface": "bond0"},
        None,
        {"network.ip-pools-removed": "rolling", "network.attachments": "rolling", "jobs.research/mistral-sft": "disruptive"},
        "disruptive",
        "allocates from them again",
        ["ipam"],
    ),
    (
        "rdma-only-to-hostnetwork",
        "prod-v2",
        {"fabric.attachment": "hostnetwork", "fabric.podInterface": "bond0"},
        None,
        {"trainer.runtimes": "rolling", "jobs.training/ds-moe": "disruptive"},
        "disruptive",
        "keep the JobSet made from the old runtime",
        ["job-replace"],
    ),
    ("rail-renamed", "prod-ib", {"fabric.rails": lambda r: [{**r[0], "name": "fast0"}, *r[1:]]}, None, {"network.ip-pools": "destructive"}, "destructive", "duplicate addresses", ["ipam"]),
    ("gpu-only-cluster", "prod-ib", {"nodes.cpuNodes": False}, None, {"jobs.training/llama-pretrain": "disruptive"}, "disruptive", "loses the store", ["store-recreate"]),
    (
        "sriov-to-shared",
        "prod-ib",
        {"fabric.attachment": "shared", "fabric.vfsPerPf": DROP, "fabric.sriovMaxUnavailable": DROP},
        None,
        {"fabric.sriov": "disruptive", "jobs.training/llama-pretrain": "disruptive"},
        "disruptive",
        "drains",
        ["sriov-drain", "job-replace"],
    ),
]


def _apply_callables(platform_changes: dict | None, raw_platform: dict) -> dict:
    """Changes whose value is a function of the current value (a rail list, a queue list) resolved."""
    out = {}
    for key, value in (platform_changes or {}).items():
        if callable(value):
            cur = raw_platform
            for part in key.split("."):
                cur = cur[part]
            value = value(copy.deepcopy(cur))
        out[key] = value
    return out


@pytest.mark.parametrize(("row", "name", "platform", "jobs", "expect", "worst", "phrase", "rules"), EDITS, ids=[e[0] for e in EDITS])
def test_each_edit_gets_its_class_and_consequence(row, name, platform, jobs, expect, worst, phrase, rules):
    old = state_of(stack_raw(name))
    raw = edited(name, _apply_callables(platform, stack_raw(name)["platform"]), jobs)
    imp = impact(old, state_of(raw))
    got = {c.id: c.cls for c in imp.changes}
    assert {k: got.get(k) for k in expect} == expect, [(c.id, c.cls, c.what) for c in imp.changes]
    assert imp.worst == worst
    text = " ".join(f"{c.what} {c.consequence}" for c in imp.changes)
    assert phrase in text, text
    cited = {u for c in imp.changes for u in c.upstream}
    assert {UPSTREAM[r] for r in rules} <= cited


# Facets no stack key moves (fastpath's own code or chart values do): (id, facet path, new value, change, class, rule).
CODE_CHANGES = [
    ("rdma-mode", ("sriovPool", "rdmaMode"), "shared", "fabric.rdma-mode", "disruptive", "sriov-rdma-mode"),
    ("volcano-conf", ("volcanoConf",), "0" * 16, "scheduler.conf", "disruptive", "volcano-conf"),
    ("doca-driver", ("ofedDriver", "template"), "0" * 16, "network.doca-driver", "disruptive", "doca-driver"),
    ("pod-security", ("namespaceSecurity", "training"), "baseline", "namespaces.security", "rolling", "pod-security"),
    # A cert-manager jump over a minor (v1.21.1 -> v1.23.0): still in place, with upstream's one-minor rule told.
    ("cert-manager-skip", ("charts", "cert-manager", "version"), "v1.23.0", "charts.cert-manager", "rolling", "cert-manager-minors"),
]


@pytest.mark.parametrize(("row", "path", "value", "change", "cls", "rule"), CODE_CHANGES, ids=[c[0] for c in CODE_CHANGES])
def test_changes_fastpath_itself_makes_are_classified_too(row, path, value, change, cls, rule):
    old = state_of(edited("prod-ib", {"gpu.hostMofed": False}))  # with the operator's DOCA driver
    new = copy.deepcopy(old)
    target = new["facets"]
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    (got,) = impact(old, new).changes
    assert (got.id, got.cls, got.keys) == (change, cls, ())
    assert UPSTREAM[rule] in got.upstream


def test_the_edits_cover_every_upstream_rule_and_class():
    assert {r for e in EDITS for r in e[7]} | {c[5] for c in CODE_CHANGES} == set(UPSTREAM)
    assert {cls for e in EDITS for cls in e[4].values()} - {None} == set(CLASSES)
    assert len(EDITS) >= 25


@pytest.mark.parametrize("name", render.stack_names())
def test_an_unchanged_stack_has_an_empty_impact(name):
    state = state_of(stack_raw(name))
    assert impact(state, state_of(stack_raw(name))).changes == ()
    # As the engine hands the previous state back: numbers as floats, nulls dropped.
    round_trip = json.loads(json.dumps(state), parse_int=float)
    assert impact(round_trip, state).changes == ()


@pytest.mark.parametrize("name", render.stack_names())
def test_the_committed_render_records_the_state_the_stack_has(name):
    """rendered/<stack>/state.json is what `pulumi preview` compares with under the mocks: it must be current."""
    committed = json.loads((ROOT / "rendered" / name / "state.json").read_text())
    assert canonical(committed) == state_of(stack_raw(name))


def test_a_drain_names_every_running_gang_and_what_it_does():
    """What the reviewer reads of the gangs: the v1 PyTorchJob fails unless it rejoins in time, the MPIJob fails
    (kubeflow/trainer@v1.9.4: a lost MPI worker fails the job), each resubmitted from its checkpoint dir."""
    old = state_of(stack_raw("prod-ib"))
    imp = impact(old, state_of(edited("prod-ib", {"fabric.vfsPerPf": 4})))
    (sriov,) = [c for c in imp.changes if c.id == "fabric.sriov"]
    # prod-ib has health on: survivors wait for a lost node's release too (operator_v1.join_timeout).
    assert "llama-pretrain (16 nodes) fails, unless a free node takes the evicted pod within 1500s" in sriov.consequence
    assert "resnet-horovod (4 nodes) fails (a lost worker fails the job)" in sriov.consequence
    assert sriov.keys == ("fabric.vfsPerPf",)


def test_v2_gangs_come_back_by_themselves():
    """A TrainJob's gang restarts whole when a pod is evicted, without spending its restart budget (JobSet
    BlockingRecreate: components/jobs/contract.py v2_fault_summary)."""
    name = "prod-v2"
    old = state_of(stack_raw(name))
    weights = _apply_callables({"scheduler.queues": lambda q: [{**q[0], "weight": 1}, q[1]]}, stack_raw(name)["platform"])
    (queues,) = [c for c in impact(old, state_of(edited(name, weights))).changes if c.id == "scheduler.queues"]
    assert "restarts the whole gang, resuming from /checkpoints (a drain does not spend its restart budget)" in queues.consequence


def test_a_first_deployment_claims_nothing():
    new = state_of(stack_raw("prod-ib"))
    assert impact(None, new).first and impact(None, new).changes == ()


# ------------------------------------------------------------------------------------------- acknowledgment


def vfs(n: int):
    old = state_of(stack_raw("prod-ib"))
    return impact(old, state_of(edited("prod-ib", {"fabric.vfsPerPf": n})))


def test_an_acknowledgment_covers_its_class_and_that_change_only():
    imp = vfs(4)
    sriov, pools = (next(c for c in imp.changes if c.id == i) for i in ("fabric.sriov", "network.ip-pools"))
    assert {c.id for c in ack.unacknowledged(imp, {})} == {"fabric.sriov", "network.ip-pools"}
    right = {"fabric.sriov": f"disruptive {sriov.fingerprint}", "network.ip-pools": f"destructive {pools.fingerprint}"}
    assert ack.unacknowledged(imp, right) == [] and ack.stale(imp, right) == []
    # Told as disruptive, it is destructive: refused again.
    assert [c.id for c in ack.unacknowledged(imp, {**right, "network.ip-pools": f"disruptive {pools.fingerprint}"})] == ["network.ip-pools"]
    # Left in the file after it was applied, it does not cover the next VF count: another fingerprint.
    later = vfs(2)
    assert {c.id for c in ack.unacknowledged(later, right)} == {"fabric.sriov", "network.ip-pools"}
    assert ack.stale(later, right) == ["fabric.sriov", "network.ip-pools"]


def test_a_previous_state_that_cannot_be_compared_is_refused_until_acknowledged():
    """A stack deployed by a fastpath that exported no state (its `profile` is there), or one of another schema:
    nothing can be told, so nothing is waved through."""
    new = state_of(stack_raw("prod-ib"))
    for old in ({"schema": None}, {**new, "schema": 1}):
        (change,) = impact(old, new).changes
        assert (change.id, change.cls) == ("previous-state", "destructive") and "make diff" in change.consequence
        assert ack.unacknowledged(impact(old, new), {"previous-state": f"destructive {change.fingerprint}"}) == []


@pytest.mark.parametrize(("pace", "nodes", "at_once"), [(4, 32, 4), ("25%", 32, 8), ("10%", 32, 3), ("30%", 8, 2)])
def test_a_percentage_pace_rounds_down_as_the_sriov_operator_does(pace, nodes, at_once):
    """Mellanox/sriov-network-operator@network-operator-v26.4.0-beta.7:api/v1/helper.go MaxUnavailable:
    GetScaledValueFromIntOrPercent(..., false) rounds down."""
    from components.impact.model import at_a_time

    assert at_a_time(pace, nodes) == at_once


def test_a_percentage_pace_that_rounds_to_no_node_is_refused():
    """0 nodes at a time: the drain controller never starts a drain (controllers/drain_controller_helper.go), so the
    VFs would never be configured."""
    p = changed(stack_platform_copy("prod-ib"), {"fabric.sriovMaxUnavailable": "3%"})
    with pytest.raises(stack.ConfigError, match=r"sriovMaxUnavailable 3% of 32 nodes rounds down to 0"):
        stack.parse({"platform": p}, "stacks/Pulumi.x.yaml")


def stack_platform_copy(name: str) -> dict:
    return copy.deepcopy(stack_raw(name)["platform"])


def _preview(name: str, platform: dict, acks: dict | None = None):
    """`pulumi preview` under the mocks: the stack's last deployment is its committed render."""
    raw = edited(name, platform)
    extra = {"fastpath:platform": raw["platform"]}
    if acks:
        extra["fastpath:acknowledge"] = acks
    old = render.committed_state(render.RENDERED / name)
    return render.run_program(name, extra_config=extra, references={preview.self_reference(name): {"state": old}})


def test_preview_refuses_an_unacknowledged_reboot_naming_file_key_consequence_and_the_fix():
    with pytest.raises(render.RenderError) as exc:
        _preview("prod-ib", {"fabric.vfsPerPf": 4})
    msg = str(exc.value)
    assert msg.startswith("stacks/Pulumi.prod-ib.yaml: 2 change(s) would disrupt the running cluster")
    assert "fastpath:platform.fabric.vfsPerPf" in msg
    assert "reboots each GPU node: 32 GPU nodes, 4 at a time" in msg and "llama-pretrain (16 nodes)" in msg
    lines = [f"    {c.id}: {ack.ack_value(c)}" for c in vfs(4).changes if c.cls in ("disruptive", "destructive")]
    assert "fastpath:acknowledge:\n" + "\n".join(lines) in msg
    assert exc.value.registered == 0  # refused before any resource


def test_preview_with_the_acknowledgment_passes_and_exports_the_new_state():
    acks = {c.id: ack.ack_value(c) for c in vfs(4).changes if c.cls in ("disruptive", "destructive")}
    run = _preview("prod-ib", {"fabric.vfsPerPf": 4}, acks)
    state = canonical(run.outputs["state"])
    assert state["facets"]["sriovPolicies"]["nvidia-network-operator/rail0"]["numVfs"] == 4


@pytest.mark.parametrize("value", ["yes", "disruptive", "disruptive 3F9A1C2E", "reboot 3f9a1c2e"])
def test_an_acknowledgment_without_class_and_fingerprint_is_refused(value):
    with pytest.raises(render.RenderError, match=r"fastpath:acknowledge: must map a change id to the class and fingerprint"):
        _preview("prod-ib", {}, {"fabric.sriov": value})


def test_make_diff_compares_a_render_with_a_stack_file(tmp_path, capsys):
    from tools import impact as tool

    edited_file = tmp_path / "Pulumi.prod-ib.yaml"
    edited_file.write_text((ROOT / "stacks" / "Pulumi.prod-ib.yaml").read_text().replace("vfsPerPf: 8", "vfsPerPf: 4"))
    assert tool.main([str(ROOT / "rendered" / "prod-ib"), str(edited_file)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("worst: destructive") and "fastpath:acknowledge:\n    fabric.sriov: disruptive " in out
    assert tool.main([str(ROOT / "rendered" / "prod-ib"), str(ROOT / "stacks" / "Pulumi.prod-ib.yaml"), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["changes"] == []


@pytest.mark.parametrize(("content", "message"), [(None, "no such file"), ("config: [1]", "config: must be a mapping of keys to values"), ("config:\n  fastpath:platform: {}", "fastpath:platform")])
def test_make_diff_names_an_input_it_cannot_read(tmp_path, capsys, content, message):
    from tools import impact as tool

    path = tmp_path / "Pulumi.x.yaml"
    if content is not None:
        path.write_text(content)
    assert tool.main([str(ROOT / "rendered" / "dev"), str(path)]) == 2
    assert message in capsys.readouterr().err


# Edits of a stack first changed to a base (old = base, new = base + edit): (id, stack, base, edit, change, class).
ON_A_BASE = [
    # The DOCA driver's pod template is its env too: NFS over RDMA sets ENABLE_NFSRDMA (network_operator.ofed_env).
    ("doca-env", "prod-ib", {"gpu.hostMofed": False}, {"checkpoints.nfs.rdma": False}, "network.doca-driver", "disruptive"),
    ("doca-tolerations", "prod-ib", {"gpu.hostMofed": False}, {"gpu.taintKey": "dedicated"}, "network.doca-driver", "disruptive"),
    # Any MTU change drains (NeedToUpdateSriov compares the VF group's MTU with the node's), not only a rise.
    ("mtu-lowered", "prod-ib", {"fabric.mtu": 4092}, {"fabric.mtu": 2048}, "fabric.sriov", "disruptive"),
    # nvidia-peermem is part of the driver's install state: the full upgrade flow on a managed driver.
    ("peermem", "prod-roce", {}, {"gpu.gpuDirect": "peermem", "gpu.hostMofed": True}, "gpu.driver", "disruptive"),
    # Node health makes every GPU Operator operand tolerate the quarantine taint: the driver DaemonSet's pods
    # change, a new revision the upgrade controller rolls out node by node (podInSyncWithDS), on a managed driver.
    ("health-managed-driver", "prod-roce", {"health": {"enabled": False}}, {"health": {"enabled": True}}, "gpu.driver", "disruptive"),
    ("taint-managed-driver", "prod-roce", {}, {"gpu.taintKey": "dedicated"}, "gpu.driver", "disruptive"),
    # The GPU product selects the SR-IOV policies' and the pools' nodes: nodes that stop matching lose VFs and blocks.
    ("gpu-product", "prod-ib", {}, {"gpu.product": "NVIDIA-H200"}, "fabric.sriov", "disruptive"),
    ("gpu-product-pools", "prod-ib", {}, {"gpu.product": "NVIDIA-H200"}, "network.ip-pools", "destructive"),
]


@pytest.mark.parametrize(("row", "name", "base", "edit", "change", "cls"), ON_A_BASE, ids=[r[0] for r in ON_A_BASE])
def test_edits_on_a_base(row, name, base, edit, change, cls):
    old = state_of(edited(name, base))
    got = {c.id: c.cls for c in impact(old, state_of(edited(name, {**base, **edit}))).changes}
    assert got.get(change) == cls, got


def test_an_acknowledged_edit_renders_with_its_impact_in_the_summary(tmp_path, capsys):
    """`make render` of a disruptive edit, acknowledged, against the committed render: it passes, prints the impact
    and SUMMARY.md's section names each change, its class, what it does and the acknowledgment."""
    changes = [c for c in vfs(4).changes if c.cls in ("disruptive", "destructive")]
    text = (ROOT / "stacks" / "Pulumi.prod-ib.yaml").read_text().replace("vfsPerPf: 8", "vfsPerPf: 4")
    text += "  fastpath:acknowledge:\n" + "".join(f"    {c.id}: {ack.ack_value(c)}\n" for c in changes)
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    (stacks / "Pulumi.prod-ib.yaml").write_text(text)
    assert render.main(["--stack", "prod-ib", "--stacks-dir", str(stacks), "--out", str(tmp_path / "out")]) == 0
    assert "impact against the committed render: worst destructive" in capsys.readouterr().out
    summary = (tmp_path / "out" / "SUMMARY.md").read_text()
    section = summary[summary.index("## Impact on the running cluster") :]
    assert "Worst: **destructive**." in section
    for c in changes:
        assert f"`{c.id}: {ack.ack_value(c)}`" in section
    assert "reboots each GPU node: 32 GPU nodes, 4 at a time" in section


@pytest.mark.parametrize("name", render.stack_names())
def test_every_facet_of_a_state_is_read_by_a_rule(name):
    """A facet state.py records and no rule reads would change unseen: FACETS_READ lists what the rules read, and
    each name there is read by the source of some rule."""
    import inspect

    from components.impact import model

    facets = set(state_of(stack_raw(name))["facets"])
    assert facets <= set(model.FACETS_READ), facets - set(model.FACETS_READ)
    source = "\n".join(inspect.getsource(rule) for rule in model.RULES)
    assert all(f'"{f}"' in source for f in model.FACETS_READ), [f for f in model.FACETS_READ if f'"{f}"' not in source]


def test_the_doca_rollout_policy_is_not_the_driver(monkeypatch):
    """ofedDriver.upgradePolicy says how the operator rolls a change out; the DaemonSet's pods do not carry it
    (Mellanox/network-operator@v26.4.1:manifests/state-ofed-driver/0050_ofed-driver-ds.yaml): changing it alone
    reloads no driver, while any other ofedDriver field does."""
    from components.platform import network_operator

    base = edited("prod-ib", {"gpu.hostMofed": False})
    old = state_of(base)
    real = network_operator.nic_cluster_policy

    def tweaked(field: str, value):
        def ncp(p):
            obj = real(p)
            obj["spec"]["ofedDriver"][field] = value
            return obj

        return ncp

    monkeypatch.setattr(network_operator, "nic_cluster_policy", tweaked("upgradePolicy", {"autoUpgrade": True, "maxParallelUpgrades": 2}))
    assert "network.doca-driver" not in {c.id for c in impact(old, state_of(base)).changes}
    monkeypatch.setattr(network_operator, "nic_cluster_policy", tweaked("startupProbe", {"initialDelaySeconds": 20}))
    assert {c.id: c.cls for c in impact(old, state_of(base)).changes}["network.doca-driver"] == "disruptive"


def test_a_state_without_the_driver_pods_is_judged_by_the_operators_values():
    """States recorded before `gpuDriver.pods` existed: a GPU Operator values change under a managed driver may be
    a new driver DaemonSet revision (prod-roce enabling health adds every operand's quarantine toleration), so it
    is told as the driver rollout it may be; with the values unchanged nothing is claimed."""
    base = edited("prod-roce", {"health": {"enabled": False}})
    old = state_of(base)
    old["facets"]["gpuDriver"].pop("pods")
    got = {c.id: c.cls for c in impact(old, state_of(edited("prod-roce", {"health": {"enabled": True}}))).changes}
    assert got["gpu.driver"] == "disruptive"
    assert "gpu.driver" not in {c.id for c in impact(old, state_of(base)).changes}


@pytest.mark.parametrize(
    ("old", "new", "skipped"), [("v1.19.6", "v1.21.1", 1), ("v1.19.6", "v1.20.3", 0), ("v1.21.1", "v1.21.2", 0), ("v1.21.1", "v1.24.0", 2), ("v1.21.1", "v2.0.0", 0), ("v1.21.1", "main", 0)]
)
def test_minors_an_upgrade_jumps_over(old, new, skipped):
    assert _minors_skipped(old, new) == skipped
