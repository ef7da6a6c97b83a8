"""One pod-template extractor for every workload kind: each template found, with its role and replica count."""

import pytest

from policies.podspecs import extract, pod_templates, walk

T = {"metadata": {}, "spec": {"containers": [{"name": "c", "image": "x:1"}]}}
RS = {"replicas": 3, "template": T}

# (kind label, object, [(role, replicas, path)])
CASES = [
    ("Pod", {"kind": "Pod", "spec": T["spec"]}, [("pod", 1, "spec")]),
    ("Deployment", {"kind": "Deployment", "spec": {"replicas": 2, "template": T}}, [("pod", 2, "spec.template")]),
    ("StatefulSet", {"kind": "StatefulSet", "spec": {"replicas": 4, "template": T}}, [("pod", 4, "spec.template")]),
    ("DaemonSet", {"kind": "DaemonSet", "spec": {"template": T}}, [("daemon", 1, "spec.template")]),
    ("Job", {"apiVersion": "batch/v1", "kind": "Job", "spec": {"parallelism": 5, "template": T}}, [("pod", 5, "spec.template")]),
    ("CronJob", {"kind": "CronJob", "spec": {"jobTemplate": {"spec": {"template": T}}}}, [("pod", 1, "spec.jobTemplate.spec.template")]),
    (
        "PyTorchJob",
        {"kind": "PyTorchJob", "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": T}, "Worker": RS}}},
        [("Master", 1, "spec.pytorchReplicaSpecs.Master.template"), ("Worker", 3, "spec.pytorchReplicaSpecs.Worker.template")],
    ),
    (
        "MPIJob-v1",
        {"apiVersion": "kubeflow.org/v1", "kind": "MPIJob", "spec": {"mpiReplicaSpecs": {"Launcher": {"replicas": 1, "template": T}, "Worker": RS}}},
        [("Launcher", 1, "spec.mpiReplicaSpecs.Launcher.template"), ("Worker", 3, "spec.mpiReplicaSpecs.Worker.template")],
    ),
    (
        "MPIJob-v2beta1",
        {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "spec": {"slotsPerWorker": 8, "mpiReplicaSpecs": {"Launcher": {"template": T}, "Worker": RS}}},
        [("Launcher", 1, "spec.mpiReplicaSpecs.Launcher.template"), ("Worker", 3, "spec.mpiReplicaSpecs.Worker.template")],
    ),
    (
        "TFJob",
        {"kind": "TFJob", "spec": {"tfReplicaSpecs": {"Chief": {"replicas": 1, "template": T}, "Worker": RS}}},
        [("Chief", 1, "spec.tfReplicaSpecs.Chief.template"), ("Worker", 3, "spec.tfReplicaSpecs.Worker.template")],
    ),
    (
        "TrainJob",
        {"kind": "TrainJob", "spec": {"runtimeRef": {"name": "torch"}, "trainer": {"numNodes": 4, "image": "x:1", "resourcesPerNode": {"limits": {"nvidia.com/gpu": 8}}}}},
        [("node", 4, "spec.trainer")],
    ),
    (
        "ClusterTrainingRuntime",
        {"kind": "ClusterTrainingRuntime", "spec": {"mlPolicy": {"numNodes": 2}, "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": T}}}]}}}},
        [("node", 2, "spec.template.spec.replicatedJobs[0].template.spec.template")],
    ),
    (
        "TrainingRuntime",
        {
            "kind": "TrainingRuntime",
            "spec": {
                "template": {
                    "spec": {
                        "replicatedJobs": [{"name": "initializer", "template": {"spec": {"template": T}}}, {"name": "node", "replicas": 1, "template": {"spec": {"parallelism": 2, "template": T}}}]
                    }
                }
            },
        },
        [("initializer", 1, "spec.template.spec.replicatedJobs[0].template.spec.template"), ("node", 2, "spec.template.spec.replicatedJobs[1].template.spec.template")],
    ),
    (
        "VolcanoJob",
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "spec": {"minAvailable": 3, "tasks": [{"name": "master", "replicas": 1, "template": T}, {"name": "worker", "replicas": 2, "template": T}]},
        },
        [("master", 1, "spec.tasks[0].template"), ("worker", 2, "spec.tasks[1].template")],
    ),
    (
        "JobSet",
        {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 4, "template": T}}}]}},
        [("workers", 8, "spec.replicatedJobs[0].template.spec.template")],
    ),
    (
        "RayCluster",
        {"kind": "RayCluster", "spec": {"headGroupSpec": {"template": T}, "workerGroupSpecs": [{"groupName": "gpu", "replicas": 4, "template": T}, {"minReplicas": 2, "template": T}]}},
        [("head", 1, "spec.headGroupSpec.template"), ("gpu", 4, "spec.workerGroupSpecs[0].template"), ("worker1", 2, "spec.workerGroupSpecs[1].template")],
    ),
    (
        # A multi-host group: each replica is numOfHosts pods (kubernetes-sigs/kueue@v0.19.2:pkg/controller/jobs/
        # raycluster/common.go effectiveWorkerCount), 3 x 4 = 12 GPU pods to gang.
        "RayCluster-multi-host",
        {"kind": "RayCluster", "spec": {"workerGroupSpecs": [{"groupName": "tpu", "replicas": 3, "numOfHosts": 4, "template": T}]}},
        [("tpu", 12, "spec.workerGroupSpecs[0].template")],
    ),
    (
        "RayJob",
        {"kind": "RayJob", "spec": {"rayClusterSpec": {"headGroupSpec": {"template": T}}, "submitterPodTemplate": T}},
        [("head", 1, "spec.rayClusterSpec.headGroupSpec.template"), ("submitter", 1, "spec.submitterPodTemplate")],
    ),
    (
        "RayService",
        {"kind": "RayService", "spec": {"rayClusterConfig": {"workerGroupSpecs": [{"groupName": "w", "replicas": 2, "template": T}]}}},
        [("w", 2, "spec.rayClusterConfig.workerGroupSpecs[0].template")],
    ),
    (
        "LeaderWorkerSet",
        {"kind": "LeaderWorkerSet", "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 4, "leaderTemplate": T, "workerTemplate": T}}},
        [("leader", 2, "spec.leaderWorkerTemplate.leaderTemplate"), ("worker", 6, "spec.leaderWorkerTemplate.workerTemplate")],
    ),
    (
        "LeaderWorkerSet-no-leader",
        {"kind": "LeaderWorkerSet", "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 4, "workerTemplate": T}}},
        [("worker", 8, "spec.leaderWorkerTemplate.workerTemplate")],
    ),
    (
        "unknown kind (searched)",
        {"kind": "Notebook", "spec": {"template": T, "extra": {"podSpec": T["spec"]}}},
        [("spec.template", 1, "spec.template"), ("spec.extra.podSpec", 1, "spec.extra.podSpec")],
    ),
    ("Service (no pods)", {"kind": "Service", "spec": {"ports": []}}, []),
    ("SriovNetworkNodePolicy (no pods)", {"kind": "SriovNetworkNodePolicy", "spec": {"numVfs": 8, "template": T}}, []),
]


@pytest.mark.parametrize(("obj", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_pod_templates(obj, expected):
    found = pod_templates(obj)
    assert [(t.role, t.replicas, t.path) for t in found] == expected
    assert all(t.template["spec"]["containers"] for t in found)


@pytest.mark.parametrize(
    ("obj", "problem"),
    [
        ({"kind": "PyTorchJob", "spec": {"pytorchReplicaSpecs": {"Master": None, "Worker": RS}}}, "spec.pytorchReplicaSpecs.Master is null: no pods judged for it"),
        (
            {"kind": "PyTorchJob", "spec": {"pytorchReplicaSpecs": {"Worker": {**RS, "replicas": "$N"}}}},
            "spec.pytorchReplicaSpecs.Worker.replicas is str '$N', not a number (a template variable?): counted as 1",
        ),
        ({"kind": "Pod", "spec": {"containers": {"name": "c"}}}, "spec.containers is dict"),
        ({"kind": "Pod", "spec": {"containers": [{"name": "c", "env": [{"value": "1"}]}]}}, "spec.containers[0].env[0] has no name"),
        ({"kind": "JobSet", "spec": {"replicatedJobs": {"a": 1}}}, "spec.replicatedJobs is dict"),
        ({"kind": "TrainJob", "spec": {"trainer": [1]}}, "spec.trainer is list [1], not a mapping"),
        ({"kind": "Job", "spec": [1]}, "spec is list [1], not a mapping"),
    ],
)
def test_shapes_it_cannot_read_are_listed_not_raised(obj, problem):
    found = extract(obj)
    assert any(problem in p for p in found.problems), found.problems
    assert all(isinstance(c, dict) for t in found.templates for c in t.template["spec"]["containers"])


def _visited(value, prune_at: str | None = None, limit: int = 12) -> list[str]:
    seen: list[str] = []

    def visit(mapping: dict, path: str) -> bool:
        seen.append(path)
        return path == prune_at

    walk(value, "spec", visit, limit)
    return seen


WALKED = {"a": {"b": [{"c": 1}, 2, [{"d": {}}]], "metadata": {"x": {}}, "status": {"y": {}}}, "e": "f"}


@pytest.mark.parametrize(
    ("prune_at", "limit", "expected"),
    [
        (None, 12, ["spec", "spec.a", "spec.a.b[0]", "spec.a.b[2][0]", "spec.a.b[2][0].d"]),
        ("spec.a", 12, ["spec", "spec.a"]),  # a visit that returns True ends the walk below it
        (None, 3, ["spec", "spec.a", "spec.a.b[0]"]),  # mappings and lists both count towards the depth
    ],
)
def test_one_walk_parents_first_without_metadata_or_status(prune_at, limit, expected):
    assert _visited(WALKED, prune_at, limit) == expected


def test_a_runtimes_jobset_as_the_controller_fills_it_in_reads_like_the_runtime():
    """policies/runtimes.py judges a TrainJob by jobset_templates(effective_jobset(...)): same roles and paths as the
    runtime's own templates, so one finding reads the same on both; the pod count is the Job's parallelism."""
    from policies.podspecs import jobset_templates

    jobs = [{"name": "node", "replicas": 1, "template": {"spec": {"parallelism": 4, "template": {"spec": {"containers": [{"name": "node", "image": "x:1"}]}}}}}]
    runtime = {"kind": "ClusterTrainingRuntime", "spec": {"mlPolicy": {"numNodes": 1}, "template": {"spec": {"replicatedJobs": jobs}}}}
    (own,) = extract(runtime).templates
    (merged,) = jobset_templates(jobs).templates
    assert (merged.role, merged.path) == (own.role, own.path) == ("node", "spec.template.spec.replicatedJobs[0].template.spec.template")
    assert (own.replicas, merged.replicas) == (1, 4)
