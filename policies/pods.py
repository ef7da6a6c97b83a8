"""What the rules read of an object and its pods: containers, their GPUs and RDMA devices, the pod's networks, and
the environment the training processes see (an MPIJob worker's includes what its launcher exports with mpirun).
Every reader takes input nobody here wrote: a field of the wrong shape reads as empty, never as an error.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from components.fabric import kinds
from components.fabric.kinds import EFA_RESOURCE
from components.fabric.wiring import NETWORKS_ANNOTATION
from policies.podspecs import PodTemplate
from policies.shell import command_words

if TYPE_CHECKING:
    from policies.engine import Context

# Device-plugin resources that are GPUs (or accelerators run like them): NVIDIA whole GPUs, time-sliced shares
# and MIG slices, AMD (ROCm k8s-device-plugin), Intel (intel-device-plugins-for-kubernetes), Habana Gaudi.
GPU_RESOURCE = re.compile(
    r"^(nvidia\.com/(gpu(\.shared)?|mig-[\w.-]+)|amd\.com/gpu|gpu\.intel\.com/(i915|xe)"
    r"|habana\.ai/gaudi)$"
)

# Values a template engine or shell fills in later: `$N`, `${N}`, `{{ .Values.gpus }}`, `<GPUS>`.
PLACEHOLDER = re.compile(r"\$\{?\w+\}?|\{\{.*?\}\}|<\w+>|%\(\w+\)s")

# Device resources that give a pod RDMA. fastpath's own, read off the fabric-kind table: for every kind that
# carries RDMA, each attachment's device plugin hands out <prefix>/<stem>_<rail>, and EFA's plugin its devices
# (the fabric model's resource). Beside them, the names other clusters' device plugins use (rdma/..., */sriov*,
# */hostdev*, */rdma*, */mlnx*, */ib*): the pack also judges manifests fastpath did not write.
FABRIC_RDMA_RESOURCES = sorted(
    {
        f"{kinds.ATTACHMENTS[a].resource_prefix}/{kinds.ATTACHMENTS[a].resource_stem}_"
        for kind in kinds.KINDS.values()
        if kind.rdma
        for a in kind.attachments
    }
)
RDMA_RESOURCE = re.compile(
    "^("
    + "".join(f"{re.escape(prefix)}[^/]+|" for prefix in FABRIC_RDMA_RESOURCES)
    + re.escape(EFA_RESOURCE)
    + r"|rdma/.+|[^/]+/(sriov|hostdev|rdma|mlnx|ib)[^/]*)$"
)


# A lint meets a few dozen distinct resource names, in thousands of containers: each is matched once.
@lru_cache(maxsize=4096)
def is_gpu_resource(name: str) -> bool:
    return GPU_RESOURCE.match(name) is not None


@lru_cache(maxsize=4096)
def is_rdma_resource(name: str) -> bool:
    return RDMA_RESOURCE.match(name) is not None


def containers(t: PodTemplate) -> list[dict]:
    """The pod's containers (the extractor's list: read, never edited)."""
    return t.template["spec"].get("containers") or []


def dict_or_empty(value: Any) -> dict:
    """`value` if it is a mapping, else {}: object-level fields of input nobody here wrote."""
    return value if isinstance(value, dict) else {}


def int_or_none(value: Any) -> int | None:
    """An integer field's value, or None when it is not one (`"$N"`, a template, a list)."""
    if isinstance(value, bool):
        return None
    try:
        return int(value) if isinstance(value, int | float) else int(str(value).strip())
    except (TypeError, ValueError, OverflowError):
        return None


def resources(c: dict) -> dict:
    r = c.get("resources") or {}
    return {**(r.get("requests") or {}), **(r.get("limits") or {})}


def gpu_requests(c: dict) -> dict[str, object]:
    """The GPU resources a container requests: resource -> value as written."""
    return {k: v for k, v in resources(c).items() if is_gpu_resource(k)}


def unknown_gpus(c: dict) -> dict[str, object]:
    """GPU resources whose count is not a number (`$GPUS`, `{{ .Values.gpus }}`): the rules cannot count them."""
    return {k: v for k, v in gpu_requests(c).items() if int_or_none(v) is None}


def gpus(c: dict) -> int:
    """GPUs a container requests, counting every GPU resource whose count is a number."""
    return sum(max(int_or_none(v) or 0, 0) for v in gpu_requests(c).values())


def has_gpus(c: dict) -> bool:
    """Whether a container asks for GPUs: a positive count, or a count a template fills in later."""
    return any(n is None or n > 0 for n in map(int_or_none, gpu_requests(c).values()))


def rdma_resources(c: dict) -> list[str]:
    return [r for r in resources(c) if is_rdma_resource(r)]


def env(c: dict) -> dict[str, str]:
    """Literal env values (valueFrom entries are not literals)."""
    return {e["name"]: str(e.get("value", "")) for e in c.get("env") or [] if "valueFrom" not in e}


def pod_annotations(t: PodTemplate) -> dict:
    return (t.template.get("metadata") or {}).get("annotations") or {}


def mounts_infiniband(t: PodTemplate) -> bool:
    """The pod mounts the host's /dev/infiniband (hostNetwork RDMA without a device plugin)."""
    return any(
        str(dict_or_empty(v.get("hostPath")).get("path") or "").rstrip("/") == "/dev/infiniband"
        for v in t.template["spec"].get("volumes") or []
    )


def is_rdma_pod(t: PodTemplate) -> bool:
    return (
        bool(pod_annotations(t).get(NETWORKS_ANNOTATION))
        or any(rdma_resources(c) for c in containers(t))
        or mounts_infiniband(t)
    )


def where(t: PodTemplate, c: dict) -> str:
    return f"{t.role} container {c.get('name')!r}"


def rank_env_of(c: dict) -> dict[str, str | None]:
    """Every env name a container sets: its literal value, or None for valueFrom."""
    return {
        e["name"]: (None if "valueFrom" in e else str(e.get("value", ""))) for e in c.get("env") or [] if e.get("name")
    }


ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Launchers that hand their whole environment to every rank: horovodrun passes each of its variables with -x;
# MPICH's and Intel MPI's Hydra propagate the launcher's environment by default (-genvall).
WHOLE_ENV_LAUNCHERS = ("horovodrun",)
WHOLE_ENV_MPI = ("Intel", "MPICH")
EXPORT_FLAGS = frozenset(
    {"-x", "--x", "-genv", "--genv", "-env", "--env", "-genvlist", "--genvlist", "-envlist", "--envlist"}
)


def _script_env(words: Iterable[str]) -> dict[str, str]:
    """Variables a launcher script sets before mpirun: `export NAME=VALUE` and `NAME=VALUE cmd` words."""
    out = {}
    for w in words:
        if "=" not in w:
            continue
        name, eq, value = w.partition("=")
        if eq and ENV_NAME.match(name):
            out[name] = value
    return out


@lru_cache(maxsize=1024)  # the MPIJobs of one lint share a few launcher command lines: each is read once
def _read_script(line: tuple[str, ...]) -> tuple[tuple[str, ...], dict[str, str], tuple[int, ...], bool]:
    """What a launcher's command line says: its words, the variables its script sets (read-only), where its
    export flags are, and whether a launcher that hands every rank its whole environment (horovodrun) runs it."""
    words = tuple(command_words(line))
    joined = "\0".join(words)  # one substring search before looking at a thousand words one by one
    whole = any(name in joined for name in WHOLE_ENV_LAUNCHERS) and any(
        posixpath.basename(w) in WHOLE_ENV_LAUNCHERS for w in words
    )
    # Scripts run to a thousand words: only the flags are visited, found by a comprehension.
    return words, _script_env(words), tuple(i for i, w in enumerate(words[:-1]) if w in EXPORT_FLAGS), whole


def launcher_exports(ctx: Context) -> dict[str, str | None]:
    """What an MPIJob launcher exports to every rank: `mpirun -x NAME=VALUE`, `-x NAME` (the launcher's own
    value: its env or what its script exports before mpirun), `-genv NAME VALUE`, `-genv NAME=VALUE`, `-env`
    and `-genvlist A,B` (MPICH, Intel MPI). Under horovodrun, or with spec.mpiImplementation Intel or MPICH
    (Hydra forwards the launcher's environment by default), the launcher's whole env counts. Name -> literal
    value, or None when the value is not a literal (valueFrom)."""
    if ctx.obj.get("kind") != "MPIJob":
        return {}
    whole = str(dict_or_empty(ctx.obj.get("spec")).get("mpiImplementation") or "") in WHOLE_ENV_MPI
    out: dict[str, str | None] = {}
    for t in ctx.templates:
        if t.role != "Launcher":
            continue
        for c in containers(t):
            words, script_env, flags, whole_env_launcher = _read_script((*c["command"], *c["args"]))
            own = {**rank_env_of(c), **script_env}
            if whole or whole_env_launcher:
                out.update(rank_env_of(c))
            for i in flags:
                w, nxt = words[i], words[i + 1]
                if w in ("-x", "--x"):
                    name, eq, value = nxt.partition("=")
                    if eq:
                        out[name] = value
                    elif name in own:
                        out[name] = own[name]
                elif w in ("-genv", "--genv", "-env", "--env"):
                    name, eq, value = nxt.partition("=")
                    if eq:
                        out[name] = value
                    elif i + 2 < len(words):
                        out[nxt] = words[i + 2]
                else:  # -genvlist and friends
                    out.update({n: own[n] for n in nxt.split(",") if n in own})
    return out


def rank_env(ctx: Context, t: PodTemplate, c: dict) -> dict[str, str | None]:
    """The environment the training processes in a container see: its own env, and for an MPIJob worker what
    the launcher exports with mpirun (the ranks are exec'd into the worker; `-x` overrides the pod's value).
    Read-only: the rules share one per container."""
    return _rank_envs(ctx, t, c)[0]


def rank_literals(ctx: Context, t: PodTemplate, c: dict) -> dict[str, str]:
    """rank_env without the values the manifest does not hold (valueFrom). Read-only, like rank_env."""
    return _rank_envs(ctx, t, c)[1]


def _rank_envs(ctx: Context, t: PodTemplate, c: dict) -> tuple[dict[str, str | None], dict[str, str]]:
    # Six NCCL rules read each container's environment: worked out once per container of the object.
    if (known := ctx.envs.get(id(c))) is not None:
        return known
    out = rank_env_of(c)
    if ctx.obj.get("kind") == "MPIJob" and t.role != "Launcher":
        out.update(ctx.exports)
    ctx.envs[id(c)] = (out, {k: v for k, v in out.items() if v is not None})
    return ctx.envs[id(c)]
