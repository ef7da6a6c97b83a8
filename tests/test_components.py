"""Platform components: their pure builders, Helm values against upstream, and the resource graph."""

import ipaddress
import json

import pytest
import yaml

from components import (
    checkpoints,
    fabric,
    gpu_operator,
    kinds,
    network_operator,
    networks,
    platform,
    sriov,
    volcano,
)
from components.config import PlatformConfig
from tests.conftest import SHARED, STACKS, stack_platform

VALUES_FILES = {
    "gpu-operator": "gpu-operator.values.yaml",
    "network-operator": "network-operator.values.yaml",
    "volcano": "volcano.values.yaml",
    "csi-driver-nfs": "csi-driver-nfs.values.yaml",
}


DROP = object()


def cfg(stack, **changes) -> PlatformConfig:
    """A committed stack's platform with `a__b=value` changes (DROP removes the key)."""
    p = stack_platform(stack)
    for dotted, value in changes.items():
        obj = p
        *head, last = dotted.split("__")
        for k in head:
            obj = obj.setdefault(k, {})
        if value is DROP:
            obj.pop(last, None)
        else:
            obj[last] = value
    if changes.get("fabric__attachment", "sriov") != "sriov":
        p["fabric"].pop("sriovMaxUnavailable", None)  # an sriov-only key
    return PlatformConfig.model_validate(p)


def leaf_paths(d, prefix=()):
    for k, v in d.items():
        if isinstance(v, dict) and v:
            yield from leaf_paths(v, (*prefix, k))
        else:
            yield (*prefix, k)


# Keys a chart's templates read that its values.yaml documents only in a comment.
TEMPLATE_ONLY_KEYS = {
    # volcano-sh/volcano@v1.15.1:installer/helm/chart/volcano/templates/scheduler.yaml reads it; values.yaml shows
    # it commented out under `custom:`.
    ("volcano", ("custom", "scheduler_config_override")),
}


@pytest.mark.skipif(not (SHARED / "values").is_dir(), reason="shared/upstream/values not beside checkout")
@pytest.mark.parametrize("stack", STACKS)
def test_every_helm_value_key_exists_upstream(stack, rendered):
    for pkg in rendered(stack).packages:
        if pkg["kind"] != "helm":
            continue
        upstream = yaml.safe_load((SHARED / "values" / VALUES_FILES[pkg["name"]]).read_text())
        for path in leaf_paths(pkg["values"]):
            if (pkg["name"], path) in TEMPLATE_ONLY_KEYS:
                continue
            node = upstream
            for k in path:
                if node == {}:  # a free-form map upstream (nodeSelector, additionalLabels): any key
                    break
                assert isinstance(node, dict) and k in node, f"{pkg['name']}: {'.'.join(path)} not in chart values"
                node = node[k]


@pytest.mark.skipif(not (SHARED / "values").is_dir(), reason="shared/upstream/values not beside checkout")
@pytest.mark.parametrize("stack", STACKS)
def test_no_helm_value_restates_a_chart_default_unmarked(stack, rendered):
    """Values say only what differs from the chart. A value equal to the chart's default is allowed only where
    the builder pins it on purpose (a comment says why), listed here: gpu-operator@v26.7.0
    deployments/gpu-operator/values.yaml (`nfd.enabled`, `driver.enabled`, `dcgmExporter.serviceMonitor.enabled`
    are true there), network-operator@v26.4.1 deployment/network-operator/values.yaml
    (`sriov-network-operator.sriovOperatorConfig.deploy: true`)."""
    pinned = {("gpu-operator", ("nfd", "enabled")), ("gpu-operator", ("driver", "enabled")),
              ("gpu-operator", ("dcgmExporter", "serviceMonitor", "enabled")),
              ("network-operator", ("sriov-network-operator", "sriovOperatorConfig", "deploy"))}
    for pkg in rendered(stack).packages:
        if pkg["kind"] != "helm":
            continue
        upstream = yaml.safe_load((SHARED / "values" / VALUES_FILES[pkg["name"]]).read_text())
        for path in leaf_paths(pkg["values"]):
            node, ours = upstream, pkg["values"]
            for k in path:
                node = node.get(k) if isinstance(node, dict) else None
                ours = ours[k]
            if node == ours:
                assert (pkg["name"], path) in pinned, f"{pkg['name']}: {'.'.join(path)} restates the chart default"


GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
DEDICATED = {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}
CONTROL_PLANE = {"key": "node-role.kubernetes.io/control-plane", "operator": "Equal", "value": "",
                 "effect": "NoSchedule"}
KPS_MONITOR = {"serviceMonitor": {"enabled": True, "additionalLabels": {"release": "kube-prometheus-stack"}}}
# (id, config changes, exact gpu-operator values); prod-ib is a DGX stack: driver and DOCA-OFED on the hosts.
GPU_CASES = [
    ("dmabuf-operator-driver", {"gpu__driverPreinstalled": False, "gpu__hostMofed": False},
     {"driver": {"enabled": True}, "nfd": {"enabled": True}, "dcgmExporter": KPS_MONITOR}),
    ("peermem-legacy", {"gpu__gpuDirect": "peermem", "gpu__driverPreinstalled": False, "gpu__hostMofed": False},
     {"driver": {"enabled": True, "rdma": {"enabled": True}}, "nfd": {"enabled": True},
      "dcgmExporter": KPS_MONITOR}),
    # useHostMofed is read only on the peermem path: under DMA-BUF it would say something it does not do.
    ("host-mofed-dmabuf", {}, {"driver": {"enabled": False}, "nfd": {"enabled": True},
                               "dcgmExporter": KPS_MONITOR}),
    ("host-mofed-peermem", {"gpu__gpuDirect": "peermem"},
     {"driver": {"enabled": False, "rdma": {"enabled": True, "useHostMofed": True}}, "nfd": {"enabled": True},
      "dcgmExporter": KPS_MONITOR}),
    ("no-monitoring", {"monitoring": False},
     {"driver": {"enabled": False}, "nfd": {"enabled": True}, "dcgmExporter": {"serviceMonitor": {"enabled": False}}}),
    ("monitoring-labels", {"monitoring": {"enabled": True, "serviceMonitorLabels": {"release": "kps"}}},
     {"driver": {"enabled": False}, "nfd": {"enabled": True},
      "dcgmExporter": {"serviceMonitor": {"enabled": True, "additionalLabels": {"release": "kps"}}}}),
    ("monitoring-bool", {"monitoring": True},
     {"driver": {"enabled": False}, "nfd": {"enabled": True}, "dcgmExporter": {"serviceMonitor": {"enabled": True}}}),
    ("custom-taint", {"gpu__taintKey": "dedicated"},
     {"driver": {"enabled": False}, "nfd": {"enabled": True},
      "daemonsets": {"tolerations": [GPU_TAINT, DEDICATED]},
      "node-feature-discovery": {"worker": {"tolerations": [CONTROL_PLANE, GPU_TAINT, DEDICATED]}},
      "dcgmExporter": KPS_MONITOR}),
]


@pytest.mark.parametrize(("changes", "expected"), [c[1:] for c in GPU_CASES], ids=[c[0] for c in GPU_CASES])
def test_gpu_operator_values(changes, expected):
    """gpu-operator@v26.7.0: `IsHostMOFED()` (api/nvidia/v1/clusterpolicy_types.go) is `IsEnabled() &&
    UseHostMOFED`, so useHostMofed goes only with rdma.enabled (peermem). `daemonsets.tolerations` replaces each
    operand DaemonSet's tolerations (controllers/object_controls.go `applyCommonDaemonsetConfig`) and Helm
    replaces list values, so a custom taint comes with the defaults of deployments/gpu-operator/values.yaml
    (`daemonsets.tolerations`, `node-feature-discovery.worker.tolerations`) repeated. The DCGM ServiceMonitor
    takes `additionalLabels` (same values.yaml, `dcgmExporter.serviceMonitor`)."""
    assert gpu_operator.values(cfg("prod-ib", **changes)) == expected


@pytest.mark.parametrize(("stack", "changes", "spec_keys", "secondary"), [
    ("prod-ib", {}, ["secondaryNetwork", "nvIpam"], ["cniPlugins", "multus"]),
    ("prod-ib", {"gpu__hostMofed": False}, ["ofedDriver", "secondaryNetwork", "nvIpam"], ["cniPlugins", "multus"]),
    ("prod-roce", {}, ["rdmaSharedDevicePlugin", "secondaryNetwork", "nvIpam"], ["cniPlugins", "multus"]),
    ("prod-roce", {"gpu__hostMofed": False}, ["ofedDriver", "rdmaSharedDevicePlugin", "secondaryNetwork", "nvIpam"],
     ["cniPlugins", "multus"]),
    ("prod-ib", {"fabric__attachment": "shared"}, ["rdmaSharedDevicePlugin", "secondaryNetwork", "nvIpam"],
     ["cniPlugins", "multus", "ipoib"]),
    ("prod-roce", {"fabric__attachment": "hostdevice"}, ["sriovDevicePlugin", "secondaryNetwork", "nvIpam"],
     ["cniPlugins", "multus"]),
])
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


@pytest.mark.parametrize(("gpu_operator_on", "nfd"), [
    (True, {"enabled": False, "deployNodeFeatureRules": False}),
    (False, {"enabled": True}),
])
def test_one_nfd_and_no_node_feature_rule_without_its_crd(gpu_operator_on, nfd):
    """network-operator@v26.4.1:deployment/network-operator/templates/nodefeaturerules.yaml renders a
    NodeFeatureRule whenever `nfd.deployNodeFeatureRules` is true (its default), whatever `nfd.enabled`; the
    CRD ships only with the NFD subchart (Chart.yaml `condition: nfd.enabled`). With the GPU Operator's NFD the
    rule is off: that NFD already labels pci-15b3 (gpu-operator@v26.7.0:deployments/gpu-operator/values.yaml
    `node-feature-discovery.worker.config.sources.pci`, classes 02/0200/0207 with `deviceLabelFields: [vendor]`)."""
    assert network_operator.values(cfg("prod-ib", components__gpuOperator=gpu_operator_on))["nfd"] == nfd


@pytest.mark.skipif(not (SHARED / "values").is_dir(), reason="shared/upstream/values not beside checkout")
def test_gpu_operator_nfd_labels_mellanox_nics():
    """The fact the NodeFeatureRule decision rests on, read from gpu-operator@v26.7.0's values.yaml: NFD's PCI
    source labels `pci-<vendor>.present` for network classes, so ConnectX NICs (vendor 15b3, class 0200 Ethernet
    or 0207 InfiniBand) get `feature.node.kubernetes.io/pci-15b3.present`."""
    pci = yaml.safe_load((SHARED / "values" / "gpu-operator.values.yaml").read_text())[
        "node-feature-discovery"]["worker"]["config"]["sources"]["pci"]
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
    assert pools[0]["spec"]["nodeSelector"] == {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "nvidia.com/gpu.product", "operator": "In", "values": [p.gpu.product]}]}]}


@pytest.mark.skipif(not (SHARED / "crds").is_dir(), reason="shared/upstream/crds not beside checkout")
def test_ip_pools_wait_for_a_ready_nic_cluster_policy():
    """The IPPool CRD is created by the operator when it reconciles `spec.nvIpam`
    (network-operator@v26.4.1:manifests/state-nv-ipam-cni/), so the pools wait until the NicClusterPolicy
    reports ready: pulumi-kubernetes' `pulumi.com/waitFor` (provider/pkg/metadata/annotations.go
    `AnnotationWaitFor`, overrides.go `ReadyCondition`: a `jsonpath=` expression) with
    `pulumi.com/timeoutSeconds` (`TimeoutDuration`, an integer string) long enough for the DOCA driver build.
    `ready` is a value of the CRD's status.state (network-operator@v26.4.1:api/v1alpha1/nicclusterpolicy_types.go
    `StateReady = "ready"`)."""
    crd = yaml.safe_load((SHARED / "crds" / "mellanox.com_NicClusterPolicy.yaml").read_text())
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert "ready" in status["state"]["enum"]
    for changes, timeout in (({"gpu__hostMofed": False}, "3600"), ({}, "900")):
        annotations = network_operator.nic_cluster_policy(cfg("prod-ib", **changes))["metadata"]["annotations"]
        assert annotations == {"pulumi.com/waitFor": "jsonpath={.status.state}=ready",
                               "pulumi.com/timeoutSeconds": timeout}
        int(annotations["pulumi.com/timeoutSeconds"])


@pytest.mark.parametrize(("changes", "env"), [
    ({"gpu__hostMofed": False}, [{"name": "ENABLE_NFSRDMA", "value": "true"},
                                 {"name": "UNLOAD_STORAGE_MODULES", "value": "true"}]),
    ({"gpu__hostMofed": False, "checkpoints__nfs__rdma": False}, None),
])
def test_doca_driver_loads_nfs_rdma_for_rdma_checkpoints(changes, env):
    """network-operator@v26.4.1:docs/mofed-container-env-vars.md: `ENABLE_NFSRDMA` makes the DOCA driver
    container build and load the NFS-RDMA modules (rpcrdma), and `UNLOAD_STORAGE_MODULES` lets it reload the
    stack on a host that already has storage modules loaded, instead of failing its start."""
    driver = network_operator.nic_cluster_policy(cfg("prod-ib", **changes))["spec"]["ofedDriver"]
    assert driver.get("env") == env


@pytest.mark.parametrize(("taint", "tolerations"), [("nvidia.com/gpu", None), ("dedicated", [DEDICATED])])
def test_nic_cluster_policy_tolerates_a_custom_gpu_taint(taint, tolerations):
    """The operator's DaemonSets tolerate only `nvidia.com/gpu` themselves and take `spec.tolerations` for the
    rest (network-operator@v26.4.1:manifests/state-*/, api/v1alpha1/nicclusterpolicy_types.go `Tolerations`);
    the DOCA driver state also skips nodes with an untolerated taint (pkg/state/state_ofed.go)."""
    spec = network_operator.nic_cluster_policy(cfg("prod-ib", gpu__taintKey=taint))["spec"]
    assert spec.get("tolerations") == tolerations


@pytest.mark.parametrize(("stack", "changes", "cni_type", "extra"), [
    ("prod-roce", {}, "macvlan", {"master": "ens1f0np0", "mode": "bridge", "mtu": 9000}),
    ("prod-roce", {"fabric__attachment": "hostdevice"}, "host-device", {}),
    ("prod-ib", {"fabric__attachment": "shared"}, "ipoib", {"master": "ibp24s0"}),
])
def test_network_attachments(stack, changes, cni_type, extra):
    p = cfg(stack, **changes)
    nads = networks.attachments(p)
    assert len(nads) == len(p.fabric.rails) * len(p.training_namespaces)
    first = nads[0]
    conf = json.loads(first["spec"]["config"])
    assert conf["type"] == cni_type
    assert {k: conf[k] for k in extra} == extra
    # Cluster-wide IPAM from the rail's pool: host-local would repeat addresses on every node.
    assert conf["ipam"] == {"type": "nv-ipam", "poolName": "rail0"}
    rail0 = fabric.rails(p.fabric)[0]
    assert first["metadata"]["name"] == rail0.network
    assert first["metadata"]["annotations"][networks.RESOURCE_ANNOTATION] == rail0.resource


@pytest.mark.parametrize(("changes", "link", "kind"), [({}, "ib", "SriovIBNetwork"),
                                                       ({"fabric__kind": "roce"}, "eth", "SriovNetwork")])
def test_sriov_policies_and_networks(changes, link, kind):
    """One network CR per rail in every training namespace, named like the rail's network, without
    networkNamespace: Mellanox/sriov-network-operator@network-operator-26.4.x (bundled with network-operator
    26.4.1) controllers/generic_network_controller.go creates the NetworkAttachmentDefinition beside such a CR,
    under the CR's name, and refuses networkNamespace outside the operator's namespace. The rdma meta plugin moves
    the VF's RDMA device into the pod (exclusive mode; doc/rdma-configuration.md)."""
    p = cfg("prod-ib", trainingNamespaces=["training", "research"], **changes)
    policies, nets = sriov.node_policies(p), sriov.networks(p)
    assert len(policies) == 8 and len(nets) == 16
    spec = policies[6]["spec"]
    assert spec["nicSelector"] == {"vendor": "15b3", "pfNames": ["ibp206s0"]}
    assert spec["linkType"] == link and spec["isRdma"] is True and spec["numVfs"] == 8
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert {n["kind"] for n in nets} == {kind}
    rail6 = fabric.rails(p.fabric)[6]
    by_place = {(n["metadata"]["namespace"], n["metadata"]["name"]): n["spec"] for n in nets}
    for ns in ("training", "research"):
        net = by_place[(ns, rail6.network)]
        assert "networkNamespace" not in net
        assert f"{kinds.ATTACHMENTS['sriov'].resource_prefix}/{net['resourceName']}" == rail6.resource
        assert json.loads(net["metaPlugins"]) == {"type": "rdma"}
        # Pods reference the network by the name the operator gives the NAD: the CR's, in their own namespace.
        annotation = json.loads(fabric.networks_annotation(ns, [rail6]))
        assert [(a["name"], a["namespace"]) for a in annotation] == [(rail6.network, ns)]


def test_sriov_rails_by_pci_address():
    """nicSelector.rootDevices selects PFs by PCI address
    (Mellanox/sriov-network-operator@network-operator-26.4.x:api/v1/helper.go `SriovNetworkNicSelector.Selected`,
    ANDed with vendor)."""
    p = cfg("prod-ib", fabric__rails=[{k: v for k, v in rail.items() if k != "interface"} | {
        "rootDevices": [f"0000:{0x18 + i:02x}:00.0"]} for i, rail in enumerate(stack_platform("prod-ib")[
            "fabric"]["rails"])])
    assert sriov.node_policies(p)[2]["spec"]["nicSelector"] == {"vendor": "15b3", "rootDevices": ["0000:1a:00.0"]}


@pytest.mark.parametrize(("changes", "max_unavailable"), [({}, 4), ({"fabric__sriovMaxUnavailable": "10%"}, "10%")])
def test_sriov_pool_config(changes, max_unavailable):
    """SriovNetworkPoolConfig (Mellanox/sriov-network-operator@network-operator-26.4.x:api/v1/
    sriovnetworkpoolconfig_types.go): exclusive RDMA mode (each RDMA device in one network namespace, so a pod
    sees only its VFs), the GPU nodes only, and maxUnavailable always set: unset means every node of the pool
    drains at once (api/v1/helper.go `SriovNetworkPoolConfig.MaxUnavailable` returns -1)."""
    pool = sriov.pool_config(cfg("prod-ib", **changes))
    assert pool["metadata"]["namespace"] == network_operator.NAMESPACE
    assert pool["spec"] == {"nodeSelector": {"matchLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
                            "rdmaMode": "exclusive", "maxUnavailable": max_unavailable}


def scheduler_conf(platform) -> dict:
    return yaml.safe_load(volcano.values(platform)["custom"]["scheduler_config_override"])


def test_volcano_scheduler_takes_whole_gangs():
    """volcano-sh/volcano@v1.15.1: `gangpreempt`/`gangreclaim` (pkg/scheduler/actions/factory.go, lowercase names
    from their `Name()`; a misspelt action makes the scheduler keep its previous conf) evict whole victim jobs
    (actions/utils/bundle.go `CreateJobBundles`) and commit only when the whole preemptor gang is pipelined.
    No `enqueue`: allocate then moves Pending PodGroups to Inqueue (actions/allocate/allocate.go
    `buildAllocateContext`), so the Training Operator creates the gang's pods and it can preempt (gangpreempt
    skips `job.IsPending()`). Legacy `preempt`/`reclaim` evict task by task and split gangs."""
    conf = scheduler_conf(cfg("prod-ib"))
    actions = [a.strip() for a in conf["actions"].split(",")]
    assert actions == ["allocate", "backfill", "gangreclaim", "gangpreempt"]
    assert not {"enqueue", "preempt", "reclaim"} & set(actions)
    assert conf["configurations"] == [{"name": "gangpreempt", "arguments": {"allowWholeBundle": True}},
                                      {"name": "gangreclaim", "arguments": {"allowWholeBundle": True}}]
    tiers = [[p["name"] for p in t["plugins"]] for t in conf["tiers"]]
    assert tiers == [["priority", "gang", "conformance"], ["drf", "predicates", "proportion", "nodeorder", "binpack"]]
    plugins = {p["name"]: p for t in conf["tiers"] for p in t["plugins"]}
    assert "overcommit" not in plugins  # an enqueue vote only: nothing without the enqueue action
    assert plugins["drf"]["enablePreemptable"] is False
    assert plugins["binpack"]["arguments"]["binpack.resources"] == "nvidia.com/gpu"


@pytest.mark.skipif(not (SHARED / "values").is_dir(), reason="shared/upstream/values not beside checkout")
def test_chart_default_scheduler_never_preempts():
    """Why fastpath overrides it: the chart's file (volcano-sh/volcano@v1.15.1:installer/helm/chart/volcano/
    config/volcano-scheduler.conf) has neither preempt nor reclaim action, and its `enqueue` keeps a gang that
    does not fit Pending."""
    default = yaml.safe_load((SHARED / "values" / "volcano.volcano-scheduler.conf").read_text())
    actions = {a.strip() for a in default["actions"].split(",")}
    assert actions == {"enqueue", "allocate", "backfill"}
    assert scheduler_conf(cfg("dev")) != default


def test_priority_classes_say_what_the_scheduler_does():
    """The descriptions promise only what the configured scheduler does (volcano-sh/volcano@v1.15.1
    actions/gangpreempt/gangpreempt.go: same queue only, strictly lower priority; gangreclaim ignores priority)."""
    tiers = {pc["metadata"]["name"]: pc["description"] for pc in volcano.priority_classes(cfg("dev"))}
    for description in tiers.values():
        assert "same queue" in description and "whole" in description
        assert "Across queues tiers do not apply" in description and "reserves nothing" in description
    assert "may preempt lower tiers" not in tiers["training-critical"]


def test_volcano_queues_and_tiers():
    qs = volcano.queues(cfg("prod-ib"))
    assert [(q["metadata"]["name"], q["spec"]["weight"], q["spec"].get("capability")) for q in qs] == [
        ("research", 3, {"nvidia.com/gpu": 192}), ("production", 5, None), ("eval", 1, {"nvidia.com/gpu": 32})]
    tiers = {pc["metadata"]["name"]: pc for pc in volcano.priority_classes(cfg("dev"))}
    assert tiers["training-critical"]["value"] > tiers["training-standard"]["value"] > tiers[
        "training-preemptible"]["value"]
    assert tiers["training-preemptible"]["preemptionPolicy"] == "Never"


def test_checkpoint_storage():
    sc = checkpoints.storage_class(cfg("prod-ib"))
    assert sc["reclaimPolicy"] == "Retain"
    assert "proto=rdma" in sc["mountOptions"] and "port=20049" in sc["mountOptions"]
    assert checkpoints.storage_class(cfg("prod-roce")) is None
    claims = checkpoints.claims(cfg("prod-roce"))
    assert [(c["metadata"]["namespace"], c["spec"]["storageClassName"]) for c in claims] == [
        ("training", "ceph-cephfs-rwx"), ("research", "ceph-cephfs-rwx")]
    assert all(c["spec"]["accessModes"] == ["ReadWriteMany"] for c in claims)


CSI_DEFAULT_TOLERATIONS = [{"key": k, "operator": "Exists", "effect": "NoSchedule"} for k in (
    "node-role.kubernetes.io/master", "node-role.kubernetes.io/controlplane", "node-role.kubernetes.io/control-plane",
    "CriticalAddonsOnly")]


@pytest.mark.parametrize(("changes", "controller"), [
    ({"checkpoints__nfs__rdma": False}, {"defaultOnDeletePolicy": "retain"}),
    ({}, {"defaultOnDeletePolicy": "retain", "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
          "tolerations": [*CSI_DEFAULT_TOLERATIONS, GPU_TAINT]}),
    ({"gpu__taintKey": "dedicated"}, {"defaultOnDeletePolicy": "retain",
                                      "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                                      "tolerations": [*CSI_DEFAULT_TOLERATIONS, GPU_TAINT, DEDICATED]}),
])
def test_csi_nfs_controller_mounts_from_a_gpu_node_over_rdma(changes, controller):
    """kubernetes-csi/csi-driver-nfs@v4.13.4:pkg/nfs/controllerserver.go `CreateVolume` mounts the share with the
    StorageClass's mountOptions (`internalMount`) from the controller's node, on the host network
    (charts/v4.13.4/csi-driver-nfs/templates/csi-nfs-controller.yaml): over RDMA that must be a GPU node. Helm
    replaces `controller.tolerations` (values.yaml default: the four control-plane keys), so they are repeated.
    `DeleteVolume` mounts nothing when onDelete is retain, so no provisioner secret with RDMA mountOptions."""
    assert checkpoints.values(cfg("prod-ib", **changes)) == {"controller": controller}


@pytest.mark.skipif(not (SHARED / "values").is_dir(), reason="shared/upstream/values not beside checkout")
def test_csi_controller_tolerations_repeat_the_chart_defaults():
    """The list fastpath repeats is the chart's (kubernetes-csi/csi-driver-nfs@v4.13.4:
    charts/v4.13.4/csi-driver-nfs/values.yaml `controller.tolerations`)."""
    upstream = yaml.safe_load((SHARED / "values" / "csi-driver-nfs.values.yaml").read_text())
    assert upstream["controller"]["tolerations"] == checkpoints.CONTROLLER_TOLERATIONS == CSI_DEFAULT_TOLERATIONS


@pytest.mark.parametrize(("stack", "enforce"), [("dev", "baseline"), ("prod-ib", "privileged")])
def test_training_namespace_pod_security(stack, enforce):
    ns = platform.training_namespaces(cfg(stack))[0]
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == enforce
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/warn"] == "baseline"


# ------------------------------------------------------------------------------ resource graph under mocks


def regs(run, type_suffix):
    return [r for r in run.registrations if r.type.endswith(type_suffix)]


def test_graph_parents_and_ordering(rendered):
    run = rendered("prod-ib").run
    by_urn = {r.urn: r for r in run.registrations}
    release = {r.name: r for r in regs(run, ":Release")}
    (ncp,) = regs(run, ":NicClusterPolicy")
    assert release["network-operator"].urn in ncp.dependencies, "CR before its CRD's release"
    for pool in regs(run, ":IPPool"):
        assert ncp.urn in pool.dependencies, "IPPool CRD comes from the operator reconciling nvIpam"
    for q in regs(run, ":Queue"):
        assert release["volcano"].urn in q.dependencies
    for r in regs(run, ":SriovNetworkNodePolicy") + regs(run, ":SriovIBNetwork") + regs(run, ":SriovNetworkPoolConfig"):
        assert release["network-operator"].urn in r.dependencies
        # The NicClusterPolicy reaches `ready` (what it is awaited for) only while no node reboots: the SR-IOV
        # firmware rewrite and reboots come after it (network-operator@v26.4.1 state_skel.go isDaemonSetReady).
        assert ncp.urn in r.dependencies
    (pool,) = regs(run, ":SriovNetworkPoolConfig")
    for r in regs(run, ":SriovNetworkNodePolicy"):
        assert pool.urn in r.dependencies, "the pool's drain limit and RDMA mode before any policy reboots a node"
    namespaces = {r.inputs["metadata"]["name"]: r.urn for r in regs(run, ":Namespace")}
    for r in regs(run, ":SriovIBNetwork"):
        assert namespaces[r.inputs["metadata"]["namespace"]] in r.dependencies, "network CR before its namespace"
    # prod-ib's hosts carry DOCA-OFED (and load rpcrdma themselves): the policy's readiness says nothing about
    # NFS over RDMA there, so storage does not wait for it (with the operator's DOCA driver it does: below).
    assert ncp.urn not in release["csi-driver-nfs"].dependencies
    # With the gang flag the operator exits while Volcano's PodGroup CRD is missing: every object of the
    # overlay (the Deployment included) waits for the Volcano release.
    (directory,) = regs(run, "kustomize:Directory")
    overlay = [r for r in run.registrations if r.parent == directory.urn]
    assert {r.type.rsplit(":", 1)[-1] for r in overlay} >= {"Deployment", "CustomResourceDefinition"}
    for r in [directory, *overlay]:
        assert release["volcano"].urn in r.dependencies
    top_level = {"fastpath:platform:Platform", "fastpath:jobs:TrainingJob", "fastpath:verify:FabricAcceptance"}
    for r in run.registrations:
        if r.type not in top_level:
            assert r.parent in by_urn, f"{r.type} {r.name} is not parented to a fastpath component"
    # The job object itself (not only its component) waits for the platform: its CRD, queue and claim.
    for job in regs(run, ":PyTorchJob") + regs(run, ":MPIJob"):
        assert release["volcano"].urn in job.dependencies
        assert any(d.endswith("persistentvolumeclaim-training-checkpoints") for d in job.dependencies)
    (sc,) = regs(run, ":StorageClass")
    assert release["csi-driver-nfs"].urn in sc.dependencies


@pytest.mark.parametrize("stack", STACKS)
def test_checkpoint_claims_survive_destroy(stack, rendered):
    claims = regs(rendered(stack).run, ":PersistentVolumeClaim")
    assert claims
    assert all(c.protect and c.retain_on_delete for c in claims)


@pytest.mark.parametrize("stack", STACKS)
def test_one_nfd_and_no_mpi_operator(stack, rendered):
    pkgs = rendered(stack).packages
    nfd = [p["name"] for p in pkgs if p["kind"] == "helm" and p["values"].get("nfd", {}).get("enabled")]
    assert len(nfd) == 1, nfd
    assert not any("mpi-operator" in json.dumps(p) for p in pkgs)


def test_profile_is_plain_serializable_data(rendered):
    profile = rendered("prod-roce").run.outputs["profile"]
    assert json.loads(json.dumps(profile)) == profile
    assert profile["transport"] == "roce"
    assert profile["ncclEnv"]["NCCL_IB_TC"] == "106"
    assert [r["network"] for r in profile["rails"]] == ["rail0-shared", "rail1-shared"]


# (stack, package, exactly what it waits for)
WAITS = [
    ("prod-ib", "csi-driver-nfs", []),
    ("prod-ib", "gpu-operator", ["Namespace/gpu-operator"]),
    ("prod-ib", "network-operator", ["Namespace/nvidia-network-operator"]),
    ("prod-ib", "volcano", ["Namespace/volcano-system"]),
    ("prod-ib", "training-operator", ["ConfigMap/kubeflow/training-operator-init-container", "Namespace/kubeflow",
                                      "helm/volcano"]),
    ("dev", "csi-driver-nfs", []),
    ("dev", "training-operator", ["ConfigMap/kubeflow/training-operator-init-container", "Namespace/kubeflow",
                                  "helm/volcano"]),
]


@pytest.mark.parametrize(("stack", "name", "waits"), WAITS, ids=[f"{w[0]}:{w[1]}" for w in WAITS])
def test_packages_record_what_each_install_waits_for(stack, name, waits, rendered):
    """packages.yaml shows the order `pulumi up` follows: each install's own dependencies and those of the
    components above it, by the names a reviewer knows."""
    (pkg,) = [p for p in rendered(stack).packages if p["name"] == name]
    assert pkg["waitsFor"] == waits


def test_waits_for_includes_what_a_parent_component_waits_for():
    """A dependency given to a component (not to the install itself) is inherited: the engine holds back the
    component's children only through their own dependencies, so the renderer walks up the parents."""
    import pulumi

    from tools import render

    def program():
        class Box(pulumi.ComponentResource):
            def __init__(self, name, opts=None):
                super().__init__("fastpath:test:Box", name, None, opts)

        from components import k8s
        first = k8s.apply(k8s.namespace("first", "t", "t", "baseline", "test"))
        box = Box("box", pulumi.ResourceOptions(depends_on=[first]))
        k8s.helm_release("inner", "c", "https://example.invalid", "1.0.0", "first", {},
                         pulumi.ResourceOptions(parent=box))

    run = render.run_program("dev", program=program)
    (pkg,) = render.packages(run)
    assert pkg["waitsFor"] == ["Namespace/first"]


def test_nfs_over_rdma_waits_for_the_operators_doca_driver():
    """With the operator's DOCA driver, rpcrdma is loaded by its container (ENABLE_NFSRDMA,
    Mellanox/network-operator@v26.4.1 docs/mofed-container-env-vars.md), so csi-driver-nfs, whose controller
    mounts the share itself (kubernetes-csi/csi-driver-nfs@v4.13.4 pkg/nfs/controllerserver.go CreateVolume),
    waits until the NicClusterPolicy is ready."""
    from tools import render

    p = stack_platform("prod-ib")
    p["gpu"] = {**p["gpu"], "hostMofed": False}
    run = render.run_program("prod-ib", extra_config={"fastpath:platform": p})
    (pkg,) = [x for x in render.packages(run) if x["name"] == "csi-driver-nfs"]
    assert pkg["waitsFor"] == ["NicClusterPolicy/nic-cluster-policy"]


def test_our_volcano_conf_passes_the_gang_actions_rule():
    """The scheduler configuration fastpath installs, as the chart renders it into the scheduler's ConfigMap
    (volcano-sh/volcano@v1.15.1 installer/helm/chart/volcano/templates/scheduler.yaml), is what the policy pack's
    volcano-gang-actions rule asks of anyone's."""
    from tools.lint import lint

    conf = volcano.values(cfg("prod-ib"))["custom"]["scheduler_config_override"]
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "volcano-scheduler-configmap",
                                                               "namespace": "volcano-system"},
          "data": {"volcano-scheduler.conf": conf}}
    assert [v for v in lint([cm]) if v.rule == "volcano-gang-actions"] == []
