"""Network Operator (components/platform/network_operator.py): Helm values, the NicClusterPolicy and the NV-IPAM pools."""

import ipaddress
import json

import pytest
import yaml

from components.fabric import wiring as fabric
from components.platform import network_operator
from tests.helpers import DEDICATED, cfg
from tools import upstream


@pytest.mark.parametrize(
    ("stack", "changes", "spec_keys", "secondary"),
    # The prod stacks run node health: the operands tolerate the quarantine taint (tolerations).
    [
        ("prod-ib", {}, ["secondaryNetwork", "nvIpam", "tolerations", "nodeAffinity"], ["cniPlugins", "multus"]),
        ("prod-ib", {"gpu__hostMofed": False}, ["ofedDriver", "secondaryNetwork", "nvIpam", "tolerations", "nodeAffinity"], ["cniPlugins", "multus"]),
        ("prod-roce", {}, ["rdmaSharedDevicePlugin", "secondaryNetwork", "nvIpam", "tolerations", "nodeAffinity"], ["cniPlugins", "multus"]),
        ("prod-roce", {"gpu__hostMofed": False}, ["ofedDriver", "rdmaSharedDevicePlugin", "secondaryNetwork", "nvIpam", "tolerations", "nodeAffinity"], ["cniPlugins", "multus"]),
        ("prod-ib", {"fabric__attachment": "shared"}, ["rdmaSharedDevicePlugin", "secondaryNetwork", "nvIpam", "tolerations", "nodeAffinity"], ["cniPlugins", "multus", "ipoib"]),
        ("prod-roce", {"fabric__attachment": "hostdevice"}, ["sriovDevicePlugin", "secondaryNetwork", "nvIpam", "tolerations", "nodeAffinity"], ["cniPlugins", "multus"]),
    ],
)
def test_nic_cluster_policy(stack, changes, spec_keys, secondary):
    p = cfg(stack, **changes)
    ncp = network_operator.nic_cluster_policy(p)
    assert ncp["metadata"]["name"] == "nic-cluster-policy"
    assert list(ncp["spec"]) == spec_keys
    assert list(ncp["spec"]["secondaryNetwork"]) == secondary
    # Device-plugin resources are exactly the ones pods request.
    pod = {k for k in fabric.pod_wiring(p.fabric, "training", p.gpu.per_node, p.gpu.per_node).resources}
    for plugin, list_key in (("rdmaSharedDevicePlugin", "configList"), ("sriovDevicePlugin", "resourceList")):
        if plugin in ncp["spec"]:
            entries = json.loads(ncp["spec"][plugin]["config"])[list_key]
            prefix = "rdma" if plugin == "rdmaSharedDevicePlugin" else "nvidia.com"
            assert {f"{e.get('resourcePrefix', prefix)}/{e['resourceName']}" for e in entries} == pod


@pytest.mark.parametrize(
    ("gpu_operator_on", "nfd"),
    [
        (True, {"enabled": False, "deployNodeFeatureRules": False}),
        (False, {"enabled": True}),
    ],
)
def test_one_nfd_and_no_node_feature_rule_without_its_crd(gpu_operator_on, nfd):
    """network-operator@v26.4.1:deployment/network-operator/templates/nodefeaturerules.yaml renders a
    NodeFeatureRule whenever `nfd.deployNodeFeatureRules` is true (its default), whatever `nfd.enabled`; the
    CRD ships only with the NFD subchart (Chart.yaml `condition: nfd.enabled`). With the GPU Operator's NFD the
    rule is off: that NFD already labels pci-15b3 (gpu-operator@v26.7.0:deployments/gpu-operator/values.yaml
    `node-feature-discovery.worker.config.sources.pci`, classes 02/0200/0207 with `deviceLabelFields: [vendor]`)."""
    # Health reads the GPU Operator's DCGM, so it goes off with the operator.
    p = cfg("prod-ib", components__gpuOperator=gpu_operator_on, health__enabled=gpu_operator_on)
    assert network_operator.values(p)["nfd"] == nfd


def test_gpu_operator_nfd_labels_mellanox_nics():
    """The fact the NodeFeatureRule decision rests on, read from gpu-operator@v26.7.0's values.yaml: NFD's PCI
    source labels `pci-<vendor>.present` for network classes, so ConnectX NICs (vendor 15b3, class 0200 Ethernet
    or 0207 InfiniBand) get `feature.node.kubernetes.io/pci-15b3.present`."""
    pci = yaml.safe_load(upstream.path("values/gpu-operator.values.yaml").read_text())["node-feature-discovery"]["worker"]["config"]["sources"]["pci"]
    assert {"0200", "0207"} <= set(pci["deviceClassWhitelist"]) and pci["deviceLabelFields"] == ["vendor"]


def test_sriov_enabled_only_for_sriov_attachment():
    ib = network_operator.values(cfg("prod-ib"))
    assert ib["sriovNetworkOperator"] == {"enabled": True}
    assert ib["sriov-network-operator"] == {"sriovOperatorConfig": {"deploy": True}}
    roce = network_operator.values(cfg("prod-roce"))
    assert "sriovNetworkOperator" not in roce and "sriov-network-operator" not in roce


# (id, stack, changes, perNodeBlockSize): what one node attaches to a rail at once, times 2
POOL_CASES = [
    ("sriov-8-vfs", "prod-ib", {}, 16),
    ("sriov-4-vfs", "prod-ib", {"fabric__vfsPerPf": 4}, 8),
    ("shared-4-gpus", "prod-roce", {}, 8),
    ("hostdevice-one-pod", "prod-roce", {"fabric__attachment": "hostdevice"}, 2),
]


@pytest.mark.parametrize(("stack", "changes", "block"), [c[1:] for c in POOL_CASES], ids=[c[0] for c in POOL_CASES])
def test_ip_pools_leave_room_for_replacement_nodes(stack, changes, block):
    """nv-ipam gives every Node matching the pool a block and frees it only when the Node object goes
    (Mellanox/nvidia-k8s-ipam@network-operator-v26.4.1:pkg/ipam-controller/controllers/ippool/ippool.go
    `Reconcile`); a node without a block gets "no free IP ranges" and its pods never start. Blocks are sized
    from what a node attaches, and the subnet must hold nodes.count plus spares."""
    p = cfg(stack, **changes)
    pools = network_operator.ip_pools(p)
    assert [x["metadata"]["name"] for x in pools] == [f"rail{i}" for i in range(len(p.fabric.rails))]
    assert {x["metadata"]["namespace"] for x in pools} == {network_operator.NAMESPACE}
    assert {x["spec"]["perNodeBlockSize"] for x in pools} == {block}
    for pool in pools:
        usable = ipaddress.ip_network(pool["spec"]["subnet"]).num_addresses - 2
        spare = max(2, -(-p.nodes.count // 4))
        assert usable // block >= p.nodes.count + spare
    assert pools[0]["spec"]["nodeSelector"] == {"nodeSelectorTerms": [{"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": [p.gpu.product]}]}]}


def test_ip_pools_wait_for_a_ready_nic_cluster_policy():
    """The IPPool CRD is created by the operator when it reconciles `spec.nvIpam`
    (network-operator@v26.4.1:manifests/state-nv-ipam-cni/), so the pools wait until the NicClusterPolicy
    reports ready: pulumi-kubernetes' `pulumi.com/waitFor` (provider/pkg/metadata/annotations.go
    `AnnotationWaitFor`, overrides.go `ReadyCondition`: a `jsonpath=` expression) with
    `pulumi.com/timeoutSeconds` (`TimeoutDuration`, an integer string) long enough for the DOCA driver build.
    `ready` is a value of the CRD's status.state (network-operator@v26.4.1:api/v1alpha1/nicclusterpolicy_types.go
    `StateReady = "ready"`)."""
    crd = yaml.safe_load(upstream.path("crds/mellanox.com_NicClusterPolicy.yaml").read_text())
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert "ready" in status["state"]["enum"]
    for changes, timeout in (({"gpu__hostMofed": False}, "3600"), ({}, "900")):
        annotations = network_operator.nic_cluster_policy(cfg("prod-ib", **changes))["metadata"]["annotations"]
        assert annotations == {"pulumi.com/waitFor": "jsonpath={.status.state}=ready", "pulumi.com/timeoutSeconds": timeout}
        int(annotations["pulumi.com/timeoutSeconds"])


@pytest.mark.parametrize(
    ("changes", "env"),
    [
        ({"gpu__hostMofed": False}, [{"name": "ENABLE_NFSRDMA", "value": "true"}, {"name": "UNLOAD_STORAGE_MODULES", "value": "true"}]),
        ({"gpu__hostMofed": False, "checkpoints__nfs__rdma": False}, None),
    ],
)
def test_doca_driver_loads_nfs_rdma_for_rdma_checkpoints(changes, env):
    """network-operator@v26.4.1:docs/mofed-container-env-vars.md: `ENABLE_NFSRDMA` makes the DOCA driver
    container build and load the NFS-RDMA modules (rpcrdma), and `UNLOAD_STORAGE_MODULES` lets it reload the
    stack on a host that already has storage modules loaded, instead of failing its start."""
    driver = network_operator.nic_cluster_policy(cfg("prod-ib", **changes))["spec"]["ofedDriver"]
    assert driver.get("env") == env


QUARANTINED = {"key": "fastpath.dev/quarantined", "operator": "Exists", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("taint", "health", "tolerations"),
    [
        ("nvidia.com/gpu", False, None),
        ("dedicated", False, [DEDICATED]),
        ("nvidia.com/gpu", True, [QUARANTINED]),  # node health: operands stay on a quarantined node
        ("dedicated", True, [DEDICATED, QUARANTINED]),
    ],
)
def test_nic_cluster_policy_tolerates_a_custom_gpu_taint(taint, health, tolerations):
    """The operator's DaemonSets tolerate only `nvidia.com/gpu` themselves and take `spec.tolerations` for the
    rest (network-operator@v26.4.1:manifests/state-*/, api/v1alpha1/nicclusterpolicy_types.go `Tolerations`);
    the DOCA driver state also skips nodes with an untolerated taint (pkg/state/state_ofed.go)."""
    spec = network_operator.nic_cluster_policy(cfg("prod-ib", gpu__taintKey=taint, health__enabled=health))["spec"]
    assert spec.get("tolerations") == tolerations


def test_operands_run_only_on_gpu_nodes_so_a_cpu_node_cannot_hold_readiness():
    """network-operator@v26.4.1: every operand DaemonSet template (manifests/state-multus-cni/0050-multus-ds.yml,
    state-nv-ipam-cni/040-nv-ipam-node.yaml, state-ofed-driver/0050_ofed-driver-ds.yaml,
    state-rdma-shared-device-plugin/0060_rdma-shared-dev-plugin-ds.yaml) renders spec.nodeAffinity, and the policy is
    ready only when every operand DaemonSet is available on every node it selects (pkg/state/state_skel.go
    isDaemonSetReady, `desiredNumberScheduled != 0 && == numberAvailable`). Selected by NFD's NVIDIA PCI label, which
    exists before the GPU driver (the GPU Operator's NFD whitelists class 0302 with the vendor field)."""
    ncp = network_operator.nic_cluster_policy(cfg("prod-roce"))
    (term,) = ncp["spec"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term == {"matchExpressions": [{"key": "feature.node.kubernetes.io/pci-10de.present", "operator": "In", "values": ["true"]}]}
    values = yaml.safe_load(upstream.path("values/gpu-operator.values.yaml").read_text())
    nfd = values["node-feature-discovery"]["worker"]["config"]["sources"]["pci"]
    assert "0302" in nfd["deviceClassWhitelist"] and nfd["deviceLabelFields"] == ["vendor"]


def test_the_doca_upgrade_policy_is_one_the_crd_takes():
    """ofedDriver.upgradePolicy with waitForCompletion and drain (Mellanox/network-operator@v26.4.1:
    api/v1alpha1/nicclusterpolicy_types.go DriverUpgradePolicySpec; GetDriverUpgradePolicy in api/v1alpha1/utils.go
    passes both to the upgrade library, nil when unset), validated against the locked CRD: no committed stack
    deploys the DOCA driver, so no render shows it."""
    from tests.conftest import schema_problems

    ncp = network_operator.nic_cluster_policy(cfg("prod-ib", gpu__hostMofed=False))
    policy = ncp["spec"]["ofedDriver"]["upgradePolicy"]
    assert policy == {"autoUpgrade": True, "maxParallelUpgrades": 1, "waitForCompletion": {"podSelector": "fastpath.dev/role"}, "drain": {"enable": True, "deleteEmptyDir": True}}
    assert schema_problems(ncp) == []
