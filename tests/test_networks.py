"""Secondary networks (components/platform/networks.py): one NetworkAttachmentDefinition per rail and training namespace."""

import json

import pytest

from components.fabric import wiring as fabric
from components.platform import networks
from tests.helpers import cfg


@pytest.mark.parametrize(
    ("stack", "changes", "cni_type", "extra"),
    [
        ("prod-roce", {}, "macvlan", {"master": "ens1f0np0", "mode": "bridge", "mtu": 9000}),
        ("prod-roce", {"fabric__attachment": "hostdevice"}, "host-device", {}),
        ("prod-ib", {"fabric__attachment": "shared"}, "ipoib", {"master": "ibp24s0"}),
    ],
)
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
