"""SR-IOV networks (components/platform/sriov.py): node policies, network CRs and the pool config."""

import json

import pytest

from components.fabric import kinds
from components.fabric import wiring as fabric
from components.platform import network_operator, sriov
from tests.conftest import stack_platform
from tests.helpers import cfg


@pytest.mark.parametrize(("changes", "link", "kind"), [({}, "ib", "SriovIBNetwork"), ({"fabric__kind": "roce"}, "eth", "SriovNetwork")])
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
    p = cfg(
        "prod-ib",
        fabric__rails=[{k: v for k, v in rail.items() if k != "interface"} | {"rootDevices": [f"0000:{0x18 + i:02x}:00.0"]} for i, rail in enumerate(stack_platform("prod-ib")["fabric"]["rails"])],
    )
    assert sriov.node_policies(p)[2]["spec"]["nicSelector"] == {"vendor": "15b3", "rootDevices": ["0000:1a:00.0"]}


@pytest.mark.parametrize(("changes", "max_unavailable"), [({}, 4), ({"fabric__sriovMaxUnavailable": "10%"}, "10%")])
def test_sriov_pool_config(changes, max_unavailable):
    """SriovNetworkPoolConfig (Mellanox/sriov-network-operator@network-operator-26.4.x:api/v1/
    sriovnetworkpoolconfig_types.go): exclusive RDMA mode (each RDMA device in one network namespace, so a pod
    sees only its VFs), the GPU nodes only, and maxUnavailable always set: unset means every node of the pool
    drains at once (api/v1/helper.go `SriovNetworkPoolConfig.MaxUnavailable` returns -1)."""
    pool = sriov.pool_config(cfg("prod-ib", **changes))
    assert pool["metadata"]["namespace"] == network_operator.NAMESPACE
    assert pool["spec"] == {"nodeSelector": {"matchLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}, "rdmaMode": "exclusive", "maxUnavailable": max_unavailable}
