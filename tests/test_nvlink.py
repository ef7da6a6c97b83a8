"""Multi-node NVLink (gpu.nvlinkDomain, prod-gb200): each job gets one ComputeDomain and its pods claim that domain's
IMEX channel, the whole job stays in one NVLink clique, NCCL requires MNNVL, and what cannot work is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.fabric import dra
from components.jobs import acceptance, checks, component
from components.jobs.runtime_v2 import build, controller
from components.model.config import PlatformConfig
from components.model.job import JobSpec
from components.model.profile import profile
from components.platform import dra as dra_platform
from tests.conftest import stack_platform
from tests.helpers import changed
from tools import lint
from tools.ncclcheck.judge import judge
from tools.ncclcheck.parse import parse_text

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
    jobs = {o["metadata"]["name"] for o in objs if o["kind"] in ("PyTorchJob", "MPIJob", "TrainJob")}
    assert set(domains) == jobs and set(pods) <= jobs
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


def place(pod: dict, nodes: dict[str, str], free: list[str], placed: dict[str, str], labels: dict[str, str] | None = None) -> str | None:
    """Where kube-scheduler may put the next pod of a job (InterPodAffinity, kubernetes/kubernetes
    pkg/scheduler/framework/plugins/interpodaffinity filtering.go): a required podAffinity term is met on a node
    whose topologyKey value equals that of a node holding a pod the term selects; when no pod matches anywhere and
    the pod matches its own term, any node with the key passes (the first pod of the job); otherwise none does.
    Every pod of the job carries `labels` (the template's own, plus what the controllers add, e.g. JobSet's name);
    matchLabelKeys take their values from them (merged into the selector at creation). `nodes`: node -> clique;
    `placed`: pod -> node of the job's pods so far. The anti-affinity term (one pod per node) is kept too."""
    labels = {**pod["metadata"].get("labels", {}), **(labels or {})}
    terms = pod["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert [t["topologyKey"] for t in terms] == [dra.CLIQUE_LABEL]
    (term,) = terms
    selector = {**term["labelSelector"]["matchLabels"], **{k: labels.get(k) for k in term.get("matchLabelKeys", [])}}
    selects_the_job = selector.items() <= labels.items()  # the job's pods are all alike
    taken = set(placed.values())
    cliques = {nodes[n] for n in taken} if selects_the_job else set()
    if not cliques and not selects_the_job:
        return None  # no pod matches and the pod does not match its own term: unschedulable everywhere
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
    import copy

    without = [copy.deepcopy(o) for o in objs if o["kind"] != "ComputeDomain"]  # the render is shared by the tests
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
    ({"gpu__nvlinkDomain__hostImexService": "running"}, ["systemctl mask nvidia-imex.service", "hostImexService: masked"]),
    ({"acceptance__nodes": 19}, ["acceptance runs 19 nodes, more than one NVLink clique of 18"]),
    ({"kubernetesVersion": "1.33"}, ["resource.k8s.io/v1", "1.34"]),
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


# nvidia-smi -q's Fabric section per GPU (two GPUs; the section ends where the indentation returns).
FABRIC_OK = "".join(
    f"GPU 00000009:0{i}:00.0\n    Performance State : P0\n    Fabric\n        State : Completed\n        Status : Success\n"
    "        CliqueId : 1\n        ClusterUUID : 9b1f0c2e-4a7d-3e55-81c0-d6f2a9e3b147\n        Health\n"
    "            Bandwidth : Full\n    Processes : None\n    Conf Compute\n        Status : Off\n"
    for i in (1, 2)
)
FABRIC_PENDING = FABRIC_OK.replace("State : Completed", "State : In Progress", 1)
FABRIC_FAILED = FABRIC_OK.replace("Status : Success", "Status : Failure", 1)
FABRIC_NO_CLUSTER = FABRIC_OK.replace("9b1f0c2e-4a7d-3e55-81c0-d6f2a9e3b147", "00000000-0000-0000-0000-000000000000")
FABRIC_NA = FABRIC_OK.replace("9b1f0c2e-4a7d-3e55-81c0-d6f2a9e3b147", "N/A")


@pytest.mark.parametrize(
    ("channel", "smi", "code", "says"),
    [
        (True, FABRIC_OK, 0, ""),
        (False, FABRIC_OK, 3, "no IMEX channel"),
        (True, FABRIC_PENDING, 3, "state In Progress"),
        (True, FABRIC_FAILED, 3, "status Failure"),
        (True, FABRIC_NO_CLUSTER, 3, "cluster UUID 00000000"),
        (True, FABRIC_NA, 3, "cluster UUID N/A"),  # not in a fabric: N/A holds a hex digit, A
    ],
)
def test_the_pod_checks_its_imex_channel_and_fabric_before_nccl(objs, tmp_path, channel, smi, code, says):
    """The first step of every multi-node NVLink pod (components/jobs/imex_check.sh): without the channel its
    ComputeDomain claim injects, or with a GPU whose fabric registration is not complete, it exits 3 (the
    preflight's code) instead of NCCL failing or hanging at init."""
    import os
    import subprocess

    main = workers(objs)["llama-pretrain"]["spec"]["containers"][0]
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


def own_runtime_pod(objs: list[dict], name: str) -> tuple[dict, dict, dict]:
    """A TrainJob, the runtime it names, and its node pod as kubeflow/trainer@v2.3.0 and JobSet make it."""
    job = next(o for o in objs if o["kind"] == "TrainJob" and o["metadata"]["name"] == name)
    ref = job["spec"]["runtimeRef"]
    rt = next(o for o in objs if o["kind"] == ref["kind"] and o["metadata"]["name"] == ref["name"])
    return job, rt, controller.effective_pod(job, rt)


def test_a_trainjob_gets_its_own_runtime_which_claims_its_compute_domain(objs):
    """Trainer v2.3.0 lets a TrainJob add no claim (no resourceClaimsPerNode, KEP-2782; a runtime patch takes none),
    and a cluster-wide runtime names one template for every job. So each TrainJob names a TrainingRuntime of its own
    in its namespace (kubeflow/trainer@v2.3.0:pkg/runtime/core/trainingruntime.go reads runtimeRef kind
    TrainingRuntime there; kubernetes-sigs/kueue@v0.19.2:pkg/controller/jobs/trainjob/trainjob_controller.go
    getRuntimeSpec too), whose pods, as the controller makes them, claim the channel of the job's ComputeDomain in
    every container, check it first, require MNNVL and stay in one clique."""
    job, rt, pod = own_runtime_pod(objs, "moe-sft")
    assert (rt["kind"], rt["metadata"]["namespace"]) == ("TrainingRuntime", job["metadata"]["namespace"])
    domain = next(o for o in objs if o["kind"] == "ComputeDomain" and o["metadata"]["name"] == "moe-sft")
    template = domain["spec"]["channel"]["resourceClaimTemplate"]["name"]
    assert pod["spec"]["resourceClaims"] == [{"name": dra.IMEX_CLAIM, "resourceClaimTemplateName": template}]
    containers = pod["spec"]["initContainers"] + pod["spec"]["containers"]
    assert pod["spec"]["initContainers"][0]["name"] == build.IMEX
    assert all({"name": dra.IMEX_CLAIM} in c["resources"]["claims"] for c in containers if c["name"] != "nccl-metrics")
    node = next(c for c in pod["spec"]["containers"] if c["name"] == controller.NODE)
    env = {e["name"]: e.get("value") for e in node["env"]}
    assert env["NCCL_MNNVL_ENABLE"] == "1" and env["NCCL_CUMEM_ENABLE"] == "1"
    # 4 pods on 2 racks, rack A with 2 free trays: the gang does not spill into rack B.
    nodes = {f"a{i:02}": "cluster.0" for i in range(18)} | {f"b{i:02}": "cluster.1" for i in range(18)}
    free = ["a00", "a01", *(n for n in nodes if n.startswith("b"))]
    placed: dict[str, str] = {}
    jobset = {build.JOBSET_NAME_LABEL: job["metadata"]["name"]}  # what JobSet labels every pod with
    for i in range(job["spec"]["trainer"]["numNodes"]):
        if (node_name := place(pod, nodes, free, placed, jobset)) is None:
            break
        placed[f"pod-{i}"] = node_name
    assert sorted(placed.values()) == ["a00", "a01"]


def test_a_failed_imex_check_fails_the_run_instead_of_restarting_it(objs):
    """The imex init container's exit 3 fails its Job (kubernetes/kubernetes pkg/controller/job/pod_failure_policy.go:
    init containers' exit codes count) with a message the JobSet's FailJobSet rule matches, unanchored as
    kubernetes-sigs/jobset@v0.12.0:pkg/controllers/failure_policy.go anyMatchFound does: a node without its channel
    would fail every restart the same way."""
    import re

    _, rt, _ = own_runtime_pod(objs, "moe-sft")
    template = rt["spec"]["template"]["spec"]
    rjob = template["replicatedJobs"][0]["template"]["spec"]
    first = rjob["podFailurePolicy"]["rules"][0]
    assert first == {"action": "FailJob", "onExitCodes": {"containerName": build.IMEX, "operator": "In", "values": [3]}}
    message = f"Container {build.IMEX} for pod training/moe-sft-node-0-0-x failed with exit code 3 matching FailJob rule at index 0"
    fail_set = [r for r in template["failurePolicy"]["rules"] if r["action"] == "FailJobSet"]
    assert any(re.search(p, message) for r in fail_set for p in r["onJobFailureMessagePatterns"])


def test_cluster_runtimes_there_run_on_the_network_without_a_domain(objs):
    """What a hand-written TrainJob names: no channel to claim, so NCCL is told MNNVL off (NCCL's automatic mode
    would fail init on an NVL72 tray without the channel: NVIDIA/nccl@v2.30.7-1 src/mnnvl.cc ncclMnnvlCheck) and
    the pack has nothing to refuse."""
    for rt in (o for o in objs if o["kind"] == "ClusterTrainingRuntime"):
        for rjob in rt["spec"]["template"]["spec"]["replicatedJobs"]:
            pod = rjob["template"]["spec"]["template"]["spec"]
            node = next(c for c in pod["containers"] if c["name"] == controller.NODE)
            assert {"name": "NCCL_MNNVL_ENABLE", "value": "0"} in node["env"] and "resourceClaims" not in pod


def _acceptance_plan(**changes: object) -> tuple[dict, list[dict], object]:
    p = platform(**changes)
    prof = profile(p)
    manifest, runs = acceptance.plan(p.acceptance, prof)
    return manifest, runs, acceptance.resolved(p.acceptance, prof)


def _series(manifest: dict) -> str:
    if manifest["kind"] == "TrainJob":
        return manifest["spec"]["trainer"]["command"][2]
    return manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"][-1]


def test_the_acceptance_measures_each_size_over_the_network_and_over_nvlink():
    """Each multi-node size runs twice on the same trays: MNNVL off (set where mpirun forwards it from), judged by
    the rails' floors, then MNNVL required, judged as mnnvl by the NVLink domain's floor."""
    manifest, runs, _ = _acceptance_plan()
    lines = _series(manifest).splitlines()
    for n in (2, 4):
        net = lines.index(f"echo 'fastpath-acceptance: begin {n} nodes'")
        nvl = lines.index(f"echo 'fastpath-acceptance: begin {n} nodes over nvlink'")
        assert net < nvl and lines[net + 1].startswith("NCCL_MNNVL_ENABLE=0 mpirun ")
        assert lines[nvl + 1].startswith("mpirun ") and "-x NCCL_MNNVL_ENABLE " in lines[nvl + 1]
    assert lines[1].startswith("NCCL_MNNVL_ENABLE=0 sh -c ")  # the per-rail pairwise stage: the rails, not NVLink
    by = {(r["nodes"], r["expect"]): r for r in runs}
    assert set(by) == {(1, "local"), (2, "ib"), (4, "ib"), (2, "mnnvl"), (4, "mnnvl")}
    assert (by[(1, "local")]["minBusbwGbps"], by[(2, "ib")]["minBusbwGbps"], by[(2, "mnnvl")]["minBusbwGbps"]) == (600, 150, 720)


def test_the_acceptance_checks_tell_the_nvlink_run_from_the_network_run(tmp_path):
    """The two-tray checks, run on a launcher log with fastpath's own NVL72 logs in each section: both pass; with the
    sections swapped (NVLink where the network was to be measured), both fail."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    _, runs, _ = _acceptance_plan()
    logs = ROOT / "tests" / "ncclcheck"
    net, nvl = (logs / "mnnvl_off_network.log").read_text(), (logs / "expect" / "mnnvl.log").read_text()

    def verdicts(network: str, nvlink: str) -> list[int]:
        log = tmp_path / "nccl-acceptance.log"
        log.write_text(
            "fastpath-acceptance: begin 2 nodes\n" + network + "fastpath-acceptance: end 2 nodes\n"
            "fastpath-acceptance: begin 2 nodes over nvlink\n" + nvlink + "fastpath-acceptance: end 2 nodes over nvlink\n"
        )
        out = []
        for run in (r for r in runs if r["nodes"] == 2):
            args = run["check"].split()
            args[0], args[3] = sys.executable, str(log)
            out.append(subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=False, timeout=60).returncode)
        return out

    assert verdicts(net, nvl) == [0, 0]
    assert verdicts(nvl, net) == [1, 1]


def test_a_v2_acceptance_gets_its_own_runtime_without_restarts():
    """On a v2-only NVL72 cluster the acceptance is a TrainJob; like the training TrainJobs it names its own
    TrainingRuntime (its domain's channel), and like ACCEPTANCE_RUNTIME it never restarts a failed size."""
    manifest, _, r = _acceptance_plan(jobApi="v2")
    assert manifest["spec"]["runtimeRef"]["kind"] == "TrainingRuntime"
    made = component.prerequisites(r, max_restarts=0)
    assert [o["kind"] for o, _ in made] == ["ComputeDomain", "TrainingRuntime"]
    rt = made[1][0]
    assert rt["metadata"]["name"] == manifest["spec"]["runtimeRef"]["name"]
    assert rt["spec"]["template"]["spec"]["failurePolicy"]["maxRestarts"] == 0


def test_a_clique_term_that_selects_no_pod_of_the_job_places_nothing(objs):
    """The model above fails a selector the job's pods do not carry (kube-scheduler would find no node at all)."""
    import copy

    pod = copy.deepcopy(workers(objs)["llama-pretrain"])  # the render is shared by the tests
    pod["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["labelSelector"] = {"matchLabels": {"fastpath.dev/job": "another"}}
    assert place(pod, {"a00": "cluster.0"}, ["a00"], {}) is None


def test_each_nvl72_jobs_contract_names_the_transport_ncclcheck_finds_in_a_healthy_run(rendered):
    """A job with its IMEX channel requires MNNVL (NCCL_MNNVL_ENABLE=1): its contract's transport is what
    `tools.ncclcheck --expect` must pass on a healthy run of it (every connection P2P/MNNVL), not the network's."""
    contracts = rendered("prod-gb200").run.outputs["jobs"]
    assert contracts and {c["transport"] for c in contracts.values()} == {"mnnvl"}
    healthy = parse_text((Path(__file__).parent / "ncclcheck" / "expect" / "mnnvl.log").read_text())
    assert judge(healthy, "mnnvl", None, None, False).verdict == "pass"
    assert judge(healthy, rendered("prod-gb200").run.outputs["profile"]["transport"], None, None, False).verdict == "fail"
