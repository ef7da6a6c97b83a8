"""tools/readiness.py: why the NicClusterPolicy is not ready, read from the objects kubectl prints. The rule it
restates is Mellanox/network-operator@v26.4.1:pkg/state/state_skel.go isDaemonSetReady (a DaemonSet is ready when
`desiredNumberScheduled != 0 && == numberAvailable && updatedNumberScheduled == numberAvailable`), and the policy is
ready when every state is (pkg/state/manager.go SyncState)."""

from __future__ import annotations

import json

import pytest

from tools import readiness

NS = "nvidia-network-operator"


def policy(state: str, applied: list[dict] | None = None) -> dict:
    return {"kind": "NicClusterPolicy", "metadata": {"name": "nic-cluster-policy"}, "status": {"state": state, "appliedStates": applied or []}}


def ds(name: str, desired: int, available: int, updated: int | None = None, strategy: str = "RollingUpdate") -> dict:
    return {
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"updateStrategy": {"type": strategy}},
        "status": {"desiredNumberScheduled": desired, "numberAvailable": available, "updatedNumberScheduled": available if updated is None else updated},
    }


def pod(name: str, owner: str, node: str | None, status: dict) -> dict:
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "ownerReferences": [{"kind": "DaemonSet", "name": owner}]},
        "spec": {"nodeName": node} if node else {},
        "status": status,
    }


def node(name: str, ready: bool) -> dict:
    return {"kind": "Node", "metadata": {"name": name}, "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False", "reason": "KubeletNotReady"}]}}


PULL = {"phase": "Pending", "containerStatuses": [{"name": "kube-multus", "ready": False, "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}}]}
CRASH = {"phase": "Running", "containerStatuses": [{"name": "nv-ipam-node", "ready": False, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}
UNSCHEDULABLE = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "message": "0/40 nodes are available: 1 Insufficient memory."}]}

# (id, objects, ready, phrases the output must hold)
CASES = [
    ("ready", [policy("ready"), ds("kube-multus-ds", 32, 32)], True, ["NicClusterPolicy nic-cluster-policy: ready"]),
    (
        "pull",
        [policy("notReady", [{"name": "state-multus-cni", "state": "notReady"}]), ds("kube-multus-ds", 32, 31), pod("kube-multus-ds-x7", "kube-multus-ds", "gpu-17", PULL)],
        False,
        ["state-multus-cni: notReady", "31 of 32 nodes available", "kube-multus-ds-x7 on gpu-17: kube-multus: ImagePullBackOff", "check the registry"],
    ),
    (
        "node-down",
        [policy("notReady"), ds("nv-ipam-node", 32, 31), pod("nv-ipam-node-a", "nv-ipam-node", "gpu-3", CRASH), node("gpu-3", ready=False)],
        False,
        ["nv-ipam-node-a on gpu-3: the node is NotReady (KubeletNotReady)", "cordon and drain it"],
    ),
    (
        "crash",
        [policy("notReady"), ds("nv-ipam-node", 32, 31), pod("nv-ipam-node-a", "nv-ipam-node", "gpu-3", CRASH), node("gpu-3", ready=True)],
        False,
        ["CrashLoopBackOff", f"kubectl logs -n {NS} nv-ipam-node-a -c nv-ipam-node --previous"],
    ),
    (
        "unschedulable",
        [policy("notReady"), ds("rdma-shared-dp-ds", 32, 31), pod("rdma-shared-dp-ds-q", "rdma-shared-dp-ds", None, UNSCHEDULABLE)],
        False,
        ["rdma-shared-dp-ds-q on no node: Pending: 0/40 nodes are available: 1 Insufficient memory."],
    ),
    ("no-node", [policy("notReady"), ds("mofed-ubuntu22.04-ds", 0, 0)], False, ["selects no node", "feature.node.kubernetes.io/pci-10de.present"]),
    ("on-delete", [policy("notReady"), ds("mofed-ubuntu22.04-ds", 32, 32, updated=4, strategy="OnDelete")], False, ["32 of 32 nodes available, 4 on the current template", "OnDelete"]),
]


@pytest.mark.parametrize(("case", "objects", "ready", "phrases"), CASES, ids=[c[0] for c in CASES])
def test_the_policy_says_what_holds_it(case, objects, ready, phrases, tmp_path, capsys):
    path = tmp_path / "objects.json"
    path.write_text(json.dumps({"kind": "List", "items": objects}))
    assert readiness.main([str(path)]) == (0 if ready else 1)
    out = capsys.readouterr().out
    for phrase in phrases:
        assert phrase in out, out


def test_input_it_cannot_read_exits_2(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text("NAME   READY")
    assert readiness.main([str(bad)]) == 2
    assert "not readable as kubectl's JSON output" in capsys.readouterr().err
