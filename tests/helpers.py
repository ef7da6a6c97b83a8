"""Plain helpers the component test files share: a committed stack's platform with changes, registrations by
type, and the taints several charts are told to tolerate."""

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


def regs(run, type_suffix):
    """A mock run's registrations whose type ends with `type_suffix` (":Release", ":Queue")."""
    return [r for r in run.registrations if r.type.endswith(type_suffix)]


# Tolerations of the GPU nodes' taint: the default `nvidia.com/gpu` and a custom `gpu.taintKey: dedicated`.
GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
DEDICATED = {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}
