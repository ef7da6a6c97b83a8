"""Every pinned chart version, image tag and manifest ref fastpath installs: the one place to bump them.

The values were read from the upstream repositories at the tags named (`repo@tag:path` where a comment says more).
A stack may override any of them under `fastpath:platform.versions`; these are the defaults.
"""

from __future__ import annotations

# Helm charts (repository URL, chart name, version).
#
# Newer releases that are out but not taken (issue 23): each bump re-reads its values and code at the new tag, and
# the newest tags whose source this project could read (the snapshots of 2026-08-20..22) are the ones pinned here:
# - gpu-operator v26.7.2: the newest readable tag is v26.7.0.
# - network-operator 26.7.x / 26.10.x: the newest readable tags are v26.7.0-rc.2 (no final); 26.4.1 stays.
# - kubeflow-trainer 2.4.0 (its TrainJob image rule for the MPI launcher and nodes, PRTE env for Open MPI 5): the
#   newest readable tag is v2.3.0; the PRTE names fastpath's MPI runtime sets already cover Open MPI 5
#   (components/jobs/runtime_v2/build.py).
GPU_OPERATOR_REPO = "https://helm.ngc.nvidia.com/nvidia"
GPU_OPERATOR_CHART = "gpu-operator"
GPU_OPERATOR_VERSION = "v26.7.0"  # published chart versions carry the "v"

NETWORK_OPERATOR_REPO = "https://helm.ngc.nvidia.com/nvidia"
NETWORK_OPERATOR_CHART = "network-operator"
NETWORK_OPERATOR_VERSION = "26.4.1"  # no "v" for this chart

VOLCANO_REPO = "https://volcano-sh.github.io/helm-charts"
VOLCANO_CHART = "volcano"
VOLCANO_VERSION = "1.15.1"
# Kueue (scheduler.name kueue): the chart as released (its packaging rewrites the in-repo staging image to
# registry.k8s.io/kueue/kueue:v<version>: kubernetes-sigs/kueue@v0.19.2:hack/helm-chart-package.sh); the image is
# pinned in the values too, so the render names it. v0.19.2 is the newest tag readable here (upstream SOURCES.md).
KUEUE_CHART = "oci://registry.k8s.io/kueue/charts/kueue"
KUEUE_VERSION = "0.19.2"
KUEUE_IMAGE_REPOSITORY = "registry.k8s.io/kueue/kueue"
KUEUE_IMAGE_TAG = f"v{KUEUE_VERSION}"
# Dynamic Resource Allocation (fabric.attachment dra): kubernetes-sigs/dranet for the rail NICs (its release
# packaging sets the chart version to the tag without its "v" and the image tag to the tag: Makefile helm-package),
# and NVIDIA's GPU DRA driver for the GPUs (chart 0.4.1, image tag v<appVersion>: templates/_helpers.tpl).
DRANET_CHART = "oci://registry.k8s.io/networking/charts/dranet"
DRANET_VERSION = "1.4.0"
DRANET_IMAGE_REPOSITORY = "registry.k8s.io/networking/dranet"
DRANET_IMAGE_TAG = "v1.4.0"
GPU_DRA_CHART = "oci://registry.k8s.io/dra-driver-nvidia/charts/dra-driver-nvidia-gpu"
GPU_DRA_VERSION = "0.4.1"
GPU_DRA_IMAGE_REPOSITORY = "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu"
GPU_DRA_IMAGE_TAG = "v0.4.1"
# NVIDIA Topograph (nodes.topology.source topograph): fabric discovery into node labels. The chart's image tag
# defaults to its appVersion v1.0.0 (NVIDIA/topograph@v1.0.0:charts/topograph/Chart.yaml), pinned here.
TOPOGRAPH_REPO = "https://nvidia.github.io/topograph"
TOPOGRAPH_CHART = "topograph"
TOPOGRAPH_VERSION = "1.0.0"
TOPOGRAPH_IMAGE_REPOSITORY = "ghcr.io/nvidia/topograph"
TOPOGRAPH_IMAGE_TAG = "v1.0.0"

CSI_NFS_REPO = "https://raw.githubusercontent.com/kubernetes-csi/csi-driver-nfs/master/charts"
CSI_NFS_CHART = "csi-driver-nfs"
CSI_NFS_VERSION = "4.13.4"  # no "v" since 4.11.0

# Kubeflow Training Operator v1 has no chart: its standalone kustomize overlay at this git ref.
TRAINING_OPERATOR_REF = "v1.9.4"
TRAINING_OPERATOR_REPO = "https://github.com/kubeflow/trainer"
TRAINING_OPERATOR_OVERLAY_PATH = "manifests/overlays/standalone"
# Images the operator injects into job pods; its defaults are `alpine:3.10` and `kubectl-delivery:latest`
# (kubeflow/trainer@v1.9.4:pkg/config/config.go). kubectl-delivery is published by the same workflow run and with
# the same `v1-<commit>` tag as the operator image the v1.9.4 overlay pins (v1-93c5489:
# .github/workflows/publish-core-images.yaml builds both, template-publish-image tags `type=sha,prefix=v1-`);
# there is no `v1.9.4` tag for it.
PYTORCH_INIT_CONTAINER_IMAGE = "docker.io/library/alpine:3.21.3"
MPI_KUBECTL_DELIVERY_IMAGE = "ghcr.io/kubeflow/training-v1/kubectl-delivery:v1-93c5489"

# Images the NicClusterPolicy deploys (network-operator v26.4.1 example CRs).
MELLANOX_REPOSITORY = "nvcr.io/nvidia/mellanox"
DOCA_DRIVER_VERSION = "doca3.4.1-26.04-1.1.0.0-1"

# The NGC PyTorch image the acceptance, the v2 runtimes and the committed stacks' jobs run. Release 25.10 is built
# on CUDA 13.0.2 (NVIDIA's vLLM and Triton 25.10 release notes; Triton's compatibility table pairs the nv25.10 torch
# build with CUDA 13.0.2.006 and driver 580.95.05): the GPU Operator's default driver (595.91.07 at v26.7.0) runs it.
# Its NCCL and Open MPI (HPC-X) versions are recorded nowhere fastpath can read (the PyTorch and CUDA DL 25.10
# release notes are not in the stored documentation; the newest NGC page that states them is CUDA DL 26.03: NCCL
# 2.29.7, HPC-X 2.26), so nothing here assumes them. What depends on them is checked where it shows:
# - the Inspector (telemetry) loads only into NCCL 2.28.3 or later (profiler interface v5): the acceptance checks
#   that every rank loaded it (tools.ncclcheck --profiler), and ncclcheck warns on a training log where one did not;
# - NCCL_IB_HCA's rail and plane fields need 2.30.7: fastpath writes device names only (components/fabric/nccl.py);
# - Open MPI 5 reads PRTE's names, not ORTE's: the v2 MPI runtime sets both (runtime_v2/build.py), whichever it has.
# Not bumped to 26.03, which by CUDA DL 26.03's notes would likely carry NCCL 2.29.7 (the Inspector would load): its
# own notes are not readable here, so its NCCL would be an inference too, and moving the default replaces every v2
# runtime and the acceptance on every cluster; the acceptance's --profiler answers the question on the cluster.
JOB_IMAGE = "nvcr.io/nvidia/pytorch:25.10-py3"
# Fabric acceptance: NGC's PyTorch containers ship nccl-tests built with MPI (all_reduce_perf_mpi in
# /usr/local/bin, from cuda-dl-base), so the acceptance job runs the image the training jobs use.
NCCL_TESTS_IMAGE = JOB_IMAGE
NCCL_TESTS_ALL_REDUCE = "all_reduce_perf_mpi"

# Kubeflow Trainer v2 (TrainJob, ClusterTrainingRuntime) on JobSet, from its Helm chart in an OCI registry
# (kubeflow/trainer@v2.3.0:charts/kubeflow-trainer/Chart.yaml: version 2.3.0, no appVersion, dependency jobset
# 0.12.0). The chart's controller tag defaults to `v<chart version>` (templates/_helpers.tpl); pinned anyway so a
# chart bump cannot move it unseen.
TRAINER_CHART = "oci://ghcr.io/kubeflow/charts/kubeflow-trainer"
TRAINER_VERSION = "2.3.0"
# The in-repo JobSet chart names a staging image pulled Always (kubernetes-sigs/jobset@v0.12.0:charts/jobset/
# values.yaml); the published chart is rewritten to this (hack/helm-chart-package.sh), which the subchart values
# pin so the install does not depend on that rewrite.
JOBSET_IMAGE_REPOSITORY = "registry.k8s.io/jobset/jobset"
JOBSET_IMAGE_TAG = "v0.12.0"
# Default image of the torch and plain runtimes' `node` container and of their preflight init container (a
# TrainJob's image replaces the first, never the second: the preflight needs only a shell).
TRAINER_NODE_IMAGE = JOB_IMAGE

# ------------------------------------------------------------------------------------------- pairings
# Images that must move with a chart or ref (`versions.*` in a stack file): the tag that follows the version by the
# publisher's own naming, or a table of the pairs read upstream. A version the table does not know is refused
# (components/model/config.py) rather than installed beside images of another release.


def network_operator_component_tag(chart_version: str) -> str:
    """The NicClusterPolicy operands' tag for a network-operator chart version (Mellanox/network-operator@v26.4.1:
    hack/release.yaml tags every component image `network-operator-v<version>`)."""
    return f"network-operator-v{chart_version}"


# network-operator chart version -> the DOCA driver its release notes and example CRs pair with it
# (Mellanox/network-operator@v26.4.1:hack/release.yaml `ofedDriver`).
DOCA_DRIVER_VERSIONS = {NETWORK_OPERATOR_VERSION: DOCA_DRIVER_VERSION}


def trainer_controller_tag(chart_version: str) -> str:
    """kubeflow/trainer@v2.3.0:charts/kubeflow-trainer/templates/_helpers.tpl: the controller image defaults to
    `v<chart version>`; pinned to that so a chart bump moves it."""
    return f"v{chart_version}"


# kubeflow-trainer chart version -> the JobSet image its chart dependency ships (Chart.yaml `jobset` dependency).
JOBSET_FOR_TRAINER = {TRAINER_VERSION: JOBSET_IMAGE_TAG}
# Training Operator overlay ref -> the kubectl-delivery image published with its operator image.
KUBECTL_DELIVERY_FOR_TRAINING_OPERATOR = {TRAINING_OPERATOR_REF: MPI_KUBECTL_DELIVERY_IMAGE}
# The operator image the overlay names at each ref (kubeflow/trainer@v1.9.4:manifests/overlays/standalone/
# kustomization.yaml images:), mirrored by name and tag on a disconnected cluster.
TRAINING_OPERATOR_IMAGE_FOR = {TRAINING_OPERATOR_REF: "ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489"}
# Training Operator ref -> the commit it names (`git rev-parse v1.9.4^{commit}` in kubeflow/trainer): the overlay is
# fetched at the commit, so a tag moved upstream cannot change the cluster while the render stays the same.
TRAINING_OPERATOR_COMMITS = {TRAINING_OPERATOR_REF: "4445c12aa62e4345b0c2c6ac9b215a70eca46ed7"}

# Node health: NVIDIA NVSentinel's umbrella chart (oci://ghcr.io/nvidia/nvsentinel; the release packaging rewrites the
# in-repo chart's version 0.1.0 and image tag `main` to the release tag: NVIDIA/NVSentinel@v1.19.0:
# distros/kubernetes/Makefile helm-publish), and cert-manager, which its datastore, janitor and webhooks need
# (NVIDIA/NVSentinel@v1.19.0:distros/kubernetes/README.md asks for v1.19.0 or later).
NVSENTINEL_CHART = "oci://ghcr.io/nvidia/nvsentinel"
NVSENTINEL_VERSION = "v1.19.0"
CERT_MANAGER_REPO = "https://charts.jetstack.io"
CERT_MANAGER_CHART = "cert-manager"
# NVSentinel asks for v1.19.0 or later. v1.21.1 is the newest release (1.19 reached its end of life on
# 2026-07-08); it supports Kubernetes 1.33-1.36 (1.19: 1.31-1.35; cert-manager/website:content/docs/releases/
# README.md), though its chart installs from 1.22 (deploy/charts/cert-manager/Chart.yaml kubeVersion), so a stack
# that states an older kubernetesVersion is refused (config). The values fastpath sets mean the same at both tags, and
# images are named from `imageRegistry`/`imageNamespace` now (cert-manager/cert-manager@v1.21.1:
# deploy/charts/cert-manager/values.yaml). Upstream upgrades one minor at a time: the impact of the jump says so.
CERT_MANAGER_VERSION = "v1.21.1"
CERT_MANAGER_MIN_KUBERNETES_MINOR = 33

# The platform's own small programs (the reaper, the nccl-metrics sidecar) need a Python 3.10+ interpreter and
# nothing else.
OPS_PYTHON_IMAGE = "docker.io/library/python:3.13.7-slim-bookworm"
