"""The impact of going from one deployed state of a stack to another (components/impact/state.py): each change a
controller will act on, classified by what it does to a cluster that is busy with training, and told in the
cluster's own numbers.

Classes, from harmless to harmful:
- `no-op`: nothing running notices (a pacing knob, a new queue's first job, a new job).
- `rolling`: an operator or operand restarts pod by pod; running training keeps its devices and addresses; new
  pods on a node may wait for the operand there.
- `disruptive`: GPU nodes are drained or rebooted, or running gangs are deleted or evicted: which nodes, how many
  at a time, which gangs die and whether they come back by themselves.
- `destructive`: addresses re-laid, claims or namespaces deleted: data or running pods' identity at risk.

Each rule names the upstream behaviour it relies on as `repo@tag:path` (UPSTREAM); tests/test_impact.py pins
them. `impact` is a pure function of two states: the program (components/impact/preview.py) and the renderer both
call it, and a disruptive or destructive change needs the stack file's `fastpath:acknowledge` (ack.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, get_args

from components.impact.state import SCHEMA, canonical, digest

Class = Literal["no-op", "rolling", "disruptive", "destructive"]
CLASSES: tuple[Class, ...] = get_args(Class)
NEEDS_ACK: tuple[Class, ...] = ("disruptive", "destructive")

# The upstream behaviour each rule relies on, at the tags fastpath pins (components/versions.py). Network Operator
# 26.4.1 deploys the SR-IOV operator built from Mellanox's fork (Mellanox/network-operator@v26.4.1:hack/release.yaml
# `network-operator-v26.4.1`); the nearest published tag of that fork is the 26.4.x branch head,
# network-operator-v26.4.0-beta.7.
SNO = "Mellanox/sriov-network-operator@network-operator-v26.4.0-beta.7"
NO = "Mellanox/network-operator@v26.4.1"
UPSTREAM = {
    # HandleTotalVfs / HandleEnableSriov / HandleLinkType: a NUM_OF_VFS, SRIOV_EN or LINK_TYPE firmware change sets
    # needReboot; the daemon then drains the node fully and reboots it.
    "sriov-reboot": (
        f"{SNO}:pkg/vendors/mellanox/mellanox.go (HandleTotalVfs, HandleLinkType; pkg/daemon/daemon.go rebootNode)"
    ),
    # needDrainNode -> NeedToUpdateSriov: numVfs, a PF MTU increase, a deleted policy's VFs drain the node.
    "sriov-drain": f"{SNO}:pkg/plugins/generic/generic_plugin.go (needDrainNode; api/v1/helper.go NeedToUpdateSriov)",
    # tryDrainNode: at most the pool's maxUnavailable nodes drain at once; unset means every node of the pool.
    "sriov-pace": f"{SNO}:controllers/drain_controller_helper.go (tryDrainNode; api/v1/helper.go MaxUnavailable)",
    # configRdmaKernelArg: ib_core.netns_mode as a kernel argument and modprobe option: a reboot.
    "sriov-rdma-mode": f"{SNO}:pkg/plugins/generic/generic_plugin.go (configRdmaKernelArg, needRebootNode)",
    # Each state re-renders its DaemonSet; a config hash annotation rolls the device plugins and Multus.
    "nic-operands": f"{NO}:pkg/state/state_skel.go (updateObj, SetConfigHashAnnotation)",
    # The OFED DaemonSet is OnDelete; autoUpgrade (default false) decides whether the operator replaces its pods.
    "doca-driver": (
        f"{NO}:controllers/upgrade_controller.go (reconcileClusterPolicyUpgrade; "
        "api/v1alpha1/nicclusterpolicy_types.go upgradePolicy)"
    ),
    # Blocks that no longer fit the pool are dropped and re-allocated; node reservations are checked locally only.
    "ipam": (
        "Mellanox/nvidia-k8s-ipam@network-operator-v26.4.1:pkg/ipam-controller/allocator/allocator.go "
        "(CreatePoolAllocatorFromIPPool)"
    ),
    # upgrade-required -> cordon -> wait-for-jobs -> pod-deletion -> drain -> restart; maxParallelUpgrades at a time.
    "gpu-driver": (
        "NVIDIA/gpu-operator@v26.7.0:controllers/upgrade_controller.go (reconcileClusterPolicyDriverUpgrades; "
        "vendor/github.com/NVIDIA/k8s-operator-libs/pkg/upgrade/upgrade_state.go ApplyState)"
    ),
    "helm-upgrade": "helm/helm@v3.18.0:pkg/action/upgrade.go (a changed release's pod templates roll)",
    # Upstream upgrades cert-manager one minor at a time; the v1.19.6 -> v1.21.1 jump was compared for fastpath's
    # values and the CRDs (docs/research/airgap-images-other-charts.md).
    "cert-manager-minors": (
        "cert-manager/website:content/docs/installation/upgrade.md (one minor at a time); "
        "cert-manager/cert-manager@v1.21.1:deploy/crds (fields added since v1.19.6, none removed)"
    ),
    # fsnotify on the conf directory: loadSchedulerConf on write, no restart.
    "volcano-conf": "volcano-sh/volcano@v1.15.1:pkg/scheduler/scheduler.go (watchSchedulerConf)",
    # A starving job of a queue under its (new) deserved share takes whole gangs of reclaimable queues.
    "volcano-reclaim": (
        "volcano-sh/volcano@v1.15.1:pkg/scheduler/actions/gangreclaim/gangreclaim.go (Execute, selectDomainBundles)"
    ),
    # deserved is capped at realCapability; ReclaimableFn picks tasks of queues allocated over deserved.
    "volcano-capability": (
        "volcano-sh/volcano@v1.15.1:pkg/scheduler/plugins/proportion/proportion.go (deserved capped at "
        "realCapability; ReclaimableFn)"
    ),
    # A workload is a reclaim candidate only while its ClusterQueue is over nominal (candidateIsValid).
    "kueue-reclaim": (
        "kubernetes-sigs/kueue@v0.19.2:pkg/scheduler/preemption/classical/candidate_generator.go (candidateIsValid; "
        "pkg/scheduler/preemption/preemption.go classicalPreemptions)"
    ),
    # Topology levels immutable; TAS assignments are made at admission and kept by running workloads.
    "kueue-topology": (
        "kubernetes-sigs/kueue@v0.19.2:apis/kueue/v1beta2/topology_types.go (levels immutable); "
        "pkg/controller/tas/topology_ungater.go (nodeSelectors set once, at admission)"
    ),
    # The GPU DRA driver's GPU plugin cannot share a node with the device plugin.
    "gpu-dra": (
        "kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:deployments/helm/dra-driver-nvidia-gpu/templates/"
        "validation.yaml; "
        "NVIDIA/gpu-operator@v26.7.0:controllers/state_manager.go (devicePlugin.enabled)"
    ),
    # TrainJob podsets are rebuilt from the live runtime on every reconcile and compared with the Workload's.
    "kueue-runtime": (
        "kubernetes-sigs/kueue@v0.19.2:pkg/controller/jobs/trainjob/trainjob_controller.go (getChildJobSet, PodSets); "
        "pkg/controller/jobframework/reconciler.go (EquivalentToWorkload, StopReasonNoMatchingWorkload)"
    ),
    # The label source recreates, updates and deletes its HyperNodes to match the nodes' labels.
    "volcano-hypernodes": (
        "volcano-sh/volcano@v1.15.1:pkg/controllers/hypernode/hypernode_controller.go (reconcileTopology)"
    ),
    # Topograph's k8s engine patches the managed keys to the new tree and removes those it no longer produces.
    "topograph-labels": (
        "NVIDIA/topograph@v1.0.0:pkg/engines/k8s/labeler.go (mergeNodeLabels, removeManagedTopologyLabels)"
    ),
    # A TrainJob runs on the copy of its runtime taken at its first reconcile; a runtime edit reaches new TrainJobs.
    "runtime-snapshot": (
        "kubeflow/trainer@v2.3.0:pkg/runtime/core/snapshot.go (createRuntimeSnapshot, getRuntimeSnapshot: the "
        "<trainjob>-runtime-snapshot ConfigMap)"
    ),
    "job-replace": (
        "fastpath components/jobs/component.py (replace_on_changes=[spec], delete_before_replace); "
        "kubeflow/trainer@v1.9.4:pkg/controller.v1/common/pod.go (ReconcilePods never updates a running pod)"
    ),
    "store-recreate": (
        "kubernetes/kubernetes@v1.34.0:pkg/apis/batch/validation/validation.go (ValidateJobSpecUpdate: spec.template "
        "is immutable, so a changed store Job is replaced, its pod deleted)"
    ),
    "namespace-delete": (
        "kubernetes/kubernetes@v1.34.0:pkg/controller/namespace/deletion/namespaced_resources_deleter.go"
    ),
    "pvc-immutable": (
        "kubernetes/kubernetes@v1.34.0:pkg/apis/core/validation/validation.go (ValidatePersistentVolumeClaimUpdate)"
    ),
    "nvsentinel": (
        "NVIDIA/NVSentinel@v1.19.0 (read at lalitadithya/NVSentinel@e002c5dc): fault-quarantine "
        "Reconciler.evaluateRulesets, node-drainer pkg/evaluator/evaluator.go getAction (Immediate: Eviction API)"
    ),
    "reaper": (
        "fastpath components/ops/reaper.py (stuck, action); kubeflow/trainer@v1.9.4:pkg/controller.v1/common/job.go"
    ),
    "pod-security": (
        "kubernetes/kubernetes@v1.34.0:staging/src/k8s.io/pod-security-admission/admission/admission.go (pods at "
        "creation)"
    ),
}


@dataclass(frozen=True)
class Change:
    """One thing a controller will do. `id` is what `fastpath:acknowledge` names; `keys` the stack keys behind it
    (none: a fastpath or chart version changed it)."""

    id: str
    cls: Class
    what: str
    consequence: str
    upstream: tuple[str, ...]
    keys: tuple[str, ...] = ()
    # What an acknowledgment names besides the id and class: this very change (the new values of its keys and what
    # it does), so an acknowledgment left in the stack file never covers a later, different change of the same id.
    fingerprint: str = ""


@dataclass(frozen=True)
class Ctx:
    old: Mapping[str, Any]  # facets
    new: Mapping[str, Any]
    facts: Mapping[str, Any]  # the old state's (what runs now)
    new_facts: Mapping[str, Any]
    changed_keys: tuple[str, ...]

    def keys(self, *prefixes: str) -> tuple[str, ...]:
        return tuple(k for k in self.changed_keys if k.startswith(prefixes))

    @property
    def nodes(self) -> int:
        return int(self.facts.get("gpuNodes") or 0)

    def gangs(self, queues: set[str] | None = None) -> list[dict]:
        gangs = list((self.facts.get("gangs") or {}).values())
        return [g for g in gangs if queues is None or g.get("queue") in queues]


def gangs_text(gangs: list[dict], lost: str = "a node under them is drained") -> str:
    if not gangs:
        return "no gang fastpath declared runs now (any other multi-node job on these nodes fails the same way)"
    parts = [f"{g['name']} ({g['nodes']} nodes) {g['onDrain']}" for g in gangs]
    return f"running gangs, when {lost}: " + "; ".join(parts)


def at_a_time(max_unavailable: Any, nodes: int) -> int:
    """How many nodes the SR-IOV operator drains at once: an int, or a percentage of the pool rounded down
    (GetScaledValueFromIntOrPercent(..., false) in api/v1/helper.go MaxUnavailable); unset: the whole pool."""
    if isinstance(max_unavailable, str) and max_unavailable.endswith("%"):
        return math.floor(nodes * int(max_unavailable[:-1]) / 100)
    return int(max_unavailable) if max_unavailable is not None else nodes


def _pace(at_once: int, rounds: int) -> str:
    if at_once == 0:
        return "0 at a time: the drain controller never starts one, so no node is ever configured"
    return f"{at_once} at a time ({rounds} rounds; each node is without VFs from its drain until it is back)"


def _diff(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> tuple[list[str], list[str], list[str]]:
    old, new = old or {}, new or {}
    added = sorted(set(new) - set(old))
    removed = sorted(set(old) - set(new))
    changed = sorted(k for k in set(old) & set(new) if old[k] != new[k])
    return added, removed, changed


def _names(keys: list[str]) -> str:
    short = [k.rsplit("/", 1)[-1] for k in keys]
    return ", ".join(short[:8]) + (f" and {len(short) - 8} more" if len(short) > 8 else "")


# ------------------------------------------------------------------------------------------- rules


def _sriov(c: Ctx) -> Iterator[Change]:
    added, removed, changed = _diff(c.old.get("sriovPolicies"), c.new.get("sriovPolicies"))
    if not (added or removed or changed):
        return
    keys = c.keys("fabric.")
    old, new = c.old.get("sriovPolicies") or {}, c.new.get("sriovPolicies") or {}
    # A new policy (a PF's first VFs), a numVfs, link type or node selection change is a firmware change on
    # ConnectX: a reboot (nodes that stop matching lose their VFs). A removed policy, any MTU change or a device type
    # change drains (NeedToUpdateSriov compares the VF group's MTU and driver with the node's).
    firmware = bool(added) or any(
        {f: old[k].get(f) for f in ("numVfs", "nicSelector", "linkType", "nodeSelector")}
        != {f: new[k].get(f) for f in ("numVfs", "nicSelector", "linkType", "nodeSelector")}
        for k in changed
    )
    drains = any(old[k].get(f) != new[k].get(f) for k in changed for f in ("mtu", "deviceType"))
    if not (firmware or removed or drains):
        yield Change(
            id="fabric.sriov",
            cls="rolling",
            what=f"SR-IOV node policies: {_names(changed)} (no VF count, link type, MTU or device type change)",
            consequence="the config daemon applies it without a drain; running pods keep their VFs",
            upstream=(UPSTREAM["sriov-drain"],),
            keys=keys,
        )
        return
    n = c.nodes
    pace = at_a_time(c.new_facts.get("sriovMaxUnavailable"), n)
    rounds = math.ceil(n / pace) if n and pace else 0
    why = (
        "rewrites the ConnectX firmware (SR-IOV, VF count, link type) and reboots"
        if firmware
        else "reconfigures the VFs and drains (evicting every pod that requests an nvidia.com/ resource, GPUs included)"
    )
    parts = [f"{len(x)} {label}" for x, label in ((added, "added"), (removed, "removed"), (changed, "changed")) if x]
    yield Change(
        id="fabric.sriov",
        cls="disruptive",
        what=f"SR-IOV node policies: {', '.join(parts)} ({_names(added + removed + changed)})",
        consequence=(
            f"the SR-IOV operator {why} each GPU node: {n} GPU nodes, {_pace(pace, rounds)}; the drain knows "
            f"nothing of gangs, so {gangs_text(c.gangs())}"
        ),
        upstream=(UPSTREAM["sriov-reboot" if firmware else "sriov-drain"], UPSTREAM["sriov-pace"]),
        keys=keys,
    )


def _sriov_pool(c: Ctx) -> Iterator[Change]:
    old, new = c.old.get("sriovPool") or {}, c.new.get("sriovPool") or {}
    if not old or not new or old == new:
        return
    if old.get("rdmaMode") != new.get("rdmaMode"):
        n = c.nodes
        pace = at_a_time(new.get("maxUnavailable"), n)
        yield Change(
            id="fabric.rdma-mode",
            cls="disruptive",
            what=f"RDMA namespace mode {old.get('rdmaMode')} -> {new.get('rdmaMode')}",
            consequence=(
                f"a kernel module option: reboots {n} GPU nodes, {_pace(pace, math.ceil(n / pace) if pace else 0)}; "
                f"{gangs_text(c.gangs())}"
            ),
            upstream=(UPSTREAM["sriov-rdma-mode"], UPSTREAM["sriov-pace"]),
            keys=c.keys("fabric."),
        )
    if old.get("maxUnavailable") != new.get("maxUnavailable"):
        yield Change(
            id="fabric.sriov-pace",
            cls="no-op",
            what=f"SR-IOV drains at a time {old.get('maxUnavailable')} -> {new.get('maxUnavailable')}",
            consequence="paces the next SR-IOV rollout; drains nothing by itself",
            upstream=(UPSTREAM["sriov-pace"],),
            keys=c.keys("fabric.sriovMaxUnavailable"),
        )


def _nic_operands(c: Ctx) -> Iterator[Change]:
    old, new = c.old.get("nicClusterPolicy"), c.new.get("nicClusterPolicy")
    if old is None or new is None:
        return
    added, removed, changed = _diff(old, new)
    # The DOCA driver's own template (ofedDriver, and the placement it shares) is the rule below.
    operands = [o for o in added + removed + changed if o != "ofedDriver"]
    if operands:
        gone = f"; {', '.join(removed)} removed: pods that need it no longer start" if removed else ""
        yield Change(
            id="network.operands",
            cls="rolling",
            what=f"NicClusterPolicy operands: {', '.join(operands)}",
            consequence=(
                f"the Network Operator rolls each changed operand's DaemonSet node by node; running pods keep their "
                f"devices and addresses, new pods on a node wait for its operand{gone}"
            ),
            upstream=(UPSTREAM["nic-operands"],),
            keys=c.keys("fabric.", "gpu.", "mirrors.registry", "nodes.system"),
        )
    old_driver, new_driver = c.old.get("ofedDriver") or {}, c.new.get("ofedDriver") or {}
    if old_driver and new_driver and old_driver != new_driver:
        version = (
            f" {old_driver.get('version')} -> {new_driver.get('version')}"
            if old_driver.get("version") != new_driver.get("version")
            else " (its pod template: env, tolerations or node placement)"
        )
        yield Change(
            id="network.doca-driver",
            cls="disruptive",
            what=f"DOCA driver{version}",
            consequence=(
                f"its DaemonSet is OnDelete and any change to its pod template is an upgrade: the operator takes "
                f"the {c.nodes} GPU nodes one at a time: cordons one, waits for the fastpath training pods on it to "
                f"finish, drains the rest, reloads the NIC driver (every RDMA device of the node goes away "
                f"meanwhile) and uncordons it. A running gang is not hit, but it holds the single upgrade slot with "
                f"its node cordoned for as long as it runs, and every other node waits; `pulumi up` may time out "
                f"waiting for the policy to be ready while the rollout goes on"
            ),
            upstream=(UPSTREAM["doca-driver"],),
            keys=c.keys("gpu.", "checkpoints.nfs", "versions.networkOperator", "mirrors.registry"),
        )


def _ip_pools(c: Ctx) -> Iterator[Change]:
    old, new = c.old.get("ipPools"), c.new.get("ipPools")
    if old is None and new is None:
        return
    added, removed, changed = _diff(old, new)
    old, new = old or {}, new or {}
    # A removed pool whose subnet a new pool takes over (a renamed rail) is re-laid too; one that is just gone
    # allocates nothing again, and its pods keep their addresses until they end.
    reused = {new[a].get("subnet") for a in added}
    relaid = changed + [r for r in removed if old[r].get("subnet") in reused]
    gone = [r for r in removed if r not in relaid]
    if gone:
        yield Change(
            id="network.ip-pools-removed",
            cls="rolling",
            what=f"NV-IPAM pools removed: {_names(gone)}",
            consequence="nothing allocates from them again; running pods keep their addresses until they end",
            upstream=(UPSTREAM["ipam"],),
            keys=c.keys("fabric.rails", "fabric.attachment"),
        )
    if relaid:
        removed = relaid
        changed = []
        yield Change(
            id="network.ip-pools",
            cls="destructive",
            what=f"NV-IPAM pools re-laid: {_names(removed + changed)} (subnet or per-node block)",
            consequence=(
                "nv-ipam re-assigns each node's block from the new layout while running pods keep the addresses "
                "they got from the old one: a new pod can get an address a running pod still holds (duplicate "
                "addresses on a rail, NCCL connections to the wrong peer); drain the training nodes first"
            ),
            upstream=(UPSTREAM["ipam"],),
            keys=c.keys("fabric.rails", "fabric.vfsPerPf", "fabric.attachment", "gpu.perNode"),
        )
    if added:
        yield Change(
            id="network.ip-pools-added",
            cls="no-op",
            what=f"NV-IPAM pools added: {_names(added)}",
            consequence="new rails' addresses; nothing running holds any",
            upstream=(UPSTREAM["ipam"],),
            keys=c.keys("fabric.rails"),
        )


def _attachments(c: Ctx) -> Iterator[Change]:
    added, removed, changed = _diff(c.old.get("attachments"), c.new.get("attachments"))
    if removed or changed:
        yield Change(
            id="network.attachments",
            cls="rolling",
            what=f"rail network attachments: {_names(removed + changed)}",
            consequence=(
                "Multus reads an attachment when a pod starts: running pods keep the old one; a gang that restarts "
                "gets the new one" + (" or, for a removed one, does not start" if removed else "")
            ),
            upstream=(UPSTREAM["nic-operands"],),
            keys=c.keys("fabric."),
        )


# Charts whose upstream upgrades one minor release at a time, and the rule that says what a jump over one does.
ONE_MINOR_AT_A_TIME = {"cert-manager": "cert-manager-minors"}


def _minors_skipped(old: str, new: str) -> int:
    """Minor releases between two `vX.Y.Z` versions of one major that an upgrade jumps over (0 when not known)."""
    try:
        (o_major, o_minor), (n_major, n_minor) = (
            tuple(int(x) for x in v.lstrip("v").split(".")[:2]) for v in (old, new)
        )
    except ValueError:
        return 0
    return max(0, n_minor - o_minor - 1) if o_major == n_major else 0


def _charts(c: Ctx) -> Iterator[Change]:
    added, removed, changed = _diff(c.old.get("charts"), c.new.get("charts"))
    old, new = c.old.get("charts") or {}, c.new.get("charts") or {}
    for name in changed:
        o, n = old[name], new[name]
        bump = f"{o['version']} -> {n['version']}" if o["version"] != n["version"] else "values changed"
        driver = (
            name == "gpu-operator" and o["version"] != n["version"] and (c.new.get("gpuDriver") or {}).get("managed")
        )
        if driver:
            yield Change(
                id="charts.gpu-operator",
                cls="disruptive",
                what=f"GPU Operator {bump} (its default driver version moves with it)",
                consequence=(
                    f"the GPU Operator's upgrade controller reinstalls the driver on {c.nodes} GPU nodes, "
                    f"{c.facts.get('driverUpgradesAtOnce', 1)} at a time: each node is cordoned, then waits for the "
                    f"training pods on it to finish (driver.upgradePolicy.waitForCompletion), then its GPU pods are "
                    f"evicted and the driver reloaded. A running gang is not hit, but the nodes are taken in list "
                    f"order: a node whose gang runs for days holds the slot, cordoned, and every other node waits"
                ),
                upstream=(UPSTREAM["gpu-driver"],),
                keys=c.keys("versions.gpuOperator"),
            )
            continue
        skipped = _minors_skipped(o["version"], n["version"]) if name in ONE_MINOR_AT_A_TIME else 0
        yield Change(
            id=f"charts.{name}",
            cls="rolling",
            what=f"{name} {bump}",
            consequence=f"{name}'s pods restart with the new release; running training keeps its pods"
            + (
                f"; this skips {skipped} minor release{'s' if skipped > 1 else ''}, where upstream upgrades one minor "
                "at a time: fastpath's values and the CRDs were compared across the jump (the CRDs only gain fields), "
                f"but to follow upstream, `helm upgrade` {name} to the newest patch of each minor in between first"
                if skipped
                else ""
            ),
            upstream=(UPSTREAM["helm-upgrade"], *((UPSTREAM[ONE_MINOR_AT_A_TIME[name]],) if skipped else ())),
            keys=c.keys(
                "versions.", "components.", "monitoring.", "gpu.", "checkpoints.", "mirrors.", "nodes.system", "health."
            ),
        )
    for name in removed:
        yield Change(
            id=f"charts.{name}",
            cls="destructive",
            what=f"{name} uninstalled",
            consequence=f"everything {name} runs stops; objects of its kinds stay ownerless or go with its CRDs",
            upstream=(UPSTREAM["helm-upgrade"],),
            keys=c.keys("components.", "jobApi"),
        )
    for name in added:
        yield Change(
            id=f"charts.{name}",
            cls="rolling",
            what=f"{name} installed",
            consequence=f"{name} starts on the nodes it selects; nothing running changes",
            upstream=(UPSTREAM["helm-upgrade"],),
            keys=c.keys("components.", "jobApi"),
        )


def _chart_values_changed(c: Ctx, name: str) -> bool:
    old, new = (c.old.get("charts") or {}).get(name), (c.new.get("charts") or {}).get(name)
    return bool(old and new and old.get("values") != new.get("values"))


def _gpu_allocation(c: Ctx) -> Iterator[Change]:
    """The GPUs move between the device plugin and DRA: the nodes' nvidia.com/gpu count goes (or comes back)."""
    old, new = c.old.get("gpuAllocation"), c.new.get("gpuAllocation")
    if old is None or old == new:
        return
    yield Change(
        id="gpu.allocation",
        cls="disruptive",
        what=f"GPU allocation {old} -> {new}",
        consequence=(
            "the GPU Operator's device plugin is "
            + (
                "removed: the nodes stop advertising nvidia.com/gpu, so a pod that counts GPUs (any job not in this "
                "stack) no longer schedules, while"
                if new == "claims"
                else "back: NVIDIA's GPU DRA driver's GPUs go, so a pod that claims GPUs no longer schedules, while"
            )
            + " running pods keep the GPUs they hold; the GPU DRA driver refuses a node where both run "
            "(kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1 templates/validation.yaml), so switch with the nodes "
            f"drained of training; {gangs_text(c.gangs(), 'restarted')}"
        ),
        upstream=(UPSTREAM["gpu-dra"],),
        keys=c.keys("fabric.attachment", "kubernetesVersion"),
    )


def _driver_mode(c: Ctx) -> Iterator[Change]:
    old, new = c.old.get("gpuDriver") or {}, c.new.get("gpuDriver") or {}
    if not old or not new or old == new:
        return
    why = "the driver DaemonSet's install changes (DriverInstallState digest)"
    if old.get("managed") != new.get("managed"):
        now, was = ("managed", "preinstalled") if new.get("managed") else ("preinstalled", "managed")
        what = f"GPU driver {now} (was {was})"
    elif old.get("peermem") != new.get("peermem"):
        what = f"GPU driver's GPUDirect module: {'nvidia-peermem' if new.get('peermem') else 'none (DMA-BUF)'}"
    elif "pods" in old and old.get("pods") != new.get("pods"):
        what = "GPU driver DaemonSet's pods (their tolerations or driver settings)"
        why = "the driver DaemonSet gets a new revision (k8s-operator-libs podInSyncWithDS)"
    elif "pods" not in old and new.get("managed") and _chart_values_changed(c, "gpu-operator"):
        # A state recorded before the driver's pods were: any change of the operator's values may be one.
        what = "GPU Operator values changed under a managed driver (the last state did not record its pods)"
        why = "the driver DaemonSet may get a new revision (k8s-operator-libs podInSyncWithDS)"
    else:
        return
    yield Change(
        id="gpu.driver",
        cls="disruptive",
        what=what,
        consequence=(
            f"{why}: the upgrade controller takes the GPU nodes {c.new_facts.get('driverUpgradesAtOnce', 1)} at a "
            "time as for a new driver: each node is cordoned, waits for the training pods on it to finish "
            "(driver.upgradePolicy.waitForCompletion), then its GPU pods are evicted and the driver reloaded. A "
            "running gang is not hit, but a node whose gang runs for days holds the slot, cordoned, and every "
            "other node waits"
        ),
        upstream=(UPSTREAM["gpu-driver"],),
        keys=c.keys(
            "gpu.driverPreinstalled",
            "gpu.precompiledDriver",
            "gpu.gpuDirect",
            "gpu.taintKey",
            "health.",
            "components.gpuOperator",
            "mirrors.registry",
        ),
    )


def _volcano(c: Ctx) -> Iterator[Change]:
    if c.old.get("volcanoConf") and c.new.get("volcanoConf") and c.old["volcanoConf"] != c.new["volcanoConf"]:
        yield Change(
            id="scheduler.conf",
            cls="disruptive",
            what="volcano-scheduler.conf (actions, plugins)",
            consequence=(
                "the scheduler reloads it from its mounted ConfigMap (no restart): preemption and reclaim follow the "
                f"new rules from its next session and may evict whole running gangs; "
                f"{gangs_text(c.gangs(), 'they are chosen as victims')}"
            ),
            upstream=(UPSTREAM["volcano-conf"],),
            keys=c.keys("scheduler."),
        )
    old, new = c.old.get("queues"), c.new.get("queues")
    if old is None or new is None:
        return
    added, removed, changed = _diff(old, new)
    shares = [
        q
        for q in changed
        if old[q].get("weight") != new[q].get("weight") or old[q].get("reclaimable") != new[q].get("reclaimable")
    ]
    if added or removed or shares:
        # Any share that grows shrinks the others': every reclaimable queue's gangs may be taken back.
        victims = {q for q, v in new.items() if v.get("reclaimable")} | set(removed)
        what = [
            f"{q} weight {old[q].get('weight')} -> {new[q].get('weight')}"
            for q in shares
            if old[q].get("weight") != new[q].get("weight")
        ]
        what += [
            f"{q} reclaimable {old[q].get('reclaimable')} -> {new[q].get('reclaimable')}"
            for q in shares
            if old[q].get("reclaimable") != new[q].get("reclaimable")
        ]
        what += [f"{q} added" for q in added] + [f"{q} removed" for q in removed]
        yield Change(
            id="scheduler.queues",
            cls="disruptive",
            what="queue shares: " + ", ".join(what),
            consequence=(
                "the queues' deserved shares move at once; nothing is evicted for being over its share, but a "
                "starving gang of a queue whose share grew now takes whole running gangs from the reclaimable queues "
                f"({', '.join(sorted(victims)) or 'none'}), those furthest over their share first; "
                f"{gangs_text(c.gangs(victims), 'reclaimed')}"
            ),
            upstream=(UPSTREAM["volcano-reclaim"],),
            keys=c.keys("scheduler.queues"),
        )
    caps = [q for q in changed if q not in shares]
    if caps:
        victims = set(caps) | {q for q, v in new.items() if v.get("reclaimable")}
        yield Change(
            id="scheduler.capability",
            cls="disruptive",
            what="queue GPU caps: " + ", ".join(f"{q} {old[q].get('gpus')} -> {new[q].get('gpus')}" for q in caps),
            consequence=(
                "proportion caps a queue's deserved share at its capability: a queue now holding more than its "
                "share (a lowered cap, or another queue's raised one) has its running gangs taken by a starving "
                f"reclaimable queue's gang; {gangs_text(c.gangs(victims), 'reclaimed')}"
            ),
            upstream=(UPSTREAM["volcano-capability"],),
            keys=c.keys("scheduler.queues"),
        )


def _scheduler(c: Ctx) -> Iterator[Change]:
    """A switch of gang scheduler: each keeps its own books (Volcano PodGroups and Queues, Kueue Workloads)."""
    old, new = c.old.get("scheduler"), c.new.get("scheduler")
    if old == new or "scheduler" not in c.old:
        return
    yield Change(
        id="scheduler.name",
        cls="destructive",
        what=f"gang scheduler {old or 'none'} -> {new or 'none'}",
        consequence=(
            f"{old or 'no scheduler'}'s queues, tiers and gangs go with it: running jobs keep their pods but lose "
            "their queue and gang (a lost pod is rescheduled alone), and jobs created before the switch are "
            f"re-created under {new or 'the default scheduler'} only when replaced; drain the queues first; "
            f"{gangs_text(c.gangs(), 'the switch lands')}"
        ),
        upstream=(UPSTREAM["job-replace"],),
        keys=c.keys("scheduler.name", "components.volcano"),
    )


def _topology(c: Ctx) -> Iterator[Change]:
    """The fabric topology's levels, labeller or default placement."""
    old, new = c.old.get("topology"), c.new.get("topology")
    if old == new or "topology" not in c.old and "topology" not in c.new:
        return
    sched = c.new.get("scheduler")
    view = (
        "Kueue gets a new Topology and GPU ResourceFlavor beside the old (their levels are immutable) and its "
        "ClusterQueues move to them: admitted gangs keep the nodes they were placed on"
        if sched == "kueue"
        else "Volcano's label discovery recreates its HyperNodes from the new levels; a PodGroup asking for a "
        "topology waits while the HyperNode tree is not ready"
    )
    labels = ""
    if (old or {}).get("source") == "topograph" and (old or {}).get("keys") != (new or {}).get("keys"):
        labels = "; Topograph removes the level labels it no longer writes from every node"
    yield Change(
        id="topology",
        cls="rolling",
        what=f"fabric topology {(old or {}).get('keys') or 'none'} -> {(new or {}).get('keys') or 'none'}",
        consequence=f"{view}{labels}; running gangs keep their pods, new and requeued gangs go by the new levels",
        upstream=(
            UPSTREAM["kueue-topology"] if sched == "kueue" else UPSTREAM["volcano-hypernodes"],
            UPSTREAM["topograph-labels"],
        ),
        keys=c.keys("nodes.topology"),
    )


def _kueue(c: Ctx) -> Iterator[Change]:
    """Kueue quotas: a ClusterQueue whose guarantee shrank below what it runs is over nominal, so its gangs become
    reclaim victims of queues within theirs."""
    old, new = c.old.get("kueueQueues"), c.new.get("kueueQueues")
    if old is None or new is None or old == new:
        return
    added, removed, changed = _diff(old, new)
    shrunk = [q for q in changed if (new[q].get("nominalQuota") or 0) < (old[q].get("nominalQuota") or 0)]
    what = [f"{q} nominal {old[q].get('nominalQuota')} -> {new[q].get('nominalQuota')}" for q in changed if q in shrunk]
    what += [f"{q} limits changed" for q in changed if q not in shrunk]
    what += [f"{q} added" for q in added] + [f"{q} removed" for q in removed]
    victims = set(shrunk) | set(removed)
    yield Change(
        id="scheduler.quota",
        cls="disruptive" if victims else "rolling",
        what="Kueue quotas: " + ", ".join(what),
        consequence=(
            "a queue now running more than its guaranteed quota has its gangs reclaimed, whole, by queues within "
            f"theirs; {gangs_text(c.gangs(victims), 'reclaimed')}"
            if victims
            else "more quota: waiting gangs are admitted from the next cycle; nothing running is evicted"
        ),
        upstream=(UPSTREAM["kueue-reclaim"],),
        keys=c.keys("scheduler.", "nodes.count", "acceptance."),
    )


def _namespaces(c: Ctx) -> Iterator[Change]:
    old, new = set(c.old.get("namespaces") or ()), set(c.new.get("namespaces") or ())
    if old - new:
        gone = sorted(old - new)
        yield Change(
            id="namespaces.removed",
            cls="destructive",
            what=f"training namespaces removed: {', '.join(gone)}",
            consequence=(
                "deleting a namespace deletes every object in it: its jobs, their pods, its checkpoint claim "
                "(the NFS data of a retained volume stays) and secrets"
            ),
            upstream=(UPSTREAM["namespace-delete"],),
            keys=c.keys("trainingNamespaces"),
        )
    if new - old:
        yield Change(
            id="namespaces.added",
            cls="no-op",
            what=f"training namespaces added: {', '.join(sorted(new - old))}",
            consequence="new namespaces with their own networks and claims; nothing running changes",
            upstream=(UPSTREAM["namespace-delete"],),
            keys=c.keys("trainingNamespaces"),
        )
    _, _, changed = _diff(c.old.get("namespaceSecurity"), c.new.get("namespaceSecurity"))
    if changed:
        yield Change(
            id="namespaces.security",
            cls="rolling",
            what=f"Pod Security level of {', '.join(changed)}",
            consequence=(
                "applies to pods created from now on: a restarting gang is admitted (or refused) by the new level"
            ),
            upstream=(UPSTREAM["pod-security"],),
            keys=c.keys("fabric.kind", "fabric.attachment"),
        )


def _storage(c: Ctx) -> Iterator[Change]:
    added, removed, changed = _diff(c.old.get("claims"), c.new.get("claims"))
    old, new = c.old.get("claims") or {}, c.new.get("claims") or {}
    moved = [k for k in changed if old[k].get("storageClassName") != new[k].get("storageClassName")]
    grown = [k for k in changed if k not in moved]
    if moved or removed:
        yield Change(
            id="checkpoints.claims",
            cls="destructive",
            what=f"checkpoint claims replaced or removed: {_names(moved + removed)}",
            consequence=(
                "a claim's storage class cannot change in place: the claim would be replaced, and every job's "
                "checkpoints are on it (the claims are protected: `pulumi up` stops until you move the data)"
            ),
            upstream=(UPSTREAM["pvc-immutable"],),
            keys=c.keys("checkpoints."),
        )
    if grown:
        yield Change(
            id="checkpoints.size",
            cls="rolling",
            what="checkpoint claims resized: "
            + ", ".join(f"{k} {old[k].get('size')} -> {new[k].get('size')}" for k in grown),
            consequence="expanded in place where the storage class allows it (a shrink is refused by the API server)",
            upstream=(UPSTREAM["pvc-immutable"],),
            keys=c.keys("checkpoints.size"),
        )
    if (
        c.old.get("storageClass") != c.new.get("storageClass")
        and c.old.get("storageClass")
        and c.new.get("storageClass")
    ):
        yield Change(
            id="checkpoints.storage-class",
            cls="rolling",
            what="checkpoint StorageClass parameters",
            consequence="a StorageClass is replaced, not patched: volumes already bound keep their old mount settings",
            upstream=(UPSTREAM["pvc-immutable"],),
            keys=c.keys("checkpoints."),
        )


def _jobs(c: Ctx) -> Iterator[Change]:
    added, removed, changed = _diff(c.old.get("jobs"), c.new.get("jobs"))
    gangs = c.facts.get("gangs") or {}
    new_gangs = c.new_facts.get("gangs") or {}
    old, new = c.old.get("jobs") or {}, c.new.get("jobs") or {}
    for key in changed:
        g = gangs.get(key) or new_gangs[key]
        keys = c.keys(f"jobs[{g['name']}]") or tuple(k for k in c.changed_keys if not k.startswith("jobs["))
        if old[key].get("replace") == new[key].get("replace") and old[key].get("store") != new[key].get("store"):
            yield Change(
                id=f"jobs.{key}",
                cls="disruptive",
                what=f"job {key}: its rendezvous store (kind, placement, budget or image)",
                consequence=(
                    "the store is replaced (a Job's pod template cannot change in place): its pod goes, every "
                    f"torchrun agent of the running {g['nodes']}-node gang loses the store and the run fails; "
                    "resubmit it from its checkpoint"
                ),
                upstream=(UPSTREAM["store-recreate"],),
                keys=keys,
            )
            continue
        if old[key].get("replace") == new[key].get("replace"):
            yield Change(
                id=f"jobs.{key}",
                cls="no-op",
                what=f"job {key}: its labels and annotations, or what the operator reads when it ends",
                consequence="patched in place: a running gang is untouched",
                upstream=(UPSTREAM["job-replace"],),
                keys=keys,
            )
            continue
        yield Change(
            id=f"jobs.{key}",
            cls="disruptive",
            what=f"job {key} changed",
            consequence=(
                f"the job is replaced (deleted, then created): its {g['nodes']}-node gang is killed if it runs and "
                "starts again from the new spec, resuming from its checkpoint dir if it has one"
            ),
            upstream=(UPSTREAM["job-replace"],),
            keys=keys,
        )
    for key in removed:
        g = gangs.get(key, {"nodes": "?"})
        yield Change(
            id=f"jobs.{key}",
            cls="disruptive",
            what=f"job {key} removed",
            consequence=f"the job is deleted: its {g['nodes']}-node gang is killed if it runs (its checkpoints stay)",
            upstream=(UPSTREAM["job-replace"],),
        )
    for key in added:
        yield Change(
            id=f"jobs.{key}",
            cls="no-op",
            what=f"job {key} added",
            consequence=f"submitted: it queues for {new_gangs.get(key, {}).get('nodes', '?')} nodes",
            upstream=(UPSTREAM["job-replace"],),
        )


def _runtimes(c: Ctx) -> Iterator[Change]:
    added, removed, changed = _diff(c.old.get("runtimes"), c.new.get("runtimes"))
    if (changed or removed) and c.old.get("scheduler") == "kueue":
        # Kueue rebuilds a TrainJob's podsets from the live runtime and stops the job when they no longer match its
        # Workload; the trainer itself would have kept the old snapshot.
        v2 = [g for g in c.gangs() if g.get("api") == "v2"]
        yield Change(
            id="trainer.runtimes",
            cls="disruptive",
            what=f"ClusterTrainingRuntimes changed under Kueue: {_names(changed + removed)}",
            consequence=(
                "Kueue rebuilds each TrainJob's podsets from its runtime as it is now, finds them no longer equal to "
                "the admitted Workload's and stops the job (suspended, requeued from its checkpoint); "
                f"{gangs_text(v2, 'their runtime changes')}"
            ),
            upstream=(UPSTREAM["kueue-runtime"],),
            keys=c.keys("trainer.", "fabric.", "gpu.", "nodes."),
        )
        return
    # A cluster runtime is keyed by its name; a TrainJob's own (namespaced) TrainingRuntime by `<namespace>/<name>`.
    cluster = [k for k in changed + removed if "/" not in k]
    own = [k for k in changed + removed if "/" in k]
    if cluster:
        yield Change(
            id="trainer.runtimes",
            cls="rolling",
            what=f"ClusterTrainingRuntimes replaced: {_names(cluster)}",
            consequence=(
                "TrainJobs that run keep the JobSet made from the old runtime; TrainJobs created from now on "
                "(and the v2 jobs this stack replaces) get the new one"
            ),
            upstream=(UPSTREAM["runtime-snapshot"], UPSTREAM["job-replace"]),
            keys=c.keys("trainer.", "fabric.", "gpu.", "nodes."),
        )
    if own:
        # Only the TrainJob it was made for names it, and that TrainJob is not replaced with it (it depends on it).
        yield Change(
            id="trainer.own-runtimes",
            cls="rolling",
            what=f"TrainJobs' own TrainingRuntimes replaced: {_names(own)}",
            consequence=(
                "the TrainJob each was made for keeps the JobSet and runtime snapshot it has, restarts included: the "
                "change reaches it only when the TrainJob is made again (delete it, or change its own entry so this "
                "stack replaces it)"
            ),
            upstream=(UPSTREAM["runtime-snapshot"],),
            keys=c.keys("trainer.", "fabric.", "gpu.", "nodes."),
        )


def _acceptance(c: Ctx) -> Iterator[Change]:
    if c.old.get("acceptance") != c.new.get("acceptance") and c.new.get("acceptance"):
        n = c.new_facts.get("acceptanceNodes")
        yield Change(
            id="acceptance",
            cls="rolling",
            what="fabric acceptance job",
            consequence=f"the acceptance job runs again: it queues for {n} GPU nodes and holds them while it measures",
            upstream=(UPSTREAM["job-replace"],),
            keys=c.keys("acceptance.", "fabric."),
        )


def _preflight(c: Ctx) -> Iterator[Change]:
    if c.old.get("preflight") != c.new.get("preflight") and c.old.get("preflight") and c.new.get("preflight"):
        yield Change(
            id="preflight",
            cls="rolling",
            what="preflight checks",
            consequence="pods started from now on run the new checks; running pods passed the old ones",
            upstream=(UPSTREAM["job-replace"],),
            keys=c.keys("fabric.", "gpu.", "mirrors.registry", "nodes.system"),
        )


def _operations(c: Ctx) -> Iterator[Change]:
    old, new = c.old.get("operations") or {}, c.new.get("operations") or {}
    o, n = old.get("reaper"), new.get("reaper")
    if n and o != n:
        pending = f"; one not scheduled in {n['pending']} min fails too" if n.get("pending") else ""
        yield Change(
            id="operations.reaper",
            cls="rolling",
            what=f"reaper: start deadline {n['start']} min" + (f" (was {o['start']})" if o else " (installed)"),
            consequence=(
                f"a training job whose pod has not started {n['start']} min after it was scheduled (a bad image, a "
                f"missing Secret, ConfigMap or claim) is failed and its GPUs freed{pending}: a job stuck like that now "
                "fails at the reaper's first pass; running pods are never touched"
            ),
            upstream=(UPSTREAM["reaper"],),
            keys=c.keys("reaper."),
        )
    elif o and not n:
        yield Change(
            id="operations.reaper",
            cls="rolling",
            what="reaper removed",
            consequence="a job whose pods cannot start holds its GPUs again until someone deletes it",
            upstream=(UPSTREAM["reaper"],),
            keys=c.keys("reaper."),
        )
    o, n = old.get("health"), new.get("health")
    if n and not o:
        lost = (
            f"; a node NotReady for {n['lostNodeMinutes']} min is tainted out-of-service and its pods force-deleted"
            if n.get("lostNodeMinutes")
            else ""
        )
        yield Change(
            id="operations.health",
            cls="disruptive",
            what="node health (NVSentinel) installed: sick nodes are quarantined and drained",
            consequence=(
                "a node whose GPU or rail NIC NVSentinel finds unhealthy is cordoned and tainted, and its training "
                "pods are evicted within a minute: a Trainer v2 run restarts its gang from its checkpoint on healthy "
                "nodes, a v1 PyTorch worker is recreated elsewhere and rejoins if a node is free within the join "
                f"timeout, an MPI or TensorFlow job fails and frees its nodes{lost}. "
                "A fault that is already there when it starts counts at once: the gangs on such nodes are hit right "
                f"after this update. Once {n['circuitBreakerPercent']}% of the GPU nodes were quarantined within 5 "
                "min its circuit breaker halts all quarantine and recovery until a person resets it"
            ),
            upstream=(UPSTREAM["nvsentinel"],),
            keys=c.keys("health."),
        )
    elif o and not n:
        yield Change(
            id="operations.health",
            cls="rolling",
            what="node health (NVSentinel) removed",
            consequence=(
                "sick nodes are no longer taken out: quarantined nodes stay cordoned until uncordoned by hand, and a "
                "lost node holds its run until someone taints it out-of-service"
            ),
            upstream=(UPSTREAM["nvsentinel"],),
            keys=c.keys("health."),
        )
    elif o and n and o != n:
        yield Change(
            id="operations.health",
            cls="rolling",
            what="node health settings",
            consequence=(
                "NVSentinel's components restart with the new rules; quarantined nodes stay quarantined, and the "
                "new rules apply to the next fault"
            ),
            upstream=(UPSTREAM["nvsentinel"],),
            keys=c.keys("health."),
        )


def _cluster(c: Ctx) -> Iterator[Change]:
    if c.old.get("cluster") != c.new.get("cluster"):
        yield Change(
            id="cluster",
            cls="destructive",
            what=f"cluster name {c.old.get('cluster')} -> {c.new.get('cluster')}",
            consequence="every object's labels change; the stack now describes another cluster",
            upstream=(UPSTREAM["job-replace"],),
            keys=c.keys("cluster"),
        )


Rule = Callable[[Ctx], Iterator[Change]]
# In the order a reviewer reads them: the cluster, the nodes, the network, the scheduler, storage, workloads.
RULES: tuple[Rule, ...] = (
    _cluster,
    _sriov,
    _sriov_pool,
    _gpu_allocation,
    _driver_mode,
    _charts,
    _nic_operands,
    _ip_pools,
    _attachments,
    _namespaces,
    _scheduler,
    _volcano,
    _kueue,
    _topology,
    _storage,
    _runtimes,
    _preflight,
    _acceptance,
    _operations,
    _jobs,
)
# Every facet a state has is read by some rule (tests/test_impact.py checks it on every committed stack).
FACETS_READ = (
    "cluster namespaces namespaceSecurity gpuDriver charts nicClusterPolicy ofedDriver ipPools sriovPolicies "
    "sriovPool attachments preflight volcanoConf queues storageClass claims runtimes jobs acceptance operations "
    "scheduler topology kueueQueues gpuAllocation"
).split()


@dataclass(frozen=True)
class Impact:
    changes: tuple[Change, ...] = ()
    first: bool = False  # no previous state: a first deployment, nothing of this stack runs yet

    @property
    def worst(self) -> Class | None:
        return max((c.cls for c in self.changes), key=CLASSES.index, default=None)


UNKNOWN = "previous-state"


def unknown_previous(new: Mapping[str, Any], why: str) -> Impact:
    """An impact that cannot be told: the update is refused until acknowledged, never waved through."""
    change = Change(
        id=UNKNOWN,
        cls="destructive",
        what=f"the last deployment's state cannot be compared: {why}",
        consequence=(
            "what this update does to the running cluster cannot be told here: compare the render of the deployed "
            "commit with this one (`make diff OLD=<that render> NEW=<this stack file>`), then acknowledge"
        ),
        upstream=(),
    )
    return Impact(changes=(replace(change, fingerprint=digest([UNKNOWN, canonical(new).get("facets")])[:8]),))


def impact(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> Impact:
    """What going from state `old` (None: never deployed) to state `new` does to the running cluster."""
    if not old:
        return Impact(first=True)
    if old.get("schema") != SCHEMA:
        return unknown_previous(new, f"it has state schema {old.get('schema')}, this fastpath writes {SCHEMA}")
    old, new = canonical(old), canonical(new)
    old_cfg, new_cfg = old.get("config") or {}, new.get("config") or {}
    changed_keys = tuple(sorted(k for k in set(old_cfg) | set(new_cfg) if old_cfg.get(k) != new_cfg.get(k)))
    ctx = Ctx(old["facets"], new["facets"], old.get("facts") or {}, new.get("facts") or {}, changed_keys)
    changes = [ch for rule in RULES for ch in rule(ctx)]
    return Impact(
        changes=tuple(
            replace(ch, fingerprint=digest([ch.id, ch.cls, ch.what, {k: new_cfg.get(k) for k in ch.keys}])[:8])
            for ch in changes
        )
    )
