"""Every object every stack renders validates against its real upstream schema, unknown fields refused."""

import pytest

from tests.conftest import SHARED, STACKS
from tools import schemas

pytestmark = pytest.mark.skipif(not (SHARED / "crds").is_dir(), reason="shared/upstream/crds not beside checkout")


@pytest.mark.parametrize("stack", STACKS)
def test_every_rendered_object_validates(stack, rendered):
    objs = rendered(stack).objects
    assert objs
    problems = [f"{o['kind']} {o['metadata'].get('namespace', '')}/{o['metadata']['name']}: {e}" for o in objs for e in schemas.validate(o)]
    assert problems == []


# The validator itself must refuse what the API server would: these must fail.
BROKEN = [
    (
        {"apiVersion": "mellanox.com/v1alpha1", "kind": "NicClusterPolicy", "metadata": {"name": "nic-cluster-policy"}, "spec": {"nvIpam": {"image": "nvidia-k8s-ipam", "enableWebhok": False}}},
        "enableWebhok",
    ),
    ({"apiVersion": "nv-ipam.nvidia.com/v1alpha1", "kind": "IPPool", "metadata": {"name": "p", "namespace": "n"}, "spec": {"subnet": "10.0.0.0/24"}}, "perNodeBlockSize"),
    ({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "c"}, "spec": {"accesModes": ["ReadWriteMany"]}}, "accesModes"),
    ({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "q"}, "spec": {"weight": "heavy"}}, "weight"),
    ({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition", "metadata": {"name": "n", "namespace": "t", "labels": {"x": 1}}, "spec": {"config": "{}"}}, "labels.x"),
    ({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}, "no upstream CRD"),
]


@pytest.mark.parametrize(("obj", "needle"), BROKEN, ids=[b[0]["kind"] for b in BROKEN])
def test_validator_refuses_broken_objects(obj, needle):
    problems = schemas.validate(obj)
    assert any(needle in p for p in problems), problems
