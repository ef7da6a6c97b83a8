"""Training Operator install: the overlay URL the provider really fetches, and the operator Deployment as patched."""

import copy
import re
from urllib.parse import urlsplit

import pytest
import yaml

from components import versions
from components.model.config import PlatformConfig
from components.platform import training_operator
from tests.conftest import SHARED, stack_platform

OVERLAY_FILE = SHARED / "manifests" / "training-operator-v1.9.4-standalone.yaml"
SHA = re.compile(r"^[0-9a-fA-F]{40}$")
# The refs kubeflow/trainer advertises that could match `v1.9.4/...`: the tag (no branch of that name).
REMOTE_REFS = ["HEAD", "refs/heads/master", "refs/heads/release-1.9", "refs/tags/v1.9.4", "refs/tags/v1.9.3"]


def parse_git_repo_url(raw: str) -> tuple[str, str]:
    """pulumi/pulumi@sdk/v3.246.0:sdk/go/common/util/gitutil/git.go `parseGitRepoURLParts` (https and ssh only;
    the scp-style ssh normalisation is left out): (clone URL, the path after the repository)."""
    u = urlsplit(raw)
    if u.scheme not in ("https", "ssh"):
        raise ValueError(f"invalid URL scheme: {u.scheme}")
    path = u.path.removeprefix("/")
    parts = path.split("/")
    if len(parts) < 2:
        raise ValueError("invalid Git URL")
    if (i := path.rfind(".git")) != -1:  # the last `.git` ends the repository
        return f"{u.scheme}://{u.netloc}/{path[: i + 4]}", path[i + 4 :].strip("/")
    owner, repo = parts[0], parts[1]
    if not owner or not repo:
        raise ValueError("invalid Git URL")
    repo = repo if repo.endswith(".git") else repo + ".git"
    # Only u.path is read: a query (`?ref=`) or fragment is dropped without a word.
    return f"{u.scheme}://{u.netloc}/{owner}/{repo}", "/".join(parts[2:]).removesuffix("/")


def ref_and_subdir(url_path: str, remote_refs: list[str]) -> tuple[str, str]:
    """Same file, `GetGitReferenceNameOrHashAndSubDirectory`: the ref only from a `tree/<ref>/` segment,
    matched against the remote's branches and tags, longest name first; otherwise HEAD (which
    `RetrieveGitFolder` clones as master, then main)."""
    if url_path == "":
        return "HEAD", ""
    parts = url_path.removeprefix("/").removesuffix("/").split("/")
    if any(p in (".", "..") for p in parts):
        raise ValueError("invalid Git URL")
    if parts[0] != "tree":
        return "HEAD", "/".join(parts)
    if len(parts) < 2:
        raise ValueError("invalid Git URL")
    if SHA.match(parts[1]):
        return parts[1], "/".join(parts[2:])

    def short(ref: str) -> str:
        return ref.split("/", 2)[2] if ref.startswith(("refs/heads/", "refs/tags/")) else ref

    rest = "/".join(parts[1:]) + "/"
    for ref in sorted(remote_refs, key=lambda r: len(short(r)), reverse=True):
        if rest.startswith(short(ref) + "/"):
            return ref, rest[len(short(ref)) + 1 :].removesuffix("/")
    raise ValueError("invalid Git URL")


def provider_fetches(directory: str) -> tuple[str, str, str]:
    """What kustomize.Directory (v1) clones for `directory`: pulumi/pulumi-kubernetes@master
    provider/pkg/provider/invoke_kustomize.go `kustomizeDirectory` treats a path that does not exist locally as
    a git URL and hands it to pulumi's `RetrieveGitFolder` (repository, ref, sub-directory)."""
    repo, path = parse_git_repo_url(directory)
    ref, subdir = ref_and_subdir(path, REMOTE_REFS)
    return repo, ref, subdir


def test_overlay_url_fetches_the_pinned_tag_and_overlay():
    """The exact string fastpath emits, through the provider's parsing rules (pulumi/pulumi
    sdk/go/common/util/gitutil/git.go, pulumi/pulumi-kubernetes invoke_kustomize.go)."""
    url = training_operator.overlay_url(versions.TRAINING_OPERATOR_REF)
    assert url == "https://github.com/kubeflow/trainer/tree/v1.9.4/manifests/overlays/standalone"
    assert provider_fetches(url) == ("https://github.com/kubeflow/trainer.git", "refs/tags/v1.9.4", "manifests/overlays/standalone")


@pytest.mark.parametrize(
    ("directory", "outcome"),
    [
        # kustomize's remote form without a scheme: refused before anything is cloned.
        ("github.com/kubeflow/trainer.git/manifests/overlays/standalone?ref=v1.9.4", "invalid URL scheme: "),
        # With a scheme the query is dropped: the default branch, silently, not v1.9.4.
        ("https://github.com/kubeflow/trainer.git/manifests/overlays/standalone?ref=v1.9.4", ("https://github.com/kubeflow/trainer.git", "HEAD", "manifests/overlays/standalone")),
    ],
)
def test_forms_the_provider_does_not_fetch_at_a_ref(directory, outcome):
    """Why not the kustomize-style URL fastpath used before: the v1 provider does not run kustomize's remote
    loader for the top-level directory (pulumi/pulumi sdk/go/common/util/gitutil/git.go)."""
    if isinstance(outcome, str):
        with pytest.raises(ValueError, match=re.escape(outcome)):
            provider_fetches(directory)
    else:
        assert provider_fetches(directory) == outcome


def upstream_objects() -> list[dict]:
    return [d for d in yaml.safe_load_all(OVERLAY_FILE.read_text()) if d]


def upstream_deployment() -> dict:
    (dep,) = [o for o in upstream_objects() if o["kind"] == "Deployment"]
    return dep


def cfg(**components) -> PlatformConfig:
    p = stack_platform("prod-ib")
    p.setdefault("components", {}).update(components)
    return PlatformConfig.model_validate(p)


FLAGS = [
    "--gang-scheduler-name=volcano",
    "--pytorch-init-container-image=docker.io/library/alpine:3.21.3",
    "--pytorch-init-container-template-file=/etc/config/initContainer.yaml",
    "--mpi-kubectl-delivery-image=ghcr.io/kubeflow/training-v1/kubectl-delivery:v1-93c5489",
]


@pytest.mark.skipif(not OVERLAY_FILE.is_file(), reason="shared/upstream/manifests not beside checkout")
@pytest.mark.parametrize(("volcano", "flags"), [(True, FLAGS), (False, FLAGS[1:])])
def test_operator_deployment_as_patched(volcano, flags):
    """The real Deployment of kubeflow/trainer@v1.9.4:manifests/overlays/standalone (kustomize build): its manager
    container runs `command: [/manager]` with no args, so the flags (cmd/training-operator.v1/main.go) become
    its args; the init-container template is mounted where the flag points; nothing else changes. Applying the
    patch twice changes nothing more."""
    dep = upstream_deployment()
    before = copy.deepcopy(dep)
    assert before["spec"]["template"]["spec"]["containers"][0].get("args") is None
    manager_flags = training_operator.manager_flags(cfg(volcano=volcano))
    assert manager_flags == flags
    training_operator.configure_deployment(dep, manager_flags)
    once = copy.deepcopy(dep)
    training_operator.configure_deployment(dep, manager_flags)
    assert dep == once
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


@pytest.mark.skipif(not OVERLAY_FILE.is_file(), reason="shared/upstream/manifests not beside checkout")
def test_only_the_operator_deployment_is_patched_and_the_namespace_is_ours():
    """The overlay's other objects pass through unchanged; its bare `kubeflow` Namespace is left out (fastpath
    creates it, with Pod Security labels, before the ConfigMap the Deployment mounts)."""
    for obj in upstream_objects():
        seen = copy.deepcopy(obj)
        training_operator.configure_deployment(seen, FLAGS)
        training_operator.omit_namespace(seen)
        if obj["kind"] == "Namespace":
            assert obj["metadata"]["name"] == training_operator.NAMESPACE
            assert seen == {"apiVersion": "v1", "kind": "List", "items": []}
        elif obj["kind"] != "Deployment":
            assert seen == obj
    namespaces = {o["metadata"].get("namespace") for o in upstream_objects()} - {None}
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


@pytest.mark.skipif(not OVERLAY_FILE.is_file(), reason="shared/upstream/manifests not beside checkout")
def test_packages_show_the_overlay_as_applied(rendered):
    """packages.yaml lists what the overlay applies, what fastpath leaves out and, in full, what it changes,
    from the real overlay (the renderer answers the provider's kustomize call with it)."""
    (pkg,) = [p for p in rendered("prod-ib").packages if p["kind"] == "kustomize"]
    assert pkg["source"] == training_operator.overlay_url("v1.9.4")
    assert pkg["namespace"] == "kubeflow"
    assert pkg["omitted"] == ["Namespace/kubeflow"]
    assert "Deployment/kubeflow/training-operator" in pkg["objects"]
    assert "CustomResourceDefinition/mpijobs.kubeflow.org" in pkg["objects"]
    (dep,) = pkg["changed"]
    assert dep["spec"]["template"]["spec"]["containers"][0]["args"] == FLAGS
    assert pkg["waitsFor"] == ["ConfigMap/kubeflow/training-operator-init-container", "Namespace/kubeflow", "helm/volcano"]
