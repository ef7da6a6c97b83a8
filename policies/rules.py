"""The rule catalogue: stable IDs, what each checks, its default enforcement level, the config it takes, and a
message that says how to fix.

Every rule is a pure function over one Kubernetes object (a dict, normalized once by `normalize`) plus its
config and the other objects being checked (for cross-object facts, such as a claim's access modes). The
CrossGuard pack (policies/__main__.py) and the offline linter (tools/lint.py) both call `evaluate`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from components import nccl
from components.config import image_problem
from components.fabric import NETWORKS_ANNOTATION
from components.profile import normalize as _normalize
from policies.podspecs import PodTemplate, is_volcano_job, pod_templates, total_replicas

MANDATORY, ADVISORY, DISABLED = "mandatory", "advisory", "disabled"
GPU = "nvidia.com/gpu"
RDMA_RESOURCE = re.compile(r"^(rdma/.+|vpc\.amazonaws\.com/efa|[^/]+/(sriov|hostdev|rdma|mlnx|ib)[^/]*)$")
EFA = "vpc.amazonaws.com/efa"
TOKEN_VALUE = re.compile(r"^(hf_[A-Za-z0-9]{20,}|ghp_[A-Za-z0-9]{20,}|gh[ousr]_[A-Za-z0-9]{20,}|glpat-[\w-]{16,}"
                         r"|sk-[A-Za-z0-9_-]{20,}|AKIA[0-9A-Z]{16}|xox[abpr]-[\w-]{10,}|eyJ[\w-]{20,}\.[\w-]+\.[\w-]+)$")
SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY)")
CHECKPOINT_PATH = re.compile(r"checkpoint|ckpt", re.I)
# Workloads that run a training gang (a batch/v1 Job with parallelism counts; Deployments do not).
TRAINING = {"PyTorchJob", "MPIJob", "TFJob", "TrainJob", "TrainingRuntime", "ClusterTrainingRuntime", "JobSet", "Job"}


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


# ------------------------------------------------------------------------------------------- rules


def _shm_volume(t: PodTemplate, c: dict) -> dict | None:
    mounts = {m.get("name"): m for m in c.get("volumeMounts") or [] if m.get("mountPath") == "/dev/shm"}
    for v in t.template["spec"].get("volumes") or []:
        if v.get("name") in mounts and isinstance(v.get("emptyDir"), dict):
            return v
    return None


def shm_mounted(ctx: Context) -> Iterator[Finding]:
    for t, c in gpu_containers(ctx):
        v = _shm_volume(t, c)
        if v is None or v["emptyDir"].get("medium") != "Memory":
            yield Finding(f"{where(t, c)} has no memory-backed /dev/shm (the container default is 64 MiB; NCCL and "
                          "dataloaders fail or crawl): mount an emptyDir {medium: Memory, sizeLimit: ...} at /dev/shm")


def shm_size(ctx: Context) -> Iterator[Finding]:
    per_gpu = float(ctx.config.get("minGiBPerGpu", 1))
    for t, c in gpu_containers(ctx):
        v = _shm_volume(t, c)
        if v is None:
            continue
        size = parse_mem_gib(v["emptyDir"].get("sizeLimit"))
        need = per_gpu * gpus(c)
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
    for t in ctx.templates:
        if not is_rdma_pod(t):
            continue
        for c in containers(t):
            if env(c).get("NCCL_IB_DISABLE", "0").strip() not in ("0", ""):
                yield Finding(f"{where(t, c)} requests RDMA (resources or secondary networks) but sets "
                              f"NCCL_IB_DISABLE={env(c)['NCCL_IB_DISABLE']}: NCCL will use TCP sockets; set it to 0")


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
    Rule("shm-mounted", "GPU pods mount a memory-backed /dev/shm",
         "Every container that requests GPUs mounts an emptyDir with medium Memory at /dev/shm.", MANDATORY,
         shm_mounted),
    Rule("shm-size", "/dev/shm is sized for the GPUs",
         "The /dev/shm emptyDir has a sizeLimit of at least minGiBPerGpu per GPU of the container.", ADVISORY,
         shm_size, {"minGiBPerGpu": (1, "Smallest /dev/shm per GPU, in GiB.")}),
    Rule("shm-fits-memory", "/dev/shm fits in the memory limit",
         "The /dev/shm sizeLimit is smaller than the container's memory limit (tmpfs pages are charged to it).",
         MANDATORY, shm_fits_memory, mixed=True),
    Rule("nccl-ib-enabled", "RDMA pods keep NCCL's IB transport on",
         "Pods that request RDMA resources or secondary networks do not set NCCL_IB_DISABLE to anything but 0.",
         MANDATORY, nccl_ib_enabled),
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
