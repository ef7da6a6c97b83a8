"""The `dra` attachment (prod-dra): what the rendered claims get from the Kubernetes 1.34 DRA allocator (restated in
tests/dra_allocator_v134.py) on an HGX H200's PCIe layout (tests/dra_slices.py), what NCCL_IB_HCA becomes in the pod
(components/jobs/dra_hca.sh run against a sysfs built from that allocation), and what the stack refuses."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from components.fabric import dra
from components.jobs import checks
from components.jobs.launch import DRA_HCA
from components.model.config import PlatformConfig
from components.model.job import JobSpec
from components.model.profile import profile
from components.platform import dra as dra_platform
from components.platform import gpu_operator, volcano
from tests import dra_allocator_v134 as alloc
from tests import dra_slices as hw
from tests.conftest import stack_platform
from tests.helpers import changed

STACK = "prod-dra"
NODE = "h200-01"


@pytest.fixture
def objs(rendered) -> list[dict]:
    return rendered(STACK).objects


def template(objs: list[dict], name: str) -> dict:
    return next(o for o in objs if o["kind"] == "ResourceClaimTemplate" and o["metadata"]["name"] == name)


def classes(objs: list[dict]) -> list[dict]:
    """The GPU class as NVIDIA's chart renders it, and the rail class as fastpath renders it."""
    return [hw.GPU_CLASS, next(o for o in objs if o["kind"] == "DeviceClass")]


def run(objs: list[dict], name: str, held: set[str] = frozenset()) -> list[dict] | None:
    """The allocation of job `name`'s claim on a fresh HGX H200 node, with `held` devices already taken."""
    slices = hw.hgx_h200(NODE)
    taken = {(s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"]) for s in slices for d in s["spec"]["devices"] if d["name"] in held}
    return alloc.allocate(template(objs, name)["spec"]["spec"], classes(objs), slices, NODE, taken)


def devices(result: list[dict], driver: str) -> list[str]:
    return [r["device"] for r in result if r["driver"] == driver]


def test_a_half_node_pod_gets_each_gpu_with_the_nic_on_its_pcie_root(objs):
    """sft-half-node: 4 GPUs, each paired with a rail NIC by a pcieRoot constraint naming the pair; with GPUs 0-3
    held by another pod it takes the other half. Storage NICs (roots without a GPU) are never chosen."""
    for held, gpus in ((set(), ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]), ({"gpu-0", "gpu-1", "gpu-2", "gpu-3"}, ["gpu-4", "gpu-5", "gpu-6", "gpu-7"])):
        got = run(objs, "sft-half-node-fabric", held)
        assert got is not None
        assert sorted(devices(got, hw.GPU_DRIVER)) == gpus
        assert sorted(devices(got, hw.NIC_DRIVER)) == sorted(hw.NIC_OF_GPU[g] for g in gpus)


def test_a_whole_node_pod_gets_every_gpu_and_every_rail_and_no_storage_nic(objs):
    got = run(objs, "llama-pretrain-fabric")
    assert got is not None
    assert len(devices(got, hw.GPU_DRIVER)) == 8
    assert sorted(devices(got, hw.NIC_DRIVER)) == sorted(hw.COMPUTE_NICS)
    assert not set(devices(got, hw.NIC_DRIVER)) & set(hw.STORAGE_NICS)


def test_a_claim_that_cannot_be_aligned_does_not_fit(objs):
    """Free GPUs 1-3 and 5-7, but the NICs of 1, 5 and 6 taken (by pods of another shape): three GPUs still have their
    own NIC, the fourth would be across the PCIe fabric, so the half-node pod does not fit this node."""
    held = {"gpu-0", "gpu-4", hw.NIC_OF_GPU["gpu-1"], hw.NIC_OF_GPU["gpu-5"], hw.NIC_OF_GPU["gpu-6"]}
    assert run(objs, "sft-half-node-fabric", held) is None


def sysfs(tmp: Path, result: list[dict]) -> Path:
    """/sys as the pod sees it after dranet moved the allocated NICs in: each netdev's device under its PCIe root
    with its infiniband/<hca>, and each GPU's PCI device; and an nvidia-smi printing the allocated GPUs."""
    slices = {d["name"]: d for s in hw.hgx_h200(NODE) for d in s["spec"]["devices"]}
    sys = tmp / "sys"
    bus_ids = []
    for r in result:
        attrs = slices[r["device"]]["attributes"]
        root = attrs[hw.PCIE_ROOT]["string"]
        if r["driver"] == hw.NIC_DRIVER:
            pci = attrs["dra.net/pciAddress"]["string"]
            dev = sys / "devices" / root / pci
            (dev / "infiniband" / hw.HCA_OF[r["device"]]).mkdir(parents=True)
            (sys / "class" / "net" / attrs["dra.net/ifName"]["string"]).mkdir(parents=True)
            (sys / "class" / "net" / attrs["dra.net/ifName"]["string"] / "device").symlink_to(dev)
        else:
            bus = attrs[hw.PCI_BUS_ID]["string"]
            (sys / "devices" / root / bus).mkdir(parents=True)
            (sys / "bus" / "pci" / "devices").mkdir(parents=True, exist_ok=True)
            (sys / "bus" / "pci" / "devices" / bus).symlink_to(sys / "devices" / root / bus)
            bus_ids.append("0000" + bus.upper())
    smi = tmp / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\n" + "".join(f"echo {b}\n" for b in bus_ids))
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    return sys


def hca_env(tmp: Path, sys: Path, nics: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "FASTPATH_SYS": str(sys), "FASTPATH_CLAIM_NICS": str(nics), "PATH": f"{tmp / 'bin'}:{os.environ['PATH']}"}
    return subprocess.run(["sh", "-c", DRA_HCA, "fastpath-hca", "sh", "-c", 'echo "$NCCL_IB_HCA"'], env=env, capture_output=True, text=True, check=False)


def test_nccl_ib_hca_names_exactly_the_claimed_nics(objs, tmp_path):
    """The half-node pod's NCCL_IB_HCA, set at start from the netdevs dranet moved in, is the HCAs of the NICs the
    allocator paired with its GPUs, and nothing else."""
    got = run(objs, "sft-half-node-fabric", {"gpu-0", "gpu-1", "gpu-2", "gpu-3"})
    assert got is not None
    done = hca_env(tmp_path, sysfs(tmp_path, got), 4)
    assert done.returncode == 0, done.stderr
    want = sorted(hw.HCA_OF[d] for d in devices(got, hw.NIC_DRIVER))
    assert done.stdout.strip().startswith("=") and sorted(done.stdout.strip()[1:].split(",")) == want


def test_a_gpu_without_a_nic_on_its_root_stops_the_pod(objs, tmp_path):
    """What the claim promised, checked in the pod: a NIC of another root (a claim written without the pair
    constraint) exits 3, the preflight's code, before NCCL starts."""
    got = run(objs, "sft-half-node-fabric")
    assert got is not None
    wrong = [r for r in got if r["driver"] == hw.GPU_DRIVER] + [{"driver": hw.NIC_DRIVER, "device": hw.NIC_OF_GPU[g]} for g in ("gpu-4", "gpu-5", "gpu-6", "gpu-7")]
    done = hca_env(tmp_path, sysfs(tmp_path, wrong), 4)
    assert done.returncode == 3 and "has no NIC of this pod on its root" in done.stderr


def test_the_pods_claim_instead_of_counting(objs):
    """No nvidia.com/gpu and no rail resource: the claim's devices reach the containers that name it."""
    for job in (o for o in objs if o["kind"] == "PyTorchJob"):
        spec = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
        assert spec["resourceClaims"] == [{"name": dra.CLAIM, "resourceClaimTemplateName": f"{job['metadata']['name']}-fabric"}]
        for c in (*spec["containers"], *spec.get("initContainers", [])):
            if c["name"] == "nccl-metrics":
                continue
            assert "nvidia.com/gpu" not in c["resources"]["limits"] and c["resources"]["claims"] == [{"name": dra.CLAIM}]
        env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
        whole = job["metadata"]["name"] == "llama-pretrain"
        # A whole node's HCAs are every rail's, known before; half a node's only once allocated (dra_hca.sh).
        assert ("NCCL_IB_HCA" in env) == whole


def platform(**changes: object) -> PlatformConfig:
    return PlatformConfig.model_validate(changed(stack_platform(STACK), changes, "__"))


def test_the_platform_runs_no_device_plugin_and_the_drivers_on_the_gpu_nodes():
    p = platform()
    assert gpu_operator.values(p)["devicePlugin"] == {"enabled": False}
    gpu = dra_platform.gpu_driver_values(p)
    assert gpu["gpuResourcesEnabledOverride"] is True and gpu["resources"]["computeDomains"] == {"enabled": False}
    assert gpu["resourceApiVersion"] == "resource.k8s.io/v1"
    # Volcano runs Kubernetes' DRA plugin by the cluster's gates (on at 1.34): the predicates plugin takes no DRA
    # argument, whose old name volcano-sh/volcano@v1.15.1 no longer reads (it would look like it does something).
    conf = yaml.safe_load(volcano.values(p)["custom"]["scheduler_config_override"])
    predicates = next(x for x in conf["tiers"][1]["plugins"] if x["name"] == "predicates")
    assert "arguments" not in predicates


REFUSED = [
    ({"kubernetesVersion": "1.33"}, ["resource.k8s.io/v1", "1.34"]),
    ({"kubernetesVersion": None}, ["not set"]),
    ({"fabric__rails": lambda r: r[:4]}, ["one rail per GPU (8), not 4"]),
    ({"scheduler__name": "kueue"}, ["Kueue v0.19.2", "kueue#10548"]),
    ({"scheduler__queues": [{"name": "production", "gpus": 64}]}, ["cap nvidia.com/gpu", "remove gpus"]),
]


@pytest.mark.parametrize(("changes", "expect"), REFUSED)
def test_what_dra_needs_is_refused_with_the_reason(changes, expect):
    raw = stack_platform(STACK)
    resolved = {k: (v(raw["fabric"]["rails"]) if callable(v) else v) for k, v in changes.items()}
    if resolved.get("kubernetesVersion", 1) is None:
        raw.pop("kubernetesVersion")
        resolved.pop("kubernetesVersion")
    with pytest.raises(ValueError) as err:
        PlatformConfig.model_validate(changed(raw, resolved, "__"))
    for piece in expect:
        assert piece in str(err.value), str(err.value)


def _job(**kw: object) -> JobSpec:
    return JobSpec.model_validate({"name": "j", "image": "nvcr.io/nvidia/pytorch:25.10-py3", "command": ["python", "t.py"], "nodes": 2, "gpusPerNode": 4, **kw})


@pytest.mark.parametrize(("job", "expect"), [({"framework": "mpi"}, "does not yet read the NICs"), ({"framework": "tensorflow"}, "does not yet read the NICs")])
def test_a_half_node_job_that_cannot_read_its_nics_is_refused(job, expect):
    found = dict(checks.problems(_job(**job), profile(platform())))
    assert expect in found.get("gpusPerNode", ""), found


def test_a_half_node_trainjob_is_refused_for_the_claims_trainer_would_drop():
    p = platform(jobApi="both")
    found = dict(checks.problems(_job(api="v2"), profile(p)))
    assert "drops the node container's resource claims" in found.get("gpusPerNode", ""), found


def test_the_render_validates_at_the_stacks_kubernetes_version_and_not_before(objs):
    """Strict at 1.34, the stack's kubernetesVersion; at 1.33 resource.k8s.io/v1 does not exist (why config refuses
    `dra` below 1.34)."""
    import kubernetes_validate

    from tests.conftest import schema_problems_at

    claims = [o for o in objs if o["apiVersion"] == dra.API]
    assert claims
    for o in claims:
        kubernetes_validate.validate(o, "1.34.0", strict=True)
        with pytest.raises(kubernetes_validate.SchemaNotFoundError):
            kubernetes_validate.validate(o, "1.33.0", strict=True)
    assert [p for o in objs for p in schema_problems_at(o, "1.34.0")] == []  # the rest, CRDs included


def test_a_claimed_rail_names_no_device_plugin_resource(rendered):
    """A `dra` rail is claimed through its DeviceClass; no device plugin counts it, so the profile and the summary
    name no resource a pod could request (what they once showed, `/_rail0`, exists nowhere)."""
    summary = rendered("prod-dra").files["SUMMARY.md"]
    rows = [line for line in summary.splitlines() if line.startswith("| rail")][1:]
    assert rows and all("| DRA claim |" in row for row in rows) and "/_rail" not in summary
