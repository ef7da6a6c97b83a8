"""The upstream files fastpath's tests and tools read (CRDs, chart values, manifests), pinned in upstream.lock.yaml.

    python -m tools.upstream            (make upstream) fetch every locked file into .cache/upstream/
    python -m tools.upstream --check    say which are here, fetch nothing (exit 1 if any is missing)

`path(name)` is the one way in for a test or tool: the cached file, else the mirror's (FASTPATH_UPSTREAM_MIRROR, by
default ../shared/upstream beside the checkout, or beside the main worktree of a `git worktree`) copied into the
cache, each only when its sha256 is the locked one; else `Missing`, whose message names the file and the command
that fetches it. Nothing here touches the network but the fetch. The render never reads an upstream file.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "upstream.lock.yaml"
CACHE = ROOT / ".cache" / "upstream"
FETCH = "make upstream"
REQUIRE_ENV = "FASTPATH_REQUIRE_UPSTREAM"
MIRROR_ENV = "FASTPATH_UPSTREAM_MIRROR"


class Missing(Exception):
    """A locked file neither in the cache nor in a mirror: fetch it (`make upstream`)."""

    def __init__(self, names: list[str]):
        self.names = names
        more = f" and {len(names) - 1} more" if len(names) > 1 else ""
        super().__init__(f"needs upstream {names[0]}{more}: run `{FETCH}`")


class Corrupt(Exception):
    """A file whose bytes are not the locked ones: never used, never a skip."""


@dataclass(frozen=True)
class Artifact:
    name: str
    """Its path under .cache/upstream/ and under a mirror, e.g. `crds/kubeflow.org_PyTorchJob.yaml`."""
    sha256: str
    url: str | None = None
    """The file at its upstream tag."""
    kustomize: str | None = None
    """A remote kustomize overlay at its tag: the file is its build."""
    vendored: str | None = None
    """Compiled rather than fetched: the repository carries it at this path."""
    note: str | None = None

    @property
    def source(self) -> str:
        return self.url or self.kustomize or f"{self.vendored} (vendored)"


@functools.cache
def lock() -> dict[str, Artifact]:
    doc = yaml.safe_load(LOCK.read_text())
    return {name: Artifact(name=name, **fields) for name, fields in doc["artifacts"].items()}


def mirror() -> Path:
    if env := os.environ.get(MIRROR_ENV):
        return Path(env)
    beside = ROOT.parent / "shared" / "upstream"
    if beside.is_dir() or (main := _main_worktree(ROOT)) is None:
        return beside
    return main.parent / "shared" / "upstream"


@functools.cache
def _main_worktree(root: Path) -> Path | None:
    """The main worktree of the repository `root` is a worktree of (itself, for the main one): a `git worktree add`
    anywhere else (/tmp) then finds the mirror beside it. None outside a git checkout."""
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--git-common-dir"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return (root / out).resolve().parent


def required() -> bool:
    """FASTPATH_REQUIRE_UPSTREAM=1 (CI with its mirror): a missing file fails the test that needs it."""
    return os.environ.get(REQUIRE_ENV, "") not in ("", "0")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _install(data_from: Path, art: Artifact) -> Path:
    """Copy a file whose sha256 is the locked one into the cache (atomically: tests may run side by side)."""
    _checked(data_from, art)
    dest = CACHE / art.name
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.")
    os.close(fd)
    shutil.copyfile(data_from, tmp)
    os.replace(tmp, dest)
    return dest


@functools.cache
def path(name: str) -> Path:
    """The local copy of locked file `name`, its sha256 checked; Missing when neither cache nor mirror has it."""
    art = lock()[name]
    where = locate(art)
    if where == "vendored":
        return ROOT / str(art.vendored)
    return _install(mirror() / name, art) if where == "mirror" else CACHE / name


def _checked(p: Path, art: Artifact) -> None:
    if (got := _sha256(p)) != art.sha256:
        raise Corrupt(f"{p}: sha256 {got}, upstream.lock.yaml has {art.sha256}: delete it and run `{FETCH}`")


def crds_dir() -> Path:
    """The folder of every locked CRD (tools/schemas.py reads them all); Missing names the absent ones."""
    crds = [n for n in lock() if n.startswith("crds/")]
    absent = []
    for n in crds:
        try:
            path(n)
        except Missing:
            absent.append(n)
    if absent:
        raise Missing(absent)
    return CACHE / "crds"


def available(*names: str) -> bool:
    """Whether every file named is here (`crds`: every locked CRD), for a check only some runs can make; under
    FASTPATH_REQUIRE_UPSTREAM=1 a missing one raises Missing instead."""
    try:
        for n in names:
            crds_dir() if n == "crds" else path(n)
    except Missing:
        if required():
            raise
        return False
    return True


# ------------------------------------------------------------------------------------------- fetch


def _download(art: Artifact, into: Path) -> None:
    if art.url:
        with urllib.request.urlopen(art.url, timeout=60) as resp:  # noqa: S310 - https URLs from the lock
            into.write_bytes(resp.read())
        return
    assert art.kustomize
    if shutil.which("kubectl"):
        build = ["kubectl", "kustomize", art.kustomize]
    elif shutil.which("kustomize"):
        build = ["kustomize", "build", art.kustomize]
    else:
        raise OSError(f"building {art.kustomize} needs kubectl or kustomize on PATH")
    out = subprocess.run(build, capture_output=True, timeout=600)
    if out.returncode != 0:
        # kubectl wraps git's error in lines of its own: the cause is the last line with words in it.
        said = [s.strip() for s in out.stderr.decode(errors="replace").splitlines() if s.strip()[:1].isalpha()]
        raise OSError(f"{' '.join(build)}: {said[-1] if said else f'exit {out.returncode}'}")
    into.write_bytes(out.stdout)


def locate(art: Artifact) -> str:
    """Where `art` is, without copying or fetching anything: vendored, cached or mirror; Missing if nowhere."""
    if art.vendored:
        _checked(ROOT / art.vendored, art)
        return "vendored"
    if (CACHE / art.name).is_file():
        _checked(CACHE / art.name, art)
        return "cached"
    if (mirror() / art.name).is_file():
        _checked(mirror() / art.name, art)
        return "mirror"
    raise Missing([art.name])


def fetch(art: Artifact) -> str:
    """Put `art` in the cache, from the mirror or else its source; say from where."""
    try:
        where = locate(art)
    except Missing:
        with tempfile.TemporaryDirectory() as tmp:
            into = Path(tmp) / art.name.replace("/", "_")
            _download(art, into)
            _install(into, art)
        return "fetched"
    if where == "mirror":
        _install(mirror() / art.name, art)
    return where


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.upstream", description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="fetch nothing: say which locked files are here")
    args = ap.parse_args(argv)
    arts = list(lock().values())
    counts: dict[str, int] = {}
    for art in arts:
        try:
            how = locate(art) if args.check else fetch(art)
        except Missing:
            how = "missing"
            print(f"{art.name}: missing (from {art.source})")
        except (Corrupt, OSError) as err:  # OSError: urllib's errors and timeouts, the kustomize build
            how = "failed"
            print(f"{art.name}: {err}")
        counts[how] = counts.get(how, 0) + 1
    print(
        f"{CACHE.relative_to(ROOT) if CACHE.is_relative_to(ROOT) else CACHE}: {len(arts)} locked files, "
        + ", ".join(f"{n} {how}" for how, n in sorted(counts.items()))
        + f" (mirror: {mirror()})"
    )
    return 1 if counts.keys() & {"missing", "failed"} else 0


if __name__ == "__main__":
    sys.exit(main())
