"""Fabric acceptance: nccl-tests all_reduce_perf across N nodes x all their GPUs, wired exactly like a training
job on this fabric, with the bus bandwidth the hardware should deliver written next to it.

One MPIJob, `nccl-acceptance`, holds as many workers as the largest run; its launcher runs each node count of
the series in turn (smallest first) on the first N workers, between marker lines that `tools.ncclcheck
--section N` reads. So the runs never overlap each other, and the job sits in a Volcano queue of its own
(`fastpath-acceptance`, capped at the largest run's GPUs), not beside the training queues' jobs.

Floors: a multi-node run fails under rails x line rate x `efficiency` (0.75: a rail missing or a link
degraded) and warns under `warnEfficiency` (0.92: NVIDIA's 46-48 GB/s per NDR NIC); a one-node run is judged
against the NVLink floor of its GPU.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass, replace
from typing import Any

import pulumi

from components import k8s, versions
from components.fabric import wiring as fabric
from components.fabric.kinds import LOCAL, MNNVL
from components.jobs import component, pairwise, trainjob
from components.jobs.launch import mpirun_command
from components.jobs.resolve import Resolved, resolve
from components.jobs.sections import OVER_NVLINK, section, section_markers
from components.model.config import AcceptanceConfig, FabricConfig
from components.model.job import JobSpec
from components.model.profile import ACCEPTANCE_QUEUE, Profile, QueueProfile
from components.platform import volcano

# The env variable that carries fabric_generation into the acceptance pods.
FABRIC_ENV = "FASTPATH_FABRIC_GENERATION"
JOB_NAME = "nccl-acceptance"
QUEUE = ACCEPTANCE_QUEUE
CHECK_ANNOTATION = "fastpath.dev/check"
# One-node allreduce floors (GB/s) by GPU product label: NCCL's ring reaches ~370 on 8 x H100/H200 SXM (NVLink4)
# and ~230 on 8 x A100 SXM (NVLink3) (H100: NVIDIA/nccl-tests issue #212); the floor leaves room, a broken NVLink
# or a PCIe fallback lands far below it.
# A GB200 compute tray's 4 GPUs (NVLink5) reach ~680 (Azure ND GB200 v6, Azure/AI-benchmarking-guide
# Azure_Results/ND_GB200_v6_results.md, ring, 8 GiB).
NVLINK_FLOORS = (
    ("H200", 300.0),
    ("H100-80GB-HBM3", 300.0),
    ("H100-SXM", 300.0),
    ("A100-SXM", 150.0),
    ("GB200", 600.0),
)
# Multi-node NVLink floors (GB/s) by GPU product: one GB200 NVL72 rack, 72 GPUs, reaches 835-847 at 4-8 GiB over
# MNNVL (coreweave/nccl-tests@cb86553:README.md, Expected Performance, GB200 Single Rack, NCCL 2.26.2); 720 is 86% of
# that, and a tray whose fabric fell back, or a rack with a degraded NVSwitch tray, lands far below it.
MNNVL_FLOORS = (("GB200", 720.0),)


def node_counts(acc: AcceptanceConfig, cluster_nodes: int) -> list[int]:
    return acc.node_counts(cluster_nodes)


def floor_gbps(acc: AcceptanceConfig, fab: FabricConfig) -> float | None:
    if acc.min_busbw_gbps is not None:
        return acc.min_busbw_gbps
    return fabric.expected_busbw_gbps(fab, acc.efficiency) if fab.rails else None


def warn_gbps(acc: AcceptanceConfig, fab: FabricConfig) -> float | None:
    return fabric.expected_busbw_gbps(fab, acc.warn_efficiency) if fab.rails else None


def nvlink_floor_gbps(acc: AcceptanceConfig, gpu_product: str) -> float | None:
    if acc.nvlink_min_busbw_gbps is not None:
        return acc.nvlink_min_busbw_gbps
    return next((floor for part, floor in NVLINK_FLOORS if part in gpu_product), None)


def mnnvl_floor_gbps(acc: AcceptanceConfig, gpu_product: str) -> float | None:
    if acc.mnnvl_min_busbw_gbps is not None:
        return acc.mnnvl_min_busbw_gbps
    return next((floor for part, floor in MNNVL_FLOORS if part in gpu_product), None)


def fabric_generation(profile: Profile) -> str:
    """A fingerprint of the stack's fabric (every fabric.* key): the acceptance job carries it in its pods' env, so
    a fabric edit is a new job spec and the job is replaced, i.e. the fabric is measured again. Node-level changes
    a version bump alone makes (a DOCA driver) do not move it."""
    # Keys left at their defaults are out, so a key a later fastpath adds does not re-run every cluster's acceptance;
    # the pace of SR-IOV drains is not the fabric.
    written = profile.fabric.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    fabric = {k: v for k, v in written.items() if k != "sriovMaxUnavailable"}
    text = json.dumps(fabric, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def job_spec(acc: AcceptanceConfig, nodes: int, queue: str | None = QUEUE, profile: Profile | None = None) -> JobSpec:
    """The acceptance job; where it runs on v2 (a v2-only cluster, or Kueue serving v2) a TrainJob through the MPI
    runtime, whose nodes run trainer.mpiImage (a TrainJob's image reaches only the launcher) and whose restarts and
    cleanup are the runtime's."""
    command = [versions.NCCL_TESTS_ALL_REDUCE, "-b", "8", "-e", "8G", "-f", "2", "-g", "1"]
    env = {FABRIC_ENV: fabric_generation(profile)} if profile is not None else {}
    if profile is not None and profile.acceptance_api == "v2" and profile.trainer and profile.trainer.mpi_image:
        return JobSpec(
            name=JOB_NAME,
            api="v2" if len(profile.job_apis) > 1 else None,
            framework="mpi",
            image=profile.trainer.mpi_image,
            nodes=nodes,
            debug_nccl=True,
            preflight=True,
            queue=queue,
            command=command,
            env=env,
        )
    # max_restarts 0: a failed acceptance run is a verdict, not something to retry.
    return JobSpec(
        name=JOB_NAME,
        framework="mpi",
        image=acc.image,
        nodes=nodes,
        debug_nccl=True,
        preflight=True,
        max_restarts=0,
        queue=queue,
        command=command,
        env=env,
    )


def hosts(r: Resolved, n: int) -> list[str]:
    """The first `n` rank hosts of the job, as mpirun reaches them (`-H` names them explicitly, so the hostfile's
    order does not matter). v2: the launcher is itself a rank host (runLauncherAsNode) and is taken first, so a
    one-node run stays on the launcher's own node; then the `node` pods, by the JobSet's headless names (the
    hostfile kubeflow/trainer@v2.3.0:pkg/runtime/framework/plugins/mpi/mpi.go writes lists the launcher last)."""
    name = r.spec.name
    if r.api == "v2":
        return [f"{name}-launcher-0-0.{name}", *(f"{name}-node-0-{i}.{name}" for i in range(n - 1))][:n]
    return [f"{name}-worker-{i}" for i in range(n)]


def pairwise_stage(r: Resolved, nodes: int, efficiency: float) -> tuple[str, float] | None:
    """The pairwise per-rail stage over the first `nodes` workers (components/jobs/pairwise.py) and its floor, or
    None where it cannot run: one node, no rails, or rails whose HCA names the pods do not know in advance (SR-IOV
    VFs get names of their own)."""
    used = list(r.wiring.rails)
    hcas = fabric.visible_hcas(r.profile.fabric, used)
    if nodes < 2 or not hcas:
        return None
    base = mpirun_command(r)
    np_at = base.index("-np")
    launcher = [*base[:np_at], *base[np_at + 2 : len(base) - len(r.spec.command)]]
    floor = pairwise.rail_floor_gbps(min(x.speed_gbps for x in used), efficiency)
    text = pairwise.script(
        hosts(r, nodes),
        [(x.name, h) for x, h in zip(used, hcas, strict=True)],
        floor,
        launcher=launcher,
        gpus=[i % r.gpus for i in range(len(used))],
    )
    return text, floor


def series_script(r: Resolved, counts: list[int], pairwise_text: str | None = None) -> str:
    """The launcher's series: each node count in turn on the first N workers, between marker lines; the job
    fails if any run failed, after all ran. On v2 its runtime is the acceptance's own (trainjob.ACCEPTANCE_RUNTIME,
    no gang restart), so a failed size fails the TrainJob instead of measuring the series again."""
    base = mpirun_command(r)
    np_at = base.index("-np")
    # Multi-node NVLink: the network runs (and the pairwise stage) with MNNVL off, set where mpirun forwards it
    # from (-x NCCL_MNNVL_ENABLE), or NCCL would carry every byte inside the clique over NVLink.
    nvlink = r.wiring.imex_template is not None
    network = "NCCL_MNNVL_ENABLE=0 " if nvlink else ""
    lines = ["status=0"]
    if pairwise_text:
        # Each rail of each node alone first: a slow one is named by node and rail, which the series' all-rail
        # numbers cannot do. nccl-tests runs after it either way.
        lines.append(f"{network}sh -c {shlex.quote(pairwise_text)} || status=1")
    for n in counts:
        hostlist = ",".join(f"{h}:{r.gpus}" for h in hosts(r, n))
        # A ring measures the network, not tree or NVLS tricks (with more than one node).
        ring = ["-x", "NCCL_ALGO=Ring"] if n > 1 else []
        cmd = [*base[:np_at], "-np", str(n * r.gpus), "-H", hostlist, *ring, *base[np_at + 2 :]]
        begin, end = section_markers(section(n))
        lines += [f"echo '{begin}'", f"{network if n > 1 else ''}{shlex.join(cmd)} || status=1", f"echo '{end}'"]
        if nvlink and n > 1:
            # Then the same nodes over multi-node NVLink, required (the pods' NCCL_MNNVL_ENABLE=1), with NCCL's
            # own algorithm choice (NVLS inside a clique): what training inside the rack gets.
            cmd = [*base[:np_at], "-np", str(n * r.gpus), "-H", hostlist, *base[np_at + 2 :]]
            begin, end = section_markers(section(n, OVER_NVLINK))
            lines += [f"echo '{begin}'", f"{shlex.join(cmd)} || status=1", f"echo '{end}'"]
    lines.append("exit $status")
    return "\n".join(lines) + "\n"


def resolved(acc: AcceptanceConfig, profile: Profile) -> Resolved:
    """The acceptance job resolved against the cluster, in its own queue (not one of the training queues)."""
    counts = node_counts(acc, profile.nodes.count)
    sched = profile.scheduler
    if sched.name:
        profile = replace(profile, scheduler=replace(sched, queues=(*sched.queues, QueueProfile(QUEUE, None))))
    return resolve(
        job_spec(acc, max(counts), QUEUE if sched.name else None, profile), profile, "fastpath:platform.acceptance"
    )


def plan(acc: AcceptanceConfig, profile: Profile) -> tuple[dict, list[dict]]:
    """The acceptance job (an MPIJob, or on a v2-only cluster a TrainJob) and, per node count, what its section of
    the launcher log must show."""
    fab = profile.fabric
    counts = node_counts(acc, profile.nodes.count)
    r = resolved(acc, profile)
    manifest = component.manifest(r)
    stage = pairwise_stage(r, max(counts), acc.efficiency)
    series = series_script(r, counts, stage[0] if stage else None)
    if r.api == "v2":
        manifest["spec"]["trainer"]["command"] = ["sh", "-c", series]
        if not trainjob.has_own_runtime(r):  # else its own TrainingRuntime (component.prerequisites)
            manifest["spec"]["runtimeRef"]["name"] = trainjob.ACCEPTANCE_RUNTIME
        logs = f"kubectl logs job/{JOB_NAME}-launcher-0"
    else:
        launcher = manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
        wait = launcher["command"][:4]  # sh -c LAUNCHER launcher: wait for every worker, then run "$@" (no retry)
        launcher["command"] = [*wait, "sh", "-c", series]
        logs = f"kubectl logs {JOB_NAME}-launcher"
    runs: list[dict[str, Any]] = []
    # With telemetry on, every rank must load the Inspector: the image's NCCL, the plugin's build and the launcher's
    # env all decide it, none shows in the render, and a rank without it trains on with no metrics and no error.
    profiler = ["--profiler"] if profile.nccl_inspector_image else []
    for n in counts:
        ranks = n * r.gpus
        args = ["python", "-m", "tools.ncclcheck", f"{JOB_NAME}.log", "--section", str(n), "--ranks", str(ranks)]
        expect: str
        if n > 1:
            # Inside an NVLink clique this run goes over the network too (NCCL_MNNVL_ENABLE=0); the MNNVL one follows.
            expect, floor, warn = r.wiring.network_transport, floor_gbps(acc, fab), warn_gbps(acc, fab)
        else:  # one node: NVLink/SHM only, no network to judge
            expect, floor, warn = LOCAL, nvlink_floor_gbps(acc, profile.gpu.product), None
        args += ["--expect", expect]
        if floor:
            args += ["--min-busbw", f"{floor:g}"]
        if warn:
            args += ["--warn-busbw", f"{warn:g}"]
        if n > 1 and fab.kind_row.ib_env:
            # NCCL's IB transport logs the interface it bootstraps on (`NET/IB : Using ... ; OOB eth0:...`) under
            # INIT,NET: a wrong fabric.podInterface (the node's on the host network) shows there before anything
            # hangs. Other transports print it only with the BOOTSTRAP subsystem.
            args += ["--bootstrap", fab.pod_interface]
        if n > 1 and fab.rails:
            # Every rail in every process's NIC list (NCCL skips a port that is not ACTIVE, and runs on the rest).
            args += ["--rails", str(len(fab.rails))]
        args += profiler
        run = {
            "job": JOB_NAME,
            "nodes": n,
            "ranks": ranks,
            "expect": expect,
            "minBusbwGbps": floor,
            "warnBusbwGbps": warn,
            "check": shlex.join(args),
        }
        if r.api == "v2":
            run["logs"] = logs
        runs.append(run)
        if r.wiring.imex_template is not None and n > 1:
            floor = mnnvl_floor_gbps(acc, profile.gpu.product)
            over = section(n, OVER_NVLINK)
            args = ["python", "-m", "tools.ncclcheck", f"{JOB_NAME}.log", "--section", over, "--ranks", str(ranks)]
            args += ["--expect", MNNVL, *(["--min-busbw", f"{floor:g}"] if floor else []), *profiler]
            runs.append(
                {
                    **run,
                    "over": OVER_NVLINK,
                    "expect": MNNVL,
                    "minBusbwGbps": floor,
                    "warnBusbwGbps": None,
                    "check": shlex.join(args),
                }
            )
    checks = [run["check"] for run in runs]
    if stage is not None:
        # The pairwise stage ran on the largest run's nodes, before the series: its check goes with that run.
        check = shlex.join(["python", "-m", "tools.pairwise", f"{JOB_NAME}.log", "--floor", f"{stage[1]:g}"])
        runs[-1]["pairwise"] = {"minRailGbps": stage[1], "check": check}
        checks.insert(0, check)
    manifest["metadata"]["annotations"] = {CHECK_ANNOTATION: "; ".join(checks)}
    return manifest, runs


def queue(acc: AcceptanceConfig, profile: Profile) -> dict:
    """The acceptance job's queue: capped at the largest run, so bring-up never takes the training queues' GPUs
    beyond what one run needs, and not reclaimable mid-run."""
    # No GPU cap on `dra`: its pods request no nvidia.com/gpu (their GPUs are in their claims), so it would not bind.
    gpus = None if profile.fabric.claims else acc.queue_cap(profile.nodes.count, profile.gpu.per_node)
    return volcano.queue(QUEUE, profile.cluster, "acceptance", weight=1, reclaimable=False, gpus=gpus)


@dataclass
class FabricAcceptanceArgs:
    acceptance: AcceptanceConfig
    profile: Profile


class FabricAcceptance(pulumi.ComponentResource):
    """Declares the `nccl-acceptance` MPIJob (nccl-tests all_reduce_perf for every node count of the series, one
    after another) wired by the same code as TrainingJob, with NCCL_DEBUG=INFO (INIT,NET), in its own Volcano
    queue `fastpath-acceptance`, and the check command per node count that `tools.ncclcheck` runs on its log.

    Needs: the platform (Training Operator, Volcano); an image with nccl-tests built with MPI.
    Output: `runs`, per node count: ranks, expected transport, floors and the check command.

    Example:
        FabricAcceptance("acceptance", FabricAcceptanceArgs(cfg.platform.acceptance, platform.profile),
                         pulumi.ResourceOptions(depends_on=[platform]))
    """

    def __init__(self, name: str, args: FabricAcceptanceArgs, opts: pulumi.ResourceOptions | None = None):
        manifest, runs = plan(args.acceptance, args.profile)  # refuse before registering anything
        super().__init__("fastpath:verify:FabricAcceptance", name, None, opts)
        depends_on = k8s.inherited_depends_on(opts)
        if args.profile.scheduler.name == "volcano":  # Kueue's is the platform's (components/platform/kueue.py)
            q = queue(args.acceptance, args.profile)
            depends_on = k8s.plus(depends_on, k8s.apply(q, pulumi.ResourceOptions(parent=self, depends_on=depends_on)))
        # A changed series, image or wiring is a new run: TrainJob `trainer` and `runtimeRef` are immutable
        # (kubeflow/trainer@v2.3.0:pkg/apis/trainer/v1alpha1/trainjob_types.go), so an update in place would be
        # refused. Replaced, deleted first, as training jobs are (component.TrainingJob).
        # `dra`: the workers' claim template; multi-node NVLink: the job's ComputeDomain and, on v2, its own runtime
        # (no restarts, as ACCEPTANCE_RUNTIME).
        r = resolved(args.acceptance, args.profile)
        depends_on = component.register_prerequisites(component.prerequisites(r, max_restarts=0), self, depends_on)
        self.jobs = [
            k8s.apply(
                manifest,
                pulumi.ResourceOptions(
                    parent=self, depends_on=depends_on, replace_on_changes=["spec"], delete_before_replace=True
                ),
            )
        ]
        self.runs = runs
        self.register_outputs({"runs": self.runs})
