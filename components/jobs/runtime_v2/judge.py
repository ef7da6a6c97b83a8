"""The fabric wiring a TrainJob took away from the pods its runtime gives, judged on what the controller makes of
the two (controller.effective_jobset). The policy pack's `trainjob-runtime` rule and the job contract report these
messages. Pure.

kubeflow/trainer@v2.3.0 lets a TrainJob change what its runtime set in three ways: spec.trainer.resourcesPerNode
merges per resource name (pkg/util/trainingruntime/trainingruntime.go MergeResourceRequirements),
spec.trainer.command replaces the container's command and spec.trainer.env merges by name
(pkg/runtime/framework/plugins/jobset/builder.go), and runtimePatches are strategic-merged into the runtime
(pkg/runtime/core/trainingruntime.go), which replaces lists such as tolerations and capabilities.add whole.
"""

from __future__ import annotations

import json

from components.fabric.wiring import PLATFORM_OWNED, POD_NETWORK_ANNOTATIONS
from components.jobs.launchers import launcher_in
from components.jobs.runtime_v2.build import GPU_RESOURCE, SERVED_NAMESPACES
from components.jobs.runtime_v2.controller import (
    NODE,
    TRAINER,
    ancestor_of,
    effective_jobset,
    gpus_per_node,
    named_containers,
    object_name,
    quantity,
)

CORE_RESOURCES = ("cpu", "memory", "ephemeral-storage", GPU_RESOURCE)
# Platform-owned names that set how much NCCL logs, not how it reaches the fabric: fastpath's own jobs raise them
# (debugNccl, the acceptance run, whose log ncclcheck reads), so a TrainJob changing them takes no wiring away.
LOGGING_ENV = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS")


def _fabric_resources(resources: dict) -> dict:
    return {k: v for k, v in (resources.get("limits") or {}).items() if k not in CORE_RESOURCES}


def _capabilities(container: dict) -> list[str]:
    return ((container.get("securityContext") or {}).get("capabilities") or {}).get("add") or []


def _launcher_problems(where: str, trainer: dict, runtime: dict) -> list[str]:
    """A TrainJob command that starts a launcher its runtime's plugin does not wire. The torch plugin gives each
    node torchrun's rendezvous as PET_* env (kubeflow/trainer@v2.3.0:pkg/runtime/framework/plugins/torch/torch.go),
    which deepspeed, accelerate, mpirun or srun do not read: each would start its own process tree on one node's
    view. The MPI plugin runs the command on the launcher pod and hands mpirun the hostfile
    (plugins/mpi/mpi.go): torchrun or deepspeed there run on the launcher alone, without the nodes' GPUs."""
    command = trainer.get("command")
    if not isinstance(command, list) or not command or not all(isinstance(w, str) for w in command):
        return []
    words = [*command, *(a for a in trainer.get("args") or [] if isinstance(a, str))]
    if words[0] in ("sh", "bash", "/bin/sh", "/bin/bash") and "-c" in words[:3]:
        script = words[words.index("-c") + 1] if words.index("-c") + 1 < len(words) else ""
        words = script.split() or words
    found = launcher_in(words)
    policy = runtime["spec"].get("mlPolicy") or {}
    if found is None:
        return []
    # A launcher handed the torch plugin's rendezvous (`--num_machines $(PET_NNODES) --main_process_ip
    # $(PET_MASTER_ADDR)`) starts the right processes: only one that ignores it is refused.
    wired = any("PET_" in w for w in words)
    if "torch" in policy and found != "torchrun" and not wired:
        return [
            f"{where}: spec.trainer.command starts {found} on a torch runtime, whose controller wires torchrun "
            f"(PET_NNODES, PET_NPROC_PER_NODE, PET_MASTER_ADDR): {found} ignores them and starts its own "
            "processes per node; start the script with torchrun (DeepSpeed and Accelerate both run under it) or use "
            "an MPI runtime"
        ]
    # DeepSpeed reaches the nodes itself from the hostfile the plugin mounts (`--hostfile`, `--launcher openmpi`).
    if "mpi" in policy and found not in ("mpirun", "deepspeed"):
        return [
            f"{where}: spec.trainer.command starts {found} on an MPI runtime, which runs the command on its "
            f"launcher and reaches the nodes through mpirun's hostfile: {found} would run on the launcher alone; "
            "give the mpirun command line, or use a torch runtime"
        ]
    return []


def _node_resources(runtime: dict) -> dict:
    """The resources of the runtime's trainer `node` container."""
    return next(
        (
            c.get("resources") or {}
            for r in runtime["spec"]["template"]["spec"]["replicatedJobs"]
            if r["name"] == NODE or ancestor_of(r) == TRAINER
            for c in named_containers(r["template"]["spec"]["template"]["spec"], NODE)
        ),
        {},
    )


def _partial_node_problems(where: str, asked_resources: dict, runtime: dict, asked: int, rt_gpus: int) -> list[str]:
    """A TrainJob that takes part of a node's GPUs but keeps the runtime's CPU and memory requests: resourcesPerNode
    merges per resource name (kubeflow/trainer@v2.3.0:pkg/util/trainingruntime/trainingruntime.go
    MergeResourceRequirements), so the pod still asks for the whole node's share and the node's other GPUs can take
    no other pod."""
    node = next(
        (
            c.get("resources") or {}
            for r in runtime["spec"]["template"]["spec"]["replicatedJobs"]
            if r["name"] == NODE or ancestor_of(r) == TRAINER
            for c in named_containers(r["template"]["spec"]["template"]["spec"], NODE)
        ),
        {},
    )
    out = []
    pod: dict = next(
        (
            r["template"]["spec"]["template"]["spec"]
            for r in runtime["spec"]["template"]["spec"]["replicatedJobs"]
            if r["name"] == NODE or ancestor_of(r) == TRAINER
        ),
        {},
    )
    for init in pod.get("initContainers") or []:
        held = gpus_per_node(init.get("resources") or {})
        if init.get("restartPolicy") != "Always" and held > asked:
            # A pod's effective request is the larger of its app containers' sum and each init container's
            # (kubernetes staging/src/k8s.io/component-helpers/resource/helpers.go PodRequests,
            # AggregateContainerRequests): the node's GPUs stay the pod's whole.
            out.append(
                f"{where}: spec.trainer.resourcesPerNode asks {asked} of the runtime's {rt_gpus} GPUs, but the "
                f"runtime's init container {init.get('name')} requests {held}: the pod's effective request is the "
                f"larger, so each pod still holds {held} GPUs; this runtime serves whole nodes (use "
                f"numNodes, or a runtime made for {asked}-GPU pods)"
            )
    for resource in ("cpu", "memory"):
        kept = (node.get("requests") or {}).get(resource)
        if kept is None or any(resource in (asked_resources.get(p) or {}) for p in ("requests", "limits")):
            continue
        share = quantity(kept) * asked / rt_gpus
        shown = f"{int(share)}" if resource == "cpu" else f"{int(share / 2**30)}Gi"
        out.append(
            f"{where}: spec.trainer.resourcesPerNode asks {asked} of the runtime's {rt_gpus} GPUs but keeps its "
            f"{resource} request {kept} (resourcesPerNode merges per key): each pod holds the {resource} of a "
            f"whole node, so the node's other {rt_gpus - asked} GPUs stay idle; set {resource} in "
            f"resourcesPerNode too (its share: {shown}), requests and limits"
        )
    return out


def override_problems(train_job: dict, runtime: dict, derived: dict | None = None) -> list[str]:
    """Each way the pods of `train_job` lost fabric wiring `runtime` gave them, as `cause: consequence; fix`.
    `derived`: effective_jobset(train_job, runtime), when the caller has it already."""
    where = f"TrainJob {object_name(train_job)}"
    trainer = (train_job.get("spec") or {}).get("trainer") or {}
    found: list[str] = []
    if trainer.get("resourcesPerNode") and trainer.get("numProcPerNode") is None:
        rt_gpus = gpus_per_node(_node_resources(runtime))
        if rt_gpus and not gpus_per_node(trainer["resourcesPerNode"]):
            found.append(
                f"{where}: spec.trainer.resourcesPerNode names no GPU, so the controller counts none "
                f"(it reads the TrainJob's resourcesPerNode alone) and starts one process per node on "
                f"{rt_gpus}-GPU pods; add nvidia.com/gpu: {rt_gpus} to its requests and limits, or set "
                f"numProcPerNode"
            )
    if trainer.get("resourcesPerNode"):  # with numProcPerNode too: how a right 4-of-8-GPU TrainJob is written
        rt_gpus = gpus_per_node(_node_resources(runtime))
        if rt_gpus and 0 < (asked := gpus_per_node(trainer["resourcesPerNode"])) < rt_gpus:
            found += _partial_node_problems(where, trainer["resourcesPerNode"], runtime, asked, rt_gpus)
    found += _launcher_problems(where, trainer, runtime)
    served = ((runtime.get("metadata") or {}).get("annotations") or {}).get(SERVED_NAMESPACES)
    # A manifest without a namespace goes where `kubectl -n` sends it: judged only when it names one.
    namespace = (train_job.get("metadata") or {}).get("namespace")
    if isinstance(served, str) and served and namespace and namespace not in served.split(","):
        found.append(
            f"{where}: runs in namespace {namespace}, which {runtime['metadata']['name']} does not serve "
            f"({served}): its pods would find no network attachment and no checkpoint claim there and never "
            "start; create it in one of those, or add the namespace to the stack's trainingNamespaces"
        )
    derived = derived if derived is not None else effective_jobset(train_job, runtime)
    for original, rjob in zip(
        runtime["spec"]["template"]["spec"]["replicatedJobs"], derived["jobset"]["replicatedJobs"], strict=True
    ):
        before, after = original["template"]["spec"]["template"], rjob["template"]["spec"]["template"]
        at = f"{where} ({rjob['name']} pods)"
        for annotation in POD_NETWORK_ANNOTATIONS:
            nets = ((before.get("metadata") or {}).get("annotations") or {}).get(annotation)
            if nets and ((after.get("metadata") or {}).get("annotations") or {}).get(annotation) != nets:
                found.append(
                    f"{at}: runtimePatches replace the {annotation} annotation: the pods lose their "
                    f"rail interfaces; remove that annotation from the patch"
                )
        bspec, aspec = before["spec"], after["spec"]
        missing = [t for t in bspec.get("tolerations") or [] if t not in (aspec.get("tolerations") or [])]
        if missing:
            found.append(
                f"{at}: runtimePatches tolerations replace the runtime's (a list is replaced whole) and "
                f"drop {', '.join(t.get('key', '*') for t in missing)}: the pods cannot go to GPU nodes; "
                f"repeat the runtime's tolerations in the patch"
            )
        for key, value in (bspec.get("nodeSelector") or {}).items():
            if (aspec.get("nodeSelector") or {}).get(key) != value:
                found.append(
                    f"{at}: runtimePatches change nodeSelector {key} from {value!r}: the runtime's wiring "
                    f"and sizing are for those nodes; use a runtime published for the other nodes"
                )
        shm = next((v for v in bspec.get("volumes") or [] if v["name"] == "dshm"), None)
        if shm and next((v for v in aspec.get("volumes") or [] if v["name"] == "dshm"), None) != shm:
            found.append(
                f"{at}: runtimePatches replace volume dshm: /dev/shm is no longer the runtime's "
                f"memory-backed {shm['emptyDir'].get('sizeLimit')}; name the patch's volume differently"
            )
        for bc in bspec.get("containers", []) + bspec.get("initContainers", []):
            ac = next(
                c for c in aspec.get("containers", []) + aspec.get("initContainers", []) if c["name"] == bc["name"]
            )
            name = f"{at}: container {bc['name']}"
            bres, ares = bc.get("resources") or {}, ac.get("resources") or {}
            for res, value in _fabric_resources(bres).items():
                for part in ("limits", "requests"):
                    got = (ares.get(part) or {}).get(res)
                    if got is None or quantity(got) != quantity(value):
                        found.append(
                            f"{name}: resourcesPerNode sets {part}.{res} to {got}, the runtime gives "
                            f"{value}: the pod loses its fabric device (NCCL falls back or fails); "
                            f"remove {res} from resourcesPerNode"
                        )
            for part_res in sorted(set(ares.get("limits") or {}) | set(ares.get("requests") or {})):
                lim, req = (ares.get("limits") or {}).get(part_res), (ares.get("requests") or {}).get(part_res)
                if part_res in ("cpu", "memory", "ephemeral-storage"):
                    if lim is not None and req is not None and quantity(req) > quantity(lim):
                        found.append(
                            f"{name}: {part_res} requests {req} exceed limits {lim} after the merge "
                            f"(resourcesPerNode merges per key): the pod is invalid; set requests and "
                            f"limits both in resourcesPerNode"
                        )
                    continue
                # Requests left unset default to the limits (kubernetes@v1.34:pkg/apis/core/v1/defaults.go
                # SetDefaults_Pod), as kubeflow/trainer's own runtimes rely on; a request without a limit, or a
                # different one, is what the API server refuses for an extended resource.
                if lim is None or (req is not None and quantity(lim) != quantity(req)):
                    found.append(
                        f"{name}: {part_res} requests {req} and limits {lim} after the merge "
                        f"(resourcesPerNode merges per key): the Job controller cannot create the pod, "
                        f"extended resources need requests equal to limits; set both in resourcesPerNode"
                    )
            if shm and bc["name"] == NODE and (mem := (ares.get("limits") or {}).get("memory")) is not None:
                if quantity(mem) <= quantity(shm["emptyDir"]["sizeLimit"]):
                    found.append(
                        f"{name}: memory limit {mem} is not above /dev/shm "
                        f"{shm['emptyDir']['sizeLimit']} (tmpfs pages count against it: OOM kill); "
                        f"raise memory in resourcesPerNode or leave it to the runtime"
                    )
            lost = [c for c in _capabilities(bc) if c not in _capabilities(ac)]
            if lost:
                found.append(
                    f"{name}: runtimePatches securityContext replaces capabilities.add and drops "
                    f"{', '.join(lost)}: RDMA cannot pin memory; keep {', '.join(lost)} in the patch"
                )
            benv = {e["name"]: e.get("value") for e in bc.get("env") or []}
            aenv = {e["name"]: e.get("value") for e in ac.get("env") or []}
            for var in PLATFORM_OWNED:
                if var in benv and var not in LOGGING_ENV and aenv.get(var) != benv[var]:
                    found.append(
                        f"{name}: env {var}={aenv.get(var)!r} replaces the runtime's {benv[var]!r} "
                        f"(env is merged by name); remove it from the TrainJob or ask for a runtime "
                        f"with that value"
                    )
            if bc.get("command") and ac.get("command") != bc["command"]:
                found.append(
                    f"{name}: spec.trainer.command replaces the runtime's command "
                    f"{json.dumps(bc['command'])}; put it in spec.trainer.args instead"
                )
    return found
