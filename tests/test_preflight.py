"""The preflight script against fake /sys, /dev and /proc trees: it passes a healthy pod and names each fault."""

import os
import stat
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "components" / "preflight.sh"
GOOD_ENV = {"PREFLIGHT_GPUS": "8", "PREFLIGHT_RDMA_DEVICES": "2", "PREFLIGHT_HCAS": "mlx5_0 mlx5_10",
            "PREFLIGHT_INTERFACES": "net1 net2", "PREFLIGHT_SHM_BYTES": str(64 * 2**30)}


def tree(root: Path, gpus=8, verbs=2, hcas=("mlx5_0", "mlx5_10"), ifaces=None, addresses=("net1", "net2"),
         memlock="unlimited", capeff=f"{0:016x}", shm="size=67108864k") -> dict:
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
        "Limit                     Soft Limit           Hard Limit           Units\n"
        f"Max locked memory         {memlock}            {memlock}            bytes\n")
    (root / "proc" / "self" / "status").write_text(f"Name:\tsh\nCapEff:\t{capeff}\n")
    (root / "proc" / "mounts").write_text(
        "overlay / overlay rw,relatime 0 0\n"
        + (f"tmpfs /dev/shm tmpfs rw,nosuid,nodev,relatime,{shm} 0 0\n" if shm else ""))
    # A fake `ip` that knows which interfaces have addresses.
    bin_dir = root / "bin"
    bin_dir.mkdir()
    ip = bin_dir / "ip"
    cases = "".join(f'  {a}) echo "5: {a}    inet 10.100.0.5/20 brd 10.100.15.255 scope global {a}";;\n'
                    for a in addresses)
    ip.write_text(f'#!/bin/sh\ncase "$6" in\n{cases}  *) ;;\nesac\n')
    ip.chmod(ip.stat().st_mode | stat.S_IEXEC)
    return {"PREFLIGHT_SYS": str(root / "sys"), "PREFLIGHT_DEV": str(root / "dev"),
            "PREFLIGHT_PROC": str(root / "proc"), "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def run(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", str(SCRIPT)], env={**GOOD_ENV, **env}, capture_output=True, text=True, timeout=30)


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
    ("memlock-limited-no-ipc-lock", {"memlock": "8388608", "capeff": f"{(1 << 41) - 1 & ~(1 << 14):016x}"},
     "RDMA cannot register memory"),  # every capability but CAP_IPC_LOCK
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
