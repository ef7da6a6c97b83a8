"""Day 2: fastpath's own objects never hold a drain fastpath itself causes, and a finished job is never run again.

The drains fastpath causes are of GPU nodes only:
- the SR-IOV config daemon drains a node fully before a firmware change and reboot, evicting through the eviction
  API, so PodDisruptionBudgets are honoured and one with maxUnavailable 0 holds the drain (and the node cordoned)
  for as long as it stands: Mellanox/sriov-network-operator@network-operator-v26.4.0-beta.7:pkg/drain/drainer.go
  DrainNode (kubectl drain.Helper, retried with no upper bound by controllers/drain_controller_helper.go);
- the GPU Operator's driver upgrade evicts the node's GPU pods (PDBs honoured) after waiting for the pods
  `driver.upgradePolicy.waitForCompletion.podSelector` selects: NVIDIA/gpu-operator@v26.7.0:vendor/github.com/
  NVIDIA/k8s-operator-libs/pkg/upgrade/pod_manager.go SchedulePodEviction, common_manager.go
  ProcessWaitForJobsRequiredNodes.
"""

from __future__ import annotations

import pytest

from components import k8s
from components.jobs.component import IN_PLACE, V1_REPLACE
from components.jobs.operator_v1 import rendezvous
from components.jobs.resolve import ROLE_LABEL, resolve
from components.model.config import PlatformConfig
from components.model.job import JobSpec
from components.model.profile import profile as make_profile
from components.platform import gpu_operator
from policies.podspecs import extract
from tests.conftest import stack_platform
from tests.helpers import changed
from tools import render


def may_land_on_gpu_nodes(pod: dict, system: dict[str, str] | None = None) -> bool:
    """Whether the scheduler may place `pod` on a GPU node (one NFD labels as carrying an NVIDIA device, from its
    first minutes: the GPU product label comes only after the driver). A pod selecting the stack's CPU-only system
    nodes (nodes.system.nodeSelector) never lands there."""
    if system and all((pod.get("nodeSelector") or {}).get(k) == v for k, v in system.items()):
        return False
    terms = (((pod.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    off = {"key": k8s.NFD_GPU_LABEL, "operator": "DoesNotExist"}
    return not (terms and all(off in t.get("matchExpressions", []) for t in terms))


def blocking_budgets(objects: list[dict], system: dict[str, str] | None = None) -> list[str]:
    """PodDisruptionBudgets that allow no eviction of a pod which may run on a GPU node: each would hold an SR-IOV
    reboot drain of that node until the pod's job ends."""
    # Every pod template of every workload kind, as the policy pack finds them (policies/podspecs.py).
    templates = [(o["metadata"].get("namespace"), t.template) for o in objects for t in extract(o).templates]
    out = []
    for pdb in (o for o in objects if o["kind"] == "PodDisruptionBudget"):
        spec = pdb["spec"]
        if spec.get("maxUnavailable") not in (0, "0%") and spec.get("minAvailable") in (None, 0, "0%"):
            continue
        want = spec["selector"].get("matchLabels", {})
        for ns, t in templates:
            labels = (t.get("metadata") or {}).get("labels", {})
            if ns == pdb["metadata"].get("namespace") and all(labels.get(k) == v for k, v in want.items()) and may_land_on_gpu_nodes(t["spec"], system):
                out.append(pdb["metadata"]["name"])
    return out


@pytest.mark.parametrize("stack_name", render.stack_names())
def test_no_committed_render_holds_a_gpu_node_drain(stack_name, rendered):
    system = (stack_platform(stack_name)["nodes"].get("system") or {}).get("nodeSelector")
    assert blocking_budgets(rendered(stack_name).objects, system) == []


def store(cpu_nodes: bool) -> list[dict]:
    p = stack_platform("prod-ib")
    changed(p, {"nodes.cpuNodes": cpu_nodes})
    prof = make_profile(PlatformConfig.model_validate(p))
    spec = JobSpec(name="run", image="nvcr.io/nvidia/pytorch:25.10-py3", command=["python", "train.py"], nodes=4)
    return rendezvous(resolve(spec, prof))


@pytest.mark.parametrize(("cpu_nodes", "kinds", "on_gpu_nodes"), [(True, ["Job", "Service", "PodDisruptionBudget"], False), (False, ["Job", "Service"], True)])
def test_the_rendezvous_store_is_kept_out_of_fastpaths_own_drains(cpu_nodes, kinds, on_gpu_nodes):
    """With CPU nodes the store must run there and its budget holds only drains of CPU nodes (an admin's, which
    waits naming it); on a GPU-only cluster it may share a GPU node and has no budget, so the drain proceeds and
    ends the job, as draining the job's workers would."""
    objs = store(cpu_nodes)
    assert [o["kind"] for o in objs] == kinds
    pod = objs[0]["spec"]["template"]["spec"]
    assert may_land_on_gpu_nodes(pod) is on_gpu_nodes
    assert ("tolerations" in pod) is on_gpu_nodes
    assert blocking_budgets(objs) == []


def test_the_detector_sees_the_budget_that_would_hold_a_drain():
    objs = store(False)
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": dict(objs[0]["metadata"]),
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": objs[0]["spec"]["template"]["metadata"]["labels"]}},
    }
    assert blocking_budgets([*objs, pdb]) == ["run-rdzv"]


def test_a_driver_upgrade_waits_for_every_training_pod_on_the_node(rendered):
    """prod-roce manages the driver: its upgrade policy waits for the pods carrying fastpath's role label, which
    every training pod has (v1 workers and launchers, the store, v2 runtime pods)."""
    values = gpu_operator.values(PlatformConfig.model_validate(stack_platform("prod-roce")))
    assert values["driver"]["upgradePolicy"] == {"waitForCompletion": {"podSelector": ROLE_LABEL}}
    pods = [
        t["metadata"].get("labels", {})
        for name in render.stack_names()
        for o in rendered(name).objects
        if o["kind"] != "TrainJob"  # its pods are its runtime's (ClusterTrainingRuntime, checked here too)
        for t in _pod_templates(o)
        if _requests_gpus(t)
    ]
    assert pods and all(ROLE_LABEL in labels for labels in pods)
    preinstalled = gpu_operator.values(PlatformConfig.model_validate(stack_platform("prod-ib")))
    assert "upgradePolicy" not in preinstalled["driver"]  # the operator never touches a preinstalled driver


def _pod_templates(obj: dict) -> list[dict]:
    return [t.template for t in extract(obj).templates]


def _requests_gpus(t: dict) -> bool:
    return any("nvidia.com/gpu" in (c.get("resources") or {}).get("limits", {}) for c in t["spec"].get("containers", []))


def test_a_finished_v1_job_is_kept_so_a_refresh_never_submits_it_again(rendered):
    """kubeflow/trainer@v1.9.4:pkg/controller.v1/common/job.go CleanupJob deletes a job ttlSecondsAfterFinished
    after it completes; `pulumi refresh` then drops it from the state and the next `pulumi up` creates it again, a
    second run. No v1 job (nor the acceptance job) fastpath renders carries a TTL, and a stack that asks for one
    is refused (tests/test_stack_input.py `ttl-reruns`)."""
    for name in render.stack_names():
        for o in rendered(name).objects:
            if o["apiVersion"] == "kubeflow.org/v1":
                assert "ttlSecondsAfterFinished" not in o["spec"].get("runPolicy", {}), (name, o["metadata"]["name"])


def test_only_what_the_operator_reads_at_the_end_is_patched_in_place(rendered):
    """Every path of a rendered v1 job's spec either replaces the job (components/jobs/component.py V1_REPLACE,
    the fields of kubeflow/trainer@v1.9.4:pkg/apis/kubeflow.org/v1 job specs and RunPolicy) or is one the operator
    reads only when the job ends (IN_PLACE): a spec edit never reaches a running gang half-applied."""
    for name in render.stack_names():
        for r in rendered(name).run.registrations:
            obj = r.inputs
            # The acceptance job is replaced on any change: a changed series is a new verdict.
            if r.type.startswith("kubernetes:kubeflow.org/v1:") and "FabricAcceptance" not in (r.parent or ""):
                assert r.replace_on_changes == list(V1_REPLACE) and r.delete_before_replace
                for k, v in obj["spec"].items():
                    paths = [f"{k}.{i}" for i in v] if k == "runPolicy" else [k]
                    assert all(f"spec.{p}" in V1_REPLACE or p in IN_PLACE for p in paths), (name, paths)


@pytest.mark.parametrize(
    ("stack_name", "changes", "refusal"),
    [
        ("prod-roce", {"versions.networkOperator": "26.7.0", "gpu.hostMofed": False}, "versions.networkOperator 26.7.0: the DOCA driver that goes with it is not known here"),
        ("prod-v2", {"versions.trainer": "2.4.0"}, "versions.trainer 2.4.0: the JobSet image its chart depends on is not known here"),
        ("prod-ib", {"versions.trainingOperator": "v1.9.5"}, "versions.trainingOperator v1.9.5: the kubectl-delivery image"),
    ],
)
def test_a_chart_override_without_its_paired_image_is_refused(stack_name, changes, refusal):
    """A chart bump that would keep the images paired with the old release (the DOCA driver of another release,
    a JobSet the chart does not depend on, the MPI launcher's kubectl-delivery of another operator) is refused
    with what to do, before anything is registered."""
    from components.model import stack as stack_loading
    from components.model.config import ConfigError

    p = changed(stack_platform(stack_name), changes)
    with pytest.raises(ConfigError, match=refusal):
        stack_loading.parse({"platform": p}, "stacks/Pulumi.x.yaml")


def test_the_operands_follow_a_network_operator_override_where_they_can():
    """With the hosts' own DOCA-OFED (prod-ib) only the operand images go with the chart, and they follow its
    version: Mellanox/network-operator@v26.4.1:hack/release.yaml tags every component `network-operator-v<version>`."""
    from components.platform import network_operator

    p = PlatformConfig.model_validate(changed(stack_platform("prod-ib"), {"versions.networkOperator": "26.7.0"}))
    spec = network_operator.nic_cluster_policy(p)["spec"]
    assert {spec["nvIpam"]["version"], spec["secondaryNetwork"]["multus"]["version"]} == {"network-operator-v26.7.0"}


def test_destroy_starts_no_drain_and_says_what_it_leaves(rendered):
    """On `pulumi destroy` the SR-IOV policies are deleted with the operator's release (deleted_with: their own
    delete is skipped), so no drain starts that the uninstall would cut short with nodes cordoned; removing one in an
    update still deletes it. The stack exports, and SUMMARY.md lists, what a destroy leaves."""
    run = rendered("prod-ib").run
    release = next(r.urn for r in run.registrations if r.type == "kubernetes:helm.sh/v3:Release" and r.name == "network-operator")
    sriov = [r for r in run.registrations if r.type.startswith("kubernetes:sriovnetwork.openshift.io/v1:Sriov") and "Network:" not in r.type and "IBNetwork" not in r.type]
    assert {r.type.rsplit(":", 1)[1] for r in sriov} == {"SriovNetworkPoolConfig", "SriovNetworkNodePolicy"}
    assert all(r.deleted_with == release and not r.retain_on_delete for r in sriov)
    left = run.outputs["leftOnDestroy"]
    assert any("SriovNetworkNodePolicy" in item for item in left) and any("PersistentVolumeClaims" in item for item in left)
    assert "## What `pulumi destroy` leaves" in rendered("prod-ib").files["SUMMARY.md"]
    assert not any("Sriov" in item for item in rendered("dev").run.outputs["leftOnDestroy"])


def test_the_driver_upgrade_pace_is_the_charts():
    """What the impact tells of a driver upgrade (one node at a time, waiting as long as the run lasts) is the GPU
    Operator chart's default upgrade policy, which fastpath's values only add a pod selector to
    (NVIDIA/gpu-operator@v26.7.0:deployments/gpu-operator/values.yaml driver.upgradePolicy)."""
    import yaml

    from tools import upstream

    chart = yaml.safe_load(upstream.path("values/gpu-operator.values.yaml").read_text())["driver"]["upgradePolicy"]
    assert chart["autoUpgrade"] is True
    assert chart["maxParallelUpgrades"] == gpu_operator.DRIVER_UPGRADES_AT_ONCE == 1
    assert chart["waitForCompletion"]["timeoutSeconds"] == 0  # wait for as long as the pods run
