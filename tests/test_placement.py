"""The platform's own non-GPU pods on the stack's system nodes (nodes.system, components/platform/placement.py):
every chart's operator, controller, webhook and scheduler pods, the reaper, nv-ipam's controller and each PyTorch
job's rendezvous store, while the per-node DaemonSets stay on the GPU nodes."""

import copy

import pytest
import yaml

from components import versions
from components.jobs.operator_v1 import rendezvous
from components.model import config
from components.model.config import PlatformConfig
from components.model.profile import profile
from components.platform import network_operator, placement, training_operator
from components.platform.placement import SLOTS
from tests.conftest import stack_platform
from tools import upstream

SYSTEM = {"nodeSelector": {"node.kubernetes.io/pool": "system"}, "taints": [{"key": "node.kubernetes.io/pool", "value": "system"}]}
TOLERATION = {"key": "node.kubernetes.io/pool", "operator": "Equal", "value": "system", "effect": "NoSchedule"}


def _at(tree: dict, path: str):
    for key in path.split("."):
        tree = tree[key]
    return tree


def with_system(stack: str) -> PlatformConfig:
    raw = stack_platform(stack)
    raw["nodes"]["system"] = copy.deepcopy(SYSTEM)
    return PlatformConfig.model_validate(raw)


@pytest.mark.parametrize(
    ("file", "path", "chart", "slot"),
    [
        ("gpu-operator.values.yaml", "operator.tolerations", "gpu-operator", 0),
        ("network-operator.values.yaml", "operator.tolerations", "network-operator", 0),
        ("network-operator_subchart_sriov-network-operator.values.yaml", "operator.tolerations", "network-operator", 1),
        ("csi-driver-nfs.values.yaml", "controller.tolerations", "csi-driver-nfs", 0),
        ("dra-driver-nvidia-gpu.values.yaml", "controller.tolerations", versions.GPU_DRA_CHART, 0),
        ("kueue.values.yaml", "controllerManager.tolerations", versions.KUEUE_CHART, 0),
        ("topograph.values.yaml", "tolerations", versions.TOPOGRAPH_CHART, 0),
        ("topograph.values.yaml", "nodeObserver.tolerations", versions.TOPOGRAPH_CHART, 1),
    ],
)
def test_the_chart_defaults_a_tolerations_list_replaces_are_kept(file, path, chart, slot):
    """Helm replaces a list: each slot repeats the chart's own default tolerations, as the values file at the pinned
    tag has them (../shared/upstream/values)."""
    default = _at(yaml.safe_load(upstream.path(f"values/{file}").read_text()), path)
    assert list(SLOTS[chart][slot].defaults) == default


def test_every_chart_pod_slot_gets_the_system_nodes_in_the_committed_render(rendered):
    """prod-v2 names its system nodes: each chart's values carry the selector at every slot and the system
    toleration (after the chart's own) in every tolerations list of it; fastpath's reaper is pinned there too."""
    run = rendered("prod-v2")
    packages = {p["chart"]: p["values"] for p in run.packages}
    seen = 0
    for chart, slots in SLOTS.items():
        if chart not in packages:
            continue
        for slot in slots:
            assert _at(packages[chart], slot.selector) == {"node.kubernetes.io/pool": "system"}, (chart, slot.selector)
            for path in slot.tolerations:
                assert _at(packages[chart], path) == [*slot.defaults, TOLERATION], (chart, path)
            seen += 1
    assert seen >= 12
    reaper = next(o for o in run.objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "fastpath-reaper")
    spec = reaper["spec"]["template"]["spec"]
    assert (spec["nodeSelector"], spec["tolerations"], "affinity" in spec) == ({"node.kubernetes.io/pool": "system"}, [TOLERATION], False)


def test_daemonsets_stay_on_the_gpu_nodes(rendered):
    """The per-node operands are untouched: the GPU Operator's daemonsets tolerations and NFD worker, the Network
    Operator's policy (spec.tolerations / nodeAffinity) name no system node."""
    run = rendered("prod-v2")
    gpu = next(p for p in run.packages if p["chart"] == "gpu-operator")["values"]
    assert TOLERATION not in gpu["daemonsets"].get("tolerations", [])
    policy = next(o for o in run.objects if o["kind"] == "NicClusterPolicy")
    assert "node.kubernetes.io/pool" not in str(policy["spec"].get("nodeAffinity")) + str(policy["spec"].get("tolerations"))


def test_no_system_nodes_no_placement_values():
    for chart in SLOTS:
        assert placement.chart_values(chart, None) == {}


def test_nv_ipam_controller_and_the_training_operator_are_placed_by_their_own_fields():
    """nv-ipam's controller is placed by the NicClusterPolicy (network-operator@v26.4.1 DeploymentNodeAffinity, a
    required term), the Training Operator's Deployment by fastpath's kustomize patch (its base sets neither)."""
    p = with_system("prod-ib")
    spec = network_operator.nic_cluster_policy(p)["spec"]
    assert spec["deploymentNodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "node.kubernetes.io/pool", "operator": "In", "values": ["system"]}]}
    ]
    assert spec["deploymentTolerations"] == [TOLERATION]
    ops = yaml.safe_load(training_operator.kustomization(p)["patches"][-1]["patch"])
    assert {"op": "add", "path": "/spec/template/spec/nodeSelector", "value": {"node.kubernetes.io/pool": "system"}} in ops
    assert {"op": "add", "path": "/spec/template/spec/tolerations", "value": [TOLERATION]} in ops


def test_a_pytorch_jobs_rendezvous_store_runs_on_the_system_nodes():
    from components.jobs.resolve import resolve
    from components.model.job import JobSpec

    prof = profile(with_system("prod-ib"))
    r = resolve(JobSpec(name="llama", image="nvcr.io/nvidia/pytorch:25.10-py3", command=["python", "t.py"], nodes=2), prof, "test")
    store = next(o for o in rendezvous(r) if o["kind"] in ("Job", "Deployment", "Pod"))
    pod = store["spec"]["template"]["spec"]
    assert (pod["nodeSelector"], pod["tolerations"], "affinity" in pod) == ({"node.kubernetes.io/pool": "system"}, [TOLERATION], False)


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}, "a label of the GPU nodes"),
        ({"nodeSelector": {}}, "nodes.system.nodeSelector"),
        ({"cpuNodes": False}, "nodes.cpuNodes is false"),
    ],
)
def test_system_nodes_that_cannot_be_are_refused(change, needle):
    from components.model import stack

    raw = stack_platform("prod-v2")
    if "cpuNodes" in change:
        raw["nodes"]["cpuNodes"] = False
    else:
        raw["nodes"]["system"].update(change)
    with pytest.raises(config.ConfigError) as err:
        stack.parse({"platform": raw}, "stacks/Pulumi.prod-v2.yaml")
    assert needle in str(err.value), str(err.value)
