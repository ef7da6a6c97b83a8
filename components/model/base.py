"""What the stack-file models share: the base model (camelCase keys, unknown keys refused, frozen, field
docstrings as the config reference), the Kubernetes-syntax field types, and the rules both the platform schema
(components/model/config.py) and the job schema (components/model/job.py) apply.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from components import k8s_syntax


def _rule(check: Callable[[str], str | None]) -> AfterValidator:
    """A pydantic validator from a k8s_syntax check: the check's message is the error."""

    def run(value: str) -> str:
        if (problem := check(value)) is not None:
            raise ValueError(problem)
        return value

    return AfterValidator(run)


# Kubernetes syntax, refused here with the fix rather than by the API server (components/k8s_syntax.py).
DnsLabel = Annotated[str, _rule(k8s_syntax.dns1123_label)]
DnsName = Annotated[str, _rule(k8s_syntax.dns1123_subdomain)]
QualifiedName = Annotated[str, _rule(k8s_syntax.qualified_name)]
LabelValue = Annotated[str, _rule(k8s_syntax.label_value)]
EnvName = Annotated[str, _rule(k8s_syntax.env_var_name)]
SecretKey = Annotated[str, _rule(k8s_syntax.config_map_key)]
NoSpace = Annotated[str, Field(min_length=1, pattern=r"^\S+$")]

JobApi = Literal["v1", "v2"]
"""A job API: `v1` Kubeflow Training Operator (PyTorchJob, MPIJob, TFJob), `v2` Kubeflow Trainer (TrainJob)."""


ChangeClass = Literal["disruptive", "destructive"]
"""A class of change that needs `fastpath:acknowledge` (components/impact/model.py)."""


class Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        use_attribute_docstrings=True,
    )

    def to_config(self) -> dict:
        """The stack-file form (camelCase, defaults filled): serializable, and read back by model_validate."""
        return self.model_dump(mode="json", by_alias=True)


IMAGE_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def image_problem(image: str) -> str | None:
    shown = k8s_syntax.short(image)
    if image != image.strip() or any(ch.isspace() for ch in image):
        return f"image {shown} contains whitespace: the kubelet could not pull it; remove the spaces"
    if IMAGE_DIGEST.search(image):
        return None
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return f"image {shown} has no tag: pin a version tag or an @sha256 digest"
    if last.rsplit(":", 1)[1].lower() == "latest":  # a registry matches tags as written: LATEST is latest too
        return f"image {shown} uses `latest`: pin a version tag or an @sha256 digest"
    return None


def interface_problem(name: str) -> str | None:
    """Why `name` cannot be a Linux network interface name (kernel net/core/dev.c dev_valid_name: 1-15 bytes, not
    `.` or `..`, no `/`, `:` or whitespace), or, for NCCL_SOCKET_IFNAME, starts with the `=`/`^` NCCL reads as
    exact-match and exclude prefixes (fastpath writes the `=` itself)."""
    shown = k8s_syntax.short(name)
    if not name or len(name.encode()) > 15:
        return f"{shown} is not a Linux interface name (1 to 15 characters)"
    if name in (".", "..") or any(ch in "/:" or ch.isspace() for ch in name):
        return f"{shown} is not a Linux interface name (no '/', ':' or whitespace)"
    if name[0] in "=^":
        return f"{shown}: give the bare interface name; fastpath writes NCCL_SOCKET_IFNAME's `=` itself"
    return None


def rdma_device_problem(name: str) -> str | None:
    """Why `name` cannot be one RDMA device (an ibdev: /sys/class/infiniband/<name>), as NCCL_IB_HCA lists them."""
    shown = k8s_syntax.short(name)
    if any(ch in ",:=^/" or ch.isspace() for ch in name):
        return (
            f"{shown} is not one RDMA device name (no ',', ':', '=', '^', '/' or spaces): one rail is one HCA, "
            "as `ibdev2netdev` prints it (mlx5_0); list each rail on its own"
        )
    return None
