"""One fabric topology (nodes.topology), rendered for both schedulers from one level list, and each job placed in it
as the schedulers would place it: Kueue's Topology Aware Scheduling (tests/kueue_v019.py) and Volcano's HyperNodes
(tests/volcano_topology_v115.py) applied to what fastpath renders."""

from __future__ import annotations

import pytest
import yaml

from components.jobs import checks, trainjob
from components.jobs import topology as job_topology
from components.model.config import PlatformConfig
from components.model.job import JobSpec
from components.model.profile import profile
from components.platform import kueue, topology, volcano
from tests import kueue_v019 as kq
from tests import volcano_topology_v115 as vt
from tests.conftest import stack_platform
from tests.helpers import changed

HOST = "kubernetes.io/hostname"


def platform(scheduler: str, **changes: object) -> PlatformConfig:
    """prod-kueue's platform (2 blocks x 2 leaves of 8 nodes, Topograph) on `scheduler`."""
    p = changed(stack_platform("prod-kueue"), {"scheduler__name": scheduler, **changes}, "__")
    return PlatformConfig.model_validate(p)


def fabric(free: dict[str, int]) -> list[tuple[str, dict[str, str], int]]:
    """(node, labels, free GPUs): 2 blocks x 2 leaves x 8 nodes labelled as Topograph labels them, the first
    `free[leaf]` nodes of each leaf idle and the rest full."""
    p = platform("kueue")
    block_key, leaf_key = p.nodes.topology.keys()
    out = []
    for leaf, block in (("l1", "b1"), ("l2", "b1"), ("l3", "b2"), ("l4", "b2")):
        for i in range(8):
            name = f"{leaf}-n{i}"
            labels = {block_key: f"sw-{block}", leaf_key: f"sw-{leaf}", HOST: name, "nvidia.com/gpu.product": "NVIDIA-H200"}
            out.append((name, labels, 8 if i < free.get(leaf, 8) else 0))
    return out


def kueue_view(p: PlatformConfig) -> tuple[dict, dict]:
    objs = topology.kueue_objects(p)
    return next(o for o in objs if o["kind"] == "ResourceFlavor"), next(o for o in objs if o["kind"] == "Topology")


def test_one_level_list_gives_both_schedulers_the_same_levels():
    """Kueue's Topology and Volcano's label discovery read the same keys in the same order, the host last, and
    Topograph is told to write exactly those keys (closest first)."""
    k, v = platform("kueue"), platform("volcano")
    _, topo = kueue_view(k)
    kueue_levels = [lv["nodeLabel"] for lv in topo["spec"]["levels"]]
    conf = yaml.safe_load(yaml.safe_dump(volcano.values(v)["custom"]["controller_config_override"]))
    assert vt.label_levels(conf) == {topology.VOLCANO_TYPE: kueue_levels[:-1][::-1]}  # tier 1 first, host dropped
    assert kueue_levels == ["fabric.topograph.run/tier-1", "fabric.topograph.run/tier-0", HOST]
    assert topology.topograph_values(k)["engine"]["params"]["fabricLabels"] == kueue_levels[:-1][::-1]
    assert topology.topograph_values(k) == topology.topograph_values(v)


def test_volcano_loads_the_plugin_that_honours_network_topology_only_with_a_topology():
    """Without network-topology-aware a PodGroup's hard networkTopology is ignored (tests/volcano_topology_v115.py
    place_gang); fastpath loads it exactly when the stack has a topology, with GPU-only binpack weights."""
    with_topology = yaml.safe_load(volcano.values(platform("volcano"))["custom"]["scheduler_config_override"])
    without = yaml.safe_load(volcano.values(platform("volcano", nodes__topology=None))["custom"]["scheduler_config_override"])
    assert vt.PLUGIN in vt.plugins_of(with_topology) and vt.PLUGIN not in vt.plugins_of(without)
    weights = vt.hypernode_binpack_weights(vt.plugin_arguments(with_topology))
    assert {k: w for k, w in weights.items() if w} == {vt.GPU: 10}


def _volcano_placement(p: PlatformConfig, free: dict[str, int], pods: int, framework: str = "torch") -> str | None:
    """Where Volcano puts a TrainJob's gang of `pods` nodes under the runtime fastpath renders."""
    runtime = trainjob.runtime(profile(p), framework, "training-standard")
    conf = yaml.safe_load(volcano.values(p)["custom"]["scheduler_config_override"])
    nodes = [vt.Node(n, labels, 8, 8 - f) for n, labels, f in fabric(free)]
    hypernodes = vt.discover(volcano.values(p)["custom"]["controller_config_override"], nodes)
    got = vt.place_gang(hypernodes, nodes, pods, 8, vt.podgroup_network_topology(runtime), vt.plugins_of(conf), vt.plugin_arguments(conf))
    if got is None:
        return None
    return _domain({n: labels for n, labels, _ in fabric(free)}, got[1], p)


def _kueue_placement(p: PlatformConfig, free: dict[str, int], pods: int, placement: dict[str, str] | None = None) -> str | None:
    """Where Kueue's TAS puts a podset of `pods` nodes carrying the runtime's annotations."""
    runtime = trainjob.runtime(profile(p), "torch", "training-standard")
    tpl = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    annotations = placement or tpl["metadata"]["annotations"]
    flavor, topo = kueue_view(p)
    nodes = [kq.Node(n, labels, f) for n, labels, f in fabric(free)]
    got = kq.place(
        nodes,
        flavor,
        topo,
        pods,
        8,
        required=annotations.get(job_topology.REQUIRED),
        preferred=annotations.get(job_topology.PREFERRED),
    )
    if got is None:
        return None
    return _domain({n: labels for n, labels, _ in fabric(free)}, got, p)


def _domain(labels: dict[str, dict[str, str]], assignment: dict[str, int], p: PlatformConfig) -> str:
    """The smallest level holding every assigned node: a leaf name, a block name, or `spread`."""
    block_key, leaf_key = p.nodes.topology.keys()
    leaves = {labels[n][leaf_key] for n, c in assignment.items() if c}
    blocks = {labels[n][block_key] for n, c in assignment.items() if c}
    if len(leaves) == 1:
        return leaves.pop()
    return blocks.pop() if len(blocks) == 1 else "spread"


# (free nodes per leaf, gang size, where both schedulers put it). The runtimes' placement is prod-kueue's: the leaf,
# preferred (Kueue podset-preferred-topology; Volcano networkTopology soft at tier 1).
SAME_PLACE = [
    # A leaf with room: the fullest leaf that fits (Kueue best fit, Volcano HyperNode binpack).
    ({"l1": 8, "l2": 6, "l3": 4, "l4": 2}, 4, "sw-l3"),
    ({"l1": 8, "l2": 6, "l3": 4, "l4": 2}, 6, "sw-l2"),
    ({"l1": 8, "l2": 8, "l3": 8, "l4": 8}, 8, "sw-l1"),
]


@pytest.mark.parametrize(("free", "pods", "where"), SAME_PLACE)
def test_both_schedulers_place_a_gang_in_the_same_leaf(free, pods, where):
    assert _kueue_placement(platform("kueue"), free, pods) == where
    assert _volcano_placement(platform("volcano"), free, pods) == where


def test_a_gang_larger_than_any_leaf_spills_within_one_block_when_preferred_and_waits_when_required():
    """16 nodes on leaves of 8: preferred spills to the block with room (Kueue walks one level up; Volcano's soft
    mode takes the lowest tier that fits), required at the leaf never fits (Kueue TopologyPlacementFailed, and the
    render refuses a job that asks for it with nodes.topology.levels[].nodes)."""
    free = {"l1": 8, "l2": 8, "l3": 8, "l4": 4}
    assert _kueue_placement(platform("kueue"), free, 16) == "sw-b1"
    assert _volcano_placement(platform("volcano"), free, 16) == "sw-b1"
    leaf = platform("kueue").nodes.topology.key("leaf")
    assert _kueue_placement(platform("kueue"), free, 16, {job_topology.REQUIRED: leaf}) is None


def test_a_required_block_job_lands_in_one_block_on_kueue():
    """prod-kueue's llama-pretrain: 16 nodes, block required; with one block short of a node it takes the other."""
    block = platform("kueue").nodes.topology.key("block")
    free = {"l1": 8, "l2": 7, "l3": 8, "l4": 8}
    assert _kueue_placement(platform("kueue"), free, 16, {job_topology.REQUIRED: block}) == "sw-b2"
    assert _kueue_placement(platform("kueue"), {"l1": 8, "l2": 7, "l3": 8, "l4": 7}, 16, {job_topology.REQUIRED: block}) is None


def test_the_mpi_runtime_groups_launcher_and_nodes_into_one_domain_on_kueue():
    """The MPI runtime's launcher and node replicated jobs are two podsets: grouped (podset-group-name on both,
    exactly two), so Kueue places them in one domain; Volcano's PodGroup holds both anyway."""
    runtime = trainjob.runtime(profile(platform("kueue")), "mpi", "training-standard")
    notes = [rj["template"]["spec"]["template"]["metadata"]["annotations"] for rj in runtime["spec"]["template"]["spec"]["replicatedJobs"]]
    assert len(notes) == 2 and all(n.get(job_topology.GROUP) == notes[0][job_topology.GROUP] for n in notes)
    assert all(job_topology.PREFERRED in n for n in notes)
    volcano_rt = trainjob.runtime(profile(platform("volcano")), "mpi", "training-standard")
    assert volcano_rt["spec"]["podGroupPolicy"]["volcano"]["networkTopology"] == {"mode": "soft", "highestTierAllowed": 1}


def _job(**kw: object) -> JobSpec:
    return JobSpec.model_validate({"name": "j", "image": "nvcr.io/nvidia/pytorch:25.10-py3", "command": ["python", "t.py"], "nodes": 4, **kw})


# (scheduler, platform changes, job, the key refused and what the message says)
REFUSED = [
    ("kueue", {}, {"api": "v1", "framework": "mpi"}, "framework", ["Training Operator MPIJob", "api v2"]),
    ("kueue", {}, {"nodes": None, "elastic": {"minNodes": 2, "maxNodes": 8}}, "elastic", ["full size (here 8", "nodes: N"]),
    ("kueue", {}, {"topology": {"level": "rack"}}, "topology.level", ["'rack'", "block, leaf"]),
    ("kueue", {}, {"nodes": 12, "topology": {"level": "leaf", "mode": "required"}}, "topology", ["12 nodes never fit in one leaf of 8"]),
    ("kueue", {}, {"api": "v2", "topology": {"level": "block", "mode": "required"}}, "topology", ["placed as its runtime says"]),
    ("volcano", {}, {"api": "v1", "topology": {"level": "leaf", "mode": "required"}}, "topology.mode", ["networkTopology", "Training Operator v1.9.4"]),
    ("volcano", {"nodes__topology": None}, {"topology": {"level": "leaf"}}, "topology", ["declares no topology"]),
]


@pytest.mark.parametrize(("scheduler", "changes", "job", "key", "expect"), REFUSED)
def test_what_the_scheduler_or_topology_cannot_do_is_refused(scheduler, changes, job, key, expect):
    found = dict(checks.problems(_job(**job), profile(platform(scheduler, **changes))))
    assert key in found, found
    for piece in expect:
        assert piece in found[key], found[key]


def test_a_fitting_job_is_not_refused():
    for scheduler in ("kueue", "volcano"):
        assert checks.scheduler_problems(_job(nodes=8, topology={"level": "leaf", "mode": "preferred"}), profile(platform(scheduler))) == []


def test_topograph_runs_its_broker_privileged_only_for_infiniband():
    """infiniband-k8s execs ibnetdiscover in a privileged broker on each GPU node (the chart's IB example, whole);
    netq reads NetQ's API with a credentials Secret and needs no broker."""
    ib = topology.topograph_values(platform("kueue"))
    assert ib["provider"] == {"name": "infiniband-k8s"}
    assert ib["nodeDataBroker"]["securityContext"]["privileged"] is True
    assert ib["nodeDataBroker"]["securityContext"]["allowPrivilegeEscalation"] is True  # a partial override is refused
    netq = topology.topograph_values(platform("kueue", nodes__topology__provider="netq", nodes__topology__endpoint="https://netq.example.com", nodes__topology__credentialsSecret="netq"))
    assert netq["provider"] == {"name": "netq", "params": {"apiUrl": "https://netq.example.com"}}
    assert netq["nodeDataBroker"] == {"enabled": False} and netq["config"] == {"credentialsSecret": "netq"}


def test_a_changed_level_list_is_a_new_kueue_topology_and_flavor():
    """Topology levels and a flavor's topologyName are immutable: a new list is new objects, named by it."""
    a, b = platform("kueue"), platform("kueue", nodes__topology__levels=[{"name": "leaf", "nodes": 8}])
    assert topology.topology_name(a.nodes.topology) != topology.topology_name(b.nodes.topology)
    assert topology.flavor_name(a) != topology.flavor_name(b)
    assert {cq["spec"]["resourceGroups"][0]["flavors"][0]["name"] for cq in kueue.cluster_queues(b)} == {topology.flavor_name(b)}
