"""Volcano v1.15.1 label discovery and network-topology placement on hand-built fabrics (tests/volcano_topology_v115.py
restates the upstream rules and cites them). The fabric: two blocks, each of two leaves with 18 nodes of 8 GPUs, the
levels labelled the way Topograph v1.0.0 labels them; a gang is 16 pods of 8 GPUs unless a case says otherwise."""

from __future__ import annotations

import copy

import pytest
import yaml

from tests import volcano_topology_v115 as vt
from tools import upstream

BLOCK, LEAF, HOST = "fabric.topograph.run/tier-1", "fabric.topograph.run/tier-0", "kubernetes.io/hostname"
LEAVES = {"l1": "b1", "l2": "b1", "l3": "b2", "l4": "b2"}
PER_LEAF = 18
CONF = {
    "networkTopologyDiscovery": [
        {"source": "label", "enabled": True, "config": {"networkTopologyTypes": {"fastpath": [{"nodeLabel": BLOCK}, {"nodeLabel": LEAF}, {"nodeLabel": HOST}]}}},
    ]
}
ON = {vt.PLUGIN}
FASTPATH_ARGS = {"weight": 10, "hypernode.binpack.resources": vt.GPU, "hypernode.binpack.resources.nvidia.com/gpu": 10}


def fabric(full: dict[str, int] | None = None, half: dict[str, int] | None = None, leaves: dict[str, str] = LEAVES) -> list[vt.Node]:
    """PER_LEAF nodes `<leaf>-nNN` per leaf; `full[leaf]` of them have all 8 GPUs in use, the next `half[leaf]` 4."""
    nodes = []
    for leaf, block in leaves.items():
        for i in range(PER_LEAF):
            used = 8 if i < (full or {}).get(leaf, 0) else 4 if i < (full or {}).get(leaf, 0) + (half or {}).get(leaf, 0) else 0
            name = f"{leaf}-n{i:02d}"
            nodes.append(vt.Node(name, {BLOCK: block, LEAF: leaf, HOST: name}, used=used))
    return nodes


def hn(hypernodes: list[vt.HyperNode], value: str) -> str:
    return by_value(hypernodes, value).name


def by_value(hypernodes: list[vt.HyperNode], value: str) -> vt.HyperNode:
    return vt.by_label(hypernodes, LEAF if value.startswith("l") else BLOCK, value)


def conf_with(levels: list[str], type_name: str = "fastpath", **entry) -> dict:
    conf = copy.deepcopy(CONF)
    conf["networkTopologyDiscovery"][0]["config"]["networkTopologyTypes"] = {type_name: [{"nodeLabel": k} for k in levels]}
    conf["networkTopologyDiscovery"][0].update(entry)
    return conf


# --- discovery -----------------------------------------------------------------------------------------------------


def test_discovery_builds_leaves_at_tier_1_and_blocks_at_tier_2():
    nodes = fabric()
    hns = vt.discover(CONF, nodes)
    assert [(h.tier, h.value, h.member_type) for h in hns] == [(1, "l1", "Node"), (1, "l2", "Node"), (1, "l3", "Node"), (1, "l4", "Node"), (2, "b1", "HyperNode"), (2, "b2", "HyperNode")]
    assert by_value(hns, "l3").members == tuple(f"l3-n{i:02d}" for i in range(PER_LEAF))  # node names, not the hostname label
    assert by_value(hns, "b1").members == (hn(hns, "l1"), hn(hns, "l2"))
    assert {h.tier: h.tier_name for h in hns} == {1: LEAF, 2: BLOCK}  # so highestTierName is a label key
    assert by_value(hns, "b2").labels == {BLOCK: "b2", "volcano.sh/network-topology-source": "label"}
    tree = vt.hypernode_tree(hns, nodes)
    assert tree.ready and tree.top_tier == 3 and tree.real_nodes[hn(hns, "b2")] == {n.name for n in nodes if n.labels[BLOCK] == "b2"}


def test_a_node_missing_a_level_stops_its_walk_there():
    """No leaf label: in no HyperNode, even with a block label. No block label: in its leaf, and a leaf none of
    whose nodes has the block label has no parent (the root adopts it in the scheduler)."""
    nodes = [
        vt.Node("a", {BLOCK: "b1", LEAF: "l1"}),
        vt.Node("b", {BLOCK: "b1"}),
        vt.Node("c", {LEAF: "l2"}),
        vt.Node("d", {BLOCK: "b1", LEAF: "l3"}),
        vt.Node("e", {LEAF: "l3"}),
    ]
    hns = vt.discover(CONF, nodes)
    assert {h.value: h.members for h in hns} == {"l1": ("a",), "l2": ("c",), "l3": ("d", "e"), "b1": (hn(hns, "l1"), hn(hns, "l3"))}


def test_a_leaf_value_repeated_under_two_blocks_is_one_hypernode_with_two_parents():
    """(key, value) names one HyperNode in the whole cluster: leaf `l1` under b1 and under b2 merge, both blocks list
    it, and the scheduler's cache refuses the second parent, so every job with a networkTopology waits."""
    nodes = fabric(leaves={"l1": "b1", "l2": "b1"}) + [vt.Node(f"x-n{i:02d}", {BLOCK: "b2", LEAF: "l1"}) for i in range(PER_LEAF)]
    hns = vt.discover(CONF, nodes)
    merged = by_value(hns, "l1")
    assert len(merged.members) == 2 * PER_LEAF
    assert [h.value for h in hns if merged.name in h.members] == ["b1", "b2"]
    assert not vt.hypernode_tree(hns, nodes).ready
    assert vt.place_gang(hns, nodes, 16, 8, {"mode": "soft"}, ON) is None
    assert vt.place_gang(hns, nodes, 16, 8, {"mode": "hard", "highestTierAllowed": 2}, ON) is None
    assert vt.place_gang(hns, nodes, 16, 8, None, ON) is not None


@pytest.mark.parametrize(
    "conf, levels",
    [
        (CONF, {"fastpath": [LEAF, BLOCK]}),
        (conf_with([LEAF, HOST]), {"fastpath": [LEAF]}),
        (conf_with([BLOCK, LEAF]), {"fastpath": [BLOCK]}),  # the last entry is dropped whatever it is
        (conf_with([HOST]), {"fastpath": []}),  # one entry: no tier
        (conf_with([LEAF, LEAF, HOST]), {}),  # a repeated key drops the type
        (conf_with([BLOCK, LEAF, HOST], type_name="f" * 20), {"f" * 20: [LEAF, BLOCK]}),
        (conf_with([BLOCK, LEAF, HOST], type_name="f" * 21), {}),  # longer than 20 characters
        (conf_with([BLOCK, LEAF, HOST], enabled=False), {}),
        (conf_with([BLOCK, LEAF, HOST], source="ufm"), {}),
        (conf_with([BLOCK, LEAF, HOST], config={}), {}),
        ({"networkTopologyDiscovery": [{"source": "roce", "enabled": True}, *CONF["networkTopologyDiscovery"]]}, {}),  # unregistered, started first
        ({"networkTopologyDiscovery": [*CONF["networkTopologyDiscovery"], {"source": "roce", "enabled": True}]}, {"fastpath": [LEAF, BLOCK]}),
        ({"networkTopologyDiscovery": [{"source": "roce", "enabled": False}, *CONF["networkTopologyDiscovery"]]}, {"fastpath": [LEAF, BLOCK]}),
        ({}, {}),
    ],
)
def test_discovery_config_rules(conf, levels):
    assert vt.label_levels(conf) == levels
    assert bool(vt.discover(conf, fabric())) == any(levels.values())


def test_without_the_host_entry_blocks_become_the_node_tier():
    hns = vt.discover(conf_with([BLOCK, LEAF]), fabric())
    assert [(h.tier, h.value, h.member_type, len(h.members)) for h in hns] == [(1, "b1", "Node", 36), (1, "b2", "Node", 36)]


# --- placement -----------------------------------------------------------------------------------------------------

HARD1, HARD2, SOFT = {"mode": "hard", "highestTierAllowed": 1}, {"mode": "hard", "highestTierAllowed": 2}, {"mode": "soft"}
NO_LEAF_FITS = {"l1": 3, "l2": 3, "l3": 3, "l4": 3}  # 15 free nodes per leaf, 30 per block
NO_BLOCK_FITS = {"l1": 11, "l2": 11, "l3": 11, "l4": 11}  # 7 free per leaf, 14 per block, 28 in all


@pytest.mark.parametrize(
    "case, full, topology, plugins, where",
    [
        ("hard 1: the busier of two leaves that fit", {"l1": 3, "l2": 3, "l3": 2}, HARD1, ON, "l3"),
        ("hard 1: no leaf has 16 free nodes, waits", NO_LEAF_FITS, HARD1, ON, None),
        ("hard 2: a leaf still comes first", {"l1": 3, "l2": 3, "l3": 3}, HARD2, ON, "l4"),
        ("hard 2: spills within the busier block", {**NO_LEAF_FITS, "l3": 4}, HARD2, ON, "b2"),
        ("hard 2: no block fits, waits", NO_BLOCK_FITS, HARD2, ON, None),
        ("hard 3 is the root's tier: anywhere", NO_BLOCK_FITS, {"mode": "hard", "highestTierAllowed": 3}, ON, vt.CLUSTER_TOP),
        ("hard 0: no HyperNode that low, waits", {}, {"mode": "hard", "highestTierAllowed": 0}, ON, None),
        ("tier by name: the leaf key", NO_LEAF_FITS, {"mode": "hard", "highestTierName": LEAF}, ON, None),
        ("tier by name: the block key", {**NO_LEAF_FITS, "l3": 4}, {"mode": "hard", "highestTierName": BLOCK}, ON, "b2"),
        ("unknown tier name: not confined", NO_BLOCK_FITS, {"mode": "hard", "highestTierName": "rack"}, ON, vt.CLUSTER_TOP),
        ("hard without a tier: not confined", NO_BLOCK_FITS, {"mode": "hard"}, ON, vt.CLUSTER_TOP),
        ("soft: a leaf when one fits", {"l1": 3, "l2": 3, "l3": 3}, SOFT, ON, "l4"),
        ("soft: else a block", {**NO_LEAF_FITS, "l1": 4}, SOFT, ON, "b1"),
        ("soft: else anywhere, never waits on topology", NO_BLOCK_FITS, SOFT, ON, vt.CLUSTER_TOP),
        ("soft with a tier: still the root's tier", NO_BLOCK_FITS, {"mode": "soft", "highestTierAllowed": 1}, ON, vt.CLUSTER_TOP),
        ("no plugin: hard 1 is ignored", NO_BLOCK_FITS, HARD1, set(), vt.CLUSTER_TOP),
        ("no plugin: even when a leaf fits", {}, HARD1, set(), vt.CLUSTER_TOP),
        ("plugin, no networkTopology: anywhere", NO_BLOCK_FITS, None, ON, vt.CLUSTER_TOP),
        ("a gang larger than the free cluster waits", {"l1": 18, "l2": 18, "l3": 18, "l4": 3}, None, ON, None),
    ],
)
def test_place_gang(case, full, topology, plugins, where):
    nodes = fabric(full)
    hns = vt.discover(CONF, nodes)
    got = vt.place_gang(hns, nodes, 16, 8, topology, plugins, FASTPATH_ARGS)
    want = where if where in (None, vt.CLUSTER_TOP) else hn(hns, where)
    assert (got and got[0]) == want, case
    if got:
        assert_fits(hns, nodes, got, 16, 8)


def assert_fits(hns: list[vt.HyperNode], nodes: list[vt.Node], got: tuple[str, dict[str, int]], pods: int, gpus: int) -> None:
    where, placed = got
    free = {n.name: n.free for n in nodes}
    assert sum(placed.values()) == pods
    assert set(placed) <= vt.hypernode_tree(hns, nodes).real_nodes[where]
    assert all(count * gpus <= free[name] for name, count in placed.items())


def test_a_block_placement_fills_one_leaf_before_the_next():
    """Within a block, the pods stay in as few leaves as the free nodes allow (the plugin's LCA node score)."""
    nodes = fabric({**NO_LEAF_FITS, "l3": 4})
    got = vt.place_gang(vt.discover(CONF, nodes), nodes, 16, 8, HARD2, ON, FASTPATH_ARGS)
    assert got is not None
    per_leaf = {leaf: sum(c for n, c in got[1].items() if n.startswith(leaf)) for leaf in LEAVES}
    assert sorted(per_leaf.values()) == [0, 0, 2, 14]


@pytest.mark.parametrize(
    "half, gpus, where",
    [
        ({"l1": 18}, 4, "l1"),  # half-used nodes take 4-GPU pods, and binpack prefers the busier leaf
        ({"l1": 18}, 8, "l2"),  # ... but no 8-GPU pod; l2..l4 tie on binpack, the name decides here (upstream: at random)
        ({"l1": 18, "l2": 18, "l3": 18, "l4": 18}, 8, None),
    ],
)
def test_partly_used_nodes(half, gpus, where):
    nodes = fabric(half=half)
    hns = vt.discover(CONF, nodes)
    got = vt.place_gang(hns, nodes, 16, gpus, HARD1, ON, FASTPATH_ARGS)
    assert (got and got[0]) == (where and hn(hns, where))
    if got:
        assert_fits(hns, nodes, got, 16, gpus)


def test_no_hypernodes_at_all_makes_the_root_tier_1():
    """With discovery off, the virtual root is tier 1: `hard, highestTierAllowed: 1` then allows the whole cluster."""
    nodes = fabric(NO_BLOCK_FITS)
    assert vt.place_gang([], nodes, 16, 8, HARD1, ON)[0] == vt.CLUSTER_TOP


# --- plugin arguments and scheduler conf ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments, weights",
    [
        ({}, {"cpu": 1, "memory": 1}),  # GPUs do not count unless listed
        (FASTPATH_ARGS, {"cpu": 1, "memory": 1, vt.GPU: 10}),
        ({"hypernode.binpack.resources": [vt.GPU]}, {"cpu": 1, "memory": 1}),  # a YAML list is ignored
        ({"hypernode.binpack.resources": f" {vt.GPU}, ", "hypernode.binpack.resources.nvidia.com/gpu": "10"}, {"cpu": 1, "memory": 1, vt.GPU: 1}),  # a quoted int is ignored
        ({"hypernode.binpack.cpu": 0, "hypernode.binpack.memory": -3}, {"cpu": 0, "memory": 1}),
    ],
)
def test_hypernode_binpack_weights(arguments, weights):
    assert vt.hypernode_binpack_weights(arguments) == weights


def test_hypernode_binpack_score_prefers_the_fuller_hypernode():
    weights = vt.hypernode_binpack_weights(FASTPATH_ARGS)
    busy, idle = (vt.hypernode_binpack_score(weights, {vt.GPU: 128}, {vt.GPU: u}, {vt.GPU: 144}) for u in (16, 0))
    assert busy == 1.0 > idle
    assert vt.hypernode_binpack_score(weights, {vt.GPU: 128}, {vt.GPU: 24}, {vt.GPU: 144}) == 0.0  # would overuse
    assert vt.hypernode_binpack_score(vt.hypernode_binpack_weights({}), {vt.GPU: 128}, {}, {vt.GPU: 144}) == 0.0  # GPU not listed


def test_plugins_of_a_scheduler_conf():
    conf = {"tiers": [{"plugins": [{"name": "gang"}]}, {"plugins": [{"name": "binpack"}, {"name": vt.PLUGIN, "arguments": FASTPATH_ARGS}]}]}
    assert vt.plugins_of(conf) == {"gang", "binpack", vt.PLUGIN}
    assert vt.plugin_arguments(conf) == FASTPATH_ARGS
    conf["tiers"][1]["plugins"][1]["enabledHyperNodeGradient"] = False
    assert vt.PLUGIN not in vt.plugins_of(conf)


# --- Trainer v2.3.0 and the Training Operator v1.9.4 ---------------------------------------------------------------


def runtime(volcano: dict | None) -> dict:
    return {"kind": "ClusterTrainingRuntime", "spec": {"podGroupPolicy": {} if volcano is None else {"volcano": volcano}}}


@pytest.mark.parametrize(
    "volcano, topology",
    [
        (None, None),
        ({}, None),
        ({"networkTopology": {}}, {"mode": "hard", "highestTierAllowed": 1}),
        ({"networkTopology": {"mode": "soft"}}, {"mode": "soft", "highestTierAllowed": 1}),
        ({"networkTopology": {"highestTierAllowed": 2}}, {"mode": "hard", "highestTierAllowed": 2}),
        ({"networkTopology": {"highestTierName": BLOCK}}, {"mode": "hard", "highestTierAllowed": 1}),  # not in the CRD
    ],
)
def test_trainer_runtime_topology_reaches_the_podgroup(volcano, topology):
    assert vt.podgroup_network_topology(runtime(volcano)) == topology


def test_trainer_default_topology_confines_a_gang_to_one_leaf():
    nodes = fabric(NO_LEAF_FITS)
    topology = vt.podgroup_network_topology(runtime({"networkTopology": {}}))
    assert vt.place_gang(vt.discover(CONF, nodes), nodes, 16, 8, topology, ON) is None


def test_trainer_crd_defaults_are_the_modelled_ones():
    crd = yaml.safe_load(upstream.path("crds/trainer.kubeflow.org_ClusterTrainingRuntime.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    props = spec["podGroupPolicy"]["properties"]["volcano"]["properties"]["networkTopology"]["properties"]
    assert {k: v.get("default") for k, v in props.items()} == vt.TRAINER_TOPOLOGY_DEFAULTS
    assert props["mode"]["enum"] == ["hard", "soft"]


def test_pytorchjob_scheduling_policy_has_no_network_topology():
    crd = yaml.safe_load(upstream.path("crds/kubeflow.org_PyTorchJob.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert tuple(sorted(spec["runPolicy"]["properties"]["schedulingPolicy"]["properties"])) == tuple(sorted(vt.SCHEDULING_POLICY_FIELDS))


def test_training_operator_rebuilds_its_podgroup_spec_without_network_topology():
    job = {"spec": {"runPolicy": {"schedulingPolicy": {"priorityClass": "training-standard"}}, "pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 15}}}}
    existing = {"minMember": 16, "queue": "team-a", "networkTopology": {"mode": "hard", "highestTierAllowed": 1}}
    assert vt.training_operator_podgroup_spec(job, existing) == {"minMember": 16, "queue": "team-a", "priorityClassName": "training-standard"}
    assert vt.training_operator_podgroup_spec(job, None)["queue"] == "default"
