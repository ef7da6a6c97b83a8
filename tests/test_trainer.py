"""Kubeflow Trainer v2 on fastpath: the stack choice, the chart pins, the runtimes a cluster publishes and the
TrainJobs its jobs become, judged by the pod the kubeflow/trainer@v2.3.0 controller makes of the two."""

import json
import shlex
import subprocess

import pytest
import yaml

from components import k8s, versions
from components.fabric import kinds
from components.fabric.wiring import NETWORKS_ANNOTATION
from components.jobs import trainjob
from components.jobs.component import manifest
from components.jobs.contract import contract
from components.jobs.launch import MPI_FAILURE_GRACE, MPI_LAUNCH
from components.jobs.resolve import resolve
from components.jobs.runtime_v2 import build
from components.jobs.runtime_v2.controller import effective_jobset, effective_pod
from components.jobs.runtime_v2.judge import override_problems
from components.model import config, stack
from components.model.config import PlatformConfig
from components.model.job import JobSpec
from components.model.profile import profile as make_profile
from components.platform import trainer
from tests.conftest import schema_problems, stack_platform
from tests.helpers import DROP, changed, init_checks, stack_input
from tests.posix_sh import DASH, needs_dash
from tools import upstream

V2 = "prod-v2"
MPI_IMAGE = "registry.prod-v2.internal/fastpath/nccl-tests-sshd:25.10-2.28.7"
DELETE = DROP


def platform(stack_name=V2, **changes) -> dict:
    """A committed stack's platform with `a.b=value` changes (DELETE removes the key)."""
    return changed(stack_platform(stack_name), changes)


def prof(p: dict):
    return make_profile(PlatformConfig.model_validate(p))


# ------------------------------------------------------------------------------------------- stack config

# (stack, changes, substrings of the one message)
BAD = [
    (V2, {"components": {"trainingOperator": True}}, ["fastpath:platform", "components.trainingOperator is on but jobApi is 'v2'", "use jobApi 'both'"]),
    (V2, {"jobApi": "both", "components": {"trainingOperator": False}}, ["jobApi 'both'", "components.trainingOperator is false"]),
    ("prod-ib", {"trainer": {"maxRestarts": 2}}, ["trainer configures Kubeflow Trainer v2", "jobApi 'v1'", "set jobApi 'v2' or 'both', or remove trainer"]),
    (V2, {"jobApi": "v3"}, ["fastpath:platform.jobApi", "'v1', 'v2' or 'both'"]),
    (V2, {"trainer.mpiImage": DELETE}, ["acceptance.enabled on jobApi 'v2'", "trainer.mpiImage"]),
    (V2, {"trainer.mpiImage": "nccl-tests:latest"}, ["trainer.mpiImage", "latest"]),
    (V2, {"trainer.maxRestarts": -1}, ["fastpath:platform.trainer.maxRestarts", "greater than or equal to 0"]),
    (V2, {"trainer.maxRetries": 3}, ["fastpath:platform.trainer.maxRetries", "unknown key"]),
    (V2, {"acceptance.image": "nvcr.io/nvidia/hpc-benchmarks:25.04"}, ["acceptance.image", "trainer.mpiImage", "remove acceptance.image"]),
]


@pytest.mark.parametrize(("stack_name", "changes", "expect"), BAD, ids=[f"{b[0]}:{sorted(b[1])[0]}:{i}" for i, b in enumerate(BAD)])
def test_bad_job_api_config_is_refused_with_key_path_and_fix(stack_name, changes, expect):
    with pytest.raises(config.ConfigError) as err:
        stack.parse({"platform": platform(stack_name, **changes)}, f"stacks/Pulumi.{stack_name}.yaml")
    message = str(err.value)
    assert message.startswith(f"stacks/Pulumi.{stack_name}.yaml: fastpath:platform"), message
    assert len(message.splitlines()) == 1, message
    for piece in expect:
        assert piece in message, f"{piece!r} not in {message!r}"


# (jobApi, components.trainingOperator as written, operator installed, APIs served)
APIS = [("v1", None, True, ("v1",)), ("v2", None, False, ("v2",)), ("both", None, True, ("v1", "v2")), ("v2", False, False, ("v2",)), ("v1", False, False, ("v1",))]


@pytest.mark.parametrize(("api", "flag", "operator", "served"), APIS)
def test_job_api_decides_the_training_operator_and_what_jobs_get(api, flag, operator, served):
    p = platform(jobApi=api, acceptance={"enabled": False})
    if flag is not None:
        p["components"] = {"trainingOperator": flag}
    if api == "v1":
        p.pop("trainer")
    cfg = PlatformConfig.model_validate(p)
    assert cfg.training_operator_enabled is operator
    assert make_profile(cfg).job_apis == served


# (job api on the stack, job changes, key, substring) refused; GOOD_JOB is accepted as is.
GOOD_JOB = {"name": "run", "image": "nvcr.io/nvidia/pytorch:25.10-py3", "command": ["python", "train.py"], "nodes": 2}
JOB_BAD = [
    ("v2", {"api": "v2"}, "api", "serves only v2"),
    ("v1", {"api": "v2"}, "api", "serves only v1"),
    ("v2", {"framework": "tensorflow"}, "framework", "no TensorFlow runtime"),
    ("both", {"api": "v2", "framework": "tensorflow"}, "framework", "or api v1 on a jobApi 'both' cluster"),
    ("v2", {"nodes": None, "elastic": {"minNodes": 1, "maxNodes": 2}}, "elastic", "no elastic PyTorch"),
    ("v2", {"gpusPerNode": 4}, "gpusPerNode", "whole nodes"),
    ("v2", {"shmGiB": 64}, "shmGiB", "/dev/shm is the runtime's"),
    ("v2", {"maxRestarts": 1}, "maxRestarts", "fastpath:platform.trainer.maxRestarts"),
    ("v2", {"ttlSecondsAfterFinished": 60}, "ttlSecondsAfterFinished", "would rerun days later"),
    ("v2", {"preflight": False}, "preflight", "init container"),
    ("v2", {"framework": "mpi"}, "image", f"set image to {MPI_IMAGE}"),
    ("v2", {"framework": "mpi", "image": MPI_IMAGE, "nodes": 1}, "nodes", "second GPU pod"),
    ("v2", {"memoryGiB": 100}, "memoryGiB", "not above the runtime's /dev/shm of 128 GiB"),
]


@pytest.mark.parametrize(("api", "change", "key", "needle"), JOB_BAD, ids=[f"{b[0]}:{b[2]}" for b in JOB_BAD])
def test_v2_job_asking_what_a_train_job_cannot_have_is_refused(api, change, key, needle):
    p = platform(jobApi=api)
    if api == "v1":
        p.pop("trainer")
        p["acceptance"]["enabled"] = False
    job = {k: v for k, v in {**GOOD_JOB, **change}.items() if v is not None}
    with pytest.raises(config.ConfigError) as err:
        stack.parse({"platform": p, "jobs": [job]}, "stacks/Pulumi.x.yaml")
    assert f"fastpath:jobs[0].{key}: " in str(err.value) and needle in str(err.value), str(err.value)
    stack.parse({"platform": p, "jobs": [GOOD_JOB]}, "stacks/Pulumi.x.yaml")


def test_no_mpi_runtime_without_its_image():
    p = platform(acceptance={"enabled": False})
    p["trainer"].pop("mpiImage")
    assert [name for name, _, _ in prof(p).runtimes()] == [
        "fastpath-torch-critical",
        "fastpath-torch",
        "fastpath-torch-preemptible",
        "fastpath-plain-critical",
        "fastpath-plain",
        "fastpath-plain-preemptible",
    ]
    with pytest.raises(config.ConfigError, match=r"jobs\[0\].framework: this cluster publishes no MPI runtime"):
        stack.parse({"platform": p, "jobs": [{**GOOD_JOB, "framework": "mpi"}]}, "stacks/Pulumi.x.yaml")


# ------------------------------------------------------------------------------------------- the chart


def trainer_values() -> dict:
    return yaml.safe_load(upstream.path("values/kubeflow-trainer.values.yaml").read_text())


# kubernetes-sigs/jobset@v0.12.0:charts/jobset/values.yaml (the subchart's in-repo defaults; not beside the
# checkout): a staging image, pulled Always.
JOBSET_IN_REPO_IMAGE = {"repository": "us-central1-docker.pkg.dev/k8s-staging-images/jobset/jobset", "pullPolicy": "Always", "tag": "main"}


def test_trainer_values_against_the_chart():
    """kubeflow/trainer@v2.3.0:charts/kubeflow-trainer/values.yaml: `image.tag: ""` (the chart derives v2.3.0,
    pinned here so it moves only with versions.py); `runtimes.defaultEnabled: false` is the chart's default,
    restated on purpose (enabling runs an installer hook that needs the internet); JobSet's image is the
    subchart's key, whose in-repo default is a staging build (kubernetes-sigs/jobset@v0.12.0:hack/
    helm-chart-package.sh rewrites it only in the published chart)."""
    ours, chart = trainer.values(PlatformConfig.model_validate(platform())), trainer_values()
    assert chart["image"]["tag"] == "" and ours["image"] == {"tag": "v2.3.0"}
    assert chart["runtimes"]["defaultEnabled"] is False and ours["runtimes"] == {"defaultEnabled": False}
    assert chart["jobset"] == {"install": True, "fullnameOverride": "jobset"}  # the subchart installs
    assert ours["jobset"]["image"] == {"repository": "registry.k8s.io/jobset/jobset", "tag": "v0.12.0", "pullPolicy": "IfNotPresent"}
    # prod-v2 names system nodes: the controllers' placement (tests/test_placement.py), nothing else of theirs.
    assert set(ours["jobset"]) == {"image", "controller"} and set(ours["jobset"]["controller"]) == {"nodeSelector", "tolerations"}
    assert set(ours.pop("manager")) == {"nodeSelector", "tolerations"}
    assert set(ours["jobset"]["image"]) == set(JOBSET_IN_REPO_IMAGE)
    # Left at the chart's: its own webhook certificate (no cert-manager), webhook failurePolicy Fail, CRDs on.
    assert chart["manager"]["config"]["certManagement"]["enable"] is True
    assert chart["webhook"]["failurePolicy"] == "Fail" and chart["crds"]["enabled"] is True
    assert not {"manager", "webhook", "crds", "dataCache"} & set(ours)


def test_chart_version_and_its_jobset_match_the_pins():
    """kubeflow/trainer@v2.3.0:charts/kubeflow-trainer/Chart.yaml: version 2.3.0, dependency jobset 0.12.0."""
    chart = yaml.safe_load(upstream.path("values/kubeflow-trainer.Chart.yaml").read_text())
    assert chart["version"] == versions.TRAINER_VERSION and "appVersion" not in chart
    (jobset,) = [d for d in chart["dependencies"] if d["name"] == "jobset"]
    assert f"v{jobset['version']}" == versions.JOBSET_FOR_TRAINER[chart["version"]] and jobset["condition"] == "jobset.install"
    assert versions.trainer_controller_tag(chart["version"]) == f"v{chart['version']}"


def test_install_order_in_the_graph(rendered):
    """The trainer starts after Volcano (its volcano plugin watches PodGroups only if their CRD existed at start:
    kubeflow/trainer@v2.3.0:pkg/runtime/framework/plugins/volcano/volcano.go ReconcilerBuilders); runtimes after
    the release (the webhook refuses them until it serves); TrainJobs after their runtimes (clustertrainingruntime.go:
    "must be created before the TrainJob"), the PriorityClasses, queues and claims they name."""
    run = rendered(V2).run
    by_type: dict[str, list] = {}
    for r in run.registrations:
        by_type.setdefault(r.type.rsplit(":", 1)[-1], []).append(r)
    release = {r.inputs["name"]: r for r in by_type["Release"]}
    (ns,) = [r for r in by_type["Namespace"] if r.inputs["metadata"]["name"] == "kubeflow-system"]
    assert ns.inputs["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    trainer_release = release["kubeflow-trainer"]
    assert trainer_release.inputs["chart"] == "oci://ghcr.io/kubeflow/charts/kubeflow-trainer"
    assert {release["volcano"].urn, ns.urn} <= set(trainer_release.dependencies)
    runtimes = by_type["ClusterTrainingRuntime"]
    assert len(runtimes) == 10  # 3 frameworks x 3 tiers, and the acceptance's
    assert all(trainer_release.urn in r.dependencies for r in runtimes)
    names = {r.urn: r.inputs["metadata"].get("name") for r in run.registrations if r.custom and isinstance(r.inputs.get("metadata"), dict)}
    for job in by_type["TrainJob"]:
        deps = {names.get(d) for d in job.dependencies}
        assert {rt.inputs["metadata"]["name"] for rt in runtimes} <= deps, job.name
        assert {"training-critical", "training-standard", "research", "checkpoints"} <= deps, job.name
    assert "Release" in {t for t in by_type} and not by_type.get("Directory"), "no Training Operator on v2"


@pytest.mark.parametrize("stack_name", ["dev", "prod-ib", "prod-roce"])
def test_v1_stacks_install_no_trainer(stack_name, rendered):
    run = rendered(stack_name).run
    assert not any(r.type == "fastpath:platform:Trainer" or "trainer.kubeflow.org" in json.dumps(r.inputs)[:2000] for r in run.registrations)


# ------------------------------------------------------------------------------------------- runtimes


def fabric_case(kind: kinds.Kind, attachment: kinds.AttachmentKind | None) -> tuple[str, dict, str | None, bool]:
    """(id, fabric, RDMA resource of rail 0, Multus networks) for one row of components/fabric/kinds.py: the
    fabric of tests/helpers.py stack_input (where a kind's own stack keys are written), what the pod must get
    read off the row's columns."""
    fab = stack_input(kind.name, attachment.name if attachment else None)["fabric"]
    resource = kind.node_resource
    networks = False
    if attachment is not None:
        resource = None if attachment.claims else f"{attachment.resource_prefix}/{attachment.resource_stem}_rail0"
        networks = attachment.secondary_network
    return f"{kind.name}-{attachment.name}" if attachment else kind.name, fab, resource, networks


# Every kind and attachment of components/fabric/kinds.py.
FABRICS = [fabric_case(k, kinds.ATTACHMENTS[a]) for k in kinds.KINDS.values() for a in k.attachments] + [fabric_case(k, None) for k in kinds.KINDS.values() if not k.attachments]


def test_fabric_cases_are_the_ones_a_reader_expects():
    """The generator above, pinned on rows a reader knows by heart (the rest follow from the columns)."""
    cases = {c[0]: c[1:] for c in FABRICS}
    assert cases["infiniband-sriov"][1:] == ("nvidia.com/sriov_rail0", True)
    assert cases["roce-hostnetwork"][0]["podInterface"] == "bond0" and cases["roce-hostnetwork"][1:] == ("rdma/shared_rail0", False)
    assert cases["efa"] == ({"kind": "efa", "efaDevicesPerNode": 32}, "vpc.amazonaws.com/efa", False)
    assert len(FABRICS) == sum(len(k.attachments) or 1 for k in kinds.KINDS.values())


def v2_profile(fab: dict):
    p = platform(acceptance={"enabled": False})
    p["fabric"] = fab
    if "attachment" in fab and kinds.ATTACHMENTS[fab["attachment"]].claims:
        p["kubernetesVersion"] = "1.34"  # resource.k8s.io/v1, and no GPU caps (DRA pods request no nvidia.com/gpu)
        p["scheduler"]["queues"] = [{k: v for k, v in q.items() if k != "gpus"} for q in p["scheduler"]["queues"]]
    p["gpu"]["gpuDirect"] = "dmabuf" if kinds.KINDS[fab["kind"]].rdma else "none"
    return prof(p)


@pytest.mark.parametrize(("fab_id", "fab", "resource", "networks"), FABRICS, ids=[f[0] for f in FABRICS])
@pytest.mark.parametrize("fw", ["torch", "mpi", "plain"])
def test_runtime_pods_are_whole_nodes_wired_for_the_fabric(fab_id, fab, resource, networks, fw):
    """Each runtime validates against kubeflow/trainer@v2.3.0's CRD, and the pod a TrainJob naming it gets (merge
    as in effective_pod) has all 8 GPUs, every rail, IPC_LOCK on RDMA, the NCCL env, /dev/shm inside the memory
    limit, the preflight init container, the checkpoint claim, GPU placement and Volcano; on the host network
    also ClusterFirstWithHostNet and, for torchrun, PET_LOCAL_ADDR."""
    profile = v2_profile(fab)
    rt = trainjob.runtime(profile, fw, "training-critical")
    assert schema_problems(rt) == []
    assert rt["metadata"]["name"] == f"fastpath-{fw}-critical"
    tj = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "llama", "namespace": "research"},
        "spec": {"runtimeRef": {"name": rt["metadata"]["name"]}, "trainer": {"numNodes": 4}},
    }
    pod = effective_pod(tj, rt)
    spec = pod["spec"]
    (node,) = [c for c in spec["containers"] if c["name"] == "node"]
    limits = node["resources"]["limits"]
    assert node["resources"]["requests"] == limits
    assert limits["memory"] == "1800Gi" and limits["cpu"] == 200
    if "attachment" in fab and kinds.ATTACHMENTS[fab["attachment"]].claims:
        # The GPUs and rails come from each namespace's whole-node claim template, by name.
        assert "nvidia.com/gpu" not in limits and node["resources"]["claims"] == [{"name": "fabric"}]
        assert spec["resourceClaims"] == [{"name": "fabric", "resourceClaimTemplateName": "fastpath-fabric"}]
    else:
        assert limits["nvidia.com/gpu"] == 8
    row = kinds.KINDS[fab["kind"]]
    rdma = row.rdma
    if resource:
        assert limits[resource] == (32 if row.node_resource else 1)
    assert (node.get("securityContext") == {"capabilities": {"add": ["IPC_LOCK"]}}) is rdma
    env = {e["name"]: e.get("value") for e in node["env"]}
    assert env["NCCL_SOCKET_IFNAME"] == f"={fab.get('podInterface', 'eth0')}"
    assert env.get("NCCL_NET") == row.nccl_net
    assert env["CHECKPOINT_DIR"] == "/checkpoints"
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "128Gi"}} in spec["volumes"]
    assert {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "checkpoints"}} in spec["volumes"]
    assert [c["name"] for c in init_checks(spec)] == (["preflight"] if rdma else []) + (["mpi-hosts"] if fw == "mpi" else [])
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert spec["schedulerName"] == "volcano" and spec["priorityClassName"] == "training-critical"
    assert spec["restartPolicy"] == "Never"
    notes = pod["metadata"].get("annotations") or {}
    if networks:
        nets = json.loads(notes[NETWORKS_ANNOTATION])
        # No namespace: each training namespace's own attachments (the runtime is cluster-wide).
        assert [n["name"] for n in nets] == [f"rail{i}-{fab['attachment']}" for i in range(8)]
        assert all("namespace" not in n for n in nets)
    else:
        assert NETWORKS_ANNOTATION not in notes
    host = "attachment" in fab and kinds.ATTACHMENTS[fab["attachment"]].host_network
    assert (spec.get("hostNetwork"), spec.get("dnsPolicy")) == ((True, "ClusterFirstWithHostNet") if host else (None, None))
    assert ("PET_LOCAL_ADDR" in env) is (host and fw == "torch")
    assert (notes.get("fastpath.dev/primary-interface") == "bond0") is host
    assert override_problems(tj, rt) == []


def test_runtimes_are_one_per_framework_and_tier(rendered):
    objs = [o for o in rendered(V2).objects if o["kind"] == "ClusterTrainingRuntime"]
    tiers = {o["metadata"]["name"]: o["spec"]["template"]["spec"]["replicatedJobs"][-1]["template"]["spec"]["template"]["spec"]["priorityClassName"] for o in objs}
    assert tiers == {
        **{
            f"fastpath-{fw}{suffix}": tier
            for fw in ("torch", "mpi", "plain")
            for suffix, tier in (("", "training-standard"), ("-critical", "training-critical"), ("-preemptible", "training-preemptible"))
        },
        "fastpath-mpi-acceptance": "training-standard",  # the fabric acceptance's (acceptance.enabled on jobApi v2)
    }
    for o in objs:
        # No queue on the runtime: each namespace's annotation puts a TrainJob's gang in its queue (test_volcano.py).
        assert "metadata" not in o["spec"]["template"]
        assert o["metadata"]["annotations"] == {"fastpath.dev/namespaces": "training,research"}
        # One Volcano gang per TrainJob, kept inside one leaf when one has room (nodes.topology: preferred, tier 1).
        assert o["spec"]["podGroupPolicy"] == {"volcano": {"networkTopology": {"mode": "soft", "highestTierAllowed": 1}}}
        assert o["metadata"]["labels"]["trainer.kubeflow.org/framework"] in ("torch", "mpi", "plain")
        # Validation on: a runtime without a `node` container is refused by the webhook, not at the first run.
        assert "trainer.kubeflow.org/webhook-validation" not in o["metadata"]["labels"]
    mpi = next(o for o in objs if o["metadata"]["name"] == "fastpath-mpi")
    node_job = mpi["spec"]["template"]["spec"]["replicatedJobs"][0]
    assert node_job["template"]["spec"]["template"]["spec"]["containers"][0]["image"] == MPI_IMAGE


# ------------------------------------------------------------------------------------------- TrainJobs


def v2_job(rendered, name: str) -> tuple[dict, dict]:
    objs = rendered(V2).objects
    tj = next(o for o in objs if o["kind"] == "TrainJob" and o["metadata"]["name"] == name)
    rt = next(o for o in objs if o["kind"] == "ClusterTrainingRuntime" and o["metadata"]["name"] == tj["spec"]["runtimeRef"]["name"])
    return tj, rt


def test_torch_job_is_a_thin_train_job_on_the_tiers_runtime(rendered):
    """The queue and dataset go in as fastpath's runtime patch (the only way a TrainJob reaches the PodGroup's
    queue: kubeflow/trainer@v2.3.0:pkg/runtime/framework/plugins/volcano/volcano.go reads the JobSet template's
    annotations); torchrun reads PET_* from the torch plugin."""
    tj, rt = v2_job(rendered, "llama-pretrain")
    assert rt["metadata"]["name"] == "fastpath-torch-critical"
    trainer_spec = tj["spec"]["trainer"]
    assert trainer_spec["command"] == ["torchrun", "-m", "llm.pretrain", "--config", "/data/configs/llama-70b.yaml"]
    assert trainer_spec["numNodes"] == 8 and trainer_spec["numProcPerNode"] == 8
    assert trainer_spec["env"] == [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}}]
    (patch,) = tj["spec"]["runtimePatches"]
    assert patch["manager"] == "fastpath.dev/jobs"
    derived = effective_jobset(tj, rt)
    assert derived["podGroup"]["queue"] == "production"
    assert derived["podGroup"]["priorityClassName"] == "training-critical" and derived["podGroup"]["minMember"] == 8
    pod = effective_pod(tj, rt)
    (node,) = pod["spec"]["containers"]
    assert {"name": "dataset-0", "mountPath": "/data", "readOnly": True} in node["volumeMounts"]
    env = {e["name"]: e.get("value") for e in node["env"]}
    assert env["PET_NNODES"] == "8" and env["PET_NPROC_PER_NODE"] == "8"
    assert env["PET_MASTER_ADDR"] == "llama-pretrain-node-0-0.llama-pretrain"
    assert override_problems(tj, rt) == []
    for obj in (tj, {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "llama-pretrain"}, "spec": derived["jobset"]}):
        assert schema_problems(obj) == []


def test_memory_override_repeats_the_gpu_count_with_requests_equal_to_limits(rendered):
    """Pitfall 2 of the note: a resourcesPerNode without the GPU count makes the torch plugin count none and start
    one process per node (kubeflow/trainer@v2.3.0:pkg/runtime/framework/plugins/torch/torch.go)."""
    tj, rt = v2_job(rendered, "llama-sft")
    res = tj["spec"]["trainer"]["resourcesPerNode"]
    assert res["limits"] == res["requests"] == {"nvidia.com/gpu": 8, "memory": "1200Gi", "cpu": 200}
    (node,) = effective_pod(tj, rt)["spec"]["containers"]
    assert node["resources"]["limits"]["rdma/shared_rail7"] == 1  # merged per key: the rails stay
    assert {e["name"]: e.get("value") for e in node["env"]}["PET_NPROC_PER_NODE"] == "8"
    assert override_problems(tj, rt) == []


def test_mpi_job_runs_mpirun_on_the_launcher_and_forwards_the_fabric(rendered):
    """The MPI plugin sets the hostfile and ORTE names on the launcher (kubeflow/trainer@v2.3.0:pkg/runtime/
    framework/plugins/mpi/mpi.go); Open MPI 5 is given the hostfile by name, and ranks started by sshd get the
    fabric env only through -x."""
    tj, rt = v2_job(rendered, "ds-moe")
    assert rt["metadata"]["name"] == "fastpath-mpi"
    wrapper, cmd = tj["spec"]["trainer"]["command"][:4], tj["spec"]["trainer"]["command"][4:]
    # A failed mpirun holds the launcher for MPI_FAILURE_GRACE seconds, so an evicted node's Job fails first (a
    # DisruptionTarget restart spends no budget) rather than the launcher's ordinary failure.
    assert wrapper == ["sh", "-c", MPI_LAUNCH, "mpirun"]
    assert f"sleep {MPI_FAILURE_GRACE}" in wrapper[2]
    assert cmd[:6] == ["mpirun", "--hostfile", "/etc/mpi/hostfile", "--allow-run-as-root", "-np", "32"]
    for name in ("NCCL_IB_HCA", "NCCL_NET", "NCCL_SOCKET_IFNAME", "NCCL_DEBUG"):
        assert cmd[cmd.index(name) - 1] == "-x"
    derived = effective_jobset(tj, rt)
    assert derived["counts"] == {"node": 3, "launcher": 1} and derived["podGroup"]["minMember"] == 4
    # debugNccl is a deliberate override of the runtime's NCCL_DEBUG, and said so.
    assert [p for p in override_problems(tj, rt) if "NCCL_DEBUG" not in p] == []


def test_contract_in_the_summary_is_the_effective_pod(rendered):
    text = rendered(V2).files["SUMMARY.md"]
    section = text[text.index("### `llama-pretrain`") : text.index("### `llama-sft`")]
    assert "| runtime | fastpath-torch-critical |" in section
    assert "| kind | TrainJob |" in section and "| queue | production |" in section
    assert "| PET_MASTER_ADDR | `llama-pretrain-node-0-0.llama-pretrain` |" in section
    assert "| HF_TOKEN | `(secret hf-token/token)` |" in section
    assert "`rdma/shared_rail0`: 1" in section


def test_both_stack_runs_v1_by_default_and_v2_on_request():
    p = platform(jobApi="both", acceptance={"enabled": False})
    profile = prof(p)
    v1 = resolve(JobSpec.model_validate(GOOD_JOB), profile)
    v2 = resolve(JobSpec.model_validate({**GOOD_JOB, "api": "v2"}), profile)
    assert manifest(v1)["kind"] == "PyTorchJob"
    assert manifest(v2)["kind"] == "TrainJob"
    assert contract(v2)["runtime"] == "fastpath-torch"


def test_runtime_labels_and_names_are_deterministic():
    profile = prof(platform())
    assert trainer.runtimes(profile) == trainer.runtimes(profile)
    assert all(rt["metadata"]["labels"][k8s.CLUSTER_LABEL] == "prod-v2" for rt in trainer.runtimes(profile))


# ------------------------------------------------------------------------------------------- review of the renders


def test_trainer_controller_may_read_priority_classes_before_it_starts(rendered):
    """kubeflow/trainer@v2.3.0:charts/kubeflow-trainer/templates/rbac/clusterrole.yaml grants nothing on
    priorityclasses, yet the volcano plugin's TrainJob validation Gets the runtime's PriorityClass through the
    cached client (pkg/runtime/framework/plugins/volcano/volcano.go Validate): without a rule its informer never
    syncs and every TrainJob is refused ("context deadline exceeded"; kubeflow/trainer PR #3918). The ServiceAccount
    is `<fullname>-controller-manager` in the release namespace, fullname = the release name when it contains the
    chart name (templates/_helpers.tpl trainer.fullname, manager/_helpers.tpl, rbac/_helpers.tpl). Both objects
    exist before the release, so the controller's cache syncs at start."""
    run = rendered(V2).run
    by_kind = {r.inputs.get("kind"): r for r in run.registrations if r.custom}
    role, binding = by_kind["ClusterRole"], by_kind["ClusterRoleBinding"]
    assert role.inputs["rules"] == [{"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": ["get", "list", "watch"]}]
    assert binding.inputs["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role.inputs["metadata"]["name"]}
    assert binding.inputs["subjects"] == [{"kind": "ServiceAccount", "name": "kubeflow-trainer-controller-manager", "namespace": "kubeflow-system"}]
    (release,) = [r for r in run.registrations if r.type.endswith(":Release") and r.inputs["name"] == "kubeflow-trainer"]
    assert {role.urn, binding.urn} <= set(release.dependencies)
    for obj in (role, binding):
        manifest = {"apiVersion": obj.inputs["apiVersion"], "kind": obj.inputs["kind"], **{k: v for k, v in obj.inputs.items() if k not in ("apiVersion", "kind")}}
        assert schema_problems(manifest) == []


def test_trainer_release_keeps_its_crds(rendered):
    """The trainer CRDs are chart templates with no `helm.sh/resource-policy: keep` and no value to add it
    (kubeflow/trainer@v2.3.0:charts/kubeflow-trainer/templates/crd/): deleting the release would delete every
    TrainJob and its pods. Pulumi refuses to delete or replace it, and would only forget it."""
    (release,) = [r for r in rendered(V2).run.registrations if r.type.endswith(":Release") and r.inputs["name"] == "kubeflow-trainer"]
    assert release.protect and release.retain_on_delete


def test_runtimes_and_acceptance_are_replaced_when_an_immutable_field_changes(rendered):
    """The runtime CRD makes the JobSet template's failurePolicy, network, successPolicy, startupPolicy,
    volumeClaimPolicies and replicatedJobs[].dependsOn immutable (`self == oldSelf`: kubeflow/trainer@v2.3.0:
    manifests/base/crds/trainer.kubeflow.org_clustertrainingruntimes.yaml, from kubernetes-sigs/jobset@v0.12.0:
    api/jobset/v1alpha2/jobset_types.go), a TrainJob its trainer and runtimeRef (pkg/apis/trainer/v1alpha1/
    trainjob_types.go): a change is a delete and a create, never a patch the API server refuses."""
    run = rendered(V2).run
    runtimes = [r for r in run.registrations if r.inputs.get("kind") == "ClusterTrainingRuntime"]
    assert runtimes
    for r in runtimes:
        assert r.delete_before_replace and set(r.replace_on_changes) == {
            "spec.template.spec.failurePolicy",
            "spec.template.spec.network",
            "spec.template.spec.successPolicy",
            "spec.template.spec.startupPolicy",
            "spec.template.spec.volumeClaimPolicies",
            "spec.template.spec.replicatedJobs[*].dependsOn",
        }
    for r in run.registrations:
        if r.inputs.get("kind") == "TrainJob":  # the acceptance run as the training jobs
            assert r.replace_on_changes == ["spec"] and r.delete_before_replace, r.name


@pytest.mark.parametrize("job", ["ds-moe", "nccl-acceptance"])
def test_mpi_gang_exists_whole_when_volcano_schedules_it(rendered, job):
    """Volcano schedules a gang only when minMember pods exist (volcano-sh/volcano@v1.15.1:pkg/scheduler/plugins/
    gang/gang.go validJobFn; actions/allocate/allocate.go skips invalid jobs), and the PodGroup counts the launcher
    (kubeflow/trainer@v2.3.0:pkg/runtime/framework/plugins/volcano/volcano.go Build). JobSet creates a replicated
    job with `dependsOn` only once its dependencies reach the status (kubernetes-sigs/jobset@v0.12.0:pkg/
    controllers/depends_on.go): a launcher depending on `node: Ready` would never be created. So no replicated job
    depends on another, and the pods JobSet creates at once are the whole gang."""
    tj, rt = v2_job(rendered, job)
    derived = effective_jobset(tj, rt)
    assert not any("dependsOn" in r for r in rt["spec"]["template"]["spec"]["replicatedJobs"])
    at_start = sum(derived["counts"][r["name"]] for r in derived["jobset"]["replicatedJobs"] if not r.get("dependsOn"))
    assert at_start == derived["podGroup"]["minMember"] == tj["spec"]["trainer"]["numNodes"]


def _mpi_pods(rendered, job: str) -> tuple[dict, dict]:
    tj, rt = v2_job(rendered, job)
    node, launcher = effective_jobset(tj, rt)["jobset"]["replicatedJobs"]
    return node["template"]["spec"]["template"], launcher["template"]["spec"]["template"]


@pytest.mark.parametrize("job", ["ds-moe", "nccl-acceptance"])
def test_launcher_waits_for_every_host_in_an_init_container_the_train_job_cannot_strip(rendered, job):
    """The launcher's init container `mpi-hosts` mounts the volumes the mpi plugin adds to the launcher pod by name
    (kubeflow/trainer@v2.3.0:pkg/runtime/framework/plugins/mpi/mpi.go EnforceMLPolicy: `mpi-hostfile` at
    /etc/mpi, `mpi-ssh-auth`; pkg/constants/constants.go), and a TrainJob's command replaces only the `node`
    container's (jobset/builder.go Trainer)."""
    _, launcher = _mpi_pods(rendered, job)
    spec = launcher["spec"]
    volumes = {v["name"] for v in spec["volumes"]}
    (wait,) = [c for c in spec["initContainers"] if c["name"] == "mpi-hosts"]
    assert [c["name"] for c in init_checks(spec)] == ["preflight", "mpi-hosts"]
    assert {m["name"] for m in wait["volumeMounts"]} <= volumes
    assert {"name": "mpi-hostfile", "mountPath": "/etc/mpi"} in wait["volumeMounts"]
    assert {"name": "mpi-ssh-auth", "mountPath": "/root/.ssh"} in wait["volumeMounts"]
    assert wait["command"][:2] == ["sh", "-c"] and wait["command"][3] == "/root/.ssh"
    assert "within 900s" in wait["command"][2]
    (node,) = spec["containers"]
    assert node["command"] != wait["command"]  # the TrainJob's, beside it


def _run(script: str, arg: str, env: dict, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run([DASH, "-c", script, arg], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)


@needs_dash
def test_host_wait_skips_the_launcher_waits_for_each_host_and_gives_up_with_the_ssh_error(tmp_path):
    """MPI_HOSTS_SCRIPT against a stand-in ssh: the hostfile's launcher line (the mpi plugin lists it, last) is
    skipped, a host that answers passes, one that never does fails the container with the host and ssh's error."""
    bin_dir, keys = tmp_path / "bin", tmp_path / "keys"
    bin_dir.mkdir()
    keys.mkdir()
    (keys / "id_rsa").write_text("key")
    (tmp_path / "hostfile").write_text("run-node-0-0.run slots=8\nrun-node-0-1.run slots=8\nrun-launcher-0-0.run slots=8\n")
    ssh = bin_dir / "ssh"
    ssh.write_text('#!/bin/sh\nfor a; do h=$a; case "$a" in true) break;; esac; prev=$h; done\necho "$prev" >> "$LOG"\ncase "$prev" in $DOWN) echo "Connection refused" >&2; exit 255;; esac\n')
    ssh.chmod(0o755)
    script = (
        build.MPI_HOSTS_SCRIPT.replace("/etc/mpi/hostfile", str(tmp_path / "hostfile")).replace(build.SSH_KEY_DIR, str(tmp_path / "copy")).replace("+ 900 ))", "+ 1 ))").replace("sleep 5", "sleep 1")
    )
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "FASTPATH_TRAINJOB": "run", "LOG": str(tmp_path / "log"), "DOWN": "nothing"}
    ok = _run(script, str(keys), env, tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "log").read_text().split() == ["run-node-0-0.run", "run-node-0-1.run"]
    assert oct((tmp_path / "copy" / "id_rsa").stat().st_mode & 0o777) == "0o600"
    down = _run(script, str(keys), {**env, "DOWN": "run-node-0-1.run"}, tmp_path)
    assert down.returncode == 1
    assert "run-node-0-1.run took no ssh login on port 2222 within 900s: Connection refused" in down.stderr


@needs_dash
def test_node_without_sshd_fails_fast_with_the_reason(tmp_path):
    """An MPI image without openssh-server: the `node` container exits 3 at once with what is missing, which the
    runtime's rules turn into a failed run (tests/test_trainer_faults.py), not maxRestarts gang restarts. (The
    script also looks in /usr/sbin and /sbin; here only in an empty directory, whatever this machine has.)"""
    script = build.SSHD.replace('export PATH="$PATH:/usr/sbin:/sbin"', 'export PATH="$PATH"')
    assert script != build.SSHD
    got = _run(script, "/root/.ssh", {"PATH": str(tmp_path)}, tmp_path)
    assert got.returncode == 3
    assert "fastpath: no sshd in this image" in got.stderr and "trainer.mpiImage" in got.stderr


@pytest.mark.parametrize("job", ["ds-moe", "nccl-acceptance"])
def test_mpi_pods_run_as_root_with_one_ssh_identity_end_to_end(rendered, job):
    """One identity: root. The trainer mounts its ssh Secret at sshAuthMountPath with id_rsa 0640, root-owned
    (kubeflow/trainer@v2.3.0:pkg/constants/constants.go MPISSHPrivateKeyFileMode), which OpenSSH ignores for its
    owner (openssh/openssh-portable:authfile.c sshkey_perm_ok): each pod copies it 0600 to /run/fastpath-ssh and ssh
    is told to use it. sshd needs no prepared config: host keys made at start, port, root by key, the Secret's
    authorized_keys, StrictModes off, all on its command line. The launcher's ssh agent carries the options for
    Open MPI 4 (OMPI_MCA_plm_rsh_args is the plugin's, reserved) and 5 (PRTE_MCA_plm_ssh_agent)."""
    tj, rt = v2_job(rendered, job)
    assert rt["spec"]["mlPolicy"]["mpi"]["sshAuthMountPath"] == "/root/.ssh"
    node, launcher = _mpi_pods(rendered, job)
    for pod in (node, launcher):
        assert pod["spec"]["securityContext"] == {"runAsUser": 0, "runAsGroup": 0}
        (c,) = pod["spec"]["containers"]
        assert {"name": "mpi-ssh-auth", "mountPath": "/root/.ssh"} in c["volumeMounts"]
        assert any(m["mountPath"] == "/run/fastpath-ssh" for m in c["volumeMounts"])
    (sshd,) = node["spec"]["containers"]
    script = sshd["command"][2]
    assert sshd["command"][3] == "/root/.ssh"
    for piece in (
        "ssh-keygen -A",
        "-f /dev/null -p 2222",
        "-o PermitRootLogin=prohibit-password",
        '-o AuthorizedKeysFile="$0/authorized_keys"',
        "-o StrictModes=no",
        'cp "$0/id_rsa" /run/fastpath-ssh/id_rsa && chmod 600 /run/fastpath-ssh/id_rsa',
        '"$(command -v sshd)" -De',  # a child, not exec'd: SIGTERM is answered with 143 (test_node_container_never_ends_succeeded)
    ):
        assert piece in script, piece
    options = "-p 2222 -i /run/fastpath-ssh/id_rsa -o IdentitiesOnly=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o ConnectionAttempts=10"
    env = {e["name"]: e.get("value") for e in launcher["spec"]["containers"][0]["env"]}
    assert env["OMPI_MCA_plm_rsh_agent"] == env["PRTE_MCA_plm_ssh_agent"] == f"ssh {options}"
    # Open MPI 5 (PRRTE) names of what the plugin sets with ORTE names (item 12 of the review).
    assert {k: env[k] for k in env if k.startswith("PRTE_MCA_")} == {
        "PRTE_MCA_plm_ssh_agent": f"ssh {options}",
        "PRTE_MCA_plm_ssh_args": "-o ConnectionAttempts=10",
        "PRTE_MCA_prte_default_hostfile": "/etc/mpi/hostfile",
        "PRTE_MCA_prte_keep_fqdn_hostnames": "true",
        "PRTE_MCA_prte_set_default_slots": "8",
    }
    command = tj["spec"]["trainer"]["command"]
    # acceptance: a series script; a job: a wrapper around mpirun's own argv
    text = f"{command[2]} {shlex.join(command[3:])}" if command[0] == "sh" else shlex.join(command)
    assert shlex.join(["-mca", "plm_rsh_args", options]) in text


@needs_dash
@pytest.mark.parametrize(
    ("signal_it", "sshd_exit", "expect"), [(True, None, 143), (False, 0, 1), (False, 7, 7), (False, "refuses", 3)], ids=["evicted", "sshd-ends-0", "sshd-fails", "sshd-refuses-options"]
)
def test_node_container_never_ends_succeeded(tmp_path, signal_it, sshd_exit, expect):
    """sshd exits 0 on SIGTERM; the `node` container answers SIGTERM with 143 and turns an sshd that ends by itself
    into a failure, so an evicted or preempted MPI node is a failed pod whose DisruptionTarget condition the Job's
    podFailurePolicy sees (batch/v1 podFailurePolicy acts on failed pods only), never a Succeeded one."""
    import signal
    import time

    bin_dir, keys, run_dir = tmp_path / "bin", tmp_path / "keys", tmp_path / "run"
    bin_dir.mkdir()
    keys.mkdir()
    (keys / "id_rsa").write_text("key")
    sshd = bin_dir / "sshd"
    # `sshd -t` (the options tried first) passes unless the case is an sshd that refuses them
    check = "exit 1" if sshd_exit == "refuses" else "exit 0"
    run = "trap 'exit 0' TERM; while :; do sleep 1; done" if sshd_exit is None else f"exit {sshd_exit}"
    sshd.write_text(f'#!/bin/sh\n[ "$1" = -t ] && {{ echo "Unsupported option SetEnv" >&2; {check}; }}\n{run}\n')
    for tool, body in (("ssh-keygen", "exit 0"), ("ssh", "exit 0")):
        (bin_dir / tool).write_text(f"#!/bin/sh\n{body}\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    script = build.SSHD.replace("/run/", f"{run_dir}/")
    proc = subprocess.Popen([DASH, "-c", script, str(keys)], env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, cwd=tmp_path)
    if signal_it:
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == expect


@needs_dash
@pytest.mark.parametrize(
    ("child", "signal_it", "expect"), [("exit 0", False, 0), ("exit 5", False, 5), ("trap 'exit 0' TERM; while :; do sleep 1; done", True, 143)], ids=["ok", "mpirun-fails", "launcher-deleted"]
)
def test_launcher_wrapper_passes_mpirun_through_and_stops_it_on_sigterm(tmp_path, child, signal_it, expect):
    """The v2 MPI launcher command: mpirun's exit code is the container's (after the grace on a failure), and a
    SIGTERM (the launcher deleted, the gang restarted) reaches mpirun and ends the container with 143 at once, not
    after the kubelet's grace period."""
    import signal
    import time

    script = MPI_LAUNCH.replace(f"sleep {MPI_FAILURE_GRACE}", "sleep 0")
    marker = tmp_path / "stopped"
    body = child.replace("trap 'exit 0' TERM", f"trap 'touch {marker}; exit 0' TERM")
    proc = subprocess.Popen([DASH, "-c", script, "mpirun", "/bin/sh", "-c", body], cwd=tmp_path)
    if signal_it:
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == expect
    assert marker.exists() == signal_it  # mpirun itself was told to stop
