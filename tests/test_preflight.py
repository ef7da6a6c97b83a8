"""The preflight script against fake /sys, /dev and /proc trees: it passes a healthy pod and names each fault."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.posix_sh import DASH, needs_dash

pytestmark = needs_dash  # every test runs the script
SCRIPT = Path(__file__).resolve().parents[1] / "components" / "jobs" / "preflight.sh"
GOOD_ENV = {"PREFLIGHT_GPUS": "8", "PREFLIGHT_RDMA_DEVICES": "2", "PREFLIGHT_HCAS": "mlx5_0 mlx5_10", "PREFLIGHT_INTERFACES": "net1 net2", "PREFLIGHT_SHM_BYTES": str(64 * 2**30)}


def tree(root: Path, gpus=8, verbs=2, hcas=("mlx5_0", "mlx5_10"), ifaces=None, addresses=("net1", "net2"), memlock="unlimited", capeff=f"{0:016x}", shm="size=67108864k", gid_tables=None) -> dict:
    """A fake pod filesystem; returns the env that points the script at it."""
    (root / "dev" / "infiniband").mkdir(parents=True)
    for i in range(gpus):
        (root / "dev" / f"nvidia{i}").touch()
    (root / "dev" / "nvidiactl").touch()  # not a GPU
    for i in range(verbs):
        (root / "dev" / "infiniband" / f"uverbs{i}").touch()
    for h in hcas:
        (root / "sys" / "class" / "infiniband" / h).mkdir(parents=True)
    for name, state in (ifaces or {"net1": "up", "net2": "up"}).items():
        (root / "sys" / "class" / "net" / name).mkdir(parents=True)
        (root / "sys" / "class" / "net" / name / "operstate").write_text(state + "\n")
    (root / "proc" / "self").mkdir(parents=True)
    (root / "proc" / "self" / "limits").write_text(
        f"Limit                     Soft Limit           Hard Limit           Units\nMax locked memory         {memlock}            {memlock}            bytes\n"
    )
    (root / "proc" / "self" / "status").write_text(f"Name:\tsh\nCapEff:\t{capeff}\n")
    (root / "proc" / "mounts").write_text("overlay / overlay rw,relatime 0 0\n" + (f"tmpfs /dev/shm tmpfs rw,nosuid,nodev,relatime,{shm} 0 0\n" if shm else ""))
    # The kernel's view of addresses, as a pod without iproute2 reads it: a connected route per interface with
    # an address (/proc/net/route, little-endian hex) and the local /32s (/proc/net/fib_trie).
    subnet = {"net1": "10.100.0.0", "net2": "10.100.16.0"}
    addr = {"net1": "10.100.0.5", "net2": "10.100.16.5"}
    le = {n: "".join(f"{int(o):02X}" for o in reversed(ip.split("."))) for n, ip in subnet.items()}
    route = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
    route += "eth0\t00000000\t0101A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
    route += "".join(f"{a}\t{le[a]}\t00000000\t0001\t0\t0\t0\t00F0FFFF\t0\t0\t0\n" for a in addresses)
    (root / "proc" / "net").mkdir(parents=True)
    (root / "proc" / "net" / "route").write_text(route)
    trie = "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 0.0.0.0\n        /0 universe UNICAST\n"
    trie += "     |-- 192.168.1.7\n        /32 host LOCAL\n"
    trie += "".join(f"     |-- {addr[a]}\n        /32 host LOCAL\n" for a in addresses)
    (root / "proc" / "net" / "fib_trie").write_text(trie)
    for hca, gids in (gid_tables or {}).items():
        folder = root / "sys" / "class" / "infiniband" / hca / "ports" / "1" / "gids"
        folder.mkdir(parents=True, exist_ok=True)
        for i, g in enumerate(gids):
            (folder / str(i)).write_text(g + "\n")
    return {"PREFLIGHT_SYS": str(root / "sys"), "PREFLIGHT_DEV": str(root / "dev"), "PREFLIGHT_PROC": str(root / "proc"), "PATH": os.environ["PATH"]}


def run(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([DASH, str(SCRIPT)], env={**GOOD_ENV, **env}, capture_output=True, text=True, timeout=30)


def test_healthy_pod_passes(tmp_path):
    res = run(tree(tmp_path))
    assert res.returncode == 0, res.stdout
    assert "preflight ok: 8 GPUs" in res.stdout and "preflight: all checks passed" in res.stdout


# (id, tree changes, the failure line it must print)
FAULTS = [
    ("fewer-gpus", {"gpus": 4}, "4 GPUs visible, 8 expected"),
    ("no-rdma-devices", {"verbs": 0}, "0 RDMA devices"),
    ("hca-missing", {"hcas": ("mlx5_0",)}, "HCA mlx5_10 not present"),
    ("iface-missing", {"ifaces": {"net1": "up"}}, "interface net2 missing"),
    ("iface-down", {"ifaces": {"net1": "up", "net2": "down"}}, "interface net2 is down"),
    ("no-address", {"addresses": ("net1",)}, "interface net2 has no IPv4 address"),
    ("memlock-limited-no-ipc-lock", {"memlock": "8388608", "capeff": f"{(1 << 41) - 1 & ~(1 << 14):016x}"}, "RDMA cannot register memory"),  # every capability but CAP_IPC_LOCK
    ("shm-small", {"shm": "size=65536k"}, "/dev/shm is 67108864 bytes"),
    ("shm-not-mounted", {"shm": None}, "/dev/shm is not a sized tmpfs"),
]


@pytest.mark.parametrize(("changes", "line"), [f[1:] for f in FAULTS], ids=[f[0] for f in FAULTS])
def test_each_fault_fails_with_its_fix(tmp_path, changes, line):
    res = run(tree(tmp_path, **changes))
    assert res.returncode == 1, res.stdout
    fails = [x for x in res.stdout.splitlines() if x.startswith("preflight FAIL")]
    assert len(fails) == 1 and line in fails[0], res.stdout


def test_memlock_limited_but_ipc_lock_granted_passes(tmp_path):
    # CapEff with bit 14 (CAP_IPC_LOCK) set: locking works whatever the rlimit says.
    res = run(tree(tmp_path, memlock="8388608", capeff=f"{1 << 14:016x}"))
    assert res.returncode == 0, res.stdout


def test_sriov_checks_counts_not_names(tmp_path):
    res = run({**tree(tmp_path, hcas=()), "PREFLIGHT_HCAS": ""})
    assert res.returncode == 0, res.stdout


def gid(ip: str) -> str:
    a, b, c, d = (int(x) for x in ip.split("."))
    return f"0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}"


LINK_LOCAL = "fe80:0000:0000:0000:0000:0000:0000:0001"


@pytest.mark.parametrize(
    ("tables", "passes"),
    [
        ({"mlx5_0": [LINK_LOCAL, gid("10.100.0.5")], "mlx5_10": [gid("192.168.1.7"), gid("10.100.16.5")]}, True),
        # the port carries only other addresses (the host's, another pod's): NCCL cannot use the pod's own GID
        ({"mlx5_0": [LINK_LOCAL, gid("10.100.0.5")], "mlx5_10": [LINK_LOCAL, gid("10.100.16.9")]}, False),
    ],
    ids=["own-gid-present", "own-gid-missing"],
)
def test_roce_own_gid_on_each_rail(tmp_path, tables, passes):
    env = {**tree(tmp_path, gid_tables=tables), "PREFLIGHT_ROCE_GIDS": "net1:mlx5_0 net2:mlx5_10"}
    res = run(env)
    assert (res.returncode == 0) == passes, res.stdout
    if not passes:
        assert "mlx5_10 has no GID for net2's 10.100.16.5" in res.stdout


def test_addresses_read_without_iproute2(tmp_path):
    """The script needs sh and awk only: with `ip` nowhere on PATH the healthy pod still passes and names the
    addresses it read from /proc."""
    env = tree(tmp_path)
    bin_dir = tmp_path / "onlyawk"
    bin_dir.mkdir()
    for tool in ("sh", "awk", "cat", "grep", "sort", "tr", "tail"):  # coreutils, not iproute2
        (bin_dir / tool).symlink_to(DASH if tool == "sh" else shutil.which(tool))
    res = subprocess.run([DASH, str(SCRIPT)], env={**GOOD_ENV, **env, "PATH": str(bin_dir)}, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "interface net1 up with 10.100.0.5" in res.stdout


def test_missing_awk_is_told_apart_from_a_bad_node(tmp_path):
    env = tree(tmp_path)
    bin_dir = tmp_path / "noawk"
    bin_dir.mkdir()
    (bin_dir / "sh").symlink_to(DASH)
    res = subprocess.run([DASH, str(SCRIPT)], env={**GOOD_ENV, **env, "PATH": str(bin_dir)}, capture_output=True, text=True, timeout=30)
    assert res.returncode == 1
    assert "awk is not in this image" in res.stdout and "says nothing about the node" in res.stdout


def ports(root: Path, layers: dict[str, tuple[str, str]]) -> None:
    """Port 1 of each HCA as the kernel shows it: /sys/class/infiniband/<hca>/ports/1/{link_layer,state}."""
    for hca, (layer, state) in layers.items():
        port = root / "sys" / "class" / "infiniband" / hca / "ports" / "1"
        port.mkdir(parents=True, exist_ok=True)
        (port / "link_layer").write_text(layer + "\n")
        (port / "state").write_text(state + "\n")


# NCCL skips a port that is not ACTIVE (and with every port skipped falls back to sockets); a RoCE NIC on an
# InfiniBand cluster (or the reverse: a firmware LINK_TYPE never set) runs the wrong verbs. The files' shapes are the
# kernel's: torvalds/linux:drivers/infiniband/core/sysfs.c state_show (sysfs_emit "%d: %s\n", IB_PORT_ACTIVE is
# "ACTIVE") and link_layer_show ("InfiniBand", "Ethernet", else "Unknown"), unchanged across the 5.x and 6.x trees
# (read through code search: the repository is too big to fetch).
@pytest.mark.parametrize(
    ("layers", "line"),
    [
        ({"mlx5_0": ("InfiniBand", "4: ACTIVE"), "mlx5_10": ("InfiniBand", "4: ACTIVE")}, None),
        ({"mlx5_0": ("InfiniBand", "4: ACTIVE"), "mlx5_10": ("InfiniBand", "2: INIT")}, "HCA mlx5_10 port 1 is INIT, not ACTIVE"),
        ({"mlx5_0": ("InfiniBand", "4: ACTIVE"), "mlx5_10": ("Ethernet", "4: ACTIVE")}, "HCA mlx5_10 port 1 is Ethernet, InfiniBand expected"),
    ],
    ids=["active-ib", "port-init", "wrong-link-layer"],
)
def test_hca_port_state_and_link_layer(tmp_path, layers, line):
    env = tree(tmp_path)
    ports(tmp_path, layers)
    res = run({**env, "PREFLIGHT_LINK_LAYER": "InfiniBand"})
    fails = [x for x in res.stdout.splitlines() if x.startswith("preflight FAIL")]
    if line is None:
        assert res.returncode == 0 and "HCA mlx5_10 port 1 InfiniBand ACTIVE" in res.stdout, res.stdout
    else:
        assert res.returncode == 1 and len(fails) == 1 and line in fails[0], res.stdout


# rdma-only and hostnetwork pods have no rail interfaces; on the host network the bootstrap interface is the
# node's own, named by fabric.podInterface, and a wrong name is NCCL failing at bootstrap.
@pytest.mark.parametrize(
    ("bootstrap", "states", "line"),
    [
        ("net1", None, None),
        ("bond0", None, "node interface bond0 missing"),
        ("net2", None, "node interface net2 has no IPv4 address"),
        # a bond that lost its links keeps its address: the state says it cannot carry bootstrap
        ("net1", {"net1": "down", "net2": "up"}, "node interface net1 is down"),
    ],
    ids=["present", "missing", "no-address", "down"],
)
def test_host_network_bootstrap_interface(tmp_path, bootstrap, states, line):
    env = tree(tmp_path, addresses=("net1",), ifaces=states)
    res = run({**env, "PREFLIGHT_INTERFACES": "", "PREFLIGHT_BOOTSTRAP": bootstrap})
    fails = [x for x in res.stdout.splitlines() if x.startswith("preflight FAIL")]
    if line is None:
        assert res.returncode == 0 and "bootstrap interface net1 with 10.100.0.5" in res.stdout, res.stdout
    else:
        assert res.returncode == 1 and len(fails) == 1 and line in fails[0], res.stdout


def test_exclusive_rdma_netns_mode_is_named(tmp_path):
    """A node left in exclusive RDMA namespace mode (ib_core netns_mode=0, as SR-IOV setups leave it) shows a pod
    its verbs devices but no HCA in /sys/class/infiniband: the preflight names the node setting, not the HCAs."""
    env = tree(tmp_path, hcas=())
    res = run(env)
    fails = [x for x in res.stdout.splitlines() if x.startswith("preflight FAIL")]
    assert res.returncode == 1 and "exclusive network-namespace mode" in fails[0], res.stdout
    assert len(fails) == 1, res.stdout  # not buried under one "HCA not present" per rail


OPEN = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (dvs-builder@U22-I3-AF03-09-1)  Thu Sep 18 2025"
PROPRIETARY = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Thu Sep 18 2025"


def gpudirect_node(root: Path, driver: str | None, kernel: str | None, modules: tuple[str, ...] = ()) -> dict:
    env = tree(root)
    if driver is not None:
        (root / "proc" / "driver" / "nvidia").mkdir(parents=True)
        (root / "proc" / "driver" / "nvidia" / "version").write_text(driver + "\nGCC version:  gcc version 12.3.0\n")
    if kernel is not None:
        (root / "proc" / "sys" / "kernel").mkdir(parents=True)
        (root / "proc" / "sys" / "kernel" / "osrelease").write_text(kernel + "\n")
    for m in modules:  # the sysfs files NCCL tests for a peer-memory module
        (root / "sys" / m).mkdir(parents=True)
        (root / "sys" / m / "version").write_text("580.95.05\n")
    return env


# (id, gpu.gpuDirect, driver, kernel, peer-memory modules, None when it passes or the failure line)
GPUDIRECT = [
    ("dmabuf-open-6.8", "dmabuf", OPEN, "6.8.0-1015-nvidia", (), None),
    ("dmabuf-open-5.12", "dmabuf", OPEN, "5.12.0", (), None),
    ("dmabuf-proprietary", "dmabuf", PROPRIETARY, "6.8.0-1015-nvidia", (), "proprietary GPU kernel module"),
    ("dmabuf-old-kernel", "dmabuf", OPEN, "5.4.0-216-generic", (), "kernel 5.4.0-216-generic has no DMA-BUF"),
    ("dmabuf-4.18", "dmabuf", OPEN, "4.18.0-553.el8_10.x86_64", (), "Linux 5.12 or later"),
    ("dmabuf-unreadable", "dmabuf", None, "6.8.0", (), "cannot read"),
    ("peermem-loaded", "peermem", PROPRIETARY, "5.15.0", ("module/nvidia_peermem",), None),
    ("peermem-legacy-nv_mem", "peermem", PROPRIETARY, "5.4.0", ("kernel/mm/memory_peers/nv_mem",), None),
    ("peermem-missing", "peermem", OPEN, "6.8.0", ("module/nvidia",), "no peer memory module on this node"),
]


@pytest.mark.parametrize(("mode", "driver", "kernel", "modules", "line"), [g[1:] for g in GPUDIRECT], ids=[g[0] for g in GPUDIRECT])
def test_gpudirect_mode_is_checked_on_the_node(tmp_path, mode, driver, kernel, modules, line):
    """Without GPUDirect RDMA NCCL still uses the NICs but stages every transfer in host memory (the project's
    sample logs: 264 against 372 GB/s): the pod must fail before training, naming what the node lacks."""
    res = run({**gpudirect_node(tmp_path, driver, kernel, modules), "PREFLIGHT_GPUDIRECT": mode})
    fails = [x for x in res.stdout.splitlines() if x.startswith("preflight FAIL")]
    if line is None:
        assert res.returncode == 0 and not fails, res.stdout
        assert "preflight ok: GPUDirect RDMA" in res.stdout
    else:
        assert res.returncode == 1 and len(fails) == 1 and line in fails[0], res.stdout


# The stacks' gpu.gpuDirect (prod-v2 leaves the default, dmabuf).
MODES = [("prod-ib", "dmabuf"), ("prod-roce", "dmabuf"), ("prod-v2", "dmabuf")]


@pytest.mark.parametrize(("stack", "mode"), MODES)
def test_the_rendered_preflight_checks_the_stacks_gpudirect_mode(rendered, tmp_path, stack, mode):
    """The mode rides in the preflight ConfigMap (platform.env beside the script), not in the pods: the script as
    the pod mounts it fails on a node with the other mode only, and passes on a node with its own."""
    maps = [o for o in rendered(stack).objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "fastpath-preflight"]
    assert maps, stack
    folder = tmp_path / "fastpath"
    folder.mkdir()
    for key, text in maps[0]["data"].items():
        (folder / key).write_text(text)
    assert (folder / "platform.env").read_text() == f"PREFLIGHT_GPUDIRECT={mode}\n"
    nodes = {
        "dmabuf": (OPEN, "6.8.0-1015-nvidia", ()),
        "peermem": (PROPRIETARY, "5.15.0-1068-nvidia", ("module/nvidia_peermem",)),
    }
    for node_mode, (driver, kernel, modules) in nodes.items():
        env = gpudirect_node(tmp_path / node_mode, driver, kernel, modules)
        res = subprocess.run([DASH, str(folder / "preflight.sh")], env={**GOOD_ENV, **env}, capture_output=True, text=True, timeout=30)
        assert (res.returncode == 0) == (node_mode == mode), (node_mode, res.stdout)
        if node_mode != mode:
            assert "preflight FAIL: GPUDirect RDMA" in res.stdout


def test_gpudirect_is_not_checked_in_a_pod_without_rdma_devices(tmp_path):
    res = run({**gpudirect_node(tmp_path, PROPRIETARY, "5.4.0", ()), "PREFLIGHT_GPUDIRECT": "dmabuf", "PREFLIGHT_RDMA_DEVICES": "0"})
    assert res.returncode == 0 and "GPUDirect" not in res.stdout, res.stdout
