"""Shared memory: GPU pods mount a memory-backed /dev/shm, sized for their GPUs and inside their memory limit."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from policies.engine import ADVISORY, MANDATORY, Context, Finding, rule
from policies.pods import dict_or_empty, where
from policies.podspecs import PodTemplate

# containerd and Docker give every container a 64 MiB /dev/shm unless the pod mounts its own.
SHM_RUNTIME_DEFAULT_GIB = 64 / 1024


QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)([KMGTPE]i?|)$")
SCALE = {
    "": 1,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "K": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
}


def parse_mem_gib(q: Any) -> float | None:
    return None if q is None else _gib(str(q))


@lru_cache(maxsize=4096)  # a lint meets a handful of distinct sizes, in thousands of pods
def _gib(text: str) -> float | None:
    m = QUANTITY.match(text.strip())
    if not m:
        return None
    scale = SCALE.get(m.group(2))
    return float(m.group(1)) * scale / 2**30 if scale else None


def _shm_volume(t: PodTemplate, c: dict) -> dict | None:
    """The emptyDir mounted at /dev/shm, or the host's own /dev/shm by hostPath (memory-backed, the host's
    size), or None."""
    mounts = {m.get("name"): m for m in c.get("volumeMounts") or [] if m.get("mountPath").rstrip("/") == "/dev/shm"}
    for v in t.template["spec"].get("volumes") or []:
        if v.get("name") not in mounts:
            continue
        if isinstance(v.get("emptyDir"), dict):
            return v
        if str(dict_or_empty(v.get("hostPath")).get("path") or "").rstrip("/") == "/dev/shm":
            return {"name": v["name"], "emptyDir": {"medium": "Memory"}, "hostPath": True}
    return None


@rule(
    "shm-mounted",
    "GPU pods mount a memory-backed /dev/shm above 64 MiB",
    level=MANDATORY,
    description="Every container that requests GPUs mounts an emptyDir with medium Memory at /dev/shm whose "
    "sizeLimit, if set, is above the container runtime's 64 MiB default (the host's own /dev/shm by "
    "hostPath also counts).",
    remediation="mount an emptyDir {medium: Memory, sizeLimit: 1Gi per GPU or more} at /dev/shm",
)
def shm_mounted(ctx: Context) -> Iterator[Finding]:
    """A GPU container gets more than the runtime's 64 MiB /dev/shm (containerd's CRI sandbox default,
    `defaultShmSize` in containerd/containerd pkg/cri/server/helpers_linux.go; Docker's is the same): without its
    own memory-backed mount, or with a sizeLimit at or under 64Mi, NCCL's shared-memory transport and PyTorch
    DataLoader workers run out of it (bus errors, NCCL init failures). One rule for "missing" and "too small to
    matter", so shm-size stays advisory sizing above 64Mi."""
    for t, c in ctx.gpu_containers:
        v = _shm_volume(t, c)
        if v is None or v["emptyDir"].get("medium") != "Memory":
            yield Finding(
                f"{where(t, c)} has no memory-backed /dev/shm (the container default is 64 MiB; NCCL and "
                "dataloaders fail or crawl): mount an emptyDir {medium: Memory, sizeLimit: ...} at /dev/shm"
            )
            continue
        size = parse_mem_gib(v["emptyDir"].get("sizeLimit"))
        if size is not None and size <= SHM_RUNTIME_DEFAULT_GIB:
            yield Finding(
                f"{where(t, c)}: /dev/shm sizeLimit {v['emptyDir']['sizeLimit']} is no more than the "
                "container runtime's 64 MiB default, so mounting it gains nothing: NCCL's shared-memory "
                "transport and DataLoader workers run out of it (bus errors, NCCL init failures); raise "
                "the sizeLimit to GiBs (1Gi per GPU or more)"
            )


@rule(
    "shm-size",
    "/dev/shm is sized for the GPUs",
    level=ADVISORY,
    description="The /dev/shm emptyDir has a sizeLimit of at least minGiBPerGpu per GPU of the container (64Mi or "
    "less is shm-mounted's).",
    remediation="raise the /dev/shm sizeLimit to minGiBPerGpu per GPU of the container",
    params={"minGiBPerGpu": (1, "Smallest /dev/shm per GPU, in GiB.")},
)
def shm_size(ctx: Context) -> Iterator[Finding]:
    per_gpu = float(ctx.config.get("minGiBPerGpu", 1))
    for t, c in ctx.gpu_containers:
        v, own = _shm_volume(t, c), ctx.facts(c)
        if v is None or "hostPath" in v or own.unknown_gpus:  # the host's /dev/shm; a count the rules cannot read
            continue
        size = parse_mem_gib(v["emptyDir"].get("sizeLimit"))
        need = per_gpu * own.gpus
        if size is not None and size <= SHM_RUNTIME_DEFAULT_GIB:
            continue  # no better than no mount at all: shm-mounted (mandatory) reports it
        if size is None:
            yield Finding(
                f"{where(t, c)}: /dev/shm has no sizeLimit: set one (at least {need:g}Gi for "
                f"{own.gpus} GPUs) so it is sized on purpose and counted in the memory limit"
            )
        elif size < need:
            yield Finding(
                f"{where(t, c)}: /dev/shm sizeLimit {v['emptyDir']['sizeLimit']} is under {need:g}Gi "
                f"({per_gpu:g}Gi per GPU x {own.gpus}): raise it"
            )


@rule(
    "shm-fits-memory",
    "/dev/shm fits in the memory limit",
    level=MANDATORY,
    description="The /dev/shm sizeLimit is smaller than the container's memory limit (tmpfs pages are charged to it).",
    remediation="set a memory limit above the /dev/shm sizeLimit (tmpfs pages count against it)",
    mixed=True,
)
def shm_fits_memory(ctx: Context) -> Iterator[Finding]:
    for t, c in ctx.gpu_containers:
        v = _shm_volume(t, c)
        if v is None or "hostPath" in v:
            continue
        size = parse_mem_gib(v["emptyDir"].get("sizeLimit"))
        if size is None:
            continue
        limit = parse_mem_gib(((c.get("resources") or {}).get("limits") or {}).get("memory"))
        if limit is None:
            yield Finding(
                f"{where(t, c)} has /dev/shm but no memory limit: tmpfs pages are charged to the pod; "
                "set a memory limit that includes the shm size",
                level=ADVISORY,
            )
        elif size >= limit:
            yield Finding(
                f"{where(t, c)}: /dev/shm sizeLimit {v['emptyDir']['sizeLimit']} does not fit in the "
                f"memory limit {c['resources']['limits']['memory']} (tmpfs counts against it: OOM kill): "
                "lower the shm size or raise the limit"
            )
