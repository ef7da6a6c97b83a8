"""Checkpoints: a multi-node job writes them to storage every node shares and that outlives the pod."""

from __future__ import annotations

import re
from collections.abc import Iterator

from policies.engine import MANDATORY, Context, Finding, rule
from policies.pods import PLACEHOLDER, dict_or_empty, where
from policies.podspecs import total_replicas
from policies.shell import argv

CHECKPOINT_PATH = re.compile(r"checkpoint|ckpt", re.I)
CHECKPOINT_FLAG = re.compile(r"^--(checkpoint|ckpt)[-_]?(dir|path)$")


def _checkpoint_flag(words: list[str]) -> tuple[str, str] | None:
    """(flag, path) of a `--checkpoint_dir PATH` / `--checkpoint-dir=PATH` (or ckpt) argument."""
    for i, w in enumerate(words):
        name, eq, value = w.partition("=")
        if CHECKPOINT_FLAG.match(name):
            value = value if eq else (words[i + 1] if i + 1 < len(words) else "")
            if value.startswith("/"):
                return name, value
    return None


@rule(
    "checkpoint-rwx",
    "Multi-node jobs checkpoint to shared storage",
    level=MANDATORY,
    description="Checkpoint mounts (paths or volumes named checkpoint/ckpt, CHECKPOINT_DIR, or a `--checkpoint_dir` "
    "/ `--ckpt-dir` argument) are ReadWriteMany claims, not emptyDir, hostPath or the container's own "
    "disk.",
    remediation="mount a ReadWriteMany PersistentVolumeClaim at the checkpoint path",
)
def checkpoint_rwx(ctx: Context) -> Iterator[Finding]:
    if total_replicas(ctx.templates) < 2:
        return
    namespace = str(dict_or_empty(ctx.obj.get("metadata")).get("namespace") or "default")
    for t, c in ctx.gpu_containers:
        volumes = {v.get("name"): v for v in t.template["spec"].get("volumes") or []}
        ckpt_dir, said = ctx.facts(c).env.get("CHECKPOINT_DIR"), "CHECKPOINT_DIR"
        if not ckpt_dir and (flag := _checkpoint_flag(argv(c))) is not None:
            said, ckpt_dir = flag
        if ckpt_dir and PLACEHOLDER.search(ckpt_dir):
            ckpt_dir = None
        mounts = [
            m
            for m in c.get("volumeMounts") or []
            if CHECKPOINT_PATH.search(m.get("mountPath", ""))
            or CHECKPOINT_PATH.search(m.get("name", ""))
            or (ckpt_dir and m.get("mountPath") and ckpt_dir.startswith(m["mountPath"]))
        ]
        if ckpt_dir and not mounts:
            yield Finding(
                f"{where(t, c)}: {said}={ckpt_dir} is on the container's own filesystem: lost "
                "with the pod; mount a ReadWriteMany claim there"
            )
        for m in mounts:
            v = volumes.get(m.get("name"), {})
            if "emptyDir" in v or "hostPath" in v:
                kind = "emptyDir" if "emptyDir" in v else "hostPath"
                yield Finding(
                    f"{where(t, c)} writes checkpoints to {kind} {m['mountPath']}: they vanish with the "
                    "pod or stay on one node; use a ReadWriteMany PersistentVolumeClaim"
                )
            claim = str(dict_or_empty(v.get("persistentVolumeClaim")).get("claimName"))
            pvc = ctx.claims.get((namespace, claim))
            if pvc is not None and "ReadWriteMany" not in (dict_or_empty(pvc.get("spec")).get("accessModes") or []):
                yield Finding(
                    f"{where(t, c)} writes checkpoints to claim {claim!r}, which is not ReadWriteMany: "
                    "pods on other nodes cannot mount it"
                )
