"""A bad stack file is refused with the file, the key path and the fix; good ones load."""

import pytest

from components import config
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
    ("dev", "fabric.rails", [{"hca": "mlx5_0", "interface": "e0", "subnet": "10.0.0.0/24", "speedGbps": 100}],
     ["fastpath:platform.fabric", "takes no rails"]),
    ("prod-ib", "fabric.rails[3].interface", DELETE, ["fabric.attachment 'sriov'", "fabric.rails[3].interface",
                                                      "pfNames"]),
    ("prod-ib", "fabric.rails[1].subnet", "10.100.0.0/20", ["fabric.rails[0].subnet", "fabric.rails[1].subnet",
                                                            "overlap"]),
    ("prod-ib", "fabric.rails[1].subnet", "10.100.16.1/20", ["fabric.rails[1].subnet", "host bits"]),
    ("prod-ib", "fabric.rails[5].hca", "mlx5_0", ["fabric.rails[0].hca", "fabric.rails[5].hca", "own HCA"]),
    ("prod-ib", "fabric.attachment", DELETE, ["fabric.attachment", "sriov, shared or hostdevice"]),
    ("prod-ib", "fabric.gidIndex", 3, ["fabric.gidIndex", "roce"]),
    ("prod-roce", "fabric.ncclOverrides", {"NCCL_TIMEOUT": "1800"}, ["fabric.ncclOverrides",
                                                                      "torch.distributed.init_process_group"]),
    ("prod-roce", "fabric.ncclOverrides", {"NCCL_IB_HCAS": "mlx5"}, ["did you mean NCCL_IB_HCA"]),
    ("prod-roce", "fabric.ncclOverrides", {"NCCL_LL_THRESHOLD": "0"}, ["no longer read", "NCCL_PROTO"]),
    ("prod-roce", "fabric.ncclOverrides", {"NCCL_IB_DISABLE": True}, ["1 or 0", "reads 'true' as 0"]),
    ("prod-roce", "fabric.ncclOverrides", {"NCCL_IB_TC": "af31"}, ["NCCL_IB_TC takes an integer"]),
    ("dev", "gpu.gpuDirect", "dmabuf", ["gpu.gpuDirect", "tcp"]),
    ("prod-ib", "gpu", {"product": "x", "perNode": 8, "gpuDirect": "peermem", "driverPreinstalled": True},
     ["gpu.gpuDirect 'peermem'", "gpu.driverPreinstalled", "gpu.hostMofed"]),
    ("prod-ib", "scheduler.queues[0].gpus", 999, ["scheduler.queues[0].gpus", "256 GPUs", "nodes.count 32"]),
    ("prod-ib", "scheduler.defaultQueue", "nope", ["scheduler.defaultQueue 'nope'", "research"]),
    ("prod-ib", "scheduler.queues[1].name", "research", ["scheduler.queues", "more than once"]),
    ("prod-ib", "checkpoints", DELETE, ["components.checkpointStorage", "checkpoints.nfs"]),
    ("prod-roce", "checkpoints.nfs", {"server": "x", "share": "/y"}, ["exactly one of checkpoints.nfs",
                                                                      "checkpoints.storageClass"]),
    ("prod-ib", "trainingNamespaces", ["a", "b"], ["fabric.attachment 'sriov'", "trainingNamespaces"]),
    ("prod-roce", "fabric.rails[0].subnet", "192.168.100.0/29", ["fabric.rails[0].subnet", "nodes.count 16",
                                                                 "larger subnet"]),
    ("dev", "components.networkOperator", True, ["components.networkOperator", "'tcp'"]),
    ("dev", "cluster", "Dev_Cluster", ["fastpath:platform.cluster", "pattern"]),
]


@pytest.mark.parametrize(("stack", "path", "value", "expect"), BAD, ids=[f"{b[0]}:{b[1]}" for b in BAD])
def test_bad_config_is_refused_with_key_path_and_fix(stack, path, value, expect):
    platform = stack_platform(stack)
    set_path(platform, path, value)
    with pytest.raises(config.ConfigError) as err:
        config.parse({"platform": platform}, f"stacks/Pulumi.{stack}.yaml")
    message = str(err.value)
    assert message.startswith(f"stacks/Pulumi.{stack}.yaml: fastpath:platform"), message
    for piece in expect:
        assert piece in message, f"{piece!r} not in {message!r}"


def test_unknown_top_level_key_and_missing_platform():
    with pytest.raises(config.ConfigError, match=r"fastpath:platfrom: unknown key"):
        config.parse({"platfrom": {}}, "stacks/Pulumi.x.yaml")
    with pytest.raises(config.ConfigError, match=r"fastpath:platform: required"):
        config.parse({}, "stacks/Pulumi.x.yaml")


@pytest.mark.parametrize("stack", STACKS)
def test_committed_stacks_load_and_round_trip(stack):
    cfg = config.parse({"platform": stack_platform(stack)}, f"stacks/Pulumi.{stack}.yaml")
    # to_config() is what the profile exports: it must read back to the same model.
    assert config.PlatformConfig.model_validate(cfg.platform.to_config()) == cfg.platform


def test_decode_passes_json_and_plain_strings():
    assert config.decode('{"a": 1}') == {"a": 1}
    assert config.decode("training") == "training"
