"""The fabric-kind table (components/fabric/kinds.py), proved by every attachment end to end: what the Network Operator
deploys for it, which networks exist, what a pod gets, what the preflight checks, what the policy pack says."""

from __future__ import annotations

import json

import pytest

from components.fabric import kinds
from components.fabric import wiring as fabric
from components.jobs import training_job
from components.model.config import JobSpec, PlatformConfig
from components.model.profile import profile as make_profile
from components.platform import network_operator, networks
from tests.conftest import stack_platform
from tools import lint, schemas

DGX = ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]


def platform_with(kind: str, attachment: str, **fabric_extra) -> PlatformConfig:
    p = stack_platform("prod-ib")
    rails = [{"hca": h, "interface": f"ibp{i}s0", "subnet": f"10.{100 + i}.0.0/20", "speedGbps": 400} for i, h in enumerate(DGX)]
    p["fabric"] = {"kind": kind, "attachment": attachment, "rails": rails, **fabric_extra}
    if attachment == "hostnetwork":
        p["fabric"].setdefault("podInterface", "bond0")
    return PlatformConfig.model_validate(p)


ROWS = [(k, a) for k, row in kinds.KINDS.items() for a in row.attachments]


def job(fw: str = "pytorch", **extra) -> JobSpec:
    return JobSpec.model_validate({"name": "run", "image": "nvcr.io/nvidia/pytorch:25.10-py3", "command": ["python", "train.py"], "framework": fw, "nodes": 4, **extra})


@pytest.mark.parametrize(("kind", "attachment"), ROWS, ids=[f"{k}-{a}" for k, a in ROWS])
def test_network_operator_deploys_what_the_attachment_needs(kind, attachment):
    """The device plugin of the row, and Multus, CNI plugins and NV-IPAM (with pools and attachments) only where
    pods get a network per rail (both optional in the NicClusterPolicy: Mellanox/network-operator@v26.4.1
    api/v1alpha1/nicclusterpolicy_types.go)."""
    p = platform_with(kind, attachment)
    row = kinds.ATTACHMENTS[attachment]
    spec = network_operator.nic_cluster_policy(p)["spec"]
    plugin = {"rdma-shared": "rdmaSharedDevicePlugin", "hostdevice": "sriovDevicePlugin", "sriov": None}
    for name in ("rdmaSharedDevicePlugin", "sriovDevicePlugin"):
        assert (name in spec) == (plugin[row.device_plugin] == name)
    assert ("secondaryNetwork" in spec) == ("nvIpam" in spec) == row.secondary_network
    assert bool(network_operator.ip_pools(p)) == row.secondary_network
    if attachment in ("shared", "hostdevice"):
        assert len(networks.attachments(p)) == len(DGX) * len(p.training_namespaces)
    if row.device_plugin == "rdma-shared":
        config = json.loads(spec["rdmaSharedDevicePlugin"]["config"])["configList"]
        assert [c["selectors"]["ifNames"] for c in config] == [[f"ibp{i}s0"] for i in range(len(DGX))]


@pytest.mark.parametrize(("kind", "attachment"), ROWS, ids=[f"{k}-{a}" for k, a in ROWS])
def test_pod_wiring_per_attachment(kind, attachment):
    p = platform_with(kind, attachment)
    row = kinds.ATTACHMENTS[attachment]
    r = training_job.resolve(job(), make_profile(p))
    m = training_job.manifest(r)
    assert schemas.validate(m) == []
    pod = m["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    annotations = pod["metadata"].get("annotations", {})
    assert (fabric.NETWORKS_ANNOTATION in annotations) == row.secondary_network
    # Every rail's device, whatever the attachment: that is what /dev/infiniband holds for NCCL.
    assert {k for k in container["resources"]["limits"] if "/" in k and k != "nvidia.com/gpu"} == {f"{row.resource_prefix}/{row.resource_stem}_rail{i}" for i in range(len(DGX))}
    assert container["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    assert env["NCCL_NET"] == "IB"
    # Host HCA names are listed exactly where the pod sees them; VFs get names of their own.
    assert env["NCCL_IB_HCA"] == ("mlx5" if not row.host_hca_names else "=" + ",".join(DGX))
    assert (pod["spec"].get("hostNetwork") is True) == row.host_network
    if row.host_network:
        assert pod["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"
        assert env["NCCL_SOCKET_IFNAME"] == "=bond0" and env["GLOO_SOCKET_IFNAME"] == "bond0"
        assert env["PET_LOCAL_ADDR"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        assert env["PREFLIGHT_BOOTSTRAP"] == "bond0"
    else:
        assert "dnsPolicy" not in pod["spec"] and "PET_LOCAL_ADDR" not in env
        assert env["NCCL_SOCKET_IFNAME"] == "=eth0"
    rail_ifaces = ""
    if row.secondary_network:
        rail_ifaces = " ".join(f"net{i + 1}" for i in range(len(DGX)))
    elif row.host_network and kind == "roce":  # the node's rail netdevs carry the addresses behind the GIDs
        rail_ifaces = " ".join(f"ibp{i}s0" for i in range(len(DGX)))
    assert env["PREFLIGHT_INTERFACES"] == rail_ifaces
    if kind == "roce" and row.host_hca_names:
        assert env["PREFLIGHT_ROCE_GIDS"] == " ".join(f"{i}:{h}" for i, h in zip(rail_ifaces.split(), DGX, strict=True))
    # The contract (the stack output `jobs`, SUMMARY.md) names only networks that exist.
    assert training_job.contract(r)["networks"] == [rl.network for rl in r.wiring.rails if rl.network]
    assert None not in training_job.contract(r)["networks"]
    if row.host_hca_names:
        assert env["PREFLIGHT_LINK_LAYER"] == kinds.KINDS[kind].link_layer
    assert r.wiring.transport == kinds.KINDS[kind].transport


@pytest.mark.parametrize(("kind", "attachment"), ROWS, ids=[f"{k}-{a}" for k, a in ROWS])
@pytest.mark.parametrize("fw", ["pytorch", "mpi", "tensorflow"])
def test_every_attachment_lints_clean(kind, attachment, fw):
    """fastpath never renders a job its own policy pack refuses, on any row of the table."""
    r = training_job.resolve(job(fw), make_profile(platform_with(kind, attachment)))
    violations = lint.lint([training_job.manifest(r)])
    assert [v for v in violations if v.level == "mandatory"] == [], violations


def test_mpi_launcher_follows_its_workers_onto_the_host_network():
    """mpirun pins Open MPI's TCP traffic to fabric.podInterface (a node interface here): the launcher's daemon
    must have that interface too, so it is on the host network of a GPU node."""
    r = training_job.resolve(job("mpi"), make_profile(platform_with("infiniband", "hostnetwork")))
    spec = training_job.manifest(r)["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
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
    found = dict(training_job.problems(job(gpusPerNode=4), prof))
    assert expect in found["gpusPerNode"] and "sriov or shared or rdma-only" in found["gpusPerNode"]


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
    assert {r.transport for r in kinds.KINDS.values()} <= set(kinds.TRANSPORTS)
    for row in kinds.KINDS.values():
        assert row.rails == bool(row.attachments)


@pytest.mark.parametrize(("kind", "attachment"), ROWS, ids=[f"{k}-{a}" for k, a in ROWS])
def test_every_row_renders_through_the_program(kind, attachment):
    """The whole program under the mocks (the stack outputs, the SUMMARY tables), not only the builders: a row
    whose rails have no network or no subnet must still render."""
    from tools import render

    p = stack_platform("prod-ib")
    p["fabric"] = platform_with(kind, attachment).fabric.to_config()
    p["components"] = {**p.get("components", {}), "networkOperator": True}
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
