"""The reaper's objects: a namespace of its own, the program in a ConfigMap, a one-replica Deployment, and in each
training namespace a Role that lets it read pods and write the status of pods and Training Operator v1 jobs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi

from components import k8s, versions
from components.model.config import PlatformConfig
from components.ops import reaper

NAMESPACE = "fastpath-system"
COMPONENT = "reaper"
NAME = "fastpath-reaper"
PROGRAM = Path(reaper.__file__)
INTERVAL_SECONDS = 60


def env(platform: PlatformConfig) -> dict[str, str]:
    r = platform.reaper
    return {
        "NAMESPACES": " ".join(platform.training_namespaces),
        "START_DEADLINE": str(r.start_deadline_minutes * 60),
        "PENDING_DEADLINE": str(r.pending_deadline_minutes * 60) if r.pending_deadline_minutes is not None else "",
        "INTERVAL": str(INTERVAL_SECONDS),
    }


def objects(platform: PlatformConfig) -> list[dict[str, Any]]:
    """Every object of the reaper, namespace first; [] when the stack turns it off."""
    if not platform.reaper.enabled:
        return []
    c = platform.cluster

    def m(name: str, ns: str | None = NAMESPACE) -> dict:
        return k8s.meta(name, c, COMPONENT, namespace=ns)

    out: list[dict[str, Any]] = [
        k8s.namespace(NAMESPACE, c, COMPONENT, "restricted", "the reaper only talks to the API server"),
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": m(NAME)},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": m(NAME), "data": {"reaper.py": PROGRAM.read_text()}},
    ]
    rules = [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
        {"apiGroups": ["kubeflow.org"], "resources": sorted(reaper.V1_KINDS.values()), "verbs": ["get"]},
        {
            "apiGroups": ["kubeflow.org"],
            "resources": sorted(f"{r}/status" for r in reaper.V1_KINDS.values()),
            "verbs": ["patch"],
        },
    ]
    for ns in platform.training_namespaces:
        out.append(
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": m(NAME, ns), "rules": rules}
        )
        out.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": m(NAME, ns),
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
                "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
            }
        )
    small = {"cpu": "100m", "memory": "128Mi"}
    labels = {"app.kubernetes.io/name": NAME}
    pod = {
        "serviceAccountName": NAME,
        # Off the GPU nodes whenever another node can take it (NFD labels a node with an NVIDIA device first).
        "affinity": {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "preference": {"matchExpressions": [{"key": k8s.NFD_GPU_LABEL, "operator": "DoesNotExist"}]},
                    }
                ]
            }
        },
        # Allowed on GPU nodes too, for a cluster that has no other (nodes.cpuNodes false).
        "tolerations": [k8s.toleration(platform.gpu.taint_key)],
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": "reaper",
                "image": k8s.mirrored_image(
                    versions.OPS_PYTHON_IMAGE, platform.mirrors.registry if platform.mirrors else None
                ),
                "command": ["python3", "-u", "/reaper/reaper.py"],
                "env": [{"name": k, "value": v} for k, v in env(platform).items()],
                "resources": {"requests": dict(small), "limits": dict(small)},
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
                "volumeMounts": [{"name": "program", "mountPath": "/reaper", "readOnly": True}],
            }
        ],
        "volumes": [{"name": "program", "configMap": {"name": NAME}}],
    }
    out.append(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": m(NAME),
            "spec": {
                "replicas": 1,
                # Two reapers at once would only patch the same status twice; Recreate keeps it to one anyway.
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": _on_system_nodes(pod, platform)},
            },
        }
    )
    return out


@dataclass
class ReaperArgs:
    platform: PlatformConfig
    after: list[Any]
    """The training namespaces (its Roles live there)."""


class Reaper(pulumi.ComponentResource):
    """Installs the reaper (components/ops/reaper.py): a one-replica Deployment in `fastpath-system` that fails a
    training job whose pods cannot start within `fastpath:platform.reaper.startDeadlineMinutes` (a bad image, a
    missing Secret, ConfigMap or claim), so its gang frees its GPUs, with the reason in the job's status.

    Needs: the training namespaces; Python 3.10+ in versions.OPS_PYTHON_IMAGE.

    Example:
        Reaper("reaper", ReaperArgs(platform=cfg.platform, after=namespaces), opts=pulumi.ResourceOptions(parent=p))
    """

    def __init__(self, name: str, args: ReaperArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("fastpath:ops:Reaper", name, None, opts)
        objs = objects(args.platform)
        ns = k8s.apply(objs[0], pulumi.ResourceOptions(parent=self))
        for o in objs[1:]:
            k8s.apply(o, pulumi.ResourceOptions(parent=self, depends_on=[ns, *args.after]))
        self.register_outputs({"namespace": NAMESPACE})


def _on_system_nodes(pod: dict[str, Any], platform: PlatformConfig) -> dict[str, Any]:
    """`pod` on the stack's system nodes when it names them, instead of the preference and GPU toleration."""
    system = platform.nodes.system
    if system is None:
        return pod
    pod = {k: v for k, v in pod.items() if k not in ("affinity", "tolerations")}
    return {
        **pod,
        "nodeSelector": dict(system.node_selector),
        **({"tolerations": t} if (t := system.tolerations()) else {}),
    }
