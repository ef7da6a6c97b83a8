"""ReadWriteMany checkpoint storage: a Retain StorageClass (NFS via csi-driver-nfs, or an existing class) and
a checkpoint claim in every training namespace."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi

from components import k8s, versions
from components.model import profile
from components.model.config import PlatformConfig
from components.platform import mirrors, placement

COMPONENT = "checkpoints"
NAMESPACE = "kube-system"  # where upstream installs csi-driver-nfs
STORAGE_CLASS = "fastpath-checkpoints"
CLAIM = profile.CHECKPOINT_CLAIM
MOUNT_ROOT = profile.CHECKPOINT_ROOT
SUBDIR = "${pvc.metadata.namespace}/${pvc.metadata.name}"


# csi-driver-nfs@v4.13.4:charts/v4.13.4/csi-driver-nfs/values.yaml `controller.tolerations`: Helm replaces a list
# value wholesale, so adding the GPU taint means repeating these.
CONTROLLER_TOLERATIONS = [
    k8s.toleration(key)
    for key in (
        "node-role.kubernetes.io/master",
        "node-role.kubernetes.io/controlplane",
        "node-role.kubernetes.io/control-plane",
        "CriticalAddonsOnly",
    )
]


def values(platform: PlatformConfig) -> dict:
    """Helm values for csi-driver-nfs.

    - `defaultOnDeletePolicy: retain` (the chart's default is `delete`): a deleted volume never deletes its
      directory on the server. With it (and the class's Retain reclaim, so DeleteVolume is not even called)
      DeleteVolume mounts nothing (kubernetes-csi/csi-driver-nfs@v4.13.4:pkg/nfs/controllerserver.go
      `DeleteVolume` mounts only when onDelete is not retain), so no provisioner secret carrying RDMA
      `mountOptions` for it is needed.
    - NFS over RDMA: the controller mounts the share itself in CreateVolume, with the StorageClass's
      mountOptions, from the node it runs on (host network; same file, `CreateVolume` -> `internalMount`). Only
      the GPU nodes have the RDMA fabric, so the controller runs there: a nodeSelector on the GPU product label
      and the GPU taint tolerated. The node DaemonSet already tolerates every taint.
    """
    v: dict = {"controller": {"defaultOnDeletePolicy": "retain"}}
    nfs = platform.checkpoints.nfs if platform.checkpoints else None
    if nfs is not None and nfs.rdma:
        v["controller"]["nodeSelector"] = {k8s.GPU_PRODUCT_LABEL: platform.gpu.product}
        v["controller"]["tolerations"] = [*CONTROLLER_TOLERATIONS, *k8s.gpu_tolerations(platform.gpu.taint_key)]
        # It mounts over RDMA itself: on a GPU node even when the stack names system nodes.
        return k8s.merge_values(v, mirrors.chart_values(versions.CSI_NFS_CHART, platform.mirrors))
    return k8s.merge_values(v, placement.site_values(versions.CSI_NFS_CHART, platform))


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
        # One directory per namespace and claim name, not per volume (`pvc-<uid>`): a claim made again under the
        # same name (a re-created stack, a deleted namespace) finds its checkpoints instead of an empty folder
        # (kubernetes-csi/csi-driver-nfs@v4.13.4 pkg/nfs/controllerserver.go: subDir with ${pvc.metadata.*},
        # given by the chart's --extra-create-metadata).
        "parameters": {"server": nfs.server, "share": nfs.share, "subDir": SUBDIR},
        "reclaimPolicy": "Retain",
        "volumeBindingMode": "Immediate",
        "allowVolumeExpansion": True,
        "mountOptions": options,
    }


def claims(platform: PlatformConfig) -> list[dict]:
    if platform.checkpoints is None:  # the config refuses checkpointStorage without it
        return []
    size = platform.checkpoints.size
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": k8s.meta(CLAIM, platform.cluster, COMPONENT, namespace=ns),
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": storage_class_name(platform),
                "resources": {"requests": {"storage": size}},
            },
        }
        for ns in platform.training_namespaces
    ]


@dataclass
class CheckpointStorageArgs:
    platform: PlatformConfig
    namespaces: list  # the training Namespace resources the claims live in
    after: list = field(default_factory=list)
    """What the driver needs before it can mount: for NFS over RDMA the NicClusterPolicy (ready means the DOCA
    driver loaded rpcrdma); otherwise a claim's CreateVolume fails until then and `pulumi up` times out."""


class CheckpointStorage(pulumi.ComponentResource):
    """Installs csi-driver-nfs (chart pinned in components/versions.py) and a `fastpath-checkpoints`
    StorageClass for `checkpoints.nfs`, or uses the existing `checkpoints.storageClass`; then a ReadWriteMany
    claim `checkpoints` in every training namespace.

    NFS over RDMA (`checkpoints.nfs.rdma`): the driver's controller runs on a GPU node (see `values`) and the
    release waits for `args.after`. Hosts need nothing for plain NFS (`mount.nfs` is in the driver's image);
    over RDMA their kernel needs `rpcrdma` loaded (the operator's DOCA driver loads it with ENABLE_NFSRDMA).

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
                "csi-driver-nfs",
                *mirrors.chart_source(versions.CSI_NFS_CHART, versions.CSI_NFS_REPO, p.mirrors),
                p.versions.csi_driver_nfs,
                NAMESPACE,
                values(p),
                pulumi.ResourceOptions(parent=self, depends_on=list(args.after)),
            )
            deps.append(k8s.apply(sc, pulumi.ResourceOptions(parent=self, depends_on=[self.release])))
        self.claims = [
            k8s.apply(m, pulumi.ResourceOptions(parent=self, depends_on=deps, protect=True, retain_on_delete=True))
            for m in claims(p)
        ]
        self.register_outputs({"claim": CLAIM, "storageClass": storage_class_name(p)})
