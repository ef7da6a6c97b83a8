"""Training Operator install: the overlay URL kustomize really fetches, fastpath's kustomization, and the objects it
builds from the upstream overlay (upstream.lock.yaml), as the provider builds them at `pulumi up`."""

import copy
import functools
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pulumi
import pytest
import yaml

from components import versions
from components.model.config import PlatformConfig
from components.platform import training_operator
from tests.conftest import ROOT, stack_platform
from tools import mocks, upstream
from tools.manifests import LOADER

OVERLAY = f"manifests/training-operator-{versions.TRAINING_OPERATOR_REF}-standalone.yaml"


def kustomize() -> list[str]:
    """kubectl's kustomize (the one that built the locked overlay) or a standalone kustomize."""
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    pytest.skip("needs kubectl or kustomize on PATH")


def git_fetches(tmp_path, directory: str) -> str:
    """The `git fetch` kustomize's remote loader runs for `directory` as a kustomization's resource, seen with
    GIT_TRACE; a proxy that refuses every connection stops it there, with or without a network."""
    if not shutil.which("git"):
        pytest.skip("needs git on PATH")
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({"resources": [directory]}))
    env = {**os.environ, "GIT_TRACE": "1", "GIT_TERMINAL_PROMPT": "0", "https_proxy": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9"}
    out = subprocess.run([*kustomize(), str(tmp_path)], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode != 0, "nothing may be fetched through a refusing proxy"
    (fetch,) = set(re.findall(r"trace: built-in: (git fetch [^\n']*)", out.stderr))
    return fetch.strip()


def test_overlay_url_fetches_the_pinned_tag_and_overlay(tmp_path):
    """The exact string fastpath emits, through kustomize's own remote loader (the provider's kustomize.v2
    Directory builds fastpath's kustomization with the same loader): the commit the tag names, shallow, from the
    repository (GitHub serves a full commit id to `git fetch`)."""
    url = training_operator.overlay_url(versions.TRAINING_OPERATOR_REF)
    commit = "4445c12aa62e4345b0c2c6ac9b215a70eca46ed7"  # kubeflow/trainer: git rev-parse v1.9.4^{commit}
    assert url == f"https://github.com/kubeflow/trainer//manifests/overlays/standalone?ref={commit}"
    assert git_fetches(tmp_path, url) == f"git fetch --depth=1 https://github.com/kubeflow/trainer {commit}"


def test_forms_the_provider_does_not_fetch_at_a_ref(tmp_path):
    """Why not the GitHub `/tree/<ref>/` form fastpath gave kustomize.Directory (v1): kustomize takes `tree/v1.9.4/...`
    for a folder and fetches the default branch, silently."""
    v1_form = "https://github.com/kubeflow/trainer/tree/v1.9.4/manifests/overlays/standalone"
    assert git_fetches(tmp_path, v1_form) == "git fetch --depth=1 https://github.com/kubeflow/trainer HEAD"


def test_the_lock_pins_the_overlay_fastpath_installs():
    """The overlay the tests build from (upstream.lock.yaml) is the one a stack installs by default."""
    assert upstream.lock()[OVERLAY].kustomize == training_operator.overlay_url(versions.TRAINING_OPERATOR_REF).replace(
        versions.TRAINING_OPERATOR_COMMITS[versions.TRAINING_OPERATOR_REF], versions.TRAINING_OPERATOR_REF
    )


def cfg(**components) -> PlatformConfig:
    p = stack_platform("prod-ib")
    p.setdefault("components", {}).update(components)
    return PlatformConfig.model_validate(p)


def build(doc: dict) -> list[dict]:
    """`doc` built as the provider builds it, the remote overlay replaced by its locked build (kustomize's default
    load restrictions keep resources inside the folder: the file is copied there)."""
    return copy.deepcopy(_build(json.dumps(doc, sort_keys=True)))


@functools.cache
def _build(doc: str) -> list[dict]:
    source = upstream.path(OVERLAY)
    command = kustomize()
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copyfile(source, Path(tmp) / "overlay.yaml")
        (Path(tmp) / "kustomization.yaml").write_text(yaml.safe_dump({**json.loads(doc), "resources": ["overlay.yaml"]}))
        out = subprocess.run([*command, tmp], capture_output=True, text=True, timeout=300, check=True)
    return [d for d in yaml.load_all(out.stdout, Loader=LOADER) if d]


@functools.cache
def _upstream_objects() -> list[dict]:
    return [d for d in yaml.load_all(upstream.path(OVERLAY).read_text(), Loader=LOADER) if d]


def upstream_objects() -> list[dict]:
    return copy.deepcopy(_upstream_objects())


def upstream_deployment() -> dict:
    (dep,) = [o for o in upstream_objects() if o["kind"] == "Deployment"]
    return dep


FLAGS = [
    "--gang-scheduler-name=volcano",
    "--pytorch-init-container-image=docker.io/library/alpine:3.21.3",
    "--pytorch-init-container-template-file=/etc/config/initContainer.yaml",
    "--mpi-kubectl-delivery-image=ghcr.io/kubeflow/training-v1/kubectl-delivery:v1-93c5489",
]


@pytest.mark.parametrize(("volcano", "flags"), [(True, FLAGS), (False, FLAGS[1:])])
def test_operator_deployment_as_patched(volcano, flags):
    """The real Deployment of kubeflow/trainer@v1.9.4:manifests/overlays/standalone (kustomize build): its manager
    container runs `command: [/manager]` with no args, so the flags (cmd/training-operator.v1/main.go) become
    its args; the init-container template is mounted where the flag points; nothing else changes."""
    before = upstream_deployment()
    assert before["spec"]["template"]["spec"]["containers"][0].get("args") is None
    platform = cfg(volcano=volcano)
    manager_flags = training_operator.manager_flags(platform)
    assert manager_flags == flags
    (dep,) = [o for o in build(training_operator.kustomization(platform)) if o["kind"] == "Deployment"]
    pod = dep["spec"]["template"]
    (c,) = pod["spec"]["containers"]
    assert c["command"] == ["/manager"] and c["args"] == flags
    assert c["volumeMounts"] == [*before["spec"]["template"]["spec"]["containers"][0]["volumeMounts"], {"name": "init-container-template", "mountPath": "/etc/config", "readOnly": True}]
    assert pod["spec"]["volumes"] == [*before["spec"]["template"]["spec"]["volumes"], {"name": "init-container-template", "configMap": {"name": "training-operator-init-container"}}]
    assert set(pod["metadata"]["annotations"]) == {"sidecar.istio.io/inject", "fastpath.dev/init-container-template-sha256"}
    # Everything else is upstream's.
    c.pop("args"), c["volumeMounts"].pop(), pod["spec"]["volumes"].pop()
    pod["metadata"]["annotations"].pop("fastpath.dev/init-container-template-sha256")
    assert dep == before


def test_only_the_operator_deployment_is_patched_and_the_namespace_is_ours():
    """The overlay's other objects pass through unchanged; its bare `kubeflow` Namespace is left out (fastpath
    creates it, with Pod Security labels, before the ConfigMap the Deployment mounts)."""
    built = {(o["kind"], o["metadata"]["name"]): o for o in build(training_operator.kustomization(cfg()))}
    objs = upstream_objects()
    for obj in objs:
        seen = built.get((obj["kind"], obj["metadata"]["name"]))
        if obj["kind"] == "Namespace":
            assert obj["metadata"]["name"] == training_operator.NAMESPACE
            assert seen is None
        elif obj["kind"] != "Deployment":
            assert seen == obj
    assert len(built) == len(objs) - 1
    namespaces = {o["metadata"].get("namespace") for o in objs} - {None}
    assert namespaces == {training_operator.NAMESPACE}


def render_template(template: str, image: str, max_tries: int, master: str) -> str:
    """Go html/template with the three fields kubeflow/trainer@v1.9.4:pkg/controller.v1/pytorch/initcontainer.go
    passes (InitContainerImage, MaxTries, MasterAddr); our values need no escaping."""
    fields = set(re.findall(r"{{\s*\.(\w+)\s*}}", template))
    assert fields <= {"InitContainerImage", "MaxTries", "MasterAddr"}, fields
    return template.replace("{{.InitContainerImage}}", image).replace("{{.MaxTries}}", str(max_tries)).replace("{{.MasterAddr}}", master)


def test_init_pytorch_is_guaranteed():
    """The operator unmarshals the rendered template into []corev1.Container (initcontainer.go); a pod is
    Guaranteed only if every container, init containers included, has requests equal to limits. Upstream's
    built-in template has requests 50m/10Mi under limits 100m/20Mi."""
    rendered = render_template(training_operator.INIT_CONTAINER_TEMPLATE, "docker.io/library/alpine:3.21.3", 100, "llama-master-0")
    (c,) = yaml.safe_load(rendered)
    assert c["name"] == "init-pytorch" and c["image"] == "docker.io/library/alpine:3.21.3"
    assert c["resources"]["requests"] == c["resources"]["limits"] == {"cpu": "100m", "memory": "20Mi"}
    assert c["command"][:2] == ["sh", "-c"] and "nslookup llama-master-0" in c["command"][2]
    assert "seq 100" in c["command"][2]


def test_injected_images_are_pinned():
    """kubeflow/trainer@v1.9.4:pkg/config/config.go defaults to `alpine:3.10` and `kubectl-delivery:latest`.
    kubectl-delivery carries the tag of the same CI run as the overlay's operator image (v1-93c5489:
    .github/workflows/publish-core-images.yaml)."""
    overlay_operator_tag = "v1-93c5489"  # manifests/overlays/standalone/kustomization.yaml `newTag`
    assert versions.MPI_KUBECTL_DELIVERY_IMAGE.endswith(f":{overlay_operator_tag}")
    assert re.fullmatch(r"docker\.io/library/alpine:3\.\d+\.\d+", versions.PYTORCH_INIT_CONTAINER_IMAGE)


def test_packages_show_the_overlay_source_and_kustomization(rendered):
    """packages.yaml shows the overlay's source at its ref and fastpath's kustomization of it, nothing built from
    upstream (the render reads no file outside the repository); the kustomization is the file the Directory
    hands the provider."""
    run = rendered("prod-ib").run
    (pkg,) = [p for p in rendered("prod-ib").packages if p["kind"] == "kustomize"]
    assert pkg["source"] == training_operator.overlay_url("v1.9.4") and pkg["source"].endswith("?ref=4445c12aa62e4345b0c2c6ac9b215a70eca46ed7")
    assert pkg["namespace"] == "kubeflow"
    assert pkg["kustomization"] == training_operator.kustomization(cfg())
    assert pkg["kustomization"]["resources"] == [pkg["source"]]
    ops = yaml.safe_load(pkg["kustomization"]["patches"][1]["patch"])
    assert {"op": "add", "path": "/spec/template/spec/containers/0/args", "value": FLAGS} in ops
    assert pkg["waitsFor"] == ["ConfigMap/kubeflow/training-operator-init-container", "Namespace/kubeflow", "helm/volcano"]
    (directory,) = [r for r in run.registrations if r.type == "kubernetes:kustomize/v2:Directory"]
    written = ROOT / directory.inputs["directory"] / "kustomization.yaml"
    assert yaml.safe_load(written.read_text()) == pkg["kustomization"]
    # No prefix: the objects keep the names kustomize.Directory (v1) gave them, so an installed stack keeps them.
    assert directory.inputs["resourcePrefix"] == ""
    assert not [r for r in run.registrations if r.parent == directory.urn], "the provider registers the objects"


def test_kustomization_follows_the_stacks_ref(monkeypatch):
    """A ref fastpath knows the kubectl-delivery image of (components/versions.py; an unknown one is refused:
    tests/test_day2.py): the overlay and the MPI launcher's image move together."""
    monkeypatch.setitem(versions.KUBECTL_DELIVERY_FOR_TRAINING_OPERATOR, "v1.9.3", "ghcr.io/kubeflow/training-v1/kubectl-delivery:v1-0000000")
    p = stack_platform("prod-ib")
    p.setdefault("versions", {})["trainingOperator"] = "v1.9.3"
    doc = training_operator.kustomization(PlatformConfig.model_validate(p))
    assert doc["resources"] == ["https://github.com/kubeflow/trainer//manifests/overlays/standalone?ref=v1.9.3"]
    assert "--mpi-kubectl-delivery-image=ghcr.io/kubeflow/training-v1/kubectl-delivery:v1-0000000" in json.dumps(doc["patches"])


# Every object kustomize.Directory (v1) registered in an installed stack, as its URN ends (40e850c's render of
# prod-ib): the Directory's type, the object's type, `namespace/name` or a cluster-scoped name, no prefix.
V1_CHILDREN = [
    "kubernetes:kustomize:Directory$kubernetes:admissionregistration.k8s.io/v1:ValidatingWebhookConfiguration::validator.training-operator.kubeflow.org",
    "kubernetes:kustomize:Directory$kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition::jaxjobs.kubeflow.org",
    "kubernetes:kustomize:Directory$kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition::mpijobs.kubeflow.org",
    "kubernetes:kustomize:Directory$kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition::paddlejobs.kubeflow.org",
    "kubernetes:kustomize:Directory$kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition::pytorchjobs.kubeflow.org",
    "kubernetes:kustomize:Directory$kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition::tfjobs.kubeflow.org",
    "kubernetes:kustomize:Directory$kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition::xgboostjobs.kubeflow.org",
    "kubernetes:kustomize:Directory$kubernetes:apps/v1:Deployment::kubeflow/training-operator",
    "kubernetes:kustomize:Directory$kubernetes:core/v1:Secret::kubeflow/training-operator-webhook-cert",
    "kubernetes:kustomize:Directory$kubernetes:core/v1:Service::kubeflow/training-operator",
    "kubernetes:kustomize:Directory$kubernetes:core/v1:ServiceAccount::kubeflow/training-operator",
    "kubernetes:kustomize:Directory$kubernetes:rbac.authorization.k8s.io/v1:ClusterRole::training-operator",
    "kubernetes:kustomize:Directory$kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding::training-operator",
]


def test_the_directory_keeps_v1s_names_and_its_crds(rendered):
    """The engine hands each object the provider registers the alias its URN had under v1's Directory type
    (parent's alias inherited), which holds only with no prefix; the CRD transform rides along to those objects."""
    run = rendered("prod-ib").run
    (directory,) = [r for r in run.registrations if r.type == "kubernetes:kustomize/v2:Directory"]
    assert directory.aliases == [{"type": training_operator.V1_TYPE}] == [{"type": "kubernetes:kustomize:Directory"}]
    assert directory.inputs["resourcePrefix"] == ""
    assert directory.transforms == [training_operator.protect_crds]
    assert len(V1_CHILDREN) == 13 and sum(training_operator.CRD_TYPE in u for u in V1_CHILDREN) == 6


def child(type_: str, name: str) -> pulumi.ResourceTransformArgs:
    return pulumi.ResourceTransformArgs(True, type_, name, {"metadata": {"name": name}}, pulumi.ResourceOptions(parent=None, ignore_changes=["x"]))


def test_crds_the_provider_registers_are_protected_and_retained():
    result = training_operator.protect_crds(child("kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition", "pytorchjobs.kubeflow.org"))
    assert isinstance(result, pulumi.ResourceTransformResult)
    assert result.opts.protect and result.opts.retain_on_delete
    assert result.opts.ignore_changes == ["x"] and result.props == {"metadata": {"name": "pytorchjobs.kubeflow.org"}}
    assert training_operator.protect_crds(child("kubernetes:apps/v1:Deployment", "kubeflow/training-operator")) is None


def v1_child(obj: dict) -> str:
    """The URN suffix kustomize.Directory (v1) gave `obj`: what the alias must reach."""
    api = obj["apiVersion"]
    group_version = f"core/{api}" if "/" not in api else api
    md = obj["metadata"]
    name = f"{md['namespace']}/{md['name']}" if md.get("namespace") else md["name"]
    return f"{training_operator.V1_TYPE}$kubernetes:{group_version}:{obj['kind']}::{name}"


def test_every_object_built_maps_to_its_v1_urn():
    """What the kustomization builds from the locked overlay is exactly the set v1 registered: nothing new (an
    object created anew would meet its old one at `pulumi up`), nothing lost (deleted)."""
    assert sorted(v1_child(o) for o in build(training_operator.kustomization(cfg()))) == V1_CHILDREN


def test_pulumi_yaml_requires_the_cli_the_program_requires():
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
    assert project["requiredPulumiVersion"] == training_operator.REQUIRED_PULUMI == ">=3.217.0"


def test_a_real_engine_without_git_is_refused_first(monkeypatch):
    """Outside the mocks, the CLI version and `git` are checked before anything of the operator is registered."""
    asked: list[str] = []
    monkeypatch.setattr(training_operator.settings, "get_monitor", lambda: object())
    monkeypatch.setattr(pulumi.runtime, "require_pulumi_version", asked.append)
    monkeypatch.setattr(training_operator.shutil, "which", lambda _name: None)
    with pytest.raises(pulumi.RunError, match="`git` is not on PATH"):
        training_operator.require_engine()
    assert asked == [">=3.217.0"]
    monkeypatch.setattr(training_operator.shutil, "which", lambda name: f"/usr/bin/{name}")
    training_operator.require_engine()


def test_the_mocks_need_neither_git_nor_a_cli(monkeypatch):
    monkeypatch.setattr(training_operator.shutil, "which", lambda _name: None)
    run = mocks.run("unit", {}, [], program=training_operator.require_engine)
    assert run.registrations == []
