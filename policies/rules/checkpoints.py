"""Checkpoints: a multi-node job writes them to storage every node shares and that outlives the pod."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator

from policies.engine import MANDATORY, Context, Finding, rule
from policies.pods import PLACEHOLDER, dict_or_empty, namespace_of, where
from policies.podspecs import total_replicas
from policies.shell import argv

CHECKPOINT_PATH = re.compile(r"checkpoint|ckpt", re.I)
CHECKPOINT_FLAG = re.compile(r"^--(checkpoint|ckpt)[-_]?(dir|path|file|folder|root)$")


def _checkpoint_flag(words: list[str], working_dir: str | None) -> tuple[str, str] | None:
    """(flag, absolute path) of a `--checkpoint_dir PATH` / `--checkpoint-file=PATH` (or ckpt) argument. A relative
    path is the container's working directory's: workingDir when set, else the image's WORKDIR, which no volume
    mount can be known to cover, so it stands for the container's own filesystem."""
    for i, w in enumerate(words):
        name, eq, value = w.partition("=")
        if CHECKPOINT_FLAG.match(name):
            value = value if eq else (words[i + 1] if i + 1 < len(words) else "")
            if not value or value.startswith(("-", "$")) or PLACEHOLDER.search(value):
                continue
            if value.startswith("/"):
                return name, value
            if value.startswith("~"):
                continue  # $HOME: unknown here
            base = working_dir if working_dir and working_dir.startswith("/") else None
            return name, posixpath.normpath(posixpath.join(base, value)) if base else value
    return None


def _under(path: str, mount: str) -> bool:
    mount = mount.rstrip("/") or "/"
    return path == mount or path.startswith(mount if mount == "/" else mount + "/")


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
    namespace = namespace_of(ctx.obj)
    for t, c in ctx.gpu_containers:
        volumes = {v.get("name"): v for v in t.template["spec"].get("volumes") or []}
        ckpt_dir, said = ctx.facts(c).env.get("CHECKPOINT_DIR"), "CHECKPOINT_DIR"
        if not ckpt_dir and (flag := _checkpoint_flag(argv(c), c.get("workingDir"))) is not None:
            said, ckpt_dir = flag
        if ckpt_dir and PLACEHOLDER.search(ckpt_dir):
            ckpt_dir = None
        mounts = [
            m
            for m in c.get("volumeMounts") or []
            if CHECKPOINT_PATH.search(m.get("mountPath", ""))
            or CHECKPOINT_PATH.search(m.get("name", ""))
            or (ckpt_dir and m.get("mountPath") and _under(ckpt_dir, m["mountPath"]))
        ]
        if ckpt_dir and not any(m.get("mountPath") and _under(ckpt_dir, m["mountPath"]) for m in mounts):
            where_it_is = "" if ckpt_dir.startswith("/") else " (relative: under the image's working directory)"
            yield Finding(
                f"{where(t, c)}: {said}={ckpt_dir}{where_it_is} is on the container's own filesystem: lost "
                "with the pod; mount a ReadWriteMany claim there and give an absolute path"
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
