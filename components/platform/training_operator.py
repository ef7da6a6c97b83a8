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
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import pulumi

from components import k8s, versions
from components.model.config import PlatformConfig

NAMESPACE = "kubeflow"  # the overlay's `namespace:`
COMPONENT = "training-operator"
DEPLOYMENT = "training-operator"
CONTAINER = "training-operator"
GANG_FLAG = "--gang-scheduler-name=volcano"
INIT_TEMPLATE_CONFIGMAP = "training-operator-init-container"
INIT_TEMPLATE_KEY = "initContainer.yaml"
INIT_TEMPLATE_DIR = "/etc/config"
INIT_TEMPLATE_VOLUME = "init-container-template"
TEMPLATE_HASH_ANNOTATION = "fastpath.dev/init-container-template-sha256"

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
    """The overlay in the one form kustomize.Directory (v1) fetches at a ref: https, `/tree/<ref>/<path>`. The
    provider clones it with pulumi's gitutil, which takes the ref only from a `/tree/<ref>/` segment and drops a
    `?ref=` query, and refuses a URL without an https or ssh scheme (tests/test_training_operator.py)."""
    return f"{versions.TRAINING_OPERATOR_REPO}/tree/{ref}/{versions.TRAINING_OPERATOR_OVERLAY_PATH}"


def manager_flags(platform: PlatformConfig) -> list[str]:
    """The flags fastpath adds to the manager container, in order."""
    flags = [GANG_FLAG] if platform.components.volcano else []
    return [
        *flags,
        f"--pytorch-init-container-image={versions.PYTORCH_INIT_CONTAINER_IMAGE}",
        f"--pytorch-init-container-template-file={INIT_TEMPLATE_DIR}/{INIT_TEMPLATE_KEY}",
        f"--mpi-kubectl-delivery-image={versions.MPI_KUBECTL_DELIVERY_IMAGE}",
    ]


def init_template_configmap(platform: PlatformConfig) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": k8s.meta(INIT_TEMPLATE_CONFIGMAP, platform.cluster, COMPONENT, namespace=NAMESPACE),
        "data": {INIT_TEMPLATE_KEY: INIT_CONTAINER_TEMPLATE},
    }


def configure_deployment(obj: dict, flags: list[str]) -> None:
    """Patch the operator Deployment in place (a kustomize transformation; idempotent): `flags` appended to the
    manager's args (replacing any earlier value of the same flag), the init-container template mounted from
    its ConfigMap, and the template's hash on the pod template, so a changed template restarts the operator (it
    reads the file once)."""
    if obj.get("kind") != "Deployment" or obj.get("metadata", {}).get("name") != DEPLOYMENT:
        return
    pod = obj["spec"]["template"]
    spec = pod["spec"]
    names = {f.split("=", 1)[0] for f in flags}
    for c in spec["containers"]:
        if c.get("name") != CONTAINER:
            continue
        kept = [a for a in c.get("args") or [] if a.split("=", 1)[0] not in names]
        c["args"] = [*kept, *flags]
        mounts = [m for m in c.get("volumeMounts") or [] if m.get("name") != INIT_TEMPLATE_VOLUME]
        c["volumeMounts"] = [*mounts, {"name": INIT_TEMPLATE_VOLUME, "mountPath": INIT_TEMPLATE_DIR, "readOnly": True}]
    volumes = [v for v in spec.get("volumes") or [] if v.get("name") != INIT_TEMPLATE_VOLUME]
    spec["volumes"] = [*volumes, {"name": INIT_TEMPLATE_VOLUME, "configMap": {"name": INIT_TEMPLATE_CONFIGMAP}}]
    digest = hashlib.sha256(INIT_CONTAINER_TEMPLATE.encode()).hexdigest()
    pod.setdefault("metadata", {}).setdefault("annotations", {})[TEMPLATE_HASH_ANNOTATION] = digest


def omit_namespace(obj: dict, opts: pulumi.ResourceOptions | None = None) -> None:
    """Drop the overlay's bare `kubeflow` Namespace (a kustomize transformation): fastpath creates it with
    deliberate Pod Security labels, before the ConfigMap the Deployment mounts."""
    if obj.get("kind") == "Namespace" and obj.get("metadata", {}).get("name") == NAMESPACE:
        obj.clear()
        obj.update({"apiVersion": "v1", "kind": "List", "items": []})


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

    Needs: GitHub reachable from where `pulumi up` runs (the provider clones the overlay).
    Ordering: the `kubeflow` Namespace, then the init-container ConfigMap, then the overlay, which also waits for
    `args.after` (every object of the overlay is given these dependencies: a component's own do not hold back
    its children).

    Example:
        TrainingOperator("training-operator", TrainingOperatorArgs(platform=cfg.platform, after=[volcano.release]))
    """

    def __init__(self, name: str, args: TrainingOperatorArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("fastpath:platform:TrainingOperator", name, None, opts)
        import pulumi_kubernetes

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
        deps = [self.namespace, self.init_template, *args.after]
        flags = manager_flags(p)

        def wait(obj: dict, opts: pulumi.ResourceOptions) -> None:
            opts.depends_on = deps

        self.url = overlay_url(p.versions.training_operator)
        self.directory = pulumi_kubernetes.kustomize.Directory(
            "training-operator",
            directory=self.url,
            transformations=[omit_namespace, lambda obj, _opts: configure_deployment(obj, flags), wait],
            opts=pulumi.ResourceOptions(parent=self, depends_on=deps),
        )
        # Every object of the overlay (CRDs, the webhook, the Deployment, which Pulumi awaits until it is ready):
        # what jobs wait for. They exist only once the provider has built the overlay, so this is an Output;
        # a job's depends_on=[platform] alone would not hold it back (the SDK expands a component to the children
        # it has so far).
        self.ready = self.directory.resources.apply(lambda rs: list(rs.values()))
        # What the overlay gets beyond upstream, so the renderer's packages.yaml shows it for review.
        self.register_outputs({"overlay": self.url, "namespace": NAMESPACE, "managerArgs": flags})
