"""Disconnected clusters (platform.mirrors, components/platform/mirrors.py): with mirrors, nothing the render names or
the program fetches is a public host, every chart's operators pull from the mirror, and the stack's own images must
be the mirror's."""

import re

import pytest
import yaml

from components import versions
from components.model import config, stack
from components.platform import mirrors
from tests.conftest import stack_platform
from tests.helpers import stack_raw
from tools import upstream

AIRGAP = "prod-airgap"
MIRROR = "mirror.internal:5000"
# Public registries, chart repositories and git hosts the charts and fastpath name by default.
PUBLIC = ("nvcr.io", "docker.io", "ghcr.io", "quay.io", "registry.k8s.io", "public.ecr.aws", "github.com", "githubusercontent.com", "helm.ngc.nvidia.com", "charts.jetstack.io", "github.io")
# A public host where it is a host: at the start of a value or after a scheme, not inside the mirror's scoped path.
AS_HOST = re.compile(r"(?:^|[\s'\"=]|://)((?:[\w-]+\.)*(?:" + "|".join(re.escape(h) for h in PUBLIC) + r"))(?=[/:\s'\"]|$)", re.M)


def _hosts(text: str) -> set[str]:
    return set(AS_HOST.findall(text))


def test_the_air_gapped_render_names_no_public_host(rendered):
    """manifests.yaml, packages.yaml (values included), images.txt and charts.txt, and every chart and source the
    provider would fetch. The one exception is kustomize's image matcher (`images[].name`): the name it renames
    from, never pulled."""
    r = rendered(AIRGAP)
    packages = list(yaml.safe_load_all(r.files["packages.yaml"]))
    for pkg in packages:
        if pkg["kind"] == "kustomize":
            for image in pkg["kustomization"].get("images", []):
                assert image["newName"].startswith(f"{MIRROR}/")
                image["name"] = "<matched>"
    text = r.files["manifests.yaml"] + yaml.safe_dump_all(packages) + r.files["images.txt"] + r.files["charts.txt"]
    assert _hosts(text) == set(), sorted(_hosts(text))
    for pkg in packages:
        if pkg["kind"] == "helm":
            assert pkg["chart"].startswith(f"oci://{MIRROR}/charts/") and pkg["repo"] is None, pkg["name"]
        else:
            assert pkg["source"].startswith("https://git.internal/"), pkg["source"]
    images = [line for line in r.files["images.txt"].splitlines() if not line.startswith("#")]
    assert images and all(i.startswith(f"{MIRROR}/") for i in images)


def test_the_public_twin_names_them(rendered):
    """The detector finds what it is for: prod-ib, the same cluster without mirrors, names public hosts."""
    r = rendered("prod-ib")
    assert {"nvcr.io", "helm.ngc.nvidia.com", "github.com"} <= _hosts(r.files["manifests.yaml"] + r.files["packages.yaml"])


def test_every_chart_key_points_at_the_mirror(rendered):
    packages = {p["chart"].rsplit("/", 1)[-1]: p for p in rendered(AIRGAP).packages if p["kind"] == "helm"}
    seen = 0
    for chart, keys in mirrors.KEYS.items():
        pkg = packages.get(chart.rsplit("/", 1)[-1])
        if pkg is None:
            continue
        for key in keys:
            node = pkg["values"]
            for part in key.path.split("."):
                node = node[part]
            want = f"{MIRROR}/{key.default}" if key.kind == "registry" else f"{MIRROR}/{mirrors.normalize(key.default)}"
            assert node == want, (chart, key.path)
            seen += 1
    assert seen >= 40


@pytest.mark.parametrize(
    ("file", "path", "chart"),
    [
        ("gpu-operator.values.yaml", None, "gpu-operator"),
        ("network-operator.values.yaml", None, "network-operator"),
        ("volcano.values.yaml", None, "volcano"),
        ("kubeflow-trainer.values.yaml", None, "oci://ghcr.io/kubeflow/charts/kubeflow-trainer"),
        ("csi-driver-nfs.values.yaml", None, "csi-driver-nfs"),
    ],
)
def test_key_defaults_are_the_charts_at_their_tags(file, path, chart):
    """Each key's default is what the chart's values file says at the pinned version (../shared/upstream/values);
    keys of sub-charts not in the file are cited in docs/research/airgap-images-*.md."""
    values = yaml.safe_load(upstream.path(f"values/{file}").read_text())
    checked = 0
    for key in mirrors.KEYS[chart]:
        node = values
        for part in key.path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            continue  # a sub-chart's own key
        assert node == key.default, (chart, key.path, node)
        checked += 1
    assert checked >= 1


@pytest.mark.parametrize(
    ("ref", "normalized"),
    [
        ("python:3.13", "docker.io/library/python:3.13"),
        ("volcanosh/vc-scheduler:v1.15.1", "docker.io/volcanosh/vc-scheduler:v1.15.1"),
        ("nvcr.io/nvidia/pytorch:25.10-py3", "nvcr.io/nvidia/pytorch:25.10-py3"),
        ("localhost/x:1", "localhost/x:1"),
        ("registry:5000/x:1", "registry:5000/x:1"),
    ],
)
def test_references_are_normalized_as_the_runtime_reads_them(ref, normalized):
    assert mirrors.normalize(ref) == normalized
    assert mirrors.under(ref, MIRROR) == f"{MIRROR}/{normalized}"


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (lambda raw: raw["jobs"][0].update(image="nvcr.io/nvidia/pytorch:25.10-py3"), "fastpath:jobs[0].image: nvcr.io/nvidia/pytorch:25.10-py3 is not from mirrors.registry"),
        (
            lambda raw: raw["platform"]["monitoring"].update(ncclInspectorImage="registry.example.internal/x:1"),
            "monitoring.ncclInspectorImage 'registry.example.internal/x:1': not from mirrors.registry",
        ),
        (lambda raw: raw["platform"]["mirrors"].pop("trainingOperator"), "mirrors.trainingOperator is unset but the Training Operator is installed"),
        (lambda raw: raw["platform"]["mirrors"].update(registry="https://mirror.internal"), "fastpath:platform.mirrors.registry"),
        (lambda raw: raw["platform"]["mirrors"].update(charts="mirror.internal/charts"), "fastpath:platform.mirrors.charts"),
        # kustomize resolves a directory from the provider's cache folder, not the project: a git URL only.
        (lambda raw: raw["platform"]["mirrors"].update(trainingOperator="vendor/trainer/manifests/overlays/standalone"), "fastpath:platform.mirrors.trainingOperator"),
        # The images each chart pulls are known for the pinned versions only.
        (lambda raw: raw["platform"].setdefault("versions", {}).update(networkOperator="26.7.0"), "versions.networkOperator 26.7.0 with mirrors"),
        # The driver: preinstalled or precompiled, never built on the node from package repositories.
        (lambda raw: raw["platform"]["gpu"].pop("driverPreinstalled"), "builds the driver on each node"),
        (lambda raw: raw["platform"]["gpu"].update(precompiledDriver={"branch": "595", "kernels": ["6.8.0-60-generic"]}), "gpu.precompiledDriver and gpu.driverPreinstalled both set"),
        (lambda raw: _precompiled(raw)["platform"]["gpu"]["precompiledDriver"].update(kernels=["latest"]), "fastpath:platform.gpu.precompiledDriver.kernels[0]"),
    ],
)
def test_what_a_disconnected_cluster_cannot_pull_is_refused(change, needle):
    raw = stack_raw(AIRGAP)
    change(raw)
    with pytest.raises(config.ConfigError) as err:
        stack.parse(raw, f"stacks/Pulumi.{AIRGAP}.yaml")
    assert needle in str(err.value), str(err.value)


def test_no_mirrors_no_change():
    for chart in mirrors.KEYS:
        assert mirrors.chart_values(chart, None) == {}
    assert mirrors.chart_source("gpu-operator", "https://helm.ngc.nvidia.com/nvidia", None) == ("gpu-operator", "https://helm.ngc.nvidia.com/nvidia")
    assert stack_platform("prod-ib").get("mirrors") is None


def _precompiled(raw: dict) -> dict:
    gpu = raw["platform"]["gpu"]
    gpu.pop("driverPreinstalled")
    gpu["precompiledDriver"] = {"branch": "595", "kernels": ["6.8.0-60-generic", "6.8.0-71-generic"]}
    return raw


def test_a_disconnected_cluster_runs_precompiled_drivers_listed_per_kernel():
    """NVIDIA/gpu-operator@v26.7.0: driver.usePrecompiled with driver.version the branch makes the operator run
    `driver:<branch>-<kernel>-<os>` per node kernel (no build from the OS's package repositories). Each declared
    kernel's image is in images.txt, from the mirror."""
    from tools import render

    raw = _precompiled(stack_raw(AIRGAP))
    run = render.run_program(AIRGAP, extra_config={"fastpath:platform": raw["platform"]})
    packages = render.packages(run)
    driver = next(p for p in packages if p["name"] == "gpu-operator")["values"]["driver"]
    assert (driver["enabled"], driver["usePrecompiled"], driver["version"]) == (True, True, "595")
    assert driver["repository"] == f"{MIRROR}/nvcr.io/nvidia"
    images = render.images_txt(run, render.manifests(run), packages)
    for kernel in ("6.8.0-60-generic", "6.8.0-71-generic"):
        assert f"{MIRROR}/nvcr.io/nvidia/driver:595-{kernel}-ubuntu24.04\n" in images
    assert "tag per node: nvcr.io/nvidia/driver" not in images
    chart = yaml.safe_load(upstream.path("values/gpu-operator.values.yaml").read_text())["driver"]
    assert chart["usePrecompiled"] is False and chart["repository"] == "nvcr.io/nvidia"


def test_moving_a_running_cluster_to_its_mirrors_is_a_driver_rollout():
    """Day 2: pointing a running cluster at its mirrors changes the driver DaemonSet's image (its repository), a new
    revision the GPU Operator's upgrade controller rolls node by node: the impact model calls it disruptive and
    names the keys behind it, so the stack file must acknowledge it; the charts' own pods only roll."""
    import copy

    from components.impact.model import impact
    from components.impact.state import snapshot
    from components.model.config import PlatformConfig

    raw = stack_platform("dev")  # the GPU Operator manages the driver there
    moved = copy.deepcopy(raw)
    moved["mirrors"] = {"registry": MIRROR, "charts": f"oci://{MIRROR}/charts", "trainingOperator": stack_raw(AIRGAP)["platform"]["mirrors"]["trainingOperator"]}
    moved["gpu"]["precompiledDriver"] = {"branch": "595", "kernels": ["6.8.0-60-generic"]}
    changes = {c.id: c for c in impact(snapshot(PlatformConfig.model_validate(raw), []), snapshot(PlatformConfig.model_validate(moved), [])).changes}
    assert changes["gpu.driver"].cls == "disruptive"
    assert {"mirrors.registry", "gpu.precompiledDriver.branch"} <= set(changes["gpu.driver"].keys)
    assert changes["charts.gpu-operator"].cls == "rolling" and "mirrors.charts" in changes["charts.gpu-operator"].keys


# cert-manager/cert-manager@v1.21.1:deploy/charts/cert-manager/values.yaml: each component's image values (`name`,
# `repository` empty) and the chart-wide `imageRegistry: quay.io`, `imageNamespace: jetstack`; the tag defaults to
# the chart's appVersion, the release tag (make/manifests.mk).
CERT_MANAGER_IMAGES = {
    "image": "cert-manager-controller",
    "webhook.image": "cert-manager-webhook",
    "cainjector.image": "cert-manager-cainjector",
    "acmesolver.image": "cert-manager-acmesolver",
    "startupapicheck.image": "cert-manager-startupapicheck",
}


def cert_manager_image(image: dict, registry: str, namespace: str, app_version: str) -> str:
    """cert-manager/cert-manager@v1.21.1:deploy/charts/cert-manager/templates/_helpers.tpl `cert-manager.image`,
    restated: a set repository wins (prefixed by a set image.registry); else name under imageNamespace under
    imageRegistry (then image.registry); the tag, else the digest, else `:<appVersion>`."""
    if image.get("repository"):
        repository = image["repository"]
    else:
        repository = "/".join(part for part in (registry, namespace, image["name"]) if part)
    if image.get("registry"):
        repository = f"{image['registry']}/{repository}"
    if image.get("tag") and image.get("digest"):
        return f"{repository}:{image['tag']}@{image['digest']}"
    if image.get("tag"):
        return f"{repository}:{image['tag']}"
    if image.get("digest"):
        return f"{repository}@{image['digest']}"
    return f"{repository}:{app_version}"


@pytest.mark.parametrize("stack", [AIRGAP, "prod-ib"])
def test_cert_manager_pulls_what_the_inventory_lists_and_from_the_mirror_when_it_has_one(rendered, stack):
    """The chart's image rule at the pinned tag applied to the values the stack renders: every image the chart can
    run is in the stack's inventory (images.txt), under the mirror on the air-gapped stack, at the pinned version."""
    (pkg,) = [p for p in rendered(stack).packages if p["name"] == "cert-manager"]
    assert pkg["version"] == versions.CERT_MANAGER_VERSION == "v1.21.1"  # the tag the rule above was read at
    values = pkg["values"]
    registry = values.get("imageRegistry", "quay.io")
    inventory = rendered(stack).files["images.txt"].splitlines()
    for path, name in CERT_MANAGER_IMAGES.items():
        node = values
        for part in path.split("."):
            node = node.get(part, {})
        ref = cert_manager_image({"name": name, "repository": "", **node}, registry, "jetstack", versions.CERT_MANAGER_VERSION)
        assert ref == (f"{MIRROR}/" if stack == AIRGAP else "") + f"quay.io/jetstack/{name}:v1.21.1"
        assert ref in inventory, ref
