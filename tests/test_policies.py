"""The policy rules: every fixture flagged with exactly its rule, the catalogue complete, rendered stacks clean."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from components.fabric import kinds
from policies import engine
from policies.rules import AREAS
from policies.rules.fabric import add_ipc_lock
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


@pytest.mark.parametrize("rule", engine.RULES, ids=[r.id for r in engine.RULES])
def test_every_rule_has_metadata_and_both_kinds_of_fixture(rule):
    assert rule.id and rule.title and rule.description
    assert rule.level in (engine.MANDATORY, engine.ADVISORY)
    for kind in ("pass", "fail"):
        assert list((FIXTURES / rule.id / kind).glob("*.yaml")), f"{rule.id} has no {kind} fixture"


def test_rule_ids_are_unique_and_fixture_folders_name_real_rules():
    assert len(engine.BY_ID) == len(engine.RULES)
    assert {p.name for p in FIXTURES.iterdir() if p.is_dir()} == set(engine.BY_ID)


@pytest.mark.parametrize("stack", STACKS)
def test_rendered_stacks_have_no_mandatory_violation(stack):
    res = subprocess.run([sys.executable, "-m", "tools.lint", f"rendered/{stack}/manifests.yaml", "--format", "json"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout
    assert [v for v in json.loads(res.stdout) if v["level"] == "mandatory"] == []


def test_cli_text_json_and_exit_codes(tmp_path):
    fail = FIXTURES / "rdma-ipc-lock" / "fail"
    res = subprocess.run([sys.executable, "-m", "tools.lint", str(fail)], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 1
    assert res.stdout.startswith("rdma-ipc-lock mandatory Pod/training/gpu-pod: ")
    res = subprocess.run([sys.executable, "-m", "tools.lint", str(fail), "--format", "json"], cwd=ROOT, capture_output=True, text=True)
    (v,) = json.loads(res.stdout)
    assert set(v) == {"rule", "level", "kind", "namespace", "name", "message"}
    # Config merged over the defaults: downgrade the rule, and the run passes (advisory only).
    cfg = tmp_path / "policy.yaml"
    cfg.write_text("rdma-ipc-lock:\n  enforcementLevel: advisory\n")
    res = subprocess.run([sys.executable, "-m", "tools.lint", str(fail), "--config", str(cfg)], cwd=ROOT, capture_output=True, text=True)
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
    fixed = add_ipc_lock(obj)
    assert fixed["spec"]["containers"][0]["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    assert lint.lint([fixed]) == []
    assert add_ipc_lock(fixed) is None


def _load(rule_id: str, kind: str, name: str) -> dict:
    (obj,) = [o for _, o in lint.load([FIXTURES / rule_id / kind / f"{name}.yaml"])]
    return obj


def _rules(obj: dict) -> set[str]:
    return {v.rule for v in lint.lint([obj])}


@pytest.mark.parametrize(
    ("fixture", "needed"),
    [
        # kubeflow/trainer@v1.9.4:pkg/core/job.go PastBackoffLimit fails the job at restarts >= backoffLimit.
        (("restart-budget", "fail", "static-16-nodes"), 17),  # 16 pods under OnFailure: one fault = 16 restarts
        (("restart-budget", "pass", "static-headroom"), 5),  # 4 pods
        (("restart-budget", "fail", "elastic-worker0-store"), 9),  # c10d store on worker-0: all 8 agents exit
        (("restart-budget", "pass", "elastic-external-store"), 2),  # etcd outside the job: only the failed pod
        (("restart-budget", "fail", "mpijob-backoff-zero"), 2),  # the launcher; sleeping workers never restart
    ],
)
def test_restart_budget_is_one_more_than_the_restarts_of_one_fault(fixture, needed):
    obj = _load(*fixture)
    obj["spec"]["runPolicy"]["backoffLimit"] = needed - 1
    assert _rules(obj) == {"restart-budget"}
    assert f"at least {needed}" in lint.lint([obj])[0].message
    obj["spec"]["runPolicy"]["backoffLimit"] = needed
    assert _rules(obj) == set()
    del obj["spec"]["runPolicy"]["backoffLimit"]  # unset: the operator applies no limit at all
    assert _rules(obj) == set()


def test_never_replicas_do_not_count_and_exit_code_needs_a_nonzero_budget():
    job = _load("restart-budget", "fail", "mpijob-backoff-zero")
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["restartPolicy"] = "Never"
    assert _rules(job) == set()
    exit_code = _load("restart-budget", "fail", "exitcode-backoff-zero")
    assert "first Failed pod" in lint.lint([exit_code])[0].message
    exit_code["spec"]["runPolicy"]["backoffLimit"] = 1
    assert _rules(exit_code) == set()


def test_clean_pod_policy_defaults_and_scope():
    mpi = _load("clean-pod-policy", "fail", "mpijob-unset")
    (v,) = lint.lint([mpi])
    assert "sleep 365d" in v.message and "cleanPodPolicy: Running" in v.message and "16 GPUs" in v.message
    for policy, flagged in (("None", True), ("Running", False), ("All", False)):
        mpi["spec"]["runPolicy"]["cleanPodPolicy"] = policy
        assert (_rules(mpi) == {"clean-pod-policy"}) is flagged
    # The rule is about Training Operator v1 (kubeflow/trainer@v1.9.4); mpi-operator's v2beta1 is not judged.
    mpi["spec"]["runPolicy"]["cleanPodPolicy"] = "None"
    mpi["apiVersion"] = "kubeflow.org/v2beta1"
    assert "clean-pod-policy" not in _rules(mpi)


def test_init_containers_by_restart_policy():
    job = _load("init-fail-fast", "fail", "onfailure-preflight")
    replicas = job["spec"]["pytorchReplicaSpecs"]
    for policy, flagged in (("OnFailure", True), ("Always", True), ("ExitCode", True), ("Never", False)):
        for rs in replicas.values():
            rs["restartPolicy"] = policy
        job["spec"]["runPolicy"]["backoffLimit"] = 0 if policy == "Never" else 17
        assert (_rules(job) == {"init-fail-fast"}) is flagged, policy
    job["spec"]["runPolicy"]["backoffLimit"] = 17
    for rs in replicas.values():  # PyTorchJob replicas default to OnFailure
        del rs["restartPolicy"]
    assert _rules(job) == {"init-fail-fast"}
    for rs in replicas.values():  # operator-injected names are not the user's checks
        rs["template"]["spec"]["initContainers"][0]["name"] = "init-pytorch"
    assert _rules(job) == set()


@pytest.mark.parametrize(
    ("words", "launcher_env", "flagged"),
    [
        (["-x", "NCCL_NET=IB"], {}, False),
        (["-x", "NCCL_NET"], {"NCCL_NET": "IB"}, False),
        (["-x", "NCCL_NET"], {}, True),  # forwards nothing: the launcher has no value
        (["-genv", "NCCL_NET", "IB"], {}, False),
        ([], {"NCCL_NET": "IB"}, True),  # set on the launcher only: the ranks never see it
    ],
)
def test_nccl_net_reaches_mpi_ranks_through_mpirun(words, launcher_env, flagged):
    job = _load("nccl-net-set", "pass", "mpijob-exported")
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    argv = [w for w in launcher["command"] if w != "NCCL_NET=IB"]
    argv = [w for i, w in enumerate(argv) if not (w == "-x" and i + 1 < len(argv) and argv[i + 1] == "-x")]
    assert "NCCL_NET" not in " ".join(argv)
    launcher["command"] = ["sh", "-c", " ".join(argv[:3] + words + argv[3:])]  # as a shell script, too
    launcher["env"] = [{"name": k, "value": v} for k, v in launcher_env.items()] + launcher["env"]
    assert (_rules(job) == {"nccl-net-set"}) is flagged


@pytest.mark.parametrize(("size", "rule"), [("64Mi", "shm-mounted"), ("32Mi", "shm-mounted"), ("0", "shm-mounted"), ("65Mi", "shm-size"), ("512Mi", "shm-size"), ("1Gi", None)])
def test_shm_at_the_runtime_default_is_mandatory_above_it_advisory(size, rule):
    job = _load("shm-mounted", "fail", "shm-64mi")
    job["spec"]["template"]["spec"]["volumes"][0]["emptyDir"]["sizeLimit"] = size
    violations = lint.lint([job])
    assert {v.rule for v in violations} == ({rule} if rule else set())
    assert all(v.level == engine.BY_ID[v.rule].level for v in violations)


def test_launcher_placement_matches_tolerations_like_the_scheduler():
    job = _load("mpi-launcher-placement", "pass", "tolerations-copied")
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    launcher["tolerations"] = [{"operator": "Exists"}]  # tolerates every taint
    assert _rules(job) == set()
    launcher["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}]
    assert _rules(job) == {"mpi-launcher-placement"}
    (v,) = lint.lint([job])
    assert v.level == "advisory" and "nvidia.com/gpu:NoSchedule" in v.message


@pytest.mark.parametrize(
    ("host", "restarts", "needed"),
    [
        ("mistral-sft-rdzv", 5, 2),  # a store Service of its own: survivors re-rendezvous in place
        ("mistral-sft-worker-0", 5, 9),  # the store dies with that pod: all 8 agents exit
        ("etcd.training.svc", 0, 9),  # no maxRestarts: every agent exits on the first failure
    ],
)
def test_elastic_budget_depends_on_where_the_rendezvous_store_lives(host, restarts, needed):
    job = _load("restart-budget", "pass", "elastic-external-store")
    job["spec"]["elasticPolicy"].update(rdzvHost=host, maxRestarts=restarts)
    job["spec"]["runPolicy"]["backoffLimit"] = needed - 1
    assert _rules(job) == {"restart-budget"}
    job["spec"]["runPolicy"]["backoffLimit"] = needed
    assert _rules(job) == set()


def _hostnet_pod(host_network, dns_policy, gpus) -> dict:
    pod = _load("hostnetwork-dns", "fail", "pod-unset")
    spec = pod["spec"]
    spec.pop("hostNetwork")
    if host_network is not None:
        spec["hostNetwork"] = host_network
    if dns_policy is not None:
        spec["dnsPolicy"] = dns_policy
    if not gpus:
        del spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    return pod


@pytest.mark.parametrize(
    ("host_network", "dns_policy", "gpus", "flagged"),
    [
        (True, None, 8, True),  # unset is defaulted to ClusterFirst
        (True, "", 8, True),  # so is an empty string
        (True, "ClusterFirst", 8, True),
        (True, "ClusterFirstWithHostNet", 8, False),
        (True, "Default", 8, False),  # the node's resolv.conf, asked for by name
        (True, "None", 8, False),  # the pod's own dnsConfig
        (False, None, 8, False),  # on the pod network ClusterFirst is the cluster's DNS
        (None, "ClusterFirst", 8, False),
        (True, None, 0, False),  # no GPUs: a node agent, not a training pod
    ],
    ids=["unset", "empty", "cluster-first", "with-host-net", "default", "none", "pod-network", "no-host-network", "non-gpu-pod"],
)
def test_hostnetwork_pods_need_cluster_first_with_host_net(host_network, dns_policy, gpus, flagged):
    """The kubelet answers ClusterFirst with the cluster DNS only off the host network; on it, the pod falls through
    to the node's resolv.conf unless dnsPolicy is ClusterFirstWithHostNet
    (kubernetes/kubernetes@04791b4:pkg/kubelet/network/dns/dns.go getPodDNSType)."""
    violations = lint.lint([_hostnet_pod(host_network, dns_policy, gpus)])
    assert {v.rule for v in violations} == ({"hostnetwork-dns"} if flagged else set())
    if flagged:
        (v,) = violations
        assert v.level == "mandatory" and v.message.startswith("the pod runs on the host network with dnsPolicy ")
        assert v.message.endswith("set dnsPolicy: ClusterFirstWithHostNet")


def test_hostnetwork_dns_judges_the_mpi_launcher_of_a_gpu_job():
    """The launcher has no GPUs but resolves every worker's hostname for mpirun: it is judged with its job."""
    job = _load("hostnetwork-dns", "fail", "mpijob-launcher-cluster-first")
    (v,) = lint.lint([job])
    assert v.rule == "hostnetwork-dns" and v.message.startswith("Launcher pod runs on the host network with dnsPolicy ClusterFirst:")
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["dnsPolicy"] = "ClusterFirstWithHostNet"
    assert _rules(job) == set()
    del job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["dnsPolicy"]
    assert {v.message.split(" pod ")[0] for v in lint.lint([job])} == {"Worker"}


def test_every_rule_says_how_to_fix_it_and_only_declared_remediations_run():
    for rule in engine.RULES:
        assert rule.remediation and not rule.remediation.endswith("."), rule.id
    assert [r.id for r in engine.RULES if r.remediate is not None] == ["rdma-ipc-lock"]
    assert engine.BY_ID["hostnetwork-dns"].remediation == "set dnsPolicy: ClusterFirstWithHostNet"
    assert engine.BY_ID["hostnetwork-dns"].level == engine.MANDATORY


def test_a_rule_id_cannot_be_registered_twice():
    with pytest.raises(ValueError, match="registered twice"):
        engine.rule("image-pinned", "again", level=engine.MANDATORY, description="x", remediation="x")(lambda ctx: ())


def test_every_module_of_policies_rules_is_an_area_that_registers_rules():
    """policies/rules/__init__.py imports the modules AREAS names: one it does not name would register nothing, and
    its rules would be missing from the linter, the pack and the README without a word. Each module's docstring
    reads `Area: what its rules keep true`, which the README's section for it is made of."""
    modules = {p.stem for p in (ROOT / "policies" / "rules").glob("*.py") if p.stem != "__init__"}
    assert set(AREAS) == modules, f"name every module of policies/rules/ in AREAS (policies/rules/__init__.py): {sorted(modules ^ set(AREAS))}"
    assert {r.area for r in engine.RULES} == modules, "an area module registers no rule"
    for area in AREAS:
        doc = sys.modules[f"policies.rules.{area}"].__doc__ or ""
        assert ":" in doc.split(".")[0], f"policies/rules/{area}.py: the docstring starts `Area: ...`"


def test_the_catalogue_is_ordered_area_by_area():
    """The README, the linter's output and the CrossGuard pack list the rules in one deliberate order: the areas as
    AREAS lists them, and an area's rules in the order its module defines them."""
    areas = [r.area for r in engine.RULES]
    assert areas == sorted(areas, key=AREAS.index)
    for area in AREAS:
        mine = [r for r in engine.RULES if r.area == area]
        assert all(r.check.__module__ == f"policies.rules.{area}" for r in mine)
        assert mine == sorted(mine, key=lambda r: r.check.__code__.co_firstlineno)


RDMA_DEVICES = sorted({f"{kinds.ATTACHMENTS[a].resource_prefix}/{kinds.ATTACHMENTS[a].resource_stem}_rail0" for k in kinds.KINDS.values() if k.rdma for a in k.attachments} | {kinds.EFA_RESOURCE})


@pytest.mark.parametrize("device", RDMA_DEVICES)
def test_a_pod_with_the_device_of_any_rdma_row_is_an_rdma_pod(device):
    """The pack's idea of an RDMA pod reads the fabric-kind table: a pod holding the rail device of any attachment
    of a kind that carries RDMA (or EFA's) must name its NCCL network and may pin memory."""
    container = {
        "name": "train",
        "image": "nvcr.io/nvidia/pytorch:25.10-py3",
        "resources": {"limits": {"nvidia.com/gpu": 8, "memory": "512Gi", device: 1}},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    spec = {"containers": [container], "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}}]}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "training"}, "spec": spec}
    assert {"nccl-net-set", "rdma-ipc-lock"} <= _rules(pod)


def _unfiltered(rule: engine.Rule) -> engine.Rule:
    return dataclasses.replace(rule, kinds=None, pods=False)


def test_skipping_rules_by_kind_and_by_absent_pods_changes_no_verdict():
    """The linter skips a rule whose `kinds` cannot match, or that judges pods when there are none: running every
    rule on every object finds exactly the same, over every fixture, the corpus and seeded mutations of both."""
    import copy
    import random

    from tests.test_lint import _mutations
    from tools.manifests import read

    objects = [o for _, o in lint.load(CASES)] + [o for _, _, o in read([Path(__file__).parent / "lint_corpus"]).objects]
    every = engine.plan(None, [_unfiltered(r) for r in engine.RULES])
    filtered = engine.plan(None)
    rng = random.Random(7)
    for i in range(len(objects) * 10):
        obj = objects[i] if i < len(objects) else _mutations(copy.deepcopy(objects[i % len(objects)]), rng)
        assert engine.evaluate(obj, checks=filtered) == engine.evaluate(obj, checks=every), obj


@pytest.mark.parametrize(
    ("enable", "findings"),
    [
        (None, {("nccl-inspector-enabled", "mandatory")}),
        ("0", {("nccl-inspector-enabled", "advisory")}),
        ("00", {("nccl-inspector-enabled", "advisory")}),
        ("1", set()),
        (" 7", set()),
        ("-1", set()),
        # atoi reads these as 0 (or stops at the letters): not integers, nccl-int-values' to refuse.
        ("true", {("nccl-int-values", "mandatory")}),
        ("on", {("nccl-int-values", "mandatory")}),
        ("1abc", {("nccl-int-values", "mandatory")}),
    ],
)
def test_the_inspector_is_on_only_with_a_non_zero_integer(enable, findings):
    """The Inspector reads NCCL_INSPECTOR_ENABLE with atoi (NVIDIA/nccl@v2.30.7-1:plugins/profiler/inspector/
    inspector.cc inspectorGlobalInit): unset is off (a mistake), a word is no integer, an explicit 0 is off on
    purpose."""
    obj = next(obj for _, obj in lint.load([FIXTURES / "nccl-inspector-enabled" / "pass" / "enabled.yaml"]))
    env = obj["spec"]["containers"][0]["env"]
    env[:] = [e for e in env if e["name"] != "NCCL_INSPECTOR_ENABLE"] + ([{"name": "NCCL_INSPECTOR_ENABLE", "value": enable}] if enable is not None else [])
    assert {(v.rule, v.level) for v in lint.lint([obj])} == findings
