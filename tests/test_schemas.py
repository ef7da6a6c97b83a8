"""Every object every stack renders validates against its real upstream schema, unknown fields refused."""

import re

import pytest
import yaml

from tests.conftest import ROOT, STACKS
from tools import schemas, upstream
from tools.manifests import LOADER, load


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


SUMMARY = re.compile(r"^(?P<where>\S+): (?P<n>\d+) objects valid \((?P<core>\d+) core, (?P<custom>\d+) custom\)$")


def test_cli_checks_a_render_against_a_crd_folder_and_ends_with_a_summary(capsys):
    manifests = ROOT / "rendered" / "prod-ib" / "manifests.yaml"
    assert schemas.main([str(manifests), "--crds", str(upstream.crds_dir())]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    m = SUMMARY.match(line)
    assert m and m["where"] == str(manifests), line
    assert int(m["n"]) == len(load([manifests])) == int(m["core"]) + int(m["custom"])
    assert int(m["custom"]) > 0 and int(m["core"]) > 0


def test_cli_takes_the_crds_of_a_cluster_as_one_list(tmp_path, capsys):
    """`kubectl get crd -o yaml` writes one List whose items carry the server's fields (status, managedFields)."""
    items = [yaml.load(f.read_text(), Loader=LOADER) for f in sorted(upstream.crds_dir().glob("*.yaml"))]
    for crd in items:
        crd["metadata"]["managedFields"] = [{"manager": "kubectl", "operation": "Apply"}]
        crd["status"] = {"acceptedNames": crd["spec"]["names"], "storedVersions": [v["name"] for v in crd["spec"]["versions"]]}
    crds = tmp_path / "crds.yaml"
    crds.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}))
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump_all([BROKEN[0][0], {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ok"}}]))
    assert schemas.main([str(broken), "--crds", str(crds)]) == 1
    *problems, last = capsys.readouterr().out.splitlines()
    assert len(problems) == 1 and "enableWebhok" in problems[0]
    assert last == f"{broken}: 2 objects checked, 1 invalid (1 core, 1 custom)"
    manifests = ROOT / "rendered" / "prod-roce" / "manifests.yaml"
    assert schemas.main([str(manifests), "--crds", str(crds)]) == 0
    assert SUMMARY.match(capsys.readouterr().out.strip())


def test_cli_without_crds_says_how_to_get_them(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(upstream, "CACHE", tmp_path / "cache")
    monkeypatch.setenv(upstream.MIRROR_ENV, str(tmp_path / "no-mirror"))
    upstream.path.cache_clear()
    try:
        assert schemas.main([str(ROOT / "rendered" / "dev" / "manifests.yaml")]) == 2
    finally:
        upstream.path.cache_clear()
    err = capsys.readouterr().err.strip()
    assert re.fullmatch(r"needs upstream crds/\S+ and \d+ more: run `make upstream` \(or pass --crds\)", err), err
