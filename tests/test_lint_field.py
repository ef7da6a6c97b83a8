"""What real manifests taught the linter (issue 20's false alarms and misses), each case the smallest manifest
with the shape that fooled it, and the rules that must fire on it, no more and no fewer.

Upstream behaviour each case rests on:
- kubernetes SetDefaults_Pod (pkg/apis/core/v1/defaults.go): requests left unset default to the limits, so a runtime
  giving GPUs as `limits` only is valid; kubeflow/trainer@v2.3.0:manifests/base/runtimes/torchtune/*.yaml do this.
- The API server names a `metadata.generateName` object on create; the trainer derives the JobSet's names from it.
- kubernetes-sigs/jobset@v0.12.0:api/jobset/v1alpha2/jobset_types.go DependsOn: a replicated job waited on with
  status Complete has ended before the next starts, so its pods are no part of the gang.
- kubeflow/trainer@v2.3.0:pkg/runtime/framework/plugins/{jax/jax.go,xgboost/xgboost.go} EnforceMLPolicy set the
  trainer's pod count to spec.trainer.numNodes, as plainml does.
- project-codeflare/appwrapper@v1.2.1 creates each `spec.components[].template` in the AppWrapper's namespace, after
  Kueue admits the AppWrapper (labelled with the queue) as one workload.
- Mellanox/sriov-network-operator@network-operator-26.4.x:api/v1/sriovnetwork_types.go: `spec.ipam` becomes the
  rendered NetworkAttachmentDefinition's IPAM.
"""

import pytest
import yaml

from tests.helpers import cfg
from tools import lint

TORCHTUNE_RUNTIME = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: tune}
spec:
  mlPolicy: {numNodes: 1, torch: {}}
  template:
    spec:
      replicatedJobs:
      - name: model-initializer
        template:
          metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: model-initializer}}
          spec:
            template:
              spec:
                containers:
                - {name: model-initializer, image: "ghcr.io/kubeflow/trainer/model-initializer:v2.3.0"}
      - name: node
        dependsOn: [{name: model-initializer, status: Complete}]
        template:
          metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
          spec:
            template:
              spec:
                containers:
                - name: node
                  image: "ghcr.io/kubeflow/trainer/torchtune-trainer:v2.3.0"
                  resources: {limits: {nvidia.com/gpu: 2, memory: 64Gi}}
                  volumeMounts: [{name: dshm, mountPath: /dev/shm}]
                volumes: [{name: dshm, emptyDir: {medium: Memory, sizeLimit: 8Gi}}]
"""

JAX_RUNTIME = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: jax}
spec:
  mlPolicy: {numNodes: 1, jax: {}}
  template:
    spec:
      replicatedJobs:
      - name: node
        template:
          metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
          spec:
            template:
              spec:
                containers:
                - name: node
                  image: "nvcr.io/nvidia/jax:25.10-py3"
                  volumeMounts: [{name: dshm, mountPath: /dev/shm}]
                volumes: [{name: dshm, emptyDir: {medium: Memory, sizeLimit: 8Gi}}]
"""


def train_job(runtime: str, meta: str = "name: run", trainer: str = "") -> str:
    return f"""
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {{{meta}, namespace: team}}
spec:
  runtimeRef: {{name: {runtime}}}
  {trainer}
"""


def pytorch_job(master_cmd: str, working_dir: str = "", volumes: str = "", mounts: str = "") -> str:
    wd = f"workingDir: {working_dir}" if working_dir else ""
    return f"""
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {{name: p, namespace: team}}
spec:
  runPolicy: {{cleanPodPolicy: Running, schedulingPolicy: {{minAvailable: 2}}}}
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          schedulerName: volcano
          containers:
          - name: pytorch
            image: "nvcr.io/nvidia/pytorch:25.10-py3"
            {wd}
            command: {master_cmd}
            resources: {{limits: {{nvidia.com/gpu: 1, memory: 32Gi}}}}
            volumeMounts: [{{name: dshm, mountPath: /dev/shm}}{mounts}]
          volumes: [{{name: dshm, emptyDir: {{medium: Memory, sizeLimit: 1Gi}}}}{volumes}]
    Worker:
      replicas: 1
      template:
        spec:
          schedulerName: volcano
          containers:
          - name: pytorch
            image: "nvcr.io/nvidia/pytorch:25.10-py3"
            resources: {{limits: {{nvidia.com/gpu: 1, memory: 32Gi}}}}
            volumeMounts: [{{name: dshm, mountPath: /dev/shm}}]
          volumes: [{{name: dshm, emptyDir: {{medium: Memory, sizeLimit: 1Gi}}}}]
"""


RPING_POD = """
apiVersion: v1
kind: Pod
metadata:
  name: rping-server
  namespace: default
  annotations: {k8s.v1.cni.cncf.io/networks: rdma-net-ipam}
spec:
  containers:
  - name: rdma
    image: "docker.io/mellanox/rping-test:0.1"
    command: [sh, -c, "ls -l /dev/infiniband; rping -svd -a $(hostname -i)"]
    securityContext: {capabilities: {add: [IPC_LOCK]}}
    resources: {limits: {rdma/rdma_shared_device_a: 1}}
"""

APPWRAPPER = """
apiVersion: workload.codeflare.dev/v1beta2
kind: AppWrapper
metadata:
  name: llama-ft
  namespace: team
  labels: {QUEUE}
spec:
  components:
  - template:
      apiVersion: kubeflow.org/v1
      kind: PyTorchJob
      metadata: {name: llama-ft}
      spec:
        runPolicy: {cleanPodPolicy: Running}
        pytorchReplicaSpecs:
          Master:
            replicas: 1
            template:
              spec:
                containers:
                - name: pytorch
                  image: "quay.io/team/llama-ft:latest"
                  resources: {limits: {nvidia.com/gpu: 8, memory: 512Gi}}
                  volumeMounts: [{name: dshm, mountPath: /dev/shm}]
                volumes: [{name: dshm, emptyDir: {medium: Memory, sizeLimit: 64Gi}}]
          Worker:
            replicas: 3
            template:
              spec:
                containers:
                - name: pytorch
                  image: "quay.io/team/llama-ft:v1.2"
                  resources: {limits: {nvidia.com/gpu: 8, memory: 512Gi}}
                  volumeMounts: [{name: dshm, mountPath: /dev/shm}]
                volumes: [{name: dshm, emptyDir: {medium: Memory, sizeLimit: 64Gi}}]
"""

SRIOV_NETWORK = """
apiVersion: sriovnetwork.openshift.io/v1
kind: SriovNetwork
metadata: {name: rdma-vf, namespace: sriov-network-operator}
spec:
  resourceName: mlnx_vf
  networkNamespace: team
  ipam: '{IPAM}'
"""

# id -> (manifest, rules that must fire, substring one of the messages must hold or None)
CASES = {
    # Runtime GPUs as limits only (requests default to them) and a generateName TrainJob: merged and judged, clean.
    "runtime-gpu-limits-only-generate-name": (
        TORCHTUNE_RUNTIME + "---" + train_job("tune", meta="generateName: tune-"),
        set(),
        None,
    ),
    # The same TrainJob asking a different GPU request than the runtime's limit: the pod is invalid.
    "gpu-request-differs-from-limit": (
        TORCHTUNE_RUNTIME + "---" + train_job("tune", meta="generateName: tune-", trainer="trainer: {resourcesPerNode: {requests: {nvidia.com/gpu: 1}}}"),
        {"trainjob-runtime"},
        "requests 1 and limits 2 after the merge",
    ),
    # Initializers that complete before the trainer starts are no gang: a 1-node torchtune run needs none.
    "initializers-are-no-part-of-the-gang": (TORCHTUNE_RUNTIME, set(), None),
    # ... but 2 trainer nodes are a gang.
    "two-trainer-nodes-are-a-gang": (
        TORCHTUNE_RUNTIME + "---" + train_job("tune", trainer="trainer: {numNodes: 2}"),
        {"gang-scheduling"},
        "2 pods without gang scheduling",
    ),
    # JAX's plugin sets the pod count from numNodes like the others: 4 nodes without a gang are found.
    "jax-num-nodes-is-the-gang": (
        JAX_RUNTIME + "---" + train_job("jax", trainer="trainer: {numNodes: 4, resourcesPerNode: {limits: {nvidia.com/gpu: 8}}}"),
        {"gang-scheduling", "shm-fits-memory"},
        "4 pods without gang scheduling",
    ),
    # A TrainJob seen without its runtime takes the runtime's image: no "has no image".
    "trainer-alone-without-image": (
        train_job("torch-distributed", trainer="trainer: {numNodes: 2, command: [torchrun, train.py]}"),
        {"trainjob-runtime"},
        None,
    ),
    # A launcher the runtime does not wire: deepspeed on a torch runtime ignores torchrun's PET_* rendezvous.
    "deepspeed-on-a-torch-runtime": (
        TORCHTUNE_RUNTIME + "---" + train_job("tune", trainer="trainer: {command: [deepspeed, --num_gpus=2, train.py]}"),
        {"trainjob-runtime"},
        "starts deepspeed on a torch runtime",
    ),
    "deepspeed-under-sh-on-a-torch-runtime": (
        TORCHTUNE_RUNTIME + "---" + train_job("tune", trainer="trainer: {command: [sh, -c, 'deepspeed train.py']}"),
        {"trainjob-runtime"},
        "starts deepspeed on a torch runtime",
    ),
    "torchrun-on-a-torch-runtime": (
        TORCHTUNE_RUNTIME + "---" + train_job("tune", trainer="trainer: {command: [torchrun, train.py]}"),
        set(),
        None,
    ),
    # Relative checkpoint paths land on the container's own disk: under workingDir when set, the image's otherwise.
    "relative-checkpoint-dir-under-working-dir": (
        pytorch_job("[python, train.py, --checkpoint_dir, ./checkpoints]", working_dir="/work"),
        {"checkpoint-rwx"},
        "--checkpoint_dir=/work/checkpoints is on the container's own filesystem",
    ),
    "relative-checkpoint-file": (
        pytorch_job("[python, train.py, --checkpoint-file=ckpt/model.pt]"),
        {"checkpoint-rwx"},
        "(relative: under the image's working directory)",
    ),
    # ... and one under a claim mounted at the working directory's subfolder is fine (no claim object: not judged).
    "relative-checkpoint-dir-on-a-claim": (
        pytorch_job(
            "[python, train.py, --checkpoint_dir=ckpt]",
            working_dir="/work",
            volumes=", {name: store, persistentVolumeClaim: {claimName: store}}",
            mounts=", {name: store, mountPath: /work/ckpt}",
        ),
        set(),
        None,
    ),
    # A flag that only begins with the mount's path is not under it.
    "checkpoint-dir-beside-a-mount": (
        pytorch_job(
            "[python, train.py, --checkpoint_dir=/ckpt2]",
            volumes=", {name: store, persistentVolumeClaim: {claimName: store}}",
            mounts=", {name: store, mountPath: /ckpt}",
        ),
        {"checkpoint-rwx"},
        "--checkpoint_dir=/ckpt2 is on the container's own filesystem",
    ),
    # An RDMA test pod without GPUs runs no NCCL: IPC_LOCK matters, the NCCL rules do not.
    "rdma-pod-without-nccl": (RPING_POD, set(), None),
    "rdma-pod-without-ipc-lock": (RPING_POD.replace("securityContext: {capabilities: {add: [IPC_LOCK]}}", ""), {"rdma-ipc-lock"}, None),
    # A GPU pod that runs perftest and then trains is a training pod: the NCCL rules judge it.
    "perftest-then-training": (
        RPING_POD.replace('command: [sh, -c, "ls -l /dev/infiniband; rping -svd -a $(hostname -i)"]', "command: [sh, -c, 'ib_write_bw -d mlx5_0 && torchrun train.py']").replace(
            "resources: {limits: {rdma/rdma_shared_device_a: 1}}", "resources: {limits: {rdma/rdma_shared_device_a: 1, nvidia.com/gpu: 1}}"
        ),
        {"nccl-net-set", "nccl-ib-hca", "shm-mounted"},
        None,
    ),
    # ... unless it sets NCCL variables: then it means to run NCCL.
    "rdma-pod-setting-nccl": (
        RPING_POD.replace("    resources:", "    env: [{name: NCCL_DEBUG, value: INFO}]\n    resources:"),
        {"nccl-net-set", "nccl-ib-hca"},
        None,
    ),
    # A wrapped PyTorchJob is judged; its gang is the AppWrapper's Kueue admission.
    "appwrapper-in-a-queue": (APPWRAPPER.replace("{QUEUE}", "{kueue.x-k8s.io/queue-name: team-queue}"), {"image-pinned"}, "spec.components[0] (PyTorchJob llama-ft): Master container"),
    "appwrapper-without-a-queue": (APPWRAPPER.replace("{QUEUE}", "{}"), {"image-pinned", "gang-scheduling"}, "4 pods without gang scheduling"),
    # IPAM inside the operator's network CR is the NAD's IPAM.
    "sriov-network-host-local": (SRIOV_NETWORK.replace("{IPAM}", '{"type": "host-local", "subnet": "10.56.217.0/24"}'), {"nad-cluster-ipam"}, "host-local"),
    "sriov-network-nv-ipam": (SRIOV_NETWORK.replace("{IPAM}", '{"type": "nv-ipam", "poolName": "rail1"}'), set(), None),
    "sriov-network-bad-ipam": (SRIOV_NETWORK.replace("{IPAM}", "type: host-local"), {"nad-cluster-ipam"}, "not a JSON object"),
}


@pytest.mark.parametrize("case", CASES)
def test_field_shapes(case):
    text, rules, message = CASES[case]
    found = lint.lint([d for d in yaml.safe_load_all(text) if d])
    assert {v.rule for v in found} == rules, [(v.rule, v.message) for v in found]
    if message is not None:
        assert any(message in v.message for v in found), [v.message for v in found]


def test_a_partial_node_trainjob_on_a_whole_node_runtime_is_told_what_it_holds(rendered):
    """A researcher's "4-GPU" TrainJob on fastpath's 8-GPU torch runtime: the preflight init container still asks
    for 8 GPUs (a pod holds the larger of init and app requests) and resourcesPerNode keeps the runtime's CPU and
    memory (merged per key), so each pod blocks a whole node. The linter says both, with the shares to set."""
    objs = rendered("prod-v2").objects
    runtime = next(o for o in objs if o["kind"] == "ClusterTrainingRuntime" and o["metadata"]["name"] == "fastpath-torch")
    half = {"limits": {"nvidia.com/gpu": 4}, "requests": {"nvidia.com/gpu": 4}}
    job = yaml.safe_load(train_job("fastpath-torch", trainer="trainer: {numNodes: 2}"))
    job["metadata"]["namespace"] = "research"
    job["spec"]["trainer"]["resourcesPerNode"] = half
    messages = [v.message for v in lint.lint([runtime, job]) if v.rule == "trainjob-runtime"]
    node_cpu = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"]
    assert any("init container preflight requests 8: the pod's effective request is the larger" in m for m in messages), messages
    assert any(f"keeps its cpu request {node_cpu}" in m and f"its share: {int(node_cpu) // 2}" in m for m in messages), messages
    assert any("keeps its memory request" in m for m in messages), messages
    # With its own CPU and memory, only the init container's GPUs remain.
    job["spec"]["trainer"]["resourcesPerNode"] = {p: {**half[p], "cpu": 8, "memory": "512Gi"} for p in half}
    messages = [v.message for v in lint.lint([runtime, job]) if v.rule == "trainjob-runtime"]
    assert len(messages) == 1 and "init container preflight" in messages[0], messages


def test_a_trainjob_outside_the_namespaces_a_fastpath_runtime_serves_is_refused(rendered):
    """fastpath's runtimes name their networks without a namespace and mount a claim by name: Multus and the kubelet
    look in the TrainJob's namespace, so elsewhere the pods never start. The runtime says which it serves."""
    objs = rendered("prod-v2").objects
    runtime = next(o for o in objs if o["kind"] == "ClusterTrainingRuntime" and o["metadata"]["name"] == "fastpath-torch")
    served = cfg("prod-v2").training_namespaces
    assert runtime["metadata"]["annotations"]["fastpath.dev/namespaces"].split(",") == served
    # No namespace: `kubectl create -n` decides, so it is not judged.
    for namespace, refused in [(served[0], False), ("vision", True), (None, False)]:
        job = yaml.safe_load(train_job("fastpath-torch", trainer="trainer: {numNodes: 2}"))
        job["metadata"].pop("namespace")
        if namespace:
            job["metadata"]["namespace"] = namespace
        messages = [v.message for v in lint.lint([runtime, job]) if v.rule == "trainjob-runtime"]
        assert any("which fastpath-torch does not serve" in m for m in messages) == refused, (namespace, messages)
