"""Why the NicClusterPolicy is not ready: which operand, on which node, and what to do.

    kubectl get nicclusterpolicy,daemonsets,pods -n nvidia-network-operator -o json > ncp.json
    kubectl get nodes -o json > nodes.json
    python -m tools.readiness ncp.json nodes.json        (or - for standard input)

`pulumi up` waits for the policy's `status.state: ready` (components/platform/network_operator.py) and, when it
times out, can only say that it did. The Network Operator calls the policy ready when every operand DaemonSet is
available on every node it selects (Mellanox/network-operator@v26.4.1:pkg/state/state_skel.go isDaemonSetReady:
`desiredNumberScheduled != 0 && == numberAvailable && updatedNumberScheduled == numberAvailable`); this reads the
same objects and names each DaemonSet that is not, the pods that hold it, their nodes and the reason. Exit 0 when
the policy is ready, 1 with the reasons when not, 2 for input it cannot read.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

# What each waiting reason means for an operand pod, and what to do about it.
WAITING = {
    "ImagePullBackOff": "its image cannot be pulled on that node: check the registry (or mirror) and the pull secret",
    "ErrImagePull": "its image cannot be pulled on that node: check the registry (or mirror) and the pull secret",
    "CrashLoopBackOff": "it keeps failing: `kubectl logs -n {ns} {pod} -c {container} --previous`",
    "CreateContainerConfigError": "its config is refused: `kubectl describe pod -n {ns} {pod}`",
}


@dataclass
class Objects:
    policy: dict | None = None
    daemonsets: list[dict] = field(default_factory=list)
    pods: list[dict] = field(default_factory=list)
    nodes: dict[str, dict] = field(default_factory=dict)


def load(docs: list[dict]) -> Objects:
    out = Objects()
    items = [i for d in docs for i in (d.get("items", []) if d.get("kind", "").endswith("List") else [d])]
    for item in items:
        match item.get("kind"):
            case "NicClusterPolicy":
                out.policy = item
            case "DaemonSet":
                out.daemonsets.append(item)
            case "Pod":
                out.pods.append(item)
            case "Node":
                out.nodes[item["metadata"]["name"]] = item
            case _:
                pass
    return out


def _node_problem(node: dict | None) -> str | None:
    if node is None:
        return None
    ready = next((c for c in node.get("status", {}).get("conditions", []) if c.get("type") == "Ready"), None)
    if ready is not None and ready.get("status") != "True":
        return f"the node is NotReady ({ready.get('reason') or 'no reason given'})"
    return None


def _pod_problem(pod: dict, nodes: dict[str, dict]) -> str:
    meta, status = pod["metadata"], pod.get("status", {})
    ns, name = meta.get("namespace", ""), meta["name"]
    node = pod.get("spec", {}).get("nodeName")
    if (problem := _node_problem(nodes.get(node or ""))) is not None:
        return f"{problem}: fix its kubelet, or cordon and drain it (fastpath's operands run on GPU nodes only)"
    for c in status.get("initContainerStatuses", []) + status.get("containerStatuses", []):
        waiting = (c.get("state") or {}).get("waiting") or {}
        if (reason := waiting.get("reason")) in WAITING:
            hint = WAITING[reason].format(ns=ns, pod=name, container=c.get("name", ""))
            return f"{c.get('name')}: {reason} ({waiting.get('message', '')[:160]}): {hint}"
    if status.get("phase") == "Pending":
        scheduled: dict = next((c for c in status.get("conditions", []) if c.get("type") == "PodScheduled"), {})
        return f"Pending: {scheduled.get('message') or 'not started yet'}"
    not_ready = [c.get("name") for c in status.get("containerStatuses", []) if not c.get("ready")]
    if not_ready:
        return f"running, not ready ({', '.join(map(str, not_ready))}): `kubectl describe pod -n {ns} {name}`"
    return f"phase {status.get('phase', 'unknown')}"


def _owned_by(pod: dict, ds: dict) -> bool:
    return any(
        o.get("kind") == "DaemonSet" and o.get("name") == ds["metadata"]["name"]
        for o in pod["metadata"].get("ownerReferences", [])
    )


def explain(objs: Objects) -> tuple[bool, list[str]]:
    """(ready, lines): the policy's state, then per operand DaemonSet that is not ready, why."""
    if objs.policy is None:
        return False, ["no NicClusterPolicy in the input: `kubectl get nicclusterpolicy -o json`"]
    status = objs.policy.get("status", {})
    state = status.get("state", "unknown")
    lines = [f"NicClusterPolicy {objs.policy['metadata']['name']}: {state}"]
    for applied in status.get("appliedStates", []):
        if applied.get("state") not in ("ready", "ignore"):
            lines.append(f"  {applied.get('name')}: {applied.get('state')} {applied.get('message', '')}".rstrip())
    for ds in sorted(objs.daemonsets, key=lambda d: d["metadata"]["name"]):
        st = ds.get("status", {})
        desired, available = st.get("desiredNumberScheduled", 0), st.get("numberAvailable", 0)
        updated = st.get("updatedNumberScheduled", 0)
        name = f"{ds['metadata'].get('namespace', '')}/{ds['metadata']['name']}"
        if desired == 0:
            lines.append(
                f"  {name}: selects no node, and a DaemonSet on no node is never ready: check that the GPU nodes "
                "carry the labels its node selector and affinity name (node-feature-discovery's "
                "feature.node.kubernetes.io/pci-10de.present and pci-15b3.present)"
            )
            continue
        if desired == available == updated:
            continue
        lines.append(f"  {name}: {available} of {desired} nodes available, {updated} on the current template")
        for pod in sorted((p for p in objs.pods if _owned_by(p, ds)), key=lambda p: p["metadata"]["name"]):
            conditions = pod.get("status", {}).get("conditions", [])
            if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
                continue
            node = pod.get("spec", {}).get("nodeName") or "no node"
            lines.append(f"    {pod['metadata']['name']} on {node}: {_pod_problem(pod, objs.nodes)}")
        if (ds.get("spec", {}).get("updateStrategy") or {}).get("type") == "OnDelete" and updated < desired:
            lines.append(
                "    OnDelete: pods on the old template stay until deleted; the operator replaces them one node at a "
                "time when its upgradePolicy.autoUpgrade is on"
            )
    return state == "ready", lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.readiness", description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="kubectl ... -o json output files, - for standard input")
    args = ap.parse_args(argv)
    docs = []
    for f in args.files:
        try:
            text = sys.stdin.read() if f == "-" else Path(f).read_text()
            docs.append(json.loads(text))
        except (OSError, json.JSONDecodeError) as err:
            print(f"{f}: not readable as kubectl's JSON output ({err})", file=sys.stderr)
            return 2
    ready, lines = explain(load(docs))
    print("\n".join(lines))
    return 0 if ready else 1


if __name__ == "__main__":
    sys.exit(main())
