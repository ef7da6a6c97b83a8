"""Kubernetes' own syntax rules, checked where the stack file is read, so a value the API server would refuse is
refused first with its key and the fix. The rules restate k8s.io/apimachinery/pkg/util/validation
(validation.go: IsDNS1123Label, IsDNS1123Subdomain, IsQualifiedName, IsValidLabelValue, IsEnvVarName,
IsConfigMapKey) and int32 fields of the core API. Pure functions returning None or what is wrong."""

from __future__ import annotations

import re

# The GPU product label GPU Feature Discovery writes on every GPU node; training pods select on it.
# What node-feature-discovery sets on a node with an NVIDIA PCI device (the GPU Operator's NFD config whitelists PCI
# classes 0300/0302 with the vendor field: gpu-operator@v26.7.0 deployments/gpu-operator/values.yaml
# node-feature-discovery.config). It is there before the driver; GPU_PRODUCT_LABEL comes with GPU feature discovery.
NFD_GPU_LABEL = "feature.node.kubernetes.io/pci-10de.present"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"

INT32_MAX = 2**31 - 1
_NAME_PART = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_LABEL = re.compile(rf"^{_DNS_LABEL}$")
DNS1123_SUBDOMAIN = re.compile(rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$")
LABEL_VALUE = re.compile(rf"^({_NAME_PART})?$")
NAME_PART = re.compile(rf"^{_NAME_PART}$")
ENV_VAR_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
CONFIG_MAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
# System and platform namespaces: a training namespace there would mix jobs with what runs the cluster, and get
# fastpath's Pod Security labels and networks on top of theirs.
RESERVED_NAMESPACES = (
    "default",
    "kube-system",
    "kube-public",
    "kube-node-lease",
    "gpu-operator",
    "nvidia-network-operator",
    "volcano-system",
    "volcano-monitoring",
    "kubeflow",
    "kubeflow-system",
    "nvsentinel",
    "cert-manager",
    "fastpath-system",
)


def short(value: object, limit: int = 60) -> str:
    """A value echoed in a message, cut to `limit` characters (a 100 KB string is not repeated back)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def dns1123_label(value: str) -> str | None:
    if len(value) > 63:
        return f"{short(value)} is longer than 63 characters"
    if not DNS1123_LABEL.match(value):
        return (
            f"{short(value)} is not a DNS-1123 label: lowercase letters, digits and '-', starting and ending "
            "with a letter or digit"
        )
    return None


def dns1123_subdomain(value: str) -> str | None:
    if len(value) > 253:
        return f"{short(value)} is longer than 253 characters"
    if not DNS1123_SUBDOMAIN.match(value):
        return (
            f"{short(value)} is not a DNS-1123 name: lowercase letters, digits, '-' and '.', starting and "
            "ending with a letter or digit"
        )
    return None


def label_value(value: str) -> str | None:
    if len(value) > 63:
        return f"{short(value)} is longer than 63 characters, the limit of a label value"
    if not LABEL_VALUE.match(value):
        return (
            f"{short(value)} is not a valid label value: letters, digits, '-', '_' and '.', starting and "
            "ending with a letter or digit"
        )
    return None


def qualified_name(value: str) -> str | None:
    """A label, annotation or taint key: an optional DNS subdomain prefix and '/', then a name of at most 63."""
    prefix, slash, name = value.rpartition("/")
    if slash and not prefix:
        return f"{short(value)} has an empty prefix before '/': write prefix/name or just name"
    if prefix and (p := dns1123_subdomain(prefix)) is not None:
        return f"{short(value)}: the prefix before '/' {p.split(' ', 1)[1]}"
    if len(name) > 63 or not NAME_PART.match(name):
        return (
            f"{short(value)} is not a qualified name: [prefix/]name, the name at most 63 letters, digits, "
            "'-', '_' and '.', starting and ending with a letter or digit"
        )
    return None


def env_var_name(value: str) -> str | None:
    if not ENV_VAR_NAME.match(value):
        return (
            f"{short(value)} is not a valid environment variable name: letters, digits, '_', '-' and '.', "
            "not starting with a digit"
        )
    return None


def config_map_key(value: str) -> str | None:
    if len(value) > 253 or not CONFIG_MAP_KEY.match(value):
        return f"{short(value)} is not a valid Secret or ConfigMap key: letters, digits, '-', '_' and '.'"
    return None


def gfd_label(product: str) -> str:
    """The form GPU Feature Discovery gives `nvidia.com/gpu.product` (NVIDIA/k8s-device-plugin@v0.20.0, the
    version gpu-operator v26.7.0 pins: internal/lm/resource.go `sanitise`): characters outside
    [A-Za-z0-9-_. ] dropped, then runs of spaces joined by '-' (`NVIDIA A100-SXM4-80GB` ->
    `NVIDIA-A100-SXM4-80GB`, `NVIDIA TITAN X (Pascal)` -> `NVIDIA-TITAN-X-Pascal`)."""
    return "-".join(re.sub(r"[^A-Za-z0-9\-_. ]", "", product).split())


def under(path: str, other: str) -> bool:
    """`path` is `other` or lies inside it (mount paths)."""
    a, b = path.rstrip("/") or "/", other.rstrip("/") or "/"
    return a == b or a.startswith(b + "/") or b == "/"
