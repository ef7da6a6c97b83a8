"""Multi-node NVLink (gpu.nvlinkDomain, prod-gb200): each job gets one ComputeDomain and its pods claim that domain's
IMEX channel, the whole job stays in one NVLink clique, NCCL requires MNNVL, and what cannot work is refused."""

from __future__ import annotations

import pytest

from components.fabric import dra
from components.jobs import checks
from components.model.config import PlatformConfig
from components.model.job import JobSpec
from components.model.profile import profile
from components.platform import dra as dra_platform
from tests.conftest import stack_platform
from tests.helpers import changed
from tools import lint

STACK = "prod-gb200"


@pytest.fixture
def objs(rendered) -> list[dict]:
    return rendered(STACK).objects


def workers(objs: list[dict]) -> dict[str, dict]:
    return {o["metadata"]["name"]: o["spec"]["pytorchReplicaSpecs"]["Worker"]["template"] for o in objs if o["kind"] == "PyTorchJob"}


def test_each_job_gets_its_own_compute_domain_and_claims_its_channel(objs):
    """One ComputeDomain per job, named after it, whose channel template (made by the domain's controller:
    kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1 cmd/compute-domain-controller/resourceclaimtemplate.go) is the one
    the job's pods claim, in the main container that runs NCCL; numNodes 0 (IMEX daemons with DNS names)."""
    domains = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ComputeDomain"}
    pods = workers(objs)
    assert set(domains) == set(pods)
    for name, pod in pods.items():
        template = domains[name]["spec"]["channel"]["resourceClaimTemplate"]["name"]
        assert domains[name]["spec"]["numNodes"] == 0
        assert domains[name]["metadata"]["namespace"] == "training"
        assert pod["spec"]["resourceClaims"] == [{"name": dra.IMEX_CLAIM, "resourceClaimTemplateName": template}]
        main = pod["spec"]["containers"][0]
        assert {"name": dra.IMEX_CLAIM} in main["resources"]["claims"]
        assert main["resources"]["limits"]["nvidia.com/gpu"] == 4  # the GPUs stay the device plugin's
        env = {e["name"]: e.get("value") for e in main["env"]}
        assert env["NCCL_MNNVL_ENABLE"] == "1" and env["NCCL_CUMEM_ENABLE"] == "1"


def place(pod: dict, nodes: dict[str, str], free: list[str], placed: dict[str, str]) -> str | None:
    """Where kube-scheduler may put the next pod of a job (InterPodAffinity, kubernetes/kubernetes
    pkg/scheduler/framework/plugins/interpodaffinity filtering.go): a required podAffinity term is met on a node
    whose topologyKey value equals that of a node holding a matching pod; when no pod matches anywhere and the pod
    matches its own term, any node with the key passes (the first pod of the job). `nodes`: node -> clique;
    `placed`: pod -> node of the job's pods so far. The anti-affinity term (one pod per node) is kept too."""
    terms = pod["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert [t["topologyKey"] for t in terms] == [dra.CLIQUE_LABEL]
    taken = set(placed.values())
    cliques = {nodes[n] for n in taken}
    for node in free:
        if node in taken:
            continue
        if not cliques or nodes[node] in cliques:
            return node
    return None


def test_a_job_stays_in_one_clique(objs):
    """16 trays on 2 racks of 18, the first rack with 10 free: once the gang's first pod is in rack A (Volcano picks
    its node by score, volcano-sh/volcano@v1.15.1 allocate.go prioritizeNodes), every later pod must follow it
    there; the pods that do not fit hold the whole gang back instead of spilling into rack B, where NCCL would reach
    them over the network. The gang waits, even though rack B has room (README: no retry of the other clique)."""
    pod = workers(objs)["llama-pretrain"]
    nodes = {f"a{i:02}": "cluster.0" for i in range(18)} | {f"b{i:02}": "cluster.1" for i in range(18)}
    free = [n for n in nodes if not (n.startswith("a") and int(n[1:]) >= 10)]  # rack A has 10 free trays
    placed: dict[str, str] = {}
    for i in range(16):
        node = place(pod, nodes, free, placed)
        if node is None:
            break
        placed[f"pod-{i}"] = node
    assert len(placed) == 10 and {nodes[n] for n in placed.values()} == {"cluster.0"}


def test_the_render_lints_clean_and_without_its_domain_the_pack_refuses_it(objs):
    """mnnvl-compute-domain: MNNVL required with no IMEX channel claim is what fails NCCL at init."""
    assert [v.rule for v in lint.lint(objs)] == []
    without = [o for o in objs if o["kind"] != "ComputeDomain"]
    for pod in workers(without).values():
        pod["spec"].pop("resourceClaims")
        for c in pod["spec"]["containers"]:
            c["resources"].pop("claims", None)
    assert "mnnvl-compute-domain" in {v.rule for v in lint.lint(without)}


def platform(**changes: object) -> PlatformConfig:
    return PlatformConfig.model_validate(changed(stack_platform(STACK), changes, "__"))


def test_the_gpu_dra_driver_runs_compute_domains_only():
    """The GPUs stay the device plugin's (upstream's own MNNVL demo: demo/specs/imex/nvbandwidth-test-job-1.yaml),
    so the chart's GPU plugin is off and its guard against the device plugin is never crossed."""
    values = dra_platform.gpu_driver_values(platform())
    assert values["resources"] == {"gpus": {"enabled": False}} and "gpuResourcesEnabledOverride" not in values
    assert dra_platform.objects(platform()) == []


REFUSED = [
    ({"gpu__nvlinkDomain__driverVersion": "570.124.06"}, ["570.158.01 or later"]),
    ({"kubernetesVersion": "1.33"}, ["resource.k8s.io/v1", "1.34"]),
    ({"acceptance": {"enabled": True}}, ["acceptance.enabled with gpu.nvlinkDomain"]),
    ({"fabric__attachment": "dra"}, ["share no PCIe root"]),
]


@pytest.mark.parametrize(("changes", "expect"), REFUSED)
def test_what_multi_node_nvlink_needs_is_refused_with_the_reason(changes, expect):
    with pytest.raises(ValueError) as err:
        platform(**changes)
    for piece in expect:
        assert piece in str(err.value), str(err.value)


def _job(**kw: object) -> JobSpec:
    return JobSpec.model_validate({"name": "j", "image": "nvcr.io/nvidia/pytorch:25.10-py3", "command": ["python", "t.py"], **kw})


@pytest.mark.parametrize(
    ("job", "key", "expect"),
    [({"nodes": 19}, "nodes", "more than one NVLink clique of 18"), ({"nodes": 2, "gpusPerNode": 2}, "gpusPerNode", "one ComputeDomain at a time")],
)
def test_a_job_that_cannot_use_the_nvlink_domain_is_refused(job, key, expect):
    found = dict(checks.problems(_job(**job), profile(platform())))
    assert expect in found.get(key, ""), found


FABRIC_OK = "GPU 00000009:01:00.0\n    Performance State : P0\n    Fabric\n        State : Completed\n        Status : Success\n        CliqueId : 1\n"
FABRIC_PENDING = FABRIC_OK.replace("State : Completed", "State : In Progress")


@pytest.mark.parametrize(
    ("channel", "smi", "code", "says"),
    [
        (True, FABRIC_OK, 0, ""),
        (False, FABRIC_OK, 3, "no IMEX channel"),
        (True, FABRIC_PENDING, 3, "fabric registration is not complete"),
    ],
)
def test_the_pod_checks_its_imex_channel_and_fabric_before_nccl(objs, tmp_path, channel, smi, code, says):
    """The first step of every multi-node NVLink pod (components/jobs/imex_check.sh): without the channel its
    ComputeDomain claim injects, or with a GPU whose fabric registration is not complete, it exits 3 (the
    preflight's code) instead of NCCL failing or hanging at init."""
    import os
    import subprocess

    main = workers(objs)["moe-sft"]["spec"]["containers"][0]
    assert main["command"][:4] == ["sh", "-c", main["command"][2], "fastpath-imex"]
    dev = tmp_path / "dev"
    (dev / "nvidia-caps-imex-channels").mkdir(parents=True)
    if channel:
        (dev / "nvidia-caps-imex-channels" / "channel0").touch()
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "nvidia-smi").write_text(f"#!/bin/sh\ncat <<'END'\n{smi}END\n")
    (bin_ / "nvidia-smi").chmod(0o755)
    env = {**os.environ, "FASTPATH_DEV": str(dev), "PATH": f"{bin_}:{os.environ['PATH']}"}
    done = subprocess.run(["sh", "-c", main["command"][2], "fastpath-imex", "true"], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == code and says in done.stderr, done.stderr
