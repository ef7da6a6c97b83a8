"""A stack's deployed state as the impact model compares it: what each upstream controller acts on, built by the
same pure builders the components register, plus the facts a consequence is told in (nodes, running gangs).

The state is plain JSON data. The program exports it as the stack output `state` on every deployment, and the
offline renderer commits it as `rendered/<stack>/state.json`: `pulumi preview` compares the new config with the
last deployment's, review with the committed render's (components/impact/model.py `impact`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from components import versions
from components.fabric import wiring as fabric
from components.jobs import acceptance
from components.jobs.component import IN_PLACE, in_place_part, manifest
from components.jobs.contract import drain_outcome
from components.jobs.operator_v1 import rendezvous
from components.jobs.resolve import resolve
from components.jobs.trainjob import has_own_runtime, own_runtime
from components.model.config import PlatformConfig
from components.model.job import JobSpec
from components.model.profile import profile as make_profile
from components.platform import (
    checkpoints,
    component,
    dra,
    gpu_operator,
    health,
    kueue,
    network_operator,
    networks,
    sriov,
    topology,
    trainer,
    training_operator,
    volcano,
)

# Bumped when the shape of the state changes: an older state is then compared as "unknown" (no impact claimed).
# 3: the acceptance facet is the digest of what replaces the job (a 2's held its check annotation too).
SCHEMA = 3


def digest(value: Any) -> str:
    """A short, stable fingerprint of a JSON value (key order does not matter)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _by_name(objs: list[dict], fields: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Objects keyed by `<namespace>/<name>`: the spec fields named (all of `spec` when None)."""
    out = {}
    for o in objs:
        meta = o["metadata"]
        key = f"{meta.get('namespace', '')}/{meta['name']}".lstrip("/")
        spec = o.get("spec", {})
        out[key] = {f: spec.get(f) for f in fields} if fields is not None else digest(spec)
    return out


def _network_facets(p: PlatformConfig) -> dict[str, Any]:
    f = p.fabric
    out: dict[str, Any] = {}
    if not p.network_operator_enabled:
        return out
    ncp = network_operator.nic_cluster_policy(p)["spec"]
    # Per operand: each is its own DaemonSet, restarted on its own when its part of the spec changes.
    out["nicClusterPolicy"] = {operand: digest(spec) for operand, spec in sorted(ncp.items())}
    if "ofedDriver" in ncp:
        # The driver DaemonSet's template: its own spec and the placement every operand shares. Its upgradePolicy
        # is how the operator rolls a change out, not part of the pods (state-ofed-driver/0050_ofed-driver-ds.yaml).
        driver = {k: v for k, v in ncp["ofedDriver"].items() if k != "upgradePolicy"}
        template = [driver, ncp.get("tolerations"), ncp.get("nodeAffinity")]
        out["ofedDriver"] = {"version": ncp["ofedDriver"].get("version"), "template": digest(template)}
    out["ipPools"] = _by_name(network_operator.ip_pools(p), ("subnet", "perNodeBlockSize", "nodeSelector"))
    if f.attachment_row is not None and f.attachment_row.sriov_operator:
        out["sriovPolicies"] = _by_name(
            sriov.node_policies(p), ("numVfs", "nicSelector", "linkType", "isRdma", "deviceType", "mtu", "nodeSelector")
        )
        pool = sriov.pool_config(p)["spec"]
        out["sriovPool"] = {"rdmaMode": pool.get("rdmaMode"), "maxUnavailable": pool.get("maxUnavailable")}
        out["attachments"] = _by_name(sriov.networks(p))
    elif f.secondary_network:
        out["attachments"] = _by_name(networks.attachments(p))
    return out


def _gpu_driver(p: PlatformConfig) -> dict[str, Any]:
    """The GPU driver as its upgrade controller sees it. `pods`: what the operator writes into the driver
    DaemonSet's pod template from fastpath's values (the driver section less its upgrade policy, and
    `daemonsets`, whose tolerations every operand DaemonSet takes: gpu-operator@v26.7.0:controllers/
    object_controls.go applyCommonDaemonsetConfig), so a change there is a new DaemonSet revision the upgrade
    controller rolls out node by node (k8s-operator-libs common_manager.go podInSyncWithDS)."""
    managed = p.components.gpu_operator and not p.gpu.driver_preinstalled
    out: dict[str, Any] = {"managed": managed, "peermem": managed and p.gpu.gpu_direct == "peermem"}
    if managed:
        values = gpu_operator.values(p)
        driver = {k: v for k, v in values["driver"].items() if k != "upgradePolicy"}
        out["pods"] = digest([driver, values.get("daemonsets")])
    return out


def _charts(p: PlatformConfig) -> dict[str, Any]:
    """Each Helm release (and the Training Operator's overlay): version and values fingerprint."""
    c = p.components
    out: dict[str, Any] = {}
    if c.gpu_operator:
        out["gpu-operator"] = {"version": p.versions.gpu_operator, "values": digest(gpu_operator.values(p))}
    if p.network_operator_enabled:
        out["network-operator"] = {"version": p.versions.network_operator, "values": digest(network_operator.values(p))}
    if p.fabric.claims:
        out["dranet"] = {"version": versions.DRANET_VERSION, "values": digest(dra.dranet_values(p))}
    if p.fabric.claims or p.gpu.nvlink_domain is not None:
        out["dra-driver-nvidia-gpu"] = {"version": versions.GPU_DRA_VERSION, "values": digest(dra.gpu_driver_values(p))}
    if p.kueue_enabled:
        out["kueue"] = {"version": versions.KUEUE_VERSION, "values": digest(kueue.values(p))}
    if (t := p.nodes.topology) is not None and t.source == "topograph":
        out["topograph"] = {"version": versions.TOPOGRAPH_VERSION, "values": digest(topology.topograph_values(p))}
    if p.volcano_enabled:
        out["volcano"] = {"version": p.versions.volcano, "values": digest(volcano.values(p))}
    if c.checkpoint_storage and p.checkpoints is not None and p.checkpoints.nfs is not None:
        out["csi-driver-nfs"] = {"version": p.versions.csi_driver_nfs, "values": digest(checkpoints.values(p))}
    if p.training_operator_enabled:
        # The kustomization without its source URL: the ref is the version, whichever form fetches it.
        kustomization = {k: v for k, v in training_operator.kustomization(p).items() if k != "resources"}
        out["training-operator"] = {"version": p.versions.training_operator, "values": digest(kustomization)}
    if p.health.enabled:
        out["nvsentinel"] = {"version": versions.NVSENTINEL_VERSION, "values": digest(health.values(p))}
        if p.health.install_cert_manager:
            out["cert-manager"] = {
                "version": versions.CERT_MANAGER_VERSION,
                "values": digest(health.cert_manager_values(p)),
            }
    if make_profile(p).trainer is not None:
        out["trainer"] = {"version": p.versions.trainer, "values": digest(trainer.values(p))}
    return out


def _operations(p: PlatformConfig) -> dict[str, Any]:
    """What acts on running jobs without a person: the reaper's deadlines and NVSentinel's quarantine."""
    r, h = p.reaper, p.health
    return {
        "reaper": {"start": r.start_deadline_minutes, "pending": r.pending_deadline_minutes} if r.enabled else None,
        "health": (
            {
                "lostNodeMinutes": h.lost_node_minutes,
                "remediation": h.remediation,
                "circuitBreakerPercent": h.circuit_breaker_percent,
                "values": digest(health.values(p)),
            }
            if h.enabled
            else None
        ),
    }


def _jobs(p: PlatformConfig, jobs: list[JobSpec]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(digest of each job's object, what a reviewer is told of each running gang)."""
    prof = make_profile(p)
    objs, gangs = {}, {}
    for spec in jobs:
        r = resolve(spec, prof)
        key = f"{r.namespace}/{spec.name}"
        obj = manifest(r)
        rest = {k: v for k, v in obj["spec"].items() if k != "runPolicy"}
        run_policy = {k: v for k, v in (obj["spec"].get("runPolicy") or {}).items() if f"runPolicy.{k}" not in IN_PLACE}
        # What a change replaces the job for, and what is patched in place (components/jobs/component.py).
        objs[key] = {"replace": digest([rest, run_policy]), "inPlace": digest([obj["metadata"], in_place_part(obj)])}
        if spec.framework == "pytorch" and r.api == "v1":
            # Its rendezvous store: a Job whose pod template cannot change in place, so any change replaces it
            # (and a change of its kind, from the Deployment it once was, too) under the running job.
            store = rendezvous(r)
            objs[key]["store"] = digest([o.get("spec") for o in store])
        carries_on, outcome = drain_outcome(r)
        gangs[key] = {
            "name": spec.name,
            "nodes": r.replicas,
            "queue": r.queue,
            "api": r.api,
            "carriesOn": carries_on,
            "onDrain": outcome,
        }
    return objs, gangs


def snapshot(p: PlatformConfig, jobs: list[JobSpec]) -> dict[str, Any]:
    """The state of a stack: `facets` (what the controllers act on), `facts` (what consequences are told in) and
    `config` (the stack's own keys, to name what changed)."""
    c = p.components
    facets: dict[str, Any] = {
        "cluster": p.cluster,
        "namespaces": sorted(p.training_namespaces),
        "namespaceSecurity": {
            o["metadata"]["name"]: o["metadata"]["labels"].get("pod-security.kubernetes.io/enforce")
            for o in component.training_namespaces(p)
        },
        "gpuDriver": _gpu_driver(p),
        # Who hands pods their GPUs: the device plugin (a count) or NVIDIA's DRA driver (claims, `dra`).
        "gpuAllocation": "claims" if p.fabric.claims else "device-plugin",
        "charts": _charts(p),
        **_network_facets(p),
        # The script, not how many namespaces carry it.
        "preflight": digest(
            sorted({json.dumps(cm["data"], sort_keys=True) for cm in component.preflight_configmaps(p)})
        ),
    }
    facets["scheduler"] = p.scheduler.name if p.volcano_enabled or p.kueue_enabled else None
    if (t := p.nodes.topology) is not None:
        facets["topology"] = {
            "source": t.source,
            "provider": t.provider,
            "keys": t.keys(),
            "placement": t.default_placement.model_dump(),
        }
    if p.kueue_enabled:
        facets["kueueQueues"] = {
            cq["metadata"]["name"]: cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
            | {"preemption": cq["spec"]["preemption"]}
            for cq in kueue.cluster_queues(p)
        }
    if p.volcano_enabled:
        facets["volcanoConf"] = digest(volcano.scheduler_conf(p.nodes.topology))
        facets["queues"] = {
            q.name: {"weight": q.weight, "gpus": q.gpus, "reclaimable": q.reclaimable} for q in p.scheduler.queues
        }
    if c.checkpoint_storage:
        sc = checkpoints.storage_class(p)
        facets["storageClass"] = digest(sc) if sc is not None else None
        facets["claims"] = {
            f"{o['metadata']['namespace']}/{o['metadata']['name']}": {
                "size": o["spec"]["resources"]["requests"]["storage"],
                "storageClassName": o["spec"].get("storageClassName"),
            }
            for o in checkpoints.claims(p)
        }
    prof = make_profile(p)
    if prof.trainer is not None:
        # With the TrainJobs' own runtimes (multi-node NVLink: trainjob.own_runtime), which Kueue reads as it reads
        # the cluster's.
        own = [r for r in (resolve(spec, prof) for spec in jobs) if has_own_runtime(r)]
        runtimes = trainer.runtimes(prof, trainer.publishes_acceptance(p)) + [own_runtime(r) for r in own]
        facets["runtimes"] = _by_name(runtimes)
    facets["operations"] = _operations(p)
    facets["jobs"], gangs = _jobs(p, jobs)
    if p.acceptance.enabled:
        job, _ = acceptance.plan(p.acceptance, prof)
        # What replaces it (FabricAcceptance: replace_on_changes spec, a new kind or name); its check annotation is
        # patched in place and runs nothing.
        meta = job["metadata"]
        facets["acceptance"] = digest(
            [job["apiVersion"], job["kind"], meta["name"], meta.get("namespace"), job["spec"]]
        )
    gpu_nodes = p.nodes.count
    facts = {
        "gpuNodes": gpu_nodes,
        "sriovMaxUnavailable": p.fabric.sriov_max_unavailable,
        "gangs": gangs,
        "acceptanceNodes": max(acceptance.node_counts(p.acceptance, gpu_nodes)) if p.acceptance.enabled else 0,
        "rdma": fabric.is_rdma(p.fabric),
        "driverUpgradesAtOnce": gpu_operator.DRIVER_UPGRADES_AT_ONCE,
    }
    config = flatten(p.to_config())
    for spec in jobs:
        config.update(flatten(spec.to_config(), f"jobs[{spec.name}]"))
    return canonical({"schema": SCHEMA, "facets": facets, "facts": facts, "config": config})


def canonical(value: Any) -> Any:
    """The state as it reads back from a stack output: no null values (the engine drops them), whole numbers as
    integers (the Python SDK hands numbers back as floats)."""
    if isinstance(value, dict):
        return {k: canonical(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [canonical(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Leaf key paths of a config value (`fabric.rails[0].hca`), for naming what changed."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        out = {}
        for i, v in enumerate(value):
            out.update(flatten(v, f"{prefix}[{i}]"))
        return out
    return {prefix: value}
