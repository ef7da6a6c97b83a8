"""The upstream lock (upstream.lock.yaml) and its resolver (tools/upstream.py): every file pinned by URL at a tag and
sha256, copied from a mirror or fetched only when its bytes are the locked ones, and a test without one skipped
with the file's name and `make upstream`, or failed under FASTPATH_REQUIRE_UPSTREAM=1."""

import hashlib
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from tests.conftest import ROOT
from tools import upstream

SHA256 = re.compile(r"^[0-9a-f]{64}$")
# A tag (or, for a repository without tags, a commit) right after owner/name: never a branch that moves.
RAW = re.compile(r"^https://raw\.githubusercontent\.com/[\w.-]+/[\w.-]+/(v\d[\w.-]*|[\w-]+-v\d[\w.-]*|[0-9a-f]{40})/\S+$")


def test_every_locked_file_has_one_source_at_a_pinned_ref_and_a_sha256():
    lock = upstream.lock()
    assert lock
    for name, art in lock.items():
        assert SHA256.match(art.sha256), name
        sources = [s for s in (art.url, art.kustomize, art.vendored) if s]
        assert len(sources) == 1, name
        if art.url:
            assert RAW.match(art.url), art.url
        if art.kustomize:
            assert re.search(r"\?ref=v\d", art.kustomize), art.kustomize
        if art.vendored:
            assert (ROOT / art.vendored).is_file(), art.vendored
        assert name.split("/", 1)[0] in ("crds", "values", "manifests") or "/" not in name, name


def test_every_file_a_test_or_tool_names_is_locked():
    """A name passed to the resolver is a key of the lock (a typo would be a KeyError at run time)."""
    named = set()
    for f in [*ROOT.joinpath("tests").glob("*.py"), *ROOT.joinpath("tools").glob("*.py")]:
        if f.name == "test_upstream.py":  # its own sandbox locks names of its own
            continue
        named |= set(re.findall(r"""(?:upstream\.path|upstream_file)\(f?["']([^"'{]+)["']\)""", f.read_text()))
    assert named, "the scan finds the resolver's callers"
    assert named <= set(upstream.lock()), named - set(upstream.lock())


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """A lock of one file, an empty cache and a mirror, all under tmp_path."""
    data = b"kind: ConfigMap\n"
    lock = tmp_path / "upstream.lock.yaml"
    lock.write_text(yaml.safe_dump({"artifacts": {"values/x.yaml": {"url": (tmp_path / "origin.yaml").as_uri(), "sha256": hashlib.sha256(data).hexdigest()}}}))
    (tmp_path / "origin.yaml").write_bytes(data)
    monkeypatch.setattr(upstream, "LOCK", lock)
    monkeypatch.setattr(upstream, "CACHE", tmp_path / "cache")
    monkeypatch.setenv(upstream.MIRROR_ENV, str(tmp_path / "mirror"))
    upstream.lock.cache_clear()
    upstream.path.cache_clear()
    yield tmp_path, data
    upstream.lock.cache_clear()
    upstream.path.cache_clear()


def test_a_worktree_finds_the_mirror_beside_the_main_worktree(tmp_path, monkeypatch):
    """A `git worktree add` elsewhere (/tmp) has no ../shared of its own: the mirror beside the main worktree is it."""
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    main, other = tmp_path / "work" / "main", tmp_path / "elsewhere" / "wt"
    main.mkdir(parents=True)
    subprocess.run([*git, "init", "-q", str(main)], check=True)
    subprocess.run([*git, "-C", str(main), "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    subprocess.run([*git, "-C", str(main), "worktree", "add", "-q", str(other)], check=True)
    (tmp_path / "work" / "shared" / "upstream").mkdir(parents=True)
    monkeypatch.delenv(upstream.MIRROR_ENV, raising=False)
    for root in (main, other):
        monkeypatch.setattr(upstream, "ROOT", root)
        assert upstream.mirror().resolve() == (tmp_path / "work" / "shared" / "upstream").resolve()
    # Outside a git checkout: beside the checkout, as before.
    monkeypatch.setattr(upstream, "ROOT", tmp_path / "plain")
    assert upstream.mirror() == tmp_path / "shared" / "upstream"


def test_a_missing_file_names_itself_and_the_command_that_fetches_it(sandbox):
    with pytest.raises(upstream.Missing, match=re.escape("needs upstream values/x.yaml: run `make upstream`")):
        upstream.path("values/x.yaml")


def test_the_mirror_is_copied_into_the_cache_only_with_the_locked_bytes(sandbox):
    tmp, data = sandbox
    (tmp / "mirror" / "values").mkdir(parents=True)
    (tmp / "mirror" / "values" / "x.yaml").write_bytes(data + b"# edited\n")
    with pytest.raises(upstream.Corrupt, match="sha256"):
        upstream.path("values/x.yaml")
    assert not (tmp / "cache" / "values" / "x.yaml").exists()
    (tmp / "mirror" / "values" / "x.yaml").write_bytes(data)
    assert upstream.path("values/x.yaml") == tmp / "cache" / "values" / "x.yaml"
    assert (tmp / "cache" / "values" / "x.yaml").read_bytes() == data


def test_fetch_downloads_checks_and_reports(sandbox, capsys):
    tmp, data = sandbox
    assert upstream.main([]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith(f"cache: 1 locked files, 1 fetched (mirror: {tmp / 'mirror'})")
    assert (tmp / "cache" / "values" / "x.yaml").read_bytes() == data
    assert upstream.main(["--check"]) == 0
    assert "1 cached" in capsys.readouterr().out
    (tmp / "cache" / "values" / "x.yaml").unlink()
    (tmp / "origin.yaml").write_bytes(b"kind: Secret\n")  # upstream moved under the tag
    assert upstream.main([]) == 1
    out = capsys.readouterr().out
    assert "values/x.yaml:" in out and "sha256" in out and "1 failed" in out
    assert not (tmp / "cache" / "values" / "x.yaml").exists()


def test_fetch_builds_a_kustomize_overlay(sandbox, monkeypatch):
    """The locked Training Operator overlay is a kustomize build: fetched with kubectl (or kustomize), here from a
    local folder instead of the remote one."""
    if not (shutil.which("kubectl") or shutil.which("kustomize")):
        pytest.skip("needs kubectl or kustomize on PATH")
    tmp, _ = sandbox
    overlay = tmp / "overlay"
    overlay.mkdir()
    (overlay / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n")
    (overlay / "kustomization.yaml").write_text("namespace: demo\nresources:\n- cm.yaml\n")
    built = subprocess.run(["kubectl", "kustomize", str(overlay)] if shutil.which("kubectl") else ["kustomize", "build", str(overlay)], capture_output=True, check=True).stdout
    art = upstream.Artifact(name="manifests/o.yaml", sha256=hashlib.sha256(built).hexdigest(), kustomize=str(overlay))
    assert upstream.fetch(art) == "fetched"
    assert yaml.safe_load((tmp / "cache" / "manifests" / "o.yaml").read_text())["metadata"] == {"name": "c", "namespace": "demo"}


def run_pytest(tmp_path, env: dict) -> subprocess.CompletedProcess:
    test = tmp_path / "test_needs_upstream.py"
    test.write_text("from tools import upstream\n\n\ndef test_needs_a_crd():\n    raise upstream.Missing(['crds/example.com_Widget.yaml'])\n")
    cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-p", "tests.conftest", "--rootdir", str(tmp_path), str(test)]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**env, "PYTHONPATH": str(ROOT)}, timeout=120)


def test_a_test_without_its_file_is_skipped_naming_it_or_fails_when_required(tmp_path, monkeypatch):
    import os

    env = {k: v for k, v in os.environ.items() if k != upstream.REQUIRE_ENV}
    skipped = run_pytest(tmp_path, env)
    assert skipped.returncode == 0, skipped.stdout
    assert re.search(r"SKIPPED \[1\] \S*test_needs_upstream\.py:\d+: needs upstream crds/example\.com_Widget\.yaml: run `make upstream`", skipped.stdout), skipped.stdout
    failed = run_pytest(tmp_path, {**env, upstream.REQUIRE_ENV: "1"})
    assert failed.returncode == 1 and "1 failed" in failed.stdout, failed.stdout
