"""Images and charts from the stack's mirrors (`platform.mirrors`), for clusters that cannot reach the internet.
Pure: what each chart's values must say so that every image its pods and operators pull comes from the mirror.

Images are mirrored in the layout `skopeo sync --scoped` (and `oras copy` to the same path) writes: the source's
whole reference under the mirror, `nvcr.io/nvidia/gpu-operator:v26.7.0` ->
`mirror.internal:5000/nvcr.io/nvidia/gpu-operator:v26.7.0`. Charts come from one Helm repository (`https://...`,
holding every chart fastpath installs) or one OCI path (`oci://mirror/charts`, `<path>/<chart>`).

Which keys set which images, per chart at its pinned version, was read at the tags (docs/research/airgap-images-*.md
holds the reading): each chart has its own; Volcano and cert-manager have one registry key for all their images.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from components import k8s, versions
from components.model.config import MirrorsConfig, PlatformConfig

DOCKER_HUB = k8s.DOCKER_HUB
normalize = k8s.normalize_image
under = k8s.mirrored_image


def image(ref: str, mirrors: MirrorsConfig | None) -> str:
    """`ref` as pulled from the mirror (unchanged without one)."""
    return under(ref, mirrors.registry if mirrors is not None else None)


@dataclass(frozen=True)
class Key:
    """A values key that names images: a `repository` (the reference before its tag), a full `ref`, or a
    `registry` the chart prefixes to its own repositories."""

    path: str
    default: str  # the chart's value at the pinned version
    kind: Literal["repository", "ref", "registry"] = "repository"
    pulls: tuple[str, ...] = ()  # the images (whole, at the chart's tags) this key decides, for the inventory


def pinned(path: str, repository: str, tag: str) -> Key:
    """A `repository` key whose value fastpath pins in the values (its default is then fastpath's own): it pulls
    `repository:tag`."""
    return Key(path, repository, pulls=(f"{repository}:{tag}",))


# chart -> the keys of every image it deploys with fastpath's settings, and the images each decides at the chart's own
# tags (docs/research/airgap-images-nvidia.md and airgap-images-other-charts.md: file@tag:line for each). A `ref` key
# pulls its value. Images whose tag the operator derives from the node (the GPU and DOCA drivers) are DERIVED.
GPU_OPERATOR_TAG = "v26.7.0"  # the operator and validator images: the chart's appVersion at its version
KEYS: dict[str, tuple[Key, ...]] = {
    # NVIDIA/gpu-operator@v26.7.0:deployments/gpu-operator/values.yaml: `<component>.repository` (+ image, version);
    # the validator's image also runs every validation init container and pod; NFD 0.19.0's image is the sub-chart's.
    versions.GPU_OPERATOR_CHART: (
        Key("operator.repository", "nvcr.io/nvidia", pulls=(f"nvcr.io/nvidia/gpu-operator:{GPU_OPERATOR_TAG}",)),
        Key("validator.repository", "nvcr.io/nvidia", pulls=(f"nvcr.io/nvidia/gpu-operator:{GPU_OPERATOR_TAG}",)),
        Key("driver.repository", "nvcr.io/nvidia"),
        Key(
            "driver.manager.repository",
            "nvcr.io/nvidia/cloud-native",
            pulls=("nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.12.0",),
        ),
        Key("toolkit.repository", "nvcr.io/nvidia/k8s", pulls=("nvcr.io/nvidia/k8s/container-toolkit:v1.20.0",)),
        Key("devicePlugin.repository", "nvcr.io/nvidia", pulls=("nvcr.io/nvidia/k8s-device-plugin:v0.20.0",)),
        Key("gfd.repository", "nvcr.io/nvidia", pulls=("nvcr.io/nvidia/k8s-device-plugin:v0.20.0",)),
        Key(
            "dcgm.repository",
            "nvcr.io/nvidia/cloud-native",
            pulls=("nvcr.io/nvidia/cloud-native/dcgm:4.6.0-1-ubuntu24.04",),
        ),
        Key(
            "dcgmExporter.repository",
            "nvcr.io/nvidia/k8s",
            pulls=("nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless",),
        ),
        Key(
            "migManager.repository",
            "nvcr.io/nvidia/cloud-native",
            pulls=("nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.15.0",),
        ),
        Key(
            "node-feature-discovery.image.repository",
            "registry.k8s.io/nfd/node-feature-discovery",
            pulls=("registry.k8s.io/nfd/node-feature-discovery:v0.19.0",),
        ),
    ),
    # Mellanox/network-operator@v26.4.1:deployment/network-operator/values.yaml: the operator, the DOCA driver's
    # init container (passed to the operator, not a policy field), and the SR-IOV sub-chart's images as full
    # references. The NicClusterPolicy's own images are fastpath's (network_operator.py).
    versions.NETWORK_OPERATOR_CHART: (
        Key(
            "operator.repository",
            "nvcr.io/nvidia/cloud-native",
            pulls=("nvcr.io/nvidia/cloud-native/network-operator:v26.4.1",),
        ),
        Key(
            "operator.ofedDriver.initContainer.repository",
            "nvcr.io/nvidia/mellanox",
            pulls=("nvcr.io/nvidia/mellanox/network-operator-init-container:network-operator-v26.4.1",),
        ),
        *(
            Key(
                f"sriov-network-operator.images.{name}",
                f"nvcr.io/nvidia/mellanox/{image}:network-operator-v26.4.1",
                "ref",
            )
            for name, image in (
                ("operator", "sriov-network-operator"),
                ("sriovConfigDaemon", "sriov-network-operator-config-daemon"),
                ("sriovCni", "sriov-cni"),
                ("ibSriovCni", "ib-sriov-cni"),
                ("ovsCni", "ovs-cni-plugin"),
                ("rdmaCni", "rdma-cni"),
                ("sriovDevicePlugin", "sriov-network-device-plugin"),
                ("webhook", "sriov-network-operator-webhook"),
            )
        ),
        Key(
            "sriov-network-operator.images.resourcesInjector",
            "ghcr.io/k8snetworkplumbingwg/network-resources-injector:v1.7.0",
            "ref",
        ),
    ),
    # volcano-sh/volcano@v1.15.1:installer/helm/chart/volcano/values.yaml basic.image_registry: every Volcano image
    # (scheduler, controllers, admission and its init Job) is `<registry>/volcanosh/...`.
    versions.VOLCANO_CHART: (
        Key(
            "basic.image_registry",
            DOCKER_HUB,
            "registry",
            pulls=tuple(
                f"docker.io/volcanosh/{name}:v1.15.1"
                for name in ("vc-scheduler", "vc-controller-manager", "vc-webhook-manager")
            ),
        ),
    ),
    # kubeflow/trainer@v2.3.0:charts/kubeflow-trainer/values.yaml image.registry (the controller only);
    # kubernetes-sigs/jobset@v0.12.0:charts/jobset/values.yaml image.repository (trainer.py pins it).
    versions.TRAINER_CHART: (
        Key(
            "image.registry",
            "ghcr.io",
            "registry",
            pulls=("ghcr.io/kubeflow/trainer/trainer-controller-manager:v2.3.0",),
        ),
        Key("jobset.image.repository", versions.JOBSET_IMAGE_REPOSITORY),
    ),
    # cert-manager/cert-manager@v1.21.1:deploy/charts/cert-manager/values.yaml: every component's image is
    # `<imageRegistry>/<imageNamespace>/cert-manager-<name>` while its own `repository` stays empty (the default).
    versions.CERT_MANAGER_CHART: (
        Key(
            "imageRegistry",
            "quay.io",
            "registry",
            pulls=tuple(
                f"quay.io/jetstack/cert-manager-{name}:{versions.CERT_MANAGER_VERSION}"
                for name in ("controller", "webhook", "cainjector", "startupapicheck", "acmesolver")
            ),
        ),
    ),
    # kubernetes-csi/csi-driver-nfs@v4.13.4:charts/v4.13.4/csi-driver-nfs/values.yaml: image.baseRepo prefixes
    # the sidecars' `/sig-storage/...`; the plugin's repository is absolute.
    versions.CSI_NFS_CHART: (
        Key(
            "image.baseRepo",
            "registry.k8s.io",
            "registry",
            pulls=tuple(
                f"registry.k8s.io/sig-storage/{name}"
                for name in (
                    "csi-provisioner:v6.3.0",
                    "csi-resizer:v2.2.0",
                    "csi-snapshotter:v8.6.0",
                    "livenessprobe:v2.19.0",
                    "csi-node-driver-registrar:v2.17.0",
                )
            ),
        ),
        Key(
            "image.nfs.repository",
            "registry.k8s.io/sig-storage/nfsplugin",
            pulls=("registry.k8s.io/sig-storage/nfsplugin:v4.13.4",),
        ),
    ),
    # NVIDIA/NVSentinel v1.19.0 (read at lalitadithya/NVSentinel@e002c5dc:distros/kubernetes/nvsentinel): each module's
    # image.repository (tag: the chart's release, v1.19.0); the shared init container image; the janitor's runtime
    # Jobs; the MongoDB store's Bitnami images through its own global.imageRegistry and its two literal helper images.
    versions.NVSENTINEL_CHART: (
        *(
            Key(
                f"{module}.image.repository",
                f"ghcr.io/nvidia/nvsentinel/{name}",
                pulls=tuple(f"ghcr.io/nvidia/nvsentinel/{name}:v1.19.0{suffix}" for suffix in suffixes),
            )
            for module, name, suffixes in (
                ("platformConnector", "platform-connectors", ("",)),
                ("gpu-health-monitor", "gpu-health-monitor", ("-dcgm-4.x", "-dcgm-3.x")),
                ("syslog-health-monitor", "syslog-health-monitor", ("",)),
                ("labeler", "labeler", ("",)),
                ("metadata-collector", "metadata-collector", ("",)),
                ("fault-quarantine", "fault-quarantine", ("",)),
                ("node-drainer", "node-drainer", ("",)),
                ("kubernetes-object-monitor", "kubernetes-object-monitor", ("",)),
                ("nic-health-monitor", "nic-health-monitor", ("",)),
                ("fault-remediation", "fault-remediation", ("",)),
                ("janitor", "janitor", ("",)),
                ("janitor-provider", "janitor-provider", ("",)),
            )
        ),
        Key(
            "janitor.config.controllers.gpuReset.resetJob.image.repository",
            "ghcr.io/nvidia/nvsentinel/gpu-reset",
            pulls=("ghcr.io/nvidia/nvsentinel/gpu-reset:v1.19.0",),
        ),
        Key("janitor-provider.csp.generic.rebootImage", "public.ecr.aws/docker/library/busybox:1.37.0", "ref"),
        Key(
            "global.initContainerImage.repository",
            "docker.io/bitnamilegacy/os-shell",
            pulls=("docker.io/bitnamilegacy/os-shell:12-debian-12-r30",),
        ),
        Key(
            "mongodb-store.mongodb.global.imageRegistry",
            DOCKER_HUB,
            "registry",
            pulls=(
                "docker.io/bitnamilegacy/mongodb:8.0.3-debian-12-r0",
                "docker.io/bitnamilegacy/nginx:1.27.2-debian-12-r2",
                "docker.io/bitnamilegacy/mongodb-exporter:0.41.2-debian-12-r1",
            ),
        ),
        Key(
            "mongodb-store.mongodb.helperImages.kubectl.repository",
            "docker.io/bitnamilegacy/kubectl",
            pulls=("docker.io/bitnamilegacy/kubectl:1.30.6",),
        ),
        Key(
            "mongodb-store.mongodb.helperImages.mongosh.repository",
            "ghcr.io/rtsp/docker-mongosh",
            pulls=("ghcr.io/rtsp/docker-mongosh:2.5.2",),
        ),
    ),
    # fastpath pins both images in the values (components/platform/kueue.py, topology.py), so the chart's own defaults
    # (Kueue's in-repo staging image, which its release packaging rewrites; Topograph's appVersion) never apply.
    versions.KUEUE_CHART: (
        pinned("controllerManager.manager.image.repository", versions.KUEUE_IMAGE_REPOSITORY, versions.KUEUE_IMAGE_TAG),
    ),
    # kubernetes-sigs/dranet@v1.4.0:deployments/helm/dranet/values.yaml image.* (the DaemonSet), and
    # kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:deployments/helm/dra-driver-nvidia-gpu/values.yaml image.* (kubelet
    # plugin, controller, webhook): both pinned in the values (components/platform/dra.py).
    versions.DRANET_CHART: (pinned("image.repository", versions.DRANET_IMAGE_REPOSITORY, versions.DRANET_IMAGE_TAG),),
    versions.GPU_DRA_CHART: (
        pinned("image.repository", versions.GPU_DRA_IMAGE_REPOSITORY, versions.GPU_DRA_IMAGE_TAG),
    ),
    # NVIDIA/topograph@v1.0.0:charts/topograph/values.yaml image.*: the API server, node-observer and node-data-broker
    # all run it (tests.image empty reuses it; fastpath turns the helm tests off).
    versions.TOPOGRAPH_CHART: (
        pinned("image.repository", versions.TOPOGRAPH_IMAGE_REPOSITORY, versions.TOPOGRAPH_IMAGE_TAG),
    ),
}
# Images whose tag the operator derives on each node: mirror one per node OS (and kernel, when precompiled).
DERIVED = {
    versions.GPU_OPERATOR_CHART: "nvcr.io/nvidia/driver:595.91.07-<os><os version> (driver.enabled: the GPU driver)",
    versions.NETWORK_OPERATOR_CHART: "nvcr.io/nvidia/mellanox/doca-driver:<version>-<os><os version>-<arch> "
    "(ofedDriver: the DOCA driver)",
}


def derived_images(platform: PlatformConfig) -> list[str]:
    """Images an operator picks from the stack's own facts (the precompiled driver per kernel), from the mirror."""
    pre = platform.gpu.precompiled_driver
    if pre is None or platform.gpu.driver_preinstalled or not platform.components.gpu_operator:
        return []
    return sorted(image(ref, platform.mirrors) for ref in pre.images())


def chart_images(chart: str, registry: str | None) -> list[str]:
    """Every image `chart` pulls with fastpath's settings (`registry`: from that mirror), for the inventory."""
    refs = [ref for key in KEYS.get(chart, ()) for ref in (key.pulls or ((key.default,) if key.kind == "ref" else ()))]
    return sorted({under(ref, registry) for ref in refs})


def chart_values(chart: str, mirrors: MirrorsConfig | None) -> dict[str, Any]:
    """The values that make `chart` pull every image from the mirror; {} without one."""
    if mirrors is None:
        return {}
    out: dict[str, Any] = {}
    for key in KEYS[chart]:
        value = f"{mirrors.registry}/{key.default}" if key.kind == "registry" else image(key.default, mirrors)
        k8s.set_path(out, key.path, value)
    return out


def chart_source(chart: str, repo: str | None, mirrors: MirrorsConfig | None) -> tuple[str, str | None]:
    """(chart, repo) for the Helm release: the chart's own, or the mirror's (`oci://` path, or a Helm repository)."""
    if mirrors is None:
        return chart, repo
    name = chart.rsplit("/", 1)[-1]
    if mirrors.charts.startswith("oci://"):
        return f"{mirrors.charts.rstrip('/')}/{name}", None
    return name, mirrors.charts
