"""What Volcano v1.15.1 does with a fabric's node labels and a gang's network topology, as small pure functions the
tests apply to hand-built fabrics. Each one restates the upstream rule it models, read at
volcano-sh/volcano@v1.15.1 (commit 0a56ed3, V: below), kubeflow/trainer@v2.3.0 (T2: below) and the Training
Operator at kubeflow/trainer@v1.9.4 (T1: below). If upstream changes, these and tests/test_volcano_topology_rules.py
move together, on purpose.

The model covers GPUs only. A node is its labels, its GPUs and the GPUs in use. A gang is N identical pods of G
GPUs each, and all N are its minMember. CPU, memory, taints, affinity, releasing resources and the node-order
plugins other than network-topology-aware are not modelled."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

LABEL_SOURCE = "label"
# V:pkg/controllers/hypernode/discovery/manager.go imports only these two; each registers itself with
# api.RegisterDiscoverer. "roce" is documented but has no discoverer at this tag.
REGISTERED_SOURCES = ("label", "ufm")
SOURCE_LABEL_KEY = "volcano.sh/network-topology-source"  # V:pkg/controllers/hypernode/api/types.go
TYPE_NAME_MAX = 20  # V:discovery/label/label.go networkTopologyTypeLength
CLUSTER_TOP = "<cluster-top-hypernode>"  # V:pkg/scheduler/framework/session.go ClusterTopHyperNode
PLUGIN = "network-topology-aware"  # V:pkg/scheduler/plugins/network-topology-aware PluginName
GPU = "nvidia.com/gpu"
# T2:manifests/base/crds/trainer.kubeflow.org_{,cluster}trainingruntimes.yaml podGroupPolicy.volcano.networkTopology
TRAINER_TOPOLOGY_DEFAULTS = {"mode": "hard", "highestTierAllowed": 1}
# T1:pkg/apis/kubeflow.org/v1/common_types.go SchedulingPolicy: everything a v1 job can say about its PodGroup.
SCHEDULING_POLICY_FIELDS = ("minAvailable", "queue", "minResources", "priorityClass", "scheduleTimeoutSeconds")


@dataclass(frozen=True)
class Node:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    gpus: int = 8
    used: int = 0  # GPUs held by pods already bound

    @property
    def free(self) -> int:
        return self.gpus - self.used


@dataclass(frozen=True)
class HyperNode:
    """A HyperNode that label discovery creates. `key` and `value` are the node label it stands for, and
    `labels` says the same."""

    name: str
    tier: int
    tier_name: str
    member_type: str  # Node (tier 1) or HyperNode
    members: tuple[str, ...]  # exactMatch names, sorted (V:pkg/controllers/hypernode/utils/utils.go BuildMembers)
    key: str
    value: str

    @property
    def labels(self) -> dict[str, str]:
        return {self.key: self.value, SOURCE_LABEL_KEY: LABEL_SOURCE}


# --- 1. Label discovery in vc-controller ------------------------------------------------------------------------


def _label_source(controller_conf: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The `label` entry that vc-controller starts, or None.

    V:pkg/controllers/hypernode/api/types.go GetDiscoveryConfig takes the first entry whose source is `label` and
    whose `enabled` is true. `enabled` must be the YAML boolean: the loader decodes the document into
    a struct (config/loader.go LoadConfig).

    V:discovery/manager.go syncHandler starts the enabled sources in list order and stops at the first one that
    fails. api.NewDiscoverer fails for any source that is not registered, so such a source listed before `label`
    keeps `label` from starting. One listed after `label` only makes the manager retry, and each retry restarts
    `label`."""
    for entry in controller_conf.get("networkTopologyDiscovery") or []:
        if entry.get("enabled") is not True:
            continue
        if entry.get("source") == LABEL_SOURCE:
            return entry
        if entry.get("source") not in REGISTERED_SOURCES:
            return None
    return None


def label_levels(controller_conf: Mapping[str, Any]) -> dict[str, list[str]]:
    """For each network topology type that label discovery keeps, its node label keys, tier 1 first.

    V:discovery/label/label.go parseCfg:
    - It decodes `config.networkTopologyTypes` as a map from type name to a list of `{nodeLabel}`. If that
      decode fails, nothing is kept.
    - A type name longer than 20 characters is skipped, with an error in the log.
    - A type that repeats a key is skipped (checkLabels).
    - It drops the **last** entry, whatever that entry is. It is meant to be `kubernetes.io/hostname`, but this is
      never checked, and that label's value is never read.
    - It reverses the remaining entries, so the entry just above the dropped one becomes tier 1.
    - A type with fewer than two entries is kept with no tiers, so it creates no HyperNode."""
    entry = _label_source(controller_conf)
    types = ((entry or {}).get("config") or {}).get("networkTopologyTypes")
    if not isinstance(types, Mapping):
        return {}
    kept: dict[str, list[str]] = {}
    for name, entries in types.items():
        keys = [str(e.get("nodeLabel", "")) for e in entries or []]
        if len(str(name)) > TYPE_NAME_MAX or len(set(keys)) != len(keys):
            continue
        kept[str(name)] = keys[-2::-1]
    return kept


def _clean(type_name: str) -> str:
    """V:discovery/label/label.go cleanString: letters are lowercased; digits, `.` and `-` are kept; anything
    else becomes `-`."""
    return "".join(c.lower() if c.isalpha() else c if c.isdigit() or c in ".-" else "-" for c in type_name)


def discover(controller_conf: Mapping[str, Any], nodes: Iterable[Node]) -> list[HyperNode]:
    """The HyperNodes that label discovery makes from `nodes`, sorted by tier, then name.

    V:discovery/label/label.go generateHyperNodeInfo and buildHyperNodes:
    - **Walk.** For every node and every type, it walks the keys from tier 1 up. It stops at the first key the
      node lacks. So a node without the tier-1 label belongs to no HyperNode. A node without only the tier-2 label
      is in its leaf, but through that node the leaf gets no parent.
    - **Members.** A tier-1 HyperNode's members are `Node` members, named by the node's metadata.name.
      A higher tier's members are `HyperNode` members: the HyperNode one tier down on that node's walk
      (getMemberType). Members are deduplicated.
    - **One HyperNode per (key, value) in the whole cluster.** getHyperNodeCached reuses the HyperNode already
      made for that key and value, whichever block it is under. So two leaves that share a value under different
      blocks become a single HyperNode. Its members are the nodes of both leaves, and both blocks list it: it has
      two parents.
    - **Tier fixed once.** The tier and tierName come from the first walk that made the HyperNode. tierName is the
      label key.
    - **Names.** Upstream names are `hypernode-<type>-tier<N>-<5 random characters>`, or the name of an existing
      HyperNode that carries the same label (buildHyperNodeName). Here the value stands in for the random
      suffix."""
    levels = label_levels(controller_conf)
    names: dict[tuple[str, str], str] = {}
    made: dict[str, tuple[int, str, str]] = {}
    members: dict[str, set[str]] = {}
    for node in nodes:
        for type_name, keys in levels.items():
            member = node.name
            for i, key in enumerate(keys):
                if key not in node.labels:
                    break
                value = node.labels[key]
                name = names.setdefault((key, value), f"hypernode-{_clean(type_name)}-tier{i + 1}-{value}")
                made.setdefault(name, (i + 1, key, value))
                members.setdefault(name, set()).add(member)
                member = name
    out = [HyperNode(name, tier, key, "Node" if tier == 1 else "HyperNode", tuple(sorted(members[name])), key, value) for name, (tier, key, value) in made.items()]
    return sorted(out, key=lambda hn: (hn.tier, hn.name))


def by_label(hypernodes: Iterable[HyperNode], key: str, value: str) -> HyperNode:
    return next(hn for hn in hypernodes if (hn.key, hn.value) == (key, value))


# --- 2. The scheduler: HyperNode tree, gradients, binpack, allocate ---------------------------------------------


@dataclass(frozen=True)
class Tree:
    """The scheduler's view of the HyperNodes, with the virtual root added.

    - **Root.** V:pkg/scheduler/framework/session.go addClusterTopHyperNode adds CLUSTER_TOP. Its tier is one
      above the highest real tier, or 1 when there is no HyperNode. It covers every node, and it adopts every
      HyperNode that has no parent.
    - **Ready.** V:pkg/scheduler/api/hyper_node_info.go addChild refuses a second parent, and
      updateAncestors then marks the cache not ready (TestHyperNodesInfo_UpdateHyperNode_MultipleParents).
      Upstream the flag reflects the last cache update, so a later unrelated update can set it back to ready.
      This model takes the not-ready reading: a HyperNode listed by two parents means not ready."""

    tiers: dict[str, int]  # every HyperNode and CLUSTER_TOP
    tier_names: dict[str, int]  # V:api/hyper_node_info.go HyperNodeTierNameMap: spec.tierName -> tier
    real_nodes: dict[str, frozenset[str]]  # V:RealNodesSet: the nodes under each HyperNode, at any depth
    ready: bool

    @property
    def top_tier(self) -> int:
        return self.tiers[CLUSTER_TOP]

    def leaf_of(self, node: str) -> str | None:
        """V:pkg/scheduler/util/scheduler_helper.go FindHyperNodeForNode: the node's HyperNode in the lowest tier."""
        low = min(self.tiers.values())
        return next((hn for hn, t in sorted(self.tiers.items()) if t == low and node in self.real_nodes[hn]), None)


def hypernode_tree(hypernodes: Iterable[HyperNode], nodes: Iterable[Node]) -> Tree:
    hns = {hn.name: hn for hn in hypernodes}
    names = frozenset(n.name for n in nodes)
    parents: dict[str, list[str]] = {}
    for hn in hns.values():
        if hn.member_type == "HyperNode":
            for m in hn.members:
                parents.setdefault(m, []).append(hn.name)
    real: dict[str, frozenset[str]] = {}

    def under(name: str) -> frozenset[str]:
        if name not in real:
            hn = hns[name]
            kids = hn.members if hn.member_type == "Node" else [n for m in hn.members if m in hns for n in under(m)]
            real[name] = frozenset(kids) & names
        return real[name]

    for name in hns:
        under(name)
    tiers = {name: hn.tier for name, hn in hns.items()}
    tiers[CLUSTER_TOP] = max(tiers.values(), default=0) + 1
    real[CLUSTER_TOP] = names
    tier_names = {hn.tier_name: hn.tier for hn in hns.values() if hn.tier_name}
    return Tree(tiers, tier_names, real, ready=all(len(p) <= 1 for p in parents.values()))


def highest_tier(network_topology: Mapping[str, Any] | None, tree: Tree) -> int | None:
    """The tier a gang is confined to, or None when it is not confined.

    - **Name to number.** V:session.go adjustNetworkTopologySpec and translateHighestTierNameToAllowed turn
      `highestTierName` into the tier whose HyperNodes carry that tierName. This is done only when
      `highestTierAllowed` is unset. An unknown name is logged and left untranslated.
    - **Soft becomes hard.** convertSoftToHardTopology rewrites `soft` as `hard`, with the virtual root's tier.
    - **Hard needs a number.** V:pkg/scheduler/api/job_info.go IsHardTopologyMode needs both `mode: hard` and a
      `highestTierAllowed`. Without one (no tier given, or an unknown name) the gang is not confined.
    - **Mode default.** `mode` defaults to hard (PodGroup CRD)."""
    if network_topology is None:
        return None
    if network_topology.get("mode", "hard") == "soft":
        return tree.top_tier
    tier = network_topology.get("highestTierAllowed")
    if tier is None and network_topology.get("highestTierName"):
        tier = tree.tier_names.get(network_topology["highestTierName"])
    return tier if network_topology.get("mode", "hard") == "hard" else None


def gradients(tree: Tree, tier: int, plugins: set[str]) -> list[list[str]]:
    """The HyperNodes tried for a confined gang, one list per tier.

    - **With the plugin.** V:plugins/network-topology-aware hyperNodeGradientFn does a BFS from the root. It keeps
      the HyperNodes whose tier is at most `tier` (the root included), and groups them by tier, lowest first
      (isEligibleHyperNode). It also drops those whose summed idle resources are below the PodGroup's
      minResources. That pre-filter cannot change the outcome here, because each candidate is checked node by
      node anyway.
    - **Without the plugin.** V:pkg/scheduler/framework/session_plugins.go HyperNodeGradientForJobFn returns just
      the root when no plugin registered a gradient. The same happens when the plugin's
      `enabledHyperNodeGradient` is false."""
    if PLUGIN not in plugins:
        return [[CLUSTER_TOP]]
    allowed = sorted({t for t in tree.tiers.values() if t <= tier})
    return [sorted(hn for hn, t in tree.tiers.items() if t == want) for want in allowed]


def _int_argument(arguments: Mapping[str, Any], key: str) -> int:
    """V:pkg/scheduler/framework/arguments.go GetInt: only a YAML int is read. A string such as "10" is ignored
    with a warning. A negative value falls back to the default, 1 (getPriorityWeight)."""
    value = arguments.get(key, 1)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 1


def hypernode_binpack_weights(arguments: Mapping[str, Any]) -> dict[str, int]:
    """The plugin's per-resource HyperNode binpack weights.

    V:plugins/network-topology-aware getPriorityWeight:
    - `hypernode.binpack.cpu` and `hypernode.binpack.memory` default to 1.
    - `hypernode.binpack.resources` must be a comma-separated **string**. Any other type, a YAML list included,
      is ignored.
    - Each listed resource weighs `hypernode.binpack.resources.<name>`, default 1. A resource that is not
      listed does not count at all."""
    weights = {"cpu": _int_argument(arguments, "hypernode.binpack.cpu"), "memory": _int_argument(arguments, "hypernode.binpack.memory")}
    listed = arguments.get("hypernode.binpack.resources")
    for name in (r.strip() for r in (listed.split(",") if isinstance(listed, str) else [])):
        if name:
            weights[name] = _int_argument(arguments, f"hypernode.binpack.resources.{name}")
    return weights


def hypernode_binpack_score(weights: Mapping[str, int], requests: Mapping[str, float], used: Mapping[str, float], allocatable: Mapping[str, float]) -> float:
    """The binpack score of one HyperNode for one gang.

    V:plugins/network-topology-aware getSubJobHyperNodeBinPackingScore:
    - It takes the weighted mean of (used + request) / allocatable over the resources that have a weight.
    - 0 if the request would overuse any of them.
    - 0 when no requested resource has a weight.
    - `used` counts bound pods, not free capacity, so the fuller HyperNode scores higher.

    HyperNodeOrderFn then scales the score by 100 x `weight`, which changes no order."""
    total, weight_sum = 0.0, 0
    for name, request in requests.items():
        if name not in weights:
            continue
        if used.get(name, 0) + request > allocatable.get(name, 0):
            return 0.0
        total += weights[name] * (used.get(name, 0) + request) / allocatable[name]
        weight_sum += weights[name]
    return total / weight_sum if weight_sum > 0 else 0.0


def _fill(nodes: list[Node], pods: int, gpus: int, tree: Tree) -> dict[str, int] | None:
    """Puts the pods one by one on nodes within one HyperNode: pods per node, or None when the gang does not fit.

    V:pkg/scheduler/actions/allocate/allocate.go allocateResourcesForTasks:
    - A pod goes only to a node with room for it.
    - The gang is kept only if all its pods are placed (SubJobReady). Otherwise the statement is discarded.

    Whether the gang fits is exact for identical pods. Which node each pod gets is a simplification. Upstream
    sums the node-order plugins; this model only keeps the network-topology-aware pull toward the pods already
    placed (batchNodeOrderFnForNetworkAwarePods) and the GPU binpack: first a node in a leaf already used, then
    the node with the fewest free GPUs, then the name."""
    free = {n.name: n.free for n in nodes}
    placed: dict[str, int] = {}
    for _ in range(pods):
        leaves = {tree.leaf_of(n) for n in placed}
        fits = [((bool(placed) and tree.leaf_of(n) not in leaves), f, n) for n, f in free.items() if f >= gpus]
        if not fits:
            return None
        best = min(fits)[2]
        placed[best] = placed.get(best, 0) + 1
        free[best] -= gpus
    return placed


def place_gang(
    hypernodes: Iterable[HyperNode],
    nodes: Iterable[Node],
    pods: int,
    gpus_per_pod: int,
    network_topology: Mapping[str, Any] | None,
    plugins: set[str],
    arguments: Mapping[str, Any] | None = None,
) -> tuple[str, dict[str, int]] | None:
    """Where one `allocate` session puts a fresh gang: the HyperNode and the pods per node, or None (it waits).
    `plugins` are the names in the scheduler conf (plugins_of); `arguments` are network-topology-aware's.

    1. **Not ready.** V:pkg/scheduler/actions/allocate/allocate.go buildAllocateContext skips a job that has any
       networkTopology, hard or soft, while the HyperNodes are not ready (Tree.ready). This holds with or
       without the plugin.
    2. **Not confined** (no networkTopology, or not hard after highest_tier). allocateResources takes the
       ordinary path on the root: any nodes in the cluster. If the plugin is loaded, it only adds node scores
       that favour fuller HyperNodes (batchNodeOrderFnForNormalPods, `hypernode.binpack.normal-pod.*`).
    3. **Confined.** allocateForJob tries the gradients in order. Within a gradient it dry-runs every HyperNode
       and keeps those where the whole gang fits. It then picks the one with the highest binpack score
       (selectBestHyperNodeForJob). Upstream breaks ties in Go map order, that is at random; here the name
       decides.

       The gang's default subJob inherits the job's topology (job_info.go getOrCreateDefaultSubJob), so
       allocateForSubJob searches inside the chosen HyperNode the same way. That changes which nodes are used,
       but not the HyperNode.

       If no gradient fits, the gang waits. Without the plugin the only gradient is the root, so a hard
       topology is silently not enforced."""
    nodes = list(nodes)
    tree = hypernode_tree(hypernodes, nodes)
    if network_topology is not None and not tree.ready:
        return None
    tier = highest_tier(network_topology, tree)
    if tier is None:
        placed = _fill(nodes, pods, gpus_per_pod, tree)
        return None if placed is None else (CLUSTER_TOP, placed)
    weights = hypernode_binpack_weights(arguments or {})
    for gradient in gradients(tree, tier, plugins):
        fits: dict[str, dict[str, int]] = {}
        for hn in gradient:
            if (placed := _fill([n for n in nodes if n.name in tree.real_nodes[hn]], pods, gpus_per_pod, tree)) is not None:
                fits[hn] = placed
        if fits:
            best = max(sorted(fits), key=lambda hn: _score(weights, pods * gpus_per_pod, [n for n in nodes if n.name in tree.real_nodes[hn]]))
            return best, fits[best]
    return None


def _score(weights: Mapping[str, int], request: int, members: list[Node]) -> float:
    used = {GPU: float(sum(n.used for n in members))}
    allocatable = {GPU: float(sum(n.gpus for n in members))}
    return hypernode_binpack_score(weights, {GPU: request}, used, allocatable)


def plugins_of(scheduler_conf: Mapping[str, Any]) -> set[str]:
    """The plugin names in any tier of a volcano-scheduler.conf.

    Only one plugin registers HyperNode gradients, so its tier does not matter: V:session_plugins.go
    HyperNodeGradientForJobFn asks the tiers in order and uses the first plugin that registered one.

    network-topology-aware is left out when its `enabledHyperNodeGradient` is false. Every such switch defaults
    to true (V:pkg/scheduler/plugins/defaults.go ApplyPluginConfDefaults)."""
    out = set()
    for tier in scheduler_conf.get("tiers") or []:
        for plugin in tier.get("plugins") or []:
            if not (plugin["name"] == PLUGIN and plugin.get("enabledHyperNodeGradient") is False):
                out.add(plugin["name"])
    return out


def plugin_arguments(scheduler_conf: Mapping[str, Any], name: str = PLUGIN) -> dict[str, Any]:
    return next((dict(p.get("arguments") or {}) for t in scheduler_conf.get("tiers") or [] for p in t.get("plugins") or [] if p["name"] == name), {})


# --- 3. Trainer v2.3.0: runtime -> PodGroup ---------------------------------------------------------------------


def podgroup_network_topology(runtime: Mapping[str, Any]) -> dict[str, Any] | None:
    """The `spec.networkTopology` of the PodGroup that Trainer v2.3.0 applies for a TrainJob of this
    (Cluster)TrainingRuntime, or None.

    - **Copy.** T2:pkg/runtime/framework/plugins/volcano/volcano.go Build copies `mode` and `*highestTierAllowed`
      from the runtime's `spec.podGroupPolicy.volcano.networkTopology`. Nothing else is copied.
    - **Defaults.** The runtime CRDs default `mode` to hard and `highestTierAllowed` to 1, so
      `networkTopology: {}` means hard at tier 1. The CRD has no `highestTierName` (it vendors volcano.sh/apis
      v1.13.1). The API server prunes that unknown field, or refuses it under strict field validation; either
      way it never reaches the PodGroup.
    - **Per runtime, not per job.** The TrainJob has no podGroupPolicy.
    - **When it is written.** Build writes the PodGroup only when it does not exist yet, or while the TrainJob is
      suspended. A runtime changed later leaves running jobs as they are."""
    volcano = ((runtime.get("spec") or {}).get("podGroupPolicy") or {}).get("volcano")
    topology = None if volcano is None else volcano.get("networkTopology")
    if topology is None:
        return None
    out = {k: topology.get(k, default) for k, default in TRAINER_TOPOLOGY_DEFAULTS.items()}
    if out["mode"] not in ("hard", "soft"):
        raise ValueError(f"networkTopology.mode {out['mode']!r}: the CRD enum is hard, soft")
    return out


# --- 4. Training Operator v1.9.4: its PodGroup ------------------------------------------------------------------


def training_operator_podgroup_spec(job: Mapping[str, Any], existing_spec: Mapping[str, Any] | None) -> dict[str, Any]:
    """The Volcano PodGroup spec the Training Operator leaves after one reconcile of a v1 job (PyTorchJob, ...).
    `existing_spec` is the spec of the PodGroup already there, if any.

    - **Rebuilt on every reconcile.** T1:pkg/controller.v1/common/job.go ReconcileJobs and scheduling.go
      SyncPodGroup rebuild the whole spec, from runPolicy.schedulingPolicy only: minMember, queue (an existing
      PodGroup's queue is kept), priorityClassName and minResources. The operator vendors volcano.sh/apis
      v1.9.0, whose PodGroupSpec has no networkTopology.
    - **It drops networkTopology.** *Inferred:* the operator reads the PodGroup into that type and Updates it
      back, so a networkTopology added by anything else is gone after the next sync.
    - **No annotation path either.** On create the PodGroup copies the job's annotations, but Volcano v1.15.1
      reads no network-topology annotation from a PodGroup. It reads one only from a pod whose PodGroup Volcano
      creates itself (V:pkg/controllers/podgroup/pg_controller_handler.go parseNetworkTopologyFromPod). The
      operator's pods name their PodGroup, so that controller skips them (pg_controller.go processNextReq).
    - minResources, when schedulingPolicy does not give it, is computed from the replicas' requests
      (calcPGMinResources). That is left out here."""
    policy = (job["spec"].get("runPolicy") or {}).get("schedulingPolicy") or {}
    replicas = next(v for k, v in job["spec"].items() if k.endswith("ReplicaSpecs"))
    spec: dict[str, Any] = {
        "minMember": policy.get("minAvailable", sum(r.get("replicas", 1) for r in replicas.values())),
        "queue": (existing_spec or {}).get("queue") or policy.get("queue") or "default",
        "priorityClassName": policy.get("priorityClass", ""),
    }
    if "minResources" in policy:
        spec["minResources"] = policy["minResources"]
    return spec
