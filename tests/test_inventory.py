"""rendered/<stack>/images.txt and charts.txt (tools/inventory.py): a platform engineer mirrors exactly that set, so
every image the render names and every chart it installs is in them, whatever field or text holds it."""

import re

import pytest
import yaml

from tests.conftest import STACKS
from tools import inventory

IMAGE_FIELD = re.compile(r"^\s*(?:-\s+)?image: ['\"]?([^\s'\"]+)", re.M)


def _lines(text: str) -> set[str]:
    return {line for line in text.splitlines() if line and not line.startswith("#")}


@pytest.mark.parametrize("stack", STACKS)
def test_every_image_the_render_names_is_in_the_inventory(stack, rendered):
    r = rendered(stack)
    listed = _lines(r.files["images.txt"])
    text = r.files["manifests.yaml"] + r.files["packages.yaml"]
    # A bare name (the NicClusterPolicy's `image: multus-cni`, beside its repository and version) and a template
    # the operator fills from its own flag (`{{.InitContainerImage}}`, whose value is listed) are not references.
    fields = {i for i in IMAGE_FIELD.findall(r.files["manifests.yaml"]) if "/" in i and "{{" not in i}
    named = fields | set(inventory.IMAGE_IN_TEXT.findall(text))
    assert named, stack
    assert named <= listed, sorted(named - listed)
    for image in listed:
        assert ":" in image.rsplit("/", 1)[-1] or "@sha256:" in image, f"{image}: unpinned in the inventory"


@pytest.mark.parametrize("stack", STACKS)
def test_every_chart_and_source_is_in_the_inventory(stack, rendered):
    r = rendered(stack)
    listed = _lines(r.files["charts.txt"])
    for pkg in yaml.safe_load_all(r.files["packages.yaml"]):
        if pkg["kind"] == "helm":
            assert any(line.endswith(f" {pkg['chart'].rsplit('/', 1)[-1]} {pkg['version']}") for line in listed), pkg["name"]
        else:
            assert f"kustomize {pkg['source']}" in listed


def test_image_shapes():
    objs = [
        {"spec": {"containers": [{"image": "nvcr.io/nvidia/pytorch:25.10-py3"}]}},
        {"spec": {"ofedDriver": {"image": "doca-driver", "repository": "nvcr.io/nvidia/mellanox", "version": "25.10-0.7.0.0-0"}}},
        {"data": {"template.yaml": "containers:\n- image: docker.io/library/alpine:3.21.3\n"}},
        {"spec": {"args": ["--kubectl-delivery-image=ghcr.io/kubeflow/x@sha256:" + "a" * 64, "https://raw.githubusercontent.com/a/b:c"]}},
    ]
    pkgs = [{"kind": "helm", "values": {"jobset": {"image": {"repository": "registry.k8s.io/jobset/jobset", "tag": "v0.12.0"}}}}]
    assert inventory.images(objs, pkgs) == [
        "docker.io/library/alpine:3.21.3",
        "ghcr.io/kubeflow/x@sha256:" + "a" * 64,
        "nvcr.io/nvidia/mellanox/doca-driver:25.10-0.7.0.0-0",
        "nvcr.io/nvidia/pytorch:25.10-py3",
        "registry.k8s.io/jobset/jobset:v0.12.0",
    ]
