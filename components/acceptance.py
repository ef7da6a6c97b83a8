"""Fabric acceptance: nccl-tests all_reduce_perf across N nodes x all their GPUs, wired exactly like a training
job on this fabric, with the bus bandwidth the hardware should deliver written next to it."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

import pulumi

from components import fabric, k8s, training_job, versions
from components.config import AcceptanceConfig, FabricConfig, JobSpec
from components.profile import normalize

EXPECT_ANNOTATION = "fastpath.dev/expect-transport"
FLOOR_ANNOTATION = "fastpath.dev/min-busbw-gbps"
CHECK_ANNOTATION = "fastpath.dev/check"


def node_counts(acc: AcceptanceConfig, cluster_nodes: int) -> list[int]:
    main = acc.nodes or min(2, cluster_nodes)
    return sorted({main, *acc.scaling})


def floor_gbps(acc: AcceptanceConfig, fab: FabricConfig) -> float | None:
    if acc.min_busbw_gbps is not None:
        return acc.min_busbw_gbps
    return fabric.expected_busbw_gbps(fab, acc.efficiency) if fab.rails else None


def job_spec(acc: AcceptanceConfig, nodes: int, name_prefix: str = "nccl-allreduce") -> JobSpec:
    env = {"NCCL_ALGO": "Ring"} if nodes > 1 else {}  # a ring measures the network, not tree or NVLS tricks
    return JobSpec(name=f"{name_prefix}-{nodes}n", framework="mpi", image=acc.image, nodes=nodes, debug_nccl=True,
                   preflight=True, env=env, ttl_seconds_after_finished=7 * 86400, backoff_limit=0,
                   command=[versions.NCCL_TESTS_ALL_REDUCE, "-b", "8", "-e", "8G", "-f", "2", "-g", "1"])


def plan(acc: AcceptanceConfig, profile: dict) -> list[dict]:
    """One entry per node count: the MPIJob manifest and what its log must show."""
    profile = normalize(profile)
    fab = FabricConfig.model_validate(profile["fabric"])
    out = []
    for n in node_counts(acc, profile["nodes"]["count"]):
        r = training_job.resolve(job_spec(acc, n), profile, "fastpath:platform.acceptance")
        ranks = n * r.gpus
        expect = r.wiring.transport if n > 1 else None  # one node: NVLink/SHM only, no network to judge
        floor = floor_gbps(acc, fab) if n > 1 else None
        args = ["python", "-m", "tools.ncclcheck", f"{r.spec.name}.log", "--ranks", str(ranks)]
        if expect:
            args += ["--expect", expect]
        if floor:
            args += ["--min-busbw", f"{floor:g}"]
        manifest = training_job.manifest(r)
        notes = {CHECK_ANNOTATION: shlex.join(args)}
        if expect:
            notes[EXPECT_ANNOTATION] = expect
        if floor:
            notes[FLOOR_ANNOTATION] = f"{floor:g}"
        manifest["metadata"]["annotations"] = notes
        out.append({"job": r.spec.name, "nodes": n, "ranks": ranks, "expect": expect, "minBusbwGbps": floor,
                    "check": shlex.join(args), "manifest": manifest})
    return out


@dataclass
class FabricAcceptanceArgs:
    acceptance: AcceptanceConfig
    profile: dict


class FabricAcceptance(pulumi.ComponentResource):
    """Declares nccl-tests all_reduce_perf MPIJobs (one per node count of the series) wired by the same code as
    TrainingJob, with NCCL_DEBUG=INFO (INIT,NET), and annotates each with the transport and bus-bandwidth floor
    `tools.ncclcheck` must see in its log.

    Needs: the platform (Training Operator, Volcano); an image with nccl-tests built with MPI.
    Output: `runs`, per job: nodes, ranks, expected transport, floor and the check command.

    Example:
        FabricAcceptance("acceptance", FabricAcceptanceArgs(cfg.platform.acceptance, platform.profile),
                         pulumi.ResourceOptions(depends_on=[platform]))
    """

    def __init__(self, name: str, args: FabricAcceptanceArgs, opts: pulumi.ResourceOptions | None = None):
        runs = plan(args.acceptance, args.profile)  # refuse before registering anything
        super().__init__("fastpath:verify:FabricAcceptance", name, None, opts)
        depends_on = k8s.inherited_depends_on(opts)
        self.jobs = [k8s.apply(run["manifest"], pulumi.ResourceOptions(parent=self, depends_on=depends_on))
                     for run in runs]
        self.runs = [{k: v for k, v in run.items() if k != "manifest"} for run in runs]
        self.register_outputs({"runs": self.runs})
