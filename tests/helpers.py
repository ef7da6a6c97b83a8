"""Plain helpers the component test files share: a committed stack's platform with changes, registrations by
type, and the taints several charts are told to tolerate."""

from components.fabric import kinds
from components.model.config import PlatformConfig
from tests.conftest import stack_platform

DROP = object()


def changed(platform: dict, changes: dict, sep: str = ".") -> dict:
    """`platform` with each `a<sep>b: value` set (DROP removes the key), in place; returned for chaining."""
    for dotted, value in changes.items():
        obj = platform
        *head, last = dotted.split(sep)
        for k in head:
            obj = obj.setdefault(k, {})
        if value is DROP:
            obj.pop(last, None)
        else:
            obj[last] = value
    return platform


def cfg(stack, **changes) -> PlatformConfig:
    """A committed stack's platform with `a__b=value` changes (DROP removes the key)."""
    p = changed(stack_platform(stack), changes, "__")
    if changes.get("fabric__attachment", "sriov") != "sriov":
        p["fabric"].pop("sriovMaxUnavailable", None)  # an sriov-only key
    return PlatformConfig.model_validate(p)


def init_checks(spec: dict) -> list[dict]:
    """A pod's init containers that run to completion (the checks), without native sidecars (restartPolicy Always:
    the telemetry's, which tests/test_telemetry.py judges)."""
    return [c for c in spec.get("initContainers", []) if c.get("restartPolicy") != "Always"]


def regs(run, type_suffix):
    """A mock run's registrations whose type ends with `type_suffix` (":Release", ":Queue")."""
    return [r for r in run.registrations if r.type.endswith(type_suffix)]


# Tolerations of the GPU nodes' taint: the default `nvidia.com/gpu` and a custom `gpu.taintKey: dedicated`.
GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
DEDICATED = {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}


DGX = ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]


def stack_input(kind: str, attachment: str | None, **fabric_extra) -> dict:
    """prod-ib's cluster (DGX H100 nodes) on one row of the fabric-kind table, with what the row's columns ask of
    the stack file. The one place a kind's own stack keys are written for the table-wide tests (test_kinds,
    test_trainer): a kind with keys of its own is taught here, once."""
    row = kinds.KINDS[kind]
    p = stack_platform("prod-ib")
    fab: dict = {"kind": kind}
    if row.rails:
        fab["rails"] = [{"hca": h, "interface": f"ibp{i}s0", "subnet": f"10.{100 + i}.0.0/20", "speedGbps": 400} for i, h in enumerate(DGX)]
    if row.node_resource is not None:
        fab["efaDevicesPerNode"] = 32
    if attachment is not None:
        fab["attachment"] = attachment
    p["fabric"] = {**fab, **fabric_extra}
    if attachment is not None and kinds.ATTACHMENTS[attachment].host_network:
        p["fabric"].setdefault("podInterface", "bond0")
    if attachment is not None and kinds.ATTACHMENTS[attachment].claims:
        # DRA: resource.k8s.io/v1 (1.34), and no GPU caps on queues (DRA pods request no nvidia.com/gpu).
        p["kubernetesVersion"] = "1.34"
        p["scheduler"]["queues"] = [{k: v for k, v in q.items() if k != "gpus"} for q in p["scheduler"]["queues"]]
    if not row.rdma:
        p["gpu"]["gpuDirect"] = "none"
    if not row.rails:
        p["checkpoints"]["nfs"]["rdma"] = False  # NFS over RDMA rides the rails
    return p


def stack_raw(name: str) -> dict:
    """A committed stack file's `fastpath:*` keys (platform, jobs, acknowledge, existing), read as the program
    reads them (tools/render.py)."""
    from components.model import stack  # noqa: PLC0415
    from tools import render  # noqa: PLC0415

    config, _ = render.load_stack_config(name)
    raw = {k.split(":", 1)[1]: stack.decode(v) for k, v in config.items() if k.startswith("fastpath:")}
    raw.setdefault("jobs", [])
    assert raw["platform"] == stack_platform(name)  # the program's reading and the plain YAML agree
    return raw
