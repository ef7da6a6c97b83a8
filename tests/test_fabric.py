"""The exact wiring a training pod gets on every fabric kind and attachment."""

import json

import pytest

from components.fabric import kinds, nccl
from components.fabric import wiring as fabric
from components.model.config import FabricConfig
from tools import upstream

DGX_HCAS = ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]


def rails(n, hcas=DGX_HCAS, speed=400):
    return [{"hca": hcas[i], "interface": f"ibp{i}", "subnet": f"10.{i}.0.0/16", "speedGbps": speed} for i in range(n)]


DEFAULT_BOOT = {"NCCL_SOCKET_IFNAME": "=eth0", "GLOO_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "WARN"}

# (id, fabric config, GPUs in the pod, GPUs per node, exact env, exact resources, capabilities, networks)
CASES = [
    ("tcp", {"kind": "tcp"}, 4, 4, {"NCCL_IB_DISABLE": "1", **DEFAULT_BOOT}, {}, (), []),
    (
        "ib-shared-dgx",
        {"kind": "infiniband", "attachment": "shared", "rails": rails(8)},
        8,
        8,
        {"NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11", "NCCL_NET": "IB", **DEFAULT_BOOT},
        {f"rdma/shared_rail{i}": 1 for i in range(8)},
        ("IPC_LOCK",),
        [f"rail{i}-shared" for i in range(8)],
    ),
    (
        "ib-sriov-vf-names",
        {"kind": "infiniband", "attachment": "sriov", "rails": rails(8)},
        8,
        8,
        {"NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "mlx5", "NCCL_NET": "IB", **DEFAULT_BOOT},
        {f"nvidia.com/sriov_rail{i}": 1 for i in range(8)},
        ("IPC_LOCK",),
        [f"rail{i}-sriov" for i in range(8)],
    ),
    # A half-node pod is on every rail (a VF each): NCCL pairs whichever GPUs it got with their local NICs.
    (
        "ib-sriov-half-node",
        {"kind": "infiniband", "attachment": "sriov", "rails": rails(8)},
        4,
        8,
        {"NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "mlx5", "NCCL_NET": "IB", **DEFAULT_BOOT},
        {f"nvidia.com/sriov_rail{i}": 1 for i in range(8)},
        ("IPC_LOCK",),
        [f"rail{i}-sriov" for i in range(8)],
    ),
    (
        "roce-shared-2rails-gid",
        {"kind": "roce", "attachment": "shared", "gidIndex": 3, "rails": rails(2, ["mlx5_0", "mlx5_1"], 200)},
        4,
        4,
        {"NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "=mlx5_0,mlx5_1", "NCCL_IB_GID_INDEX": "3", "NCCL_NET": "IB", **DEFAULT_BOOT},
        {"rdma/shared_rail0": 1, "rdma/shared_rail1": 1},
        ("IPC_LOCK",),
        ["rail0-shared", "rail1-shared"],
    ),
    # No GID index: NCCL picks the GID itself, within the rails' supernet (10.0.0.0/16 + 10.1.0.0/16).
    (
        "roce-shared-2rails-auto-gid",
        {"kind": "roce", "attachment": "shared", "rails": rails(2, ["mlx5_0", "mlx5_1"], 200)},
        2,
        4,
        {"NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "=mlx5_0,mlx5_1", "NCCL_IB_ADDR_RANGE": "10.0.0.0/15", "NCCL_NET": "IB", **DEFAULT_BOOT},
        {"rdma/shared_rail0": 1, "rdma/shared_rail1": 1},
        ("IPC_LOCK",),
        ["rail0-shared", "rail1-shared"],
    ),
    (
        "roce-hostdevice-full-node",
        {"kind": "roce", "attachment": "hostdevice", "rails": rails(2, ["mlx5_0", "mlx5_1"], 200)},
        4,
        4,
        {"NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "=mlx5_0,mlx5_1", "NCCL_IB_ADDR_RANGE": "10.0.0.0/15", "NCCL_NET": "IB", **DEFAULT_BOOT},
        {"nvidia.com/hostdev_rail0": 1, "nvidia.com/hostdev_rail1": 1},
        ("IPC_LOCK",),
        ["rail0-hostdevice", "rail1-hostdevice"],
    ),
    (
        # The node's network: NCCL bootstraps on the node's interface, the rails' HCAs by their host names.
        "ib-hostnetwork",
        {"kind": "infiniband", "attachment": "hostnetwork", "podInterface": "bond0", "rails": rails(2)},
        8,
        8,
        {"NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "=mlx5_0,mlx5_3", "NCCL_NET": "IB", "NCCL_SOCKET_IFNAME": "=bond0", "GLOO_SOCKET_IFNAME": "bond0", "NCCL_DEBUG": "WARN"},
        {"rdma/shared_rail0": 1, "rdma/shared_rail1": 1},
        ("IPC_LOCK",),
        [],
    ),
    (
        "ib-rdma-only",
        {"kind": "infiniband", "attachment": "rdma-only", "rails": rails(2)},
        8,
        8,
        {"NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "=mlx5_0,mlx5_3", "NCCL_NET": "IB", **DEFAULT_BOOT},
        {"rdma/shared_rail0": 1, "rdma/shared_rail1": 1},
        ("IPC_LOCK",),
        [],
    ),
    # DRA: no counted resource (the claim holds GPUs and rails). A whole node knows its HCAs (every rail); half a
    # node learns them at start (components/jobs/dra_hca.sh), so NCCL_IB_HCA is left out of its env.
    (
        "ib-dra-whole-node",
        {"kind": "infiniband", "attachment": "dra", "rails": rails(2)},
        2,
        2,
        {"NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "=mlx5_0,mlx5_3", "NCCL_NET": "IB", **DEFAULT_BOOT},
        {},
        ("IPC_LOCK",),
        [],
    ),
    (
        "ib-dra-half-node",
        {"kind": "infiniband", "attachment": "dra", "rails": rails(2)},
        1,
        2,
        {"NCCL_IB_DISABLE": "0", "NCCL_NET": "IB", **DEFAULT_BOOT},
        {},
        ("IPC_LOCK",),
        [],
    ),
    (
        "efa-p5",
        {"kind": "efa", "efaDevicesPerNode": 32},
        8,
        8,
        {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "NCCL_NET": "Libfabric", **DEFAULT_BOOT},
        {"vpc.amazonaws.com/efa": 32},
        ("IPC_LOCK",),
        [],
    ),
    (
        "ib-plugin-net",
        {"kind": "infiniband", "attachment": "sriov", "rails": rails(1), "ncclNet": "IBext_v11"},
        8,
        8,
        {"NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "mlx5", "NCCL_NET": "IBext_v11", **DEFAULT_BOOT},
        {"nvidia.com/sriov_rail0": 1},
        ("IPC_LOCK",),
        ["rail0-sriov"],
    ),
    (
        "roce-overrides-win",
        {"kind": "roce", "attachment": "shared", "rails": rails(1, ["mlx5_2"]), "ncclOverrides": {"NCCL_IB_TC": 106, "NCCL_DEBUG": "INFO"}},
        8,
        8,
        {
            "NCCL_IB_DISABLE": "0",
            "NCCL_IB_HCA": "=mlx5_2",
            "NCCL_IB_ADDR_RANGE": "10.0.0.0/16",
            "NCCL_NET": "IB",
            "NCCL_SOCKET_IFNAME": "=eth0",
            "GLOO_SOCKET_IFNAME": "eth0",
            "NCCL_DEBUG": "INFO",
            "NCCL_IB_TC": "106",
        },
        {"rdma/shared_rail0": 1},
        ("IPC_LOCK",),
        ["rail0-shared"],
    ),
]


def test_hostdevice_refuses_partial_node_pods():
    f = FabricConfig.model_validate({"kind": "roce", "attachment": "hostdevice", "rails": rails(2)})
    assert "whole" in fabric.partial_node_problem(f, 1, 4)
    assert fabric.partial_node_problem(f, 4, 4) is None
    shared = FabricConfig.model_validate({"kind": "roce", "attachment": "shared", "rails": rails(2)})
    assert fabric.partial_node_problem(shared, 1, 4) is None


def test_tcp_refuses_an_nccl_net():
    with pytest.raises(ValueError, match="fabric.ncclNet is for RDMA fabrics"):
        FabricConfig.model_validate({"kind": "tcp", "ncclNet": "IB"})


# NCCL_NET (NVIDIA/nccl@v2.30.7-1:src/init.cc, ncclGetEnv; documented "since 2.10" in the catalogue vendored at
# components/fabric/data/nccl_env.json): with it set, NCCL fails at init when that network module cannot run instead
# of falling back to sockets. NCCL_IB_ADDR_RANGE (src/transport/net_ib/connect.cc, since 2.21) takes one CIDR.
@pytest.mark.parametrize(("fab", "gpus", "per_node", "env", "resources", "caps", "networks"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_pod_wiring(fab, gpus, per_node, env, resources, caps, networks):
    w = fabric.pod_wiring(FabricConfig.model_validate(fab), "training", gpus, per_node)
    assert w.env == env
    assert list(w.env) == list(env), "env order is part of the rendered diff"
    assert w.resources == resources
    assert w.capabilities == caps
    if networks:
        annotation = json.loads(w.annotations[fabric.NETWORKS_ANNOTATION])
        assert annotation == [{"name": n, "namespace": "training", "interface": f"net{i + 1}"} for i, n in enumerate(networks)]
        assert w.interfaces == tuple(f"net{i + 1}" for i in range(len(networks)))
    else:
        assert w.annotations == {}
    # Every NCCL_* name fastpath emits is one NCCL reads.
    for name in w.env:
        if name.startswith("NCCL_"):
            assert nccl.classify(name).status == "known", name


def test_debug_turns_on_init_and_net_logging():
    w = fabric.pod_wiring(FabricConfig(kind="tcp"), "training", 1, 1, debug=True)
    assert w.env["NCCL_DEBUG"] == "INFO"
    assert w.env["NCCL_DEBUG_SUBSYS"] == "INIT,NET"


TRANSPORT_CASES = [
    ({"kind": "tcp"}, "socket"),
    ({"kind": "infiniband", "attachment": "sriov", "rails": rails(2)}, "ib"),
    ({"kind": "roce", "attachment": "shared", "rails": rails(2)}, "roce"),
    ({"kind": "efa", "efaDevicesPerNode": 4}, "efa"),
]


def test_the_cases_cover_every_kind_and_attachment():
    """CASES and TRANSPORT_CASES are written out by hand, so they pin values the kinds table does not: a new kind or
    attachment fails here until it has a case of its own."""
    assert {c[1]["kind"] for c in CASES} == set(kinds.KINDS)
    assert {c[1]["attachment"] for c in CASES if "attachment" in c[1]} == set(kinds.ATTACHMENTS)
    assert {fab["kind"] for fab, _ in TRANSPORT_CASES} == set(kinds.KINDS)
    assert {t for _, t in TRANSPORT_CASES} == set(kinds.TRANSPORTS)


@pytest.mark.parametrize(("fab", "transport"), TRANSPORT_CASES)
def test_expected_transport(fab, transport):
    assert fabric.pod_wiring(FabricConfig.model_validate(fab), "t", 8, 8).transport == transport


def test_busbw_at_0_9_of_8x400g_ndr_is_360():
    f = FabricConfig.model_validate({"kind": "infiniband", "attachment": "sriov", "rails": rails(8)})
    assert fabric.expected_busbw_gbps(f) == 360.0


@pytest.mark.parametrize(
    ("value", "needs"),
    [
        ("mlx5_1,mlx5_10", True),
        ("=mlx5_1,mlx5_10", False),
        ("^=mlx5_1,mlx5_10", False),
        ("mlx5_0,mlx5_3", False),
        ("mlx5_1:1,mlx5_11:1", True),
    ],
)
def test_needs_exact(value, needs):
    assert nccl.needs_exact(value) is needs


def test_vendored_nccl_catalogue_matches_upstream():
    """The catalogue fastpath reads is the one upstream.lock.yaml pins by sha256 (path() checks it); `make upstream`
    holds a mirror's copy to the same sha256."""
    assert upstream.path("nccl_env.json") == nccl.DATA_FILE.resolve()


@pytest.mark.parametrize(
    ("name", "value", "refused"),
    [
        ("NCCL_INSPECTOR_ENABLE", "true", True),
        ("NCCL_INSPECTOR_PROM_DUMP", "yes", True),
        ("NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS", "30000000", False),
        ("NCCL_INSPECTOR_DUMP_DIR", "/nccl-inspector/metrics", False),
    ],
)
def test_the_inspectors_variables_are_integers_but_its_directory(name, value, refused):
    """NVIDIA/nccl@v2.30.7-1:plugins/profiler/inspector/inspector.cc reads them with atoi or strtoll: `true` is 0,
    an Inspector silently off."""
    assert (nccl.value_problem(name, value) is not None) is refused
