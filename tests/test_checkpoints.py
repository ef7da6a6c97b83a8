"""Checkpoint storage (components/platform/checkpoints.py): StorageClass, claims and the csi-driver-nfs values."""

import pytest
import yaml

from components.platform import checkpoints
from tests.conftest import STACKS
from tests.helpers import DEDICATED, GPU_TAINT, cfg, regs
from tools import upstream


def test_checkpoint_storage():
    sc = checkpoints.storage_class(cfg("prod-ib"))
    assert sc["reclaimPolicy"] == "Retain"
    assert "proto=rdma" in sc["mountOptions"] and "port=20049" in sc["mountOptions"]
    assert checkpoints.storage_class(cfg("prod-roce")) is None
    claims = checkpoints.claims(cfg("prod-roce"))
    assert [(c["metadata"]["namespace"], c["spec"]["storageClassName"]) for c in claims] == [("training", "ceph-cephfs-rwx"), ("research", "ceph-cephfs-rwx")]
    assert all(c["spec"]["accessModes"] == ["ReadWriteMany"] for c in claims)


CSI_DEFAULT_TOLERATIONS = [
    {"key": k, "operator": "Exists", "effect": "NoSchedule"}
    for k in ("node-role.kubernetes.io/master", "node-role.kubernetes.io/controlplane", "node-role.kubernetes.io/control-plane", "CriticalAddonsOnly")
]


@pytest.mark.parametrize(
    ("changes", "controller"),
    [
        ({"checkpoints__nfs__rdma": False}, {"defaultOnDeletePolicy": "retain"}),
        ({}, {"defaultOnDeletePolicy": "retain", "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, "tolerations": [*CSI_DEFAULT_TOLERATIONS, GPU_TAINT]}),
        (
            {"gpu__taintKey": "dedicated"},
            {"defaultOnDeletePolicy": "retain", "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, "tolerations": [*CSI_DEFAULT_TOLERATIONS, GPU_TAINT, DEDICATED]},
        ),
    ],
)
def test_csi_nfs_controller_mounts_from_a_gpu_node_over_rdma(changes, controller):
    """kubernetes-csi/csi-driver-nfs@v4.13.4:pkg/nfs/controllerserver.go `CreateVolume` mounts the share with the
    StorageClass's mountOptions (`internalMount`) from the controller's node, on the host network
    (charts/v4.13.4/csi-driver-nfs/templates/csi-nfs-controller.yaml): over RDMA that must be a GPU node. Helm
    replaces `controller.tolerations` (values.yaml default: the four control-plane keys), so they are repeated.
    `DeleteVolume` mounts nothing when onDelete is retain, so no provisioner secret with RDMA mountOptions."""
    assert checkpoints.values(cfg("prod-ib", **changes)) == {"controller": controller}


def test_csi_controller_tolerations_repeat_the_chart_defaults():
    """The list fastpath repeats is the chart's (kubernetes-csi/csi-driver-nfs@v4.13.4:
    charts/v4.13.4/csi-driver-nfs/values.yaml `controller.tolerations`)."""
    chart = yaml.safe_load(upstream.path("values/csi-driver-nfs.values.yaml").read_text())
    assert chart["controller"]["tolerations"] == checkpoints.CONTROLLER_TOLERATIONS == CSI_DEFAULT_TOLERATIONS


@pytest.mark.parametrize("stack", STACKS)
def test_checkpoint_claims_survive_destroy(stack, rendered):
    claims = regs(rendered(stack).run, ":PersistentVolumeClaim")
    assert claims
    assert all(c.protect and c.retain_on_delete for c in claims)
