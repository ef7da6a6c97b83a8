"""The fabric topology one stack declares (`nodes.topology`): its levels, who puts their labels on the nodes, and
where a job's pods are placed in it. Pure data and the rules both schedulers impose on it; what each scheduler
renders from it is components/platform/topology.py.

One level list feeds both schedulers, outermost first, the host implied as the last level:
- Kueue's `Topology` takes the label keys in this order and `kubernetes.io/hostname` last, where its CRD allows
  the hostname only (kubernetes-sigs/kueue@v0.19.2:apis/kueue/v1beta2/topology_types.go, CEL on levels).
- Volcano's label discovery takes the same list; the last entry (the host) becomes the HyperNodes' node members
  and each earlier entry a tier, innermost tier 1 (volcano-sh/volcano@v1.15.1:pkg/controllers/hypernode/
  discovery/label).
- Topograph (NVIDIA/topograph@v1.0.0, engine k8s) writes exactly the keys of `engine.params.fabricLabels`,
  closest first, and removes any managed key it no longer produces.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from components.model.base import DnsLabel, Model, QualifiedName

HOSTNAME = "kubernetes.io/hostname"
# NVIDIA/topograph@v1.0.0:pkg/topology/topology.go KeyFabricTierPrefix: tier-0 is the switch nearest the node.
TOPOGRAPH_TIER = "fabric.topograph.run/tier-{}"
# The providers fastpath configures: the on-prem fabrics this project's stacks run on. NVIDIA/topograph@v1.0.0:
# charts/topograph/values.schema.json provider.name has more: the clouds' (each with its own credentials and
# params), simulators, the Slinky-only `dra`, bare-metal `infiniband-bm`.
TopographProvider = Literal["infiniband-k8s", "netq"]
# Kueue's Topology holds at most 16 levels (the CRD's maxItems), the host one of them.
MAX_LEVELS = 15


class TopologyLevel(Model):
    name: DnsLabel
    """What the level is called in job placement and the render (`block`, `leaf`, `rack`). Required."""
    node_label: QualifiedName | None = None
    """The node label whose value names this level's domain (a switch, a rack). With `source: topograph` it defaults
    to Topograph's own key, `fabric.topograph.run/tier-N` (N = 0 for the innermost level) and Topograph owns
    it; with `source: declared` required. Each value must be unique across the cluster (a leaf `b1-l3`, not `l3`):
    Volcano names a HyperNode by the key and value alone."""
    nodes: Annotated[int, Field(gt=0, le=100000)] | None = None
    """How many GPU nodes one domain of this level holds (e.g. 16 per leaf). Optional: with it, a job larger than
    one domain is refused where the stack requires that level, instead of waiting forever."""


class TopologyPlacement(Model):
    level: DnsLabel
    """The level whose one domain a job's pods should share. Required."""
    mode: Literal["preferred", "required"] = "preferred"
    """`preferred`: as close as the free nodes allow, never blocking (Kueue `podset-preferred-topology`, Volcano
    `networkTopology` soft); `required`: the whole gang inside one domain of that level or it waits (Kueue
    `podset-required-topology`, Volcano hard with the level's tier). Default preferred."""


class TopologyConfig(Model):
    source: Literal["declared", "topograph"]
    """Who puts the level labels on the nodes: `topograph` (NVIDIA Topograph, installed and pinned, discovers the
    fabric through `provider`) or `declared` (the cluster's provisioning already sets them). Required."""
    provider: TopographProvider | None = None
    """Topograph's source of the fabric: `infiniband-k8s` (ibnetdiscover on the nodes, a privileged pod each), `netq`
    (NVIDIA NetQ for Spectrum-X, credentials in a Secret), or a cloud's topology API. Required with topograph."""
    endpoint: Annotated[str, Field(pattern=r"^https://\S+$")] | None = None
    """NetQ's API base URL (`https://netq.example.com`, Topograph's `apiUrl`). Required for netq."""
    credentials_secret: DnsLabel | None = None
    """A Secret in Topograph's namespace (`topograph`) with key `credentials.yaml` holding NetQ's `username` and
    `password` (NVIDIA/topograph@v1.0.0:docs/providers/netq.md); fastpath never reads it. Required for netq."""
    levels: Annotated[list[TopologyLevel], Field(min_length=1, max_length=MAX_LEVELS)]
    """The fabric's levels outermost first (`[block, leaf]`); the host is the implied last level. Required."""
    placement: TopologyPlacement | None = None
    """Where every job's pods go unless the job says otherwise. Default: the innermost level, preferred."""

    @model_validator(mode="after")
    def _levels(self) -> TopologyConfig:
        if self.source == "topograph" and self.provider is None:
            raise ValueError("nodes.topology.provider is required with source topograph (infiniband-k8s, netq, ...)")
        if self.source == "declared" and self.provider is not None:
            raise ValueError("nodes.topology.provider configures Topograph: remove it, or set source topograph")
        if self.provider == "netq" and (self.credentials_secret is None or self.endpoint is None):
            raise ValueError("nodes.topology.provider netq reads NetQ's API: give its endpoint and credentialsSecret")
        if self.provider != "netq" and (self.credentials_secret or self.endpoint):
            raise ValueError("nodes.topology.endpoint and credentialsSecret are NetQ's: remove them")
        for i, level in enumerate(self.levels):
            if level.node_label is None and self.source == "declared":
                raise ValueError(f"nodes.topology.levels[{i}].nodeLabel is required with source declared")
            if level.node_label == HOSTNAME:
                raise ValueError(
                    f"nodes.topology.levels[{i}].nodeLabel {HOSTNAME} is the host level, which is always the last "
                    "and implied: remove it"
                )
        names = [lv.name for lv in self.levels]
        keys = self.keys()
        for what, seen in (("name", names), ("nodeLabel", keys)):
            if dup := sorted({v for v in seen if seen.count(v) > 1}):
                raise ValueError(f"nodes.topology.levels repeat the {what} {dup}: each level has its own")
        if self.placement is not None and self.placement.level not in names:
            raise ValueError(
                f"nodes.topology.placement.level {self.placement.level!r} is not one of the levels {names}"
            )
        sizes = [lv.nodes for lv in self.levels if lv.nodes is not None]
        if sizes != sorted(sizes, reverse=True):
            raise ValueError(
                "nodes.topology.levels[].nodes must not grow inward: a leaf holds no more nodes than its block"
            )
        return self

    def keys(self) -> list[str]:
        """Each level's node label, outermost first (Topograph's defaults where unset)."""
        n = len(self.levels)
        return [lv.node_label or TOPOGRAPH_TIER.format(n - 1 - i) for i, lv in enumerate(self.levels)]

    def level(self, name: str) -> TopologyLevel:
        return next(lv for lv in self.levels if lv.name == name)

    def key(self, name: str) -> str:
        return self.keys()[[lv.name for lv in self.levels].index(name)]

    def volcano_tier(self, name: str) -> int:
        """The HyperNode tier of level `name`: the innermost level is tier 1, each level out one more."""
        return len(self.levels) - [lv.name for lv in self.levels].index(name)

    @property
    def default_placement(self) -> TopologyPlacement:
        return self.placement or TopologyPlacement(level=self.levels[-1].name)

    def placement_of(self, asked: TopologyPlacement | None) -> TopologyPlacement:
        """A job's placement: its own `topology`, else the cluster's."""
        return asked or self.default_placement
