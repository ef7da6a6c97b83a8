"""Typed job config: one `fastpath:jobs` entry (or TrainingJobArgs.spec in Python), as a researcher describes a
training job, with no fabric details, and the rules a job obeys on any cluster. What a job may ask of one
cluster is components/jobs/checks.py (`problems`); the cluster is components/model/config.py.

Field docstrings are the config reference (docs/config.md is generated from them by tools/gendocs.py).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from components import k8s_syntax
from components.fabric import nccl
from components.model.base import DnsName, EnvName, JobApi, Model, SecretKey, image_problem
from components.model.topology import TopologyPlacement

# Where every job's checkpoint directory is mounted (profile.checkpoints.mountRoot).
CHECKPOINT_ROOT = "/checkpoints"
# Set by the Training Operator, torchrun or fastpath itself: a job's `env` may not set them (the value would be
# silently replaced, or would break rendezvous); `envOverrides` takes the NCCL/launcher ones on purpose.
LAUNCHER_OWNED = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "TF_CONFIG",
    "CHECKPOINT_DIR",
    "PYTHONUNBUFFERED",
    "TORCH_DISABLE_SHARE_RDZV_TCP_STORE",
)
LAUNCHER_PREFIXES = ("PET_", "OMPI_MCA_", "TORCHELASTIC_")
SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY)")


class ElasticSpec(Model):
    min_nodes: Annotated[int, Field(gt=0, le=100000)]
    """Fewest nodes the job runs on; the gang scheduler waits for this many. Required."""
    max_nodes: Annotated[int, Field(gt=0, le=100000)]
    """Most nodes the job grows to. Required; at least minNodes."""

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data: object) -> object:
        if isinstance(data, dict) and "maxRestarts" in data:
            raise ValueError(
                "elastic.maxRestarts moved to the job's maxRestarts (it applies to every pytorch job "
                "now): write maxRestarts: N beside elastic"
            )
        return data

    @model_validator(mode="after")
    def _order(self) -> ElasticSpec:
        if self.min_nodes > self.max_nodes:
            raise ValueError(
                f"elastic.minNodes ({self.min_nodes}) is larger than elastic.maxNodes "
                f"({self.max_nodes}): swap them or raise maxNodes"
            )
        return self


class SecretRef(Model):
    secret: DnsName
    """Name of the Secret in the job's namespace. Required."""
    key: SecretKey
    """Key within the Secret. Required."""


class DatasetSpec(Model):
    claim: DnsName
    """An existing PersistentVolumeClaim in the job's namespace, mounted read-only. Required."""
    mount_path: Annotated[str, Field(pattern=r"^/\S*$")]
    """Where the dataset appears in the container. Required."""


class JobSpec(Model):
    """A training job as a researcher describes it: no fabric details. One `fastpath:jobs` entry, or
    TrainingJobArgs.spec in Python."""

    name: Annotated[str, Field(pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$")]
    """Job name (lowercase letters, digits, `-`; starts with a letter). Pod names derive from it. Required."""
    image: Annotated[str, Field(min_length=1)]
    """Container image with a pinned tag or @sha256 digest (never `latest`). Required."""
    command: Annotated[list[str], Field(min_length=1)]
    """What each process runs, as you would run it on one machine (`[python, train.py, --lr, 3e-4]`); fastpath
    launches it with torchrun (pytorch) or mpirun (mpi). Required."""
    framework: Literal["pytorch", "mpi", "tensorflow"] = "pytorch"
    """`pytorch` (PyTorchJob + torchrun, default), `mpi` (MPIJob v1: Horovod, DeepSpeed with MPI) or
    `tensorflow` (TFJob, Chief + Workers)."""
    nodes: Annotated[int, Field(gt=0, le=100000)] | None = None
    """Number of nodes (one pod per node). Exactly one of `nodes` or `elastic`."""
    elastic: ElasticSpec | None = None
    """Elastic size (pytorch only): worker-only job with c10d rendezvous between minNodes and maxNodes."""
    gpus_per_node: Annotated[int, Field(gt=0)] | None = None
    """GPUs (and processes) per node. Default: all of a node's GPUs."""
    namespace: str | None = None
    """Training namespace. Default: the platform's first training namespace."""
    queue: str | None = None
    """Volcano queue. Default: the platform's default queue."""
    priority_class: str | None = None
    """Priority tier: training-critical, training-standard (default) or training-preemptible."""
    memory_gib: int | None = Field(default=None, gt=0, alias="memoryGiB")
    """Memory limit of each pod in GiB, /dev/shm included. Default: 90% of the node's share for the GPUs used."""
    shm_gib: int | None = Field(default=None, gt=0, alias="shmGiB")
    """Size of /dev/shm in GiB (memory-backed, counted in the memory limit). Default: 16 per GPU, at most a
    quarter of the memory limit."""
    cpus: Annotated[int, Field(gt=0)] | None = None
    """CPUs of each pod. Default: 90% of the node's share for the GPUs used."""
    env: dict[EnvName, str] = {}
    """Extra environment variables. Variables the platform sets (NCCL_IB_HCA, NCCL_SOCKET_IFNAME, MASTER_ADDR,
    ...) are refused here: put them in envOverrides to override on purpose. Secrets go in secretEnv."""
    env_overrides: dict[EnvName, str] = {}
    """Deliberate overrides of platform-set NCCL/launcher variables; shown as overrides in the job contract."""
    secret_env: dict[EnvName, SecretRef] = {}
    """Environment variables read from Secrets (e.g. HF_TOKEN: {secret: hf, key: token})."""
    datasets: list[DatasetSpec] = []
    """Existing claims mounted read-only."""
    debug_nccl: bool = False
    """Log NCCL at INFO with the INIT and NET subsystems (transport and HCA choice). Default false (WARN)."""
    preflight: bool = True
    """On RDMA fabrics, an init container checks GPUs, RDMA devices, HCAs, rail interfaces, memlock and /dev/shm
    and fails fast with the fix instead of letting NCCL fall back to TCP. Default true."""
    max_restarts: Annotated[int, Field(ge=0, le=100)] | None = None
    """Faults the job recovers from before it fails, each resuming from the last checkpoint. pytorch: torchrun
    restarts of the worker group (a crashed process, a lost node: survivors re-rendezvous with the replacement
    pod). mpi: relaunches of mpirun (the launcher's restarts, runPolicy.backoffLimit). Not for tensorflow, whose
    workers cannot re-form a cluster: a fault fails the job and frees its nodes. Default 3."""
    files: dict[Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]+$")], Annotated[str, Field(min_length=1)]] = {}
    """Local files shipped with the job as a ConfigMap `<job>-files` mounted read-only at /workspace/files:
    file name in the pod -> path relative to the Pulumi project (e.g. `{train.py: examples/train.py}`), the way
    `kubectl create configmap --from-file` would. For small scripts and configs (1 MiB in all); code that is
    not in the image."""
    ttl_seconds_after_finished: Annotated[int, Field(ge=0, le=k8s_syntax.INT32_MAX)] | None = None
    """Not allowed (kept so the error can say why): a v1 job deleted by its TTL is submitted again by the next
    `pulumi up` after a `pulumi refresh`, because the stack still declares it. A finished v1 job keeps its object
    and its finished pods' logs (its running pods go: cleanPodPolicy Running) until it leaves the stack file; a v2
    run keeps its JobSet, without running pods, until its TrainJob is deleted."""
    api: JobApi | None = None
    """`v1` (PyTorchJob/MPIJob/TFJob) or `v2` (a TrainJob naming one of the platform's runtimes). Only on clusters
    with jobApi `both`, where the default is v1; elsewhere the cluster's API."""
    topology: TopologyPlacement | None = None
    """Where this job's pods go in the cluster's fabric topology (`{level, mode}`: a level of
    fastpath:platform.nodes.topology, `preferred` or `required`). Default: the platform's placement."""

    @field_validator("env", "env_overrides", mode="before")
    @classmethod
    def _stringify(cls, v: object) -> object:
        if isinstance(v, dict):
            for k, val in v.items():
                if isinstance(val, bool):
                    raise ValueError(f"{k}: write 1 or 0 (or quote the string), not {str(val).lower()}")
            return {k: str(val) if isinstance(val, int | float) else val for k, val in v.items()}
        return v

    @field_validator("ttl_seconds_after_finished")
    @classmethod
    def _no_ttl(cls, v: int | None) -> int | None:
        if v is not None:
            raise ValueError(
                "a job its TTL deletes is submitted again by the next `pulumi up` after a `pulumi refresh` (the "
                "stack still declares it), so it would rerun days later: remove the key; a finished job keeps only "
                "its object and logs, and goes when you remove it from the stack file"
            )
        return v

    @model_validator(mode="after")
    def _rules(self) -> JobSpec:
        problems = []
        if (p := image_problem(self.image)) is not None:
            problems.append(p)
        if (self.nodes is None) == (self.elastic is None):
            problems.append("set exactly one of nodes (fixed size) or elastic (minNodes/maxNodes)")
        if self.elastic is not None and self.framework != "pytorch":
            problems.append(f"elastic is only for framework pytorch, not {self.framework}: set nodes instead")
        longest = max(self.pod_names(), key=len)
        if len(longest) > 63:
            problems.append(
                f"name {self.name!r} makes the pod name {longest!r} ({len(longest)} characters), over "
                f"Kubernetes' 63: shorten the name by {len(longest) - 63}"
            )
        for name, value in self.env.items():
            if owned_by_platform(name):
                problems.append(
                    f"env.{name} is set by the platform (fabric or launcher); remove it, or move it "
                    "to envOverrides to override it on purpose"
                )
            elif SECRET_NAME.search(name):
                problems.append(
                    f"env.{name} looks like a secret: put it in secretEnv "
                    "({secret: <name>, key: <key>}) so it never appears in the stack or manifests"
                )
            problems += nccl_problems("env", name, value)
        for name, value in self.env_overrides.items():
            if not owned_by_platform(name):
                problems.append(f"envOverrides.{name} is not a platform-set variable: put it in env")
            problems += nccl_problems("envOverrides", name, value)
        clash = sorted(set(self.secret_env) & (set(self.env) | set(self.env_overrides)))
        if clash:
            problems.append(f"{', '.join(clash)} set both in secretEnv and env: keep one")
        problems += self._mount_problems()
        problems += self._relative_files()
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _relative_files(self) -> list[str]:
        """A command naming a shipped file by its bare name would run in the image's working directory, where the
        file is not: every worker would fail with "can't open file"."""
        out = []
        for arg in self.command:
            name = arg.removeprefix("./")
            if name in self.files and not arg.startswith("/"):
                out.append(
                    f"command names {arg}, which files ships to /workspace/files/{name}; the pods run in the image's "
                    f"working directory: write /workspace/files/{name}"
                )
        return out

    def _mount_problems(self) -> list[str]:
        """A dataset mounted on a path fastpath mounts (or inside one, or around one) would hide it or be hidden:
        the API server refuses two mounts on one path, and a nested one shadows the other."""
        owned = {
            "/dev/shm": "/dev/shm",
            CHECKPOINT_ROOT: "the checkpoint claim",
            "/workspace/files": "files",
            "/fastpath": "the preflight script",
        }
        out = []
        for i, d in enumerate(self.datasets):
            for path, what in owned.items():
                if k8s_syntax.under(d.mount_path, path) or k8s_syntax.under(path, d.mount_path):
                    out.append(
                        f"datasets[{i}].mountPath {d.mount_path} collides with {path} ({what}): mount the "
                        "dataset elsewhere, e.g. /data"
                    )
            for j in range(i):
                other = self.datasets[j].mount_path
                if k8s_syntax.under(d.mount_path, other) or k8s_syntax.under(other, d.mount_path):
                    out.append(
                        f"datasets[{i}].mountPath {d.mount_path} and datasets[{j}].mountPath {other} "
                        "overlap: give each dataset a path of its own"
                    )
        return out

    @property
    def max_nodes(self) -> int:
        return self.nodes if self.nodes is not None else (self.elastic.max_nodes if self.elastic else 1)

    @property
    def min_nodes(self) -> int:
        return self.nodes if self.nodes is not None else (self.elastic.min_nodes if self.elastic else 1)

    def pod_names(self) -> list[str]:
        """The operator's pod names (also their headless Service names, DNS labels of at most 63)."""
        n = self.max_nodes
        first = {"pytorch": "master-0", "mpi": "launcher", "tensorflow": "chief-0"}[self.framework]
        return [f"{self.name}-{first}", f"{self.name}-worker-{max(0, n - 1)}"]


def owned_by_platform(name: str) -> bool:
    return name in nccl.PLATFORM_OWNED or name in LAUNCHER_OWNED or name.startswith(LAUNCHER_PREFIXES)


def nccl_problems(where: str, name: str, value: str) -> list[str]:
    if not name.startswith("NCCL_"):
        return []
    verdict = nccl.classify(name)
    if not verdict.ok and verdict.status != "deprecated":
        return [f"{where}.{verdict.hint}"]
    p = nccl.value_problem(name, value)
    return [f"{where}.{p}"] if p else []


def references(spec: JobSpec, namespace: str) -> list[tuple[str, str, str]]:
    """(kind, namespace/name, key path in the job) of every object `spec` uses that no stack makes: the Secrets its
    secretEnv reads and the claims its datasets mount (fastpath:existing declares them)."""
    out = [("secrets", f"{namespace}/{ref.secret}", f"secretEnv.{var}.secret") for var, ref in spec.secret_env.items()]
    out += [("claims", f"{namespace}/{d.claim}", f"datasets[{i}].claim") for i, d in enumerate(spec.datasets)]
    return out
