"""The fabric-kind table (components/fabric/kinds.py), proved by every row end to end: what the Network Operator
deploys for it, which networks exist, what a pod gets, what the preflight checks, what the policy pack says.

The table-wide tests read what they expect off the row's columns, never off a kind's name, so a new row passes or
fails by what its columns say without an edit here. What a kind means to its users (RoCE's GIDs on the host
network, which attachments take partial-node pods) is pinned by explicit cases below and in the builders' own
tests (IPoIB or macvlan in test_networks, the SR-IOV link types in test_sriov, EFA's devices in test_fabric)."""

from __future__ import annotations

import dataclasses
import json
import typing

import pytest

from components.fabric import dra, kinds
from components.fabric import wiring as fabric
from components.jobs import trainjob
from components.jobs.checks import problems
from components.jobs.component import manifest
from components.jobs.contract import contract
from components.jobs.pod import fabric_claim_template, pod_preflight_env, pod_template
from components.jobs.resolve import resolve
from components.model.config import PlatformConfig
from components.model.job import JobSpec
from components.model.profile import profile as make_profile
from components.platform import dra as dra_platform
from components.platform import network_operator, networks
from tests.conftest import schema_problems, stack_platform
from tests.helpers import DGX, stack_input
from tools import lint


def platform_with(kind: str, attachment: str | None, **fabric_extra) -> PlatformConfig:
    return PlatformConfig.model_validate(stack_input(kind, attachment, **fabric_extra))


# Every kind with each of its attachments, and a kind that takes none on its own.
ROWS = [(k, a) for k, row in kinds.KINDS.items() for a in (row.attachments or (None,))]
IDS = [f"{k}-{a}" if a else k for k, a in ROWS]


def job(fw: str = "pytorch", **extra) -> JobSpec:
    return JobSpec.model_validate({"name": "run", "image": "nvcr.io/nvidia/pytorch:25.10-py3", "command": ["python", "train.py"], "framework": fw, "nodes": 4, **extra})


@pytest.mark.parametrize(("kind", "attachment"), ROWS, ids=IDS)
def test_network_operator_deploys_what_the_attachment_needs(kind, attachment):
    """The device plugin of the row, the SR-IOV operator where it makes the VFs, and Multus, CNI plugins and
    NV-IPAM (with pools and attachments) only where pods get a network per rail (both optional in the
    NicClusterPolicy: Mellanox/network-operator@v26.4.1 api/v1alpha1/nicclusterpolicy_types.go). Kinds without
    rails get no Network Operator."""
    p = platform_with(kind, attachment)
    # With DRA (dranet publishes the NICs) the operator has only the DOCA driver to run: none with host DOCA-OFED.
    claims = attachment is not None and kinds.ATTACHMENTS[attachment].claims
    assert p.network_operator_enabled == (kinds.KINDS[kind].rails and not (claims and p.gpu.host_mofed))
    if attachment is None:
        return
    row = kinds.ATTACHMENTS[attachment]
    spec = network_operator.nic_cluster_policy(p)["spec"]
    plugin = {"rdma-shared": "rdmaSharedDevicePlugin", "hostdevice": "sriovDevicePlugin", "sriov": None, "dra": None}
    for name in ("rdmaSharedDevicePlugin", "sriovDevicePlugin"):
        assert (name in spec) == (plugin[row.device_plugin] == name)
    assert ("sriovNetworkOperator" in network_operator.values(p)) == row.sriov_operator
    assert ("secondaryNetwork" in spec) == ("nvIpam" in spec) == row.secondary_network
    assert bool(network_operator.ip_pools(p)) == row.secondary_network
    # fastpath writes the NetworkAttachmentDefinitions of every secondary network but the SR-IOV operator's, and
    # the Network Operator deploys the CNI they name when it is not one of the standard plugins.
    cni = networks.cni(p.fabric)
    assert (cni is not None) == (row.secondary_network and not row.sriov_operator)
    assert ("ipoib" in spec.get("secondaryNetwork", {})) == (cni == "ipoib")
    if cni is not None:
        nads = networks.attachments(p)
        assert len(nads) == len(DGX) * len(p.training_namespaces)
        assert {json.loads(n["spec"]["config"])["type"] for n in nads} == {cni}
    if row.device_plugin == "rdma-shared":
        config = json.loads(spec["rdmaSharedDevicePlugin"]["config"])["configList"]
        assert [c["selectors"]["ifNames"] for c in config] == [[r.interface] for r in p.fabric.rails]


@pytest.mark.parametrize(("kind", "attachment"), ROWS, ids=IDS)
def test_pod_wiring_per_attachment(kind, attachment):
    p = platform_with(kind, attachment)
    row = kinds.KINDS[kind]
    att = kinds.ATTACHMENTS[attachment] if attachment is not None else None
    secondary = att is not None and att.secondary_network
    host = att is not None and att.host_network
    r = resolve(job(), make_profile(p))
    m = manifest(r)
    assert schema_problems(m) == []
    pod = m["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    annotations = pod["metadata"].get("annotations", {})
    assert (fabric.NETWORKS_ANNOTATION in annotations) == secondary
    # Every rail's device, whatever the attachment: that is what /dev/infiniband holds for NCCL; and the node's
    # fabric devices that are not rails, its share of them.
    # (DRA: none counted, the pod's claim holds the GPUs and rails.)
    rail_devices = {f"{att.resource_prefix}/{att.resource_stem}_rail{i}" for i in range(len(p.fabric.rails))} if att and not att.claims else set()
    node_devices = {row.node_resource} if row.node_resource is not None else set()
    assert {k for k in container["resources"]["limits"] if "/" in k and k != "nvidia.com/gpu"} == rail_devices | node_devices
    assert container.get("securityContext", {}).get("capabilities", {}).get("add") == (["IPC_LOCK"] if row.rdma else None)
    assert env.get("NCCL_NET") == row.nccl_net
    if row.ib_env:
        # Host HCA names are listed exactly where the pod sees them; VFs get names of their own.
        assert att is not None
        assert env["NCCL_IB_HCA"] == ("mlx5" if not att.host_hca_names else "=" + ",".join(DGX))
    else:
        assert "NCCL_IB_HCA" not in env
    # Where GIDs are addresses, NCCL picks them from the rails' subnets (no fabric.gidIndex here).
    assert ("NCCL_IB_ADDR_RANGE" in env) == row.gid_from_address
    assert (pod["spec"].get("hostNetwork") is True) == host
    if host:
        assert pod["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"
        assert env["NCCL_SOCKET_IFNAME"] == "=bond0" and env["GLOO_SOCKET_IFNAME"] == "bond0"
        assert env["PET_LOCAL_ADDR"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        assert env["PREFLIGHT_BOOTSTRAP"] == "bond0"
    else:
        assert "dnsPolicy" not in pod["spec"] and "PET_LOCAL_ADDR" not in env
        assert env["NCCL_SOCKET_IFNAME"] == "=eth0"
    # The preflight checks RDMA pods: their devices, and the addresses NCCL uses on the rails (the pod's own
    # interfaces, or on the host network where GIDs are addresses the node's rail netdevs).
    assert ("PREFLIGHT_GPUS" in env) == row.rdma
    if row.rdma:
        rail_ifaces = []
        if secondary:
            rail_ifaces = [f"net{i + 1}" for i in range(len(p.fabric.rails))]
        elif host and row.gid_from_address:
            rail_ifaces = [rc.interface for rc in p.fabric.rails]
        assert env["PREFLIGHT_INTERFACES"] == " ".join(rail_ifaces)
        hcas = att is not None and att.host_hca_names
        gids = " ".join(f"{i}:{h}" for i, h in zip(rail_ifaces, DGX, strict=True)) if rail_ifaces else None
        assert env.get("PREFLIGHT_ROCE_GIDS") == (gids if row.gid_from_address and hcas else None)
        assert env.get("PREFLIGHT_LINK_LAYER") == (row.link_layer if hcas else None)
    # The contract (the stack output `jobs`, SUMMARY.md) names only networks that exist.
    assert contract(r)["networks"] == [rl.network for rl in r.wiring.rails if rl.network]
    assert None not in contract(r)["networks"]
    assert r.wiring.transport == row.transport


@pytest.mark.parametrize(("kind", "attachment"), ROWS, ids=IDS)
def test_network_annotations_per_row(kind, attachment):
    """Every annotation the fabric puts a pod on its networks with is one of fabric.POD_NETWORK_ANNOTATIONS, which
    the job contract reads the pod's networks off (the same on both job APIs) and the Trainer v2 judge guards: a
    TrainJob whose runtimePatches replace one is told so."""
    from components.jobs.runtime_v2.judge import override_problems

    v1 = resolve(job(), make_profile(platform_with(kind, attachment)))
    p = stack_input(kind, attachment)
    p["jobApi"], p["acceptance"] = "v2", {"enabled": False}
    p["components"] = {**p.get("components", {}), "trainingOperator": None}
    v2 = resolve(job(), make_profile(PlatformConfig.model_validate(p)))
    unknown = set(v1.wiring.annotations) - set(fabric.POD_NETWORK_ANNOTATIONS)
    assert not unknown, f"{unknown}: the contract and the v2 judge see only components/fabric/wiring.py POD_NETWORK_ANNOTATIONS"
    assert contract(v1)["networks"] == contract(v2)["networks"] == fabric.annotation_networks(v1.wiring.annotations)
    rt = trainjob.job_runtime(v2)
    tj = trainjob.train_job(v2)
    notes = rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"].get("annotations", {})
    replaced = {k: "[]" for k in fabric.POD_NETWORK_ANNOTATIONS if k in notes}
    assert bool(replaced) == bool(v1.wiring.annotations)
    patch = {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"metadata": {"annotations": replaced}}}}}]}}}
    tj["spec"]["runtimePatches"] = [{"manager": "example.com/user", "trainingRuntimeSpec": patch}]
    found = [m for m in override_problems(tj, rt) if "lose their rail interfaces" in m]
    assert [k for k in replaced if any(k in m for m in found)] == list(replaced)


# PodWiring fields no pod carries, and who reads them instead.
NOT_IN_POD = {"kind": "the transport the job should get (PodWiring.transport), for the contract and acceptance"}


def _sentinel(name: str, hint: object, base: object) -> tuple[object, str | None]:
    """A value for PodWiring.`name` that no real wiring has, and the string it shows as in a pod (None: a flag)."""
    marker = f"sentinel-{name.replace('_', '-')}"
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is bool:
        return not base, None
    if origin is dict and args in ((str, str), (str, int)):
        return {f"example.com/{marker}": marker if args[1] is str else 7}, marker
    if origin is tuple and args == (str, ...):
        return (marker,), marker
    if origin is tuple and args == (dict, ...):
        return ({"name": marker},), marker
    if origin is tuple and args[1:] == (...,) and dataclasses.is_dataclass(args[0]):
        strs = [n for n, h in typing.get_type_hints(args[0]).items() if h in (str, str | None)]
        assert isinstance(base, tuple) and base, f"PodWiring.{name}: the base wiring has none to vary"
        return tuple(dataclasses.replace(x, **dict.fromkeys(strs, marker)) for x in base), marker
    if hint == (str | None):
        return marker, marker
    if hint == (dra.FabricClaim | None):
        return dra.FabricClaim(marker, 8, 8, paired=False), marker
    pytest.fail(f"PodWiring.{name} ({hint}): give it a sentinel in tests/test_kinds.py _sentinel")


def test_every_pod_wiring_field_reaches_both_job_apis_pods(monkeypatch):
    """Both job APIs build their GPU pods from a PodWiring (components/jobs/pod.py pod_template,
    components/jobs/runtime_v2/build.py through fabric.wire_pod): every field, set alone to a value of its own,
    shows in the v1 pod and in the Trainer v2 runtime's pod. A new field one builder forgets fails here (or is
    named in NOT_IN_POD with who reads it instead)."""
    p = stack_input("infiniband", "shared")  # rails on secondary networks with the host's HCA names: every field shows
    p["jobApi"], p["acceptance"] = "both", {"enabled": False}
    prof = make_profile(PlatformConfig.model_validate(p))
    real = fabric.pod_wiring
    base = real(prof.fabric, None, prof.gpu.per_node, prof.gpu.per_node)

    def pods() -> tuple[dict, dict]:
        v1 = pod_template(resolve(job(), prof), ["true"])
        rt = trainjob.runtime(prof, "torch", None)
        return v1, rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]

    before = pods()
    hints = typing.get_type_hints(fabric.PodWiring)
    assert set(NOT_IN_POD) <= set(hints)
    for name, hint in hints.items():
        if name in NOT_IN_POD:
            continue
        value, marker = _sentinel(name, hint, getattr(base, name))
        assert value != getattr(base, name)
        with monkeypatch.context() as m:
            m.setattr(fabric, "pod_wiring", lambda *a, _n=name, _v=value, **k: dataclasses.replace(real(*a, **k), **{_n: _v}))
            after = pods()
        for api, pod, old in zip(("v1", "v2"), after, before, strict=True):
            missing = f"PodWiring.{name} does not reach the {api} pod: write it in components/fabric/wiring.py wire_pod"
            assert pod != old, missing
            assert marker is None or marker in json.dumps(pod), missing


@pytest.mark.parametrize(("kind", "attachment"), ROWS, ids=IDS)
@pytest.mark.parametrize("fw", ["pytorch", "mpi", "tensorflow"])
def test_every_attachment_lints_clean(kind, attachment, fw):
    """fastpath never renders a job its own policy pack refuses, on any row of the table."""
    r = resolve(job(fw), make_profile(platform_with(kind, attachment)))
    violations = lint.lint([manifest(r)])
    assert [v for v in violations if v.level == "mandatory"] == [], violations


RDMA = [(row, i) for row, i in zip(ROWS, IDS, strict=True) if kinds.KINDS[row[0]].rdma]


@pytest.mark.parametrize(("kind", "attachment"), [row for row, _ in RDMA], ids=[i for _, i in RDMA])
def test_the_pack_sees_every_rdma_rows_pods_as_rdma_pods(kind, attachment):
    """The policy pack's idea of an RDMA pod covers what fastpath renders on every RDMA row: the same pod without
    NCCL_NET is flagged (nccl-net-set), whatever gives the row's pods their RDMA devices. (That every row lints
    clean says nothing of this: a pod the pack does not judge lints clean too.)"""
    p = platform_with(kind, attachment)
    r = resolve(job(), make_profile(p))
    m = manifest(r)
    container = m["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["env"] = [e for e in container["env"] if e["name"] != "NCCL_NET"]
    # DRA: the pod's devices are in its claim, judged with the claim template and the classes it names.
    claimed = [fabric_claim_template(r), *dra_platform.objects(p)] if p.fabric.claims else []
    assert "nccl-net-set" in {v.rule for v in lint.lint([m, *claimed])}, "policies/pods.py is_rdma_pod does not see this row's pods"


def test_mpi_launcher_follows_its_workers_onto_the_host_network():
    """mpirun pins Open MPI's TCP traffic to fabric.podInterface (a node interface here): the launcher's daemon
    must have that interface too, so it is on the host network of a GPU node."""
    r = resolve(job("mpi"), make_profile(platform_with("infiniband", "hostnetwork")))
    spec = manifest(r)["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert "btl_tcp_if_include" in spec["containers"][0]["command"]
    assert spec["containers"][0]["command"][spec["containers"][0]["command"].index("btl_tcp_if_include") + 1] == "bond0"


@pytest.mark.parametrize(
    ("kind", "attachment", "fabric_extra", "expect"),
    [
        # Containers' ports become host ports on the host network (the API server's defaulting); two pods on a node
        # would collide, so partial-node pods are refused like hostdevice's.
        ("infiniband", "hostnetwork", {}, "share the node's ports"),
        ("infiniband", "hostdevice", {}, "PF goes to one pod whole"),
    ],
)
def test_whole_node_attachments_refuse_partial_node_pods(kind, attachment, fabric_extra, expect):
    prof = make_profile(platform_with(kind, attachment, **fabric_extra))
    found = dict(problems(job(gpusPerNode=4), prof))
    assert expect in found["gpusPerNode"] and "sriov or shared or rdma-only" in found["gpusPerNode"]


@pytest.mark.parametrize(("kind", "attachment"), ROWS, ids=IDS)
def test_partial_node_pods_per_row(kind, attachment):
    """A row with `whole_node` refuses a pod with part of a node's GPUs, saying why and which attachments of the
    kind would take it; every other row wires such a pod."""
    found = dict(problems(job(gpusPerNode=4), make_profile(platform_with(kind, attachment))))
    att = kinds.ATTACHMENTS[attachment] if attachment is not None else None
    if att is None or att.whole_node is None:
        assert "gpusPerNode" not in found
    else:
        others = [a for a in kinds.KINDS[kind].attachments if kinds.ATTACHMENTS[a].whole_node is None]
        assert att.whole_node in found["gpusPerNode"] and " or ".join(others) in found["gpusPerNode"]


def test_roce_gids_are_checked_on_the_addresses_nccl_uses():
    """A RoCE GID is an IPv4 address on the rail's netdev: the preflight finds the pod's own (net1..) in the HCA's
    GID table, or on the host network the node's rail netdevs'. InfiniBand verbs need no address on the rail."""

    def preflight(kind: str, attachment: str) -> dict[str, str]:
        r = resolve(job(), make_profile(platform_with(kind, attachment)))
        return {k: v for k, v in pod_preflight_env(r.profile, r.wiring, r.gpus, r.shm_gib).items() if k in ("PREFLIGHT_INTERFACES", "PREFLIGHT_ROCE_GIDS")}

    host = [f"ibp{i}s0" for i in range(len(DGX))]
    pod = [f"net{i + 1}" for i in range(len(DGX))]
    assert preflight("roce", "hostnetwork") == {"PREFLIGHT_INTERFACES": " ".join(host), "PREFLIGHT_ROCE_GIDS": " ".join(f"{i}:{h}" for i, h in zip(host, DGX, strict=True))}
    assert preflight("roce", "shared") == {"PREFLIGHT_INTERFACES": " ".join(pod), "PREFLIGHT_ROCE_GIDS": " ".join(f"{i}:{h}" for i, h in zip(pod, DGX, strict=True))}
    assert preflight("infiniband", "hostnetwork") == {"PREFLIGHT_INTERFACES": ""}
    assert preflight("infiniband", "shared") == {"PREFLIGHT_INTERFACES": " ".join(pod)}


def test_rdma_only_needs_no_subnet_on_infiniband_but_roce_hostnetwork_does():
    p = stack_platform("prod-ib")
    p["fabric"] = {"kind": "infiniband", "attachment": "rdma-only", "rails": [{"hca": h, "interface": f"ibp{i}s0", "speedGbps": 400} for i, h in enumerate(DGX)]}
    assert not make_profile(PlatformConfig.model_validate(p)).fabric.secondary_network
    p["fabric"] = {**p["fabric"], "kind": "roce", "attachment": "hostnetwork", "podInterface": "bond0"}
    with pytest.raises(ValueError, match=r"fabric.rails\[0\].subnet: required .* NCCL picks RoCE GIDs"):
        PlatformConfig.model_validate(p)


def test_every_kind_and_attachment_is_one_row():
    """Each Literal member has its row and each row its Literal member: a new kind is added in one place."""
    from typing import get_args

    assert set(kinds.KINDS) == set(get_args(kinds.FabricKind))
    assert set(kinds.ATTACHMENTS) == set(get_args(kinds.Attachment))
    assert all(row.name == name for name, row in [*kinds.KINDS.items(), *kinds.ATTACHMENTS.items()])
    assert {r.transport for r in kinds.KINDS.values()} <= set(kinds.TRANSPORTS)
    for row in kinds.KINDS.values():
        assert row.rails == bool(row.attachments)
        # Where GIDs are addresses a pod needs one on the rail: a network of its own or the host's.
        if row.gid_from_address:
            assert all(kinds.ATTACHMENTS[a].rail_address for a in row.attachments)


@pytest.mark.parametrize(("kind", "attachment"), ROWS, ids=IDS)
def test_every_row_renders_through_the_program(kind, attachment):
    """The whole program under the mocks (the stack outputs, the SUMMARY tables), not only the builders: a row
    whose rails have no network or no subnet must still render."""
    from tools import render

    p = stack_input(kind, attachment)
    p["components"] = {**p.get("components", {}), "networkOperator": kinds.KINDS[kind].rails}
    jobs = [{"name": f"job-{fw}", "framework": fw, "image": "nvcr.io/nvidia/pytorch:25.10-py3", "command": ["python", "train.py"], "nodes": 2} for fw in ("pytorch", "mpi", "tensorflow")]
    run = render.run_program("prod-ib", extra_config={"fastpath:platform": p, "fastpath:jobs": jobs})
    contracts = run.outputs["jobs"]
    assert sorted(contracts) == ["job-mpi", "job-pytorch", "job-tensorflow"]
    assert all(None not in c["networks"] for c in contracts.values())
    assert run.outputs["profile"]["transport"] == kinds.KINDS[kind].transport


def test_torchrun_reads_the_pod_address_host_network_pods_get():
    """The host-network pods' PET_LOCAL_ADDR (components/fabric/wiring.py TORCHRUN_POD_ADDRESS) is torchrun's --local-addr:
    pytorch/pytorch@v2.13.0:torch/distributed/run.py declares it with `action=env`, which reads PET_<NAME>; the
    agent then publishes that address instead of its FQDN (elastic/rendezvous/api.py RendezvousStoreInfo.build)."""
    import os
    from unittest import mock

    pytest.importorskip("torch")
    from torch.distributed.run import get_args_parser

    from components.fabric import wiring as fabric

    assert fabric.TORCHRUN_POD_ADDRESS["name"] == "PET_LOCAL_ADDR"
    with mock.patch.dict(os.environ, {"PET_LOCAL_ADDR": "10.1.2.3"}):
        args = get_args_parser().parse_args(["train.py"])
    assert args.local_addr == "10.1.2.3"


@pytest.mark.parametrize(("kind", "attachment"), [row for row, _ in RDMA], ids=[i for _, i in RDMA])
def test_the_preflight_looks_for_the_rdma_devices_a_pod_of_the_row_gets(kind, attachment):
    """A full-node pod's preflight expects at least one RDMA device on every RDMA row: one that expects 0 checks
    nothing, and a pod that lost its fabric would pass it. A row whose devices are not device-plugin resources (a
    cloud fabric the platform attaches itself) must count them in components/jobs/pod.py pod_preflight_env."""
    p = platform_with(kind, attachment)
    prof = make_profile(p)
    wiring = fabric.pod_wiring(p.fabric, "training", p.gpu.per_node, p.gpu.per_node)
    env = pod_preflight_env(prof, wiring, p.gpu.per_node, 64)
    assert int(env["PREFLIGHT_RDMA_DEVICES"]) > 0, f"{kind}: the preflight expects 0 RDMA devices in a full-node pod: count the row's devices in components/jobs/pod.py pod_preflight_env"
