"""A bad stack file is refused with the file, the key path and the fix; good ones load."""

import pytest

from components.model import config, stack
from tests.conftest import STACKS, stack_platform


def set_path(obj, path, value):
    """Set (or delete, with value=DELETE) `a.b[2].c` in nested dicts/lists."""
    parts = path.replace("[", ".").replace("]", "").split(".")
    for p in parts[:-1]:
        obj = obj[int(p)] if p.isdigit() else obj.setdefault(p, {})
    last = parts[-1]
    if value is DELETE:
        del obj[int(last) if last.isdigit() else last]
    else:
        obj[int(last) if last.isdigit() else last] = value


DELETE = object()

# (stack, key path, value, substrings the one message must contain)
BAD = [
    ("prod-ib", "fabric.rails[2].hca", DELETE, ["fastpath:platform.fabric.rails[2].hca", "Field required"]),
    ("dev", "gpu.perNodee", 4, ["fastpath:platform.gpu.perNodee", "unknown key"]),
    ("dev", "gpu.perNode", "eight", ["fastpath:platform.gpu.perNode", "integer"]),
    ("dev", "gpu.perNode", 0, ["fastpath:platform.gpu.perNode", "greater than 0"]),
    ("dev", "fabric.kind", "ethernet", ["fastpath:platform.fabric.kind", "infiniband", "tcp"]),
    ("dev", "fabric.rails", [{"hca": "mlx5_0", "interface": "e0", "subnet": "10.0.0.0/24", "speedGbps": 100}], ["fastpath:platform.fabric", "takes no rails"]),
    ("prod-ib", "fabric.rails[3].interface", DELETE, ["fabric.attachment 'sriov'", "fabric.rails[3].interface", "pfNames"]),
    ("prod-ib", "fabric.rails[1].subnet", "10.100.0.0/20", ["fabric.rails[0].subnet", "fabric.rails[1].subnet", "overlap"]),
    ("prod-ib", "fabric.rails[1].subnet", "10.100.16.1/20", ["fabric.rails[1].subnet", "host bits"]),
    ("prod-ib", "fabric.rails[5].hca", "mlx5_0", ["fabric.rails[0].hca", "fabric.rails[5].hca", "own HCA"]),
    ("prod-ib", "fabric.attachment", DELETE, ["fabric.attachment", "sriov, shared, hostdevice, hostnetwork, rdma-only or dra"]),
    # A RoCE GID is an address on the rail's netdev: without a network attachment the pod has none.
    ("prod-roce", "fabric.attachment", "rdma-only", ["fabric.attachment 'rdma-only'", "roce", "GID", "sriov, shared, hostdevice, hostnetwork or dra"]),
    # On the host network eth0 is rarely the node's interface: NCCL bootstrap must be told which one.
    ("prod-roce", "fabric.attachment", "hostnetwork", ["'hostnetwork'", "fabric.podInterface", "bond0"]),
    ("prod-ib", "fabric.gidIndex", 3, ["fabric.gidIndex", "roce"]),
    ("prod-roce", "fabric.ncclOverrides", {"NCCL_TIMEOUT": "1800"}, ["fabric.ncclOverrides", "torch.distributed.init_process_group"]),
    ("prod-roce", "fabric.ncclOverrides", {"NCCL_IB_HCAS": "mlx5"}, ["did you mean NCCL_IB_HCA"]),
    ("prod-roce", "fabric.ncclOverrides", {"NCCL_LL_THRESHOLD": "0"}, ["no longer read", "NCCL_PROTO"]),
    ("prod-roce", "fabric.ncclOverrides", {"NCCL_IB_DISABLE": True}, ["1 or 0", "reads 'true' as 0"]),
    ("prod-roce", "fabric.ncclOverrides", {"NCCL_IB_TC": "af31"}, ["NCCL_IB_TC takes an integer"]),
    ("dev", "gpu.gpuDirect", "dmabuf", ["gpu.gpuDirect", "tcp"]),
    ("prod-ib", "gpu", {"product": "x", "perNode": 8, "gpuDirect": "peermem", "driverPreinstalled": True}, ["gpu.gpuDirect 'peermem'", "gpu.driverPreinstalled", "gpu.hostMofed"]),
    ("prod-ib", "scheduler.queues[0].gpus", 999, ["scheduler.queues[0].gpus", "256 GPUs", "nodes.count 32"]),
    ("prod-ib", "scheduler.defaultQueue", "nope", ["scheduler.defaultQueue 'nope'", "research"]),
    ("prod-ib", "scheduler.queues[1].name", "research", ["scheduler.queues", "more than once"]),
    # A namespace's jobs that name no queue need one queue, in a namespace the platform serves.
    ("prod-v2", "scheduler.queues[1].namespaces", ["vision"], ["scheduler.queues[1].namespaces", "['vision']", "trainingNamespaces"]),
    ("prod-v2", "scheduler.queues[1].namespaces", ["research"], ["namespace research is in queues ['research', 'production']", "one of them"]),
    ("prod-ib", "checkpoints", DELETE, ["components.checkpointStorage", "checkpoints.nfs"]),
    ("prod-roce", "checkpoints.nfs", {"server": "x", "share": "/y"}, ["exactly one of checkpoints.nfs", "checkpoints.storageClass"]),
    ("prod-roce", "fabric.rails[0].subnet", "192.168.100.0/29", ["fabric.rails[0].subnet", "nodes.count 16", "larger subnet"]),
    # 32 nodes x (8 VFs x 2) addresses: 40 blocks of 16 (32 nodes + 8 spare) need a /22; a /23 holds 31.
    ("prod-ib", "fabric.rails[1].subnet", "10.100.16.0/23", ["fabric.rails[1].subnet 10.100.16.0/23", "31 blocks of 16", "needs 40", "8 spare", "/22 or larger"]),
    ("prod-ib", "fabric.rails[3].rootDevices", ["0000:40:00.0"], ["exactly one of fabric.rails[3].interface", "fabric.rails[3].rootDevices"]),
    ("prod-ib", "fabric.rails[3].rootDevices", ["40:00.0"], ["fabric.rails[3].rootDevices[0]", "pattern"]),
    ("prod-roce", "fabric.rails[0].rootDevices", ["0000:40:00.0"], ["fabric.rails[0].rootDevices only applies", "fabric.rails[0].interface"]),
    ("prod-roce", "fabric.sriovMaxUnavailable", 2, ["fabric.sriovMaxUnavailable", "'sriov'"]),
    ("prod-ib", "fabric.sriovMaxUnavailable", "150%", ["fabric.sriovMaxUnavailable"]),
    ("dev", "monitoring", {"serviceMonitorLabels": {"release": "kps"}}, ["monitoring.serviceMonitorLabels", "monitoring.enabled true"]),
    ("dev", "checkpoints.nfs.rdma", True, ["checkpoints.nfs.rdma", "'tcp'", "false"]),
    ("dev", "components.networkOperator", True, ["components.networkOperator", "'tcp'"]),
    ("dev", "cluster", "Dev_Cluster", ["fastpath:platform.cluster", "pattern"]),
    # Kueue: what it cannot do is refused with the reason (components/model/config.py PlatformConfig._kueue).
    ("prod-kueue", "scheduler.queues[1].name", "default", ["'default'", "LocalQueue `default`", "something else"]),
    ("prod-kueue", "components", {"volcano": True}, ["components.volcano", "two gang schedulers"]),
    # One topology: the host is implied, keys and names unique, domains no larger inward, placement a level.
    ("prod-kueue", "nodes.topology.levels[1].nodeLabel", "kubernetes.io/hostname", ["levels[1].nodeLabel", "always the last and implied"]),
    ("prod-kueue", "nodes.topology.levels[1].name", "block", ["repeat the name ['block']"]),
    ("prod-kueue", "nodes.topology.levels[1].nodeLabel", "fabric.topograph.run/tier-1", ["repeat the nodeLabel ['fabric.topograph.run/tier-1']"]),
    ("prod-kueue", "nodes.topology.levels[1].nodes", 32, ["must not grow inward"]),
    ("prod-kueue", "nodes.topology.levels[0].nodes", 64, ["levels[0].nodes 64", "nodes.count 32"]),
    ("prod-kueue", "nodes.topology.placement.level", "rack", ["placement.level 'rack'", "['block', 'leaf']"]),
    ("prod-kueue", "nodes.topology.source", "declared", ["nodes.topology.provider configures Topograph"]),
    ("prod-kueue", "nodes.topology.provider", "netq", ["netq", "endpoint and credentialsSecret"]),
    ("prod-kueue", "nodes.topologyKey", "example.com/rack", ["topologyKey and nodes.topology", "remove topologyKey"]),
]


@pytest.mark.parametrize(("stack_name", "path", "value", "expect"), BAD, ids=[f"{b[0]}:{b[1]}" for b in BAD])
def test_bad_config_is_refused_with_key_path_and_fix(stack_name, path, value, expect):
    platform = stack_platform(stack_name)
    set_path(platform, path, value)
    with pytest.raises(config.ConfigError) as err:
        stack.parse({"platform": platform}, f"stacks/Pulumi.{stack_name}.yaml")
    message = str(err.value)
    assert message.startswith(f"stacks/Pulumi.{stack_name}.yaml: fastpath:platform"), message
    for piece in expect:
        assert piece in message, f"{piece!r} not in {message!r}"


def test_unknown_top_level_key_and_missing_platform():
    with pytest.raises(config.ConfigError, match=r"fastpath:platfrom: unknown key"):
        stack.parse({"platfrom": {}}, "stacks/Pulumi.x.yaml")
    with pytest.raises(config.ConfigError, match=r"fastpath:platform: required"):
        stack.parse({}, "stacks/Pulumi.x.yaml")


@pytest.mark.parametrize("name", STACKS)
def test_committed_stacks_load_and_round_trip(name):
    cfg = stack.parse({"platform": stack_platform(name)}, f"stacks/Pulumi.{name}.yaml")
    # to_config() is what the profile exports: it must read back to the same model.
    assert config.PlatformConfig.model_validate(cfg.platform.to_config()) == cfg.platform


def by_pci_address(platform: dict) -> dict:
    """prod-ib with every rail's PF chosen by PCI address instead of name."""
    for i, rail in enumerate(platform["fabric"]["rails"]):
        del rail["interface"]
        rail["rootDevices"] = [f"0000:{0x18 + i:02x}:00.0"]
    return platform


def test_sriov_rails_by_pci_address_in_several_namespaces_are_accepted():
    platform = by_pci_address(stack_platform("prod-ib"))
    platform["trainingNamespaces"] = ["training", "research"]
    cfg = stack.parse({"platform": platform}, "stacks/Pulumi.prod-ib.yaml").platform
    assert cfg.fabric.rails[2].root_devices == ["0000:1a:00.0"] and cfg.fabric.rails[2].interface is None
    assert cfg.training_namespaces == ["training", "research"]


def test_one_pf_address_serves_one_rail():
    platform = by_pci_address(stack_platform("prod-ib"))
    platform["fabric"]["rails"][5]["rootDevices"] = ["0000:18:00.0"]
    with pytest.raises(
        config.ConfigError,
        match=r"fabric.rails\[0\].rootDevices and fabric.rails\[5\].rootDevices both "
        r"list 0000:18:00.0: each PF serves one rail",
    ):
        stack.parse({"platform": platform}, "stacks/Pulumi.prod-ib.yaml")


@pytest.mark.parametrize(("value", "enabled", "labels"), [(True, True, {}), (False, False, {}), ({"enabled": True, "serviceMonitorLabels": {"release": "kps"}}, True, {"release": "kps"})])
def test_monitoring_takes_an_object_or_the_old_bool(value, enabled, labels):
    platform = stack_platform("dev")
    platform["monitoring"] = value
    mon = stack.parse({"platform": platform}, "stacks/Pulumi.dev.yaml").platform.monitoring
    assert (mon.enabled, mon.service_monitor_labels) == (enabled, labels)


def test_decode_passes_json_and_plain_strings():
    assert stack.decode('{"a": 1}') == {"a": 1}
    assert stack.decode("training") == "training"
