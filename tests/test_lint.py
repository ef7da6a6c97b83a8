"""tools.lint on input nobody here wrote: never a traceback, unreadable documents named, the CrossGuard config
format in full, and the misses of real manifests (other GPU vendors, templated counts, mpirun exports, moving tags,
unknown kinds)."""

import copy
import json
import random
from pathlib import Path

import pytest
import yaml

from policies import engine
from policies.config import ConfigError
from policies.podspecs import extract
from policies.rules.fabric import add_ipc_lock
from policies.shell import shell_words
from tests.helpers import init_checks
from tools import lint
from tools.manifests import read, read_text

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "policies"
CORPUS = Path(__file__).parent / "lint_corpus"


def _rules(obj: dict, config: dict | None = None) -> set[str]:
    return {v.rule for v in lint.lint([obj], config)}


def _gpu_pod(resource: str = "nvidia.com/gpu", count=8, image="nvcr.io/nvidia/pytorch:25.10-py3", shm=True) -> dict:
    spec = {"containers": [{"name": "train", "image": image, "resources": {"limits": {resource: count, "memory": "512Gi"}}}]}
    if shm:
        spec["containers"][0]["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}]
        spec["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "training"}, "spec": spec}


# ------------------------------------------------------------------------------------------- no traceback

PYTORCH = """
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: j}
spec:
  pytorchReplicaSpecs:
    Master: {replicas: 1, template: {spec: {containers: [{name: c, image: "x:1",
                                                          resources: {limits: {nvidia.com/gpu: 1}}}]}}}
"""
ODD_SHAPES = {
    "master-null": "spec: {pytorchReplicaSpecs: {Master: null}}",
    "env-without-name": "spec: {pytorchReplicaSpecs: {Master: {template: {spec: {containers: [{name: c, env: [{value: x}, 5, null]}]}}}}}",
    "minreplicas-var": "spec: {elasticPolicy: {minReplicas: $N, maxRestarts: x}, runPolicy: {schedulingPolicy: {minAvailable: $N}, backoffLimit: [1]}}",
    "containers-as-dict": "spec: {pytorchReplicaSpecs: {Worker: {replicas: 2, template: {spec: {containers: {name: c, image: x}}}}}}",
    "spec-a-list": "spec: [1, 2]",
    "metadata-a-string": "metadata: oops",
    "labels-a-list": "metadata: {name: [a], namespace: {x: 1}, labels: [a, b]}",
    "resources-a-string": "spec: {pytorchReplicaSpecs: {Master: {template: {spec: {containers: [{name: c, resources: '8 GPUs'}]}}}}}",
    "limits-non-string-keys": "spec: {pytorchReplicaSpecs: {Master: {template: {spec: {containers: [{name: c, resources: {limits: {1: 2, null: 3}}}]}}}}}",
    "volumes-strings": "spec: {pytorchReplicaSpecs: {Master: {template: {spec: {volumes: [a, {name: 3, emptyDir: x}], containers: [{name: c, volumeMounts: [x, {mountPath: 5}]}]}}}}}",
    "command-a-string": "spec: {pytorchReplicaSpecs: {Master: {template: {spec: {containers: [{name: c, command: 'python train.py'}]}}}}}",
    "networks-annotation-odd": "spec: {pytorchReplicaSpecs: {Master: {template: {metadata: {annotations: {k8s.v1.cni.cncf.io/networks: '{\"a\": 1}'}}, spec: {containers: [{name: c, resources: {limits: {rdma/x: 1}}, env: [{name: NCCL_SOCKET_IFNAME, value: 5}]}]}}}}}",
    "dates-and-sets": "spec: {pytorchReplicaSpecs: {Master: {replicas: 2024-06-01, template: {spec: {containers: [{name: c, image: !!set {a, b}, env: [{name: SNAPSHOT, value: 2024-06-01}]}]}}}}}",
    "tolerations-odd": "spec: {pytorchReplicaSpecs: {Master: {template: {spec: {tolerations: {key: a}, nodeSelector: [a], affinity: 3, containers: [{name: c}]}}}}}",
}


@pytest.mark.parametrize("patch", list(ODD_SHAPES.values()), ids=list(ODD_SHAPES))
def test_odd_shapes_never_raise(patch):
    obj = yaml.safe_load(PYTORCH)
    obj.update(yaml.load(patch, Loader=yaml.SafeLoader))
    for kind in ("PyTorchJob", "MPIJob", "TFJob", "JobSet", "TrainJob", "TrainingRuntime", "Job", "Pod", "RayJob", "LeaderWorkerSet", "Workflow", "CronJob", "NetworkAttachmentDefinition"):
        engine.evaluate({**obj, "kind": kind})  # raising here is the bug; the CLI's safety net is not the fix
        add_ipc_lock({**obj, "kind": kind})


ODD_KINDS = [
    {"kind": "JobSet", "spec": {"replicatedJobs": [None, 3, {"name": 5, "replicas": "$R", "template": []}, {"template": {"spec": {"parallelism": "x", "template": 5}}}]}},
    {"kind": "TrainJob", "spec": {"trainer": {"numNodes": "{{ .n }}", "env": {"A": 1}, "resourcesPerNode": [1], "numProcPerNode": "$P"}}},
    {"kind": "TrainJob", "spec": {"trainer": "torch"}},
    {"kind": "ClusterTrainingRuntime", "spec": {"mlPolicy": {"numNodes": "$N", "torch": []}, "template": 7}},
    {"kind": "Job", "apiVersion": "batch.volcano.sh/v1alpha1", "spec": {"minAvailable": "$N", "tasks": {"a": 1}}},
    {"kind": "NetworkAttachmentDefinition", "spec": {"config": {"ipam": {"type": "host-local"}}}},
    {"kind": "NetworkAttachmentDefinition", "spec": {"config": '{"plugins": "x", "ipam": 5}'}},
    {"kind": "NetworkAttachmentDefinition", "spec": {"config": "[1, 2]"}},
    {"kind": "RayCluster", "spec": {"headGroupSpec": [], "workerGroupSpecs": [{"replicas": None, "template": {}}]}},
    {"kind": "LeaderWorkerSet", "spec": {"leaderWorkerTemplate": {"size": "$S", "workerTemplate": "x"}}},
    {
        "kind": "MPIJob",
        "apiVersion": "kubeflow.org/v1",
        "spec": {"mpiImplementation": ["Intel"], "mpiReplicaSpecs": {"Launcher": {"template": {"spec": {"containers": [{"name": "l", "command": ["mpirun", "-x"], "args": ["-genv", "A"]}]}}}}},
    },
    {"kind": "PersistentVolumeClaim", "metadata": {"name": ["a"], "namespace": 5}, "spec": "x"},
]


@pytest.mark.parametrize("obj", ODD_KINDS, ids=[f"{o['kind']}-{i}" for i, o in enumerate(ODD_KINDS)])
def test_odd_jobset_trainjob_and_friends_never_raise(obj):
    lint.lint([obj, {"kind": "PersistentVolumeClaim", "metadata": {"name": "c"}}])


def _mutations(value, rng: random.Random):
    """Replace one random node of `value` by something of the wrong shape."""
    junk = [None, "$N", "{{ .Values.x }}", 5, -1, 3.5, True, [], {}, [None], {"x": None}, "2024-06-01", [1, "a"]]
    nodes = []

    def walk(v, parent, key):
        nodes.append((parent, key))
        if isinstance(v, dict):
            for k, x in v.items():
                walk(x, v, k)
        elif isinstance(v, list):
            for i, x in enumerate(v):
                walk(x, v, i)

    walk(value, None, None)
    parent, key = rng.choice(nodes[1:])
    parent[key] = copy.deepcopy(rng.choice(junk))
    return value


def test_a_thousand_mutated_manifests_never_raise():
    """Seeded fuzz: every fixture and corpus object with one node swapped for a wrong shape, 1,000 times."""
    bases = [o for _, o in lint.load(sorted(FIXTURES.glob("*/*/*.yaml")))]
    bases += [o for _, _, o in read([CORPUS]).objects]
    rng = random.Random(11)
    for i in range(1000):
        obj = _mutations(copy.deepcopy(bases[i % len(bases)]), rng)
        try:
            engine.evaluate(obj)
            add_ipc_lock(obj)
        except Exception as err:  # pragma: no cover - the message is the report
            pytest.fail(f"mutation {i} of {bases[i % len(bases)].get('kind')}: {type(err).__name__}: {err}\n{obj}")


# ------------------------------------------------------------------------------------------- unreadable input


def test_unreadable_documents_are_named_and_the_rest_is_read(tmp_path):
    f = tmp_path / "mixed.yaml"
    f.write_bytes(
        b'apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  containers:\n  - {name: c, image: "caf\xe9:1"}\n'
        b"---\n"
        b"{{- if .Values.on }}\nkind: Pod\n{{- end }}\n"
        b"---\n"
        b"kind: List\nitems:\n- kind: List\n  items:\n  - {apiVersion: v1, kind: Pod, metadata: {name: deep},"
        b" spec: {containers: [{name: c, image: 'busybox'}]}}\n  - 5\n"
        b"---\n"
        b"a: &a [*a]\nkind: Pod\n"
        b"---\n"
        b"kind: [Pod]\n"
        b"---\n"
        b"kind: Pod\nmetadata: {created: 2024-13-01}\n"
        b"---\n"
        b"a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
        b"c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
        b"e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
        b"kind: Pod\n"
        b"---\n" + b"[" * 500 + b"]" * 500 + b"\n"
        b"---\n"
        b"# only a comment\n"
        b"---\n"
        b"values: {not: a kubernetes object}\n"
    )
    got = read([f, tmp_path / "missing.yaml"])
    assert [o["metadata"]["name"] for _, _, o in got.objects] == ["deep"]
    messages = [str(p) for p in got.unreadable]
    expect = [
        "document 1, line 6: bytes that are not UTF-8",
        "document 2, line 8: a Helm/Go template",
        "document 3, line 12: items[0].items[1] is int",
        "document 4, line 19: a YAML alias refers",
        "document 5, line 22: kind is ['Pod']",
        "document 6, line 24: not valid YAML: month must be in 1..12",
        "document 7, line 32: YAML aliases or merge keys expand this document to more than 1,000,000 values",  # the node that crosses it
        "document 8, line 35: nested deeper than",
        "missing.yaml: no such file or folder",
    ]
    assert len(messages) == len(expect), messages
    for m, e in zip(messages, expect, strict=True):
        assert e in m, (m, e)


@pytest.mark.parametrize(
    ("files", "code"),
    [
        (["clean"], 0),
        (["advisory"], 0),
        (["broken"], 2),
        (["broken", "advisory"], 2),
        (["broken", "mandatory"], 1),
        (["mandatory"], 1),
        (["missing", "clean"], 2),
    ],
)
def test_exit_codes_mandatory_first_then_unreadable(tmp_path, capsys, files, code):
    docs = {"clean": FIXTURES / "shm-size" / "pass" / "pod.yaml", "advisory": FIXTURES / "nccl-debug-trace" / "fail" / "trace.yaml", "mandatory": FIXTURES / "image-pinned" / "fail" / "latest.yaml"}
    (tmp_path / "broken.yaml").write_text("kind: Pod\nspec: [\n")
    paths = [str(docs.get(f, tmp_path / f"{f}.yaml")) for f in files]
    assert lint.main(paths) == code
    err = capsys.readouterr().err
    assert ("broken.yaml: document 1, line" in err) == ("broken" in files)


def test_stdin_and_utf16(tmp_path, monkeypatch, capsys):
    text = (FIXTURES / "image-pinned" / "fail" / "latest.yaml").read_text()
    f = tmp_path / "utf16.yaml"
    f.write_bytes(text.encode("utf-16"))
    assert lint.main([str(f)]) == 1
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    assert lint.main(["-"]) == 1
    assert "image-pinned mandatory" in capsys.readouterr().out


def test_document_numbers_follow_markers():
    got = read_text(Path("x.yaml"), "# head\n---\n--- {kind: Pod, spec: [}\n...\n%YAML 1.1\n---\nkind: Pod\n")
    assert [str(p) for p in got.unreadable] == ["x.yaml: document 1, line 3: not valid YAML: did not find expected node content"]
    assert [n for _, n, _ in got.objects] == [2]


# ------------------------------------------------------------------------------------------- config


def _fail_obj() -> dict:
    (obj,) = [o for _, o in lint.load([FIXTURES / "image-pinned" / "fail" / "latest.yaml"])]
    return obj


@pytest.mark.parametrize(
    ("config", "levels"),
    [
        ({"all": "disabled"}, set()),
        ({"all": {"enforcementLevel": "advisory"}}, {"advisory"}),
        ({"all": "advisory", "image-pinned": "mandatory"}, {"mandatory"}),
        ({"image-pinned": "disabled"}, set()),
        ({"image-pinned": {"enforcementLevel": "advisory"}}, {"advisory"}),
        ({"image-pinned": {"exemptNamespaces": ["training"]}}, set()),
        ({"image-pinned": "remediate"}, {"mandatory"}),  # no remediation: CrossGuard treats it as mandatory
        ({}, {"mandatory"}),
        (None, {"mandatory"}),
    ],
)
def test_crossguard_config_forms(config, levels):
    assert {v.level for v in lint.lint([_fail_obj()], config)} == levels


def test_mixed_rules_advisory_policy_is_configurable():
    obj = _load_fixture("nccl-known-vars", "fail", "deprecated")
    assert {v.level for v in lint.lint([obj])} == {"advisory"}
    assert lint.lint([obj], {"nccl-known-vars-advisory": "disabled"}) == []
    assert {v.level for v in lint.lint([obj], {"nccl-known-vars-advisory": "mandatory"})} == {"mandatory"}
    assert {v.level for v in lint.lint([obj], {"nccl-known-vars": "disabled"})} == {"advisory"}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"image-pined": "disabled"}, "image-pined: no policy of that name in this pack: did you mean 'image-pinned'?"),
        ({"shm-size": "warn"}, "shm-size: 'warn' is not an enforcement level: use one of advisory, mandatory"),
        ({"shm-size": {"enforcementLevel": 1}}, "shm-size.enforcementLevel: 1 is not an enforcement level"),
        ({"all": "strict"}, "all: 'strict' is not an enforcement level"),
        ({"shm-size": None}, "shm-size: None is not a valid value; must be an enforcement level string or an object"),
        ({"shm-size": {"minGibPerGpu": 2}}, "shm-size.minGibPerGpu: shm-size has no such setting: did you mean 'minGiBPerGpu'?"),
        ({"shm-size": {"minGiBPerGpu": "2"}}, "shm-size.minGiBPerGpu: '2' is not a"),
        ({"shm-size": {"exemptNamespaces": "training"}}, "is not a list of namespace names"),
        ({"shm-size": {"exemptLabels": {"a": 1}}}, "is not a mapping of label keys to string values"),
        (["shm-size"], "the policy config is list, not a mapping"),
    ],
)
def test_bad_config_is_refused_with_the_fix(config, message):
    with pytest.raises(ConfigError) as err:
        lint.lint([], config)
    assert message in str(err.value)


def test_cli_config_errors_exit_2_before_linting(tmp_path, capsys):
    cfg = tmp_path / "policy.json"
    cfg.write_text(json.dumps({"all": "advisory", "nccl-ib-hac": {"enforcementLevel": "disabled"}}))
    assert lint.main([str(FIXTURES), "--config", str(cfg)]) == 2
    err = capsys.readouterr()
    assert err.out == "" and f"{cfg}: nccl-ib-hac: no policy of that name" in err.err and "'nccl-ib-hca'" in err.err
    cfg.write_text("{not json: [")
    assert lint.main([str(FIXTURES), "--config", str(cfg)]) == 2
    assert "not valid JSON or YAML" in capsys.readouterr().err
    cfg.write_text("")  # empty: CrossGuard reads no config at all
    assert lint.main([str(FIXTURES / "shm-size" / "pass"), "--config", str(cfg)]) == 0
    cfg.write_text(json.dumps({"all": {"enforcementLevel": "advisory"}}))
    assert lint.main([str(FIXTURES), "--config", str(cfg)]) == 0  # every finding advisory: exit 0


# ------------------------------------------------------------------------------------------- fewer misses


def _load_fixture(rule_id: str, kind: str, name: str) -> dict:
    (obj,) = [o for _, o in lint.load([FIXTURES / rule_id / kind / f"{name}.yaml"])]
    return obj


@pytest.mark.parametrize("resource", ["nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/i915", "gpu.intel.com/xe", "habana.ai/gaudi", "nvidia.com/mig-1g.10gb", "nvidia.com/gpu.shared"])
def test_every_gpu_resource_counts(resource):
    assert _rules(_gpu_pod(resource)) == set()
    assert _rules(_gpu_pod(resource, shm=False)) == {"shm-mounted"}
    assert _rules(_gpu_pod(resource, count=128)) == {"shm-size"}  # 64Gi for 128 GPUs


@pytest.mark.parametrize("count", ["$GPUS", "${GPUS}", "{{ .Values.gpus }}", "<gpus>", "eight"])
def test_templated_gpu_counts_are_reported_unknown(count):
    (v,) = lint.lint([_gpu_pod(count=count)])
    assert v.rule == "judgeable" and v.level == "advisory" and "not a number" in v.message
    assert _rules(_gpu_pod(count=count, shm=False)) == {"judgeable", "shm-mounted"}  # still a GPU container


@pytest.mark.parametrize(
    ("image", "flagged"),
    [
        ("tensorflow/tensorflow:latest-gpu", True),
        ("rayproject/ray:nightly", True),
        ("rayproject/ray:nightly-gpu", True),
        ("example.org/app:main", True),
        ("example.org/app:master", True),
        ("example.org/app", True),
        ("example.org/app:latest", True),
        ("example.org/app:py3.11-latest", True),
        ("example.org/app:stable", True),
        ("example.org/app:main-3f2a9c1", False),
        ("example.org/app:nightly-2024-06-01", False),
        ("nvcr.io/nvidia/pytorch:25.10-py3", False),
        ("example.org/app@sha256:" + "a" * 64, False),
        ("registry:5000/app:1.2", False),
        ("registry:5000/app", True),
        ("example.org/app:devel-12.4", False),
    ],
)
def test_moving_tags_are_unpinned(image, flagged):
    assert (_rules(_gpu_pod(image=image)) == {"image-pinned"}) is flagged, image


def _mpijob(launcher_args: list[str], launcher_env=None, implementation=None, worker_env=None) -> dict:
    job = _load_fixture("nccl-net-set", "pass", "mpijob-exported")
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    launcher["command"] = ["mpirun", *launcher_args, "python", "train.py"]
    launcher["env"] = [{"name": k, "value": v} for k, v in (launcher_env or {}).items()]
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    worker["env"] = [e for e in worker.get("env") or [] if not e["name"].startswith("NCCL_")]
    worker["env"] += [{"name": k, "value": v} for k, v in (worker_env or {}).items()]
    if implementation:
        job["spec"]["mpiImplementation"] = implementation
    return job


HCA = "=mlx5_0,mlx5_1"


@pytest.mark.parametrize(
    ("args", "env", "impl", "expect"),
    [
        (["-x", f"NCCL_IB_HCA={HCA}", "-x", "NCCL_NET=IB"], {}, None, set()),  # was a nccl-ib-hca false positive
        (["-x", "NCCL_IB_HCA", "-x", "NCCL_NET"], {"NCCL_IB_HCA": HCA, "NCCL_NET": "IB"}, None, set()),
        (["-genv", "NCCL_IB_HCA", HCA, "-genv", "NCCL_NET=IB"], {}, None, set()),
        (["-genvlist", "NCCL_IB_HCA,NCCL_NET"], {"NCCL_IB_HCA": HCA, "NCCL_NET": "IB"}, None, set()),
        ([], {"NCCL_IB_HCA": HCA, "NCCL_NET": "IB"}, "Intel", set()),  # Hydra forwards the launcher's environment
        ([], {"NCCL_IB_HCA": HCA, "NCCL_NET": "IB"}, None, {"nccl-ib-hca", "nccl-net-set"}),  # Open MPI does not
        (["-x", f"NCCL_IB_HCA={HCA}", "-x", "NCCL_NET=IB", "-x", "NCCL_IB_DISABLE=1"], {}, None, {"nccl-ib-enabled"}),
        (["-x", f"NCCL_IB_HCA={HCA}", "-x", "NCCL_NET=IB", "-x", "NCCL_DEBUG=TRACE"], {}, None, {"nccl-debug-trace"}),
        (["-x", f"NCCL_IB_HCA={HCA}", "-x", "NCCL_NET=IB", "-x", "NCCL_IB_GID_INDEX=true"], {}, None, {"nccl-int-values"}),
        (["-x", "NCCL_IB_HCA=mlx5_1,mlx5_10", "-x", "NCCL_NET=IB"], {}, None, {"nccl-ib-hca"}),
        (["-x", f"NCCL_IB_HCA={HCA}", "-x", "NCCL_NET=IB", "-x", "NCCL_SOCKET_IFNAME=ib0"], {}, None, {"nccl-socket-ifname"}),
    ],
)
def test_mpirun_exports_count_for_the_workers(args, env, impl, expect):
    assert _rules(_mpijob(args, env, impl)) == expect


def test_horovodrun_and_script_exports_reach_the_ranks():
    job = _mpijob([], {"NCCL_IB_HCA": HCA, "NCCL_NET": "IB"})
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    launcher["command"] = ["horovodrun", "-np", "16", "python", "train.py"]
    assert _rules(job) == set()
    launcher["env"] = []
    launcher["command"] = ["sh", "-c", f"export NCCL_IB_HCA={HCA} NCCL_NET=IB && mpirun -x NCCL_IB_HCA -x NCCL_NET python train.py"]
    assert _rules(job) == set()


def test_value_from_hca_counts_as_set():
    job = _mpijob(["-x", "NCCL_NET=IB"], worker_env={})
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert "nccl-ib-hca" in _rules(job)
    worker["env"].append({"name": "NCCL_IB_HCA", "valueFrom": {"configMapKeyRef": {"name": "fabric", "key": "hca"}}})
    assert "nccl-ib-hca" not in _rules(job)


def test_unknown_kind_requesting_gpus_is_reported_and_its_pod_specs_judged():
    pod = _gpu_pod(image="example.org/app:latest")
    crd = {"apiVersion": "example.org/v1", "kind": "Trainer", "metadata": {"name": "t"}, "spec": {"runner": {"template": {"metadata": {}, "spec": pod["spec"]}}}}
    found = {v.rule: v for v in lint.lint([crd])}
    assert set(found) == {"judgeable", "image-pinned"}
    assert "example.org/v1 Trainer is not a workload kind the linter knows" in found["judgeable"].message
    assert "spec.runner.template" in found["judgeable"].message
    crd["spec"]["runner"]["template"]["spec"]["containers"][0]["image"] = "example.org/app:1.0"
    cpu = copy.deepcopy(crd)
    cpu["spec"]["runner"]["template"]["spec"]["containers"][0]["resources"] = {}
    assert _rules(cpu) == set()  # no GPUs: nothing to say
    assert extract(crd).known is False


def test_hostpath_dev_shm_is_memory_backed_and_dev_infiniband_is_rdma():
    pod = _gpu_pod()
    pod["spec"]["volumes"] = [{"name": "dshm", "hostPath": {"path": "/dev/shm"}}]
    assert _rules(pod) == set()
    pod["spec"]["volumes"].append({"name": "ib", "hostPath": {"path": "/dev/infiniband"}})
    assert _rules(pod) == {"nccl-net-set"}
    pod["spec"]["containers"][0]["env"] = [{"name": "NCCL_NET", "value": "IB"}, {"name": "NCCL_IB_DISABLE", "value": "1"}]
    assert _rules(pod) == {"nccl-ib-enabled"}


def test_rendered_stacks_stay_clean_and_say_nothing(capsys):
    for stack in sorted(p.name for p in (ROOT / "rendered").iterdir() if (p / "manifests.yaml").is_file()):
        assert lint.main([str(ROOT / "rendered" / stack / "manifests.yaml")]) == 0, stack
        out = capsys.readouterr()
        assert out.out == "" and out.err == "", (stack, out)


def test_the_hostnetwork_corpus_manifest_without_its_dns_policy_fails():
    """oracle-quickstart/oci-hpc-oke's host-network MPIJob sets dnsPolicy ClusterFirstWithHostNet on both pods;
    dropped, both pods get the node's resolv.conf and each is reported."""
    (job,) = [o for _, _, o in read([CORPUS / "mpi-hostnetwork-ib.yaml"]).objects]
    assert "hostnetwork-dns" not in _rules(job)
    for replica in job["spec"]["mpiReplicaSpecs"].values():
        del replica["template"]["spec"]["dnsPolicy"]
    found = [v for v in lint.lint([job]) if v.rule == "hostnetwork-dns"]
    assert [v.message.split(" pod ")[0] for v in found] == ["Launcher", "Worker"]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("mpirun -x NCCL_NET=IB python train.py", ["mpirun", "-x", "NCCL_NET=IB", "python", "train.py"]),
        ('echo \'a  b\' "c \\"d\\" \\e" f\\ g', ["echo", "a  b", 'c "d" \\e', "f g"]),
        ("x='' y \"\"", ["x=", "y", ""]),
        ("a\tb\r\nc\x0bd", ["a", "b", "c\x0bd"]),  # shlex splits on four characters only
    ],
)
def test_shell_words_split_like_shlex(text, words):
    import shlex

    assert shell_words(text) == words == shlex.split(text)


def test_shell_words_agree_with_shlex_on_random_scripts():
    """Seeded: quotes, escapes and every kind of whitespace in any order, unclosed quotes and trailing backslashes
    included (both raise ValueError, and argv falls back to whitespace splitting)."""
    import shlex

    pieces = ["a", "b=1", " ", "\t", "\n", "\r", "\x0b", "\\", '"', "'", '\\"', '""', "''", "$X", "é", "-x"]
    rng = random.Random(3)
    for _ in range(20000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 14)))
        try:
            expected = shlex.split(text)
        except ValueError:
            with pytest.raises(ValueError):
                shell_words(text)
            continue
        assert shell_words(text) == expected, repr(text)


def test_linting_leaves_the_objects_as_they_were():
    """normalize shares what is already plain instead of copying it: nothing on the way may write to it."""
    objects = [o for _, _, o in read([CORPUS]).objects] + [o for _, o in lint.load(sorted(FIXTURES.glob("*/*/*.yaml")))]
    before = copy.deepcopy(objects)
    lint.lint(objects)
    for obj in objects:
        add_ipc_lock(obj)
    assert objects == before


def test_engine_floats_are_normalized_but_plain_objects_are_shared():
    plain = {"kind": "Pod", "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}
    assert engine.normalize(plain) is plain
    floats = {"kind": "Pod", "spec": {"replicas": 2.0, "ratio": 0.5, "items": (1.0, "a")}}
    assert engine.normalize(floats) == {"kind": "Pod", "spec": {"replicas": 2, "ratio": 0.5, "items": [1, "a"]}}
    assert floats["spec"]["replicas"] == 2.0 and isinstance(floats["spec"]["replicas"], float)


# ------------------------------------------------------------------------------------------- TrainJobs and runtimes

PROD_V2 = ROOT / "rendered" / "prod-v2" / "manifests.yaml"
README_JOB = CORPUS / "trainjob-researcher-readme.yaml"


def _prod_v2() -> list[dict]:
    return [o for _, _, o in read([PROD_V2]).objects]


def _runtime(name: str = "fastpath-torch") -> dict:
    return next(o for o in _prod_v2() if o["kind"] == "ClusterTrainingRuntime" and o["metadata"]["name"] == name)


def _readme_job() -> dict:
    (obj,) = [o for _, o in lint.load([README_JOB])]
    return obj


def test_the_corpus_trainjob_is_readmes():
    """The file linted below is the one README.md tells a researcher to `kubectl apply`."""
    readme = (ROOT / "README.md").read_text().split("## Researchers without fastpath")[1]
    block = readme.split("```yaml\n", 1)[1].split("```", 1)[0]
    body = "".join(line + "\n" for line in README_JOB.read_text().splitlines() if not line.startswith("#"))
    assert body == block


def test_readmes_trainjob_with_the_published_runtime_lints_clean_and_gets_the_fabric_wiring():
    """Linted with rendered/prod-v2 (its ClusterTrainingRuntimes), README's TrainJob is judged by the pods
    kubeflow/trainer@v2.3.0 makes from it and fastpath-torch (components/jobs/runtime_v2/controller.py effective_pod), and
    nothing is wrong with them: every rail's RDMA device, IPC_LOCK, NCCL_NET, a memory-backed /dev/shm inside the
    memory limit, the preflight, the GPU toleration and selector, one Volcano gang of four."""
    violations, problems = lint.lint_loaded(read([README_JOB, PROD_V2]))
    assert (violations, problems) == ([], [])
    from policies.runtimes import RuntimeIndex, pair

    pairing = pair(_readme_job(), RuntimeIndex(_prod_v2()))
    (node,) = pairing.effective.templates
    assert (node.role, node.replicas, node.path) == ("node", 4, "spec.template.spec.replicatedJobs[0].template.spec.template")
    spec = node.template["spec"]
    (c,) = spec["containers"]
    rails = {f"rdma/shared_rail{i}": 1 for i in range(8)}
    assert c["resources"]["limits"] == {"cpu": 200, "memory": "1800Gi", "nvidia.com/gpu": 8, **rails}
    assert c["resources"]["requests"] == c["resources"]["limits"]
    assert c["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert (env["NCCL_NET"], env["NCCL_IB_DISABLE"], env["PET_NNODES"], env["PET_NPROC_PER_NODE"]) == ("IB", "0", "4", "auto")
    assert (c["image"], c["command"]) == ("nvcr.io/nvidia/pytorch:25.10-py3", ["torchrun", "train.py", "--epochs", "3"])
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "128Gi"}} in spec["volumes"]
    assert [i["name"] for i in init_checks(spec)] == ["preflight"]
    assert spec["tolerations"] == [{"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"}]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert spec["schedulerName"] == "volcano"
    assert node.template["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "my-run"


def _patch(pod: dict) -> dict:
    return {"runtimePatches": [{"manager": "example.com/me", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": pod}}}]}}}}]}


def _gpus(n: int, **more) -> dict:
    return {"nvidia.com/gpu": n, **more}


# (id, what the TrainJob adds to README's, text of the trainjob-runtime finding, every rule that fires). Each is a
# way kubeflow/trainer@v2.3.0 lets a TrainJob take the runtime's wiring (components/jobs/runtime_v2/judge.py); where an
# existing rule also sees the damage in the merged pod, it fires beside trainjob-runtime, which names the field.
STRIPS = [
    (
        "rail-zeroed",
        {"trainer": {"resourcesPerNode": {"limits": _gpus(8, **{"rdma/shared_rail0": 0}), "requests": _gpus(8, **{"rdma/shared_rail0": 0})}}},
        "sets limits.rdma/shared_rail0 to 0, the runtime gives 1",
        {"trainjob-runtime"},
    ),
    ("gpu-limit-only", {"trainer": {"resourcesPerNode": {"limits": _gpus(4)}}}, "nvidia.com/gpu requests 8 and limits 4 after the merge", {"trainjob-runtime"}),
    ("no-gpu-count", {"trainer": {"resourcesPerNode": {"limits": {"memory": "1500Gi"}, "requests": {"memory": "1500Gi"}}}}, "starts one process per node on 8-GPU pods", {"trainjob-runtime"}),
    (
        "memory-under-shm",
        {"trainer": {"resourcesPerNode": {"limits": _gpus(8, memory="100Gi"), "requests": _gpus(8, memory="100Gi")}}},
        "memory limit 100Gi is not above /dev/shm 128Gi",
        {"trainjob-runtime", "shm-fits-memory"},
    ),
    ("nccl-env", {"trainer": {"env": [{"name": "NCCL_IB_HCA", "value": "=mlx5_0"}]}}, "env NCCL_IB_HCA='=mlx5_0' replaces the runtime's", {"trainjob-runtime"}),
    ("ipc-lock-dropped", _patch({"spec": {"containers": [{"name": "node", "securityContext": {"capabilities": {"add": ["SYS_PTRACE"]}}}]}}), "drops IPC_LOCK", {"trainjob-runtime", "rdma-ipc-lock"}),
    ("dshm-replaced", _patch({"spec": {"volumes": [{"name": "dshm", "hostPath": {"path": "/dev/shm"}}]}}), "replace volume dshm", {"trainjob-runtime"}),
    ("tolerations-replaced", _patch({"spec": {"tolerations": [{"key": "dedicated", "operator": "Exists"}]}}), "drop nvidia.com/gpu", {"trainjob-runtime"}),
    ("gpu-selector-changed", _patch({"spec": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}}}), "change nodeSelector nvidia.com/gpu.product", {"trainjob-runtime"}),
    ("networks-overridden", _patch({"metadata": {"annotations": {"k8s.v1.cni.cncf.io/networks": "[]"}}}), "lose their rail interfaces", {"trainjob-runtime"}),
]


@pytest.mark.parametrize(("add", "needle", "fired"), [c[1:] for c in STRIPS], ids=[c[0] for c in STRIPS])
def test_a_trainjob_stripping_the_runtimes_wiring_is_flagged(add, needle, fired):
    job = copy.deepcopy(_readme_job())
    for key, value in add.items():
        job["spec"].setdefault(key, {})
        job["spec"][key] = {**job["spec"][key], **value} if key == "trainer" else value
    runtime = _runtime()
    if "rail interfaces" in needle:  # prod-v2 is rdma-only (no Multus rails): give the runtime one
        runtime = copy.deepcopy(runtime)
        pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
        pod.setdefault("metadata", {})["annotations"] = {"k8s.v1.cni.cncf.io/networks": '[{"name":"rail0","interface":"net1"}]'}
    found = lint.lint([job, runtime])
    assert {v.rule for v in found} == fired, [(v.rule, v.message[:120]) for v in found]
    assert all(v.kind == "TrainJob" for v in found)
    own = [v for v in found if v.rule == "trainjob-runtime"]
    assert own and all(v.level == "mandatory" for v in own)
    assert any(needle in v.message for v in own), [v.message for v in own]


def test_what_the_runtime_gets_wrong_is_reported_once_on_the_runtime():
    """A runtime without /dev/shm is flagged itself, not again on each TrainJob naming it; what only the TrainJob
    brings (four pods of a runtime without podGroupPolicy) is the TrainJob's, saying which runtime's pods."""
    runtime = copy.deepcopy(_runtime())
    del runtime["spec"]["podGroupPolicy"]
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod["volumes"] = [v for v in pod["volumes"] if v["name"] != "dshm"]
    for c in pod["containers"] + pod["initContainers"]:
        c["volumeMounts"] = [m for m in c["volumeMounts"] if m["name"] != "dshm"]
    jobs = [_readme_job(), {**_readme_job(), "metadata": {"name": "other-run", "namespace": "research"}}]
    found = lint.lint([*jobs, runtime])
    on_runtime = {v.rule for v in found if v.kind == "ClusterTrainingRuntime"}
    assert on_runtime == {"shm-mounted"}
    on_jobs = [v for v in found if v.kind == "TrainJob"]
    assert [(v.name, v.rule) for v in on_jobs] == [("my-run", "gang-scheduling"), ("other-run", "gang-scheduling")]
    assert on_jobs[0].message.startswith("in the pods ClusterTrainingRuntime fastpath-torch gives it: 4 pods without gang scheduling")


def test_a_training_runtime_counts_only_in_the_trainjobs_namespace():
    """kubeflow/trainer@v2.3.0:pkg/runtime/core/trainingruntime.go looks a TrainingRuntime up in the TrainJob's
    namespace; kind defaults to ClusterTrainingRuntime."""
    job = copy.deepcopy(_readme_job())
    job["spec"]["runtimeRef"]["kind"] = "TrainingRuntime"
    runtime = copy.deepcopy(_runtime())
    runtime["kind"] = "TrainingRuntime"
    runtime["metadata"]["namespace"] = "training"
    (v,) = lint.lint([job, runtime])
    assert (v.rule, v.level) == ("trainjob-runtime", "advisory")
    assert "TrainingRuntime research/fastpath-torch, which is not among the objects checked" in v.message
    assert "kubectl get trainingruntime -n research fastpath-torch -o yaml" in v.message
    runtime["metadata"]["namespace"] = "research"
    assert lint.lint([job, runtime]) == []


def test_a_trainjob_that_cannot_be_merged_is_said_not_judged():
    job = copy.deepcopy(_readme_job())
    job["spec"].update(_patch({"spec": {}}))
    job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["name"] = "x"
    (v,) = lint.lint([job, _runtime()])
    assert (v.rule, v.level) == ("trainjob-runtime", "advisory")
    assert "could not be merged with ClusterTrainingRuntime fastpath-torch" in v.message
    assert "replicated job 'x' is not in runtime fastpath-torch" in v.message


def test_the_runtime_index_is_built_once_per_lint(monkeypatch):
    built = []

    class Counting(lint.RuntimeIndex):
        def __init__(self, objects=()):
            built.append(1)
            super().__init__(objects)

    monkeypatch.setattr(lint, "RuntimeIndex", Counting)
    lint.lint_loaded(read([PROD_V2, README_JOB]))
    lint.lint(_prod_v2())
    assert built == [1, 1]


# ----------------------------------------------------------------------------------------------- streaming


def _stream(path: Path) -> tuple[list, list]:
    from tools.manifests import Unreadable, iter_read  # noqa: PLC0415

    got = list(iter_read([path], plain=True))
    return [g for g in got if not isinstance(g, Unreadable)], [g for g in got if isinstance(g, Unreadable)]


def test_documents_are_the_ones_pyyaml_finds(tmp_path):
    """The reader splits a file line by line, one document held at a time. Where PyYAML loads the whole stream (and
    the project's stricter loader refuses nothing), the objects are PyYAML's, in order, `List`s flattened: on every
    YAML file of the project and on random mixes of the shapes that decide a split (markers with and without content
    after them, `...`, comment-only documents, CRLF, a byte-order mark, UTF-16). Bytes that are not UTF-8 are
    reported on the line that holds the first of them; a file that only PyYAML refuses is never silently empty."""
    files = sorted(ROOT.glob("tests/**/*.yaml")) + sorted(ROOT.glob("rendered/*/manifests.yaml"))
    pieces = [
        b"---\n",
        b"--- # c\n",
        b"--- {kind: Pod, metadata: {name: inline}}\n",
        b"...\n",
        b"---\r\n",
        b"# only a comment\n",
        b"%YAML 1.2\n",
        b"kind: ConfigMap\nmetadata: {name: a}\n",
        b"data: {k: v}\n",
        b"kind: Pod\r\nmetadata: {name: \xc3\xa9}\r\n",
        b"  x: ---\n",
        b"----\n",
        b"kind: List\nitems: [{kind: Pod, metadata: {name: i}}]\n",
        b"bad: [\n",
        b"\n",
    ]
    rng = random.Random(7)
    for i in range(300):
        body = b"".join(rng.choice(pieces) for _ in range(rng.randint(1, 12)))
        if i % 10 == 0:
            body = b"\xef\xbb\xbf" + body
        if i % 25 == 0:
            body = body.decode("utf-8-sig").encode("utf-16")
        f = tmp_path / f"fuzz{i}.yaml"
        f.write_bytes(body)
        files.append(f)
    compared = 0
    for f in files:
        objects, unreadable = _stream(f)
        try:
            docs = [d for d in yaml.safe_load_all(f.read_bytes()) if isinstance(d, dict) and "kind" in d]
        except yaml.YAMLError:
            text = f.read_bytes().decode("utf-16" if f.read_bytes()[:2] in (b"\xff\xfe", b"\xfe\xff") else "utf-8-sig")
            content = any(ln.strip() and not ln.lstrip().startswith(("#", "%", "---", "...")) for ln in text.splitlines())
            assert unreadable or objects or not content, f  # a refused file with content says so
            continue
        if unreadable:
            continue  # the stricter loader's refusals (duplicate keys, bombs): tests/test_yamlsafe.py
        flat = []
        for d in docs:
            flat += d.get("items") or [] if d["kind"] == "List" and "spec" not in d else [d]
        assert [o for _, _, o in objects] == [d for d in flat if isinstance(d, dict)], f
        compared += 1
    assert compared > 150
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"\xef\xbb\xbfkind: ConfigMap\nmetadata: {name: a}\n---\n# note\nkind: Pod\nmetadata: {name: \xff}\n")
    objects, unreadable = _stream(bad)
    assert [o["kind"] for _, _, o in objects] == ["ConfigMap"]
    assert [(u.document, u.line) for u in unreadable] == [(2, 6)] and "not UTF-8" in unreadable[0].message


def test_a_large_manifest_is_linted_in_a_fraction_of_its_size(tmp_path):
    """A manifest of many documents is judged one document at a time: the linter's peak Python memory stays under a
    third of the file (it held every parsed object before, 12x the file), findings aside (they are the output), and
    it finds what lint_loaded finds."""
    import tracemalloc  # noqa: PLC0415

    clean = (CORPUS / "lws-volcano-cpu.yaml").read_text()
    flagged = (CORPUS / "mpi-horovod-latest-noshm.yaml").read_text()
    big = tmp_path / "big.yaml"
    big.write_text(("---\n" + clean) * 4000 + "---\n" + flagged)  # a few MB
    tracemalloc.start()
    try:
        violations, problems = lint.lint_paths([big])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < big.stat().st_size / 3, (peak, big.stat().st_size)
    assert not problems and {v.rule for v in violations} == {"shm-mounted", "gang-scheduling", "image-pinned"}
    assert [v.as_dict() for v in violations] == [v.as_dict() for v in lint.lint_loaded(read([big], plain=True))[0]]
