"""Kubeflow Training Operator v1 (PyTorchJob, MPIJob v1, TFJob) from its standalone kustomize overlay.

Upstream behaviour this relies on (kubeflow/trainer@v1.9.4, read at the tag):
- The manager container runs `command: [/manager]` with no args (manifests/base/deployment.yaml), so every flag
  below is appended to its args.
- `--gang-scheduler-name=volcano` makes it create a Volcano PodGroup per job; it then exits (os.Exit(1), a
  crash loop) while the PodGroup CRD is missing (cmd/training-operator.v1/main.go `validateCRD`), so the
  overlay waits for the Volcano release.
- It injects images into job pods: `init-pytorch` (default `alpine:3.10`) and the MPI launcher's
  `kubectl-delivery` (default `:latest`), set by `--pytorch-init-container-image` and
  `--mpi-kubectl-delivery-image` (pkg/config/config.go, main.go).
- `init-pytorch` comes from a Go html/template (fields .InitContainerImage, .MaxTries, .MasterAddr) read once
  from `--pytorch-init-container-template-file`; a missing file silently falls back to the built-in template,
  whose requests differ from its limits (pkg/controller.v1/pytorch/initcontainer.go). fastpath mounts its own
  template from a ConfigMap, with requests == limits, so worker pods can be Guaranteed.

How it is installed: fastpath writes a kustomization (`kustomization()`) whose one resource is the overlay at its
git ref and whose patches are all fastpath changes: the overlay's bare Namespace left out, the manager's flags,
the template's mount and hash. `kustomize.v2.Directory` hands it to the Kubernetes provider, which fetches the
overlay (kustomize's remote loader: `git` at the ref), builds it and registers every object itself. The program
never holds the overlay's objects (six CRDs, megabytes that the SDK would otherwise wrap value by value); the
render shows the kustomization, and tests build it over the upstream overlay when they have it
(upstream.lock.yaml).

Stacks installed by kustomize.Directory (v1), which registered every object from the program, keep their objects:
the engine gives a child of an aliased parent the aliases its URN had under the parent's old type
(pulumi/pulumi@v3.259.0:pkg/resource/deploy/step_generator.go, alias inheritance), so the Directory aliased to
v1's type, with no name prefix, names every object as before. Should that ever miss (a CLI that drops the alias of
a provider's component, before 3.217.0: pulumi/pulumi#21050), preview shows each object created and deleted and
`pulumi up` fails on "already exists"; upserting then deletes the old objects by name
(pulumi-kubernetes@v4.32.0:provider/pkg/await/await.go), CRDs with every job of their kind. Hence the CLI
version refused below and in Pulumi.yaml, and CRDs protected and retained.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pulumi
import yaml
from pulumi.runtime import settings
from pulumi.runtime.mocks import MockMonitor

from components import k8s, versions
from components.model.config import PlatformConfig
from components.platform import mirrors, placement

ROOT = Path(__file__).resolve().parents[2]
BUILD_DIR = Path(".cache") / "kustomize"

NAMESPACE = "kubeflow"  # the overlay's `namespace:`
COMPONENT = "training-operator"
DEPLOYMENT = "training-operator"
CONTAINER = "training-operator"
GANG_FLAG = "--gang-scheduler-name=volcano"
KUEUE_SCHEMES = ["--enable-scheme=pytorchjob", "--enable-scheme=tfjob"]
INIT_TEMPLATE_CONFIGMAP = "training-operator-init-container"
INIT_TEMPLATE_KEY = "initContainer.yaml"
INIT_TEMPLATE_DIR = "/etc/config"
INIT_TEMPLATE_VOLUME = "init-container-template"
TEMPLATE_HASH_ANNOTATION = "fastpath.dev/init-container-template-sha256"
V1_TYPE = "kubernetes:kustomize:Directory"
CRD_TYPE = "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"
# The first CLI that passes a provider's component its aliases (pulumi/pulumi#21050); Pulumi.yaml says the same.
REQUIRED_PULUMI = ">=3.217.0"

# Upstream's default template with requests == limits (its limits): the pod's QoS class is Guaranteed only if
# every container, init containers included, has requests equal to limits.
INIT_CONTAINER_TEMPLATE = (
    "- name: init-pytorch\n"
    "  image: {{.InitContainerImage}}\n"
    "  imagePullPolicy: IfNotPresent\n"
    "  resources:\n"
    "    limits: {cpu: 100m, memory: 20Mi}\n"
    "    requests: {cpu: 100m, memory: 20Mi}\n"
    "  command: ['sh', '-c', 'err=1;for i in $(seq {{.MaxTries}}); do if nslookup {{.MasterAddr}}; "
    "then err=0 && break; fi;echo waiting for master; sleep 2; done; exit $err']\n"
)


def overlay_url(ref: str) -> str:
    """The overlay at `ref` in the form kustomize's remote loader fetches: `//` before the folder and `?ref=`
    (`git fetch --depth=1 <repository> <ref>`; tests/test_training_operator.py watches kustomize do it), at the
    commit the ref names where fastpath knows it (versions.TRAINING_OPERATOR_COMMITS)."""
    commit = versions.TRAINING_OPERATOR_COMMITS.get(ref, ref)
    return f"{versions.TRAINING_OPERATOR_REPO}//{versions.TRAINING_OPERATOR_OVERLAY_PATH}?ref={commit}"


def manager_flags(platform: PlatformConfig) -> list[str]:
    """The flags fastpath adds to the manager container, in order."""
    flags = [GANG_FLAG] if platform.volcano_enabled else []
    if platform.kueue_enabled:
        # Only the kinds Kueue admits (its kubeflow.org/pytorchjob and tfjob integrations): an MPIJob v1, XGBoostJob,
        # PaddleJob or JAXJob would otherwise run outside any quota; without their controllers (and webhooks, which
        # the overlay still names, so their creation is refused) they cannot (kubeflow/trainer@v1.9.4:
        # cmd/training-operator.v1/main.go setupControllers, --enable-scheme).
        flags += KUEUE_SCHEMES
    return [
        *flags,
        f"--pytorch-init-container-image={mirrors.image(versions.PYTORCH_INIT_CONTAINER_IMAGE, platform.mirrors)}",
        f"--pytorch-init-container-template-file={INIT_TEMPLATE_DIR}/{INIT_TEMPLATE_KEY}",
        "--mpi-kubectl-delivery-image="
        + mirrors.image(
            versions.KUBECTL_DELIVERY_FOR_TRAINING_OPERATOR[platform.versions.training_operator], platform.mirrors
        ),
    ]


def init_template_configmap(platform: PlatformConfig) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": k8s.meta(INIT_TEMPLATE_CONFIGMAP, platform.cluster, COMPONENT, namespace=NAMESPACE),
        "data": {INIT_TEMPLATE_KEY: INIT_CONTAINER_TEMPLATE},
    }


# The overlay's bare `kubeflow` Namespace, left out: fastpath creates it with deliberate Pod Security labels, before
# the ConfigMap the Deployment mounts.
OMIT_NAMESPACE = {"$patch": "delete", "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}


def deployment_ops(flags: list[str], placement_spec: dict | None = None) -> list[dict]:
    """The operator Deployment's JSON patch (RFC 6902): `flags` as the manager's args (upstream has none), the
    init-container template mounted from its ConfigMap after upstream's mounts and volumes, and the template's hash
    on the pod template, so a changed template restarts the operator (it reads the file once). The `test` stops the
    build, rather than patch another container, should upstream ever put one before the manager."""
    pod = "/spec/template"
    manager = f"{pod}/spec/containers/0"
    digest = hashlib.sha256(INIT_CONTAINER_TEMPLATE.encode()).hexdigest()
    mount = {"name": INIT_TEMPLATE_VOLUME, "mountPath": INIT_TEMPLATE_DIR, "readOnly": True}
    return [
        {"op": "test", "path": f"{manager}/name", "value": CONTAINER},
        {"op": "add", "path": f"{manager}/args", "value": flags},
        {"op": "add", "path": f"{manager}/volumeMounts/-", "value": mount},
        {
            "op": "add",
            "path": f"{pod}/spec/volumes/-",
            "value": {"name": INIT_TEMPLATE_VOLUME, "configMap": {"name": INIT_TEMPLATE_CONFIGMAP}},
        },
        {
            "op": "add",
            "path": f"{pod}/metadata/annotations/{TEMPLATE_HASH_ANNOTATION.replace('/', '~1')}",
            "value": digest,
        },
        # kubeflow/trainer@v1.9.4:manifests/base/deployment.yaml sets no nodeSelector nor tolerations: added whole.
        *({"op": "add", "path": f"{pod}/spec/{key}", "value": value} for key, value in (placement_spec or {}).items()),
    ]


def _overlay_image(platform: PlatformConfig) -> dict:
    """The overlay's one image renamed to the mirror's by kustomize's `images:` (matched by name; the manager's
    flags name the images it injects). The tag is restated so the inventory names the image whole."""
    name, _, tag = versions.TRAINING_OPERATOR_IMAGE_FOR[platform.versions.training_operator].rpartition(":")
    return {"name": name, "newName": mirrors.image(name, platform.mirrors), "newTag": tag}


def kustomization(platform: PlatformConfig) -> dict:
    """What the provider builds: the overlay at the stack's ref, with fastpath's patches."""
    deployment = {"group": "apps", "version": "v1", "kind": "Deployment", "name": DEPLOYMENT, "namespace": NAMESPACE}
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        # A disconnected cluster's builder fetches the overlay from the stack's mirror (a git mirror or a path).
        "resources": [
            platform.mirrors.training_operator
            if platform.mirrors is not None and platform.mirrors.training_operator
            else overlay_url(platform.versions.training_operator)
        ],
        **({"images": [_overlay_image(platform)]} if platform.mirrors is not None else {}),
        "patches": [
            {"patch": yaml.safe_dump(OMIT_NAMESPACE, sort_keys=False)},
            {
                "target": deployment,
                "patch": yaml.safe_dump(
                    deployment_ops(manager_flags(platform), placement.pod_placement(platform.nodes.system)),
                    sort_keys=False,
                ),
            },
        ],
    }


class _Literal(yaml.SafeDumper):
    """Patches (strings of several lines) as `|` blocks, so the file reads like a hand-written kustomization."""


_Literal.add_representer(
    str, lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", v, style="|" if "\n" in v else None)
)


def write_kustomization(doc: dict) -> str:
    """Write `doc` where the provider reads it, under a name made of its content (so runs, stacks and concurrent
    `pulumi up`s never overwrite each other's); the folder relative to the project directory, in which `pulumi`
    starts both this program and the provider, so the Directory's input is the same on every machine."""
    text = yaml.dump(doc, Dumper=_Literal, sort_keys=False)
    folder = BUILD_DIR / f"{COMPONENT}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    target = ROOT / folder / "kustomization.yaml"
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".kustomization.")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, target)
    return str(folder)


def protect_crds(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
    """The overlay's CRDs are kept by Pulumi: deleting one deletes every PyTorchJob, MPIJob or TFJob and its pods
    with it, and the overlay does nothing against that. So Pulumi refuses to delete or replace one (protect) and,
    once unprotected, only forgets it (retain_on_delete): removing a job kind is a deliberate `kubectl delete crd`.
    The engine runs it on each object the provider registers under the Directory."""
    if args.type_ != CRD_TYPE:
        return None
    kept = pulumi.ResourceOptions(protect=True, retain_on_delete=True)
    return pulumi.ResourceTransformResult(args.props, pulumi.ResourceOptions.merge(args.opts, kept))


def require_engine() -> None:
    """Refuse, before the overlay is registered, what would otherwise go wrong in the middle of `pulumi up`: a CLI
    that drops the Directory's alias (see the module docstring), and no `git` for the provider's kustomize, which
    runs `git fetch` for the overlay (kubernetes-sigs/kustomize api/internal/git/gitrunner.go). Not under the mocks,
    which have neither a CLI nor a provider."""
    if isinstance(settings.get_monitor(), MockMonitor):
        return
    pulumi.runtime.require_pulumi_version(REQUIRED_PULUMI)
    if shutil.which("git") is None:
        raise pulumi.RunError(
            "the Training Operator's overlay is fetched with `git` by the Kubernetes provider (kustomize.v2.Directory),"
            " and `git` is not on PATH here: install it where `pulumi` runs"
        )


@dataclass
class TrainingOperatorArgs:
    platform: PlatformConfig
    after: list = field(default_factory=list)
    """What the operator waits for: the Volcano release when gang scheduling is on (PodGroup CRD)."""


class TrainingOperator(pulumi.ComponentResource):
    """Installs the Kubeflow Training Operator (git ref pinned in components/versions.py) from its standalone
    overlay on GitHub, with `--gang-scheduler-name=volcano` when Volcano is enabled, pinned injected images and
    a Guaranteed `init-pytorch`. It owns the `mpijobs.kubeflow.org` CRD (v1): never install mpi-operator
    beside it.

    Needs: GitHub reachable, and `git`, where `pulumi up` runs (the provider's kustomize clones the overlay); the
    program writes its kustomization under .cache/kustomize/ in the project directory.
    Ordering: the `kubeflow` Namespace, then the init-container ConfigMap, then the overlay, which also waits for
    `args.after`. The provider builds and creates the overlay's objects only once the Directory is registered,
    after all of these; the Directory is done once every object is (the Deployment ready): `ready`.

    Example:
        TrainingOperator("training-operator", TrainingOperatorArgs(platform=cfg.platform, after=[volcano.release]))
    """

    def __init__(self, name: str, args: TrainingOperatorArgs, opts: pulumi.ResourceOptions | None = None):
        require_engine()
        super().__init__("fastpath:platform:TrainingOperator", name, None, opts)
        from pulumi_kubernetes.kustomize.v2 import Directory

        p = args.platform
        self.namespace = k8s.apply(
            k8s.namespace(
                NAMESPACE,
                p.cluster,
                COMPONENT,
                "baseline",
                "the operator runs unprivileged; it only creates job pods in the training namespaces",
            ),
            pulumi.ResourceOptions(parent=self),
        )
        self.init_template = k8s.apply(
            init_template_configmap(p), pulumi.ResourceOptions(parent=self, depends_on=[self.namespace])
        )
        self.url = (
            p.mirrors.training_operator
            if p.mirrors is not None and p.mirrors.training_operator
            else overlay_url(p.versions.training_operator)
        )
        doc = kustomization(p)
        self.directory = Directory(
            "training-operator",
            directory=write_kustomization(doc),
            # Children named as kustomize.Directory (v1) named them (`kubeflow/training-operator`, no prefix) and the
            # Directory aliased to v1's type: a stack installed by v1 keeps its objects, CRDs above all (deleting
            # one deletes every job of its kind), instead of creating them anew.
            resource_prefix="",
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[self.namespace, self.init_template, *args.after],
                aliases=[pulumi.Alias(type_=V1_TYPE)],
                transforms=[protect_crds],
            ),
        )
        # What jobs wait for: a job that depends on this remote component waits until the provider has created
        # every object of the overlay (CRDs, the webhook, the Deployment, awaited until ready).
        self.ready = pulumi.Output.from_input([self.directory])
        # Source and transformations, so the renderer's packages.yaml shows what the overlay gets beyond upstream.
        self.register_outputs(
            {"overlay": self.url, "namespace": NAMESPACE, "kustomization": doc, "protects": [CRD_TYPE]}
        )
