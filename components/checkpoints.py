"""ReadWriteMany checkpoint storage: a Retain StorageClass (NFS via csi-driver-nfs, or an existing class) and
a checkpoint claim in every training namespace."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from components import k8s, profile, versions
from components.config import PlatformConfig

COMPONENT = "checkpoints"
NAMESPACE = "kube-system"  # where upstream installs csi-driver-nfs
STORAGE_CLASS = "fastpath-checkpoints"
CLAIM = profile.CHECKPOINT_CLAIM
MOUNT_ROOT = profile.CHECKPOINT_ROOT


def values(platform: PlatformConfig) -> dict:
    # A deleted PV must not delete the directory on the server (the chart's default is `delete`).
    return {"controller": {"defaultOnDeletePolicy": "retain"}}


def storage_class_name(platform: PlatformConfig) -> str:
    c = platform.checkpoints
    return c.storage_class if c and c.storage_class else STORAGE_CLASS


def storage_class(platform: PlatformConfig) -> dict | None:
    nfs = platform.checkpoints.nfs if platform.checkpoints else None
    if nfs is None:
        return None
    options = list(nfs.mount_options)
    if nfs.rdma:
        options += ["proto=rdma", "port=20049"]
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": k8s.meta(STORAGE_CLASS, platform.cluster, COMPONENT),
        "provisioner": "nfs.csi.k8s.io",
        "parameters": {"server": nfs.server, "share": nfs.share},
        "reclaimPolicy": "Retain",
        "volumeBindingMode": "Immediate",
        "allowVolumeExpansion": True,
        "mountOptions": options,
    }


def claims(platform: PlatformConfig) -> list[dict]:
    return [{
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": k8s.meta(CLAIM, platform.cluster, COMPONENT, namespace=ns),
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": storage_class_name(platform),
            "resources": {"requests": {"storage": platform.checkpoints.size}},
        },
    } for ns in platform.training_namespaces]


@dataclass
class CheckpointStorageArgs:
    platform: PlatformConfig
    namespaces: list  # the training Namespace resources the claims live in


class CheckpointStorage(pulumi.ComponentResource):
    """Installs csi-driver-nfs (chart pinned in components/versions.py) and a `fastpath-checkpoints`
    StorageClass for `checkpoints.nfs`, or uses the existing `checkpoints.storageClass`; then a ReadWriteMany
    claim `checkpoints` in every training namespace.

    Checkpoints outlive the stack: the class reclaims with Retain, the driver keeps directories of deleted
    volumes, and each claim is `protect`ed and `retain_on_delete`: `pulumi destroy` or a rename leaves it (and
    its data) in the cluster.

    Example:
        CheckpointStorage("checkpoints", CheckpointStorageArgs(platform=cfg.platform, namespaces=[ns]))
    """

    def __init__(self, name: str, args: CheckpointStorageArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("fastpath:platform:CheckpointStorage", name, None, opts)
        p = args.platform
        deps: list = list(args.namespaces)
        sc = storage_class(p)
        if sc is not None:
            self.release = k8s.helm_release(
                "csi-driver-nfs", versions.CSI_NFS_CHART, versions.CSI_NFS_REPO, p.versions.csi_driver_nfs,
                NAMESPACE, values(p), pulumi.ResourceOptions(parent=self))
            deps.append(k8s.apply(sc, pulumi.ResourceOptions(parent=self, depends_on=[self.release])))
        self.claims = [k8s.apply(m, pulumi.ResourceOptions(parent=self, depends_on=deps, protect=True,
                                                           retain_on_delete=True))
                       for m in claims(p)]
        self.register_outputs({"claim": CLAIM, "storageClass": storage_class_name(p)})
