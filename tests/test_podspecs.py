"""One pod-template extractor for every workload kind: each template found, with its role and replica count."""

import pytest

from policies.podspecs import pod_templates

T = {"metadata": {}, "spec": {"containers": [{"name": "c", "image": "x:1"}]}}
RS = {"replicas": 3, "template": T}

# (kind label, object, [(role, replicas, path)])
CASES = [
    ("Pod", {"kind": "Pod", "spec": T["spec"]}, [("pod", 1, "spec")]),
    ("Deployment", {"kind": "Deployment", "spec": {"replicas": 2, "template": T}}, [("pod", 2, "spec.template")]),
    ("StatefulSet", {"kind": "StatefulSet", "spec": {"replicas": 4, "template": T}}, [("pod", 4, "spec.template")]),
    ("DaemonSet", {"kind": "DaemonSet", "spec": {"template": T}}, [("daemon", 1, "spec.template")]),
    ("Job", {"apiVersion": "batch/v1", "kind": "Job", "spec": {"parallelism": 5, "template": T}},
     [("pod", 5, "spec.template")]),
    ("CronJob", {"kind": "CronJob", "spec": {"jobTemplate": {"spec": {"template": T}}}},
     [("pod", 1, "spec.jobTemplate.spec.template")]),
    ("PyTorchJob", {"kind": "PyTorchJob", "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": T},
                                                                        "Worker": RS}}},
     [("Master", 1, "spec.pytorchReplicaSpecs.Master.template"), ("Worker", 3, "spec.pytorchReplicaSpecs.Worker.template")]),
    ("MPIJob-v1", {"apiVersion": "kubeflow.org/v1", "kind": "MPIJob",
                   "spec": {"mpiReplicaSpecs": {"Launcher": {"replicas": 1, "template": T}, "Worker": RS}}},
     [("Launcher", 1, "spec.mpiReplicaSpecs.Launcher.template"), ("Worker", 3, "spec.mpiReplicaSpecs.Worker.template")]),
    ("MPIJob-v2beta1", {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
                        "spec": {"slotsPerWorker": 8, "mpiReplicaSpecs": {"Launcher": {"template": T}, "Worker": RS}}},
     [("Launcher", 1, "spec.mpiReplicaSpecs.Launcher.template"), ("Worker", 3, "spec.mpiReplicaSpecs.Worker.template")]),
    ("TFJob", {"kind": "TFJob", "spec": {"tfReplicaSpecs": {"Chief": {"replicas": 1, "template": T}, "Worker": RS}}},
     [("Chief", 1, "spec.tfReplicaSpecs.Chief.template"), ("Worker", 3, "spec.tfReplicaSpecs.Worker.template")]),
    ("TrainJob", {"kind": "TrainJob", "spec": {"runtimeRef": {"name": "torch"}, "trainer": {
        "numNodes": 4, "image": "x:1", "resourcesPerNode": {"limits": {"nvidia.com/gpu": 8}}}}},
     [("node", 4, "spec.trainer")]),
    ("ClusterTrainingRuntime", {"kind": "ClusterTrainingRuntime", "spec": {"mlPolicy": {"numNodes": 2}, "template": {
        "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": T}}}]}}}},
     [("node", 2, "spec.template.spec.replicatedJobs[0].template.spec.template")]),
    ("TrainingRuntime", {"kind": "TrainingRuntime", "spec": {"template": {"spec": {"replicatedJobs": [
        {"name": "initializer", "template": {"spec": {"template": T}}},
        {"name": "node", "replicas": 1, "template": {"spec": {"parallelism": 2, "template": T}}}]}}}},
     [("initializer", 1, "spec.template.spec.replicatedJobs[0].template.spec.template"),
      ("node", 2, "spec.template.spec.replicatedJobs[1].template.spec.template")]),
    ("VolcanoJob", {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "spec": {
        "minAvailable": 3, "tasks": [{"name": "master", "replicas": 1, "template": T},
                                     {"name": "worker", "replicas": 2, "template": T}]}},
     [("master", 1, "spec.tasks[0].template"), ("worker", 2, "spec.tasks[1].template")]),
    ("JobSet", {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "spec": {"replicatedJobs": [
        {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 4, "template": T}}}]}},
     [("workers", 8, "spec.replicatedJobs[0].template.spec.template")]),
    ("Service (no pods)", {"kind": "Service", "spec": {"ports": []}}, []),
]


@pytest.mark.parametrize(("obj", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_pod_templates(obj, expected):
    found = pod_templates(obj)
    assert [(t.role, t.replicas, t.path) for t in found] == expected
    assert all(t.template["spec"]["containers"] for t in found)
