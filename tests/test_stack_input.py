"""Stack files as people type them: YAML's odd types, Kubernetes syntax the API server would refuse, values too
long to echo, the same mistake a hundred times. Each is refused in one line per problem with the file, the key
path and the fix, exit 2 from the renderer, and nothing registered; never a traceback."""

import copy

import pytest
import yaml

from components import k8s_syntax
from components.model.config import ConfigError
from components.model.stack import parse
from tests.conftest import stack_platform
from tools import render

DEV = (render.STACKS / "Pulumi.dev.yaml").read_text()


def write_stack(tmp_path, text: str) -> None:
    (tmp_path / "Pulumi.fuzzed.yaml").write_text(text)


def render_cli(tmp_path, capsys) -> tuple[int, str]:
    code = render.main(["--stack", "fuzzed", "--stacks-dir", str(tmp_path), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    return code, err


# (id, text replaced in the dev stack file, (old, new), expected exit, needle in the error)
YAML_CASES = [
    ("date-in-env", ("nodes: 2\n", "nodes: 2\n      env: {SNAPSHOT: 2024-06-01}\n"), 0, None),
    ("set", ("nodes: 2\n", "nodes: 2\n      env: !!set {a, b}\n"), 2, "fastpath:jobs[0].env: a YAML set"),
    ("binary", ("nodes: 2\n", "nodes: 2\n      env: {BLOB: !!binary aGVsbG8=}\n"), 2, "fastpath:jobs[0].env.BLOB: binary data"),
    ("int-key", ("nodes: 2\n", "nodes: 2\n      env: {1: x}\n"), 2, "fastpath:jobs[0].env.1: keys are strings"),
    ("inf", ("memoryGiB: 192", "memoryGiB: .inf"), 2, "fastpath:platform.nodes.memoryGiB: inf is not a number"),
    ("config-a-list", ("config:\n", "config:\n  - x\nold:\n"), 2, "config: must be a mapping"),
]


@pytest.mark.parametrize(("change", "code", "needle"), [c[1:] for c in YAML_CASES], ids=[c[0] for c in YAML_CASES])
def test_yaml_types_are_converted_or_refused_with_the_key(tmp_path, capsys, change, code, needle):
    old, new = change
    assert old in DEV
    write_stack(tmp_path, DEV.replace(old, new, 1))
    got, err = render_cli(tmp_path, capsys)
    assert got == code, err
    if needle:
        assert needle in err and "Traceback" not in err
        assert err.startswith(f"{tmp_path}/Pulumi.fuzzed.yaml: "), err


def test_a_date_reaches_the_pod_as_written(tmp_path, capsys):
    write_stack(tmp_path, DEV.replace("nodes: 2\n", "nodes: 2\n      env: {SNAPSHOT: 2024-06-01}\n", 1))
    assert render_cli(tmp_path, capsys)[0] == 0
    assert "value: '2024-06-01'" in (tmp_path / "out" / "manifests.yaml").read_text()


def platform(**changes) -> dict:
    p = copy.deepcopy(stack_platform("dev"))
    for dotted, value in changes.items():
        node = p
        *head, last = dotted.split(".")
        for k in head:
            node = node.setdefault(k, {})
        node[last] = value
    return p


GOOD_JOB = {"name": "run", "image": "nvcr.io/nvidia/pytorch:25.10-py3", "command": ["python", "t.py"], "nodes": 1}

# (id, platform changes, job changes, needle): what the API server would refuse, refused with the key and fix
SYNTAX = [
    ("taint-key", {"gpu.taintKey": "nvidia.com/gpu type"}, {}, "platform.gpu.taintKey: 'nvidia.com/gpu type' is not"),
    ("topology-key", {"nodes.topologyKey": "-rack"}, {}, "platform.nodes.topologyKey: '-rack' is not a qualified"),
    ("storage-class", {"checkpoints": {"storageClass": "Ceph_RWX"}}, {}, "checkpoints.storageClass: 'Ceph_RWX' is"),
    ("namespace", {"trainingNamespaces": ["Training"]}, {}, "trainingNamespaces[0]: 'Training' is not a DNS-1123"),
    ("system-namespace", {"trainingNamespaces": ["kube-system"]}, {}, "is a system or platform namespace"),
    ("queue-weight", {"scheduler.queues": [{"name": "training", "weight": 70000}]}, {}, "less than or equal to 65535"),
    ("nfs-server-space", {"checkpoints.nfs.server": "nfs .internal"}, {}, "checkpoints.nfs.server"),
    ("product-label", {"gpu.product": "x" * 64}, {}, "gpu.product: 'xxxx"),
    ("env-name", {}, {"env": {"MY VAR": "1"}}, "jobs[0].env.MY VAR: 'MY VAR' is not a valid environment variable"),
    ("secret-key", {}, {"secretEnv": {"TOKEN_FILE": {"secret": "s", "key": "a/b"}}}, "secretEnv.TOKEN_FILE.key: 'a/b' is not a valid Secret"),
    ("image-space", {}, {"image": "nvcr.io/nvidia/pytorch:25.10-py3 "}, "contains whitespace"),
    ("ttl-int32", {}, {"ttlSecondsAfterFinished": 2**31}, "ttlSecondsAfterFinished: Input should be less than"),
    ("ttl-reruns", {}, {"ttlSecondsAfterFinished": 3600}, "submitted again by the next `pulumi up` after a `pulumi refresh`"),
    ("mount-shm", {}, {"datasets": [{"claim": "c", "mountPath": "/dev/shm"}]}, "collides with /dev/shm"),
    ("mount-ckpt", {}, {"datasets": [{"claim": "c", "mountPath": "/checkpoints/x"}]}, "the checkpoint claim"),
    ("mount-nested", {}, {"datasets": [{"claim": "a", "mountPath": "/data"}, {"claim": "b", "mountPath": "/data/b"}]}, "datasets[1].mountPath /data/b and datasets[0].mountPath /data overlap"),
    # Values that render but cannot work: refused with the general rule behind them.
    ("pod-interface-empty", {"fabric.podInterface": ""}, {}, "fabric.podInterface: '' is not a Linux interface name"),
    ("pod-interface-exact", {"fabric.podInterface": "=eth0"}, {}, "give the bare interface name; fastpath writes NCCL_SOCKET_IFNAME's `=` itself"),
    ("pod-interface-space", {"fabric.podInterface": "eth 0"}, {}, "'eth 0' is not a Linux interface name (no '/', ':' or whitespace)"),
    ("pod-interface-long", {"fabric.podInterface": "enp1s0f0np0-extra"}, {}, "(1 to 15 characters)"),
    ("image-LATEST", {}, {"image": "nvcr.io/nvidia/pytorch:LATEST"}, "uses `latest`"),
    (
        "files-relative",
        {},
        {"files": {"t.py": "examples/train.py"}},
        "command names t.py, which files ships to /workspace/files/t.py; the pods run in the image's working directory: write /workspace/files/t.py",
    ),
    (
        "queue-cap-partial",
        {"scheduler.queues": [{"name": "training", "gpus": 6}]},
        {},
        "scheduler.queues[0].gpus 6 is not a multiple of gpu.perNode 4: whole-node gangs can never use the last 2; give 4 or 8",
    ),
]


@pytest.mark.parametrize(("pchanges", "jchanges", "needle"), [c[1:] for c in SYNTAX], ids=[c[0] for c in SYNTAX])
def test_kubernetes_syntax_is_refused_with_the_key_and_fix(pchanges, jchanges, needle):
    with pytest.raises(ConfigError) as err:
        parse({"platform": platform(**pchanges), "jobs": [{**GOOD_JOB, **jchanges}]}, "stacks/Pulumi.dev.yaml")
    assert needle in str(err.value), str(err.value)
    assert all(line.startswith("stacks/Pulumi.dev.yaml: fastpath:") for line in str(err.value).splitlines())


# NVIDIA/k8s-device-plugin@v0.20.0:internal/lm/resource.go `sanitise` (the GFD gpu-operator v26.7.0 pins) and the
# cases of its resource_test.go: characters outside [A-Za-z0-9-_. ] dropped, runs of spaces joined by '-'.
@pytest.mark.parametrize(
    ("typed", "label"),
    [
        ("NVIDIA A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB"),
        ("NVIDIA  A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB"),
        ("NVIDIA TITAN X (Pascal)", "NVIDIA-TITAN-X-Pascal"),
        ("some [ / thing / ]else", "some-thing-else"),
        ("NVIDIA A100-SXM4-80GB (rev 2)", "NVIDIA-A100-SXM4-80GB-rev-2"),
        ("NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-80GB-HBM3"),
    ],
)
def test_nvidia_smi_spelling_of_the_product_becomes_the_gfd_label(typed, label):
    cfg = parse({"platform": platform(**{"gpu.product": typed})}, "s")
    assert cfg.platform.gpu.product == label


def test_a_huge_value_is_not_echoed_back():
    with pytest.raises(ConfigError) as err:
        parse({"platform": platform(), "jobs": [{**GOOD_JOB, "image": "x" * 100_000}]}, "s")
    assert len(str(err.value)) < 1000 and "characters" in str(err.value)


def test_the_same_mistake_a_hundred_times_is_summarised():
    jobs = [{**GOOD_JOB, "name": f"j{i}", "image": "busybox"} for i in range(100)]
    with pytest.raises(ConfigError) as err:
        parse({"platform": platform(), "jobs": jobs}, "s")
    lines = str(err.value).splitlines()
    assert len(lines) == 4 and lines[-1].startswith("s: ... and 97 more like `fastpath:jobs[]: image 'busybox' has no tag")


@pytest.mark.parametrize(
    ("check", "good", "bad"),
    [
        (k8s_syntax.label_value, ["", "a", "NVIDIA-H100-80GB-HBM3", "a.b_c-d"], ["-a", "a-", "a b", "a" * 64]),
        (k8s_syntax.qualified_name, ["nvidia.com/gpu", "gpu", "a.b/c_d"], ["/gpu", "Nvidia.com/gpu", "a/b/c", "a" * 64]),
        (k8s_syntax.dns1123_label, ["training", "a1"], ["Training", "a.b", "-a", "a" * 64]),
        (k8s_syntax.dns1123_subdomain, ["ceph-rwx", "a.b"], ["Ceph", "a_b", "a..b"]),
        (k8s_syntax.env_var_name, ["A", "_a", "a.b-c"], ["1A", "A B", "A=B"]),
        (k8s_syntax.config_map_key, ["token", "a.b_c-d"], ["a/b", "", "a b"]),
    ],
)
def test_kubernetes_syntax_rules(check, good, bad):
    """k8s.io/apimachinery/pkg/util/validation/validation.go, restated in components/k8s_syntax.py."""
    assert [v for v in good if check(v) is not None] == []
    assert [v for v in bad if check(v) is None] == []


def test_any_unexpected_error_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    write_stack(tmp_path, DEV)

    def boom(stack):
        raise KeyError("surprise")

    monkeypatch.setattr(render, "render_stack", boom)
    code, err = render_cli(tmp_path, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "KeyError" in err


def test_valid_yaml_that_is_not_a_stack_file(tmp_path, capsys):
    write_stack(tmp_path, yaml.safe_dump(["not", "a", "mapping"]))
    code, err = render_cli(tmp_path, capsys)
    assert code == 2 and "config: must be a mapping" in err


# What config accepts, the policy pack accepts: a documented override either renders lint-clean or is refused here.
OVERRIDES = [
    ("podInterface", {"fabric.podInterface": "ens3"}, {}, None),
    ("ifname-prefix", {"fabric.ncclOverrides": {"NCCL_SOCKET_IFNAME": "eth"}}, {}, None),
    ("ifname-none", {"fabric.ncclOverrides": {"NCCL_SOCKET_IFNAME": "=ens3"}}, {}, "ncclOverrides.NCCL_SOCKET_IFNAME==ens3 selects none of the pod's"),
    ("ib-disable", {"fabric.ncclOverrides": {"NCCL_IB_DISABLE": 1}}, {}, "on TCP sockets"),
    ("net-override", {"fabric.ncclOverrides": {"NCCL_NET": "IB"}}, {}, "set fabric.ncclNet instead"),
    ("job-ib-disable", {}, {"envOverrides": {"NCCL_IB_DISABLE": "1"}}, "envOverrides: NCCL_IB_DISABLE=1"),
    ("job-socket", {}, {"envOverrides": {"NCCL_NET": "Socket"}}, "NCCL_NET=Socket puts training pods"),
    ("job-ifname", {}, {"envOverrides": {"NCCL_SOCKET_IFNAME": "=net1"}}, None),
    ("job-ifname-none", {}, {"envOverrides": {"NCCL_SOCKET_IFNAME": "=ens9"}}, "selects none of the pod's"),
    ("job-hca", {}, {"envOverrides": {"NCCL_IB_HCA": "=mlx5_0"}}, None),
]


@pytest.mark.parametrize(("pchanges", "jchanges", "refusal"), [c[1:] for c in OVERRIDES], ids=[c[0] for c in OVERRIDES])
def test_a_documented_override_renders_lint_clean_or_is_refused(pchanges, jchanges, refusal):
    from tools.lint import lint

    p = copy.deepcopy(stack_platform("prod-roce"))
    for dotted, value in pchanges.items():
        head, last = dotted.split(".")
        p[head][last] = value
    jobs = [{**GOOD_JOB, "nodes": 2, **jchanges}, {**GOOD_JOB, "name": "mpi", "framework": "mpi", **jchanges}]
    if refusal:
        with pytest.raises(ConfigError, match=refusal):
            parse({"platform": p, "jobs": jobs}, "s")
        return
    run = render.run_program("prod-roce", extra_config={"fastpath:platform": p, "fastpath:jobs": jobs})
    assert [v for v in lint(render.manifests(run)) if v.level == "mandatory"] == []


# (id, a rail of prod-ib changed, needle): one rail is one HCA and one netdev, each named as the host names it.
RAILS = [
    ("two-hcas", {"hca": "mlx5_0,mlx5_1"}, "fabric.rails[0]: Value error, hca: 'mlx5_0,mlx5_1' is not one RDMA device name"),
    ("hca-is-netdev", {"hca": "ibp24s0", "interface": "ibp24s0"}, "hca 'ibp24s0' is the rail's interface too"),
    ("interface-colon", {"interface": "ibp24s0:1"}, "interface: 'ibp24s0:1' is not a Linux interface name"),
]


@pytest.mark.parametrize(("change", "needle"), [r[1:] for r in RAILS], ids=[r[0] for r in RAILS])
def test_a_rail_that_names_no_single_device_is_refused(change, needle):
    p = copy.deepcopy(stack_platform("prod-ib"))
    p["fabric"]["rails"][0] = {**p["fabric"]["rails"][0], **change}
    with pytest.raises(ConfigError) as err:
        parse({"platform": p}, "stacks/Pulumi.prod-ib.yaml")
    assert needle.replace("Value error, ", "") in str(err.value), str(err.value)


# (id, platform changes, job changes, needle): a misspelt key names the key it is nearest to.
TYPOS = [
    ("platform-top", {"helth": {"enabled": True}}, {}, "fastpath:platform.helth: unknown key: did you mean `health`?"),
    ("platform-nested", {"fabric.podInterfce": "eth0"}, {}, "fastpath:platform.fabric.podInterfce: unknown key: did you mean `podInterface`?"),
    ("job", {}, {"gpusPerNod": 2}, "fastpath:jobs[0].gpusPerNod: unknown key: did you mean `gpusPerNode`?"),
    ("nothing-near", {"zzzz": 1}, {}, "fastpath:platform.zzzz: unknown key: check its spelling against docs/config.md"),
]


@pytest.mark.parametrize(("pchanges", "jchanges", "needle"), [t[1:] for t in TYPOS], ids=[t[0] for t in TYPOS])
def test_a_misspelt_key_names_the_nearest_one(pchanges, jchanges, needle):
    with pytest.raises(ConfigError) as err:
        parse({"platform": platform(**pchanges), "jobs": [{**GOOD_JOB, **jchanges}]}, "stacks/Pulumi.dev.yaml")
    assert needle in str(err.value), str(err.value)
