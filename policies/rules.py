"""The rule catalogue: stable IDs, what each checks, its default enforcement level, the config it takes, and a
message that says how to fix.

Every rule is a pure function over one Kubernetes object (a dict, normalized once by `normalize`) plus its
config and the other objects being checked (for cross-object facts, such as a claim's access modes), registered
with its metadata by `@rule` right above it. The CrossGuard pack (policies/pack.py), the offline linter
(tools/lint.py) and the generated policies/README.md read RULES; the pack and the linter both call `evaluate`.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import posixpath
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from components.fabric import nccl
from components.fabric.wiring import NETWORKS_ANNOTATION
from components.jobs.trainer_v2_runtime import override_problems
from components.model.config import image_problem
from components.model.profile import normalize as _normalize
from policies.podspecs import (
    REPLICA_SPECS,
    Extracted,
    PodTemplate,
    clean_container,
    extract,
    is_volcano_job,
    pod_templates,
    total_replicas,
    walk,
)
from policies.runtimes import MERGE_ERRORS, Pairing, RuntimeIndex, pair

MANDATORY, ADVISORY, DISABLED, REMEDIATE = "mandatory", "advisory", "disabled", "remediate"
LEVELS = (ADVISORY, MANDATORY, REMEDIATE, DISABLED)  # CrossGuard's (pulumi apitype.EnforcementLevel)
GPU = "nvidia.com/gpu"
# Device-plugin resources that are GPUs (or accelerators run like them): NVIDIA whole GPUs, time-sliced shares
# and MIG slices, AMD (ROCm k8s-device-plugin), Intel (intel-device-plugins-for-kubernetes), Habana Gaudi.
GPU_RESOURCE = re.compile(
    r"^(nvidia\.com/(gpu(\.shared)?|mig-[\w.-]+)|amd\.com/gpu|gpu\.intel\.com/(i915|xe)"
    r"|habana\.ai/gaudi)$"
)
# Values a template engine or shell fills in later: `$N`, `${N}`, `{{ .Values.gpus }}`, `<GPUS>`.
PLACEHOLDER = re.compile(r"\$\{?\w+\}?|\{\{.*?\}\}|<\w+>|%\(\w+\)s")
# Image tags that move: whatever is pushed next runs. A word of the tag (split on - . _) names a branch or a
# channel, and no other word carries a version number or a commit (`nightly-2024-06-01`, `main-3f2a9c1` are
# pinned enough); `latest` moves whatever surrounds it.
MOVING_TAG_WORDS = {
    "latest",
    "nightly",
    "main",
    "master",
    "dev",
    "develop",
    "edge",
    "head",
    "canary",
    "unstable",
    "rolling",
    "stable",
    "current",
    "trunk",
}
RDMA_RESOURCE = re.compile(r"^(rdma/.+|vpc\.amazonaws\.com/efa|[^/]+/(sriov|hostdev|rdma|mlnx|ib)[^/]*)$")
EFA = "vpc.amazonaws.com/efa"
TOKEN_VALUE = re.compile(
    r"^(hf_[A-Za-z0-9]{20,}|ghp_[A-Za-z0-9]{20,}|gh[ousr]_[A-Za-z0-9]{20,}|glpat-[\w-]{16,}"
    r"|sk-[A-Za-z0-9_-]{20,}|AKIA[0-9A-Z]{16}|xox[abpr]-[\w-]{10,}|eyJ[\w-]{20,}\.[\w-]+\.[\w-]+)$"
)
SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY)")
CHECKPOINT_PATH = re.compile(r"checkpoint|ckpt", re.I)
# Workloads that run a training gang (a batch/v1 Job with parallelism counts; Deployments do not).
TRAINING = {
    "PyTorchJob",
    "MPIJob",
    "TFJob",
    "XGBoostJob",
    "PaddleJob",
    "JAXJob",
    "TrainJob",
    "TrainingRuntime",
    "ClusterTrainingRuntime",
    "JobSet",
    "Job",
}
# containerd and Docker give every container a 64 MiB /dev/shm unless the pod mounts its own.
SHM_RUNTIME_DEFAULT_GIB = 64 / 1024
# Training Operator v1: each kind's default replica restartPolicy (kubeflow/trainer@v1.9.4
# pkg/apis/kubeflow.org/v1/*_types.go `<Kind>DefaultRestartPolicy`, applied by the *_defaults.go files).
KUBEFLOW_V1_RESTART = {
    "PyTorchJob": "OnFailure",
    "PaddleJob": "OnFailure",
    "TFJob": "Never",
    "MPIJob": "Never",
    "XGBoostJob": "Never",
    "JAXJob": "Never",
}
# Replica policies the operator hands to the pod unchanged (pkg/core/pod.go SetRestartPolicy): the kubelet restarts
# containers in place. ExitCode becomes pod restartPolicy Never and the operator recreates the pod instead.
IN_PLACE = ("OnFailure", "Always")
# Init containers the operator injects itself (init-pytorch, the MPI launcher's kubectl-delivery).
OPERATOR_INIT = {"init-pytorch", "kubectl-delivery"}
KUBEFLOW_V1 = frozenset(KUBEFLOW_V1_RESTART)


def normalize(props: Any) -> Any:
    """The one normalization both paths use: engine props (read-only proxies, every number a float) and YAML
    both become plain dicts with integers. What is plain already is shared, not copied: a caller that edits the
    result copies first (add_ipc_lock)."""
    return _plain(props)


PLAIN = frozenset({str, int, bool, type(None)})


def _plain(value: Any) -> Any:
    """components.model.profile.normalize, copying only the parts it changes. YAML gives dicts, lists, strings and
    ints, which need nothing; asking each node the abstract Mapping/Sequence questions that engine proxies need
    cost more than all the rules together. Anything else (proxies, floats, dates) takes the shared path."""
    kind = type(value)
    if kind is dict:
        out = None
        for k, v in value.items():
            if type(v) in PLAIN:
                continue
            new = _plain(v)
            if new is not v:
                if out is None:
                    out = dict(value)
                out[k] = new
        return value if out is None else out
    if kind is list:
        copied = None
        for i, v in enumerate(value):
            if type(v) in PLAIN:
                continue
            new = _plain(v)
            if new is not v:
                if copied is None:
                    copied = list(value)
                copied[i] = new
        return value if copied is None else copied
    if kind in PLAIN:
        return value
    return _normalize(value)


@dataclass(frozen=True)
class Finding:
    message: str
    level: str | None = None  # overrides the rule's level (e.g. deprecated NCCL names are only advisory)


@dataclass(frozen=True)
class Violation:
    rule: str
    level: str
    kind: str
    namespace: str
    name: str
    message: str

    def as_dict(self) -> dict:
        return {
            "rule": self.rule,
            "level": self.level,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "message": self.message,
        }


@dataclass
class Context:
    obj: dict
    templates: list[PodTemplate]
    config: dict
    claims: dict[tuple[str, str], dict]  # (namespace, name) -> PersistentVolumeClaim among the checked objects
    problems: list[str] = field(default_factory=list)  # what the extractor could not read (podspecs.extract)
    known_kind: bool = True
    pairing: Pairing | None = None  # a TrainJob's runtime, and whether its pods are the templates judged
    # rank_env and rank_literals per container, by identity: the extracted containers live as long as the context.
    envs: dict[int, tuple[dict[str, str | None], dict[str, str]]] = field(default_factory=dict)

    @cached_property
    def gpu_containers(self) -> list[tuple[PodTemplate, dict]]:
        """Containers that ask for GPUs, counted or not (a templated count still means GPUs)."""
        return [(t, c) for t in self.templates for c in containers(t) if has_gpus(c)]

    @cached_property
    def exports(self) -> dict[str, str | None]:
        """What an MPIJob launcher exports to every rank (launcher_exports), read once per object."""
        return launcher_exports(self)


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    description: str
    level: str
    check: Callable[[Context], Iterator[Finding]]
    remediation: str  # what the user does about a finding, in a few words (README, CrossGuard's remediation steps)
    params: dict = field(default_factory=dict)  # name -> (default, description)
    mixed: bool = False  # a mandatory rule that also reports advisory findings (CrossGuard gets two policies)
    kinds: frozenset[str] | None = None  # the only kinds it can flag; None: any kind
    pods: bool = True  # it judges pod templates only, so an object without any cannot fail it
    remediate: Callable[[dict], dict | None] | None = None  # the automatic fix under enforcementLevel remediate
    # It reads nothing of a pod beyond one container and the object itself (image, env, a container's GPUs against
    # the declared processes, what could not be read), so it also judges a TrainJob's trainer alone when the runtime
    # holding the rest of the pod is not among the objects. The other rules wait for the runtime.
    trainer_alone: bool = False
    # It needs objects beside the one it flags (a TrainJob's runtime): CrossGuard, which hands a resource policy one
    # resource at a time, runs it as a stack policy over the whole stack (policies/pack.py).
    stack: bool = False


Check = Callable[["Context"], Iterator["Finding"]]
RULES: list[Rule] = []  # the catalogue, in the order `@rule` meets the checks (the README's order)


def rule(
    id: str,
    title: str,
    *,
    level: str,
    description: str,
    remediation: str,
    params: dict | None = None,
    mixed: bool = False,
    kinds: Iterable[str] | None = None,
    pods: bool = True,
    remediate: Callable[[dict], dict | None] | None = None,
    trainer_alone: bool = False,
    stack: bool = False,
) -> Callable[[Check], Check]:
    """Register the decorated check in RULES with its metadata, which the pack, the linter and the generated
    README all read from there."""

    def register(check: Check) -> Check:
        if any(known.id == id for known in RULES):
            raise ValueError(f"rule id {id!r} is registered twice")
        RULES.append(
            Rule(
                id,
                title,
                description,
                level,
                check,
                remediation,
                dict(params or {}),
                mixed,
                frozenset(kinds) if kinds is not None else None,
                pods,
                remediate,
                trainer_alone,
                stack,
            )
        )
        return check

    return register


# ------------------------------------------------------------------------------------------- pod helpers


def containers(t: PodTemplate) -> list[dict]:
    return list(t.template["spec"].get("containers") or [])


def _d(value: Any) -> dict:
    """`value` if it is a mapping, else {}: object-level fields of input nobody here wrote."""
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int | None:
    """An integer field's value, or None when it is not one (`"$N"`, a template, a list)."""
    if isinstance(value, bool):
        return None
    try:
        return int(value) if isinstance(value, int | float) else int(str(value).strip())
    except (TypeError, ValueError, OverflowError):
        return None


def resources(c: dict) -> dict:
    r = c.get("resources") or {}
    return {**(r.get("requests") or {}), **(r.get("limits") or {})}


def gpu_requests(c: dict) -> dict[str, object]:
    """The GPU resources a container requests: resource -> value as written."""
    return {k: v for k, v in resources(c).items() if GPU_RESOURCE.match(k)}


def unknown_gpus(c: dict) -> dict[str, object]:
    """GPU resources whose count is not a number (`$GPUS`, `{{ .Values.gpus }}`): the rules cannot count them."""
    return {k: v for k, v in gpu_requests(c).items() if _int(v) is None}


def gpus(c: dict) -> int:
    """GPUs a container requests, counting every GPU resource whose count is a number."""
    return sum(max(_int(v) or 0, 0) for v in gpu_requests(c).values())


def has_gpus(c: dict) -> bool:
    """Whether a container asks for GPUs: a positive count, or a count a template fills in later."""
    return gpus(c) > 0 or bool(unknown_gpus(c))


def rdma_resources(c: dict) -> list[str]:
    return [r for r in resources(c) if RDMA_RESOURCE.match(r)]


def env(c: dict) -> dict[str, str]:
    """Literal env values (valueFrom entries are not literals)."""
    return {e["name"]: str(e.get("value", "")) for e in c.get("env") or [] if "valueFrom" not in e}


def pod_annotations(t: PodTemplate) -> dict:
    return (t.template.get("metadata") or {}).get("annotations") or {}


def network_interfaces(t: PodTemplate) -> list[str]:
    """The interfaces a pod has: its primary (eth0, or what fastpath's primary-interface annotation names) and lo,
    plus one per Multus network (net1.. unless named)."""
    raw = pod_annotations(t).get(NETWORKS_ANNOTATION)
    primary = pod_annotations(t).get(nccl.PRIMARY_INTERFACE_ANNOTATION)
    out = [str(primary) if isinstance(primary, str) and primary else "eth0", "lo"]
    if not raw:
        return out
    try:
        nets = json.loads(raw)
        names = [n.get("interface") if isinstance(n, dict) else None for n in nets]
    except (json.JSONDecodeError, TypeError):
        names = [None for _ in str(raw).split(",") if _.strip()]
    return out + [str(n) if n else f"net{i + 1}" for i, n in enumerate(names)]


def parse_mem_gib(q: Any) -> float | None:
    if q is None:
        return None
    m = re.match(r"^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)([KMGTPE]i?|)$", str(q).strip())
    if not m:
        return None
    scale = {
        "": 1,
        "Ki": 2**10,
        "Mi": 2**20,
        "Gi": 2**30,
        "Ti": 2**40,
        "Pi": 2**50,
        "K": 1e3,
        "M": 1e6,
        "G": 1e9,
        "T": 1e12,
        "P": 1e15,
    }.get(m.group(2))
    return float(m.group(1)) * scale / 2**30 if scale else None


def mounts_infiniband(t: PodTemplate) -> bool:
    """The pod mounts the host's /dev/infiniband (hostNetwork RDMA without a device plugin)."""
    return any(
        str(_d(v.get("hostPath")).get("path") or "").rstrip("/") == "/dev/infiniband"
        for v in t.template["spec"].get("volumes") or []
    )


def is_rdma_pod(t: PodTemplate) -> bool:
    return (
        bool(pod_annotations(t).get(NETWORKS_ANNOTATION))
        or any(rdma_resources(c) for c in containers(t))
        or mounts_infiniband(t)
    )


def where(t: PodTemplate, c: dict) -> str:
    return f"{t.role} container {c.get('name')!r}"


# shlex.split's grammar (POSIX mode, no comments): a word is a run of plain characters, '...' and "..." strings
# and backslash escapes; the four characters of shlex's whitespace separate words. What starts no word (an unclosed
# quote, a trailing backslash) is `bad`. Possessive quantifiers: what a run matched is never given back, so an
# unclosed quote ends the word at once instead of making the engine retry other splits of it.
SHELL_WORD = re.compile(
    r"""(?P<word>(?:[^ \t\r\n'"\\]++|'[^']*+'|"[^"\\]*+(?:\\.[^"\\]*+)*+"|\\.)++)"""
    r"""|(?P<bad>[^ \t\r\n])""",
    re.S,
)
SHELL_PART = re.compile(r"""'([^']*)'|"([^"\\]*(?:\\.[^"\\]*)*)"|\\(.)""", re.S)
DOUBLE_QUOTED_ESCAPE = re.compile(r"\\(.)", re.S)
SPACE = re.compile(r"\s")


def _unquote(part: re.Match) -> str:
    single, double, escaped = part.groups()
    if single is not None:
        return single
    if double is not None:  # inside "..." a backslash escapes only `"` and itself
        return DOUBLE_QUOTED_ESCAPE.sub(lambda m: m[1] if m[1] in '"\\' else m[0], double)
    return escaped


def shell_words(text: str) -> list[str]:
    """`shlex.split(text)`, matched by a regex instead of stepped through in Python a character at a time
    (launcher scripts run to kilobytes); ValueError where shlex raises one."""
    found = SHELL_WORD.findall(text)
    if any(bad for _, bad in found):
        raise ValueError(f"unclosed quotation or trailing backslash in {text[:40]!r}")
    return [SHELL_PART.sub(_unquote, word) if "'" in word or '"' in word or "\\" in word else word for word, _ in found]


def argv(c: dict) -> list[str]:
    """A container's command and args as words; a `sh -c "..."` script is split the way the shell would."""
    words: list[str] = []
    for w in [*(c.get("command") or []), *(c.get("args") or [])]:
        w = str(w)
        if not SPACE.search(w):
            words.append(w)
            continue
        try:
            words += shell_words(w)
        except ValueError:
            words += w.split()
    return words


def rank_env_of(c: dict) -> dict[str, str | None]:
    """Every env name a container sets: its literal value, or None for valueFrom."""
    return {
        e["name"]: (None if "valueFrom" in e else str(e.get("value", ""))) for e in c.get("env") or [] if e.get("name")
    }


ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Launchers that hand their whole environment to every rank: horovodrun passes each of its variables with -x;
# MPICH's and Intel MPI's Hydra propagate the launcher's environment by default (-genvall).
WHOLE_ENV_LAUNCHERS = ("horovodrun",)
WHOLE_ENV_MPI = ("Intel", "MPICH")
EXPORT_FLAGS = frozenset(
    {"-x", "--x", "-genv", "--genv", "-env", "--env", "-genvlist", "--genvlist", "-envlist", "--envlist"}
)


def _script_env(words: list[str]) -> dict[str, str]:
    """Variables a launcher script sets before mpirun: `export NAME=VALUE` and `NAME=VALUE cmd` words."""
    out = {}
    for w in words:
        if "=" not in w:
            continue
        name, eq, value = w.partition("=")
        if eq and ENV_NAME.match(name):
            out[name] = value
    return out


def launcher_exports(ctx: Context) -> dict[str, str | None]:
    """What an MPIJob launcher exports to every rank: `mpirun -x NAME=VALUE`, `-x NAME` (the launcher's own
    value: its env or what its script exports before mpirun), `-genv NAME VALUE`, `-genv NAME=VALUE`, `-env`
    and `-genvlist A,B` (MPICH, Intel MPI). Under horovodrun, or with spec.mpiImplementation Intel or MPICH
    (Hydra forwards the launcher's environment by default), the launcher's whole env counts. Name -> literal
    value, or None when the value is not a literal (valueFrom)."""
    if ctx.obj.get("kind") != "MPIJob":
        return {}
    whole = str(_d(ctx.obj.get("spec")).get("mpiImplementation") or "") in WHOLE_ENV_MPI
    out: dict[str, str | None] = {}
    for t in ctx.templates:
        if t.role != "Launcher":
            continue
        for c in containers(t):
            words = argv(c)
            own = {**rank_env_of(c), **_script_env(words)}
            joined = "\0".join(words)  # one substring search before looking at a thousand words one by one
            if whole or (
                any(name in joined for name in WHOLE_ENV_LAUNCHERS)
                and any(posixpath.basename(w) in WHOLE_ENV_LAUNCHERS for w in words)
            ):
                out.update(rank_env_of(c))
            # Scripts run to a thousand words: visit only the flags, found by a comprehension.
            for i in [i for i, w in enumerate(words[:-1]) if w in EXPORT_FLAGS]:
                w, nxt = words[i], words[i + 1]
                if w in ("-x", "--x"):
                    name, eq, value = nxt.partition("=")
                    if eq:
                        out[name] = value
                    elif name in own:
                        out[name] = own[name]
                elif w in ("-genv", "--genv", "-env", "--env"):
                    name, eq, value = nxt.partition("=")
                    if eq:
                        out[name] = value
                    elif i + 2 < len(words):
                        out[nxt] = words[i + 2]
                else:  # -genvlist and friends
                    out.update({n: own[n] for n in nxt.split(",") if n in own})
    return out


def rank_env(ctx: Context, t: PodTemplate, c: dict) -> dict[str, str | None]:
    """The environment the training processes in a container see: its own env, and for an MPIJob worker what
    the launcher exports with mpirun (the ranks are exec'd into the worker; `-x` overrides the pod's value).
    Read-only: the rules share one per container."""
    return _rank_envs(ctx, t, c)[0]


def rank_literals(ctx: Context, t: PodTemplate, c: dict) -> dict[str, str]:
    """rank_env without the values the manifest does not hold (valueFrom). Read-only, like rank_env."""
    return _rank_envs(ctx, t, c)[1]


def _rank_envs(ctx: Context, t: PodTemplate, c: dict) -> tuple[dict[str, str | None], dict[str, str]]:
    # Six NCCL rules read each container's environment: worked out once per container of the object.
    if (known := ctx.envs.get(id(c))) is not None:
        return known
    out = rank_env_of(c)
    if ctx.obj.get("kind") == "MPIJob" and t.role != "Launcher":
        out.update(ctx.exports)
    ctx.envs[id(c)] = (out, {k: v for k, v in out.items() if v is not None})
    return ctx.envs[id(c)]


@dataclass(frozen=True)
class Replica:
    role: str
    replicas: int
    restart: str  # the replica's restartPolicy, or the kind's default when unset
    template: PodTemplate


def is_kubeflow_v1(obj: dict) -> bool:
    return obj.get("kind") in KUBEFLOW_V1_RESTART and obj.get("apiVersion") == "kubeflow.org/v1"


def kubeflow_replicas(ctx: Context) -> list[Replica]:
    """The replicas of a Training Operator v1 job with their effective restartPolicy; [] for anything else."""
    obj = ctx.obj
    if not is_kubeflow_v1(obj):
        return []
    specs = _d(_d(obj.get("spec")).get(REPLICA_SPECS[obj["kind"]]))
    default = KUBEFLOW_V1_RESTART[obj["kind"]]
    return [
        Replica(t.role, t.replicas, str(_d(specs.get(t.role)).get("restartPolicy") or default), t)
        for t in ctx.templates
    ]


# ------------------------------------------------------------------------------------------- rules


def _shm_volume(t: PodTemplate, c: dict) -> dict | None:
    """The emptyDir mounted at /dev/shm, or the host's own /dev/shm by hostPath (memory-backed, the host's
    size), or None."""
    mounts = {m.get("name"): m for m in c.get("volumeMounts") or [] if m.get("mountPath").rstrip("/") == "/dev/shm"}
    for v in t.template["spec"].get("volumes") or []:
        if v.get("name") not in mounts:
            continue
        if isinstance(v.get("emptyDir"), dict):
            return v
        if str(_d(v.get("hostPath")).get("path") or "").rstrip("/") == "/dev/shm":
            return {"name": v["name"], "emptyDir": {"medium": "Memory"}, "hostPath": True}
    return None


@rule(
    "shm-mounted",
    "GPU pods mount a memory-backed /dev/shm above 64 MiB",
    level=MANDATORY,
    description="Every container that requests GPUs mounts an emptyDir with medium Memory at /dev/shm whose "
    "sizeLimit, if set, is above the container runtime's 64 MiB default (the host's own /dev/shm by "
    "hostPath also counts).",
    remediation="mount an emptyDir {medium: Memory, sizeLimit: 1Gi per GPU or more} at /dev/shm",
)
def shm_mounted(ctx: Context) -> Iterator[Finding]:
    """A GPU container gets more than the runtime's 64 MiB /dev/shm (containerd's CRI sandbox default,
    `defaultShmSize` in containerd/containerd pkg/cri/server/helpers_linux.go; Docker's is the same): without its
    own memory-backed mount, or with a sizeLimit at or under 64Mi, NCCL's shared-memory transport and PyTorch
    DataLoader workers run out of it (bus errors, NCCL init failures). One rule for "missing" and "too small to
    matter", so shm-size stays advisory sizing above 64Mi."""
    for t, c in ctx.gpu_containers:
        v = _shm_volume(t, c)
        if v is None or v["emptyDir"].get("medium") != "Memory":
            yield Finding(
                f"{where(t, c)} has no memory-backed /dev/shm (the container default is 64 MiB; NCCL and "
                "dataloaders fail or crawl): mount an emptyDir {medium: Memory, sizeLimit: ...} at /dev/shm"
            )
            continue
        size = parse_mem_gib(v["emptyDir"].get("sizeLimit"))
        if size is not None and size <= SHM_RUNTIME_DEFAULT_GIB:
            yield Finding(
                f"{where(t, c)}: /dev/shm sizeLimit {v['emptyDir']['sizeLimit']} is no more than the "
                "container runtime's 64 MiB default, so mounting it gains nothing: NCCL's shared-memory "
                "transport and DataLoader workers run out of it (bus errors, NCCL init failures); raise "
                "the sizeLimit to GiBs (1Gi per GPU or more)"
            )


@rule(
    "shm-size",
    "/dev/shm is sized for the GPUs",
    level=ADVISORY,
    description="The /dev/shm emptyDir has a sizeLimit of at least minGiBPerGpu per GPU of the container (64Mi or "
    "less is shm-mounted's).",
    remediation="raise the /dev/shm sizeLimit to minGiBPerGpu per GPU of the container",
    params={"minGiBPerGpu": (1, "Smallest /dev/shm per GPU, in GiB.")},
)
def shm_size(ctx: Context) -> Iterator[Finding]:
    per_gpu = float(ctx.config.get("minGiBPerGpu", 1))
    for t, c in ctx.gpu_containers:
        v = _shm_volume(t, c)
        if v is None or "hostPath" in v or unknown_gpus(c):  # the host's /dev/shm; a count the rules cannot read
            continue
        size = parse_mem_gib(v["emptyDir"].get("sizeLimit"))
        need = per_gpu * gpus(c)
        if size is not None and size <= SHM_RUNTIME_DEFAULT_GIB:
            continue  # no better than no mount at all: shm-mounted (mandatory) reports it
        if size is None:
            yield Finding(
                f"{where(t, c)}: /dev/shm has no sizeLimit: set one (at least {need:g}Gi for "
                f"{gpus(c)} GPUs) so it is sized on purpose and counted in the memory limit"
            )
        elif size < need:
            yield Finding(
                f"{where(t, c)}: /dev/shm sizeLimit {v['emptyDir']['sizeLimit']} is under {need:g}Gi "
                f"({per_gpu:g}Gi per GPU x {gpus(c)}): raise it"
            )


@rule(
    "shm-fits-memory",
    "/dev/shm fits in the memory limit",
    level=MANDATORY,
    description="The /dev/shm sizeLimit is smaller than the container's memory limit (tmpfs pages are charged to it).",
    remediation="set a memory limit above the /dev/shm sizeLimit (tmpfs pages count against it)",
    mixed=True,
)
def shm_fits_memory(ctx: Context) -> Iterator[Finding]:
    for t, c in ctx.gpu_containers:
        v = _shm_volume(t, c)
        if v is None or "hostPath" in v:
            continue
        size = parse_mem_gib(v["emptyDir"].get("sizeLimit"))
        if size is None:
            continue
        limit = parse_mem_gib(((c.get("resources") or {}).get("limits") or {}).get("memory"))
        if limit is None:
            yield Finding(
                f"{where(t, c)} has /dev/shm but no memory limit: tmpfs pages are charged to the pod; "
                "set a memory limit that includes the shm size",
                level=ADVISORY,
            )
        elif size >= limit:
            yield Finding(
                f"{where(t, c)}: /dev/shm sizeLimit {v['emptyDir']['sizeLimit']} does not fit in the "
                f"memory limit {c['resources']['limits']['memory']} (tmpfs counts against it: OOM kill): "
                "lower the shm size or raise the limit"
            )


@rule(
    "nccl-ib-enabled",
    "RDMA pods keep NCCL's IB transport on",
    level=MANDATORY,
    description="Pods that request RDMA resources or secondary networks, or mount the host's /dev/infiniband, do "
    "not set NCCL_IB_DISABLE to anything but 0, nor NCCL_NET=Socket (in their env or exported by an "
    "MPI launcher).",
    remediation="leave NCCL_IB_DISABLE unset (or 0) and set NCCL_NET to IB or the net plugin's name",
)
def nccl_ib_enabled(ctx: Context) -> Iterator[Finding]:
    """RDMA pods do not switch NCCL to TCP: NCCL_IB_DISABLE=1, or NCCL_NET=Socket (the built-in TCP network by
    name, NVIDIA/nccl@v2.30.7-1:docs/userguide/source/env.rst NCCL_NET), in the pod's env or exported by an MPI
    launcher."""
    for t in ctx.templates:
        if not is_rdma_pod(t):
            continue
        for c in containers(t):
            e = rank_env(ctx, t, c)
            disable = e.get("NCCL_IB_DISABLE") or "0"
            if disable.strip() not in ("0", ""):
                yield Finding(
                    f"{where(t, c)} requests RDMA (resources or secondary networks) but sets "
                    f"NCCL_IB_DISABLE={disable}: NCCL will use TCP sockets; set it to 0"
                )
            net = e.get("NCCL_NET")
            if net is not None and net.strip().lower() == "socket":
                yield Finding(
                    f"{where(t, c)} requests RDMA (resources or secondary networks) but sets "
                    f"NCCL_NET={net}: NCCL is forced onto TCP sockets and the RDMA devices sit idle; "
                    "set NCCL_NET=IB (or the name of the net plugin in use)"
                )


@rule(
    "nccl-net-set",
    "RDMA pods name their NCCL network",
    level=MANDATORY,
    description="GPU or RDMA containers of RDMA pods set NCCL_NET (IB, or the net plugin's name such as IBext or "
    "Libfabric), so a broken RDMA path fails NCCL init instead of falling back to TCP without a word. "
    "For MPIJob workers, `mpirun -x NCCL_NET` from the launcher counts.",
    remediation="set NCCL_NET=IB (or the net plugin's name: IBext, Libfabric); MPIJob: mpirun -x NCCL_NET",
)
def nccl_net_set(ctx: Context) -> Iterator[Finding]:
    """RDMA pods name their NCCL network. Without NCCL_NET, NCCL (since 2.10) tries the net plugins, then its
    built-in IB, then Socket, and takes the first that initialises: an RDMA device that is missing, a plugin
    that fails to load or a bad NCCL_IB_HCA leaves the job on TCP with nothing but an INFO line. NCCL_NET forces
    the network by name and so prevents that silent fallback (NVIDIA/nccl@v2.30.7-1:docs/userguide/source/env.rst
    NCCL_NET, read in src/init.cc): init fails instead. A NCCL_NET from valueFrom counts as set; envFrom and
    nccl.conf files are not seen. For MPIJob workers a value the launcher exports (`mpirun -x`) counts."""
    for t in ctx.templates:
        if not is_rdma_pod(t):
            continue
        for c in containers(t):
            if not (has_gpus(c) or rdma_resources(c)):
                continue
            e = rank_env(ctx, t, c)
            if "NCCL_NET" in e and (e["NCCL_NET"] is None or e["NCCL_NET"].strip()):
                continue
            if EFA in rdma_resources(c):
                name = "Libfabric (AWS Libfabric with older aws-ofi-nccl plugins)"
            else:
                name = "IB (or the net plugin's own name, such as IBext for the HPC-X SHARP plugin)"
            how = (
                " on the worker, or export it from the launcher (mpirun -x NCCL_NET)"
                if ctx.obj.get("kind") == "MPIJob"
                else ""
            )
            yield Finding(
                f"{where(t, c)} requests RDMA but does not set NCCL_NET: when the RDMA transport fails "
                "to initialise (device not visible, plugin not loaded, wrong HCA) NCCL silently falls "
                "back to TCP sockets and the job runs at a fraction of its bandwidth; set "
                f"NCCL_NET={name}{how} so such a failure stops the job at init"
            )


@rule(
    "nccl-int-values",
    "Integer NCCL variables hold integers",
    level=MANDATORY,
    description="NCCL parses integer variables with strtoll: `true` or text silently becomes 0.",
    remediation="give the variable an integer (1 or 0, not true or false)",
    trainer_alone=True,
)
def nccl_int_values(ctx: Context) -> Iterator[Finding]:
    for t in ctx.templates:
        for c in containers(t):
            for name, value in rank_literals(ctx, t, c).items():
                if name.startswith("NCCL_") and (p := nccl.value_problem(name, value)):
                    yield Finding(f"{where(t, c)}: {p}")


@rule(
    "nccl-ib-hca",
    "RDMA pods pin their HCAs exactly",
    level=MANDATORY,
    description="Pods with InfiniBand/RoCE resources set NCCL_IB_HCA, with `=` when a listed name prefixes another. "
    "For MPIJob workers what the launcher exports counts (`mpirun -x`, `-genv`, `-genvlist`; the "
    "launcher's whole env under horovodrun or mpiImplementation Intel/MPICH); a value from valueFrom "
    "counts as set. The other NCCL rules read the same environment.",
    remediation="set NCCL_IB_HCA to the compute HCAs, with `=` for exact names",
)
def nccl_ib_hca(ctx: Context) -> Iterator[Finding]:
    for t in ctx.templates:
        for c in containers(t):
            rdma = [r for r in rdma_resources(c) if r != EFA]
            if not rdma:
                continue
            e = rank_env(ctx, t, c)
            if "NCCL_IB_HCA" in e and e["NCCL_IB_HCA"] is None:
                continue  # valueFrom: set, by a value the manifest does not show
            value = e.get("NCCL_IB_HCA")
            if not value:
                how = (
                    " (on the worker, or exported by the launcher: mpirun -x NCCL_IB_HCA=...)"
                    if ctx.obj.get("kind") == "MPIJob"
                    else ""
                )
                yield Finding(
                    f"{where(t, c)} requests {', '.join(rdma)} but does not set NCCL_IB_HCA{how}: NCCL may "
                    "pick storage or management HCAs; list the compute HCAs (with `=` for exact names)"
                )
            elif nccl.needs_exact(value):
                yield Finding(
                    f"{where(t, c)}: NCCL_IB_HCA={value} lists a name that prefixes another (mlx5_1 also "
                    f"matches mlx5_10): write ={value.lstrip('^=')} (or ^={value.lstrip('^=')})"
                )


@rule(
    "nccl-socket-ifname",
    "NCCL_SOCKET_IFNAME selects an interface the pod has",
    level=MANDATORY,
    description="Evaluated with NCCL's prefix, `^` and `=` semantics against eth0 and the Multus interfaces (net1..).",
    remediation="name an interface the pod has: eth0, or its Multus interface (net1..)",
)
def nccl_socket_ifname(ctx: Context) -> Iterator[Finding]:
    for t in ctx.templates:
        if ctx.obj.get("kind") == "MPIJob" and t.role == "Launcher":
            # The launcher runs mpirun, not NCCL: its NCCL_* are there for `mpirun -x` to hand to the workers,
            # whose interfaces (rails included) are the ones that count; they are judged in the Worker template.
            continue
        ifaces = network_interfaces(t)
        for c in containers(t):
            value = rank_literals(ctx, t, c).get("NCCL_SOCKET_IFNAME")
            if not value:
                continue
            if (p := nccl.socket_ifname_problem(value, ifaces)) is not None:
                yield Finding(f"{where(t, c)}: {p}")


@rule(
    "hostnetwork-dns",
    "Host-network training pods resolve cluster names",
    level=MANDATORY,
    description="A pod on the host network (`hostNetwork: true`) in a workload that requests GPUs sets dnsPolicy "
    "ClusterFirstWithHostNet: unset or ClusterFirst, the kubelet gives it the node's resolv.conf, so "
    "Service and pod names (a rendezvous Service, a PyTorchJob's master, an MPI launcher's worker "
    "hostnames) do not resolve and the job hangs at rendezvous. Every host-network pod of such a "
    "workload counts, a launcher without GPUs too; workloads without GPUs (node agents) are not judged.",
    remediation="set dnsPolicy: ClusterFirstWithHostNet",
)
def hostnetwork_dns(ctx: Context) -> Iterator[Finding]:
    """A host-network pod under ClusterFirst does not get cluster DNS: the kubelet's getPodDNSType answers
    ClusterFirst with podDNSCluster only for a pod off the host network and falls through to DNSDefault (the
    node's resolv.conf) for one on it; ClusterFirstWithHostNet is what gives such a pod the cluster's DNS
    (kubernetes/kubernetes@04791b4:pkg/kubelet/network/dns/dns.go getPodDNSType). An unset dnsPolicy is defaulted
    to ClusterFirst (SetDefaults_PodSpec, pkg/apis/core/v1/defaults.go), so it fails the same way. Default and
    None are choices someone made and pass. The launcher of an MPIJob has no GPUs but is the pod that resolves
    the workers' hostnames, so the whole workload is judged once any of its pods requests GPUs."""
    if not ctx.gpu_containers:
        return
    for t in ctx.templates:
        spec = t.template["spec"]
        if spec.get("hostNetwork") is not True:
            continue
        policy = spec.get("dnsPolicy")
        if policy not in (None, "", "ClusterFirst"):
            continue
        shown = "ClusterFirst" if policy == "ClusterFirst" else "unset (so ClusterFirst)"
        who = "the pod" if t.role == "pod" else f"{t.role} pod"
        yield Finding(
            f"{who} runs on the host network with dnsPolicy {shown}: the kubelet then gives it "
            "the node's resolv.conf instead of the cluster DNS, so Service and pod names (the rendezvous "
            "or master Service, the MPI launcher's worker hostnames) do not resolve and the job hangs at "
            "rendezvous; set dnsPolicy: ClusterFirstWithHostNet"
        )


@rule(
    "nccl-known-vars",
    "Every NCCL_* variable is one NCCL reads",
    level=MANDATORY,
    description="Removed variables are errors; deprecated ones (with the replacement) and unknown ones (with the "
    "nearest known name) are advisory. Source: NCCL v2.30.7's own list.",
    remediation="drop removed variables, rename deprecated ones, correct misspelt ones",
    mixed=True,
    trainer_alone=True,
)
def nccl_known_vars(ctx: Context) -> Iterator[Finding]:
    for t in ctx.templates:
        for c in containers(t):
            for name in rank_env(ctx, t, c):
                if not name.startswith("NCCL_"):
                    continue
                v = nccl.classify(name)
                if v.status == "removed":
                    yield Finding(f"{where(t, c)}: {v.hint}")
                elif v.status == "deprecated":
                    yield Finding(f"{where(t, c)}: {v.hint}", level=ADVISORY)
                elif v.status in ("unknown", "not_nccl"):
                    yield Finding(f"{where(t, c)}: {v.hint}", level=ADVISORY)


@rule(
    "nccl-debug-trace",
    "NCCL_DEBUG is not TRACE outside debugging",
    level=ADVISORY,
    description="TRACE is for debugging sessions; exempt those with a label.",
    remediation="use NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS, or exempt debugging workloads by label",
    trainer_alone=True,
)
def nccl_debug_trace(ctx: Context) -> Iterator[Finding]:
    for t in ctx.templates:
        for c in containers(t):
            if rank_literals(ctx, t, c).get("NCCL_DEBUG", "").strip().upper() == "TRACE":
                yield Finding(
                    f"{where(t, c)}: NCCL_DEBUG=TRACE floods logs and slows collectives (and prints "
                    "nothing more unless NCCL was built with TRACE=1): use INFO with NCCL_DEBUG_SUBSYS, "
                    "or label the workload as debugging"
                )


def _gang_covered(obj: dict, tpls: list[PodTemplate], runtime: dict | None = None) -> str | None:
    """Why the workload is gang-scheduled, or None. A TrainJob's PodGroup is its runtime's podGroupPolicy
    (kubeflow/trainer@v2.3.0:pkg/runtime/framework/plugins/volcano/volcano.go), when the runtime was seen."""
    total = total_replicas(tpls)
    spec = _d(obj.get("spec"))
    labels = _d(_d(obj.get("metadata")).get("labels"))
    if "kueue.x-k8s.io/queue-name" in labels:
        return "kueue"
    if is_volcano_job(obj):
        if spec.get("minAvailable") is not None and _int(spec.get("minAvailable")) is None:
            return "unknown"  # judgeable reports the unreadable number
        return "volcano" if (_int(spec.get("minAvailable")) or 0) >= total else None
    if obj.get("kind") in ("TrainingRuntime", "ClusterTrainingRuntime", "TrainJob"):
        pgp = _d(_d(runtime.get("spec")).get("podGroupPolicy") if runtime is not None else spec.get("podGroupPolicy"))
        return "podGroupPolicy" if pgp.get("volcano") is not None or pgp.get("coscheduling") is not None else None
    sched = _d(_d(spec.get("runPolicy")).get("schedulingPolicy"))
    if sched:
        elastic = _d(spec.get("elasticPolicy"))
        raw = [sched.get("minAvailable"), elastic.get("minReplicas")]
        if any(v is not None and _int(v) is None for v in raw):
            return "unknown"  # judgeable reports the unreadable number
        need = (_int(elastic.get("minReplicas")) or total) if elastic else total
        return "schedulingPolicy" if (_int(sched.get("minAvailable")) or 0) >= need else None
    group = any(pod_annotations(t).get("scheduling.k8s.io/group-name") for t in tpls)
    volcano = all(t.template["spec"].get("schedulerName") == "volcano" for t in tpls)
    return "podgroup" if group and volcano else None


@rule(
    "gang-scheduling",
    "Multi-pod training jobs are gang-scheduled",
    level=MANDATORY,
    description="Volcano (schedulerName/PodGroup, runPolicy.schedulingPolicy.minAvailable covering all replicas, or "
    "a podGroupPolicy on a TrainJob or runtime) or Kueue, so a job gets all its pods or none.",
    remediation="schedule with Volcano (minAvailable covering every replica) or Kueue (queue-name label)",
    kinds=TRAINING,
)
def gang_scheduling(ctx: Context) -> Iterator[Finding]:
    obj, tpls = ctx.obj, ctx.templates
    if obj.get("kind") not in TRAINING or total_replicas(tpls) < 2:
        return
    if not any(has_gpus(c) for t in tpls for c in containers(t)):
        return
    if _gang_covered(obj, tpls, ctx.pairing.runtime if ctx.pairing is not None else None) is None:
        yield Finding(
            f"{total_replicas(tpls)} pods without gang scheduling: a partial allocation holds GPUs and "
            "deadlocks. Use Volcano (runPolicy.schedulingPolicy.minAvailable covering every replica, "
            "schedulerName volcano) or Kueue (label kueue.x-k8s.io/queue-name)"
        )


def _idle_mpi_worker(r: Replica) -> bool:
    """An MPIJob worker that only hosts the ranks mpirun execs into it: no command (the operator then runs
    `sleep 365d`, kubeflow/trainer@v1.9.4:pkg/controller.v1/mpi/mpijob_controller.go newWorker), sleep or sshd.
    Its container never exits, so neither the job's end nor a lost rank stops or restarts it."""
    cs = containers(r.template)
    if not cs or not cs[0].get("command"):
        return True
    words = argv(cs[0])
    return not words or posixpath.basename(words[0]) in ("sleep", "sshd")


@rule(
    "clean-pod-policy",
    "Kubeflow jobs free their pods when they end",
    level=MANDATORY,
    description="Training Operator v1 jobs (kubeflow.org/v1 PyTorchJob, MPIJob, TFJob, XGBoostJob, PaddleJob, "
    "JAXJob) set runPolicy.cleanPodPolicy to Running or All: the default None deletes no pod when the "
    "job succeeds or fails, so MPI workers (`sleep 365d`) and the survivors of a failed job keep their "
    "GPUs.",
    remediation="set runPolicy.cleanPodPolicy: Running (or All)",
    kinds=KUBEFLOW_V1,
    pods=False,
)
def clean_pod_policy(ctx: Context) -> Iterator[Finding]:
    """A Training Operator v1 job says which pods to delete when it ends. Every kind defaults
    runPolicy.cleanPodPolicy to None (kubeflow/trainer@v1.9.4:pkg/apis/kubeflow.org/v1/mpi_defaults.go,
    pytorch_defaults.go, tensorflow_defaults.go, and the xgboost/paddlepaddle/jax ones), and for None
    DeletePodsAndServices deletes nothing (kubeflow/trainer@v1.9.4:pkg/controller.v1/common/job.go). MPIJob
    workers run `sleep 365d` and never exit; in every kind the failure paths (backoffLimit, activeDeadlineSeconds,
    one replica failing) mark the job Failed while the other pods are still running. Either way they keep their
    GPUs until the job is deleted or its TTL expires, so this is mandatory for every kind, not only MPIJob."""
    obj = ctx.obj
    if not is_kubeflow_v1(obj):
        return
    spec = _d(obj.get("spec"))
    policy = _d(spec.get("runPolicy")).get("cleanPodPolicy")
    if policy is None and obj["kind"] == "MPIJob":
        policy = spec.get("cleanPodPolicy")  # the deprecated top-level field; the MPI controller syncs the two
    if policy not in (None, "None"):
        return
    held = sum(gpus(c) * t.replicas for t in ctx.templates for c in containers(t))
    cause = (
        "runPolicy.cleanPodPolicy is unset, so the operator defaults it to None"
        if policy is None
        else "runPolicy.cleanPodPolicy is None"
    )
    reps = kubeflow_replicas(ctx)
    if obj["kind"] == "MPIJob" and any(r.role == "Worker" and _idle_mpi_worker(r) for r in reps):
        still = "the workers, which only run `sleep 365d` for mpirun, never exit"
    else:
        still = (
            "pods still running when it ends (the peers of a failed rank, pods cut off by backoffLimit or "
            "activeDeadlineSeconds) keep running"
        )
    yield Finding(
        f"{cause}: when the job ends the operator deletes none of its pods and {still}, holding "
        f"{f'{held} GPUs' if held else 'their nodes'} until the job is deleted or its TTL expires; set "
        "runPolicy.cleanPodPolicy: Running (deletes the pods still running or pending, keeps finished "
        "ones for their logs) or All"
    )


def _external_rendezvous(obj: dict) -> bool:
    """A PyTorchJob whose torchrun agents ride out a lost peer in place: elasticPolicy.maxRestarts >= 1 (the
    agents restart their workers and re-rendezvous instead of exiting) and a rendezvous store outside the job's
    pods. The c10d store is served by the agent whose host matches the rendezvous endpoint (pytorch/pytorch
    torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py `_create_tcp_store`), and that host is
    `<job>-worker-0` unless rdzvHost says otherwise (kubeflow/trainer@v1.9.4:pkg/controller.v1/pytorch/elastic.go):
    when that pod goes, every agent loses the store and exits."""
    ep = _d(_d(obj.get("spec")).get("elasticPolicy"))
    name = str(_d(obj.get("metadata")).get("name") or "")
    host = str(ep.get("rdzvHost") or "")
    restarts = _int(ep.get("maxRestarts")) or 0
    job_pod = re.match(rf"^{re.escape(name)}-(master|worker)-\d+(\.|$)", host)  # the operator's pod names
    return restarts >= 1 and bool(host) and not job_pod


@rule(
    "restart-budget",
    "backoffLimit outlasts one fault",
    level=MANDATORY,
    description="A set runPolicy.backoffLimit is above the container restarts one lost node or crashed rank causes: "
    "every pod of the OnFailure/Always replicas (PyTorchJob, TFJob, ...; one for an elastic PyTorchJob "
    "with maxRestarts and an external rdzvHost), the launcher of an MPIJob. With ExitCode replicas it "
    "is not 0. Never replicas do not count.",
    remediation="raise runPolicy.backoffLimit above the restarts one fault causes, or use restartPolicy: Never",
    kinds=KUBEFLOW_V1,
)
def restart_budget(ctx: Context) -> Iterator[Finding]:
    """runPolicy.backoffLimit outlasts one fault. PastBackoffLimit
    (kubeflow/trainer@v1.9.4:pkg/core/job.go) sums the container restart counts of every Running pod of the
    OnFailure/Always/ExitCode replicas and fails the job at `sum >= backoffLimit` (any restart when it is 0);
    counts only grow over the pods' lives. One lost node or crashed rank breaks the collective: every torchrun
    agent of a static (or worker-0-hosted elastic) job exits and its container restarts, so one fault costs as
    many restarts as there are pods; in an MPIJob it is the launcher (mpirun exits), not the sleeping workers.
    ExitCode pods run with restartPolicy Never and are recreated, not restarted (pkg/core/pod.go
    SetRestartPolicy), but backoffLimit 0 fails the job at the first Failed pod (pkg/controller.v1/common/job.go
    ReconcileJobs, exceedsBackoffLimit). Never replicas are not counted. An unset backoffLimit means no limit."""
    obj = ctx.obj
    reps = kubeflow_replicas(ctx)
    limit = _int(_d(_d(obj.get("spec")).get("runPolicy")).get("backoffLimit"))
    if not reps or limit is None:  # unset, or not a number (judgeable reports that)
        return
    kind = obj["kind"]
    in_place = [
        r
        for r in reps
        if r.restart in IN_PLACE and not (kind == "MPIJob" and r.role == "Worker" and _idle_mpi_worker(r))
    ]
    count = sum(r.replicas for r in in_place)
    if kind == "MPIJob":
        why = "mpirun exits when any rank is lost and the launcher's container restarts"
    elif kind == "PyTorchJob" and _external_rendezvous(obj):
        count = min(count, 1)
        why = "the failed pod's container restarts in place while the other agents re-rendezvous"
    elif kind == "PyTorchJob" and _d(obj.get("spec")).get("elasticPolicy"):
        why = (
            "the c10d rendezvous store lives in the agent on the rendezvous host, worker-0 unless rdzvHost points "
            "outside the job, and every agent exits when that pod goes, or at the first failure without "
            "maxRestarts"
        )
    else:
        why = "the collective breaks and every pod's training process exits and is restarted in place"
    who = ", ".join(f"{r.replicas} {r.role}" for r in in_place)
    if count and limit <= count:
        yield Finding(
            f"runPolicy.backoffLimit {limit} is not above the {count} container "
            f"restart{'s' if count > 1 else ''} one lost node "
            f"or crashed rank causes ({why}; {who} under restartPolicy "
            f"{'/'.join(sorted({r.restart for r in in_place}))}): the operator sums restarts over all "
            "running pods and fails the job when the sum reaches backoffLimit, so the first fault ends "
            f"the run instead of resuming it; set backoffLimit to at least {count + 1} (counts never "
            f"reset: add {count} for each further fault to survive), or restartPolicy: Never if the job "
            "should fail on its first fault"
        )
    elif limit == 0 and (exit_code := [r for r in reps if r.restart == "ExitCode"]):
        yield Finding(
            f"runPolicy.backoffLimit 0 with restartPolicy ExitCode "
            f"({', '.join(f'{r.replicas} {r.role}' for r in exit_code)}): the operator fails the job at "
            "the first Failed pod, even one that exited with a retryable code, so no pod is ever "
            "recreated; set backoffLimit to 1 or more (recreated pods are not counted against it: bound "
            "the retries with runPolicy.activeDeadlineSeconds)"
        )


@rule(
    "init-fail-fast",
    "Init containers of Kubeflow jobs fail the job",
    level=MANDATORY,
    description="A Training Operator v1 replica with initContainers uses restartPolicy Never: under "
    "OnFailure/Always a failing init container is retried forever, under ExitCode the pod is recreated "
    "forever, and the gang keeps its nodes.",
    remediation="set the replica's restartPolicy: Never, or run the check in the main container's command",
    kinds=KUBEFLOW_V1,
)
def init_fail_fast(ctx: Context) -> Iterator[Finding]:
    """A failing init container ends the pod. Under replica restartPolicy OnFailure or Always the kubelet
    retries it forever (Init:CrashLoopBackOff): the pod never reaches Running, so PastBackoffLimit
    (kubeflow/trainer@v1.9.4:pkg/core/job.go) never counts it. Under ExitCode the pod fails, but the operator
    reads only the default container's exit code; that container never ran, the placeholder 0xbeef stays, and
    IsRetryableExitCode (>= 128) calls it retryable (kubeflow/trainer@v1.9.4:pkg/controller.v1/common/pod.go
    ReconcilePods, pkg/util/train/train_util.go): the pod is recreated without end. Either way the gang keeps
    every node. Native sidecars (restartPolicy Always on the init container) and the operator's own init
    containers are not checks and are skipped."""
    reps = kubeflow_replicas(ctx)
    gang = sum(r.replicas for r in reps) > 1
    for r in reps:
        if r.restart not in (*IN_PLACE, "ExitCode"):
            continue
        inits = [
            c.get("name")
            for c in r.template.template["spec"].get("initContainers") or []
            if c.get("restartPolicy") != "Always" and c.get("name") not in OPERATOR_INIT
        ]
        if not inits:
            continue
        if r.restart == "ExitCode":
            why = (
                "the operator judges a failed pod by its main container's exit code alone; after an init "
                "failure that container never ran, the placeholder code 0xbeef counts as retryable, and the "
                "pod is deleted and recreated without end"
            )
        else:
            why = (
                "the kubelet retries a failing init container forever (Init:CrashLoopBackOff) and the pod "
                "never reaches Running, so backoffLimit never counts it"
            )
        held = "the rest of the gang holds its nodes" if gang else "the pod holds its node"
        yield Finding(
            f"{r.role} replica (restartPolicy {r.restart}) runs init container(s) "
            f"{', '.join(repr(n) for n in inits)}: {why}, while {held}; set the replica's "
            "restartPolicy: Never (a failed check fails the pod and the job, and cleanPodPolicy frees "
            "the nodes) or run the check at the start of the main container's command"
        )


def _tolerates(own: dict, other: dict) -> bool:
    """Whether toleration `own` tolerates every taint that toleration `other` does (Kubernetes matching)."""
    exists = own.get("operator") == "Exists"
    key_ok = (exists and not own.get("key")) or own.get("key") == other.get("key")
    effect_ok = not own.get("effect") or own.get("effect") == other.get("effect")
    value_ok = exists or (other.get("operator") != "Exists" and own.get("value", "") == other.get("value", ""))
    return key_ok and effect_ok and value_ok


def _taint(t: dict) -> str:
    value = f"={t['value']}" if t.get("value") else ""
    return f"{t.get('key') or '*'}{value}:{t.get('effect') or '*'}"


@rule(
    "mpi-launcher-placement",
    "The MPI launcher can go where its workers go",
    level=ADVISORY,
    description="An MPIJob Launcher tolerates the taints its Workers tolerate, or is pinned to other nodes (a CPU "
    "pool) by nodeSelector or required node affinity: a Pending launcher holds the whole gang.",
    remediation="copy the Worker tolerations to the Launcher, or pin it to an untainted CPU pool",
    kinds={"MPIJob"},
)
def mpi_launcher_placement(ctx: Context) -> Iterator[Finding]:
    """An MPIJob launcher can be scheduled where its workers can. The operator builds the launcher pod from the
    Launcher template alone, copying no toleration or selector from the workers, and the launcher counts in the
    PodGroup's minMember (kubeflow/trainer@v1.9.4:pkg/controller.v1/mpi/mpijob_controller.go newLauncher,
    pkg/controller.v1/common/job.go ReconcileJobs): if every node carries a taint the workers tolerate, the
    launcher stays Pending and no pod of the gang ever starts. A launcher pinned (nodeSelector, required node
    affinity) to nodes other than the workers' is a deliberate CPU pool and passes."""
    if ctx.obj.get("kind") != "MPIJob":
        return
    launchers = [t for t in ctx.templates if t.role == "Launcher"]
    workers = [t for t in ctx.templates if t.role == "Worker"]
    if not launchers or not workers:
        return
    ls, ws = launchers[0].template["spec"], workers[0].template["spec"]
    selector = ls.get("nodeSelector") or {}
    on_worker_nodes = bool(selector) and all((ws.get("nodeSelector") or {}).get(k) == v for k, v in selector.items())
    node_affinity = (ls.get("affinity") or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if ls.get("nodeName") or required or (selector and not on_worker_nodes):
        return
    own = ls.get("tolerations") or []
    # PreferNoSchedule never blocks; node.kubernetes.io/* are node-condition taints, not pools.
    missing = [
        _taint(w)
        for w in ws.get("tolerations") or []
        if w.get("effect") != "PreferNoSchedule"
        and not str(w.get("key") or "").startswith("node.kubernetes.io/")
        and not any(_tolerates(o, w) for o in own)
    ]
    if missing:
        where_to = "is pinned to the workers' nodes" if on_worker_nodes else "has no nodeSelector or node affinity"
        yield Finding(
            f"Launcher does not tolerate {', '.join(missing)}, which the Worker pods tolerate, and "
            f"{where_to}: where every node carries that taint the launcher stays Pending, and as a member "
            "of the gang (it counts in the PodGroup's minMember) it keeps the whole MPIJob from starting; "
            "copy the Worker tolerations to mpiReplicaSpecs.Launcher.template.spec.tolerations, or give "
            "the launcher a nodeSelector for an untainted CPU pool"
        )


CHECKPOINT_FLAG = re.compile(r"^--(checkpoint|ckpt)[-_]?(dir|path)$")


def _checkpoint_flag(words: list[str]) -> tuple[str, str] | None:
    """(flag, path) of a `--checkpoint_dir PATH` / `--checkpoint-dir=PATH` (or ckpt) argument."""
    for i, w in enumerate(words):
        name, eq, value = w.partition("=")
        if CHECKPOINT_FLAG.match(name):
            value = value if eq else (words[i + 1] if i + 1 < len(words) else "")
            if value.startswith("/"):
                return name, value
    return None


@rule(
    "checkpoint-rwx",
    "Multi-node jobs checkpoint to shared storage",
    level=MANDATORY,
    description="Checkpoint mounts (paths or volumes named checkpoint/ckpt, CHECKPOINT_DIR, or a `--checkpoint_dir` "
    "/ `--ckpt-dir` argument) are ReadWriteMany claims, not emptyDir, hostPath or the container's own "
    "disk.",
    remediation="mount a ReadWriteMany PersistentVolumeClaim at the checkpoint path",
)
def checkpoint_rwx(ctx: Context) -> Iterator[Finding]:
    if total_replicas(ctx.templates) < 2:
        return
    namespace = str(_d(ctx.obj.get("metadata")).get("namespace") or "default")
    for t, c in ctx.gpu_containers:
        volumes = {v.get("name"): v for v in t.template["spec"].get("volumes") or []}
        ckpt_dir, said = env(c).get("CHECKPOINT_DIR"), "CHECKPOINT_DIR"
        if not ckpt_dir and (flag := _checkpoint_flag(argv(c))) is not None:
            said, ckpt_dir = flag
        if ckpt_dir and PLACEHOLDER.search(ckpt_dir):
            ckpt_dir = None
        mounts = [
            m
            for m in c.get("volumeMounts") or []
            if CHECKPOINT_PATH.search(m.get("mountPath", ""))
            or CHECKPOINT_PATH.search(m.get("name", ""))
            or (ckpt_dir and m.get("mountPath") and ckpt_dir.startswith(m["mountPath"]))
        ]
        if ckpt_dir and not mounts:
            yield Finding(
                f"{where(t, c)}: {said}={ckpt_dir} is on the container's own filesystem: lost "
                "with the pod; mount a ReadWriteMany claim there"
            )
        for m in mounts:
            v = volumes.get(m.get("name"), {})
            if "emptyDir" in v or "hostPath" in v:
                kind = "emptyDir" if "emptyDir" in v else "hostPath"
                yield Finding(
                    f"{where(t, c)} writes checkpoints to {kind} {m['mountPath']}: they vanish with the "
                    "pod or stay on one node; use a ReadWriteMany PersistentVolumeClaim"
                )
            claim = str(_d(v.get("persistentVolumeClaim")).get("claimName"))
            pvc = ctx.claims.get((namespace, claim))
            if pvc is not None and "ReadWriteMany" not in (_d(pvc.get("spec")).get("accessModes") or []):
                yield Finding(
                    f"{where(t, c)} writes checkpoints to claim {claim!r}, which is not ReadWriteMany: "
                    "pods on other nodes cannot mount it"
                )


# Kinds that declare processes per node.
NPROC_KINDS = frozenset({"PyTorchJob", "MPIJob", "TrainJob", "TrainingRuntime", "ClusterTrainingRuntime"})


def _nproc(obj: dict) -> tuple[str, str | None, list[str]]:
    """(field name, declared processes per node, roles it applies to)."""
    kind, spec = obj.get("kind"), _d(obj.get("spec"))
    if kind == "PyTorchJob":
        return "nprocPerNode", spec.get("nprocPerNode"), ["Master", "Worker"]
    if kind == "MPIJob":
        return "slotsPerWorker", spec.get("slotsPerWorker"), ["Worker"]
    if kind == "TrainJob":
        return "trainer.numProcPerNode", _d(spec.get("trainer")).get("numProcPerNode"), ["node"]
    if kind in ("TrainingRuntime", "ClusterTrainingRuntime"):
        ml = _d(spec.get("mlPolicy"))
        value = _d(ml.get("torch")).get("numProcPerNode") or _d(ml.get("mpi")).get("numProcPerNode")
        return "mlPolicy.numProcPerNode", value, ["node"]
    return "", None, []


@rule(
    "gpu-procs-match",
    "GPU limit equals processes per node",
    level=MANDATORY,
    description="nprocPerNode (PyTorchJob), slotsPerWorker (MPIJob) or numProcPerNode (Trainer) equals the GPUs per "
    "pod.",
    remediation="set processes per node to the GPUs per pod",
    kinds=NPROC_KINDS,
    trainer_alone=True,
)
def gpu_procs_match(ctx: Context) -> Iterator[Finding]:
    field_name, declared, roles = _nproc(ctx.obj)
    procs = _int(declared)
    if procs is None:  # unset, auto/gpu/cpu, or a template (judgeable reports that)
        return
    for t in ctx.templates:
        if t.role not in roles:
            continue
        for c in containers(t):
            if gpus(c) and not unknown_gpus(c) and gpus(c) != procs:
                yield Finding(
                    f"{where(t, c)} has {gpus(c)} GPUs but {field_name} is {procs}: "
                    + ("GPUs sit idle" if procs < gpus(c) else "processes share GPUs")
                    + f"; set {field_name} to {gpus(c)}"
                )


def _raw_template(obj: dict, path: str) -> dict | None:
    """The pod template at `path` (a PodTemplate.path such as spec.replicatedJobs[0].template.spec.template) in
    the object itself, not the extractor's cleaned copy."""
    node: Any = obj
    for part in path.split("."):
        m = re.fullmatch(r"([^\[]+)((?:\[\d+\])*)", part)
        if m is None or not isinstance(node, dict):
            return None
        node = node.get(m.group(1))
        for i in re.findall(r"\[(\d+)\]", m.group(2)):
            if not isinstance(node, list) or int(i) >= len(node):
                return None
            node = node[int(i)]
    if path == "spec":  # a Pod: the object's spec is the pod spec
        return {"spec": node} if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


def add_ipc_lock(obj: dict) -> dict | None:
    """Remediation for rdma-ipc-lock (safe and additive: it only adds a capability RDMA needs). Returns the fixed
    object, or None when nothing needed fixing (or the containers are in shapes it cannot safely edit)."""
    obj = _normalize(obj)  # a copy: the fix is returned, the caller's object is left as it was
    if not isinstance(obj, dict) or not isinstance(obj.get("kind"), str):
        return None
    changed = False
    for t in pod_templates(obj):
        raw = _raw_template(obj, t.path)
        spec = raw.get("spec") if raw is not None else None
        if not isinstance(spec, dict) or not isinstance(spec.get("containers"), list):
            continue  # TrainJob's trainer has no securityContext to set
        for c in spec["containers"]:
            if not isinstance(c, dict):
                continue
            if not rdma_resources(clean_container(c)):
                continue
            sc = c.get("securityContext")
            if sc is None:
                sc = c["securityContext"] = {}
            if not isinstance(sc, dict) or sc.get("privileged"):
                continue
            caps = sc.get("capabilities")
            if caps is None:
                caps = sc["capabilities"] = {}
            if not isinstance(caps, dict):
                continue
            add = caps.get("add") or []
            if isinstance(add, list) and "IPC_LOCK" not in add:
                caps["add"] = [*add, "IPC_LOCK"]
                changed = True
    return obj if changed else None


@rule(
    "rdma-ipc-lock",
    "RDMA pods add IPC_LOCK",
    level=MANDATORY,
    description="Containers requesting RDMA resources add the IPC_LOCK capability (or run privileged). Remediable.",
    remediation="add securityContext.capabilities.add: [IPC_LOCK]",
    remediate=add_ipc_lock,
)
def rdma_ipc_lock(ctx: Context) -> Iterator[Finding]:
    for t in ctx.templates:
        for c in containers(t):
            if not rdma_resources(c):
                continue
            sc = c.get("securityContext") or {}
            if sc.get("privileged") or "IPC_LOCK" in ((sc.get("capabilities") or {}).get("add") or []):
                continue
            yield Finding(
                f"{where(t, c)} requests {', '.join(rdma_resources(c))} without the IPC_LOCK capability: "
                "RDMA cannot pin memory (ibv_reg_mr fails); add securityContext.capabilities.add: [IPC_LOCK]"
            )


def moving_tag(image: str) -> str | None:
    """The tag of `image` if it moves (`latest`, `latest-gpu`, `nightly`, `main`, ...), else None."""
    if "@" in image:
        return None
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return None
    tag = last.rsplit(":", 1)[1]
    words = [w for w in re.split(r"[-._]", tag.lower()) if w]
    if "latest" in words:
        return tag
    if any(w in MOVING_TAG_WORDS for w in words) and not any(re.search(r"\d", w) for w in words):
        return tag
    return None


def templated_image(image: str) -> bool:
    """Whether a template fills in what decides pinning: the tag (or digest), or the whole reference when no
    literal tag follows (`${IMAGE_URI}`). `gcr.io/<project>/app:latest` has a literal tag and is judged."""
    last = image.rsplit("/", 1)[-1]
    tag = last.rsplit(":", 1)[1] if ":" in last and "@" not in image else None
    if tag is not None and not PLACEHOLDER.search(tag):
        return False
    return bool(PLACEHOLDER.search(image)) and "@sha256:" not in image


@rule(
    "image-pinned",
    "Images are pinned",
    level=MANDATORY,
    description="Every container image has a version tag or digest: never none, never a tag that moves (`latest`, "
    "`latest-gpu`, `nightly`, `main`, `master`, `stable`, ... unless another word of the tag carries a "
    "version or commit, as in `nightly-2024-06-01`).",
    remediation="pin a version tag or an @sha256 digest",
    trainer_alone=True,
)
def image_pinned(ctx: Context) -> Iterator[Finding]:
    for t in ctx.templates:
        for c in [*containers(t), *(t.template["spec"].get("initContainers") or [])]:
            image = str(c.get("image") or "").strip()
            if not image:
                yield Finding(f"{where(t, c)} has no image")
            elif templated_image(image):
                continue  # filled in later: judgeable says it could not be judged
            elif (p := image_problem(image)) is not None:
                yield Finding(f"{where(t, c)}: {p}")
            elif (tag := moving_tag(image)) is not None:
                yield Finding(
                    f"{where(t, c)}: image {image!r} uses the moving tag `{tag}`: each pull may bring "
                    "a different build (nodes of one job can run different code); pin a version tag or "
                    "an @sha256 digest"
                )


@rule(
    "env-no-secrets",
    "No credentials in env literals",
    level=MANDATORY,
    description="Env values that look like tokens or keys (or secret-named variables with literal values, including "
    "`${HF_TOKEN}` placeholders a template fills in) must come from secretKeyRef.",
    remediation="use valueFrom.secretKeyRef",
    trainer_alone=True,
)
def env_no_secrets(ctx: Context) -> Iterator[Finding]:
    for t in ctx.templates:
        for c in containers(t):
            for name, value in env(c).items():
                if SECRET_NAME.search(name) and PLACEHOLDER.fullmatch(value.strip()):
                    yield Finding(
                        f"{where(t, c)}: env {name} is filled in from {value.strip()} when the manifest is "
                        "rendered, so the credential then sits in the object for anyone who can read it; "
                        "use valueFrom.secretKeyRef"
                    )
                elif TOKEN_VALUE.match(value.strip()) or (SECRET_NAME.search(name) and len(value.strip()) >= 8):
                    yield Finding(
                        f"{where(t, c)}: env {name} holds a literal credential: anyone who can read the "
                        "manifest has it; use valueFrom.secretKeyRef"
                    )


def _ipam_types(conf: dict) -> list[str]:
    out = []
    plugins = conf.get("plugins")
    for plugin in [conf, *(plugins if isinstance(plugins, list) else [])]:
        ipam = plugin.get("ipam") if isinstance(plugin, dict) else None
        if isinstance(ipam, dict) and ipam.get("type"):
            out.append(ipam["type"])
    return out


@rule(
    "nad-cluster-ipam",
    "Secondary networks use cluster-wide IPAM",
    level=MANDATORY,
    description="A NetworkAttachmentDefinition's IPAM is not host-local (each node would reuse the same addresses).",
    remediation="use cluster-wide IPAM (nv-ipam or whereabouts)",
    kinds={"NetworkAttachmentDefinition"},
    pods=False,
)
def nad_cluster_ipam(ctx: Context) -> Iterator[Finding]:
    if ctx.obj.get("kind") != "NetworkAttachmentDefinition":
        return
    raw = _d(ctx.obj.get("spec")).get("config") or "{}"
    try:
        conf = json.loads(raw) if isinstance(raw, str) else None
    except (json.JSONDecodeError, RecursionError):
        conf = None
    if not isinstance(conf, dict):
        yield Finding("spec.config is not a JSON object in a string: Multus cannot attach this network")
        return
    if "host-local" in _ipam_types(conf):
        yield Finding(
            "IPAM host-local on a network pods use across nodes: every node hands out the same addresses "
            "(duplicate IPs, silent NCCL hangs); use cluster-wide IPAM (nv-ipam or whereabouts)"
        )


@rule(
    "sriov-pool-drain",
    "SR-IOV pools drain a few nodes at a time",
    level=MANDATORY,
    description="A SriovNetworkPoolConfig sets maxUnavailable (unset: every node of the pool drains and reboots at "
    "once when SR-IOV settings change).",
    remediation="set spec.maxUnavailable (a count or a percentage)",
    kinds={"SriovNetworkPoolConfig"},
    pods=False,
)
def sriov_pool_drain(ctx: Context) -> Iterator[Finding]:
    """k8snetworkplumbingwg/sriov-network-operator (the build network-operator v26.4.1 bundles): a node in a
    SriovNetworkPoolConfig whose maxUnavailable is unset may drain at any time, so every node of the pool drains
    and reboots at once when VFs, firmware or the RDMA mode change (the first apply included)."""
    if ctx.obj.get("kind") != "SriovNetworkPoolConfig":
        return
    if _d(ctx.obj.get("spec")).get("maxUnavailable") is None:
        yield Finding(
            "no spec.maxUnavailable: every node of this pool may drain and reboot at once when the SR-IOV "
            "configuration changes (firmware rewrite, numVfs, rdmaMode): the whole GPU pool goes down "
            "together; set maxUnavailable (a count or a percentage)"
        )


LEGACY_EVICTING_ACTIONS = ("preempt", "reclaim")


@rule(
    "volcano-gang-actions",
    "Volcano evicts whole gangs",
    level=ADVISORY,
    description="A Volcano scheduler configuration (ConfigMap key volcano-scheduler.conf) uses "
    "gangpreempt/gangreclaim, not the legacy preempt/reclaim that split gangs, and lowercase action "
    "names.",
    remediation="use gangpreempt and gangreclaim (Volcano >= 1.13), in lowercase",
    kinds={"ConfigMap"},
    pods=False,
)
def volcano_gang_actions(ctx: Context) -> Iterator[Finding]:
    """volcano-sh/volcano@v1.15.1 pkg/scheduler/actions/{preempt,reclaim}: the legacy actions evict task by task
    per node and split several gangs in half; gangpreempt/gangreclaim evict whole jobs."""
    if ctx.obj.get("kind") != "ConfigMap":
        return
    raw = _d(ctx.obj.get("data")).get("volcano-scheduler.conf")
    if not isinstance(raw, str):
        return
    m = re.search(r"^actions:\s*[\"']?([^\"'\n]*)", raw, re.M)
    if m is None:
        return
    actions = [a.strip() for a in m.group(1).split(",")]
    legacy = [a for a in actions if a in LEGACY_EVICTING_ACTIONS]
    if legacy:
        yield Finding(
            f"Volcano actions {', '.join(legacy)} evict pods one at a time per node: gang jobs (whole "
            "PodGroups) end up half-evicted, still holding the rest of their nodes; use gangpreempt and "
            "gangreclaim (Volcano >= 1.13), which evict whole jobs"
        )
    bad = [a for a in actions if a and a != a.lower()]
    if bad:
        yield Finding(
            f"Volcano action names are lowercase ({', '.join(bad)}): a misspelt action makes the scheduler "
            "keep its previous configuration and only log an error"
        )


TRAINJOB_RUNTIME = "trainjob-runtime"


@rule(
    TRAINJOB_RUNTIME,
    "TrainJobs are judged by the pods their runtime gives them",
    level=MANDATORY,
    description="A TrainJob is judged together with the ClusterTrainingRuntime it names (or the TrainingRuntime of "
    "that name in its namespace) when that is among the objects checked: every rule reads the pods the "
    "trainer controller makes from the two, and this rule flags the fabric wiring the TrainJob takes "
    "away from its runtime (an RDMA resource overridden in resourcesPerNode, a GPU limit without the "
    "request, resourcesPerNode without the GPU count so torchrun starts one process per node, memory "
    "at or under /dev/shm, a fabric NCCL variable replaced; IPC_LOCK, tolerations, the dshm volume, "
    "the networks annotation or the GPU node selector replaced by a runtime patch). A runtime that is "
    "not among the objects is an advisory finding naming it, as judgeable does: only the trainer's "
    "image and env were judged. What a runtime gets wrong is reported on the runtime, once, not again "
    "on each TrainJob that names it. Under CrossGuard this is a stack policy (it needs the runtime), "
    "and it carries the other rules' findings on TrainJobs, each prefixed with its rule id.",
    remediation="leave the runtime's wiring alone (the message names the TrainJob field); lint a TrainJob together "
    "with its runtime",
    mixed=True,
    kinds={"TrainJob"},
    pods=False,
    stack=True,
    trainer_alone=True,
)
def trainjob_runtime(ctx: Context) -> Iterator[Finding]:
    """A TrainJob cannot carry wiring of its own, only take some away: kubeflow/trainer@v2.3.0 merges
    resourcesPerNode per resource name, upserts env by name and applies runtimePatches as a strategic merge patch
    that replaces lists whole (../notes/trainer-v2.md a; components/jobs/trainer_v2_runtime.py override_problems)."""
    pairing = ctx.pairing
    if ctx.obj.get("kind") != "TrainJob" or pairing is None:
        return
    if pairing.runtime is None or pairing.effective is None:
        yield Finding(pairing.problem or "its runtime was not judged", level=ADVISORY)
        return
    try:
        problems = override_problems(ctx.obj, pairing.runtime, pairing.derived)
    except MERGE_ERRORS as err:  # pair() merged the two already; a shape only the comparison trips on
        yield Finding(
            f"could not be compared with {pairing.ref} ({type(err).__name__}: {str(err)[:160]}): what it "
            "overrides was not judged",
            level=ADVISORY,
        )
        return
    for message in problems:
        yield Finding(message)


# Integer fields the rules read, all below spec: (path, rules that could not judge without it).
INT_FIELDS = [
    (("spec", "minAvailable"), "gang-scheduling"),
    (("spec", "runPolicy", "schedulingPolicy", "minAvailable"), "gang-scheduling"),
    (("spec", "elasticPolicy", "minReplicas"), "gang-scheduling"),
    (("spec", "elasticPolicy", "maxRestarts"), "restart-budget"),
    (("spec", "runPolicy", "backoffLimit"), "restart-budget"),
    (("spec", "nprocPerNode"), "gpu-procs-match"),
    (("spec", "slotsPerWorker"), "gpu-procs-match"),
    (("spec", "trainer", "numProcPerNode"), "gpu-procs-match"),
]


def _at(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _gpu_paths(value: Any, path: str) -> list[str]:
    """Where GPUs are requested anywhere in an object (resources.limits/requests with a GPU resource)."""
    found: list[str] = []

    def requests_gpus(value: dict, path: str) -> bool:
        res = value.get("resources")
        if isinstance(res, dict) and any(
            isinstance(res.get(k), dict) and any(GPU_RESOURCE.match(str(r)) for r in res[k])
            for k in ("limits", "requests")
        ):
            found.append(path)
            return True
        return False

    walk(value, path, requests_gpus, limit=20)
    return found


@rule(
    "judgeable",
    "What the rules could not judge is said",
    level=ADVISORY,
    description="Parts in shapes Kubernetes would refuse (`Master: null`, env entries without a name, containers "
    "as a mapping), GPU counts and numbers that a template fills in later (`$GPUS`, `{{ .Values.gpus "
    "}}`), templated images, and GPU pods inside a kind the linter does not know (judged as single "
    "pods, when it finds their pod specs) are listed, so a clean run means judged, not skipped. GPUs "
    "are nvidia.com/gpu, nvidia.com/mig-*, amd.com/gpu, gpu.intel.com/i915|xe and habana.ai/gaudi.",
    remediation="lint the rendered manifest, or the objects an unknown kind creates",
    pods=False,
    trainer_alone=True,
)
def judgeable(ctx: Context) -> Iterator[Finding]:
    """What the rules could not judge, said rather than passed in silence: parts of the object in shapes
    Kubernetes would not give them (podspecs.extract lists them), GPU counts and numbers the rules read that a
    template fills in later, templated images, and GPU pods inside a kind the linter does not know."""
    for problem in ctx.problems:
        yield Finding(problem)
    for t in ctx.templates:
        for c in containers(t):
            for res, value in unknown_gpus(c).items():
                yield Finding(
                    f"{where(t, c)}: {res} is {str(value)!r}, not a number (a template variable?): "
                    "shm-size and gpu-procs-match could not count its GPUs (the other rules judged it as "
                    "a GPU container); lint the rendered manifest"
                )
        for c in [*containers(t), *(t.template["spec"].get("initContainers") or [])]:
            image = str(c.get("image") or "").strip()
            if image and templated_image(image):
                yield Finding(
                    f"{where(t, c)}: image {image!r} is filled in later: image-pinned could not judge "
                    "it; lint the rendered manifest"
                )
    spec = _d(ctx.obj.get("spec"))
    for path, rule in INT_FIELDS:
        value = _at(spec, path[1:]) if path[1] in spec else None  # most objects have none of these fields
        if (
            value is not None
            and _int(value) is None
            and not (path[-1] in ("nprocPerNode", "numProcPerNode") and str(value) in ("auto", "gpu", "cpu"))
        ):
            yield Finding(
                f"{'.'.join(path)} is {str(value)!r}, not a number (a template variable?): {rule} could "
                "not judge it; lint the rendered manifest"
            )
    if not ctx.known_kind:
        gpu_paths = _gpu_paths(ctx.obj.get("spec"), "spec")
        if gpu_paths:
            kind = f"{ctx.obj.get('apiVersion') or '?'} {ctx.obj.get('kind')}"
            judged = sorted({t.path for t in ctx.templates})
            what = (
                f"its pod specs at {', '.join(judged)} were judged as single pods, but replica counts, gang "
                "scheduling and the job-level rules were not applied"
                if judged
                else "it holds no pod spec the rules can read, so nothing in it was judged"
            )
            yield Finding(
                f"{kind} is not a workload kind the linter knows, and it requests GPUs at "
                f"{', '.join(gpu_paths[:5])}{' ...' if len(gpu_paths) > 5 else ''}: {what}; lint the "
                "objects it creates (kubectl get pods -o yaml), or add the kind to policies/podspecs.py"
            )


BY_ID = {r.id: r for r in RULES}


# ------------------------------------------------------------------------------------------- evaluation


class ConfigError(ValueError):
    """A policy config CrossGuard would refuse, or one naming a rule or setting this pack does not have."""


def policy_names() -> dict[str, Rule]:
    """CrossGuard policy name -> rule: every rule, and `<id>-advisory` for the advisory findings of mixed ones."""
    return {**BY_ID, **{f"{r.id}-advisory": r for r in RULES if r.mixed}}


def _level(value: Any, where: str) -> str:
    if not isinstance(value, str) or value not in LEVELS:
        raise ConfigError(f"{where}: {value!r} is not an enforcement level: use one of {', '.join(LEVELS)}")
    return value


def _nearest(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(str(name), list(known), n=1, cutoff=0.5)
    return f": did you mean {close[0]!r}?" if close else f" (known: {', '.join(sorted(known))})"


def parse_config(raw: Any) -> dict[str, dict]:
    """A CrossGuard policy-pack config (`pulumi preview --policy-pack-config`) checked and resolved the way the
    engine does (pulumi/pulumi pkg/resource/analyzer/config.go parsePolicyPackConfig, applyConfig): each key is a
    policy name or `all`; each value an enforcement level string (`"rule-id": "disabled"`) or an object with an
    optional `enforcementLevel` and the policy's properties. `all`'s level applies to every policy first, then
    each policy's own entry. Beyond the engine, a policy name or property this pack does not have is refused
    with the nearest one (the engine would ignore a typo silently), and properties are type-checked.
    Returns {policy name: {"enforcementLevel": ..., <property>: ...}} for every policy, ready for `evaluate`."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(
            f"the policy config is {type(raw).__name__}, not a mapping of policy names to levels or "
            'objects (e.g. {"all": "advisory", "shm-size": {"minGiBPerGpu": 2}})'
        )
    names = policy_names()
    entries: dict[str, tuple[str | None, dict]] = {}
    for key, value in raw.items():
        key = str(key)
        if key != "all" and key not in names:
            raise ConfigError(f"{key}: no policy of that name in this pack{_nearest(key, [*names, 'all'])}")
        if isinstance(value, str):
            entries[key] = (_level(value, key), {})
        elif isinstance(value, dict):
            props = {str(k): v for k, v in value.items() if k != "enforcementLevel"}
            level = (
                _level(value["enforcementLevel"], f"{key}.enforcementLevel") if "enforcementLevel" in value else None
            )
            if key != "all":
                _check_props(key, names[key], props)
            entries[key] = (level, props)
        else:
            raise ConfigError(
                f"{key}: {value!r} is not a valid value; must be an enforcement level string or an object"
            )
    all_level = entries.get("all", (None, {}))[0]
    out = {}
    for name, rule in names.items():
        default = ADVISORY if name.endswith("-advisory") and name not in BY_ID else rule.level
        level, props = entries.get(name, (None, {}))
        out[name] = {**props, "enforcementLevel": level or all_level or default}
    return out


def _check_props(name: str, rule: Rule, props: dict) -> None:
    schema = {k: type(d) for k, (d, _) in rule.params.items()}
    for k, v in props.items():
        if k == "exemptNamespaces":
            if not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
                raise ConfigError(f"{name}.exemptNamespaces: {v!r} is not a list of namespace names")
        elif k == "exemptLabels":
            if not (isinstance(v, dict) and all(isinstance(x, str) for x in v.values())):
                raise ConfigError(f"{name}.exemptLabels: {v!r} is not a mapping of label keys to string values")
        elif k not in schema:
            known = [*schema, "enforcementLevel", "exemptNamespaces", "exemptLabels"]
            raise ConfigError(f"{name}.{k}: {rule.id} has no such setting{_nearest(k, known)}")
        elif (
            not (
                isinstance(v, schema[k])
                or (schema[k] is float and isinstance(v, int))
                or (schema[k] is int and isinstance(v, float) and v.is_integer())
            )
            or isinstance(v, bool)
            and schema[k] is not bool
        ):
            raise ConfigError(
                f"{name}.{k}: {v!r} is not a{'n' if schema[k] is int else ''} "
                f"{JSON_TYPE_NAMES.get(schema[k], schema[k].__name__)}"
            )


JSON_TYPE_NAMES = {int: "integer", float: "number", str: "string", bool: "boolean", list: "array", dict: "object"}


def _entry(config: dict | None, name: str) -> dict:
    """One policy's entry of a config: resolved by parse_config, or written by hand (tests, the CrossGuard
    validator) as {rule-id: {...}} or {rule-id: "level"}."""
    value = (config or {}).get(name)
    if isinstance(value, str):
        return {"enforcementLevel": value}
    return value if isinstance(value, dict) else {}


def rule_config(rule: Rule, config: dict | None, name: str | None = None) -> dict:
    """The rule's defaults merged with the user's config for policy `name` (the rule's id, or `<id>-advisory`
    for the advisory findings of a mixed rule)."""
    name = name or rule.id
    merged = {k: default for k, (default, _) in rule.params.items()}
    level = ADVISORY if name != rule.id else rule.level
    all_level = _entry(config, "all").get("enforcementLevel")
    merged.update({"enforcementLevel": all_level or level, "exemptNamespaces": [], "exemptLabels": {}})
    if name != rule.id:  # the advisory policy shares the rule's settings unless it has its own
        merged.update({k: v for k, v in _entry(config, rule.id).items() if k != "enforcementLevel"})
    merged.update(_entry(config, name))
    return merged


def exempt(obj: dict, cfg: dict) -> bool:
    md = _d(obj.get("metadata"))
    if md.get("namespace") in (cfg.get("exemptNamespaces") or []):
        return True
    labels = _d(md.get("labels"))
    return any(labels.get(k) == v for k, v in _d(cfg.get("exemptLabels")).items())


def claim_index(objects: list[dict]) -> dict[tuple[str, str], dict]:
    out = {}
    for o in objects:
        if isinstance(o, dict) and o.get("kind") == "PersistentVolumeClaim":
            md = _d(o.get("metadata"))
            out[(str(md.get("namespace") or "default"), str(md.get("name")))] = o
    return out


def _level_of(finding: Finding, rule: Rule, cfg: dict, advisory_cfg: dict | None) -> str | None:
    """The level a finding is reported at, or None when its policy is disabled or exempts the object."""
    if finding.level == ADVISORY and advisory_cfg is not None:  # a mixed rule's advisory finding: its own policy
        cfg = advisory_cfg
    elif finding.level == ADVISORY:
        return None if cfg["enforcementLevel"] == DISABLED else ADVISORY
    level = cfg["enforcementLevel"]
    if level == REMEDIATE and rule.remediate is None:
        level = MANDATORY  # CrossGuard: remediate without a remediation acts as mandatory
    return None if level == DISABLED else level


@dataclass(frozen=True)
class Plan:
    """The rules to run under one config, each with its policy settings resolved once: a lint of many objects
    resolves the config once, not once per object and rule."""

    checks: tuple[tuple[Rule, dict, dict | None], ...]  # (rule, its policy's settings, its -advisory policy's)
    _by_kind: dict[str, tuple] = field(default_factory=dict, compare=False, repr=False)

    def for_kind(self, kind: str) -> tuple[tuple[Rule, dict, dict | None], ...]:
        """The checks that can flag an object of `kind`."""
        if kind not in self._by_kind:
            self._by_kind[kind] = tuple(
                check for check in self.checks if check[0].kinds is None or kind in check[0].kinds
            )
        return self._by_kind[kind]


def plan(config: dict | None = None, rules: list[Rule] | None = None) -> Plan:
    """`rules` (default: all) under `config`, the policies it disables left out."""
    checks = []
    for each in rules or RULES:
        cfg = rule_config(each, config)
        adv = rule_config(each, config, f"{each.id}-advisory") if each.mixed else None
        if cfg["enforcementLevel"] == DISABLED and (adv is None or adv["enforcementLevel"] == DISABLED):
            continue
        checks.append((each, cfg, adv))
    return Plan(tuple(checks))


def evaluate(
    obj: Any,
    config: dict | None = None,
    claims: dict | None = None,
    rules: list[Rule] | None = None,
    checks: Plan | None = None,
    runtimes: RuntimeIndex | None = None,
) -> list[Violation]:
    """Every violation of `obj`. `claims` (claim_index of all objects being checked) lets rules see the access
    modes of the claims a pod mounts; `runtimes` (RuntimeIndex of the same objects) the runtime a TrainJob names,
    whose pods it is judged by. `config` is CrossGuard's format, resolved by parse_config or written directly as
    {policy: {enforcementLevel, <param>, exemptNamespaces, exemptLabels}}; a caller checking many objects passes
    `checks` (plan(config, rules)) instead, resolved once."""
    obj = normalize(obj)
    if not isinstance(obj, dict) or not isinstance(obj.get("kind"), str):
        return []  # not a Kubernetes object (the loader reports such documents)
    checks = checks or plan(config, rules)
    todo = checks.for_kind(obj["kind"])
    if not todo:
        return []
    if obj["kind"] == "TrainJob":
        return _train_job(obj, checks, todo, claims, runtimes)
    return _judge(obj, extract(obj), todo, claims)


def _train_job(
    obj: dict, checks: Plan, todo: tuple, claims: dict | None, runtimes: RuntimeIndex | None
) -> list[Violation]:
    """A TrainJob by the pods its runtime gives it, less what the runtime is already flagged for; by its trainer
    alone, under the rules that can judge a container by itself, when the runtime is not among the objects."""
    pairing = pair(obj, runtimes)
    trainer = extract(obj)
    if pairing.effective is None:
        todo = tuple(c for c in todo if c[0].trainer_alone)
        return _judge(obj, trainer, todo, claims, pairing)
    effective = Extracted(pairing.effective.templates, trainer.problems + pairing.effective.problems)
    own = _runtime_findings(pairing, runtimes, checks, claims)
    out = []
    for v in _judge(obj, effective, todo, claims, pairing):
        if v.rule == TRAINJOB_RUNTIME:
            out.append(v)
        elif (v.rule, v.level, v.message) not in own:
            out.append(dataclasses.replace(v, message=f"in the pods {pairing.ref} gives it: {v.message}"))
    return out


def _runtime_findings(
    pairing: Pairing, runtimes: RuntimeIndex | None, checks: Plan, claims: dict | None
) -> frozenset[tuple[str, str, str]]:
    """(rule, level, message) of what the runtime is flagged for on its own, worked out once per runtime and lint."""
    if runtimes is None or pairing.runtime is None:
        return frozenset()
    key = (pairing.ref, id(checks))
    if key not in runtimes.memo:  # the plan is kept beside its findings, so its id is not reused meanwhile
        found = evaluate(pairing.runtime, claims=claims, checks=checks, runtimes=runtimes)
        runtimes.memo[key] = (checks, frozenset((v.rule, v.level, v.message) for v in found))
    return runtimes.memo[key][1]


def _judge(
    obj: dict, found: Extracted, todo: tuple, claims: dict | None, pairing: Pairing | None = None
) -> list[Violation]:
    md = _d(obj.get("metadata"))
    out = []
    ctx = Context(obj, found.templates, {}, claims or {}, found.problems, found.known, pairing=pairing)
    for rule, cfg, adv in todo:
        if rule.pods and not found.templates:
            continue
        ctx.config = cfg  # checks run one after another, each drained before the next
        for f in rule.check(ctx):
            level = _level_of(f, rule, cfg, adv)
            if level is None or exempt(obj, adv if (adv is not None and f.level == ADVISORY) else cfg):
                continue
            out.append(
                Violation(
                    rule.id, level, obj["kind"], str(md.get("namespace") or ""), str(md.get("name") or ""), f.message
                )
            )
    return out
