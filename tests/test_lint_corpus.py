"""The linter on real-world training manifests, judged by hand.

Each fixture in tests/lint_corpus/ is written afresh in the shape of a public manifest (its source named in a
comment at the top) and keeps the property that matters. The table says which rules must fire on it, no more and
no fewer, and how many documents must be reported unreadable; the comment beside each row is the judgment.
"""

import json
from pathlib import Path

import pytest

from tools import lint
from tools.manifests import read

CORPUS = Path(__file__).parent / "lint_corpus"

# file -> (rule ids expected, unreadable documents expected)
TABLE = {
    # 8-GPU workers with an unsized /dev/shm (advisory), `latest` images, 3 pods and no gang scheduler.
    "mpi-nccl-tests-latest.yaml": ({"shm-size", "gang-scheduling", "image-pinned"}, 0),
    # The MPIJob document does not parse (indentation): reported, not judged; the ConfigMap beside it is read.
    "mpi-deepspeed-bad-indent.yaml": (set(), 1),
    # No /dev/shm at all on GPU workers; `latest`; no gang.
    "mpi-horovod-latest-noshm.yaml": ({"shm-mounted", "gang-scheduling", "image-pinned"}, 0),
    # CPU elastic job: only the unset cleanPodPolicy matters (no GPUs: no gang, no shm rules).
    "pytorch-elastic-cpu.yaml": ({"clean-pod-policy"}, 0),
    # Everything a first DeepSpeed demo gets wrong, including --checkpoint_dir on the pod's own disk.
    "pytorch-deepspeed-latest.yaml": ({"shm-mounted", "gang-scheduling", "clean-pod-policy", "checkpoint-rwx", "image-pinned"}, 0),
    # Unsized /dev/shm (advisory), 2 GPU pods without gang, cleanPodPolicy unset. The rc0 tag is pinned.
    "paddle-gpu-unsized-shm.yaml": ({"shm-size", "gang-scheduling", "clean-pod-policy"}, 0),
    # hostNetwork + /dev/infiniband is RDMA: NCCL_NET unset. HCAs come from mpirun -x with `=`: fine. Both pods set
    # dnsPolicy ClusterFirstWithHostNet, so no hostnetwork-dns (test_lint: the same file without it fails).
    "mpi-hostnetwork-ib.yaml": ({"shm-fits-memory", "nccl-net-set", "gang-scheduling"}, 0),
    # NCCL_IB_HCA exported by `mpirun -x` counts (no nccl-ib-hca false positive); NCCL_NET unset.
    "mpi-sriov-vf-exported-hca.yaml": ({"shm-fits-memory", "nccl-net-set", "gang-scheduling"}, 0),
    # `-x NCCL_IB_DISABLE=1` reaches the ranks on RDMA workers: IB off. Kueue label: gang-scheduled.
    "mpi-exported-ib-disable.yaml": ({"shm-fits-memory", "nccl-ib-enabled"}, 0),
    # amd.com/gpu counts; minAvailable 0 is the whole gang (Volcano's webhook sets it to the tasks' replicas: the
    # first judgment said "no gang", corrected by reading patchDefaultMinAvailable); /dev/shm without a memory
    # limit (advisory).
    "volcano-amd-rccl.yaml": ({"shm-fits-memory"}, 0),
    # envsubst template: counts and image unknown (judgeable), HF_TOKEN will be a literal, EFA without IPC_LOCK
    # or NCCL_NET, cleanPodPolicy unset. The host's /dev/shm by hostPath is memory-backed: no shm finding.
    "pytorch-efa-envsubst.yaml": ({"judgeable", "env-no-secrets", "rdma-ipc-lock", "nccl-net-set", "clean-pod-policy"}, 0),
    # RayJob head on a GPU without /dev/shm (RayJob was an unread kind before).
    "rayjob-gpu-head-noshm.yaml": ({"shm-mounted"}, 0),
    # GPU sharing by annotation, no GPU resource: nothing to judge, nothing wrong.
    "raycluster-gpu-fraction.yaml": (set(), 0),
    # CPU JobSet: only the `latest` image.
    "jobset-cpu-latest.yaml": ({"image-pinned"}, 0),
    # TrainJob of 3 nodes whose runtime is not in the file: its pods (gang, shm, wiring) are not judged and the
    # runtime is named (advisory); the trainer's own `alpine:latest` is.
    "trainjob-alpine-latest.yaml": ({"trainjob-runtime", "image-pinned"}, 0),
    # A pinned trainer whose runtime is not in the file: only the advisory naming the runtime (its own
    # podGroupPolicy, an older API, does not stand in for the runtime's pods).
    "trainjob-volcano-podgroup.yaml": ({"trainjob-runtime"}, 0),
    # README's ten-line TrainJob alone: nothing wrong in what it writes, its runtime named as not seen.
    "trainjob-researcher-readme.yaml": ({"trainjob-runtime"}, 0),
    # DRA-claimed NICs are not seen as RDMA (known miss); 1-GPU workers without /dev/shm, no gang.
    "mpi-dra-nic-no-shm.yaml": ({"shm-mounted", "gang-scheduling"}, 0),
    # `<your_project>` is a placeholder in the path but the tag `latest` is literal: unpinned.
    "pytorch-mnist-placeholder-image.yaml": ({"shm-mounted", "gang-scheduling", "image-pinned"}, 0),
    # An unrendered Helm template: unreadable, told to render it first.
    "helm-tfjob-template.yaml": (set(), 1),
    # Unknown legacy kind: its pod spec is found and judged as one pod (`latest`); the legacy GPU resource is not
    # one the linter counts, so no judgeable note.
    "tfjob-legacy-gpu-resource.yaml": ({"image-pinned"}, 0),
    # LeaderWorkerSet: 15Gi of /dev/shm is enough for 8 GPUs; the `$HUGGING_FACE_HUB_TOKEN` literal is not.
    "lws-vllm-templated-token.yaml": ({"env-no-secrets"}, 0),
    # Old CPU MPIJob: only `latest`.
    "mpi-horovod-v1alpha2-cpu.yaml": ({"image-pinned"}, 0),
    # CPU LeaderWorkerSet on Volcano with a pinned image: clean.
    "lws-volcano-cpu.yaml": (set(), 0),
}


def test_every_corpus_file_is_judged_and_names_its_source():
    assert {p.name for p in CORPUS.glob("*.yaml")} == set(TABLE)
    assert len(TABLE) >= 20
    for p in CORPUS.glob("*.yaml"):
        assert p.read_text().startswith("# source: "), f"{p.name}: name the public manifest it is modelled on"


def test_the_corpus_exits_1_and_names_the_unreadable_documents(capsys):
    assert lint.main([str(CORPUS)]) == 1
    err = capsys.readouterr().err
    assert "mpi-deepspeed-bad-indent.yaml: document 2, line " in err
    assert "helm-tfjob-template.yaml: document 1, line " in err and "helm template" in err


# --------------------------------------------------------------------------------------- the field corpus
# 45 manifests from 20 public repositories (tests/lint_corpus/field/, each naming its source), judged by hand before the
# linter ran on them (tests/lint_corpus/field/judgment.json, unchanged since). Against that judgment the linter had
# precision 0.800 and recall 0.867 (72 true findings, 18 false alarms, 11 misses) at 3858602; after the fixes this
# corpus taught (test_lint_field.py) 0.876 and 0.940 (78, 11, 5). The rows where it still differs from the judgment
# say why; the table is what the linter must find, no more and no fewer.
FIELD = CORPUS / "field"
FIELD_TABLE = {
    # the image has a literal tag (`:v1`) behind `$PROJECT_ID`: judged pinned, by design (judged judgeable first).
    "aigke-team-a-jobset.yaml": ({"shm-mounted"}, 0),
    "appwrapper-pytorchjob.yaml": ({"clean-pod-policy"}, 0),
    # a GPU pod on the host network without ClusterFirstWithHostNet: the rule judges every host-network pod of a GPU workload, a diagnostic pod too (judged out of scope first).
    "cos-bug-report-pod.yaml": ({"hostnetwork-dns", "image-pinned", "judgeable", "shm-mounted"}, 0),
    "ds2qdu-multinode-trainjob.yaml": ({"shm-mounted"}, 0),
    "eks-fsdp-llama3-pytorchjob.yaml": ({"checkpoint-rwx", "clean-pod-policy", "env-no-secrets", "gang-scheduling", "nccl-net-set", "rdma-ipc-lock"}, 0),
    "eks-nccl-gb200-mpijob.yaml": ({"gang-scheduling", "image-pinned", "nccl-net-set", "rdma-ipc-lock"}, 0),
    "eks-nccl-tests-mpijob.yaml": ({"gang-scheduling", "judgeable", "nccl-net-set", "rdma-ipc-lock"}, 0),
    "gke-a3-tcpx-pods.yaml": ({"shm-mounted"}, 0),
    # /dev/shm without a memory limit is shm-fits-memory's advisory half (judged not applicable first; the judge agreed on reading the rule).
    "gke-a4-gib-jobset.yaml": ({"image-pinned", "shm-fits-memory"}, 0),
    # a /dev/shm without sizeLimit has none of minGiBPerGpu (advisory; judged fine first, the judge agreed on reading the rule).
    "gke-finetune-l4-kueue.yaml": ({"shm-size"}, 0),
    # as gke-a4-gib-jobset: the advisory half.
    "gke-tcpxo-indexed-job.yaml": ({"gang-scheduling", "shm-fits-memory", "shm-size"}, 0),
    "hyperpod-imagenet-elastic.yaml": ({"checkpoint-rwx", "clean-pod-policy", "image-pinned", "shm-mounted"}, 0),
    "jaxtb-mpi-nccl-test.yaml": ({"gang-scheduling", "judgeable", "nccl-net-set", "rdma-ipc-lock"}, 0),
    # a CPU JobSet: gang and checkpoint rules judge GPU workloads only (judged by their titles first).
    "jobset-ckpt-rwo-pvc.yaml": ({"image-pinned"}, 0),
    "kueue-mpijob-pi.yaml": ({"image-pinned"}, 0),
    "kueue-provreq-gpu-job.yaml": ({"shm-mounted"}, 0),
    # as gke-finetune-l4-kueue.
    "lws-tensorrt-llm.yaml": ({"env-no-secrets", "judgeable", "shm-size"}, 0),
    "lws-vllm-multinode.yaml": ({"env-no-secrets"}, 0),
    "mpiop-tf-benchmarks.yaml": ({"gang-scheduling", "image-pinned", "shm-mounted"}, 0),
    "multus-sriov-hostlocal.yaml": ({"image-pinned", "nad-cluster-ipam"}, 0),
    "netop-cuda-perftest-pod.yaml": ({"image-pinned", "shm-mounted"}, 0),
    "netop-nicclusterpolicy.yaml": (set(), 0),
    "netop-rping-pod.yaml": ({"image-pinned"}, 0),
    "netop-sriov-legacy-nvipam.yaml": (set(), 0),
    # as gke-a4-gib-jobset.
    "oci-h100-hostnet-mpijob.yaml": ({"nccl-net-set", "shm-fits-memory"}, 0),
    # NCCL_IB_HCA=mlx5 matches every mlx5 device: a choice on a node whose mlx5 ports are all compute rails, not flagged (judged a miss).
    "oci-h100-vf-mpijob.yaml": ({"nccl-net-set", "shm-fits-memory"}, 0),
    "oci-ib-write-bw-pods.yaml": (set(), 0),
    "oci-sriov-pool-100pct.yaml": ({"sriov-pool-drain"}, 0),
    # as gke-finetune-l4-kueue.
    "oci-yolo-pytorchjob.yaml": ({"clean-pod-policy", "gang-scheduling", "image-pinned", "nccl-net-set", "shm-size"}, 0),
    # as gke-a4-gib-jobset; minAvailable 0 is the whole gang (Volcano's webhook).
    "oci-yolo-volcano-job.yaml": ({"gpu-pod-tolerates-quarantine", "image-pinned", "nccl-net-set", "shm-fits-memory"}, 0),
    # podTemplateOverrides is not a v2.3.0 field, so the runtime's pods have no /dev/shm (the judge agreed); numProcPerNode 1 against 2 GPUs is not compared (a miss).
    "odh-mpi-sft-trainjob.yaml": ({"gang-scheduling", "image-pinned", "shm-mounted"}, 0),
    "rdma-shared-hca-test-pod.yaml": ({"image-pinned"}, 0),
    "sriovdp-rdma-mlnx.yaml": ({"judgeable"}, 0),
    "sriovop-hostlocal-network.yaml": ({"nad-cluster-ipam"}, 0),
    "sriovop-rdma-exclusive-setup.yaml": ({"image-pinned", "nad-cluster-ipam"}, 0),
    "tr-flux-lammps-gpu.yaml": ({"gang-scheduling", "image-pinned", "shm-mounted"}, 0),
    "tr-kueue-trainjob.yaml": ({"trainjob-runtime"}, 0),
    "tr-runtime-patches.yaml": ({"trainjob-runtime"}, 0),
    "tr-torchtune-runtime.yaml": ({"shm-mounted"}, 0),
    "tr-v1-deepspeed-pytorchjob.yaml": ({"checkpoint-rwx", "clean-pod-policy", "gang-scheduling", "image-pinned", "shm-mounted"}, 0),
    # as gke-finetune-l4-kueue.
    "tr-v1-paddle-gpu.yaml": ({"clean-pod-policy", "gang-scheduling", "shm-size"}, 0),
    "tr-volcano-runtime.yaml": (set(), 0),
    "volcano-benchmark-conf.yaml": (set(), 0),
    "volcano-capacity-reclaim.yaml": ({"volcano-gang-actions"}, 0),
    "volcano-gangpreempt-camelcase.yaml": ({"volcano-gang-actions"}, 0),
}


def test_every_field_file_is_judged_and_names_its_source():
    assert {p.name for p in FIELD.glob("*.yaml")} == set(FIELD_TABLE)
    judged = json.loads((FIELD / "judgment.json").read_text())
    assert set(judged) == set(FIELD_TABLE)
    for p in FIELD.glob("*.yaml"):
        assert p.read_text().startswith("# source: https://github.com/"), p.name


def test_field_corpus_against_the_first_judgment():
    """Precision and recall against the judgment written before the linter ran: reported, and held from falling."""
    judged = json.loads((FIELD / "judgment.json").read_text())
    tp = sum(len(FIELD_TABLE[n][0] & set(j["expected"])) for n, j in judged.items())
    alarms = sum(len(FIELD_TABLE[n][0] - set(j["expected"])) for n, j in judged.items())
    misses = sum(len(set(j["expected"]) - FIELD_TABLE[n][0]) for n, j in judged.items())
    assert tp / (tp + alarms) >= 0.87 and tp / (tp + misses) >= 0.93, (tp, alarms, misses)


def _judged() -> dict[str, tuple[set, int]]:
    """Both corpora, by path under tests/lint_corpus."""
    return {**TABLE, **{f"field/{name}": row for name, row in FIELD_TABLE.items()}}


@pytest.mark.parametrize("name", sorted(_judged()))
def test_corpus_manifest_gets_exactly_the_judged_findings(name):
    expected, unreadable = _judged()[name]
    violations, problems = lint.lint_loaded(read([CORPUS / name]))
    assert {v.rule for v in violations} == expected, [f"{v.rule}: {v.message[:100]}" for v in violations]
    assert len(problems) == unreadable, [str(p) for p in problems]
    assert not any("the linter failed" in p.message for p in problems)
