"""The policy rules: every fixture flagged with exactly its rule, the catalogue complete, rendered stacks clean."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from policies import rules
from tests.conftest import ROOT, STACKS
from tools import lint

FIXTURES = Path(__file__).parent / "policies"
CASES = sorted(FIXTURES.glob("*/*/*.yaml"))


def case_id(p: Path) -> str:
    return f"{p.parent.parent.name}/{p.parent.name}/{p.stem}"


@pytest.mark.parametrize("path", CASES, ids=[case_id(p) for p in CASES])
def test_fixture_flags_exactly_its_rule(path):
    rule_id, expect = path.parent.parent.name, path.parent.name
    objects = [obj for _, obj in lint.load([path])]
    found = {v.rule for v in lint.lint(objects)}
    if expect == "pass":
        assert found == set(), f"{case_id(path)} should pass, got {found}"
    else:
        assert found == {rule_id}, f"{case_id(path)} should fail {rule_id} only, got {found}"


@pytest.mark.parametrize("rule", rules.RULES, ids=[r.id for r in rules.RULES])
def test_every_rule_has_metadata_and_both_kinds_of_fixture(rule):
    assert rule.id and rule.title and rule.description
    assert rule.level in (rules.MANDATORY, rules.ADVISORY)
    for kind in ("pass", "fail"):
        assert list((FIXTURES / rule.id / kind).glob("*.yaml")), f"{rule.id} has no {kind} fixture"


def test_rule_ids_are_unique_and_fixture_folders_name_real_rules():
    assert len(rules.BY_ID) == len(rules.RULES)
    assert {p.name for p in FIXTURES.iterdir() if p.is_dir()} == set(rules.BY_ID)


@pytest.mark.parametrize("stack", STACKS)
def test_rendered_stacks_have_no_mandatory_violation(stack):
    res = subprocess.run([sys.executable, "-m", "tools.lint", f"rendered/{stack}/manifests.yaml", "--format", "json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout
    assert [v for v in json.loads(res.stdout) if v["level"] == "mandatory"] == []


def test_cli_text_json_and_exit_codes(tmp_path):
    fail = FIXTURES / "rdma-ipc-lock" / "fail"
    res = subprocess.run([sys.executable, "-m", "tools.lint", str(fail)], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 1
    assert res.stdout.startswith("rdma-ipc-lock mandatory Pod/training/gpu-pod: ")
    res = subprocess.run([sys.executable, "-m", "tools.lint", str(fail), "--format", "json"], cwd=ROOT,
                         capture_output=True, text=True)
    (v,) = json.loads(res.stdout)
    assert set(v) == {"rule", "level", "kind", "namespace", "name", "message"}
    # Config merged over the defaults: downgrade the rule, and the run passes (advisory only).
    cfg = tmp_path / "policy.yaml"
    cfg.write_text("rdma-ipc-lock:\n  enforcementLevel: advisory\n")
    res = subprocess.run([sys.executable, "-m", "tools.lint", str(fail), "--config", str(cfg)], cwd=ROOT,
                         capture_output=True, text=True)
    assert res.returncode == 0 and "rdma-ipc-lock advisory" in res.stdout


def test_exemptions_and_thresholds_from_config():
    (obj,) = [o for _, o in lint.load([FIXTURES / "shm-size" / "pass" / "pod.yaml"])]
    assert lint.lint([obj], {"shm-size": {"minGiBPerGpu": 2}})[0].rule == "shm-size"
    (bad,) = [o for _, o in lint.load([FIXTURES / "image-pinned" / "fail" / "latest.yaml"])]
    assert lint.lint([bad], {"image-pinned": {"exemptNamespaces": ["training"]}}) == []
    assert lint.lint([bad], {"image-pinned": {"enforcementLevel": "disabled"}}) == []


def test_deprecated_and_unknown_nccl_names_are_advisory_removed_are_mandatory():
    levels = {}
    for name in ("removed", "deprecated", "unknown"):
        (obj,) = [o for _, o in lint.load([FIXTURES / "nccl-known-vars" / "fail" / f"{name}.yaml"])]
        (v,) = lint.lint([obj])
        levels[name] = v.level
        if name == "deprecated":
            assert "NCCL_MIN_CTAS" in v.message
        if name == "unknown":
            assert "init_process_group" in v.message
    assert levels == {"removed": "mandatory", "deprecated": "advisory", "unknown": "advisory"}


def test_ipc_lock_remediation_is_additive():
    (obj,) = [o for _, o in lint.load([FIXTURES / "rdma-ipc-lock" / "fail" / "no-ipc-lock.yaml"])]
    fixed = rules.add_ipc_lock(obj)
    assert fixed["spec"]["containers"][0]["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    assert lint.lint([fixed]) == []
    assert rules.add_ipc_lock(fixed) is None
