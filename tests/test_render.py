"""The offline renderer: deterministic, current, honest about bad input, and never leaking a secret."""

import subprocess
import sys

import pytest
import yaml

from tests.conftest import ROOT, STACKS, stack_platform
from tools import render


def cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "tools.render", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("stack", STACKS)
def test_committed_render_is_current(stack, rendered):
    for name, text in rendered(stack).files.items():
        committed = ROOT / "rendered" / stack / name
        assert committed.is_file(), f"rendered/{stack}/{name} missing: run make render STACK={stack}"
        assert committed.read_text() == text, f"rendered/{stack}/{name} is stale: run make render STACK={stack}"


def test_two_renders_are_byte_identical(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert cli("--stack", "prod-ib", "--out", str(a)).returncode == 0
    assert cli("--stack", "prod-ib", "--out", str(b)).returncode == 0
    for name in ("manifests.yaml", "packages.yaml", "SUMMARY.md"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_check_reports_stale_output_with_a_diff(tmp_path):
    out = tmp_path / "dev"
    assert cli("--stack", "dev", "--out", str(out)).returncode == 0
    assert cli("--stack", "dev", "--out", str(out), "--check").returncode == 0
    (out / "manifests.yaml").write_text((out / "manifests.yaml").read_text().replace("500Gi", "5Gi"))
    res = cli("--stack", "dev", "--out", str(out), "--check")
    assert res.returncode == 1
    assert "-      storage: 5Gi" in res.stdout and "+      storage: 500Gi" in res.stdout
    assert "make render STACK=dev" in res.stderr


def test_unknown_stack_exits_2_naming_the_stacks():
    res = cli("--stack", "nope")
    assert res.returncode == 2
    assert "unknown stack 'nope'" in res.stderr and "dev" in res.stderr
    assert "Traceback" not in res.stderr


def write_stack(tmp_path, name, platform, extra=None):
    doc = {"config": {"fastpath:platform": platform, **(extra or {})}}
    (tmp_path / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump(doc))


def test_bad_stack_exits_2_with_key_path_and_registers_nothing(tmp_path, monkeypatch):
    platform = stack_platform("prod-ib")
    platform["fabric"]["rails"][2]["hcaa"] = platform["fabric"]["rails"][2].pop("hca")
    platform["gpu"]["perNode"] = "eight"
    write_stack(tmp_path, "broken", platform)
    res = cli("--stack", "broken", "--stacks-dir", str(tmp_path))
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    # The file actually read is named, not the default folder's (issue 20: --stacks-dir errors named stacks/).
    assert f"{tmp_path}/Pulumi.broken.yaml: fastpath:platform.gpu.perNode: Input should be a valid integer" in lines[0]
    assert "stacks/Pulumi.broken.yaml" not in res.stderr
    assert any("fastpath:platform.fabric.rails[2].hca: Field required" in line for line in lines)
    assert any("fastpath:platform.fabric.rails[2].hcaa: unknown key" in line for line in lines)
    assert "Traceback" not in res.stderr
    monkeypatch.setattr(render, "STACKS", tmp_path)
    with pytest.raises(render.RenderError) as err:
        render.run_program("broken")
    assert err.value.registered == 0


def test_secure_values_never_appear_in_output(tmp_path, monkeypatch):
    write_stack(tmp_path, "secretive", stack_platform("dev"), {"fastpath:hfToken": {"secure": "v1:AAAAsupersecretciphertext"}})
    monkeypatch.setattr(render, "STACKS", tmp_path)
    config, secrets = render.load_stack_config("secretive")
    assert config["fastpath:hfToken"] == render.SECRET and secrets == ["fastpath:hfToken"]
    # The program refuses keys it does not read, and says which it reads.
    with pytest.raises(render.RenderError, match="fastpath:hfToken: unknown key"):
        render.run_program("secretive")


def test_numbers_come_out_as_integers(rendered):
    text = rendered("prod-ib").files["manifests.yaml"]
    assert "perNodeBlockSize: 16\n" in text and "numVfs: 8\n" in text
    assert ".0\n" not in text


def test_manifests_are_ordered_namespaces_first(rendered):
    kinds = [o["kind"] for o in rendered("prod-roce").objects]
    assert kinds[: kinds.count("Namespace")] == ["Namespace"] * kinds.count("Namespace")


def test_render_ends_with_each_jobs_wiring_the_policy_result_and_the_summary_path(tmp_path):
    out = tmp_path / "prod-roce"
    res = cli("--stack", "prod-roce", "--out", str(out))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.rstrip().splitlines()
    assert lines[2].split() == ["job", "kind", "nodes", "x", "GPUs", "transport", "rails/networks", "NCCL_NET", "queue"]
    assert lines[3].split() == ["mistral-sft", "PyTorchJob", "2-8", "(elastic)", "x", "4", "roce", "rail0-shared,", "rail1-shared", "IB", "training"]
    assert lines[-2] == "policy: 0 violations, 0 mandatory (python -m tools.lint)"
    assert lines[-1] == f"full summary: {out / 'SUMMARY.md'}"
    assert len(lines) <= 12, "the closing summary stays short: the rest is in SUMMARY.md"


def test_rendering_imports_none_of_the_test_extras():
    """`make render` installs requirements.txt only: a render must not need pytest, torch or the schema tools."""
    probe = "import sys; from tools import render; render.render_stack('prod-ib'); print(sorted({m.split('.')[0] for m in sys.modules}))"
    res = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    loaded = set(eval(res.stdout.strip().splitlines()[-1]))  # noqa: S307 - our own probe's printed list
    extras = {"pytest", "hypothesis", "torch", "jsonschema", "kubernetes_validate", "pulumi_policy", "mypy", "ruff"}
    assert not loaded & extras


def pins(path):
    lines = [line.strip() for line in (ROOT / path).read_text().splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def test_requirements_are_exact_pins_split_between_render_and_test():
    render_pins, test_pins = pins("requirements.txt"), pins("requirements-test.txt")
    assert all("==" in p for p in render_pins + test_pins)
    names = [p.split("==")[0].lower() for p in render_pins + test_pins]
    assert len(names) == len(set(names)), "a package is pinned in both files"
    assert {"pulumi", "pulumi-kubernetes", "pydantic", "pyyaml"} == {p.split("==")[0].lower() for p in render_pins}
    assert "torch" in {p.split("==")[0] for p in test_pins}


def test_a_render_the_policy_pack_refuses_exits_non_zero(tmp_path, capsys, monkeypatch):
    """The render is written (SUMMARY.md lists the findings) but `make render` fails: CrossGuard would refuse the
    same objects at `pulumi preview`."""
    from policies.engine import Violation  # noqa: PLC0415

    found = Violation("shm-size", "mandatory", "PyTorchJob", "training", "example-train", "/dev/shm is 64 MiB")
    monkeypatch.setattr("tools.lint.lint", lambda objs: [found])  # render imports it when it renders
    code = render.main(["--stack", "dev", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 1 and "1 mandatory policy violation(s)" in err and "stacks/Pulumi.dev.yaml" in err
    assert "/dev/shm is 64 MiB" in (tmp_path / "out" / "SUMMARY.md").read_text()
