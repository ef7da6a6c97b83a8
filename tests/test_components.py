"""Platform components: their pure builders, Helm values against upstream, and the resource graph."""

import json

import pytest
import yaml

from components import (
    checkpoints,
    fabric,
    gpu_operator,
    network_operator,
    networks,
    platform,
    sriov,
    training_operator,
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


def cfg(stack, **changes) -> PlatformConfig:
    p = stack_platform(stack)
    for dotted, value in changes.items():
        obj = p
        *head, last = dotted.split("__")
        for k in head:
            obj = obj.setdefault(k, {})
        obj[last] = value
    return PlatformConfig.model_validate(p)


def leaf_paths(d, prefix=()):
    for k, v in d.items():
        if isinstance(v, dict) and v:
            yield from leaf_paths(v, (*prefix, k))
        else:
            yield (*prefix, k)


@pytest.mark.skipif(not (SHARED / "values").is_dir(), reason="shared/upstream/values not beside checkout")
@pytest.mark.parametrize("stack", STACKS)
def test_every_helm_value_key_exists_upstream(stack, rendered):
    for pkg in rendered(stack).packages:
        if pkg["kind"] != "helm":
            continue
        upstream = yaml.safe_load((SHARED / "values" / VALUES_FILES[pkg["name"]]).read_text())
        for path in leaf_paths(pkg["values"]):
            node = upstream
            for k in path:
                assert isinstance(node, dict) and k in node, f"{pkg['name']}: {'.'.join(path)} not in chart values"
                node = node[k]


# (id, config changes, exact gpu-operator values)
GPU_CASES = [
    ("dmabuf-operator-driver", {}, {"driver": {"enabled": True}, "nfd": {"enabled": True},
                                    "dcgmExporter": {"enabled": True, "serviceMonitor": {"enabled": True}}}),
    ("peermem-legacy", {"gpu__gpuDirect": "peermem"},
     {"driver": {"enabled": True, "rdma": {"enabled": True}}, "nfd": {"enabled": True},
      "dcgmExporter": {"enabled": True, "serviceMonitor": {"enabled": True}}}),
    ("host-mofed-dmabuf", {"gpu__hostMofed": True},
     {"driver": {"enabled": True, "rdma": {"useHostMofed": True}}, "nfd": {"enabled": True},
      "dcgmExporter": {"enabled": True, "serviceMonitor": {"enabled": True}}}),
    ("preinstalled-driver-no-monitoring", {"gpu__driverPreinstalled": True, "monitoring": False},
     {"driver": {"enabled": False}, "nfd": {"enabled": True},
      "dcgmExporter": {"enabled": True, "serviceMonitor": {"enabled": False}}}),
]


@pytest.mark.parametrize(("changes", "expected"), [c[1:] for c in GPU_CASES], ids=[c[0] for c in GPU_CASES])
def test_gpu_operator_values(changes, expected):
    assert gpu_operator.values(cfg("prod-ib", **changes)) == expected


@pytest.mark.parametrize(("stack", "changes", "spec_keys", "secondary"), [
    ("prod-ib", {}, ["ofedDriver", "secondaryNetwork", "nvIpam"], ["cniPlugins", "multus"]),
    ("prod-roce", {}, ["rdmaSharedDevicePlugin", "secondaryNetwork", "nvIpam"], ["cniPlugins", "multus"]),
    ("prod-roce", {"gpu__hostMofed": False}, ["ofedDriver", "rdmaSharedDevicePlugin", "secondaryNetwork", "nvIpam"],
     ["cniPlugins", "multus"]),
    ("prod-ib", {"fabric__attachment": "shared"}, ["ofedDriver", "rdmaSharedDevicePlugin", "secondaryNetwork",
                                                   "nvIpam"], ["cniPlugins", "multus", "ipoib"]),
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


def test_network_operator_values_keep_one_nfd():
    assert network_operator.values(cfg("prod-ib"))["nfd"] == {"enabled": False}
    assert network_operator.values(cfg("prod-ib", components__gpuOperator=False))["nfd"] == {"enabled": True}
    assert gpu_operator.values(cfg("prod-ib"))["nfd"] == {"enabled": True}


def test_sriov_enabled_only_for_sriov_attachment():
    ib = network_operator.values(cfg("prod-ib"))
    assert ib["sriovNetworkOperator"] == {"enabled": True}
    assert ib["sriov-network-operator"] == {"sriovOperatorConfig": {"deploy": True}}
    assert network_operator.values(cfg("prod-roce"))["sriovNetworkOperator"] == {"enabled": False}


def test_ip_pools_split_each_rail_subnet_across_nodes():
    pools = network_operator.ip_pools(cfg("prod-ib"))
    assert [p["metadata"]["name"] for p in pools] == [f"rail{i}" for i in range(8)]
    assert {p["metadata"]["namespace"] for p in pools} == {network_operator.NAMESPACE}
    assert pools[1]["spec"]["subnet"] == "10.100.16.0/20"
    assert pools[1]["spec"]["perNodeBlockSize"] == (4096 - 2) // 32


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
    p = cfg("prod-ib", **changes)
    policies, nets = sriov.node_policies(p), sriov.networks(p)
    assert len(policies) == len(nets) == 8
    spec = policies[6]["spec"]
    assert spec["nicSelector"] == {"vendor": "15b3", "pfNames": ["ibp206s0"]}
    assert spec["linkType"] == link and spec["isRdma"] is True and spec["numVfs"] == 8
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert {n["kind"] for n in nets} == {kind}
    rail6 = fabric.rails(p.fabric)[6]
    assert nets[6]["metadata"]["name"] == rail6.network
    assert nets[6]["spec"]["networkNamespace"] == "training"
    assert f"{fabric.SRIOV_RESOURCE_PREFIX}/{nets[6]['spec']['resourceName']}" == rail6.resource


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
    assert checkpoints.values(cfg("prod-ib")) == {"controller": {"defaultOnDeletePolicy": "retain"}}
    assert checkpoints.storage_class(cfg("prod-roce")) is None
    claims = checkpoints.claims(cfg("prod-roce"))
    assert [(c["metadata"]["namespace"], c["spec"]["storageClassName"]) for c in claims] == [
        ("training", "ceph-cephfs-rwx"), ("research", "ceph-cephfs-rwx")]
    assert all(c["spec"]["accessModes"] == ["ReadWriteMany"] for c in claims)


@pytest.mark.parametrize(("stack", "enforce"), [("dev", "baseline"), ("prod-ib", "privileged")])
def test_training_namespace_pod_security(stack, enforce):
    ns = platform.training_namespaces(cfg(stack))[0]
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == enforce
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/warn"] == "baseline"


UPSTREAM_DEPLOYMENT = {  # shape of manifests/base/deployment.yaml in kubeflow/trainer v1.9.x
    "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "training-operator"},
    "spec": {"template": {"spec": {"containers": [
        {"name": "training-operator", "image": "kubeflow/training-operator", "command": ["/manager"]}]}}},
}


def test_training_operator_gets_volcano_flag_once():
    import copy

    dep = copy.deepcopy(UPSTREAM_DEPLOYMENT)
    training_operator.enable_volcano(dep)
    training_operator.enable_volcano(dep)
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["command"] == ["/manager"] and c["args"] == ["--gang-scheduler-name=volcano"]
    other = {"kind": "Service", "metadata": {"name": "training-operator"}}
    training_operator.enable_volcano(other)
    assert other == {"kind": "Service", "metadata": {"name": "training-operator"}}


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
    for r in regs(run, ":SriovNetworkNodePolicy") + regs(run, ":SriovIBNetwork"):
        assert release["network-operator"].urn in r.dependencies
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
