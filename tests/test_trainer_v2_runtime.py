"""Trainer v2 runtimes and TrainJobs: valid against the upstream CRDs, and the controller's merge reproduced as read
at kubeflow/trainer@v2.3.0 and kubernetes-sigs/jobset@v0.12.0."""

import copy

import pytest
import yaml

from components.fabric import wiring as fabric
from components.jobs.runtime_v2.build import NodeShape, cluster_training_runtime, train_job
from components.jobs.runtime_v2.controller import effective_jobset, effective_pod
from components.jobs.runtime_v2.judge import override_problems
from components.model.config import FabricConfig
from tools.schemas import validate
from tools.upstream import path as upstream_file


def upstream(name: str) -> dict:
    return yaml.safe_load(upstream_file(f"manifests/kubeflow-trainer_runtime_{name}.yaml").read_text())


def rails(n):
    return [{"hca": f"mlx5_{i}", "interface": f"ibp{i}", "subnet": f"10.{i}.0.0/16", "speedGbps": 400} for i in range(n)]


FABRICS = {
    "ib-shared": {"kind": "infiniband", "attachment": "shared", "rails": rails(2)},
    "ib-sriov": {"kind": "infiniband", "attachment": "sriov", "rails": rails(2)},
    "roce-shared": {"kind": "roce", "attachment": "shared", "rails": rails(2)},
    "efa": {"kind": "efa", "efaDevicesPerNode": 32},
    "tcp": {"kind": "tcp"},
}


def shape(fab="ib-shared", **kw) -> NodeShape:
    wiring = fabric.pod_wiring(FabricConfig.model_validate(FABRICS[fab]), "ml", 8, 8)
    args = dict(
        wiring=wiring,
        image="nvcr.io/nvidia/pytorch:25.10-py3",
        gpus=8,
        memory_gib=1800,
        shm_gib=128,
        cpus=200,
        gpu_product="NVIDIA-H100-80GB-HBM3",
        gpu_taint_key="nvidia.com/gpu",
        queue="training",
        priority_class="training-normal",
        checkpoint_claim="checkpoints",
        preflight_config_map="preflight",
        preflight_env={"PREFLIGHT_GPUS": "8"},
        max_restarts=5,
    )
    args.update(kw)
    return NodeShape(**args)


def env_of(container: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def container(pod: dict, name: str = "node") -> dict:
    return next(c for c in pod["spec"]["containers"] if c["name"] == name)


@pytest.mark.parametrize("framework", ["torch", "mpi", "plain"])
@pytest.mark.parametrize("fab", sorted(FABRICS))
def test_runtime_and_train_job_validate_against_upstream_crds(framework, fab):
    """ClusterTrainingRuntime and TrainJob schemas: kubeflow/trainer@v2.3.0:manifests/base/crds/
    (upstream.lock.yaml crds/trainer.kubeflow.org_*.yaml); the derived JobSet against
    kubernetes-sigs/jobset@v0.12.0:config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml."""
    rt = cluster_training_runtime(f"fastpath-{framework}", framework, shape(fab))
    tj = train_job(
        "llama",
        rt["metadata"]["name"],
        namespace="ml",
        command=["torchrun", "train.py"],
        num_nodes=4,
        queue="research",
        env={"WANDB_PROJECT": "llama"},
        resources_per_node={"limits": {"nvidia.com/gpu": 8}, "requests": {"nvidia.com/gpu": 8}},
    )
    assert validate(rt) == []
    assert validate(tj) == []
    js = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "llama"}, "spec": effective_jobset(tj, rt)["jobset"]}
    assert validate(js) == []


def test_unknown_framework_is_refused():
    with pytest.raises(ValueError, match="expected one of torch, mpi, plain"):
        cluster_training_runtime("x", "tensorflow", shape())


def test_upstream_torch_runtime_effective_pod():
    """kubeflow/trainer@v2.3.0: manifests/base/runtimes/torch_distributed.yaml merged with a TrainJob as
    pkg/runtime/framework/plugins/torch/torch.go EnforceMLPolicy (PET_* after the job's env, master
    `<job>-node-0-0.<job>:29500`, "auto" with GPUs), pkg/runtime/core/trainingruntime.go newRuntimeInfo
    (resourcesPerNode merged into `node`) and plugins/jobset/builder.go Trainer (image, command replaced)."""
    tj = train_job("mnist", "torch-distributed", image="my/image:1", command=["torchrun", "train.py"], num_nodes=3, env={"EPOCHS": "3"}, resources_per_node={"limits": {"nvidia.com/gpu": 2}})
    js = effective_jobset(tj, upstream("torch_distributed"))
    node = js["jobset"]["replicatedJobs"][0]
    assert node["replicas"] == 1
    assert (node["template"]["spec"]["parallelism"], node["template"]["spec"]["completions"]) == (3, 3)
    pod = node["template"]["spec"]["template"]
    c = container(pod)
    assert (c["image"], c["command"]) == ("my/image:1", ["torchrun", "train.py"])
    assert c["resources"] == {"limits": {"nvidia.com/gpu": 2}}
    assert c["env"] == [
        {"name": "EPOCHS", "value": "3"},
        {"name": "PET_NNODES", "value": "3"},
        {"name": "PET_NPROC_PER_NODE", "value": "auto"},
        {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}},
        {"name": "PET_MASTER_ADDR", "value": "mnist-node-0-0.mnist"},
        {"name": "PET_MASTER_PORT", "value": "29500"},
    ]
    assert c["ports"] == [{"containerPort": 29500}]
    # JobSet webhook defaults (kubernetes-sigs/jobset@v0.12.0:pkg/webhooks/jobset_webhook.go Default).
    assert pod["spec"]["restartPolicy"] == "OnFailure"
    assert js["podGroup"] is None


def test_torch_without_gpus_counts_cpus():
    """torch.go EnforceMLPolicy: no GPU in the resources means numProcPerNode = max(1, CPU request)."""
    tj = train_job("cpu", "torch-distributed", resources_per_node={"requests": {"cpu": "4"}})
    assert env_of(container(effective_pod(tj, upstream("torch_distributed"))))["PET_NPROC_PER_NODE"] == "4"


def test_upstream_deepspeed_runtime_effective_jobset():
    """kubeflow/trainer@v2.3.0: manifests/base/runtimes/deepspeed_distributed.yaml under
    pkg/runtime/framework/plugins/mpi/mpi.go EnforceMLPolicy: runLauncherAsNode makes the `node` job numNodes - 1
    pods, slots become the GPU count, the launcher's container (named `node`) gets the hostfile and OMPI env, both
    get the SSH secret at sshAuthMountPath; builder.go Trainer puts the command on the launcher only and the env
    on both."""
    tj = train_job("ds", "deepspeed-distributed", command=["mpirun", "python", "train.py"], num_nodes=4, env={"EPOCHS": "1"}, resources_per_node={"limits": {"nvidia.com/gpu": 4}})
    js = effective_jobset(tj, upstream("deepspeed_distributed"))
    assert js["counts"] == {"node": 3, "launcher": 1}
    node, launcher = js["jobset"]["replicatedJobs"]
    worker, lc = container(node["template"]["spec"]["template"]), container(launcher["template"]["spec"]["template"])
    assert worker["command"] == ["/usr/sbin/sshd"]
    assert lc["command"] == ["mpirun", "python", "train.py"]
    assert env_of(worker) == {"EPOCHS": "1"}
    assert env_of(lc) == {
        "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
        "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
        "OMPI_MCA_orte_set_default_slots": "4",
        "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
        "EPOCHS": "1",
    }
    assert worker["resources"] == lc["resources"] == {"limits": {"nvidia.com/gpu": 4}}
    assert worker["volumeMounts"] == [{"name": "mpi-ssh-auth", "mountPath": "/home/mpiuser/.ssh"}]
    assert lc["volumeMounts"] == [{"name": "mpi-ssh-auth", "mountPath": "/home/mpiuser/.ssh"}, {"name": "mpi-hostfile", "mountPath": "/etc/mpi"}]
    assert [v["name"] for v in launcher["template"]["spec"]["template"]["spec"]["volumes"]] == ["mpi-ssh-auth", "mpi-hostfile"]


def test_resources_per_node_merges_per_key_and_rdma_survives():
    """kubeflow/trainer@v2.3.0:pkg/util/trainingruntime/trainingruntime.go MergeResourceRequirements: limits and
    requests merge per resource name, so a TrainJob setting GPUs, CPU and memory keeps the rails."""
    rt = cluster_training_runtime("fastpath-torch", "torch", shape())
    tj = train_job(
        "llama",
        "fastpath-torch",
        command=["torchrun", "train.py"],
        resources_per_node={"limits": {"nvidia.com/gpu": 8, "cpu": 100, "memory": "900Gi"}, "requests": {"nvidia.com/gpu": 8, "cpu": 100, "memory": "900Gi"}},
    )
    c = container(effective_pod(tj, rt))
    assert c["resources"]["limits"] == {"nvidia.com/gpu": 8, "memory": "900Gi", "cpu": 100, "rdma/shared_rail0": 1, "rdma/shared_rail1": 1}
    assert override_problems(tj, rt) == []


def test_fabric_wiring_in_the_effective_pod():
    """What a published runtime gives every TrainJob that names it, whatever the job writes in `trainer`."""
    rt = cluster_training_runtime("fastpath-torch", "torch", shape())
    pod = effective_pod(train_job("llama", "fastpath-torch", command=["torchrun", "train.py"], num_nodes=2), rt)
    c = container(pod)
    assert pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == (
        '[{"name":"rail0-shared","namespace":"ml","interface":"net1"},{"name":"rail1-shared","namespace":"ml","interface":"net2"}]'
    )
    assert c["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    assert {k: v for k, v in env_of(c).items() if k.startswith("NCCL_NET")} == {"NCCL_NET": "IB"}
    assert c["resources"]["limits"]["memory"] == "1800Gi"
    assert pod["spec"]["volumes"][0] == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "128Gi"}}
    assert [i["name"] for i in pod["spec"]["initContainers"]] == ["preflight"]
    assert pod["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert pod["spec"]["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert c["volumeMounts"][1] == {"name": "checkpoints", "mountPath": "/checkpoints", "subPathExpr": "$(FASTPATH_TRAINJOB)"}
    assert (pod["spec"]["schedulerName"], pod["spec"]["restartPolicy"]) == ("volcano", "Never")


def test_volcano_pod_group_and_queue():
    """kubeflow/trainer@v2.3.0:pkg/runtime/framework/plugins/volcano/volcano.go: minMember sums every replicated
    job's pods (the MPI launcher too), minResources their requests; the queue is the JobSet template's
    `scheduling.volcano.sh/queue-name` annotation, which a runtime patch overrides (trainingruntime.go
    newRuntimeInfo); priority from the pod template; pods get only the group-name annotation."""
    rt = cluster_training_runtime("fastpath-mpi", "mpi", shape())
    js = effective_jobset(train_job("acc", "fastpath-mpi", command=["mpirun", "x"], num_nodes=3), rt)
    assert js["counts"] == {"node": 2, "launcher": 1}
    assert js["podGroup"] == {
        "minMember": 3,
        "queue": "training",
        "priorityClassName": "training-normal",
        "minResources": {"cpu": 600, "memory": "5400Gi", "nvidia.com/gpu": 24, "rdma/shared_rail0": 3, "rdma/shared_rail1": 3},
    }
    for rjob in js["jobset"]["replicatedJobs"]:
        assert rjob["template"]["spec"]["template"]["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "acc"
    patched = effective_jobset(train_job("acc", "fastpath-mpi", num_nodes=3, queue="research"), rt)
    assert patched["podGroup"]["queue"] == "research"


def test_failure_policy_is_a_gang_restart_and_a_failed_preflight_ends_the_run():
    """kubernetes-sigs/jobset@v0.12.0:pkg/controllers/failure_policy.go: a failed Job with no matching rule takes
    RestartJobSet (all Jobs recreated, counted against maxRestarts); the rule matches the Job failure reason
    `PodFailurePolicy`, which the Job's podFailurePolicy gives a preflight exit 3. jobset_controller.go
    constructJobsFromTemplate: BlockingRecreate creates nothing until the previous Jobs are gone."""
    rt = cluster_training_runtime("fastpath-torch", "torch", shape(max_restarts=5))
    spec = rt["spec"]["template"]["spec"]
    assert spec["failurePolicy"] == {
        "maxRestarts": 5,
        "restartStrategy": "BlockingRecreate",
        "rules": [
            {
                "name": "preflight",
                "action": "FailJobSet",
                "onJobFailureReasons": ["PodFailurePolicy"],
                "onJobFailureMessagePatterns": [r"^Container (preflight) for pod \S+ failed with exit code 3 matching FailJob rule"],
            },
            {
                # The reaper's condition (components/ops/reaper.py): a pod that cannot start ends the run.
                "name": "start_failed",
                "action": "FailJobSet",
                "onJobFailureReasons": ["PodFailurePolicy"],
                "onJobFailureMessagePatterns": [r"^Pod \S+ has condition fastpath.dev/StartFailed matching FailJob rule"],
            },
            {
                "name": "disruption",
                "action": "RestartJobSetAndIgnoreMaxRestarts",
                "onJobFailureReasons": ["PodFailurePolicy"],
                "onJobFailureMessagePatterns": [r"^Pod \S+ has condition DisruptionTarget matching FailJob rule"],
            },
        ],
    }
    job = spec["replicatedJobs"][0]["template"]["spec"]
    assert job["backoffLimit"] == 0
    assert job["podFailurePolicy"] == {
        "rules": [
            {"action": "FailJob", "onExitCodes": {"containerName": "preflight", "operator": "In", "values": [3]}},
            {"action": "FailJob", "onPodConditions": [{"type": "fastpath.dev/StartFailed", "status": "True"}]},
            {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        ]
    }
    assert validate(rt) == []


def patched_job(**pod_spec) -> dict:
    tj = train_job("llama", "fastpath-torch", command=["torchrun", "train.py"])
    tj["spec"]["runtimePatches"] = [
        {"manager": "example.com/user", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": pod_spec}}}]}}}}
    ]
    return tj


# (id, TrainJob, text a finding must contain, number of findings)
OVERRIDES = [
    (
        "rail-zeroed",
        train_job("llama", "fastpath-torch", resources_per_node={"limits": {"nvidia.com/gpu": 8, "rdma/shared_rail0": 0}, "requests": {"nvidia.com/gpu": 8}}),
        "limits.rdma/shared_rail0 to 0",
        2,
    ),  # and requests 1 != limits 0
    # Also named: the preflight still holds 8 GPUs, and the node's CPU and memory stay the pod's (test_lint_field.py).
    ("gpu-limit-only", train_job("llama", "fastpath-torch", resources_per_node={"limits": {"nvidia.com/gpu": 4}}), "nvidia.com/gpu requests 8 and limits 4", 4),
    ("no-gpu-in-resources", train_job("llama", "fastpath-torch", resources_per_node={"limits": {"cpu": 100}, "requests": {"cpu": 100}}), "one process per node", 1),
    (
        "memory-under-shm",
        train_job("llama", "fastpath-torch", resources_per_node={"limits": {"nvidia.com/gpu": 8, "memory": "100Gi"}, "requests": {"nvidia.com/gpu": 8, "memory": "100Gi"}}),
        "not above /dev/shm 128Gi",
        1,
    ),
    ("nccl-env", train_job("llama", "fastpath-torch", env={"NCCL_IB_HCA": "mlx5_0"}), "env NCCL_IB_HCA", 1),
    ("tolerations", patched_job(spec={"tolerations": [{"key": "other", "operator": "Exists"}]}), "drop nvidia.com/gpu", 1),
    ("networks", patched_job(metadata={"annotations": {"k8s.v1.cni.cncf.io/networks": "[]"}}), "lose their rail interfaces", 1),
    ("capabilities", patched_job(spec={"containers": [{"name": "node", "securityContext": {"capabilities": {"add": ["SYS_PTRACE"]}}}]}), "drops IPC_LOCK", 1),
    ("shm-volume", patched_job(spec={"volumes": [{"name": "dshm", "hostPath": {"path": "/dev/shm"}}]}), "replace volume dshm", 1),
]


@pytest.mark.parametrize("tj, needle, count", [c[1:] for c in OVERRIDES], ids=[c[0] for c in OVERRIDES])
def test_override_problems_name_what_the_train_job_took(tj, needle, count):
    """Overrides the kubeflow/trainer@v2.3.0 merge lets through: per-key resource merge
    (pkg/util/trainingruntime/trainingruntime.go), env upsert by name (pkg/apply/apply.go), runtime patches as a strategic merge patch
    (mergeRuntimePatches: tolerations replaced whole, annotations per key, volumes by name with retainKeys)."""
    rt = cluster_training_runtime("fastpath-torch", "torch", shape())
    found = override_problems(tj, rt)
    assert any(needle in f for f in found), found
    assert len(found) == count, found


def test_patch_volume_keeps_the_medium_when_only_the_source_is_patched():
    """Volumes merge by name with retainKeys (k8s.io/api core/v1 PodSpec.Volumes patchStrategy merge,retainKeys):
    a patch naming dshm with an emptyDir merges into the runtime's emptyDir; only another source replaces it."""
    rt = cluster_training_runtime("fastpath-torch", "torch", shape())
    pod = effective_pod(patched_job(spec={"volumes": [{"name": "dshm", "emptyDir": {"sizeLimit": "64Gi"}}]}), rt)
    assert pod["spec"]["volumes"][0] == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}}


def test_patch_naming_an_unknown_replicated_job_is_refused():
    """plugins/jobset/jobset.go Validate: "must not have replicated job that doesn't exist in the runtime"."""
    tj = patched_job(spec={"nodeSelector": {"a": "b"}})
    tj["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["name"] = "x"
    with pytest.raises(ValueError, match="replicated job 'x' is not in runtime fastpath-torch"):
        effective_jobset(tj, cluster_training_runtime("fastpath-torch", "torch", shape()))


def test_effective_jobset_does_not_touch_its_inputs():
    rt = cluster_training_runtime("fastpath-mpi", "mpi", shape())
    tj = train_job("a", "fastpath-mpi", num_nodes=4, env={"X": "1"}, queue="q")
    before = copy.deepcopy((rt, tj))
    effective_jobset(tj, rt)
    assert (rt, tj) == before
