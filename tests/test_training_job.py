"""TrainingJob: the exact pod a researcher's job description becomes, on every fabric and framework."""

import json

import pytest

from components.fabric import wiring as fabric
from components.jobs import telemetry
from components.jobs.component import manifest
from components.jobs.contract import contract
from components.jobs.launch import LAUNCH, LAUNCHER, torchrun_command
from components.jobs.operator_v1 import rendezvous
from components.jobs.pod import pod_template
from components.jobs.resolve import ROLE_LABEL, resolve
from components.model import config, stack
from components.model.config import PlatformConfig
from components.model.job import JobSpec
from components.model.profile import Profile
from components.model.profile import profile as make_profile
from tests.conftest import schema_problems, stack_platform
from tests.helpers import init_checks
from tools import upstream

DGX = ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]
FABRICS = {
    "tcp": {"kind": "tcp"},
    "ib-sriov": {"kind": "infiniband", "attachment": "sriov", "rails": [{"hca": h, "interface": f"ibp{i}", "subnet": f"10.{i}.0.0/16", "speedGbps": 400} for i, h in enumerate(DGX)]},
    "roce-shared": {"kind": "roce", "attachment": "shared", "rails": [{"hca": f"mlx5_{i}", "interface": f"ens{i}", "subnet": f"192.168.{4 * i}.0/22", "speedGbps": 200} for i in range(2)]},
    "efa": {"kind": "efa", "efaDevicesPerNode": 32},
}


def profile_for(fab: str) -> dict:
    p = stack_platform("prod-ib")
    p["fabric"] = FABRICS[fab]
    p["gpu"]["gpuDirect"] = "none" if fab == "tcp" else "dmabuf"
    p["components"] = {"networkOperator": fab in ("ib-sriov", "roce-shared")}
    if fab in ("tcp", "efa"):
        p["checkpoints"]["nfs"]["rdma"] = False  # NFS over RDMA needs the cluster's InfiniBand/RoCE NICs
    return make_profile(PlatformConfig.model_validate(p))


# What preflight.sh checks a full-node pod for, per fabric: every rail's device, the host HCA names where the
# pod sees them (not SR-IOV VFs, not EFA), the rail interfaces, 128 GiB of /dev/shm, RoCE GIDs per rail.
_SHM = str(128 * 2**30)
PREFLIGHT_EXPECTS = {
    "ib-sriov": {"PREFLIGHT_GPUS": "8", "PREFLIGHT_RDMA_DEVICES": "8", "PREFLIGHT_HCAS": "", "PREFLIGHT_INTERFACES": " ".join(f"net{i}" for i in range(1, 9)), "PREFLIGHT_SHM_BYTES": _SHM},
    "roce-shared": {
        "PREFLIGHT_GPUS": "8",
        "PREFLIGHT_RDMA_DEVICES": "2",
        "PREFLIGHT_HCAS": "mlx5_0 mlx5_1",
        "PREFLIGHT_LINK_LAYER": "Ethernet",
        "PREFLIGHT_INTERFACES": "net1 net2",
        "PREFLIGHT_SHM_BYTES": _SHM,
        "PREFLIGHT_ROCE_GIDS": "net1:mlx5_0 net2:mlx5_1",
    },
    "efa": {"PREFLIGHT_GPUS": "8", "PREFLIGHT_RDMA_DEVICES": "32", "PREFLIGHT_HCAS": "", "PREFLIGHT_INTERFACES": "", "PREFLIGHT_SHM_BYTES": _SHM},
}

SIZES = {"fixed": {"nodes": 4}, "elastic": {"elastic": {"minNodes": 2, "maxNodes": 6}}}
MATRIX = [(f, fw, size) for f in FABRICS for fw in ("pytorch", "mpi", "tensorflow") for size in SIZES if not (size == "elastic" and fw != "pytorch")]


def job(fw, size, **extra):
    return JobSpec.model_validate({"name": "run", "image": "nvcr.io/nvidia/pytorch:25.10-py3", "command": ["python", "train.py", "--lr", "3e-4"], "framework": fw, **SIZES[size], **extra})


def gpu_templates(m: dict) -> list[tuple[str, dict, dict]]:
    specs = m["spec"].get("pytorchReplicaSpecs") or m["spec"].get("mpiReplicaSpecs") or m["spec"]["tfReplicaSpecs"]
    return [(role, s, s["template"]) for role, s in specs.items() if role != "Launcher"]


@pytest.mark.parametrize(("fab", "fw", "size"), MATRIX, ids=[f"{f}-{fw}-{s}" for f, fw, s in MATRIX])
def test_job_pod_wiring(fab, fw, size):
    prof = profile_for(fab)
    r = resolve(job(fw, size), prof)
    m = manifest(r)
    assert contract(r)["kind"] == m["kind"]  # the contract names the kind it does not rebuild
    wiring = fabric.pod_wiring(prof.fabric, "training", 8, 8)
    expected_env = [{"name": k, "value": v} for k, v in wiring.env.items()]
    # pytorch/pytorch@v2.13.0:torch/distributed/elastic/rendezvous/dynamic_rendezvous.py reads it (shared store
    # off): with the shared store a replacement agent never rejoins (tests/test_restart.py shows both).
    if fw == "pytorch":
        expected_env.append({"name": "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "value": "1"})
    expected_env.append({"name": "CHECKPOINT_DIR", "value": "/checkpoints/run"})
    assert wiring.env.get("NCCL_NET") == {"tcp": None, "efa": "Libfabric"}.get(fab, "IB")
    if fw == "pytorch" and fab != "tcp":  # the preflight runs in the main container (ExitCode)
        expected_env += [{"name": "FASTPATH_PREFLIGHT", "value": "/fastpath/preflight.sh"}, *({"name": k, "value": v} for k, v in PREFLIGHT_EXPECTS[fab].items())]
    # prod-ib turns training-time telemetry on: NCCL loads the Inspector (tests/test_telemetry.py).
    assert prof.nccl_inspector_image
    expected_env += [{"name": k, "value": v} for k, v in telemetry.env().items()]
    if fw == "pytorch":  # one start and one per fault it may recover from (see tests/test_job_faults.py)
        expected_env.append({"name": "FASTPATH_MAX_STARTS", "value": "4"})
    for _role, replica, tpl in gpu_templates(m):
        pod = tpl["spec"]
        (c,) = pod["containers"]
        assert c["name"] == {"pytorch": "pytorch", "mpi": "worker", "tensorflow": "tensorflow"}[fw]
        assert c["env"] == expected_env
        limits = c["resources"]["limits"]
        assert limits == c["resources"]["requests"]
        assert limits["nvidia.com/gpu"] == 8 and limits["memory"] == "1800Gi" and limits["cpu"] == 200
        assert {k: v for k, v in limits.items() if k not in ("nvidia.com/gpu", "memory", "cpu")} == wiring.resources
        if fab == "tcp":
            assert "securityContext" not in c
        else:
            assert c["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
        assert tpl["metadata"].get("annotations", {}) == wiring.annotations
        # shm: memory-backed, inside the memory limit.
        assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "128Gi"}} in pod["volumes"]
        assert {"name": "dshm", "mountPath": "/dev/shm"} in c["volumeMounts"]
        assert {"name": "checkpoints", "mountPath": "/checkpoints/run", "subPath": "run"} in c["volumeMounts"]
        assert pod["schedulerName"] == "volcano" and pod["priorityClassName"] == "training-standard"
        assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
        assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
        assert anti["topologyKey"] == "kubernetes.io/hostname"
        pack = pod["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
        assert pack["podAffinityTerm"]["topologyKey"] == "network.fastpath.dev/leaf"
        # No restart in place; PyTorch pods are recreated when evicted (see tests/test_job_faults.py).
        assert replica["restartPolicy"] == ("ExitCode" if fw == "pytorch" else "Never")
    policy = m["spec"]["runPolicy"]
    # Kept after it finishes: a TTL would let refresh + up resubmit it (tests/test_day2.py).
    assert policy["cleanPodPolicy"] == "Running" and "ttlSecondsAfterFinished" not in policy
    assert "backoffLimit" not in policy
    launcher = 1 if fw == "mpi" else 0
    assert policy["schedulingPolicy"] == {"minAvailable": (4 if size == "fixed" else 2) + launcher, "queue": "research", "priorityClass": "training-standard"}
    total = sum(s["replicas"] for _, s, _ in gpu_templates(m))
    assert total == (4 if size == "fixed" else 6)
    if upstream.available("crds"):
        assert schema_problems(m) == []


@pytest.mark.parametrize("size", ["fixed", "elastic"])
def test_pytorch_is_worker_only_on_c10d_with_a_store_outside_the_gang(size):
    """Fixed-size jobs use c10d too (N:N): the static rendezvous cannot take a replacement pod. The store is
    `<job>-rdzv`, not a worker, so any minNodes workers Volcano admits can rendezvous. The conf keys are torch's
    (pytorch/pytorch@v2.13.0:torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py _create_tcp_store:
    `is_host` overrides the hostname match, `read_timeout` defaults to 60 s, too short for a store pod still
    pulling its image; dynamic_rendezvous.py: `join_timeout`)."""
    r = resolve(job("pytorch", size), profile_for("ib-sriov"))
    m = manifest(r)
    assert list(m["spec"]["pytorchReplicaSpecs"]) == ["Worker"]
    lo, hi = (4, 4) if size == "fixed" else (2, 6)
    assert m["spec"]["elasticPolicy"] == {
        "minReplicas": lo,
        "maxReplicas": hi,
        "maxRestarts": 3,
        "rdzvBackend": "c10d",
        "rdzvHost": "run-rdzv",
        "rdzvPort": 29400,
        "rdzvId": "run",
        # 1500: prod-ib's node health releases a lost node after 10 min (operator_v1.join_timeout).
        "rdzvConf": [{"key": "is_host", "value": "false"}, {"key": "join_timeout", "value": "1500"}, {"key": "read_timeout", "value": "600"}],
    }
    assert m["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == lo
    worker = m["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert worker["command"] == ["sh", "-c", LAUNCH, "fastpath", "torchrun", "train.py", "--lr", "3e-4"]
    store, service, pdb = rendezvous(r)
    assert service["metadata"]["name"] == store["metadata"]["name"] == "run-rdzv"
    assert service["spec"]["ports"][0]["port"] == 29400
    # Evicting the store ends the job: no voluntary eviction, no autoscaler scale-down of its node.
    # minAvailable: the disruption controller reads maxUnavailable through the owner's scale subresource, which a
    # Job lacks (kubernetes/kubernetes@v1.34.0:pkg/controller/disruption/disruption.go getExpectedScale).
    assert pdb["kind"] == "PodDisruptionBudget" and pdb["spec"] == {**pdb["spec"], "minAvailable": 1}
    # A Job: pulumi-kubernetes would otherwise wait for it to complete, which it does when the run is over
    # (pulumi/pulumi-kubernetes@v4.32.0:provider/pkg/await/job.go; skipAwait: provider/pkg/await/await.go).
    assert store["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"
    labels = store["spec"]["template"]["metadata"]["labels"]
    assert all(labels[k] == v for k, v in pdb["spec"]["selector"]["matchLabels"].items())
    # A batch Job that ends with the run (launch.RDZV_STORE), so a finished job's budget holds no node.
    assert store["kind"] == "Job" and store["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"
    assert store["spec"]["template"]["metadata"]["annotations"] == {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}
    pod = store["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert "nvidia.com/gpu" not in c["resources"]["limits"] and c["resources"]["limits"] == c["resources"]["requests"]
    assert "schedulerName" not in pod  # not in the gang: it runs whatever Volcano admits
    assert store["spec"]["template"]["metadata"]["labels"][ROLE_LABEL] == "rendezvous"
    if upstream.available("crds"):
        assert [e for o in (m, store, service, pdb) for e in schema_problems(o)] == []


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (["python", "train.py"], ["torchrun", "train.py"]),
        (["python3", "-m", "pkg.train", "--x"], ["torchrun", "-m", "pkg.train", "--x"]),
        # torchrun rejects -u (it runs Python with -u itself; the operator sets PYTHONUNBUFFERED=1)
        (["python", "-u", "train.py"], ["torchrun", "train.py"]),
        (["python3.12", "-u", "-m", "pkg.train"], ["torchrun", "-m", "pkg.train"]),
        # other interpreter flags only survive as a program torchrun runs as given
        (["python", "-X", "faulthandler", "train.py"], ["torchrun", "--no-python", "python", "-X", "faulthandler", "train.py"]),
        (["/usr/bin/python3", "train.py"], ["torchrun", "train.py"]),
        (["./run.sh"], ["torchrun", "--no-python", "./run.sh"]),
    ],
)
def test_torchrun_command(command, expected):
    assert torchrun_command(command) == expected


def test_mpi_launcher_forwards_every_pod_variable():
    r = resolve(job("mpi", "fixed", secretEnv={"HF_TOKEN": {"secret": "hf", "key": "t"}}, env={"MY_FLAG": "1"}), profile_for("ib-sriov"))
    m = manifest(r)
    assert m["spec"]["slotsPerWorker"] == 8
    launcher = m["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    wrapper = launcher["containers"][0]["command"]
    assert wrapper[:2] == ["sh", "-c"] and wrapper[2] == LAUNCHER and wrapper[3] == "launcher"
    cmd = wrapper[4:]  # "$@": mpirun with exactly these arguments once every worker takes an exec
    assert cmd[:4] == ["mpirun", "--allow-run-as-root", "-np", "32"]
    # NAME (the launcher's value) or NAME=value (the Inspector's: a v1 launcher has none of its own).
    forwarded = [cmd[i + 1].split("=", 1)[0] for i, a in enumerate(cmd) if a == "-x"]
    worker_env = [e["name"] for e in m["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"]]
    assert set(worker_env) <= set(forwarded)
    assert {"HF_TOKEN", "MY_FLAG", "NCCL_IB_HCA", "PATH", "LD_LIBRARY_PATH"} <= set(forwarded)
    assert cmd[-4:] == ["python", "train.py", "--lr", "3e-4"]
    assert "nvidia.com/gpu" not in launcher["containers"][0]["resources"]["limits"]
    assert "annotations" not in m["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["metadata"]
    # The launcher is in the gang: it must tolerate what its workers tolerate, or no MPIJob ever starts.
    worker = m["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    assert launcher["tolerations"] == worker["tolerations"] and "nodeSelector" not in launcher


def test_tensorflow_has_chief_and_workers():
    m = manifest(resolve(job("tensorflow", "fixed"), profile_for("roce-shared")))
    specs = m["spec"]["tfReplicaSpecs"]
    assert (specs["Chief"]["replicas"], specs["Worker"]["replicas"]) == (1, 3)


def test_debug_nccl_and_overrides_reach_the_pod():
    r = resolve(job("pytorch", "fixed", debugNccl=True, envOverrides={"NCCL_IB_HCA": "=mlx5_0"}), profile_for("ib-sriov"))
    assert r.env["NCCL_DEBUG"] == "INFO" and r.env["NCCL_DEBUG_SUBSYS"] == "INIT,NET"
    assert r.env["NCCL_IB_HCA"] == "=mlx5_0"
    assert contract(r)["envOverrides"] == ["NCCL_IB_HCA"]


def test_datasets_are_read_only_and_secrets_use_secret_key_ref():
    r = resolve(job("pytorch", "fixed", datasets=[{"claim": "corpus", "mountPath": "/data"}], secretEnv={"HF_TOKEN": {"secret": "hf", "key": "token"}}), profile_for("tcp"))
    pod = pod_template(r, ["x"])["spec"]
    c = pod["containers"][0]
    assert {"name": "dataset-0", "mountPath": "/data", "readOnly": True} in c["volumeMounts"]
    assert {"name": "dataset-0", "persistentVolumeClaim": {"claimName": "corpus", "readOnly": True}} in pod["volumes"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}} in c["env"]


@pytest.mark.parametrize("fab", ["ib-sriov", "roce-shared"])
def test_partial_node_pod_is_on_every_rail(fab):
    """The device plugin may hand a 4-GPU pod any 4 GPUs: only a pod on every rail lets NCCL pair each GPU with
    its PCIe-local NIC, and two such pods on a node do not share half the rails."""
    prof = profile_for(fab)
    r = resolve(job("pytorch", "fixed", gpusPerNode=4), prof)
    rails = len(prof.rails)
    assert len(r.wiring.rails) == rails and r.memory_gib == 900 and r.shm_gib == 64
    annotation = json.loads(r.wiring.annotations[fabric.NETWORKS_ANNOTATION])
    assert [a["interface"] for a in annotation] == [f"net{i + 1}" for i in range(rails)]
    assert sum(r.wiring.resources.values()) == rails


def test_partial_node_job_refused_on_hostdevice():
    p = stack_platform("prod-roce")
    p["fabric"]["attachment"] = "hostdevice"
    with pytest.raises(
        config.ConfigError,
        match=r"jobs\[0\]\.gpusPerNode: 2 of a node's 4 GPUs on "
        r"fabric.attachment 'hostdevice'",
    ):
        stack.parse({"platform": p, "jobs": [{**GOOD, "gpusPerNode": 2}]}, "s")


# ------------------------------------------------------------------------------------------- bad input

GOOD = {"name": "run", "image": "nvcr.io/nvidia/pytorch:25.10-py3", "command": ["python", "train.py"], "nodes": 2}
BAD = [
    ({"gpusPerNode": 16}, "fastpath:jobs[0].gpusPerNode: 16 is more than the 8 GPUs"),
    ({"nodes": None, "elastic": {"minNodes": 5, "maxNodes": 2}}, "elastic.minNodes (5) is larger than"),
    ({"queue": "gpu-poor"}, "fastpath:jobs[0].queue: 'gpu-poor' is not a queue of this cluster"),
    ({"name": "a" * 56}, "over Kubernetes' 63"),
    ({"image": "nvcr.io/nvidia/pytorch"}, "has no tag"),
    ({"image": "pytorch/pytorch:latest"}, "uses `latest`"),
    ({"shmGiB": 200, "memoryGiB": 100}, "fastpath:jobs[0].shmGiB: /dev/shm of 200 GiB does not fit"),
    ({"env": {"NCCL_IB_HCA": "mlx5_0"}}, "env.NCCL_IB_HCA is set by the platform"),
    ({"env": {"MASTER_ADDR": "x"}}, "env.MASTER_ADDR is set by the platform"),
    ({"env": {"NCCL_TIMEOUT": "1800"}}, "the collective timeout is PyTorch's"),
    ({"env": {"NCCL_SOCKET_IFNAM": "eth0"}}, "did you mean NCCL_SOCKET_IFNAME"),
    ({"env": {"HF_TOKEN": "hf_abc"}}, "env.HF_TOKEN looks like a secret: put it in secretEnv"),
    ({"envOverrides": {"MY_VAR": "1"}}, "envOverrides.MY_VAR is not a platform-set variable"),
    ({"nodes": 40}, "fastpath:jobs[0].nodes: 40 nodes asked, the cluster has 32"),
    ({"framework": "mpi", "nodes": None, "elastic": {"minNodes": 1, "maxNodes": 2}}, "elastic is only for"),
    ({"namespace": "default"}, "'default' is not a training namespace"),
    ({"priorityClass": "urgent"}, "'urgent' is not one of"),
    ({"nodes": None}, "set exactly one of nodes"),
    ({"command": ["torchrun", "--nproc-per-node", "8", "train.py"]}, "command: starts torchrun, but fastpath"),
    ({"command": ["python", "-m", "torch.distributed.run", "train.py"]}, "command: starts torchrun"),
    ({"command": ["deepspeed", "train.py"]}, "command: starts deepspeed"),
    ({"command": ["accelerate", "launch", "train.py"]}, "command: starts accelerate launch"),
    ({"framework": "mpi", "command": ["mpirun", "-np", "8", "python", "t.py"]}, "launches the command itself with mpirun over every GPU"),
    ({"framework": "tensorflow", "maxRestarts": 2}, "maxRestarts: tensorflow workers cannot re-form"),
    ({"files": {"config.yaml": "examples/nope.py"}}, "files.config.yaml: examples/nope.py is not a file"),
    ({"nodes": None, "elastic": {"minNodes": 1, "maxNodes": 2, "maxRestarts": 5}}, "elastic.maxRestarts moved"),
]


@pytest.mark.parametrize(("change", "needle"), BAD, ids=[b[1][:40] for b in BAD])
def test_bad_job_is_refused_with_key_and_fix(change, needle):
    raw = {**GOOD, **change}
    raw = {k: v for k, v in raw.items() if v is not None}
    with pytest.raises(config.ConfigError) as err:
        stack.parse({"platform": stack_platform("prod-ib"), "jobs": [raw]}, "stacks/Pulumi.prod-ib.yaml")
    assert needle in str(err.value)
    assert str(err.value).startswith("stacks/Pulumi.prod-ib.yaml: fastpath:jobs[0]")


def test_queue_refused_when_volcano_disabled():
    p = stack_platform("prod-ib")
    p["components"] = {"volcano": False}
    with pytest.raises(config.ConfigError, match=r"jobs\[0\]\.queue: queue 'research' asked but the cluster has no gang scheduler"):
        stack.parse({"platform": p, "jobs": [{**GOOD, "queue": "research"}]}, "s")


def test_duplicate_job_names_refused():
    with pytest.raises(config.ConfigError, match=r"jobs\[1\]\.name: 'run' is already a job"):
        stack.parse({"platform": stack_platform("prod-ib"), "jobs": [GOOD, GOOD]}, "s")


def test_job_in_another_project_is_wired_from_a_stack_reference(rendered):
    """A second project reads the exported profile through a StackReference and gets the same wiring."""
    from components.jobs.component import TrainingJob, TrainingJobArgs
    from components.model.profile import from_stack
    from tools import render

    exported = rendered("prod-roce").run.outputs["profile"]
    spec = job("pytorch", "fixed")

    def program():
        TrainingJob("run", TrainingJobArgs(spec=spec, profile=from_stack("acme/fastpath/prod-roce")))

    run = render.run_program("dev", program=program, references={"acme/fastpath/prod-roce": {"profile": exported}})
    (registered,) = [r for r in run.registrations if r.type.endswith(":PyTorchJob")]
    # The rendezvous store is owned by the job (the API server's uid, here the renderer's stand-in).
    (store,) = [r for r in run.registrations if r.type == "kubernetes:batch/v1:Job"]
    assert store.inputs["metadata"]["ownerReferences"][0]["name"] == "run"
    assert store.inputs["metadata"]["ownerReferences"][0]["uid"]
    direct = manifest(resolve(spec, Profile.from_data(exported)))
    assert render.integral(registered.inputs)["spec"] == direct["spec"]
    # Numbers crossed the wire as floats; the job must still say 4 processes, not "4.0".
    assert registered.inputs["spec"]["nprocPerNode"] == "4"
    annotation = direct["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]
    assert "rail0-shared" in annotation[fabric.NETWORKS_ANNOTATION]


def test_missing_profile_in_stack_reference_is_a_clear_error():
    from components.model.profile import from_stack
    from tools import render

    with pytest.raises(ValueError, match="exports no `profile`"):
        render.run_program("dev", program=lambda: from_stack("acme/other/prod"), references={})


@pytest.mark.parametrize(
    ("fab", "extra", "present", "hcas"),
    [
        ("ib-sriov", {}, True, ""),  # VF names are not the host's: count devices, do not name them
        ("roce-shared", {}, True, "mlx5_0 mlx5_1"),
        ("efa", {}, True, ""),
        ("tcp", {}, False, None),
        ("ib-sriov", {"preflight": False}, False, None),
    ],
)
def test_preflight_init_container(fab, extra, present, hcas):
    prof = profile_for(fab)
    r = resolve(job("pytorch", "fixed", **extra), prof)
    pod = pod_template(r, ["x"])["spec"]
    if not present:
        assert not init_checks(pod) and not any(v["name"] == "preflight" for v in pod["volumes"])
        return
    (init,) = init_checks(pod)
    env = {e["name"]: e["value"] for e in init["env"]}
    assert env["PREFLIGHT_GPUS"] == "8" and env["PREFLIGHT_HCAS"] == hcas
    assert env["PREFLIGHT_RDMA_DEVICES"] == str(sum(r.wiring.resources.values()))
    assert env["PREFLIGHT_INTERFACES"] == " ".join(r.wiring.interfaces)
    assert env["PREFLIGHT_SHM_BYTES"] == str(128 * 2**30)
    # Same devices as the app container (the kubelet hands them on), little memory of its own.
    app_limits = pod["containers"][0]["resources"]["limits"]
    assert {k: v for k, v in init["resources"]["limits"].items() if k not in ("memory", "cpu")} == {k: v for k, v in app_limits.items() if k not in ("memory", "cpu")}
    assert {"name": "preflight", "configMap": {"name": "fastpath-preflight"}} in pod["volumes"]
    assert init["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}


def test_preflight_configmap_ships_the_tested_script():
    from components.platform import component as platform_mod

    p = PlatformConfig.model_validate(stack_platform("prod-roce"))
    cms = platform_mod.preflight_configmaps(p)
    assert [c["metadata"]["namespace"] for c in cms] == ["training", "research"]
    assert cms[0]["data"]["preflight.sh"] == platform_mod.PREFLIGHT_SCRIPT.read_text()
    assert platform_mod.preflight_configmaps(PlatformConfig.model_validate(stack_platform("dev"))) == []


def test_job_named_like_the_acceptance_job_is_refused():
    p = stack_platform("prod-roce")  # acceptance enabled: nccl-acceptance in namespace training
    with pytest.raises(config.ConfigError, match=r"jobs\[0\]\.name: 'nccl-acceptance' is the name of a fabric"):
        stack.parse({"platform": p, "jobs": [{**GOOD, "name": "nccl-acceptance", "nodes": 2}]}, "s")
    # In another namespace the name is free.
    stack.parse({"platform": p, "jobs": [{**GOOD, "name": "nccl-acceptance", "nodes": 2, "namespace": "research"}]}, "s")


def test_files_over_a_configmaps_size_are_refused(tmp_path, monkeypatch):
    big = tmp_path / "weights.bin"
    big.write_bytes(b"x" * (1024 * 1024))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(config.ConfigError, match=r"jobs\[0\]\.files: 1048576 bytes in all; a ConfigMap holds"):
        stack.parse({"platform": stack_platform("prod-ib"), "jobs": [{**GOOD, "files": {"w": "weights.bin"}}]}, "s")
