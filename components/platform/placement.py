"""Where the platform's own non-GPU pods run: the operators, controllers, webhooks and schedulers of every chart
fastpath installs go to the stack's CPU-only system nodes (`nodes.system`), their per-node DaemonSets stay on the
GPU nodes. Pure: each chart's values for it, from the table below.

Helm merges maps but replaces lists: a nodeSelector given here is added to the chart's default one, while a
tolerations list replaces the chart's, so each slot repeats the chart's own default tolerations at the pinned
version (tests/test_placement.py reads them off the upstream values files). `site_values` is what each chart's
values get from the site: this placement and the mirrors' images (components/platform/mirrors.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from components import k8s, versions
from components.model.config import PlatformConfig, SystemNodesConfig
from components.platform import mirrors


def _toleration(key: str, operator: str) -> dict[str, str]:
    return {"key": key, "operator": operator, **({"value": ""} if operator == "Equal" else {}), "effect": "NoSchedule"}


CONTROL_PLANE_EQUAL = _toleration("node-role.kubernetes.io/control-plane", "Equal")
MASTER_EQUAL = _toleration("node-role.kubernetes.io/master", "Equal")
CONTROL_PLANE_EXISTS = _toleration("node-role.kubernetes.io/control-plane", "Exists")
MASTER_EXISTS = _toleration("node-role.kubernetes.io/master", "Exists")


@dataclass(frozen=True)
class Slot:
    """One pod (or set of pods) of a chart: the values path of its nodeSelector, the paths of the tolerations lists
    that reach it, and the chart's default tolerations there (kept: the system pods still tolerate the control plane
    where the chart did)."""

    selector: str
    tolerations: tuple[str, ...]
    defaults: tuple[dict[str, str], ...] = ()


# chart -> its non-DaemonSet pods' slots, read at the pinned versions (components/versions.py):
SLOTS: dict[str, tuple[Slot, ...]] = {
    # NVIDIA/gpu-operator@v26.7.0:deployments/gpu-operator/values.yaml operator.* (the operator Deployment and the
    # upgrade-crd and cleanup hook Jobs); its node-feature-discovery 0.19.0 sub-chart's master and gc Deployments.
    versions.GPU_OPERATOR_CHART: (
        Slot("operator.nodeSelector", ("operator.tolerations",), (CONTROL_PLANE_EQUAL,)),
        Slot(
            "node-feature-discovery.master.nodeSelector",
            ("node-feature-discovery.master.tolerations",),
            (CONTROL_PLANE_EQUAL,),
        ),
        Slot("node-feature-discovery.gc.nodeSelector", ("node-feature-discovery.gc.tolerations",)),
    ),
    # Mellanox/network-operator@v26.4.1:deployment/network-operator/values.yaml operator.* (the operator and its
    # hook Jobs) and the sriov-network-operator sub-chart's operator.* (its operator Deployment).
    versions.NETWORK_OPERATOR_CHART: (
        Slot("operator.nodeSelector", ("operator.tolerations",), (MASTER_EQUAL, CONTROL_PLANE_EQUAL)),
        Slot(
            "sriov-network-operator.operator.nodeSelector",
            ("sriov-network-operator.operator.tolerations",),
            (MASTER_EXISTS, CONTROL_PLANE_EXISTS),
        ),
    ),
    # volcano-sh/volcano@v1.15.1:installer/helm/chart/volcano/values.yaml custom.<component>_ns / _tolerations (not
    # default_ns, which the agent DaemonSet would take too); admission_* also places the admission-init Job.
    versions.VOLCANO_CHART: tuple(
        Slot(f"custom.{c}_ns", (f"custom.{c}_tolerations",)) for c in ("scheduler", "controller", "admission")
    ),
    # kubeflow/trainer@v2.3.0:charts/kubeflow-trainer/values.yaml manager.*; kubernetes-sigs/jobset@v0.12.0:
    # charts/jobset/values.yaml controller.* under the `jobset` sub-chart.
    versions.TRAINER_CHART: (
        Slot("manager.nodeSelector", ("manager.tolerations",)),
        Slot("jobset.controller.nodeSelector", ("jobset.controller.tolerations",)),
    ),
    # NVIDIA/NVSentinel v1.19.0: global.systemNode* reach every control-plane Deployment (each template's
    # `global.systemNodeSelector | default .Values.nodeSelector`) but not the MongoDB store (Bitnami StatefulSet)
    # nor its create-database Job, whose tolerations fall back to mongodb.jobTolerations when unset.
    versions.NVSENTINEL_CHART: (
        Slot("global.systemNodeSelector", ("global.systemNodeTolerations",)),
        Slot("mongodb-store.mongodb.nodeSelector", ("mongodb-store.mongodb.tolerations",)),
        Slot("mongodb-store.job.nodeSelector", ("mongodb-store.job.tolerations",)),
    ),
    # cert-manager/cert-manager@v1.21.1:deploy/charts/cert-manager/values.yaml: global.nodeSelector reaches the
    # controller, webhook, cainjector and startupapicheck pods; each has its own tolerations list.
    versions.CERT_MANAGER_CHART: (
        Slot(
            "global.nodeSelector",
            ("tolerations", "webhook.tolerations", "cainjector.tolerations", "startupapicheck.tolerations"),
        ),
    ),
    # kubernetes-sigs/kueue@v0.19.2:charts/kueue/values.yaml controllerManager.* (the manager Deployment; KueueViz
    # is off).
    versions.KUEUE_CHART: (Slot("controllerManager.nodeSelector", ("controllerManager.tolerations",)),),
    versions.DRANET_CHART: (),  # kubernetes-sigs/dranet@v1.4.0: a DaemonSet only, on the GPU nodes
    # kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:deployments/helm/dra-driver-nvidia-gpu/values.yaml controller.*
    # (the ComputeDomain controller Deployment; the kubelet plugin is a DaemonSet on the GPU nodes), whose default
    # tolerations are the control plane's, the old master's and CriticalAddonsOnly (any effect). dranet is a DaemonSet
    # only.
    versions.GPU_DRA_CHART: (
        Slot(
            "controller.nodeSelector",
            ("controller.tolerations",),
            (CONTROL_PLANE_EXISTS, MASTER_EXISTS, {"key": "CriticalAddonsOnly", "operator": "Exists"}),
        ),
    ),
    # NVIDIA/topograph@v1.0.0:charts/topograph/values.yaml: the API server (top level) and nodeObserver.* (the
    # node-data-broker is a DaemonSet on the GPU nodes: components/platform/topology.py places it).
    versions.TOPOGRAPH_CHART: (
        Slot("nodeSelector", ("tolerations",)),
        Slot("nodeObserver.nodeSelector", ("nodeObserver.tolerations",)),
    ),
    # kubernetes-csi/csi-driver-nfs@v4.13.4:charts/v4.13.4/csi-driver-nfs/values.yaml controller.* (the controller
    # Deployment), whose default tolerations are the control plane's and CriticalAddonsOnly.
    versions.CSI_NFS_CHART: (
        Slot(
            "controller.nodeSelector",
            ("controller.tolerations",),
            (
                MASTER_EXISTS,
                _toleration("node-role.kubernetes.io/controlplane", "Exists"),
                CONTROL_PLANE_EXISTS,
                _toleration("CriticalAddonsOnly", "Exists"),
            ),
        ),
    ),
}


def chart_values(chart: str, system: SystemNodesConfig | None) -> dict[str, Any]:
    """The values that put `chart`'s non-DaemonSet pods on the system nodes; {} without them."""
    if system is None:
        return {}
    out: dict[str, Any] = {}
    for slot in SLOTS[chart]:
        k8s.set_path(out, slot.selector, dict(system.node_selector))
        for path in slot.tolerations:
            k8s.set_path(out, path, [*slot.defaults, *system.tolerations()])
    return out


def site_values(chart: str, platform: PlatformConfig) -> dict[str, Any]:
    """What the site adds to `chart`'s values: its pods on the system nodes, its images from the mirrors."""
    return k8s.merge_values(chart_values(chart, platform.nodes.system), mirrors.chart_values(chart, platform.mirrors))


def pod_placement(system: SystemNodesConfig | None) -> dict[str, Any]:
    """A pod spec's nodeSelector and tolerations for the system nodes (fastpath's own Deployments); {} without."""
    if system is None:
        return {}
    return {"nodeSelector": dict(system.node_selector), **({"tolerations": t} if (t := system.tolerations()) else {})}
