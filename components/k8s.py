"""Manifest helpers shared by every component: metadata, Pod Security labels, and registration.

Builders everywhere return plain Kubernetes manifests (dicts, camelCase keys). `apply` is the one place that
turns a manifest into a Pulumi resource, so components stay thin and tests read manifests, not resources.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from components import k8s_syntax

PART_OF = "app.kubernetes.io/part-of"
CLUSTER_LABEL = "fastpath.dev/cluster"
COMPONENT_LABEL = "fastpath.dev/component"


def labels(cluster: str, component: str) -> dict[str, str]:
    return {PART_OF: "fastpath", CLUSTER_LABEL: cluster, COMPONENT_LABEL: component}


def meta(
    name: str,
    cluster: str,
    component: str,
    namespace: str | None = None,
    annotations: dict[str, str] | None = None,
    extra_labels: dict[str, str] | None = None,
) -> dict:
    m: dict[str, Any] = {"name": name}
    if namespace:
        m["namespace"] = namespace
    m["labels"] = {**labels(cluster, component), **(extra_labels or {})}
    if annotations:
        m["annotations"] = dict(annotations)
    return m


def namespace(
    name: str, cluster: str, component: str, enforce: str, why: str, annotations: dict[str, str] | None = None
) -> dict:
    """A Namespace with Pod Security Admission labels. `enforce` is the level pods must meet; warn/audit stay
    at `baseline` so anything beyond what the namespace was opened for still shows up. `why` is recorded as an
    annotation so the choice is visible on the cluster, not only in this code."""
    psa = {
        "pod-security.kubernetes.io/enforce": enforce,
        "pod-security.kubernetes.io/warn": "baseline" if enforce == "privileged" else enforce,
        "pod-security.kubernetes.io/audit": "baseline" if enforce == "privileged" else enforce,
    }
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": meta(
            name,
            cluster,
            component,
            annotations={"fastpath.dev/pod-security": why, **(annotations or {})},
            extra_labels=psa,
        ),
    }


def resource_name(manifest: dict) -> str:
    """Deterministic Pulumi name: kind, namespace and name; unique per stack, stable across runs."""
    md = manifest["metadata"]
    parts = [manifest["kind"].lower(), md.get("namespace", ""), md["name"]]
    return "-".join(p for p in parts if p)


def _snake(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


@functools.cache
def _typed_classes() -> dict[tuple[str, str], Any]:
    # Once per process: each attribute below goes through pulumi_kubernetes' lazy modules, a measurable cost
    # when every job registers three or four objects.
    import pulumi_kubernetes as k8s

    return {
        ("v1", "Namespace"): k8s.core.v1.Namespace,
        ("v1", "PersistentVolumeClaim"): k8s.core.v1.PersistentVolumeClaim,
        ("v1", "ConfigMap"): k8s.core.v1.ConfigMap,
        ("v1", "Service"): k8s.core.v1.Service,
        ("apps/v1", "Deployment"): k8s.apps.v1.Deployment,
        ("policy/v1", "PodDisruptionBudget"): k8s.policy.v1.PodDisruptionBudget,
        ("storage.k8s.io/v1", "StorageClass"): k8s.storage.v1.StorageClass,
        ("scheduling.k8s.io/v1", "PriorityClass"): k8s.scheduling.v1.PriorityClass,
        ("rbac.authorization.k8s.io/v1", "ClusterRole"): k8s.rbac.v1.ClusterRole,
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): k8s.rbac.v1.ClusterRoleBinding,
        ("rbac.authorization.k8s.io/v1", "Role"): k8s.rbac.v1.Role,
        ("rbac.authorization.k8s.io/v1", "RoleBinding"): k8s.rbac.v1.RoleBinding,
        ("v1", "ServiceAccount"): k8s.core.v1.ServiceAccount,
    }


def apply(manifest: dict, opts: Any = None, name: str | None = None) -> Any:
    """Register `manifest` as a Pulumi resource: a typed resource for core kinds, CustomResource otherwise."""
    import pulumi_kubernetes as k8s

    api_version, kind = manifest["apiVersion"], manifest["kind"]
    fields = {k: v for k, v in manifest.items() if k not in ("apiVersion", "kind")}
    rname = name or resource_name(manifest)
    cls = _typed_classes().get((api_version, kind))
    if cls is not None:
        return cls(rname, opts=opts, **{_snake(k): v for k, v in fields.items()})
    if set(fields) - {"metadata", "spec"}:
        # Kinds with top-level fields beside spec (Kueue's WorkloadPriorityClass: value, description): the Python
        # CustomResource class takes metadata and spec only, the provider any field of the object (its TypeScript
        # twin passes `...otherFields` the same way), under the same type token and provider version.
        import pulumi

        props = {"apiVersion": api_version, "kind": kind, **fields}
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(version=k8s._utilities.get_version()))
        return pulumi.CustomResource(f"kubernetes:{api_version}:{kind}", rname, props, opts)
    return k8s.apiextensions.CustomResource(rname, api_version=api_version, kind=kind, opts=opts, **fields)


def operator_install(
    parent: Any,
    cluster: str,
    component: str,
    namespace_name: str,
    enforce: str,
    why: str,
    release: str,
    chart: str,
    repo: str | None,
    version: str,
    values: dict,
) -> tuple[Any, Any]:
    """An operator's namespace (Pod Security chosen on purpose, `why` recorded) and its Helm release in it."""
    import pulumi

    ns = apply(namespace(namespace_name, cluster, component, enforce, why), pulumi.ResourceOptions(parent=parent))
    rel = helm_release(
        release, chart, repo, version, namespace_name, values, pulumi.ResourceOptions(parent=parent, depends_on=[ns])
    )
    return ns, rel


# The GPU nodes' labels (k8s_syntax, where the stack schema reads them too).
NFD_GPU_LABEL = k8s_syntax.NFD_GPU_LABEL
GPU_PRODUCT_LABEL = k8s_syntax.GPU_PRODUCT_LABEL
DEFAULT_GPU_TAINT = "nvidia.com/gpu"  # the GPU Operator's and the Network Operator's built-in toleration


def toleration(key: str) -> dict:
    """Tolerate a NoSchedule taint whatever its value (the form the NVIDIA charts use for `nvidia.com/gpu`)."""
    return {"key": key, "operator": "Exists", "effect": "NoSchedule"}


# The taint node health puts on a quarantined node (components/platform/health.py). No training pod tolerates it;
# the platform's own DaemonSets do, so a rollout on a quarantined node still brings back its driver, device plugins
# and DCGM (without which the node never reports healthy again and stays quarantined).
QUARANTINE_TAINT = {"key": "fastpath.dev/quarantined", "value": "nvsentinel", "effect": "NoSchedule"}


def operand_tolerations(taint_key: str, quarantine: bool) -> list[dict]:
    """What the platform's node DaemonSets (GPU and Network Operator operands, NFD's worker) tolerate: the GPU
    taint(s) and, with node health, the quarantine taint."""
    return [*gpu_tolerations(taint_key), *([toleration(QUARANTINE_TAINT["key"])] if quarantine else [])]


def gpu_tolerations(taint_key: str) -> list[dict]:
    """Tolerations for the GPU nodes' taint: `nvidia.com/gpu`, plus the stack's own gpu.taintKey when it differs
    (an operand that should run on GPU nodes tainted either way)."""
    keys = [DEFAULT_GPU_TAINT] + ([taint_key] if taint_key != DEFAULT_GPU_TAINT else [])
    return [toleration(k) for k in keys]


def inherited_depends_on(opts: Any) -> Any:
    """A component's depends_on does not hold back its children: they must be given it themselves. A list of
    resources, or an Output of one (resources that exist only once an Output resolves, such as a kustomize
    Directory's objects)."""
    import pulumi

    deps = (opts.depends_on if opts else None) or []
    if isinstance(deps, pulumi.Output):
        return deps
    return deps if isinstance(deps, list) else [deps]


def plus(deps: Any, *more: Any) -> Any:
    """`deps` (a list, or an Output of one) and `more` resources: what depends_on takes."""
    import pulumi

    if isinstance(deps, pulumi.Output):
        return deps.apply(lambda ds: [*ds, *more])
    return [*deps, *more]


def helm_release(name: str, chart: str, repo: str | None, version: str, namespace: str, values: dict, opts: Any) -> Any:
    """A real Helm release (helm.v3.Release, not helm.v3/v4 Chart): the operator charts rely on Helm hooks (CRD
    upgrades, webhook certificates, admission secrets) that only a real release runs. The namespace is created
    by the component with deliberate Pod Security labels, never by Helm. `repo` None: `chart` is a full
    reference (`oci://registry/path/chart`)."""
    import pulumi_kubernetes as k8s

    return k8s.helm.v3.Release(
        name,
        name=name,
        chart=chart,
        version=version,
        repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=repo) if repo else None,
        namespace=namespace,
        create_namespace=False,
        values=values,
        # Operators come up after their images pull and webhooks register; CRs wait on this release.
        atomic=False,
        timeout=900,
        opts=opts,
    )


DOCKER_HUB = "docker.io"


def normalize_image(ref: str) -> str:
    """A reference with its registry spelled out, as the container runtime reads it: `python:3` is
    `docker.io/library/python:3`, `volcanosh/vc-scheduler` is `docker.io/volcanosh/vc-scheduler`."""
    first, _, rest = ref.partition("/")
    if not rest:
        return f"{DOCKER_HUB}/library/{ref}"
    if "." in first or ":" in first or first == "localhost":
        return ref
    return f"{DOCKER_HUB}/{ref}"


def mirrored_image(ref: str, registry: str | None) -> str:
    """`ref` under mirror `registry` in `skopeo sync --scoped` layout (components/platform/mirrors.py); unchanged
    for None."""
    return ref if registry is None else f"{registry}/{normalize_image(ref)}"


def set_path(tree: dict[str, Any], path: str, value: Any) -> None:
    """Set Helm values key `a.b.c` in `tree`, making the maps on the way."""
    *parents, last = path.split(".")
    for key in parents:
        tree = tree.setdefault(key, {})
    tree[last] = value


def merge_values(base: dict[str, Any], *extras: dict[str, Any]) -> dict[str, Any]:
    """`base` with each of `extras` merged in, maps key by key as Helm merges values (lists replaced), a copy."""
    out = dict(base)
    for extra in extras:
        for key, value in extra.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = merge_values(out[key], value)
            else:
                out[key] = value
    return out
