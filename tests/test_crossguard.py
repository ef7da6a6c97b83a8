"""The CrossGuard pack under pulumi_policy's own argument types: props wrapped as the engine wraps them (a
read-only proxy over deserialized protobuf, every number a float)."""

import runpy
from pathlib import Path

import pytest
from google.protobuf import json_format, struct_pb2
from pulumi_policy import (
    EnforcementLevel,
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.deserialize import deserialize_properties
from pulumi_policy.proxy import unknown_checking_proxy

from policies import pack
from policies.config import policy_names
from policies.engine import BY_ID, RULES
from tests.conftest import ROOT
from tools import lint

FIXTURES = Path(__file__).parent / "policies"


def engine_args(obj: dict, config: dict | None = None) -> ResourceValidationArgs:
    struct = struct_pb2.Struct()
    struct.update(obj)  # protobuf Struct: every number becomes a double, as on the wire
    props = unknown_checking_proxy(deserialize_properties(json_format.MessageToDict(struct)))
    group_version = obj["apiVersion"] if "/" in obj["apiVersion"] else f"core/{obj['apiVersion']}"
    return ResourceValidationArgs(f"kubernetes:{group_version}:{obj['kind']}", props, f"urn:pulumi:s::p::{obj['kind']}::x", "x", None, None, config or {})


def run_policy(policy, obj, config=None) -> list[str]:
    found: list[str] = []
    policy.validate(engine_args(obj, config), lambda message, urn=None: found.append(message))
    return found


def engine_stack(objects: list[dict], config: dict | None = None) -> StackValidationArgs:
    """What AnalyzeStack hands a stack policy (pulumi_policy/policy.py): every resource, props as proxies."""
    options = PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [])
    resources = []
    for i, obj in enumerate(objects):
        args = engine_args(obj)
        resources.append(PolicyResource(args.resource_type, args.props, f"{args.urn}{i}", args.name, options, None, None, [], {}))
    return StackValidationArgs(resources, config or {})


def run_stack_policy(policy, objects, config=None) -> list[tuple[str, str | None]]:
    found: list[tuple[str, str | None]] = []
    policy.validate(engine_stack(objects, config), lambda message, urn=None: found.append((message, urn)))
    return found


POLICIES = {p.name: p for p in pack.policies()}


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*/*/*.yaml")), ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}/{p.stem}")
def test_engine_path_agrees_with_the_linter(path):
    rule_id = path.parent.parent.name
    objects = [o for _, o in lint.load([path])]
    if BY_ID[rule_id].stack:  # a stack policy: it sees every object, as the linter does
        offline = [v.message for v in lint.lint(objects) if v.rule == rule_id]
        engine = [m for p in (rule_id, f"{rule_id}-advisory") for m, _ in run_stack_policy(POLICIES[p], objects)]
        assert sorted(engine) == sorted(offline)
        return
    if len(objects) > 1:
        pytest.skip("cross-object fixture: CrossGuard sees one resource at a time")
    (obj,) = objects
    offline = [v.message for v in lint.lint([obj]) if v.rule == rule_id]
    engine = run_policy(POLICIES[rule_id], obj)
    if rule_id in ("nccl-known-vars", "shm-fits-memory"):
        engine += run_policy(POLICIES[f"{rule_id}-advisory"], obj)
    assert sorted(engine) == sorted(offline)


def test_numbers_arrive_as_floats_and_are_normalized():
    (obj,) = [o for _, o in lint.load([FIXTURES / "gpu-procs-match" / "fail" / "fewer-procs.yaml"])]
    args = engine_args(obj)
    limits = args.props["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert isinstance(limits["nvidia.com/gpu"], float)  # what the engine hands a policy
    messages = run_policy(POLICIES["gpu-procs-match"], obj)
    assert len(messages) == 2  # Master and Worker
    assert all("has 8 GPUs but nprocPerNode is 4" in m for m in messages)


def test_policy_config_reaches_the_rule():
    (obj,) = [o for _, o in lint.load([FIXTURES / "shm-size" / "pass" / "pod.yaml"])]
    assert run_policy(POLICIES["shm-size"], obj) == []
    assert len(run_policy(POLICIES["shm-size"], obj, {"minGiBPerGpu": 2})) == 1


def test_non_kubernetes_resources_are_ignored():
    args = ResourceValidationArgs("aws:s3/bucket:Bucket", unknown_checking_proxy({"bucket": "x"}), "urn", "x", None, None, {})
    found = []
    POLICIES["image-pinned"].validate(args, lambda m, u=None: found.append(m))
    assert found == []


def test_remediation_adds_ipc_lock_through_the_engine_types():
    (obj,) = [o for _, o in lint.load([FIXTURES / "rdma-ipc-lock" / "fail" / "no-ipc-lock.yaml"])]
    fixed = POLICIES["rdma-ipc-lock"].remediate(engine_args(obj))
    assert fixed["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]


def test_pack_entrypoint_registers_every_rule(monkeypatch):
    import pulumi_policy

    seen = {}

    def fake_pack(name, enforcement_level, policies):  # PolicyPack itself serves forever
        seen.update(name=name, level=enforcement_level, policies=policies)

    monkeypatch.setattr(pulumi_policy, "PolicyPack", fake_pack)
    runpy.run_path(str(ROOT / "policies" / "__main__.py"), run_name="__main__")
    names = {p.name for p in seen["policies"]}
    assert seen["name"] == "fastpath" and seen["level"] == EnforcementLevel.ADVISORY
    assert {r.id for r in RULES} <= names
    levels = {p.name: p.enforcement_level for p in seen["policies"]}
    assert levels["rdma-ipc-lock"] == EnforcementLevel.MANDATORY and levels["shm-size"] == EnforcementLevel.ADVISORY


def test_job_rules_read_engine_floats_as_counts():
    (obj,) = [o for _, o in lint.load([FIXTURES / "restart-budget" / "fail" / "static-16-nodes.yaml"])]
    args = engine_args(obj)
    assert isinstance(args.props["spec"]["runPolicy"]["backoffLimit"], float)
    assert isinstance(args.props["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"], float)
    (message,) = run_policy(POLICIES["restart-budget"], obj)
    assert "backoffLimit 3 is not above the 16 container restarts" in message and "at least 17" in message
    (elastic,) = [o for _, o in lint.load([FIXTURES / "restart-budget" / "pass" / "elastic-external-store.yaml"])]
    assert run_policy(POLICIES["restart-budget"], elastic) == []  # maxRestarts 5.0 still counts as >= 1
    levels = {p.name: p.enforcement_level for p in pack.policies()}
    assert levels["mpi-launcher-placement"] == EnforcementLevel.ADVISORY
    assert all(levels[r] == EnforcementLevel.MANDATORY for r in ("clean-pod-policy", "restart-budget", "init-fail-fast", "nccl-net-set", "shm-mounted"))


def test_hostnetwork_dns_reads_engine_props():
    """Through the engine the GPU count is 8.0 and the pod spec a read-only proxy; the rule still sees GPUs and a
    host-network pod without ClusterFirstWithHostNet (kubernetes/kubernetes@04791b4:pkg/kubelet/network/dns/dns.go
    getPodDNSType)."""
    (obj,) = [o for _, o in lint.load([FIXTURES / "hostnetwork-dns" / "fail" / "pod-unset.yaml"])]
    args = engine_args(obj)
    assert isinstance(args.props["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"], float)
    assert not isinstance(args.props["spec"], dict)
    (message,) = run_policy(POLICIES["hostnetwork-dns"], obj)
    assert message.startswith("the pod runs on the host network with dnsPolicy unset (so ClusterFirst)")
    obj["spec"]["dnsPolicy"] = "ClusterFirstWithHostNet"
    assert run_policy(POLICIES["hostnetwork-dns"], obj) == []


def test_each_policy_carries_its_rules_metadata():
    for policy in pack.policies():
        rule = policy_names()[policy.name]
        assert policy.remediation_steps == rule.remediation
        assert policy.description.startswith(rule.title)
        assert isinstance(policy, StackValidationPolicy if rule.stack else ResourceValidationPolicy)
        if isinstance(policy, ResourceValidationPolicy):
            assert policy.has_remediation() == (rule.remediate is not None and policy.name == rule.id)
    assert POLICIES["hostnetwork-dns"].enforcement_level == EnforcementLevel.MANDATORY


# ------------------------------------------------------------------------------------------- TrainJobs: the stack view

PROD_V2 = ROOT / "rendered" / "prod-v2" / "manifests.yaml"


def _prod_v2() -> list[dict]:
    return [o for _, o in lint.load([PROD_V2])]


def _runtime_pair() -> list[dict]:
    """README's TrainJob and prod-v2's fastpath-torch, as a stack holds them."""
    (job,) = [o for _, o in lint.load([ROOT / "tests" / "lint_corpus" / "trainjob-researcher-readme.yaml"])]
    runtime = next(o for o in _prod_v2() if o["kind"] == "ClusterTrainingRuntime" and o["metadata"]["name"] == "fastpath-torch")
    return [job, runtime]


def test_prod_v2_passes_the_pack_through_the_engine_types():
    """Every policy over rendered/prod-v2 as the engine hands it over: resource policies one resource at a time
    (TrainJobs left to the stack policies), stack policies with the whole stack, numbers as floats."""
    objects = _prod_v2()
    for policy in pack.policies():
        if isinstance(policy, StackValidationPolicy):
            assert run_stack_policy(policy, objects) == [], policy.name
        else:
            for obj in objects:
                assert run_policy(policy, obj) == [], (policy.name, obj["kind"], obj["metadata"]["name"])


def test_resource_policies_leave_trainjobs_to_the_stack_view():
    """Alone, a TrainJob is a fragment of its pods: judged by a resource policy it would lack the runtime's gang,
    /dev/shm and wiring (gang-scheduling and shm-mounted fired on every prod-v2 TrainJob before)."""
    (job,) = [o for o in _prod_v2() if o["kind"] == "TrainJob" and o["metadata"]["name"] == "llama-sft"]
    assert all(run_policy(p, job) == [] for p in pack.policies() if isinstance(p, ResourceValidationPolicy))
    messages = run_stack_policy(POLICIES["trainjob-runtime-advisory"], [job])
    assert [m.split(":")[0] for m, _ in messages] == ["runtimeRef names ClusterTrainingRuntime fastpath-torch, which is not among the objects checked"]


def test_stack_policy_judges_the_trainjob_by_its_runtime_with_engine_floats():
    """resourcesPerNode arrives as 4.0 GPUs; the override is found on the TrainJob's own URN, as the linter finds it."""
    job, runtime = _runtime_pair()
    job["spec"]["trainer"]["resourcesPerNode"] = {"limits": {"nvidia.com/gpu": 4}}
    stack = engine_stack([job, runtime])
    limits = stack.resources[0].props["spec"]["trainer"]["resourcesPerNode"]["limits"]
    assert isinstance(limits["nvidia.com/gpu"], float) and not isinstance(stack.resources[0].props, dict)
    found = []
    POLICIES["trainjob-runtime"].validate(stack, lambda message, urn=None: found.append((message, urn)))
    offline = [v.message for v in lint.lint([job, runtime]) if v.rule == "trainjob-runtime"]
    assert [m for m, _ in found] == offline
    assert {urn for _, urn in found} == {stack.resources[0].urn}
    assert any("nvidia.com/gpu requests 8 and limits 4 after the merge" in m for m in offline), offline
    assert run_stack_policy(POLICIES["trainjob-runtime-advisory"], [job, runtime]) == []


def test_stack_policy_carries_the_other_rules_findings_with_their_id():
    """A rule that fires on the merged pod reports through the stack policy at its default level, prefixed."""
    job, runtime = _runtime_pair()
    job["spec"]["trainer"]["image"] = "nvcr.io/nvidia/pytorch:latest"
    job["spec"]["trainer"]["env"] = [{"name": "NCCL_DEBUG", "value": "TRACE"}]
    mandatory = [m for m, _ in run_stack_policy(POLICIES["trainjob-runtime"], [job, runtime])]
    advisory = [m for m, _ in run_stack_policy(POLICIES["trainjob-runtime-advisory"], [job, runtime])]
    assert [m.split(": ")[0] for m in mandatory] == ["image-pinned"]
    assert mandatory[0].startswith("image-pinned: in the pods ClusterTrainingRuntime fastpath-torch gives it: node container 'node': image 'nvcr.io/nvidia/pytorch:latest'")
    assert [m.split(": ")[0] for m in advisory] == ["nccl-debug-trace"]
    assert run_stack_policy(POLICIES["trainjob-runtime"], [job, runtime], {"exemptNamespaces": ["research"]}) == []
