"""Typed platform config: the `fastpath:platform` object (one cluster), and ConfigError, the one error a refused
stack file raises. The `fastpath:jobs` entries are components/model/job.py; what both share,
components/model/base.py.

Every key is camelCase in the stack file (`gpu.perNode`), every model refuses unknown keys, and every rule that
spans keys lives in a model validator, so a bad stack file is refused before any resource is registered, with
the file, the key path and the fix:

    stacks/Pulumi.prod-ib.yaml: fastpath:platform.fabric.rails[2].hca: Field required

Facts derived from the config for the builders live with the knowledge they need: NV-IPAM block sizes and
Multus interface names in components/fabric/addressing.py (the subnet rules here read them), a rail's networks
and resources in components/fabric/wiring.py.

Field docstrings are the config reference (docs/config.md is generated from them by tools/gendocs.py).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from components import k8s_syntax, versions
from components.fabric import addressing, kinds, nccl
from components.model.base import (
    DnsLabel,
    DnsName,
    JobApi,
    LabelValue,
    Model,
    NoSpace,
    QualifiedName,
    image_problem,
    interface_problem,
    rdma_device_problem,
)
from components.model.topology import TopologyConfig

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# Rail names end up in NAD names (DNS-1123) and device-plugin resource names ([A-Za-z0-9_]): keep to both.
RAIL_NAME = r"^[a-z][a-z0-9]{0,14}$"
PCI_ADDRESS = r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$"


def _either(names: Iterable[str]) -> str:
    items = list(names)
    return ", ".join(items[:-1]) + (" or " if len(items) > 1 else "") + items[-1]


def _quoted(names: Iterable[str]) -> str:
    return _either(repr(n) for n in names)


class ConfigError(Exception):
    """A stack file the program refuses. `str()` is the full message shown to the user: one line per problem,
    each cut to a readable length, and a problem repeated at many keys (the same message under jobs[0..99])
    shown three times and then counted."""

    LINE_LIMIT = 400
    REPEATS_SHOWN = 3

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = problems
        super().__init__("\n".join(self._lines(source, problems)))

    @classmethod
    def _lines(cls, source: str, problems: list[str]) -> list[str]:
        lines: list[str] = []
        seen: dict[str, int] = {}
        for p in problems:
            p = p.replace("\r", "\\r").replace("\n", "\\n")  # one line per problem, whatever a key holds
            # The same message at another index of a list is the same problem.
            shape = re.sub(r"\[\d+\]", "[]", p)
            seen[shape] = seen.get(shape, 0) + 1
            if seen[shape] > cls.REPEATS_SHOWN:
                continue
            line = f"{source}: {p}"
            if len(line) > cls.LINE_LIMIT:
                line = line[: cls.LINE_LIMIT] + f"... ({len(line) - cls.LINE_LIMIT} more characters)"
            lines.append(line)
        for shape, n in seen.items():
            if n > cls.REPEATS_SHOWN:
                lines.append(f"{source}: ... and {n - cls.REPEATS_SHOWN} more like `{shape[:120]}`")
        return lines


KernelRelease = Annotated[str, Field(pattern=r"^[0-9]+\.[0-9]+\.[0-9]+-[0-9A-Za-z.-]+$")]


class PrecompiledDriverConfig(Model):
    branch: Annotated[str, Field(pattern=r"^[0-9]{3}$")]
    """The driver branch (`595`): the GPU Operator runs `driver:<branch>-<kernel>-<os>` on each node
    (NVIDIA/gpu-operator@v26.7.0 controllers/object_controls.go, one DaemonSet per kernel NFD finds). Required."""
    kernels: Annotated[
        list[Annotated[str, Field(pattern=r"^[0-9]+\.[0-9]+\.[0-9]+-[0-9A-Za-z.-]+$")]], Field(min_length=1)
    ]
    """Every kernel the GPU nodes run (`uname -r`, e.g. `6.8.0-60-generic`): each needs its image in the mirror
    (images.txt lists them); a node on another kernel gets no driver. Required."""
    os: Annotated[str, Field(pattern=r"^(ubuntu22\.04|ubuntu24\.04|ubuntu26\.04)$")] = "ubuntu24.04"
    """The nodes' OS tag; NVIDIA publishes precompiled drivers for Ubuntu. Default ubuntu24.04."""

    def images(self) -> list[str]:
        return [f"nvcr.io/nvidia/driver:{self.branch}-{k}-{self.os}" for k in self.kernels]


class NvlinkDomainConfig(Model):
    """Multi-node NVLink (GB200/GB300 NVL72): each job gets a ComputeDomain of NVIDIA's GPU DRA driver (its IMEX
    channel) and its pods stay in one NVLink clique (the `nvidia.com/gpu.clique` node label)."""

    nodes_per_clique: Annotated[int, Field(gt=1, le=18)] = 18
    """Nodes of one NVLink domain (an NVL72 rack: 18 trays of 4 GPUs; the ComputeDomain controller's limit per IMEX
    domain, kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1 cmd/compute-domain-controller/main.go
    defaultMaxNodesPerIMEXDomain). A job larger than that is refused. Default 18."""
    driver_version: Annotated[str, Field(pattern=r"^[0-9]{3}\.[0-9]{1,3}(\.[0-9]{1,3})?$")]
    """The GPU driver on the nodes (`580.95.05`): the ComputeDomain daemons need 570.158.01 or later
    (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:cmd/compute-domain-kubelet-plugin/device_state.go
    validateDriverVersionForIMEXDaemonsWithDNSNames, main.go IMEXDaemonsWithDNSNamesMinDriverVersion). Required."""
    host_imex_service: Literal["masked", "running"]
    """The nodes' own `nvidia-imex.service`: `masked` (`systemctl disable --now nvidia-imex.service && systemctl mask
    nvidia-imex.service`), as the GPU DRA driver requires wherever the nvidia-imex packages are installed: each
    ComputeDomain runs its own IMEX daemons (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:docs/prerequisites.md;
    nothing in the driver checks it). `running` is refused. Required: state what the node image does."""

    @model_validator(mode="after")
    def _driver(self) -> NvlinkDomainConfig:
        if self.host_imex_service == "running":
            raise ValueError(
                "gpu.nvlinkDomain.hostImexService running: each job's ComputeDomain runs its own IMEX daemons, which "
                "the host's nvidia-imex.service would contend with (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1 "
                "docs/prerequisites.md); run `systemctl disable --now nvidia-imex.service && systemctl mask "
                "nvidia-imex.service` on every GPU node (in the node image), then set hostImexService: masked"
            )
        have = tuple(int(x) for x in self.driver_version.split("."))
        if have < (570, 158, 1):
            raise ValueError(
                f"gpu.nvlinkDomain.driverVersion {self.driver_version}: IMEX daemons with DNS names (the GPU DRA "
                "driver's default) need 570.158.01 or later; upgrade the driver"
            )
        return self


class GpuConfig(Model):
    product: LabelValue
    """Value of the `nvidia.com/gpu.product` node label on the training nodes (e.g. `NVIDIA-H100-80GB-HBM3`);
    training pods get a nodeSelector on it. The name `nvidia-smi` prints (`NVIDIA A100-SXM4-80GB`) is taken in
    the label's form, spaces as `-`, as GPU Feature Discovery writes it (the NVML name, NVIDIA/k8s-device-plugin
    internal/lm/resource.go). Current GPUs: `NVIDIA-H100-80GB-HBM3`, `NVIDIA-H200`, `NVIDIA-H100-NVL`, `NVIDIA-B200`,
    `NVIDIA-B300-SXM6-AC`, `NVIDIA-GB200` and `NVIDIA-GB300` (no `-NVL72`), `NVIDIA-A100-SXM4-80GB`, `NVIDIA-L40S`,
    `NVIDIA-L4`. GFD adds `-SHARED` under time-slicing or MPS unless the resource is renamed, and `-MIG-<profile>`
    under the single MIG strategy; `kubectl get nodes -L nvidia.com/gpu.product` shows what a cluster has.
    Required."""
    per_node: Annotated[int, Field(gt=0, le=16)]
    """GPUs on each training node. Required; 1 to 16."""
    gpu_direct: Literal["dmabuf", "peermem", "none"] = "dmabuf"
    """GPUDirect RDMA mode: `dmabuf` (default, recommended; needs the open kernel module), `peermem` (legacy
    nvidia-peermem module) or `none`."""
    driver_preinstalled: bool = False
    """The NVIDIA driver is already installed on the hosts (the GPU Operator then does not deploy it).
    Default false."""
    precompiled_driver: PrecompiledDriverConfig | None = None
    """The GPU Operator runs NVIDIA's precompiled driver images (`{branch, kernels, os}`) instead of building the
    driver on each node, which needs the OS's package repositories: the path for a disconnected cluster that does
    not preinstall its driver. Default: built on the node."""
    host_mofed: bool = False
    """MOFED/DOCA-OFED is installed on the hosts, so the Network Operator does not deploy the DOCA driver.
    Default false."""
    taint_key: QualifiedName = "nvidia.com/gpu"
    """Key of the taint on GPU nodes that training pods tolerate. Default `nvidia.com/gpu`."""
    nvlink_domain: NvlinkDomainConfig | None = None
    """Multi-node NVLink (`{nodesPerClique, driverVersion, hostImexService}`: GB200/GB300 NVL72): every job gets its
    own ComputeDomain and IMEX channel, stays in one NVLink clique and runs NCCL with MNNVL required. Default: none."""

    @model_validator(mode="after")
    def _one_driver_source(self) -> GpuConfig:
        if self.precompiled_driver is not None and self.driver_preinstalled:
            raise ValueError(
                "gpu.precompiledDriver and gpu.driverPreinstalled both set: the driver is either on the hosts or the "
                "GPU Operator's; keep one"
            )
        return self

    @field_validator("product", mode="before")
    @classmethod
    def _gfd_form(cls, v: object) -> object:
        return k8s_syntax.gfd_label(v) if isinstance(v, str) else v


class TaintConfig(Model):
    key: QualifiedName
    """Taint key. Required."""
    value: LabelValue | None = None
    """Taint value; unset: every value of the key is tolerated."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"
    """Taint effect. Default NoSchedule."""

    def toleration(self) -> dict[str, str]:
        if self.value is None:
            return {"key": self.key, "operator": "Exists", "effect": self.effect}
        return {"key": self.key, "operator": "Equal", "value": self.value, "effect": self.effect}


class SystemNodesConfig(Model):
    node_selector: Annotated[dict[QualifiedName, LabelValue], Field(min_length=1)]
    """Labels that select the CPU-only system nodes (e.g. `{node.kubernetes.io/pool: system}`, a label the kubelet
    may set itself with --node-labels, so replaced and autoscaled nodes carry it; NodeRestriction refuses the
    kubelet node-role.kubernetes.io/* labels): the operators,
    controllers, webhooks and schedulers fastpath installs, its reaper and each PyTorch job's rendezvous store run
    there, off the GPU nodes whose drains (SR-IOV reboots, driver rollouts) would take them. The operators' per-node
    DaemonSets stay on the GPU nodes. Required."""
    taints: list[TaintConfig] = []
    """Taints those nodes carry, which every system pod then tolerates. Default none."""

    @model_validator(mode="after")
    def _not_gpu_nodes(self) -> SystemNodesConfig:
        gpu = sorted({k8s_syntax.GPU_PRODUCT_LABEL, k8s_syntax.NFD_GPU_LABEL} & set(self.node_selector))
        if gpu:
            raise ValueError(
                f"nodes.system.nodeSelector names {gpu}, a label of the GPU nodes: select the CPU-only nodes "
                "(a label of their pool, e.g. node-role.kubernetes.io/system)"
            )
        return self

    def tolerations(self) -> list[dict[str, str]]:
        return [t.toleration() for t in self.taints]


class NodesConfig(Model):
    count: Annotated[int, Field(gt=0, le=100000)]
    """Number of GPU training nodes in the cluster; bounds queue capabilities and job sizes. Required."""
    memory_gib: Annotated[int, Field(gt=0, le=1048576, alias="memoryGiB")]
    """Allocatable memory of one GPU node in GiB; job memory limits and /dev/shm are derived from it.
    Required."""
    cpus: Annotated[int, Field(gt=0, le=100000)]
    """Allocatable CPUs of one GPU node. Required."""
    topology_key: QualifiedName | None = None
    """A node label whose value names a domain (zone, rack): a job's pods prefer to share one, by pod affinity only
    (no scheduler placement, and nothing here sets the label). Superseded by `topology`, which makes the same
    preference with the scheduler's own placement and can require it; unset there, it is the innermost level's
    key. Default `topology.kubernetes.io/zone`."""
    topology: TopologyConfig | None = None
    """The fabric's topology (`{source, provider, levels, placement}`): levels outermost first (block, leaf; the host
    implied), labelled by Topograph or declared as already set; the scheduler places each gang in it (Kueue
    Topology Aware Scheduling, or Volcano HyperNodes). Unset: no topology placement."""
    cpu_nodes: bool = True
    """The cluster has schedulable nodes without GPUs (a system or CPU pool): fastpath's small per-job services
    (a PyTorch job's rendezvous store) must run there, off the GPU nodes whose drains (SR-IOV reboots, driver
    upgrades) would otherwise take them, and a PodDisruptionBudget keeps them through other drains. false: a
    GPU-only cluster; they run on GPU nodes' spare CPU with no budget, so a drain of that node ends the job
    instead of blocking the drain forever. Default true."""
    system: SystemNodesConfig | None = None
    """The CPU-only system nodes by label (`{nodeSelector: {...}, taints: [...]}`): fastpath's operators,
    controllers and services are pinned there. Unset: they go where their charts put them (any schedulable node;
    PyTorch rendezvous stores on nodes without the NFD GPU label when cpuNodes is true)."""

    @model_validator(mode="after")
    def _system_needs_cpu_nodes(self) -> NodesConfig:
        if self.system is not None and not self.cpu_nodes:
            raise ValueError("nodes.system names CPU-only nodes but nodes.cpuNodes is false: set cpuNodes true")
        if self.topology is not None and self.topology_key is not None:
            raise ValueError(
                "nodes.topologyKey and nodes.topology both say where a job's pods go: remove topologyKey (the "
                "topology's innermost level takes its place)"
            )
        for i, level in enumerate(self.topology.levels if self.topology else []):
            if level.nodes is not None and level.nodes > self.count:
                raise ValueError(
                    f"nodes.topology.levels[{i}].nodes {level.nodes} is more than nodes.count {self.count}"
                )
        return self

    @property
    def affinity_key(self) -> str:
        """The label a job's pods prefer to share a value of (pod affinity)."""
        if self.topology is not None:
            return self.topology.key(self.topology.levels[-1].name)
        return self.topology_key or "topology.kubernetes.io/zone"


class RailConfig(Model):
    name: Annotated[str, Field(pattern=RAIL_NAME)] | None = None
    """Short name of the rail (lowercase letters and digits, max 15); it names the network attachment and
    the device-plugin resource. Default `rail<index>`."""
    hca: Annotated[str, Field(min_length=1)]
    """RDMA device (HCA) name of this rail's NIC on the host, as `ibdev2netdev` prints it (DGX H100 compute
    HCAs are mlx5_0,3,4,5,6,9,10,11, not mlx5_0..7). Required."""
    interface: str | None = None
    """Physical interface (netdev) of the rail's NIC on the host: the PF name for SR-IOV and host-device, the
    master for macvlan or IPoIB. Required on infiniband and roce, except that `sriov` takes `rootDevices`
    instead."""
    root_devices: Annotated[list[Annotated[str, Field(pattern=PCI_ADDRESS)]], Field(min_length=1)] | None = None
    """`sriov` only, instead of `interface`: PCI addresses of this rail's PF (`0000:18:00.0`), one per distinct
    address across the GPU nodes (SriovNetworkNodePolicy nicSelector.rootDevices). Addresses survive interface
    renames; they must be the same on every node that has them."""
    subnet: ipaddress.IPv4Network | None = None
    """IPv4 subnet of this rail: what NV-IPAM hands pods on a secondary network, and on RoCE the hosts' or pods'
    addresses NCCL picks GIDs from; must not overlap another rail's. Required, except on infiniband with
    `hostnetwork` or `rdma-only` (verbs on IB need no address on the rail)."""
    speed_gbps: Annotated[int, Field(gt=0)]
    """Link speed of the rail in Gb/s (400 for NDR / 400GbE); sets the expected bandwidth. Required."""

    @model_validator(mode="after")
    def _names(self) -> RailConfig:
        problems = [f"hca: {p}"] if (p := rdma_device_problem(self.hca)) else []
        if self.interface is not None and (p := interface_problem(self.interface)):
            problems.append(f"interface: {p}")
        if self.interface is not None and self.interface == self.hca:
            problems.append(
                f"hca {self.hca!r} is the rail's interface too: hca is the RDMA device (mlx5_0), interface the netdev "
                "(ibp24s0); `ibdev2netdev` prints both"
            )
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @field_validator("subnet", mode="before")
    @classmethod
    def _network_address(cls, v: object) -> object:
        if v is None:  # unset, as to_config writes it back (rdma-only and hostnetwork InfiniBand rails)
            return v
        try:
            ipaddress.IPv4Network(str(v), strict=True)
        except ValueError as err:
            if "host bits set" in str(err):
                fixed = ipaddress.IPv4Network(str(v), strict=False)
                raise ValueError(f"{v} has host bits set: write the network address, {fixed}") from None
            raise ValueError(f"{v!r} is not an IPv4 subnet in CIDR form (e.g. 10.100.0.0/20)") from None
        return v


class FabricConfig(Model):
    kind: kinds.FabricKind
    """Inter-node fabric: `infiniband`, `roce`, `efa` (AWS) or `tcp` (no RDMA; NCCL uses sockets). Required."""
    attachment: kinds.Attachment | None = None
    """How the RDMA NICs reach pods: `sriov` (VFs from the SR-IOV operator), `shared` (RDMA shared device
    plugin with macvlan for RoCE or IPoIB for InfiniBand), `hostdevice` (a whole PF per pod), `hostnetwork`
    (pods on the node's network with the RDMA shared device plugin's devices; whole-node pods only, namespace
    PSA `privileged`, no network isolation) or `rdma-only` (InfiniBand only: the RDMA shared device plugin alone,
    no secondary network or IPAM; bootstrap on the pod network). Required for infiniband and roce, not allowed
    otherwise."""
    rails: list[RailConfig] = []
    """The rails (one NIC each, usually one per GPU). Required for infiniband and roce, empty otherwise."""
    vfs_per_pf: Annotated[int, Field(gt=0, le=127)] = 8
    """SR-IOV virtual functions created on each rail's PF. Default 8."""
    sriov_max_unavailable: Annotated[int, Field(gt=0)] | Annotated[str, Field(pattern=r"^([1-9][0-9]?|100)%$")] = 1
    """`sriov` only: GPU nodes the SR-IOV operator may drain and reboot at once (a count, or a percentage such
    as `10%`) when VFs, firmware or the RDMA mode change, the first apply included. Default 1: one node at a
    time (upstream drains every node of a pool at once when this is unset)."""
    mtu: Annotated[int, Field(ge=1280, le=9216)] | None = None
    """MTU of the secondary networks; unset keeps the CNI default."""
    gid_index: Annotated[int, Field(ge=0, le=255)] | None = None
    """RoCE only: pin NCCL_IB_GID_INDEX. Leave unset: NCCL >= 2.21 selects the IPv4 RoCEv2 GID itself, and a
    hard-coded index breaks when the GID table shifts."""
    efa_devices_per_node: Annotated[int, Field(gt=0)] | None = None
    """EFA only: `vpc.amazonaws.com/efa` devices per node (p4d 4, p5 32, p5en 16, p6-b200 8). Required for
    efa."""
    pod_interface: str = "eth0"
    """The pod's primary interface, used for NCCL bootstrap and gloo. Default `eth0`; with `hostnetwork`
    required: the GPU nodes' primary interface (e.g. `bond0`)."""
    nccl_net: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z][A-Za-z0-9_ .-]*$")] | None = None
    """The NCCL network module every RDMA pod must use (NCCL_NET; NCCL >= 2.10 then fails at init instead of
    falling back to sockets). Default: `IB` on infiniband and roce (NCCL's own verbs transport), `Libfabric` on
    efa (aws-ofi-nccl >= 1.13; older plugins register `AWS Libfabric`). Set the plugin's name when the image
    brings a net plugin you want: the HPC-X SHARP plugin's name carries its version (`IBext_v10` with NCCL 2.27,
    `IBext_v11` with 2.28; plain `IBext` only in plugins before late 2023), and `IB` bypasses the plugin."""
    nccl_overrides: dict[str, str | int | bool] = {}
    """Extra NCCL variables for every training pod on this cluster (e.g. NCCL_IB_TC for RoCE QoS). Each name
    must be one NCCL reads; integer variables take integers. They win over the derived values."""

    @field_validator("pod_interface")
    @classmethod
    def _pod_interface(cls, v: str) -> str:
        if (p := interface_problem(v)) is not None:
            raise ValueError(p)
        return v

    @field_validator("nccl_overrides")
    @classmethod
    def _known_nccl(cls, v: dict) -> dict:
        problems = []
        for name, value in v.items():
            verdict = nccl.classify(name)
            if not verdict.ok and verdict.status != "deprecated":
                problems.append(verdict.hint)
            elif (p := nccl.value_problem(name, value)) is not None:
                problems.append(p)
        if problems:
            raise ValueError("; ".join(problems))
        return {k: str(val) for k, val in v.items()}

    @model_validator(mode="after")
    def _cross_fields(self) -> FabricConfig:
        row = kinds.KINDS[self.kind]
        if not row.rails and self.rails:
            raise ValueError(
                f"fabric.kind {self.kind!r} takes no rails: remove fabric.rails "
                f"(or set fabric.kind to {_either(k for k, r in kinds.KINDS.items() if r.rails)})"
            )
        if not row.attachments and self.attachment:
            raise ValueError(f"fabric.kind {self.kind!r} takes no attachment: remove fabric.attachment")
        if row.rails and not self.rails:
            raise ValueError(f"fabric.kind {self.kind!r} needs fabric.rails (one per NIC)")
        if row.attachments and not self.attachment:
            raise ValueError(f"fabric.kind {self.kind!r} needs fabric.attachment: {_either(row.attachments)}")
        if self.attachment and self.attachment not in row.attachments:
            refused = kinds.ATTACHMENTS[self.attachment]
            why = (
                ": a RoCE GID is an IP address on the rail's netdev, which a pod reaches only through "
                "a network attachment or the host network"
                if row.gid_from_address and not refused.rail_address
                else ""
            )
            raise ValueError(
                f"fabric.attachment {self.attachment!r} does not work on fabric.kind {self.kind!r}"
                f"{why}; use {_either(row.attachments)}"
            )
        if row.node_resource is not None and not self.efa_devices_per_node:
            raise ValueError(f"fabric.kind {self.kind!r} needs fabric.efaDevicesPerNode (p4d 4, p5 32, p5en 16)")
        if row.node_resource is None and self.efa_devices_per_node:
            counted = _quoted(k for k, r in kinds.KINDS.items() if r.node_resource is not None)
            raise ValueError(f"fabric.efaDevicesPerNode is only for fabric.kind {counted}")
        for name, value in self.overrides.items():
            if (p := tcp_on_rdma(self, name, value)) is not None:
                raise ValueError(f"fabric.ncclOverrides.{p}")
        if (ifname := self.overrides.get("NCCL_SOCKET_IFNAME")) is not None:
            interfaces = addressing.pod_interfaces(self.pod_interface, self.attachment, len(self.rails))
            if (p := nccl.socket_ifname_problem(ifname, interfaces)) is not None:
                raise ValueError(f"fabric.ncclOverrides.{p} (or change fabric.podInterface)")
        if self.nccl_net is not None and not row.rdma:
            raise ValueError(
                f"fabric.ncclNet is for RDMA fabrics; fabric.kind {self.kind!r} uses NCCL's Socket "
                "transport: remove fabric.ncclNet"
            )
        if self.gid_index is not None and not row.gid_from_address:
            by_address = _quoted(k for k, r in kinds.KINDS.items() if r.gid_from_address)
            raise ValueError(f"fabric.gidIndex only applies to fabric.kind {by_address} (InfiniBand ignores it)")
        vfs = _quoted(a for a, r in kinds.ATTACHMENTS.items() if r.sriov_operator)
        # (compared with the default too: the profile's fabric round-trips through to_config, defaults included)
        if (
            not (self.attachment_row is not None and self.attachment_row.sriov_operator)
            and "sriov_max_unavailable" in self.model_fields_set
            and self.sriov_max_unavailable != 1
        ):
            raise ValueError(f"fabric.sriovMaxUnavailable only applies to fabric.attachment {vfs}: remove it")
        if self.host_network and "pod_interface" not in self.model_fields_set:
            raise ValueError(
                "fabric.attachment 'hostnetwork' puts pods on the node's interfaces: set "
                "fabric.podInterface to the GPU nodes' primary interface (the one that routes between "
                "nodes, e.g. bond0 or eno1), which NCCL bootstrap and gloo use"
            )
        if self.attachment:
            att = kinds.ATTACHMENTS[self.attachment]
            what = att.interface_role
            for i, rail in enumerate(self.rails):
                if att.sriov_operator:
                    if (rail.interface is None) == (rail.root_devices is None):
                        raise ValueError(
                            f"fabric.attachment {self.attachment!r} needs exactly one of fabric.rails[{i}].interface "
                            f"({what} on the host) or fabric.rails[{i}].rootDevices (its PCI "
                            "addresses): set one, remove the other"
                        )
                elif rail.root_devices is not None:
                    raise ValueError(
                        f"fabric.rails[{i}].rootDevices only applies to fabric.attachment {vfs}: "
                        f"set fabric.rails[{i}].interface ({what}) instead"
                    )
                elif not rail.interface:
                    raise ValueError(
                        f"fabric.attachment {self.attachment!r} needs fabric.rails[{i}].interface: {what} on the host"
                    )
                # A rail's subnet is what NV-IPAM hands out on a secondary network, and where GIDs are addresses
                # (RoCE) the range NCCL picks them from; an InfiniBand rail without a secondary network has no
                # address to describe.
                if rail.subnet is None and (att.secondary_network or row.gid_from_address):
                    why = (
                        "NV-IPAM hands pods addresses from it"
                        if att.secondary_network
                        else "NCCL picks RoCE GIDs from it (NCCL_IB_ADDR_RANGE): the hosts' addresses on the rail"
                    )
                    raise ValueError(
                        f"fabric.rails[{i}].subnet: required with fabric.attachment "
                        f"{self.attachment!r} on {self.kind}: {why}"
                    )
        for key, label in (("hca", "HCA"), ("interface", "interface"), ("name", "name")):
            seen: dict[str, int] = {}
            for i, rail in enumerate(self.rails):
                value = getattr(rail, key)
                if value is None:
                    continue
                if value in seen:
                    raise ValueError(
                        f"fabric.rails[{seen[value]}].{key} and fabric.rails[{i}].{key} are both "
                        f"{value!r}: each rail needs its own {label}"
                    )
                seen[value] = i
        owner: dict[str, int] = {}
        for i, rail in enumerate(self.rails):
            for address in rail.root_devices or []:
                if address in owner:
                    raise ValueError(
                        f"fabric.rails[{owner[address]}].rootDevices and fabric.rails[{i}].rootDevices "
                        f"both list {address}: each PF serves one rail"
                    )
                owner[address] = i
        for i, a in enumerate(self.rails):
            for j in range(i):
                b = self.rails[j]
                if a.subnet is not None and b.subnet is not None and a.subnet.overlaps(b.subnet):
                    raise ValueError(
                        f"fabric.rails[{j}].subnet {b.subnet} and fabric.rails[{i}].subnet {a.subnet} "
                        "overlap: give every rail its own subnet, or two pods get one address"
                    )
        return self

    def rail_name(self, index: int) -> str:
        return self.rails[index].name or f"rail{index}"

    @property
    def overrides(self) -> dict[str, str]:
        """fabric.ncclOverrides as the environment spells them (the validator already made every value text)."""
        return {name: str(value) for name, value in self.nccl_overrides.items()}

    @property
    def kind_row(self) -> kinds.Kind:
        return kinds.KINDS[self.kind]

    @property
    def attachment_row(self) -> kinds.AttachmentKind | None:
        return kinds.ATTACHMENTS[self.attachment] if self.attachment else None

    @property
    def host_network(self) -> bool:
        return self.attachment is not None and kinds.ATTACHMENTS[self.attachment].host_network

    @property
    def secondary_network(self) -> bool:
        return self.attachment is not None and kinds.ATTACHMENTS[self.attachment].secondary_network

    @property
    def claims(self) -> bool:
        """Pods claim GPUs and rail NICs by DRA (the `dra` attachment)."""
        return self.attachment is not None and kinds.ATTACHMENTS[self.attachment].claims


class QueueConfig(Model):
    name: DnsLabel
    """Queue name (a Volcano Queue, or a Kueue ClusterQueue with a LocalQueue of that name in every training
    namespace); jobs name it in `queue`. Required."""
    weight: Annotated[int, Field(gt=0, le=65535)] = 1
    """Share of the cluster this queue gets when queues compete. Volcano: its proportion plugin splits the GPUs by
    the weights of the queues that have jobs, each capped at its `gpus`, and a gang starts only inside its queue's
    share (allocated plus the gang at most the share), so a gang larger than its queue's share never starts while
    every queue has jobs. Kueue: the queue's guaranteed quota (nominalQuota) is its weight's share of the GPUs in
    whole nodes, guaranteed even while the others are idle; beyond it a gang runs only on idle borrowed GPUs and
    never preempts for them. Each job's `fullCluster` in SUMMARY.md says which, and the render warns. Default 1."""
    gpus: Annotated[int, Field(gt=0, le=k8s_syntax.INT32_MAX)] | None = None
    """The most GPUs the queue holds at once, even when the rest of the cluster is idle; at most the cluster's
    GPUs (Volcano capability: a ceiling, it reserves nothing; Kueue: nominal quota plus borrowing limit). Unset: no
    cap."""
    reclaimable: bool = True
    """Whether another queue whose gang does not fit may take GPUs from this queue by evicting whole gangs of
    it (Volcano gangreclaim, volcano-sh/volcano@v1.15.1: any priority tier; pods a victim gang can spare first, then
    whole gangs of queues of lower priority, then furthest over their share; v1.15.1 does not check that this queue
    is over its share, only that the reclaiming gang fits inside its own); false: this queue's running jobs are
    never reclaimed. Kueue reclaims only from a queue over its nominal quota, whatever this says; false
    there means the queue never borrows (borrowingLimit 0), so it is never over it. Default true."""
    namespaces: list[DnsLabel] = []
    """Training namespaces whose jobs land in this queue when they name none: stack-file jobs, and jobs written by
    hand (Volcano: the namespace carries the queue annotation, which its admission webhook gives every PodGroup
    left in the `default` queue; Kueue: the namespace's LocalQueue `default` points at this queue's ClusterQueue,
    and Kueue's webhooks label every unlabelled job with it). Each training namespace in at most one queue; the
    others use `scheduler.defaultQueue`. Default: none."""


class SchedulerConfig(Model):
    name: Literal["volcano", "kueue"] = "volcano"
    """The gang scheduler: `volcano` (binds each gang whole; HyperNode placement; elastic jobs) or `kueue` (admits
    each job whole against queue quota, then the default scheduler binds it; Topology Aware Scheduling; no
    Training Operator MPIJob). README "Choosing the scheduler" compares them. Default volcano."""
    queues: list[QueueConfig] = [QueueConfig(name="training")]
    """The queues (Volcano Queues, or Kueue ClusterQueues in one cohort). Default: one queue `training` with
    weight 1 and no cap."""
    default_queue: str | None = None
    """Queue used by jobs that name none. Default: the first queue."""

    @model_validator(mode="after")
    def _queues(self) -> SchedulerConfig:
        names = [q.name for q in self.queues]
        if not names:
            raise ValueError("scheduler.queues is empty: define at least one queue")
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"scheduler.queues names {sorted(dup)} more than once")
        if self.default_queue is not None and self.default_queue not in names:
            raise ValueError(f"scheduler.defaultQueue {self.default_queue!r} is not one of scheduler.queues {names}")
        if self.name == "kueue" and "default" in names:
            raise ValueError(
                "scheduler.queues names a queue 'default', which on Kueue is a LocalQueue `default`: Kueue's "
                "webhooks would then label every unlabelled job of the namespace with it, fastpath's own included; "
                "call it something else (each namespace's LocalQueue `default` is fastpath's)"
            )
        return self

    @property
    def queue_for_jobs(self) -> str:
        return self.default_queue or self.queues[0].name

    def queue_of(self, namespace: str) -> str:
        """The queue a job in `namespace` that names none lands in."""
        return next((q.name for q in self.queues if namespace in q.namespaces), self.queue_for_jobs)


class NfsConfig(Model):
    server: NoSpace
    """NFS server host name or address. Required."""
    share: Annotated[str, Field(pattern=r"^/\S*$")]
    """Exported path on the server. Required."""
    rdma: bool = False
    """Mount with NFS over RDMA (`proto=rdma,port=20049`). Default false."""
    mount_options: list[str] = ["nfsvers=4.1", "hard", "nconnect=8"]
    """NFS mount options (the RDMA ones are added when `rdma` is true). Default nfsvers=4.1, hard, nconnect=8."""


class CheckpointConfig(Model):
    nfs: NfsConfig | None = None
    """Install csi-driver-nfs and a StorageClass for this NFS export. Exactly one of `nfs` or `storageClass`."""
    storage_class: DnsName | None = None
    """Use this existing ReadWriteMany StorageClass instead of installing one."""
    size: Annotated[str, Field(pattern=r"^[1-9][0-9]*(Gi|Ti)$")] = "1Ti"
    """Size of the checkpoint claim in each training namespace. Default `1Ti`."""

    @model_validator(mode="after")
    def _one_source(self) -> CheckpointConfig:
        if (self.nfs is None) == (self.storage_class is None):
            raise ValueError(
                "set exactly one of checkpoints.nfs (install an NFS StorageClass) or "
                "checkpoints.storageClass (an existing ReadWriteMany class)"
            )
        return self


class MonitoringConfig(Model):
    enabled: bool = False
    """The cluster runs the Prometheus Operator: create ServiceMonitors (the GPU Operator's DCGM exporter).
    Default false."""
    service_monitor_labels: dict[str, str] = {}
    """Labels every ServiceMonitor gets, so the Prometheus `serviceMonitorSelector` picks it up (a
    kube-prometheus-stack Prometheus selects `release: <its release>` unless configured otherwise). Default none."""
    nccl_inspector_image: str | None = None
    """An image holding NCCL's Inspector profiler plugin at /nccl-inspector/libnccl-profiler-inspector.so, built
    from NVIDIA/nccl at 2.29.3 or later (its Prometheus output; ext-profiler/inspector, from 2.29.7
    plugins/profiler/inspector), for the training images'
    CPU architecture and glibc. It loads only into NCCL 2.28.3 or later (it exports profiler interface v5): an older
    NCCL in a training image trains on without it, so the acceptance checks that every rank loaded it. Set: every
    training pod loads it and exports per-collective bus bandwidth, a PodMonitor scrapes it, and rules show a slow
    rank or rail while jobs train. Unset: no training-time telemetry."""

    @model_validator(mode="after")
    def _labels_need_monitoring(self) -> MonitoringConfig:
        if self.nccl_inspector_image is not None:
            if not self.enabled:
                raise ValueError(
                    "monitoring.ncclInspectorImage is set but monitoring.enabled is false: its metrics are scraped "
                    "through the Prometheus Operator; set monitoring.enabled true or remove the image"
                )
            if (p := image_problem(self.nccl_inspector_image)) is not None:
                raise ValueError(f"monitoring.ncclInspectorImage: {p}")
        if self.service_monitor_labels and not self.enabled:
            raise ValueError(
                "monitoring.serviceMonitorLabels is set but monitoring.enabled is false: no "
                "ServiceMonitor is created; set monitoring.enabled true or remove the labels"
            )
        return self


class VersionsConfig(Model):
    gpu_operator: str = versions.GPU_OPERATOR_VERSION
    """nvidia/gpu-operator chart version. Default pinned in components/versions.py."""
    network_operator: str = versions.NETWORK_OPERATOR_VERSION
    """nvidia/network-operator chart version. Default pinned in components/versions.py."""
    volcano: str = versions.VOLCANO_VERSION
    """volcano-sh/volcano chart version. Default pinned in components/versions.py."""
    csi_driver_nfs: str = versions.CSI_NFS_VERSION
    """csi-driver-nfs chart version. Default pinned in components/versions.py."""
    training_operator: str = versions.TRAINING_OPERATOR_REF
    """Kubeflow Training Operator git ref of its standalone overlay. Default pinned in components/versions.py."""
    trainer: str = versions.TRAINER_VERSION
    """kubeflow-trainer chart version (Kubeflow Trainer v2 and its JobSet; jobApi v2 or both). Default pinned in
    components/versions.py."""


class ComponentsConfig(Model):
    gpu_operator: bool = True
    """Install the NVIDIA GPU Operator. Default true."""
    network_operator: bool | None = None
    """Install the NVIDIA Network Operator and its NicClusterPolicy. Default: on for infiniband and roce."""
    training_operator: bool | None = None
    """Install the Kubeflow Training Operator v1 (PyTorchJob, MPIJob v1, TFJob). Default: on unless jobApi is
    `v2`."""
    volcano: bool | None = None
    """Install Volcano (gang scheduling, queues). Default: on when scheduler.name is volcano; false leaves the
    cluster without a gang scheduler (pods go to the default scheduler, no queue)."""
    checkpoint_storage: bool = True
    """Install the checkpoint StorageClass/claims. Default true."""


class ReaperConfig(Model):
    """The reaper (components/ops/reaper.py): ends a training job whose pods cannot start, so it frees its GPUs."""

    enabled: bool = True
    """Run it. Default true."""
    start_deadline_minutes: Annotated[int, Field(ge=5, le=1440)] = 30
    """Minutes a scheduled training pod may spend without starting before its job fails: an image that cannot be
    pulled, a missing Secret or ConfigMap key, a volume that cannot be mounted, a claim that does not exist. Long
    enough for the largest image's first pull on a node. Default 30."""
    pending_deadline_minutes: Annotated[int, Field(ge=5)] | None = None
    """Minutes a training pod may wait to be scheduled before its job fails. Off by default: a gang waiting for
    GPUs in its queue is queueing, not stuck; set it only where a job that cannot be placed within this time is
    a mistake (e.g. a gang larger than any queue allows)."""


class HealthConfig(Model):
    """Node health (NVIDIA NVSentinel): GPU health through the GPU Operator's DCGM, NIC health on exactly the rails'
    HCAs, quarantine of a sick node (cordon and taint), its training pods evicted so their gangs restart from their
    checkpoints on healthy nodes, and a lost node released. components/platform/health.py says how."""

    enabled: bool = False
    """Install NVSentinel and let it take sick nodes out. Default false."""
    lost_node_minutes: Annotated[int, Field(ge=2, le=1440)] | None = 10
    """Minutes a GPU node may stay NotReady (or unreachable) before it is tainted
    `node.kubernetes.io/out-of-service=nodeshutdown:NoExecute`: its pods are then force-deleted and the gang on it
    restarts on healthy nodes. Only for nodes that really are down: a partitioned node whose processes still run
    keeps running them while the new gang starts. Null: a person taints it (README). Default 10."""
    circuit_breaker_percent: Annotated[int, Field(ge=1, le=100)] = 25
    """NVSentinel stops quarantining once this share of the GPU nodes was quarantined within 5 minutes (a
    cluster-wide cause, e.g. a switch, must not drain the fleet), until a person resets it. Default 25."""
    remediation: Literal["none", "reboot"] = "none"
    """What happens to a quarantined node after its pods are gone: `none` (a person repairs it; default) or
    `reboot` (NVSentinel's janitor reboots it through a privileged Job; a NIC or GPU that needs replacing stays
    quarantined)."""
    storage_class: DnsName | None = None
    """StorageClass of NVSentinel's datastore (a 3-replica MongoDB, one volume each). Unset: the cluster's default
    StorageClass, which must then exist (without one the volumes stay Pending and the install times out)."""
    install_cert_manager: bool = True
    """NVSentinel's datastore and webhooks need cert-manager: install it (pinned), or false when the cluster has
    one. Default true."""


class AcceptanceConfig(Model):
    enabled: bool = False
    """Declare the fabric acceptance job: nccl-tests all_reduce_perf wired exactly like a training job, one node
    count after another in a single MPIJob on a queue of its own. Default false."""
    nodes: Annotated[int, Field(gt=0)] | None = None
    """Nodes of the main acceptance run (all their GPUs). Default: 2, or 1 on a one-node cluster."""
    scaling: list[Annotated[int, Field(gt=0)]] = []
    """Also run on each of these node counts (e.g. [1, 2, 4, 8]) to show how bus bandwidth scales. The runs
    go one at a time, smallest first, so no run measures another's traffic."""
    efficiency: Annotated[float, Field(gt=0, le=1)] = 0.75
    """Share of the rails' line rate under which a multi-node run fails: rails x link speed x efficiency (0.75
    puts 8x400G NDR at 300 GB/s, where a rail is missing or a link degraded). Default 0.75."""
    warn_efficiency: Annotated[float, Field(gt=0, le=1)] = 0.92
    """Share of line rate under which a run passes with a warning: a healthy NDR NIC gives 46-48 of its 50 GB/s
    (0.92 puts 8x400G at 368 GB/s). Default 0.92."""
    min_busbw_gbps: Annotated[float, Field(gt=0)] | None = None
    """Explicit failure floor in GB/s for multi-node runs, replacing the derived one (needed for tcp and efa,
    which have no rails)."""
    nvlink_min_busbw_gbps: Annotated[float, Field(gt=0)] | None = None
    """Failure floor in GB/s for a one-node run (NVLink/NVSwitch, no network). Default: known for SXM parts
    (H100/H200 300, A100 150: NCCL's ring gets ~370 and ~230 on them; a GB200 tray's 4 GPUs 600: ~680 measured);
    none for others."""
    mnnvl_min_busbw_gbps: Annotated[float, Field(gt=0)] | None = None
    """With gpu.nvlinkDomain: failure floor in GB/s for a multi-node run over multi-node NVLink (each size runs over
    the network too, judged by the rails' floors). Default: known for GB200 (720: 811-877 measured on 2 to 18
    trays); none for others."""
    image: str = versions.NCCL_TESTS_IMAGE
    """Image with nccl-tests built with MPI. Default pinned in components/versions.py."""
    queue_gpus: Annotated[int, Field(gt=0)] | None = None
    """GPU capability of the `fastpath-acceptance` Volcano queue the job runs in, away from the training
    queues. Default: the GPUs of the largest run."""

    def node_counts(self, cluster_nodes: int) -> list[int]:
        """The node counts the acceptance runs, one after another."""
        return sorted({self.nodes or min(2, cluster_nodes), *self.scaling})

    def queue_cap(self, cluster_nodes: int, per_node: int) -> int:
        """The `fastpath-acceptance` queue's GPU capability."""
        return self.queue_gpus or max(self.node_counts(cluster_nodes)) * per_node

    @model_validator(mode="after")
    def _bands(self) -> AcceptanceConfig:
        if self.warn_efficiency < self.efficiency:
            raise ValueError(
                f"acceptance.warnEfficiency ({self.warn_efficiency}) is below acceptance.efficiency "
                f"({self.efficiency}): the warning band lies above the failure floor; raise it"
            )
        return self


class TrainerConfig(Model):
    """Kubeflow Trainer v2: the runtimes fastpath publishes (ClusterTrainingRuntimes) and what they decide for every
    TrainJob that names them (a TrainJob cannot change its failure policy or cleanup)."""

    image: Annotated[str, Field(min_length=1)] = versions.TRAINER_NODE_IMAGE
    """Default image of the torch and plain runtimes, and the image their preflight init container runs in (a
    TrainJob's `trainer.image` replaces the first only). Default pinned in components/versions.py."""
    mpi_image: Annotated[str, Field(min_length=1)] | None = None
    """Image of the MPI runtime's nodes. It needs openssh-server (OpenSSH 7.8 or later) and openssh-client, nothing
    configured: its pods run as root, and the runtime starts sshd itself on port 2222 with host keys made at start,
    root login by the trainer's key only, every option on the command line (a `node` pod without sshd fails the run
    at once, saying so). It must hold everything the ranks run: a TrainJob's image replaces only the launcher's,
    the other nodes' ranks run in this one. Unset: no MPI runtime (mpi jobs and acceptance on v2 are refused)."""
    max_restarts: Annotated[int, Field(ge=0, le=100)] = 3
    """Gang restarts a run gets (JobSet failurePolicy.maxRestarts): any pod failure but a failed preflight
    deletes every pod of the run and starts it again from its last checkpoint, this many times before the run
    fails. Default 3."""
    ttl_seconds_after_finished: Annotated[int, Field(ge=0, le=k8s_syntax.INT32_MAX)] | None = None
    """Not allowed (kept so the error can say why): kubeflow-trainer v2.3.0 clears a TrainJob's Failed condition on
    every reconcile and applies its JobSet again, so once a TTL deletes a failed run's JobSet the whole run starts
    over on all its GPUs (kubeflow/trainer#3779; the fix, #3891, is in no release). A finished run's JobSet stays,
    without running pods, until its TrainJob is deleted."""

    @field_validator("ttl_seconds_after_finished")
    @classmethod
    def _no_ttl(cls, v: int | None) -> int | None:
        # kubeflow/trainer@v2.3.0:pkg/controller/trainjob_controller.go Reconcile: removeFailedCondition keeps only
        # a DeadlineExceeded failure, and reconcileObjects applies the JobSet of a TrainJob that is not finished.
        if v is not None:
            raise ValueError(
                "kubeflow-trainer v2.3.0 recreates a failed run once its JobSet is deleted (it clears the TrainJob's "
                "Failed condition on every reconcile), so a TTL restarts every failed run on all its GPUs days "
                "later (kubeflow/trainer#3779, fixed after v2.3.0): remove the key; a finished run keeps its JobSet, "
                "without running pods, until you delete its TrainJob"
            )
        return v

    @model_validator(mode="after")
    def _images(self) -> TrainerConfig:
        problems = [
            f"trainer.{key}: {p}"
            for key, image in (("image", self.image), ("mpiImage", self.mpi_image))
            if image is not None and (p := image_problem(image)) is not None
        ]
        if problems:
            raise ValueError("; ".join(problems))
        return self


OverlaySource = Annotated[str, Field(pattern=r"^(https|ssh|file)://\S+//manifests/overlays/standalone\?ref=\S+$")]


class MirrorsConfig(Model):
    registry: Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?(:[0-9]{1,5})?(/[a-z0-9._-]+)*$")]
    """The container registry (`host[:port][/path]`, no scheme) every image comes from, laid out as `skopeo sync
    --scoped` writes it: `<registry>/<source registry>/<path>:<tag>`, e.g. `mirror.internal:5000/nvcr.io/nvidia/
    gpu-operator:v26.7.0`. rendered/<stack>/images.txt lists what to mirror. Required."""
    charts: Annotated[str, Field(pattern=r"^(oci|https)://\S+$")]
    """Where every chart comes from: an OCI path (`oci://mirror.internal:5000/charts`, each chart at
    `<path>/<name>`, as `helm push` writes it) or one Helm repository (`https://...`) whose index holds them all
    (rendered/<stack>/charts.txt lists them). Served over HTTPS with a certificate the machine running `pulumi`
    trusts: the provider's Helm client has no plain-HTTP option for it. Required."""
    training_operator: Annotated[
        str, Field(pattern=r"^(https|ssh|file)://\S+//manifests/overlays/standalone\?ref=\S+$")
    ] | (None) = None
    """The Kubeflow Training Operator's overlay as kustomize fetches it, from a git mirror of kubeflow/trainer:
    `https://git.internal/kubeflow/trainer.git//manifests/overlays/standalone?ref=<commit>` (or `ssh://`,
    `file:///srv/git/trainer.git//...`). A ref by commit needs a server speaking git protocol v2. A plain directory
    is not accepted: kustomize resolves it from the provider's cache folder, not the project. Required when the
    Training Operator is installed."""

    def names(self, ref: str) -> bool:
        """Whether `ref` is pulled from this mirror."""
        return ref.startswith(f"{self.registry}/")


def acceptance_api(job_apis: tuple[JobApi, ...], scheduler: str | None) -> JobApi:
    """The API the fabric acceptance runs on: a TrainJob through the MPI runtime where v2 is the only API, or on
    Kueue (which has no Training Operator MPIJob integration) where v2 is served; else an MPIJob."""
    return "v2" if job_apis == ("v2",) or (scheduler == "kueue" and "v2" in job_apis) else "v1"


class PlatformConfig(Model):
    cluster: Annotated[str, Field(pattern=DNS_LABEL, max_length=40)]
    """Cluster name; labels every object fastpath creates. Required."""
    kubernetes_version: Annotated[str, Field(pattern=r"^1\.[0-9]{1,2}$")] | None = None
    """The cluster's Kubernetes minor version (`"1.34"`), for what needs a newer API than 1.30: fabric.attachment
    `dra` (resource.k8s.io/v1, GA in 1.34). Default: not stated (nothing that needs it)."""
    training_namespaces: Annotated[list[DnsLabel], Field(min_length=1)] = ["training"]
    """Namespaces where training jobs run; each gets the secondary networks and a checkpoint claim.
    Default `[training]`."""
    gpu: GpuConfig
    """The GPUs of the training nodes. Required."""
    nodes: NodesConfig
    """Size and shape of the training nodes. Required."""
    fabric: FabricConfig
    """The inter-node fabric. Required."""
    scheduler: SchedulerConfig = SchedulerConfig()
    """Volcano queues. Default: one queue `training`."""
    checkpoints: CheckpointConfig | None = None
    """Where checkpoints are written (ReadWriteMany). Required when components.checkpointStorage is on."""
    monitoring: MonitoringConfig = MonitoringConfig()
    """Prometheus Operator integration: `{enabled, serviceMonitorLabels}`. A bare `true`/`false` still means
    `{enabled: true/false}`. Default off."""
    versions: VersionsConfig = VersionsConfig()
    """Component versions; defaults pinned in components/versions.py."""
    components: ComponentsConfig = ComponentsConfig()
    """Which components to install."""
    acceptance: AcceptanceConfig = AcceptanceConfig()
    """The fabric acceptance job (off by default)."""
    health: HealthConfig = HealthConfig()
    """Node health and quarantine (NVSentinel). Default off."""
    reaper: ReaperConfig = ReaperConfig()
    """Ends jobs whose pods cannot start. Default on, 30 minutes."""
    mirrors: MirrorsConfig | None = None
    """A disconnected cluster's mirrors (`{registry, charts, trainingOperator}`): every image, chart and source the
    render names comes from them, operators' images included, and every image the stack names must be one of the
    mirror's. Default: the public sources."""
    job_api: Literal["v1", "v2", "both"] = "v1"
    """Which job API the cluster serves: `v1` (default) the Kubeflow Training Operator (PyTorchJob, MPIJob, TFJob);
    `v2` Kubeflow Trainer v2 only (TrainJobs naming the ClusterTrainingRuntimes fastpath publishes); `both` during a
    migration (each job chooses with `api`, v1 by default)."""
    trainer: TrainerConfig | None = None
    """Kubeflow Trainer v2 settings (jobApi v2 or both): runtime images, gang restarts, cleanup. Default: the
    defaults of each key."""

    @field_validator("monitoring", mode="before")
    @classmethod
    def _monitoring_bool(cls, v: object) -> object:
        # `monitoring: true` was the whole setting before labels existed; keep those stack files valid.
        return {"enabled": v} if isinstance(v, bool) else v

    @model_validator(mode="after")
    def _cross_fields(self) -> PlatformConfig:
        dup = {n for n in self.training_namespaces if self.training_namespaces.count(n) > 1}
        if dup:
            raise ValueError(f"trainingNamespaces lists {sorted(dup)} more than once")
        for i, q in enumerate(self.scheduler.queues):
            if stray := [ns for ns in q.namespaces if ns not in self.training_namespaces]:
                raise ValueError(
                    f"scheduler.queues[{i}].namespaces names {stray}, which trainingNamespaces does not list: jobs "
                    f"there would get no networks nor claims; add them to trainingNamespaces or remove them here"
                )
        owners: dict[str, list[str]] = {}
        for q in self.scheduler.queues:
            for ns in q.namespaces:
                owners.setdefault(ns, []).append(q.name)
        if twice := {ns: qs for ns, qs in owners.items() if len(qs) > 1}:
            raise ValueError(
                "scheduler.queues: "
                + "; ".join(f"namespace {ns} is in queues {qs}" for ns, qs in sorted(twice.items()))
                + ": a namespace's jobs default to one queue; keep it in one of them"
            )
        taken = [n for n in self.training_namespaces if n in k8s_syntax.RESERVED_NAMESPACES]
        if taken:
            raise ValueError(
                f"trainingNamespaces {taken} is a system or platform namespace (fastpath would label "
                "it for training and put networks and claims in it): use namespaces of their own"
            )
        pace = self.fabric.sriov_max_unavailable
        if isinstance(pace, str) and self.nodes.count * int(pace[:-1]) // 100 == 0:
            raise ValueError(
                f"fabric.sriovMaxUnavailable {pace} of {self.nodes.count} nodes rounds down to 0 (the SR-IOV operator "
                "rounds a percentage down and then drains no node at all, so VFs are never configured): give a "
                "count, or a larger percentage"
            )
        v = self.versions
        if (
            self.network_operator_enabled
            and not self.gpu.host_mofed
            and v.network_operator not in versions.DOCA_DRIVER_VERSIONS
        ):
            raise ValueError(
                f"versions.networkOperator {v.network_operator}: the DOCA driver that goes with it is not known here "
                f"(fastpath pairs {', '.join(f'{c} with {d}' for c, d in versions.DOCA_DRIVER_VERSIONS.items())}), "
                "and a driver of another release beside the new operator is untested: add the pair to "
                "components/versions.py DOCA_DRIVER_VERSIONS from that release's notes, or keep the pinned version"
            )
        if self.job_api != "v1" and v.trainer not in versions.JOBSET_FOR_TRAINER:
            raise ValueError(
                f"versions.trainer {v.trainer}: the JobSet image its chart depends on is not known here (fastpath "
                f"pairs {', '.join(f'{c} with JobSet {j}' for c, j in versions.JOBSET_FOR_TRAINER.items())}): add "
                "the pair to components/versions.py JOBSET_FOR_TRAINER from that chart's Chart.yaml, or keep the "
                "pinned version"
            )
        if (
            self.training_operator_enabled
            and v.training_operator not in versions.KUBECTL_DELIVERY_FOR_TRAINING_OPERATOR
        ):
            raise ValueError(
                f"versions.trainingOperator {v.training_operator}: the kubectl-delivery image published with that "
                "operator is not known here (MPIJob launchers use it): add the pair to components/versions.py "
                "KUBECTL_DELIVERY_FOR_TRAINING_OPERATOR, or keep the pinned version"
            )
        if self.gpu.gpu_direct == "peermem" and self.gpu.driver_preinstalled and not self.gpu.host_mofed:
            raise ValueError(
                "gpu.gpuDirect 'peermem' with gpu.driverPreinstalled true needs gpu.hostMofed true: "
                "the GPU Operator cannot build nvidia-peermem into a driver it does not manage; use "
                "gpu.gpuDirect 'dmabuf' instead"
            )
        health = self.health
        if health.enabled and not self.components.gpu_operator:
            raise ValueError(
                "health.enabled needs components.gpuOperator true: NVSentinel reads GPU health from the GPU "
                "Operator's DCGM hostengine (its nvidia-dcgm Service); turn the operator on or health off"
            )
        # NVIDIA/NVSentinel@v1.19.0 fault-quarantine slidingWindowBreaker.IsTripped: threshold ceil(N * pct / 100);
        # once that many nodes were quarantined in the window it halts until a person resets it.
        trips_at = -(-self.nodes.count * health.circuit_breaker_percent // 100)
        if health.enabled and trips_at < 2:
            raise ValueError(
                f"health.circuitBreakerPercent {health.circuit_breaker_percent} of {self.nodes.count} nodes trips "
                "NVSentinel's circuit breaker at the first quarantined node, and it then quarantines nothing until "
                f"a person resets it: give at least {-(-200 // self.nodes.count)} (two nodes), or leave health off "
                "on a cluster this small"
            )
        fabric = self.fabric
        if not fabric.kind_row.rdma and self.gpu.gpu_direct != "none" and "gpu_direct" in self.gpu.model_fields_set:
            raise ValueError(
                f"gpu.gpuDirect has no effect on fabric.kind {fabric.kind!r}: set it to 'none' or remove it"
            )
        capacity = self.gpu_capacity
        for i, q in enumerate(self.scheduler.queues):
            if q.gpus is not None and q.gpus > capacity:
                raise ValueError(
                    f"scheduler.queues[{i}].gpus is {q.gpus} but the cluster has {capacity} GPUs "
                    f"(nodes.count {self.nodes.count} x gpu.perNode {self.gpu.per_node})"
                )
            if q.gpus is not None and q.gpus % self.gpu.per_node:
                whole = q.gpus - q.gpus % self.gpu.per_node
                raise ValueError(
                    f"scheduler.queues[{i}].gpus {q.gpus} is not a multiple of gpu.perNode {self.gpu.per_node}: "
                    f"whole-node gangs can never use the last {q.gpus % self.gpu.per_node}; give {whole} or "
                    f"{whole + self.gpu.per_node}"
                )
        if self.components.checkpoint_storage and self.checkpoints is None:
            raise ValueError(
                "components.checkpointStorage is on but checkpoints is not set: add checkpoints.nfs "
                "or checkpoints.storageClass (or turn components.checkpointStorage off)"
            )
        nfs = self.checkpoints.nfs if self.checkpoints else None
        if nfs is not None and nfs.rdma and not self.fabric.kind_row.rails:
            raise ValueError(
                f"checkpoints.nfs.rdma needs RDMA NICs on the GPU nodes, but fabric.kind is "
                f"{self.fabric.kind!r}: set checkpoints.nfs.rdma false (plain NFS over TCP)"
            )
        block = addressing.block_size(self.fabric.attachment, self.fabric.vfs_per_pf, self.gpu.per_node)
        blocks = addressing.blocks_needed(self.nodes.count)
        for i, rail in enumerate(self.fabric.rails if self.fabric.secondary_network else []):
            if rail.subnet is None:
                continue
            usable = addressing.usable_addresses(rail.subnet)
            if usable < blocks * block:
                prefix = addressing.smallest_prefix(blocks * block)
                raise ValueError(
                    f"fabric.rails[{i}].subnet {rail.subnet} holds {usable // block} blocks of {block} addresses, but "
                    f"nodes.count {self.nodes.count} needs {blocks}: one per node plus {blocks - self.nodes.count} "
                    "spare for replacement nodes (nv-ipam frees a node's block only when its Node object is "
                    f"deleted); use a /{prefix} or larger subnet"
                )
        for key, n in [("acceptance.nodes", self.acceptance.nodes)] + [
            (f"acceptance.scaling[{i}]", n) for i, n in enumerate(self.acceptance.scaling)
        ]:
            if n is not None and n > self.nodes.count:
                raise ValueError(f"{key} is {n} but the cluster has {self.nodes.count} nodes (nodes.count)")
        s = self.components.training_operator
        if self.job_api == "v2" and s:
            raise ValueError(
                "components.trainingOperator is on but jobApi is 'v2' (Trainer v2 only): to serve v1 "
                "and v2 jobs during a migration use jobApi 'both'; else remove "
                "components.trainingOperator"
            )
        if self.job_api == "both" and s is False:
            raise ValueError(
                "jobApi 'both' runs v1 jobs on the Training Operator, but components.trainingOperator is "
                "false: remove components.trainingOperator, or use jobApi 'v2'"
            )
        if self.trainer is not None and self.job_api == "v1":
            raise ValueError(
                "trainer configures Kubeflow Trainer v2, which jobApi 'v1' (the default) does not "
                "install: set jobApi 'v2' or 'both', or remove trainer"
            )
        if self.acceptance.enabled and self.acceptance_api == "v2":
            if self.trainer_settings.mpi_image is None:
                raise ValueError(
                    "acceptance.enabled on jobApi 'v2' runs nccl-tests through the MPI runtime, which "
                    "needs trainer.mpiImage: an image with nccl-tests built with MPI, openssh-server and "
                    "openssh-client"
                )
            # (the default too passes: a platform round-trips through to_config, defaults included)
            if self.acceptance.image not in (versions.NCCL_TESTS_IMAGE, self.trainer_settings.mpi_image):
                raise ValueError(
                    f"acceptance.image {self.acceptance.image!r} differs from trainer.mpiImage "
                    f"{self.trainer_settings.mpi_image!r}: as a TrainJob the ranks run in the MPI "
                    "runtime's image; remove acceptance.image"
                )
        elif self.acceptance.enabled and not self.training_operator_enabled:
            raise ValueError("acceptance.enabled needs components.trainingOperator (the job is an MPIJob)")
        if self.components.network_operator and not self.fabric.kind_row.rails:
            raise ValueError(
                f"components.networkOperator is on but fabric.kind is {self.fabric.kind!r}: the Network "
                f"Operator serves {_either(k for k, r in kinds.KINDS.items() if r.rails)} fabrics; "
                "remove components.networkOperator"
            )
        self._nvlink_domain()
        self._dra()
        self._cert_manager()
        self._kueue()
        self._mirrored()
        return self

    def _dra(self) -> None:
        """What the `dra` attachment needs, refused with the reason (components/fabric/dra.py)."""
        if not self.fabric.claims:
            return
        if self.kubernetes_minor < 34:
            raise ValueError(
                f"fabric.attachment 'dra' claims GPUs and NICs through resource.k8s.io/v1, GA in Kubernetes 1.34 "
                f"(kubernetesVersion is {self.kubernetes_version or 'not set'}): set kubernetesVersion to the "
                "cluster's, 1.34 or later, or use another attachment"
            )
        if len(self.fabric.rails) != self.gpu.per_node:
            raise ValueError(
                f"fabric.attachment 'dra' pairs each GPU with the rail NIC on its PCIe root: give one rail per GPU "
                f"({self.gpu.per_node}), not {len(self.fabric.rails)}"
            )
        if self.kueue_enabled:
            raise ValueError(
                "fabric.attachment 'dra' on Kueue: Kueue v0.19.2 counts no DRA GPU against quota without "
                "deviceClassMappings, and its topology placement ignores DRA devices (kubernetes-sigs/kueue#10548); "
                "use scheduler.name volcano, or another attachment"
            )
        if capped := [q.name for q in self.scheduler.queues if q.gpus is not None]:
            raise ValueError(
                f"scheduler.queues {capped} cap nvidia.com/gpu, which DRA pods do not request (their GPUs are in "
                "their claims): Volcano would never hold them to it; remove gpus (weights still share the nodes "
                "through the pods' CPU and memory, sized to their GPUs)"
            )

    def _nvlink_domain(self) -> None:
        """What multi-node NVLink needs, refused with the reason."""
        if self.gpu.nvlink_domain is None:
            return
        if self.fabric.claims:
            raise ValueError(
                "gpu.nvlinkDomain with fabric.attachment 'dra': on GB200/GB300 the GPUs and NICs share no PCIe root "
                "(kubernetes-sigs/dranet@v1.4.0 examples/oci_oke_examples/BM.GPU.GB200-v3.4), so the rails cannot be "
                "paired by it; use rdma-only or sriov for the rails"
            )
        if self.acceptance.enabled and (big := max(self.acceptance.node_counts(self.nodes.count))) > (
            clique := self.gpu.nvlink_domain.nodes_per_clique
        ):
            raise ValueError(
                f"acceptance runs {big} nodes, more than one NVLink clique of {clique} (gpu.nvlinkDomain."
                "nodesPerClique): its runs stay inside one clique, over multi-node NVLink and over the network; set "
                f"acceptance.nodes and acceptance.scaling to at most {clique}"
            )
        if self.kubernetes_minor < 34:
            raise ValueError(
                "gpu.nvlinkDomain claims an IMEX channel through resource.k8s.io/v1 (Kubernetes 1.34): set "
                "kubernetesVersion to the cluster's, 1.34 or later"
            )

    def _kueue(self) -> None:
        """What the stack asks that Kueue v0.19.2 cannot do, refused with the reason."""
        if not self.kueue_enabled:
            return
        if self.components.volcano:
            raise ValueError(
                "components.volcano is on but scheduler.name is kueue: two gang schedulers would each hold part of "
                "the GPUs; remove components.volcano, or set scheduler.name volcano"
            )
        if self.acceptance.enabled and self.acceptance_api == "v1":
            raise ValueError(
                "acceptance.enabled on Kueue with jobApi 'v1': the acceptance is a Training Operator MPIJob, which "
                "Kueue v0.19.2 does not admit (its kubeflow.org/mpijob integration is mpi-operator's v2beta1); serve "
                "Trainer v2 (jobApi 'both' or 'v2', the acceptance then runs as a TrainJob) or turn acceptance off"
            )

    def _cert_manager(self) -> None:
        """The cert-manager fastpath installs supports Kubernetes from CERT_MANAGER_MIN_KUBERNETES on: a cluster
        that says it is older gets a refusal, not an unsupported install (a cluster that does not say is not judged)."""
        if not (self.health.enabled and self.health.install_cert_manager) or not self.kubernetes_version:
            return
        if self.kubernetes_minor < versions.CERT_MANAGER_MIN_KUBERNETES_MINOR:
            raise ValueError(
                f"health.installCertManager installs cert-manager {versions.CERT_MANAGER_VERSION}, which supports "
                f"Kubernetes 1.{versions.CERT_MANAGER_MIN_KUBERNETES_MINOR} and later (kubernetesVersion is "
                f"{self.kubernetes_version}): install a cert-manager the cluster supports (NVSentinel needs v1.19.0 or "
                "later) and set health.installCertManager false, or upgrade the cluster"
            )

    @property
    def kubernetes_minor(self) -> int:
        """The minor version of the stated kubernetesVersion; 0 when not stated (nothing that needs one may run)."""
        return int(self.kubernetes_version.split(".")[1]) if self.kubernetes_version else 0

    @property
    def acceptance_api(self) -> JobApi:
        """The API the fabric acceptance runs on (acceptance_api)."""
        return acceptance_api(self.job_apis, self.scheduler.name)

    def _mirrored(self) -> None:
        """With mirrors, every image the platform names is the mirror's, and the Training Operator has a source."""
        m = self.mirrors
        if m is None:
            return
        named = [
            ("acceptance.image", self.acceptance.image if self.acceptance.enabled else None),
            ("monitoring.ncclInspectorImage", self.monitoring.nccl_inspector_image),
            *(
                [("trainer.image", self.trainer_settings.image), ("trainer.mpiImage", self.trainer_settings.mpi_image)]
                if "v2" in self.job_apis
                else []
            ),
        ]
        public = [f"{key} {image!r}" for key, image in named if image is not None and not m.names(image)]
        if public:
            raise ValueError(
                f"{'; '.join(public)}: not from mirrors.registry {m.registry!r}, which a disconnected cluster pulls "
                f"from; mirror it and name it as `{m.registry}/<source registry>/<path>:<tag>`"
            )
        pinned = {
            "versions.gpuOperator": (self.versions.gpu_operator, versions.GPU_OPERATOR_VERSION),
            "versions.networkOperator": (self.versions.network_operator, versions.NETWORK_OPERATOR_VERSION),
            "versions.volcano": (self.versions.volcano, versions.VOLCANO_VERSION),
            "versions.trainer": (self.versions.trainer, versions.TRAINER_VERSION),
            "versions.csiDriverNfs": (self.versions.csi_driver_nfs, versions.CSI_NFS_VERSION),
        }
        if moved := [f"{key} {got}" for key, (got, pin) in pinned.items() if got != pin]:
            raise ValueError(
                f"{', '.join(moved)} with mirrors: the images each chart pulls are known for the pinned versions only "
                "(components/platform/mirrors.py), so another version's would still come from the internet; keep the "
                "pinned versions"
            )
        if not self.gpu.driver_preinstalled and self.gpu.precompiled_driver is None:
            raise ValueError(
                "mirrors is set but the GPU Operator builds the driver on each node, from kernel headers in the OS's "
                "package repositories a disconnected cluster cannot reach: set gpu.precompiledDriver (the nodes' "
                "kernels, images from the mirror) or gpu.driverPreinstalled"
            )
        if self.training_operator_enabled and not m.training_operator:
            raise ValueError(
                "mirrors.trainingOperator is unset but the Training Operator is installed: its kustomize overlay would "
                "be fetched from github.com; name a git mirror or a path holding kubeflow/trainer at "
                f"{self.versions.training_operator}"
            )

    @property
    def volcano_enabled(self) -> bool:
        flag = self.components.volcano
        return self.scheduler.name == "volcano" if flag is None else flag

    @property
    def kueue_enabled(self) -> bool:
        return self.scheduler.name == "kueue"

    @property
    def training_operator_enabled(self) -> bool:
        flag = self.components.training_operator
        return self.job_api != "v2" if flag is None else flag

    @property
    def trainer_settings(self) -> TrainerConfig:
        """platform.trainer with its defaults (meaningful on jobApi v2 and both)."""
        return self.trainer or TrainerConfig()

    @property
    def job_apis(self) -> tuple[JobApi, ...]:
        """The job APIs this cluster serves, the default for a job that names none first."""
        served: dict[str, tuple[JobApi, ...]] = {"v1": ("v1",), "v2": ("v2",), "both": ("v1", "v2")}
        return served[self.job_api]

    @property
    def network_operator_enabled(self) -> bool:
        flag = self.components.network_operator
        if flag is not None:
            return flag
        # With DRA the Network Operator has nothing to run but the DOCA driver (dranet publishes the NICs).
        return self.fabric.kind_row.rails and not (self.fabric.claims and self.gpu.host_mofed)

    @property
    def gpu_capacity(self) -> int:
        return self.nodes.count * self.gpu.per_node


def tcp_on_rdma(fabric: FabricConfig, name: str, value: str) -> str | None:
    """`NAME=value: why` when an override would put an RDMA cluster's pods on TCP: fastpath never renders a job
    that the policy pack refuses (nccl-ib-enabled)."""
    if not fabric.kind_row.rdma:
        return None
    if (name == "NCCL_IB_DISABLE" and str(value).strip() == "1") or (
        name == "NCCL_NET" and str(value).strip().lower() == "socket"
    ):
        return (
            f"{name}={value} puts training pods of this {fabric.kind} cluster on TCP sockets (10-50x slower): "
            "remove it; a cluster without usable RDMA is fabric.kind tcp"
        )
    if name == "NCCL_NET":
        return f"{name}: set fabric.ncclNet instead (one name for the whole cluster, checked by ncclcheck)"
    return None
