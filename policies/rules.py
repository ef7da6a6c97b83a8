"""The rule catalogue: stable IDs, what each checks, its default enforcement level, the config it takes, and a
message that says how to fix.

Every rule is a pure function over one Kubernetes object (a dict, normalized once by `normalize`) plus its
config and the other objects being checked (for cross-object facts, such as a claim's access modes). The
CrossGuard pack (policies/__main__.py) and the offline linter (tools/lint.py) both call `evaluate`.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from components import nccl
from components.config import image_problem
from components.fabric import NETWORKS_ANNOTATION
from components.profile import normalize as _normalize
from policies.podspecs import REPLICA_SPECS, PodTemplate, is_volcano_job, pod_templates, total_replicas

MANDATORY, ADVISORY, DISABLED = "mandatory", "advisory", "disabled"
GPU = "nvidia.com/gpu"
RDMA_RESOURCE = re.compile(r"^(rdma/.+|vpc\.amazonaws\.com/efa|[^/]+/(sriov|hostdev|rdma|mlnx|ib)[^/]*)$")
EFA = "vpc.amazonaws.com/efa"
TOKEN_VALUE = re.compile(r"^(hf_[A-Za-z0-9]{20,}|ghp_[A-Za-z0-9]{20,}|gh[ousr]_[A-Za-z0-9]{20,}|glpat-[\w-]{16,}"
                         r"|sk-[A-Za-z0-9_-]{20,}|AKIA[0-9A-Z]{16}|xox[abpr]-[\w-]{10,}|eyJ[\w-]{20,}\.[\w-]+\.[\w-]+)$")
SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY)")
CHECKPOINT_PATH = re.compile(r"checkpoint|ckpt", re.I)
# Workloads that run a training gang (a batch/v1 Job with parallelism counts; Deployments do not).
TRAINING = {"PyTorchJob", "MPIJob", "TFJob", "XGBoostJob", "PaddleJob", "JAXJob", "TrainJob", "TrainingRuntime",
            "ClusterTrainingRuntime", "JobSet", "Job"}
# containerd and Docker give every container a 64 MiB /dev/shm unless the pod mounts its own.
SHM_RUNTIME_DEFAULT_GIB = 64 / 1024
# Training Operator v1: each kind's default replica restartPolicy (kubeflow/trainer@v1.9.4
# pkg/apis/kubeflow.org/v1/*_types.go `<Kind>DefaultRestartPolicy`, applied by the *_defaults.go files).
KUBEFLOW_V1_RESTART = {"PyTorchJob": "OnFailure", "PaddleJob": "OnFailure", "TFJob": "Never", "MPIJob": "Never",
                       "XGBoostJob": "Never", "JAXJob": "Never"}
# Replica policies the operator hands to the pod unchanged (pkg/core/pod.go SetRestartPolicy): the kubelet restarts
# containers in place. ExitCode becomes pod restartPolicy Never and the operator recreates the pod instead.
IN_PLACE = ("OnFailure", "Always")
# Init containers the operator injects itself (init-pytorch, the MPI launcher's kubectl-delivery).
OPERATOR_INIT = {"init-pytorch", "kubectl-delivery"}


def normalize(props) -> dict:
    """The one normalization both paths use: engine props (read-only proxies, every number a float) and YAML
    both become plain dicts with integers."""
    return _normalize(props)


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
        return {"rule": self.rule, "level": self.level, "kind": self.kind, "namespace": self.namespace,
                "name": self.name, "message": self.message}


@dataclass
class Context:
    obj: dict
    templates: list[PodTemplate]
    config: dict
    claims: dict[tuple[str, str], dict]  # (namespace, name) -> PersistentVolumeClaim among the checked objects


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    description: str
    level: str
    check: Callable[[Context], Iterator[Finding]]
    params: dict = field(default_factory=dict)  # name -> (default, description)
    mixed: bool = False  # a mandatory rule that also reports advisory findings (CrossGuard gets two policies)


# ------------------------------------------------------------------------------------------- pod helpers


def containers(t: PodTemplate) -> list[dict]:
    return list(t.template["spec"].get("containers") or [])


def resources(c: dict) -> dict:
    r = c.get("resources") or {}
    return {**(r.get("requests") or {}), **(r.get("limits") or {})}


def gpus(c: dict) -> int:
    try:
        return int(str(resources(c).get(GPU, 0)))
    except ValueError:
        return 0


def rdma_resources(c: dict) -> list[str]:
    return [r for r in resources(c) if RDMA_RESOURCE.match(r)]


def env(c: dict) -> dict[str, str]:
    """Literal env values (valueFrom entries are not literals)."""
    return {e["name"]: str(e.get("value", "")) for e in c.get("env") or [] if "valueFrom" not in e}


def annotations(t: PodTemplate) -> dict:
    return (t.template.get("metadata") or {}).get("annotations") or {}


def network_interfaces(t: PodTemplate) -> list[str]:
    """The interfaces a pod has: eth0 and lo, plus one per Multus network (net1.. unless named)."""
    raw = annotations(t).get(NETWORKS_ANNOTATION)
    out = ["eth0", "lo"]
    if not raw:
        return out
    try:
        nets = json.loads(raw)
        names = [n.get("interface") if isinstance(n, dict) else None for n in nets]
    except (json.JSONDecodeError, TypeError):
        names = [None for _ in str(raw).split(",") if _.strip()]
    return out + [n or f"net{i + 1}" for i, n in enumerate(names)]


def parse_mem_gib(q) -> float | None:
    if q is None:
        return None
    m = re.match(r"^([0-9.]+)([KMGTPE]i?|)$", str(q))
    if not m:
        return None
    scale = {"": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "K": 1e3, "M": 1e6,
             "G": 1e9, "T": 1e12, "P": 1e15}.get(m.group(2))
    return float(m.group(1)) * scale / 2**30 if scale else None


def gpu_containers(ctx: Context) -> Iterator[tuple[PodTemplate, dict]]:
    for t in ctx.templates:
        for c in containers(t):
            if gpus(c) > 0:
                yield t, c


def is_rdma_pod(t: PodTemplate) -> bool:
    return bool(annotations(t).get(NETWORKS_ANNOTATION)) or any(rdma_resources(c) for c in containers(t))


def where(t: PodTemplate, c: dict) -> str:
    return f"{t.role} container {c.get('name')!r}"


def argv(c: dict) -> list[str]:
    """A container's command and args as words; a `sh -c "..."` script is split the way the shell would."""
    words: list[str] = []
    for w in [*(c.get("command") or []), *(c.get("args") or [])]:
        w = str(w)
        if not any(ch.isspace() for ch in w):
            words.append(w)
            continue
        try:
            words += shlex.split(w)
        except ValueError:
            words += w.split()
    return words


def rank_env_of(c: dict) -> dict[str, str | None]:
    """Every env name a container sets: its literal value, or None for valueFrom."""
    return {e["name"]: (None if "valueFrom" in e else str(e.get("value", ""))) for e in c.get("env") or []
            if e.get("name")}


def launcher_exports(ctx: Context) -> dict[str, str | None]:
    """What an MPIJob launcher exports to every rank: `mpirun -x NAME=VALUE`, `-x NAME` (the launcher's own
    value, if its env sets one) and `-genv NAME VALUE` (MPICH, Intel MPI). Name -> literal value, or None when
    the value is not a literal (valueFrom)."""
    if ctx.obj.get("kind") != "MPIJob":
        return {}
    out: dict[str, str | None] = {}
    for t in ctx.templates:
        if t.role != "Launcher":
            continue
        for c in containers(t):
            words, own = argv(c), rank_env_of(c)
            for i, w in enumerate(words[:-1]):
                if w in ("-x", "--x"):
                    name, eq, value = words[i + 1].partition("=")
                    if eq:
                        out[name] = value
                    elif name in own:
                        out[name] = own[name]
                elif w in ("-genv", "--genv") and i + 2 < len(words):
                    out[words[i + 1]] = words[i + 2]
    return out


def rank_env(ctx: Context, t: PodTemplate, c: dict) -> dict[str, str | None]:
    """The environment the training processes in a container see: its own env, and for an MPIJob worker what
    the launcher exports with mpirun (the ranks are exec'd into the worker; `-x` overrides the pod's value)."""
    out = rank_env_of(c)
    if ctx.obj.get("kind") == "MPIJob" and t.role != "Launcher":
        out.update(launcher_exports(ctx))
    return out


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
    specs = (obj.get("spec") or {}).get(REPLICA_SPECS[obj["kind"]]) or {}
    default = KUBEFLOW_V1_RESTART[obj["kind"]]
    return [Replica(t.role, t.replicas, str((specs.get(t.role) or {}).get("restartPolicy") or default), t)
            for t in ctx.templates]


# ------------------------------------------------------------------------------------------- rules


def _shm_volume(t: PodTemplate, c: dict) -> dict | None:
    mounts = {m.get("name"): m for m in c.get("volumeMounts") or [] if m.get("mountPath") == "/dev/shm"}
    for v in t.template["spec"].get("volumes") or []:
        if v.get("name") in mounts and isinstance(v.get("emptyDir"), dict):
            return v
    return None


def shm_mounted(ctx: Context) -> Iterator[Finding]:
    """A GPU container gets more than the runtime's 64 MiB /dev/shm (containerd's CRI sandbox default,
    `defaultShmSize` in containerd/containerd pkg/cri/server/helpers_linux.go; Docker's is the same): without its
    own memory-backed mount, or with a sizeLimit at or under 64Mi, NCCL's shared-memory transport and PyTorch
    DataLoader workers run out of it (bus errors, NCCL init failures). One rule for "missing" and "too small to
    matter", so shm-size stays advisory sizing above 64Mi."""
    for t, c in gpu_containers(ctx):
        v = _shm_volume(t, c)
        if v is None or v["emptyDir"].get("medium") != "Memory":
            yield Finding(f"{where(t, c)} has no memory-backed /dev/shm (the container default is 64 MiB; NCCL and "
                          "dataloaders fail or crawl): mount an emptyDir {medium: Memory, sizeLimit: ...} at /dev/shm")
            continue
        size = parse_mem_gib(v["emptyDir"].get("sizeLimit"))
        if size is not None and size <= SHM_RUNTIME_DEFAULT_GIB:
            yield Finding(f"{where(t, c)}: /dev/shm sizeLimit {v['emptyDir']['sizeLimit']} is no more than the "
                          "container runtime's 64 MiB default, so mounting it gains nothing: NCCL's shared-memory "
                          "transport and DataLoader workers run out of it (bus errors, NCCL init failures); raise "
                          "the sizeLimit to GiBs (1Gi per GPU or more)")


def shm_size(ctx: Context) -> Iterator[Finding]:
    per_gpu = float(ctx.config.get("minGiBPerGpu", 1))
    for t, c in gpu_containers(ctx):
        v = _shm_volume(t, c)
        if v is None:
            continue
        size = parse_mem_gib(v["emptyDir"].get("sizeLimit"))
        need = per_gpu * gpus(c)
        if size is not None and size <= SHM_RUNTIME_DEFAULT_GIB:
            continue  # no better than no mount at all: shm-mounted (mandatory) reports it
        if size is None:
            yield Finding(f"{where(t, c)}: /dev/shm has no sizeLimit: set one (at least {need:g}Gi for "
                          f"{gpus(c)} GPUs) so it is sized on purpose and counted in the memory limit")
        elif size < need:
            yield Finding(f"{where(t, c)}: /dev/shm sizeLimit {v['emptyDir']['sizeLimit']} is under {need:g}Gi "
                          f"({per_gpu:g}Gi per GPU x {gpus(c)}): raise it")


def shm_fits_memory(ctx: Context) -> Iterator[Finding]:
    for t, c in gpu_containers(ctx):
        v = _shm_volume(t, c)
        size = parse_mem_gib(v["emptyDir"].get("sizeLimit")) if v else None
        if size is None:
            continue
        limit = parse_mem_gib(((c.get("resources") or {}).get("limits") or {}).get("memory"))
        if limit is None:
            yield Finding(f"{where(t, c)} has /dev/shm but no memory limit: tmpfs pages are charged to the pod; "
                          "set a memory limit that includes the shm size", level=ADVISORY)
        elif size >= limit:
            yield Finding(f"{where(t, c)}: /dev/shm sizeLimit {v['emptyDir']['sizeLimit']} does not fit in the "
                          f"memory limit {c['resources']['limits']['memory']} (tmpfs counts against it: OOM kill): "
                          "lower the shm size or raise the limit")


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
                yield Finding(f"{where(t, c)} requests RDMA (resources or secondary networks) but sets "
                              f"NCCL_IB_DISABLE={disable}: NCCL will use TCP sockets; set it to 0")
            net = e.get("NCCL_NET")
            if net is not None and net.strip().lower() == "socket":
                yield Finding(f"{where(t, c)} requests RDMA (resources or secondary networks) but sets "
                              f"NCCL_NET={net}: NCCL is forced onto TCP sockets and the RDMA devices sit idle; "
                              "set NCCL_NET=IB (or the name of the net plugin in use)")


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
            if not (gpus(c) or rdma_resources(c)):
                continue
            e = rank_env(ctx, t, c)
            if "NCCL_NET" in e and (e["NCCL_NET"] is None or e["NCCL_NET"].strip()):
                continue
            if EFA in rdma_resources(c):
                name = "Libfabric (AWS Libfabric with older aws-ofi-nccl plugins)"
            else:
                name = "IB (or the net plugin's own name, such as IBext for the HPC-X SHARP plugin)"
            how = (" on the worker, or export it from the launcher (mpirun -x NCCL_NET)"
                   if ctx.obj.get("kind") == "MPIJob" else "")
            yield Finding(f"{where(t, c)} requests RDMA but does not set NCCL_NET: when the RDMA transport fails "
                          "to initialise (device not visible, plugin not loaded, wrong HCA) NCCL silently falls "
                          "back to TCP sockets and the job runs at a fraction of its bandwidth; set "
                          f"NCCL_NET={name}{how} so such a failure stops the job at init")


def nccl_int_values(ctx: Context) -> Iterator[Finding]:
    for t in ctx.templates:
        for c in containers(t):
            for name, value in env(c).items():
                if name.startswith("NCCL_") and (p := nccl.value_problem(name, value)):
                    yield Finding(f"{where(t, c)}: {p}")


def nccl_ib_hca(ctx: Context) -> Iterator[Finding]:
    for t in ctx.templates:
        for c in containers(t):
            rdma = [r for r in rdma_resources(c) if r != EFA]
            if not rdma:
                continue
            value = env(c).get("NCCL_IB_HCA")
            if not value:
                yield Finding(f"{where(t, c)} requests {', '.join(rdma)} but does not set NCCL_IB_HCA: NCCL may pick "
                              "storage or management HCAs; list the compute HCAs (with `=` for exact names)")
            elif nccl.needs_exact(value):
                yield Finding(f"{where(t, c)}: NCCL_IB_HCA={value} lists a name that prefixes another (mlx5_1 also "
                              f"matches mlx5_10): write ={value.lstrip('^=')} (or ^={value.lstrip('^=')})")


def _ifname_matches(value: str, interfaces: list[str]) -> list[str]:
    body = value.strip()
    exclude = body.startswith("^")
    body = body.lstrip("^")
    exact = body.startswith("=")
    tokens = [t.split(":")[0] for t in body.lstrip("=").split(",") if t]

    def hit(iface: str) -> bool:
        return any(iface == tok if exact else iface.startswith(tok) for tok in tokens)

    return [i for i in interfaces if hit(i) != exclude]


def nccl_socket_ifname(ctx: Context) -> Iterator[Finding]:
    for t in ctx.templates:
        ifaces = network_interfaces(t)
        for c in containers(t):
            value = env(c).get("NCCL_SOCKET_IFNAME")
            if not value:
                continue
            chosen = [i for i in _ifname_matches(value, ifaces) if i != "lo"]
            if not chosen:
                yield Finding(f"{where(t, c)}: NCCL_SOCKET_IFNAME={value} selects none of the pod's interfaces "
                              f"({', '.join(ifaces)}): NCCL bootstrap cannot reach other pods; use =eth0")


def nccl_known_vars(ctx: Context) -> Iterator[Finding]:
    for t in ctx.templates:
        for c in containers(t):
            for name in env(c):
                if not name.startswith("NCCL_"):
                    continue
                v = nccl.classify(name)
                if v.status == "removed":
                    yield Finding(f"{where(t, c)}: {v.hint}")
                elif v.status == "deprecated":
                    yield Finding(f"{where(t, c)}: {v.hint}", level=ADVISORY)
                elif v.status in ("unknown", "not_nccl"):
                    yield Finding(f"{where(t, c)}: {v.hint}", level=ADVISORY)


def nccl_debug_trace(ctx: Context) -> Iterator[Finding]:
    for t in ctx.templates:
        for c in containers(t):
            if env(c).get("NCCL_DEBUG", "").upper() == "TRACE":
                yield Finding(f"{where(t, c)}: NCCL_DEBUG=TRACE floods logs and slows collectives (and prints "
                              "nothing more unless NCCL was built with TRACE=1): use INFO with NCCL_DEBUG_SUBSYS, "
                              "or label the workload as debugging")


def _gang_covered(obj: dict, tpls: list[PodTemplate]) -> str | None:
    """Why the workload is gang-scheduled, or None."""
    total = total_replicas(tpls)
    spec = obj.get("spec") or {}
    labels = (obj.get("metadata") or {}).get("labels") or {}
    if "kueue.x-k8s.io/queue-name" in labels:
        return "kueue"
    if is_volcano_job(obj):
        return "volcano" if int(spec.get("minAvailable") or 0) >= total else None
    if obj.get("kind") in ("TrainingRuntime", "ClusterTrainingRuntime"):
        pgp = spec.get("podGroupPolicy") or {}
        return "podGroupPolicy" if pgp.get("volcano") is not None or pgp.get("coscheduling") is not None else None
    sched = ((spec.get("runPolicy") or {}).get("schedulingPolicy")) or {}
    if sched:
        elastic = spec.get("elasticPolicy") or {}
        need = int(elastic.get("minReplicas") or total) if elastic else total
        return "schedulingPolicy" if int(sched.get("minAvailable") or 0) >= need else None
    group = any(annotations(t).get("scheduling.k8s.io/group-name") for t in tpls)
    volcano = all(t.template["spec"].get("schedulerName") == "volcano" for t in tpls)
    return "podgroup" if group and volcano else None


def gang_scheduling(ctx: Context) -> Iterator[Finding]:
    obj, tpls = ctx.obj, ctx.templates
    if obj.get("kind") not in TRAINING or total_replicas(tpls) < 2:
        return
    if not any(gpus(c) for t in tpls for c in containers(t)) and obj.get("kind") != "TrainJob":
        return
    if _gang_covered(obj, tpls) is None:
        yield Finding(f"{total_replicas(tpls)} pods without gang scheduling: a partial allocation holds GPUs and "
                      "deadlocks. Use Volcano (runPolicy.schedulingPolicy.minAvailable covering every replica, "
                      "schedulerName volcano) or Kueue (label kueue.x-k8s.io/queue-name)")


def _idle_mpi_worker(r: Replica) -> bool:
    """An MPIJob worker that only hosts the ranks mpirun execs into it: no command (the operator then runs
    `sleep 365d`, kubeflow/trainer@v1.9.4:pkg/controller.v1/mpi/mpijob_controller.go newWorker), sleep or sshd.
    Its container never exits, so neither the job's end nor a lost rank stops or restarts it."""
    cs = containers(r.template)
    if not cs or not cs[0].get("command"):
        return True
    words = argv(cs[0])
    return not words or posixpath.basename(words[0]) in ("sleep", "sshd")


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
    spec = obj.get("spec") or {}
    policy = (spec.get("runPolicy") or {}).get("cleanPodPolicy")
    if policy is None and obj["kind"] == "MPIJob":
        policy = spec.get("cleanPodPolicy")  # the deprecated top-level field; the MPI controller syncs the two
    if policy not in (None, "None"):
        return
    held = sum(gpus(c) * t.replicas for t in ctx.templates for c in containers(t))
    cause = ("runPolicy.cleanPodPolicy is unset, so the operator defaults it to None" if policy is None
             else "runPolicy.cleanPodPolicy is None")
    reps = kubeflow_replicas(ctx)
    if obj["kind"] == "MPIJob" and any(r.role == "Worker" and _idle_mpi_worker(r) for r in reps):
        still = "the workers, which only run `sleep 365d` for mpirun, never exit"
    else:
        still = ("pods still running when it ends (the peers of a failed rank, pods cut off by backoffLimit or "
                 "activeDeadlineSeconds) keep running")
    yield Finding(f"{cause}: when the job ends the operator deletes none of its pods and {still}, holding "
                  f"{f'{held} GPUs' if held else 'their nodes'} until the job is deleted or its TTL expires; set "
                  "runPolicy.cleanPodPolicy: Running (deletes the pods still running or pending, keeps finished "
                  "ones for their logs) or All")


def _external_rendezvous(obj: dict) -> bool:
    """A PyTorchJob whose torchrun agents ride out a lost peer in place: elasticPolicy.maxRestarts >= 1 (the
    agents restart their workers and re-rendezvous instead of exiting) and a rendezvous store outside the job's
    pods. The c10d store is served by the agent whose host matches the rendezvous endpoint (pytorch/pytorch
    torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py `_create_tcp_store`), and that host is
    `<job>-worker-0` unless rdzvHost says otherwise (kubeflow/trainer@v1.9.4:pkg/controller.v1/pytorch/elastic.go):
    when that pod goes, every agent loses the store and exits."""
    ep = (obj.get("spec") or {}).get("elasticPolicy") or {}
    name = (obj.get("metadata") or {}).get("name") or ""
    host = str(ep.get("rdzvHost") or "")
    try:
        restarts = int(ep.get("maxRestarts") or 0)
    except (TypeError, ValueError):
        restarts = 0
    job_pod = re.match(rf"^{re.escape(name)}-(master|worker)-\d+(\.|$)", host)  # the operator's pod names
    return restarts >= 1 and bool(host) and not job_pod


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
    limit = ((obj.get("spec") or {}).get("runPolicy") or {}).get("backoffLimit")
    if not reps or limit is None:
        return
    try:
        limit = int(limit)
    except (TypeError, ValueError):
        return
    kind = obj["kind"]
    in_place = [r for r in reps if r.restart in IN_PLACE
                and not (kind == "MPIJob" and r.role == "Worker" and _idle_mpi_worker(r))]
    count = sum(r.replicas for r in in_place)
    if kind == "MPIJob":
        why = "mpirun exits when any rank is lost and the launcher's container restarts"
    elif kind == "PyTorchJob" and _external_rendezvous(obj):
        count = min(count, 1)
        why = "the failed pod's container restarts in place while the other agents re-rendezvous"
    elif kind == "PyTorchJob" and (obj.get("spec") or {}).get("elasticPolicy"):
        why = ("the c10d rendezvous store lives in the agent on the rendezvous host, worker-0 unless rdzvHost points "
               "outside the job, and every agent exits when that pod goes, or at the first failure without "
               "maxRestarts")
    else:
        why = "the collective breaks and every pod's training process exits and is restarted in place"
    who = ", ".join(f"{r.replicas} {r.role}" for r in in_place)
    if count and limit <= count:
        yield Finding(f"runPolicy.backoffLimit {limit} is not above the {count} container "
                      f"restart{'s' if count > 1 else ''} one lost node "
                      f"or crashed rank causes ({why}; {who} under restartPolicy "
                      f"{'/'.join(sorted({r.restart for r in in_place}))}): the operator sums restarts over all "
                      "running pods and fails the job when the sum reaches backoffLimit, so the first fault ends "
                      f"the run instead of resuming it; set backoffLimit to at least {count + 1} (counts never "
                      f"reset: add {count} for each further fault to survive), or restartPolicy: Never if the job "
                      "should fail on its first fault")
    elif limit == 0 and (exit_code := [r for r in reps if r.restart == "ExitCode"]):
        yield Finding(f"runPolicy.backoffLimit 0 with restartPolicy ExitCode "
                      f"({', '.join(f'{r.replicas} {r.role}' for r in exit_code)}): the operator fails the job at "
                      "the first Failed pod, even one that exited with a retryable code, so no pod is ever "
                      "recreated; set backoffLimit to 1 or more (recreated pods are not counted against it: bound "
                      "the retries with runPolicy.activeDeadlineSeconds)")


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
        inits = [c.get("name") for c in r.template.template["spec"].get("initContainers") or []
                 if c.get("restartPolicy") != "Always" and c.get("name") not in OPERATOR_INIT]
        if not inits:
            continue
        if r.restart == "ExitCode":
            why = ("the operator judges a failed pod by its main container's exit code alone; after an init "
                   "failure that container never ran, the placeholder code 0xbeef counts as retryable, and the "
                   "pod is deleted and recreated without end")
        else:
            why = ("the kubelet retries a failing init container forever (Init:CrashLoopBackOff) and the pod "
                   "never reaches Running, so backoffLimit never counts it")
        held = "the rest of the gang holds its nodes" if gang else "the pod holds its node"
        yield Finding(f"{r.role} replica (restartPolicy {r.restart}) runs init container(s) "
                      f"{', '.join(repr(n) for n in inits)}: {why}, while {held}; set the replica's "
                      "restartPolicy: Never (a failed check fails the pod and the job, and cleanPodPolicy frees "
                      "the nodes) or run the check at the start of the main container's command")


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
    missing = [_taint(w) for w in ws.get("tolerations") or []
               if w.get("effect") != "PreferNoSchedule"
               and not str(w.get("key") or "").startswith("node.kubernetes.io/")
               and not any(_tolerates(o, w) for o in own)]
    if missing:
        where_to = "is pinned to the workers' nodes" if on_worker_nodes else "has no nodeSelector or node affinity"
        yield Finding(f"Launcher does not tolerate {', '.join(missing)}, which the Worker pods tolerate, and "
                      f"{where_to}: where every node carries that taint the launcher stays Pending, and as a member "
                      "of the gang (it counts in the PodGroup's minMember) it keeps the whole MPIJob from starting; "
                      "copy the Worker tolerations to mpiReplicaSpecs.Launcher.template.spec.tolerations, or give "
                      "the launcher a nodeSelector for an untainted CPU pool")


def checkpoint_rwx(ctx: Context) -> Iterator[Finding]:
    if total_replicas(ctx.templates) < 2:
        return
    namespace = (ctx.obj.get("metadata") or {}).get("namespace", "default")
    for t, c in gpu_containers(ctx):
        volumes = {v.get("name"): v for v in t.template["spec"].get("volumes") or []}
        ckpt_dir = env(c).get("CHECKPOINT_DIR")
        mounts = [m for m in c.get("volumeMounts") or []
                  if CHECKPOINT_PATH.search(m.get("mountPath", "")) or CHECKPOINT_PATH.search(m.get("name", ""))
                  or (ckpt_dir and ckpt_dir.startswith(m.get("mountPath", "\0")))]
        if ckpt_dir and not mounts:
            yield Finding(f"{where(t, c)}: CHECKPOINT_DIR={ckpt_dir} is on the container's own filesystem: lost "
                          "with the pod; mount a ReadWriteMany claim there")
        for m in mounts:
            v = volumes.get(m.get("name"), {})
            if "emptyDir" in v or "hostPath" in v:
                kind = "emptyDir" if "emptyDir" in v else "hostPath"
                yield Finding(f"{where(t, c)} writes checkpoints to {kind} {m['mountPath']}: they vanish with the "
                              "pod or stay on one node; use a ReadWriteMany PersistentVolumeClaim")
            claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
            pvc = ctx.claims.get((namespace, claim))
            if pvc is not None and "ReadWriteMany" not in ((pvc.get("spec") or {}).get("accessModes") or []):
                yield Finding(f"{where(t, c)} writes checkpoints to claim {claim!r}, which is not ReadWriteMany: "
                              "pods on other nodes cannot mount it")


def _nproc(obj: dict) -> tuple[str, str | None, list[str]]:
    """(field name, declared processes per node, roles it applies to)."""
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    if kind == "PyTorchJob":
        return "nprocPerNode", spec.get("nprocPerNode"), ["Master", "Worker"]
    if kind == "MPIJob":
        return "slotsPerWorker", spec.get("slotsPerWorker"), ["Worker"]
    if kind == "TrainJob":
        return "trainer.numProcPerNode", (spec.get("trainer") or {}).get("numProcPerNode"), ["node"]
    if kind in ("TrainingRuntime", "ClusterTrainingRuntime"):
        ml = spec.get("mlPolicy") or {}
        value = (ml.get("torch") or {}).get("numProcPerNode") or (ml.get("mpi") or {}).get("numProcPerNode")
        return "mlPolicy.numProcPerNode", value, ["node"]
    return "", None, []


def gpu_procs_match(ctx: Context) -> Iterator[Finding]:
    field_name, declared, roles = _nproc(ctx.obj)
    if declared is None or str(declared) in ("auto", "gpu"):
        return
    try:
        procs = int(str(declared))
    except ValueError:
        return
    for t in ctx.templates:
        if t.role not in roles:
            continue
        for c in containers(t):
            if gpus(c) and gpus(c) != procs:
                yield Finding(f"{where(t, c)} has {gpus(c)} GPUs but {field_name} is {procs}: "
                              + ("GPUs sit idle" if procs < gpus(c) else "processes share GPUs")
                              + f"; set {field_name} to {gpus(c)}")


def rdma_ipc_lock(ctx: Context) -> Iterator[Finding]:
    for t in ctx.templates:
        for c in containers(t):
            if not rdma_resources(c):
                continue
            sc = c.get("securityContext") or {}
            if sc.get("privileged") or "IPC_LOCK" in ((sc.get("capabilities") or {}).get("add") or []):
                continue
            yield Finding(f"{where(t, c)} requests {', '.join(rdma_resources(c))} without the IPC_LOCK capability: "
                          "RDMA cannot pin memory (ibv_reg_mr fails); add securityContext.capabilities.add: [IPC_LOCK]")


def image_pinned(ctx: Context) -> Iterator[Finding]:
    for t in ctx.templates:
        for c in [*containers(t), *(t.template["spec"].get("initContainers") or [])]:
            image = c.get("image")
            if not image:
                yield Finding(f"{where(t, c)} has no image")
            elif (p := image_problem(str(image))) is not None:
                yield Finding(f"{where(t, c)}: {p}")


def env_no_secrets(ctx: Context) -> Iterator[Finding]:
    for t in ctx.templates:
        for c in containers(t):
            for name, value in env(c).items():
                if TOKEN_VALUE.match(value.strip()) or (SECRET_NAME.search(name) and len(value.strip()) >= 8):
                    yield Finding(f"{where(t, c)}: env {name} holds a literal credential: anyone who can read the "
                                  "manifest has it; use valueFrom.secretKeyRef")


def _ipam_types(conf: dict) -> list[str]:
    out = []
    for plugin in [conf, *(conf.get("plugins") or [])]:
        ipam = plugin.get("ipam") if isinstance(plugin, dict) else None
        if isinstance(ipam, dict) and ipam.get("type"):
            out.append(ipam["type"])
    return out


def nad_cluster_ipam(ctx: Context) -> Iterator[Finding]:
    if ctx.obj.get("kind") != "NetworkAttachmentDefinition":
        return
    raw = (ctx.obj.get("spec") or {}).get("config") or "{}"
    try:
        conf = json.loads(raw)
    except json.JSONDecodeError:
        yield Finding("spec.config is not valid JSON: Multus cannot attach this network")
        return
    if "host-local" in _ipam_types(conf):
        yield Finding("IPAM host-local on a network pods use across nodes: every node hands out the same addresses "
                      "(duplicate IPs, silent NCCL hangs); use cluster-wide IPAM (nv-ipam or whereabouts)")


RULES: list[Rule] = [
    Rule("shm-mounted", "GPU pods mount a memory-backed /dev/shm above 64 MiB",
         "Every container that requests GPUs mounts an emptyDir with medium Memory at /dev/shm whose sizeLimit, if "
         "set, is above the container runtime's 64 MiB default.", MANDATORY, shm_mounted),
    Rule("shm-size", "/dev/shm is sized for the GPUs",
         "The /dev/shm emptyDir has a sizeLimit of at least minGiBPerGpu per GPU of the container (64Mi or "
         "less is shm-mounted's).", ADVISORY,
         shm_size, {"minGiBPerGpu": (1, "Smallest /dev/shm per GPU, in GiB.")}),
    Rule("shm-fits-memory", "/dev/shm fits in the memory limit",
         "The /dev/shm sizeLimit is smaller than the container's memory limit (tmpfs pages are charged to it).",
         MANDATORY, shm_fits_memory, mixed=True),
    Rule("nccl-ib-enabled", "RDMA pods keep NCCL's IB transport on",
         "Pods that request RDMA resources or secondary networks do not set NCCL_IB_DISABLE to anything but 0, "
         "nor NCCL_NET=Socket (in their env or exported by an MPI launcher).", MANDATORY, nccl_ib_enabled),
    Rule("nccl-net-set", "RDMA pods name their NCCL network",
         "GPU or RDMA containers of RDMA pods set NCCL_NET (IB, or the net plugin's name such as IBext or "
         "Libfabric), so a broken RDMA path fails NCCL init instead of falling back to TCP without a word. For "
         "MPIJob workers, `mpirun -x NCCL_NET` from the launcher counts.", MANDATORY, nccl_net_set),
    Rule("nccl-int-values", "Integer NCCL variables hold integers",
         "NCCL parses integer variables with strtoll: `true` or text silently becomes 0.", MANDATORY,
         nccl_int_values),
    Rule("nccl-ib-hca", "RDMA pods pin their HCAs exactly",
         "Pods with InfiniBand/RoCE resources set NCCL_IB_HCA, with `=` when a listed name prefixes another.",
         MANDATORY, nccl_ib_hca),
    Rule("nccl-socket-ifname", "NCCL_SOCKET_IFNAME selects an interface the pod has",
         "Evaluated with NCCL's prefix, `^` and `=` semantics against eth0 and the Multus interfaces (net1..).",
         MANDATORY, nccl_socket_ifname),
    Rule("nccl-known-vars", "Every NCCL_* variable is one NCCL reads",
         "Removed variables are errors; deprecated ones (with the replacement) and unknown ones (with the nearest "
         "known name) are advisory. Source: NCCL v2.30.7's own list.", MANDATORY, nccl_known_vars, mixed=True),
    Rule("nccl-debug-trace", "NCCL_DEBUG is not TRACE outside debugging",
         "TRACE is for debugging sessions; exempt those with a label.", ADVISORY, nccl_debug_trace),
    Rule("gang-scheduling", "Multi-pod training jobs are gang-scheduled",
         "Volcano (schedulerName/PodGroup or runPolicy.schedulingPolicy.minAvailable covering all replicas) or "
         "Kueue, so a job gets all its pods or none.", MANDATORY, gang_scheduling),
    Rule("clean-pod-policy", "Kubeflow jobs free their pods when they end",
         "Training Operator v1 jobs (kubeflow.org/v1 PyTorchJob, MPIJob, TFJob, XGBoostJob, PaddleJob, JAXJob) set "
         "runPolicy.cleanPodPolicy to Running or All: the default None deletes no pod when the job succeeds or "
         "fails, so MPI workers (`sleep 365d`) and the survivors of a failed job keep their GPUs.", MANDATORY,
         clean_pod_policy),
    Rule("restart-budget", "backoffLimit outlasts one fault",
         "A set runPolicy.backoffLimit is above the container restarts one lost node or crashed rank causes: "
         "every pod of the OnFailure/Always replicas (PyTorchJob, TFJob, ...; one for an elastic PyTorchJob with "
         "maxRestarts and an external rdzvHost), the launcher of an MPIJob. With ExitCode replicas it is not 0. "
         "Never replicas do not count.", MANDATORY, restart_budget),
    Rule("init-fail-fast", "Init containers of Kubeflow jobs fail the job",
         "A Training Operator v1 replica with initContainers uses restartPolicy Never: under OnFailure/Always a "
         "failing init container is retried forever, under ExitCode the pod is recreated forever, and the gang "
         "keeps its nodes.", MANDATORY, init_fail_fast),
    Rule("mpi-launcher-placement", "The MPI launcher can go where its workers go",
         "An MPIJob Launcher tolerates the taints its Workers tolerate, or is pinned to other nodes (a CPU pool) "
         "by nodeSelector or required node affinity: a Pending launcher holds the whole gang.", ADVISORY,
         mpi_launcher_placement),
    Rule("checkpoint-rwx", "Multi-node jobs checkpoint to shared storage",
         "Checkpoint mounts (paths or volumes named checkpoint/ckpt, or CHECKPOINT_DIR) are ReadWriteMany claims, "
         "not emptyDir or hostPath.", MANDATORY, checkpoint_rwx),
    Rule("gpu-procs-match", "GPU limit equals processes per node",
         "nprocPerNode (PyTorchJob), slotsPerWorker (MPIJob) or numProcPerNode (Trainer) equals the GPUs per pod.",
         MANDATORY, gpu_procs_match),
    Rule("rdma-ipc-lock", "RDMA pods add IPC_LOCK",
         "Containers requesting RDMA resources add the IPC_LOCK capability (or run privileged). Remediable.",
         MANDATORY, rdma_ipc_lock),
    Rule("image-pinned", "Images are pinned",
         "Every container image has a version tag or digest: never `latest`, never none.", MANDATORY, image_pinned),
    Rule("env-no-secrets", "No credentials in env literals",
         "Env values that look like tokens or keys (or secret-named variables with literal values) must come from "
         "secretKeyRef.", MANDATORY, env_no_secrets),
    Rule("nad-cluster-ipam", "Secondary networks use cluster-wide IPAM",
         "A NetworkAttachmentDefinition's IPAM is not host-local (each node would reuse the same addresses).",
         MANDATORY, nad_cluster_ipam),
]
BY_ID = {r.id: r for r in RULES}


# ------------------------------------------------------------------------------------------- evaluation


def rule_config(rule: Rule, config: dict | None) -> dict:
    """The rule's defaults merged with the user's config (CrossGuard policy-config format:
    {rule-id: {enforcementLevel, <param>, exemptNamespaces, exemptLabels}})."""
    merged = {name: default for name, (default, _) in rule.params.items()}
    merged.update({"enforcementLevel": rule.level, "exemptNamespaces": [], "exemptLabels": {}})
    merged.update((config or {}).get(rule.id) or {})
    return merged


def exempt(obj: dict, cfg: dict) -> bool:
    md = obj.get("metadata") or {}
    if md.get("namespace") in (cfg.get("exemptNamespaces") or []):
        return True
    labels = md.get("labels") or {}
    return any(labels.get(k) == v for k, v in (cfg.get("exemptLabels") or {}).items())


def claim_index(objects: list[dict]) -> dict[tuple[str, str], dict]:
    return {((o.get("metadata") or {}).get("namespace", "default"), (o.get("metadata") or {}).get("name")): o
            for o in objects if o.get("kind") == "PersistentVolumeClaim"}


def evaluate(obj, config: dict | None = None, claims: dict | None = None,
             rules: list[Rule] | None = None) -> list[Violation]:
    """Every violation of `obj`. `claims` (claim_index of all objects being checked) lets rules see the access
    modes of the claims a pod mounts."""
    obj = normalize(obj)
    tpls = pod_templates(obj)
    md = obj.get("metadata") or {}
    out = []
    for rule in rules or RULES:
        cfg = rule_config(rule, config)
        if cfg["enforcementLevel"] == DISABLED or exempt(obj, cfg):
            continue
        ctx = Context(obj, tpls, cfg, claims or {})
        for f in rule.check(ctx):
            level = f.level if f.level == ADVISORY else cfg["enforcementLevel"]
            out.append(Violation(rule.id, level, obj.get("kind", ""), md.get("namespace", ""), md.get("name", ""),
                                 f.message))
    return out


def add_ipc_lock(obj: dict) -> dict | None:
    """Remediation for rdma-ipc-lock (safe and additive: it only adds a capability RDMA needs). Returns the fixed
    object, or None when nothing needed fixing."""
    obj = normalize(obj)
    changed = False
    for t in pod_templates(obj):
        for c in containers(t):
            sc = c.get("securityContext") or {}
            caps = (sc.get("capabilities") or {}).get("add") or []
            if rdma_resources(c) and not sc.get("privileged") and "IPC_LOCK" not in caps:
                c.setdefault("securityContext", {}).setdefault("capabilities", {})["add"] = [*caps, "IPC_LOCK"]
                changed = True
    return obj if changed else None
