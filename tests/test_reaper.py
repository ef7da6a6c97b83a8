"""The reaper (components/ops/reaper.py) on pods that cannot start, and what the controllers then do with the job:
a v2 run fails at once through its runtime's rules (tests/jobset_v012.py restates JobSet and the Job controller),
a v1 job is finished and its pods deleted by the operator (tests/operator_v1.py, kubeflow/trainer@v1.9.4)."""

import ast
import sys
from pathlib import Path

import pytest

from components.jobs.runtime_v2.build import START_FAILED_CONDITION
from components.jobs.runtime_v2.controller import effective_jobset
from components.model.config import PlatformConfig, ReaperConfig
from components.ops import component, reaper
from tests import jobset_v012 as js
from tests import operator_v1 as op
from tests.conftest import stack_platform

T0 = reaper.parse_time("2026-11-25T03:00:00Z")
assert T0 is not None
MIN = 60.0
START = 30 * MIN
V2_OWNER = {"apiVersion": "batch/v1", "kind": "Job", "name": "run-node-0", "controller": True}
V1_OWNER = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "llama", "controller": True}


def stamp(t: float) -> str:
    return reaper._stamp(t)


def pod(owner=V2_OWNER, node="gpu-07", phase="Pending", waiting=None, init_waiting=None, scheduled_message="", created=T0) -> dict:
    conditions = [{"type": "PodScheduled", "status": "True" if node else "False", "lastTransitionTime": stamp(created), "message": scheduled_message}]
    status: dict = {"phase": phase, "conditions": conditions}
    if node:
        status["containerStatuses"] = [{"name": "node", "state": {"waiting": waiting or {"reason": "ContainerCreating"}}}]
        if init_waiting:
            status["initContainerStatuses"] = [{"name": "preflight", "state": {"waiting": init_waiting}}]
    labels = {"jobset.sigs.k8s.io/jobset-name": "run"} if owner is V2_OWNER else {}
    return {
        "metadata": {"name": "run-node-0-0", "namespace": "training", "creationTimestamp": stamp(created), "ownerReferences": [owner], "labels": labels},
        "spec": {"nodeName": node} if node else {},
        "status": status,
    }


PULL = {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "nvcr.io/nvidia/pytorh:25.10-py3"'}
SECRET = {"reason": "CreateContainerConfigError", "message": 'secret "hf" not found'}
# (id, pod, minutes after scheduling, pending deadline (min), the reason it is stuck for, or None)
CASES = [
    ("bad-image-before-deadline", pod(waiting=PULL), 29, None, None),
    ("bad-image-past-deadline", pod(waiting=PULL), 31, None, "ImagePullBackOff"),
    ("missing-secret", pod(waiting=SECRET), 31, None, "CreateContainerConfigError"),
    ("init-container-bad-image", pod(init_waiting=PULL), 31, None, "ImagePullBackOff"),
    ("volume-never-mounts", pod(), 31, None, "ContainersNotCreated"),
    ("running", pod(phase="Running", waiting={"reason": "CrashLoopBackOff"}), 300, None, None),
    ("queued-for-gpus", pod(node=None, scheduled_message="0/16 nodes are available: 16 Insufficient nvidia.com/gpu"), 600, None, None),
    ("queued-past-pending-deadline", pod(node=None, scheduled_message="0/16 nodes are available"), 61, 60, "Unschedulable"),
    ("claim-missing", pod(node=None, scheduled_message='persistentvolumeclaim "datasets" not found'), 31, None, "ClaimNotFound"),
]


@pytest.mark.parametrize(("p", "minutes", "pending", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_what_counts_as_stuck(p, minutes, pending, reason):
    s = reaper.stuck(p, T0 + minutes * MIN, START, pending * MIN if pending else None)
    assert (s.reason if s else None) == reason
    if s is not None:
        assert s.pod == "run-node-0-0" and s.namespace == "training" and s.message


def test_a_v1_store_pod_is_left_to_its_job():
    """A v1 PyTorch job's rendezvous store is a batch Job's pod too, but no runtime rule ends its run: failing it
    would only have the Job make another. Its job's workers, stuck on the same image, fail the job."""
    store = pod(owner={"apiVersion": "batch/v1", "kind": "Job", "name": "llama-rdzv", "controller": True}, waiting=PULL)
    s = reaper.stuck(store, T0 + 31 * MIN, START, None)
    assert s is not None and reaper.action(store, s) is None


def test_a_pod_already_ended_or_being_deleted_is_left_alone():
    ended = reaper.pod_status_patch(pod(waiting=PULL), reaper.stuck(pod(waiting=PULL), T0 + 31 * MIN, START, None), T0)
    p = pod(waiting=PULL)
    p["status"]["conditions"] = ended["status"]["conditions"]
    assert reaper.stuck(p, T0 + 31 * MIN, START, None) is None
    p = pod(waiting=PULL)
    p["metadata"]["deletionTimestamp"] = stamp(T0)
    assert reaper.stuck(p, T0 + 31 * MIN, START, None) is None


def v2_jobsets(rendered) -> list[tuple[str, dict]]:
    objs = rendered("prod-v2").objects
    out = []
    for tj in (o for o in objs if o["kind"] == "TrainJob"):
        rt = next(o for o in objs if o["kind"] == "ClusterTrainingRuntime" and o["metadata"]["name"] == tj["spec"]["runtimeRef"]["name"])
        out.append((tj["metadata"]["name"], effective_jobset(tj, rt)["jobset"]))
    return out


def test_a_stuck_v2_pod_fails_the_run_at_once_with_the_reason(rendered):
    """The reaper's patch makes the pod Failed with its condition; the Job's podFailurePolicy fails the Job
    (reason PodFailurePolicy), and the JobSet fails the run without a restart (the next attempt would be stuck the
    same way), whichever replicated job the pod belongs to."""
    assert reaper.CONDITION == START_FAILED_CONDITION
    p = pod(waiting=PULL)
    s = reaper.stuck(p, T0 + 31 * MIN, START, None)
    a = reaper.action(p, s)
    assert a is not None and a.kind == "fail-pod"
    patched = reaper.pod_status_patch(p, s, T0 + 31 * MIN)["status"]
    assert patched["phase"] == "Failed"
    conditions = tuple(c["type"] for c in patched["conditions"] if c["status"] == "True")
    (cond,) = [c for c in patched["conditions"] if c["type"] == START_FAILED_CONDITION]
    assert cond["reason"] == "ImagePullBackOff" and "pytorh" in cond["message"]
    checked = 0
    for name, jobset in v2_jobsets(rendered):
        for rj in jobset["replicatedJobs"]:
            # No container terminated: the kubelet tears the pod down and may report 137 (ContainerStatusUnknown).
            for exit_code in (0, 137):
                failed = js.PodFailure(f"{name}-{rj['name']}-0-0", container="node", exit_code=exit_code, conditions=conditions)
                reason, message = js.job_failure(rj["template"]["spec"], failed)
                assert reason == "PodFailurePolicy", (name, rj["name"])
                assert js.failure_action(jobset, rj["name"], reason, message) == "FailJobSet", (name, rj["name"])
                checked += 1
    assert checked


def test_a_stuck_v1_pod_finishes_its_job_and_frees_the_gang(rendered):
    """Failing the pod would not do on v1: a worker under ExitCode is recreated, stuck again, forever. The reaper
    finishes the job instead; the operator then deletes its Running and Pending pods (cleanPodPolicy Running)."""
    for job in (o for o in rendered("prod-ib").objects if o["kind"] in ("PyTorchJob", "MPIJob")):
        stuck_pod = op.Pod("Worker", "Failed")  # what failing the pod would do: no exit code, the 0xbeef placeholder
        if job["kind"] == "PyTorchJob":
            assert op.pytorch_outcome(job, [stuck_pod]) == "recreated"
        owner = {**V1_OWNER, "kind": job["kind"], "name": job["metadata"]["name"]}
        p = pod(owner=owner, waiting=SECRET)
        s = reaper.stuck(p, T0 + 31 * MIN, START, None)
        a = reaper.action(p, s)
        assert a is not None and (a.kind, a.target, a.resource) == ("fail-job", job["metadata"]["name"], reaper.V1_KINDS[job["kind"]])
        live = {"metadata": {"resourceVersion": "42"}, "status": {"conditions": [{"type": "Created", "status": "True"}, {"type": "Running", "status": "True"}]}}
        patch = reaper.job_status_patch(live, s, T0 + 31 * MIN)
        conditions = {c["type"]: c for c in patch["status"]["conditions"]}
        assert conditions["Failed"]["status"] == "True" and conditions["Failed"]["reason"] == "CreateContainerConfigError"
        assert 'secret "hf" not found' in conditions["Failed"]["message"] and conditions["Running"]["status"] == "False"
        gang = [op.Pod("Worker", "Running"), op.Pod("Worker", "Pending"), op.Pod("Worker", "Pending")]
        assert op.deleted_when_finished(job, gang) == gang, job["metadata"]["name"]
        # A job that already ended is not touched again.
        done = {"metadata": {"resourceVersion": "43"}, "status": {"conditions": [{"type": "Failed", "status": "True"}]}}
        assert reaper.job_status_patch(done, s, T0) is None


class FakeApi:
    def __init__(self, pods: list[dict], jobs: dict[str, dict]):
        self.pods, self.jobs, self.calls = pods, jobs, []

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        self.calls.append((method, path))
        if method == "GET" and "/pods?" in path:
            return {"items": self.pods}
        if method == "GET":
            return self.jobs[path.rsplit("/", 1)[1]]
        return {}


def allowed(rules: list[dict], method: str, path: str) -> bool:
    """Whether a Role's rules allow the call (resource, subresource and verb from the path)."""
    parts = path.split("?")[0].strip("/").split("/")
    group = "" if parts[0] == "api" else parts[1]
    rest = parts[parts.index("namespaces") + 2 :]
    resource = "/".join([rest[0], *rest[2:3]])
    verb = {"GET": "get" if len(rest) > 1 else "list", "PATCH": "patch"}[method]
    return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in rules)


def test_a_sweep_makes_only_calls_its_role_allows(rendered):
    pods = [pod(waiting=PULL), pod(owner=V1_OWNER, waiting=SECRET), pod(phase="Running")]
    jobs = {"llama": {"metadata": {"resourceVersion": "7"}, "status": {"conditions": []}}}
    api = FakeApi(pods, jobs)
    done = reaper.sweep(api, ["training"], T0 + 31 * MIN, START, None, dry=False)
    assert [a.kind for a in done] == ["fail-pod", "fail-job"]
    role = next(o for o in rendered("prod-ib").objects if o["kind"] == "Role" and o["metadata"]["name"] == component.NAME)
    assert api.calls and all(allowed(role["rules"], m, path) for m, path in api.calls), api.calls
    dry = FakeApi(pods, jobs)
    reaper.sweep(dry, ["training"], T0 + 31 * MIN, START, None, dry=True)
    assert all(m == "GET" for m, _ in dry.calls)


def test_the_program_needs_only_the_standard_library():
    tree = ast.parse(Path(reaper.__file__).read_text())
    modules = {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    modules |= {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert modules <= set(sys.stdlib_module_names) | {"__future__"}, modules - set(sys.stdlib_module_names)


def test_the_deployment_runs_the_stacks_deadlines(rendered):
    objs = rendered("prod-ib").objects
    cm = next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == component.NAME)
    assert cm["data"]["reaper.py"] == Path(reaper.__file__).read_text()
    dep = next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == component.NAME)
    env = {e["name"]: e["value"] for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env == {"NAMESPACES": "training", "START_DEADLINE": "1800", "PENDING_DEADLINE": "", "INTERVAL": "60"}


def test_a_stack_can_turn_it_off_or_set_a_pending_deadline(rendered):
    base = stack_platform("prod-ib")
    assert component.objects(PlatformConfig.model_validate({**base, "reaper": {"enabled": False}})) == []
    objs = component.objects(PlatformConfig.model_validate({**base, "reaper": {"pendingDeadlineMinutes": 120}}))
    dep = next(o for o in objs if o["kind"] == "Deployment")
    env = {e["name"]: e["value"] for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["PENDING_DEADLINE"] == "7200"
    with pytest.raises(ValueError):
        ReaperConfig(startDeadlineMinutes=1)
