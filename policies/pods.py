"""What the rules read of an object and its pods: containers, their GPUs and RDMA devices, the pod's networks, and
the environment the training processes see (an MPIJob worker's includes what its launcher exports with mpirun).
Every reader takes input nobody here wrote: a field of the wrong shape reads as empty, never as an error.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from components.fabric import kinds
from components.fabric.kinds import EFA_RESOURCE
from components.fabric.wiring import POD_NETWORK_ANNOTATIONS
from policies.podspecs import PodTemplate
from policies.shell import argv, command_words

if TYPE_CHECKING:
    from policies.engine import Context

# Device-plugin resources that are GPUs (or accelerators run like them): NVIDIA whole GPUs, time-sliced shares
# and MIG slices, AMD (ROCm k8s-device-plugin), Intel (intel-device-plugins-for-kubernetes), Habana Gaudi.
GPU_RESOURCE = re.compile(
    r"^(nvidia\.com/(gpu(\.shared)?|mig-[\w.-]+)|amd\.com/gpu|gpu\.intel\.com/(i915|xe)"
    r"|habana\.ai/gaudi)$"
)

# Values a template engine or shell fills in later: `$N`, `${N}`, `{{ .Values.gpus }}`, `<GPUS>`.
PLACEHOLDER = re.compile(r"\$\{?\w+\}?|\{\{.*?\}\}|<\w[^<>\n]{0,63}>|%\(\w+\)s")

# Device resources that give a pod RDMA. fastpath's own, read off the fabric-kind table: for every kind that
# carries RDMA, each attachment's device plugin hands out <prefix>/<stem>_<rail>, and EFA's plugin its devices
# (the fabric model's resource). Beside them, the names other clusters' device plugins use (rdma/..., */sriov*,
# */hostdev*, */rdma*, */mlnx*, */ib*): the pack also judges manifests fastpath did not write. Not intel.com/sriov*
# or intel.com/hostdev* (the SR-IOV device plugin's own default prefix, k8snetworkplumbingwg/sriov-network-device-plugin
# README): those are netdevice VFs unless their name says rdma.
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
    + r"|rdma/.+|[^/]+/(rdma|mlnx|ib)[^/]*|(?!intel\.com/)[^/]+/(sriov|hostdev)[^/]*"
    + r"|[^/]+/(sriov|hostdev)[^/]*rdma[^/]*)$"
)


# A lint meets a few dozen distinct sets of resource names, in thousands of containers: each set is read once.
@lru_cache(maxsize=4096)
def _resource_names(names: tuple[str, ...]) -> tuple[tuple[str, ...], list[str]]:
    """The GPU resources and the RDMA devices among a container's resource names (the list read-only)."""
    return tuple(n for n in names if GPU_RESOURCE.match(n)), [n for n in names if RDMA_RESOURCE.match(n)]


def containers(t: PodTemplate) -> list[dict]:
    """The pod's containers (the extractor's list: read, never edited)."""
    return t.template["spec"].get("containers") or []


def dict_or_empty(value: Any) -> dict:
    """`value` if it is a mapping, else {}: object-level fields of input nobody here wrote."""
    return value if isinstance(value, dict) else {}


def dicts(value: Any) -> list[dict]:
    """The mappings of `value` if it is a list, else []."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def namespace_of(obj: Any) -> str:
    """The namespace an object lands in: its own, else kubectl's current one, `default` the common case."""
    md = dict_or_empty(obj.get("metadata")) if isinstance(obj, dict) else {}
    return str(md.get("namespace") or "default")


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


def rdma_resources(c: dict) -> list[str]:
    return list(_resource_names(tuple(resources(c)))[1])


class Facts(NamedTuple):
    """What the rules read of one container of the extractor's (podspecs: every env entry named): its GPUs, RDMA
    devices and env. A dozen rules ask, so each container's are worked out once (Context.facts) and shared:
    read-only."""

    # GPU resources whose count is not a number (`$GPUS`), and GPU requests of DRA claims whose count the manifest
    # does not fix (allocationMode All, firstAvailable: policies/dra.py): the rules cannot count them
    unknown_gpus: dict[str, object]
    gpus: int  # GPUs requested, counting every GPU resource whose count is a number, and DRA claims' ExactCounts
    has_gpus: bool  # asks for GPUs: a positive count, a count a template fills in later, or a DRA claim of GPUs
    rdma: list[str]  # the RDMA resources it requests, and the DRA claims of RDMA NICs it consumes (dra.nic_label)
    env: dict[str, str]  # literal env values (valueFrom entries are not literals)
    rank_env: dict[str, str | None]  # every env name it sets: its literal value, or None for valueFrom
    literals: dict[str, str]  # rank_env without the valueFrom names


def facts(c: dict) -> Facts:
    res = resources(c)
    gpu_names, rdma = _resource_names(tuple(res))
    unknown: dict[str, object] = {}
    gpus, has_gpus = 0, False
    for name in gpu_names:
        n = int_or_none(res[name])
        if n is None:
            unknown[name] = res[name]
        gpus += max(n or 0, 0)
        has_gpus = has_gpus or n is None or n > 0
    envs = c.get("env") or []
    rank_env = {e["name"]: None if "valueFrom" in e else str(e.get("value", "")) for e in envs}
    # Mostly one mapping serves all three: they differ only by valueFrom entries, and env also by a name set twice
    # (env keeps the last literal, rank_env the last entry).
    literals = (
        cast(dict[str, str], rank_env)
        if None not in rank_env.values()
        else {k: v for k, v in rank_env.items() if v is not None}
    )
    env = (
        literals
        if len(rank_env) == len(envs)
        else {e["name"]: str(e.get("value", "")) for e in envs if "valueFrom" not in e}
    )
    return Facts(unknown, gpus, has_gpus, rdma, env, rank_env, literals)


def pod_annotations(t: PodTemplate) -> dict:
    return (t.template.get("metadata") or {}).get("annotations") or {}


def mounts_infiniband(t: PodTemplate) -> bool:
    """The pod mounts the host's /dev/infiniband (hostNetwork RDMA without a device plugin)."""
    return any(
        str(dict_or_empty(v.get("hostPath")).get("path") or "").rstrip("/") == "/dev/infiniband"
        for v in t.template["spec"].get("volumes") or []
    )


def is_rdma_pod(ctx: Context, t: PodTemplate) -> bool:
    return (
        any(pod_annotations(t).get(a) for a in POD_NETWORK_ANNOTATIONS)
        or any(ctx.facts(c).rdma for c in containers(t))
        or mounts_infiniband(t)
    )


# RDMA test tools: a pod that runs only these (GPUDirect perftest included) uses the fabric without NCCL.
RDMA_TOOLS = re.compile(r"ib_(write|read|send|atomic)_(bw|lat)|ibv_\w+_pingpong|rping|ucx_perftest|perftest")
TRAINERS = re.compile(r"python[0-9.]*|torchrun|mpirun|mpiexec|deepspeed|accelerate|horovodrun|srun|\w+_perf(_mpi)?")


def _rdma_tool(c: dict) -> bool:
    """Whether a container runs an RDMA test tool: its command names one, or, without a command, its image does
    (mellanox/cuda-perftest)."""
    words = argv(c)
    if words:
        names = [w.rsplit("/", 1)[-1] for w in words]
        # A script that also starts a trainer (perftest first, then training) is a training pod.
        training = any(TRAINERS.fullmatch(n) for n in names)
        return not training and any(RDMA_TOOLS.fullmatch(n) for n in names)
    repository = str(c.get("image") or "").rsplit("/", 1)[-1].split(":", 1)[0].split("@", 1)[0]
    return bool(RDMA_TOOLS.search(repository))


def runs_nccl(ctx: Context, t: PodTemplate) -> bool:
    """Whether NCCL runs in the pods of `t`: the pod sets an NCCL_* variable, or the workload requests GPUs (an MPI
    launcher's workers count for it) and the pod is not an RDMA test tool's. An RDMA pod that is neither (rping,
    perftest with or without GPUs, DOCA tools, a storage client) uses the fabric without NCCL, and the NCCL rules
    have nothing to say to it."""
    if any(name.startswith("NCCL_") for c in containers(t) for name in rank_env(ctx, t, c)):
        return True
    return bool(ctx.gpu_containers) and not all(_rdma_tool(c) for c in containers(t))


def where(t: PodTemplate, c: dict) -> str:
    return f"{t.role} container {c.get('name')!r}"


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
def _read_script(line: tuple[str, ...]) -> tuple[dict[str, str], tuple[tuple[str, str | None], ...], bool]:
    """What a launcher's command line says: the variables its script sets (read-only), what its export flags
    export in order (name and value, or None where the value is the launcher's own), and whether a launcher that
    hands every rank its whole environment (horovodrun) runs it."""
    words = tuple(command_words(line))
    joined = "\0".join(words)  # one substring search before looking at a thousand words one by one
    whole = any(name in joined for name in WHOLE_ENV_LAUNCHERS) and any(
        posixpath.basename(w) in WHOLE_ENV_LAUNCHERS for w in words
    )
    found: list[tuple[str, str | None]] = []
    # Scripts run to a thousand words: only the flags are visited, found by a comprehension.
    for i in [i for i, w in enumerate(words[:-1]) if w in EXPORT_FLAGS]:
        w, nxt = words[i], words[i + 1]
        name, eq, value = nxt.partition("=")
        if w in ("-x", "--x"):
            found.append((name, value if eq else None))
        elif w in ("-genv", "--genv", "-env", "--env"):
            if eq:
                found.append((name, value))
            elif i + 2 < len(words):
                found.append((nxt, words[i + 2]))
        else:  # -genvlist and friends
            found += [(n, None) for n in nxt.split(",")]
    # A script of several mpirun lines exports the same names on each: an export that repeats the one before it
    # for the same name changes nothing, and is dropped.
    exports: list[tuple[str, str | None]] = []
    last: dict[str, str | None] = {}
    for export in found:
        if export[0] not in last or last[export[0]] != export[1]:
            last[export[0]] = export[1]
            exports.append(export)
    return _script_env(words), tuple(exports), whole


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
            script_env, exports, whole_env_launcher = _read_script((*c["command"], *c["args"]))
            rank_env = ctx.facts(c).rank_env
            own = {**rank_env, **script_env}
            if whole or whole_env_launcher:
                out.update(rank_env)
            for name, value in exports:
                if value is not None:
                    out[name] = value
                elif name in own:
                    out[name] = own[name]
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
    own = ctx.facts(c)
    if ctx.obj.get("kind") == "MPIJob" and t.role != "Launcher":
        out = {**own.rank_env, **ctx.exports}
        ctx.envs[id(c)] = (out, {k: v for k, v in out.items() if v is not None})
    else:
        ctx.envs[id(c)] = (own.rank_env, own.literals)
    return ctx.envs[id(c)]
