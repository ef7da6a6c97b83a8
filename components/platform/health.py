"""Node health: NVIDIA NVSentinel, configured from the fabric profile, and the cert-manager it needs.

What a sick node goes through (NVIDIA/NVSentinel@v1.19.0, read at lalitadithya/NVSentinel@e002c5dc, the commit that
registers v1.19.0; `NVS:` below; tests/nvsentinel_v119.py restates the rules and tests/test_health.py applies them):
1. A monitor reports it: gpu-health-monitor (DCGM health watches on the GPU Operator's hostengine,
   NVS:health-monitors/gpu-health-monitor/.../dcgm_watcher/dcgm.py), syslog-health-monitor (XIDs), nic-health-monitor
   (port state and error counters of exactly the rails' HCAs, the checks of the fabric's link layer:
   NVS:health-monitors/nic-health-monitor/pkg/discovery/discovery.go), kubernetes-object-monitor (a node NotReady
   for health.lostNodeMinutes: NVS:health-monitors/kubernetes-object-monitor/pkg/publisher/publisher.go, the event's
   checkName is the policy's name).
2. fault-quarantine matches the event against the rule sets below (CEL; the chart's six, each now also tainting
   QUARANTINE_TAINT NoSchedule): the node is cordoned and tainted, so no scheduler (Volcano's predicates plugin
   included) places a training pod there again. Its circuit breaker halts quarantine once
   health.circuitBreakerPercent of the GPU nodes went within 5 minutes (a switch, not a node, is sick).
3. node-drainer evicts the training pods on it at once (mode Immediate: the Eviction API, then a forced delete of
   what is left after evictionTimeoutInSeconds: NVS:node-drainer/pkg/evaluator/evaluator.go getAction). An evicted
   pod carries DisruptionTarget: a Trainer v2 run restarts its gang without spending maxRestarts
   (runtime_v2/build.py DISRUPTION_RULE); a v1 PyTorch worker exits 143 on SIGTERM and the operator recreates it
   (ExitCode), on a healthy node, and torchrun's agents re-rendezvous; an MPI or TF job fails and frees its nodes.
4. A lost node: the node lifecycle controller's NoExecute taint evicts its pods after 300 s, but no kubelet
   confirms, so they stay Terminating and hold the run. After lostNodeMinutes the lost-node rule set taints it
   `node.kubernetes.io/out-of-service=nodeshutdown:NoExecute`, and the pod GC force-deletes them
   (kubernetes/kubernetes pkg/controller/podgc gcTerminating; tests/jobset_v012.py pod_gc_ends). Only GPU nodes,
   and only on a first quarantine: fault-quarantine applies taints when it quarantines a node, not for a later
   event on a node already quarantined (NVS:fault-quarantine/pkg/reconciler/reconciler.go
   handleUnhealthyEventOnQuarantinedNode), so a node a GPU fault quarantined just before it hung is left to a person.
5. With remediation `reboot`, fault-remediation asks the janitor to reboot the drained node; when every monitor
   reports it healthy again, fault-quarantine lifts the cordon and taints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

from components import k8s, versions
from components.fabric import wiring as fabric
from components.model.config import PlatformConfig
from components.ops import component as ops
from components.platform import gpu_operator, mirrors, network_operator, placement, trainer, training_operator, volcano

NAMESPACE = "nvsentinel"  # the chart's defaults name it (janitor, node-drainer.systemNamespaces, log collector)
COMPONENT = "health"
CERT_MANAGER_NAMESPACE = "cert-manager"
# The taint every quarantine rule set adds besides the cordon: no training pod tolerates it (tests check every
# render, the policy pack checks anyone's GPU pods), so a restarted pod never lands on a quarantined node even if
# someone uncordons it by hand; the platform's DaemonSets do (k8s.operand_tolerations).
QUARANTINE_TAINT = k8s.QUARANTINE_TAINT
OUT_OF_SERVICE_TAINT = {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}
LOST_NODE_POLICY = "fastpath-node-lost"
# DCGM's hostengine as the GPU Operator serves it (gpu-operator@v26.7.0:assets/state-dcgm/0500_service.yaml: Service
# nvidia-dcgm, port 5555, internalTrafficPolicy Local, so each node's monitor talks to its own hostengine).
DCGM_PORT = 5555
# The chart's node opt-out, kept in every rule set it ships (a node labelled so is never quarantined).
_MANAGED = (
    "!('k8saas.nvidia.com/ManagedByNVSentinel' in node.metadata.labels && "
    "node.metadata.labels['k8saas.nvidia.com/ManagedByNVSentinel'] == \"false\") && "
    "!('nvsentinel.dgxc.nvidia.com/managed' in node.metadata.labels && "
    "node.metadata.labels['nvsentinel.dgxc.nvidia.com/managed'] == \"false\")"
)
# What gpu-health-monitor reports about its own connection to the hostengine, not about a GPU
# (NVS:health-monitors/gpu-health-monitor/gpu_health_monitor/cli.py, dcgm_watcher/dcgm.py).
DCGM_LINK_CHECKS = ("GpuDcgmConnectivityFailure", "GpuDcgmUnresponsive")
# The chart's six rule sets (NVS:distros/kubernetes/nvsentinel/charts/fault-quarantine/values.yaml ruleSets): Helm
# replaces a list wholesale, so ours repeat each one's match, adding the taint.
RULE_SETS = (
    # Less the monitor's own link to DCGM: it reports the first failed poll as a fatal GPU fault
    # (NVS:health-monitors/gpu-health-monitor/.../platform_connector.py dcgm_connectivity_failed), and every GPU
    # Operator rollout restarts the node-local hostengine node by node: quarantining on it would kill gangs on
    # healthy GPUs and trip the breaker. The event still reaches the node as a condition of that name
    # (platform-connector), so a lasting outage shows; it just does not drain the node.
    (
        "GPU fatal error ruleset",
        "event.agent == 'gpu-health-monitor' && event.componentClass == 'GPU' && event.isFatal == true && "
        f"!(event.checkName in {list(DCGM_LINK_CHECKS)!r})",
    ),
    (
        "CSP health monitor fatal error ruleset",
        "event.agent == 'csp-health-monitor' && event.checkName == 'CSPMaintenance' && event.isFatal == true",
    ),
    (
        "Syslog fatal error ruleset",
        "event.agent == 'syslog-health-monitor' && (event.componentClass == 'GPU' || event.componentClass == 'NIC') "
        "&& event.isFatal == true",
    ),
    ("NIC health monitor fatal error ruleset", "event.agent == 'nic-health-monitor' && event.isFatal == true"),
    # The chart's, less the lost-node policy, which has its rule set below.
    (
        "Kubernetes object monitor fatal error ruleset",
        "event.agent == 'kubernetes-object-monitor' && event.isFatal == true && "
        f"event.checkName != '{LOST_NODE_POLICY}'",
    ),
    ("Preflight check fatal error ruleset", "event.agent.startsWith('preflight-') && event.isFatal == true"),
)
# nic-health-monitor's checks per link layer (NVS:.../nic-health-monitor/values.yaml enabledChecks): a port is an
# InfiniBand or an Ethernet (RoCE) one by its link_layer file, and only that family's checks apply to it.
NIC_CHECKS = {
    "InfiniBand": ["InfiniBandStateCheck", "InfiniBandDegradationCheck", "InfiniBandCharDeviceCheck"],
    "Ethernet": ["EthernetStateCheck", "EthernetDegradationCheck"],
}


def system_namespaces() -> str:
    """node-drainer never evicts here: the chart's list (NVS:.../node-drainer/values.yaml systemNamespaces) and the
    platform's own namespaces (an operator on a GPU node is not a training pod)."""
    names = [
        "nvsentinel", "kube-system", "gpu-operator", "gmp-system", "network-operator", "skyhook",
        gpu_operator.NAMESPACE, network_operator.NAMESPACE, volcano.NAMESPACE, trainer.NAMESPACE,
        training_operator.NAMESPACE, CERT_MANAGER_NAMESPACE, ops.NAMESPACE,
    ]  # fmt: skip
    return "^(" + "|".join(dict.fromkeys(names)) + ")$"


def lost_node_predicate(minutes: int) -> str:
    """CEL over a Node (NVS:.../kubernetes-object-monitor/pkg/cel/environment.go: `resource`, `now`): Ready has not
    been True for `minutes`. A lost node's Ready is Unknown (the kubelet stopped posting), which the chart's own
    node-not-ready policy (status "False" only) never matches."""
    # GPU nodes only (the GPU Operator's nvidia.com/gpu.present, which the circuit breaker counts too): a lost CPU
    # or storage node's pods are not a gang's, and its volumes must not be force-detached by a rule made for GPUs.
    return (
        "has(resource.metadata.labels) && 'nvidia.com/gpu.present' in resource.metadata.labels && "
        "resource.metadata.labels['nvidia.com/gpu.present'] == 'true' && "
        "resource.status.conditions.exists(c, c.type == 'Ready' && c.status != 'True' && "
        f"now - timestamp(c.lastTransitionTime) > duration('{minutes * 60}s'))"
    )


def rule_sets(platform: PlatformConfig) -> list[dict[str, Any]]:
    """fault-quarantine's rule sets: the chart's, each cordoning and tainting QUARANTINE_TAINT, and the lost-node
    one, which also taints the node out of service."""
    out: list[dict[str, Any]] = [
        {
            "enabled": True,
            "version": "1",
            "name": name,
            "match": {"all": [{"kind": "HealthEvent", "expression": expr}, {"kind": "Node", "expression": _MANAGED}]},
            "cordon": {"shouldCordon": True},
            "taint": dict(QUARANTINE_TAINT),
        }
        for name, expr in RULE_SETS
    ]
    if platform.health.lost_node_minutes is not None:
        out.append(
            {
                "enabled": True,
                "version": "1",
                "name": "fastpath lost node ruleset",
                "match": {
                    "all": [
                        {
                            "kind": "HealthEvent",
                            "expression": (
                                "event.agent == 'kubernetes-object-monitor' && "
                                f"event.checkName == '{LOST_NODE_POLICY}' && event.isFatal == true"
                            ),
                        },
                        {"kind": "Node", "expression": _MANAGED},
                    ]
                },
                "cordon": {"shouldCordon": True},
                "taint": dict(OUT_OF_SERVICE_TAINT),
            }
        )
    return out


def object_policies(platform: PlatformConfig) -> list[dict[str, Any]]:
    """kubernetes-object-monitor's policies (the list replaces the chart's node-not-ready one)."""
    minutes = platform.health.lost_node_minutes
    if minutes is None:
        return []
    return [
        {
            "name": LOST_NODE_POLICY,
            "enabled": True,
            "resource": {"group": "", "version": "v1", "kind": "Node"},
            "predicate": {"expression": lost_node_predicate(minutes)},
            "healthEvent": {
                "componentClass": "Node",
                "isFatal": True,
                "message": f"Node not Ready for {minutes} minutes: tainted out-of-service so its pods are released",
                "recommendedAction": "CONTACT_SUPPORT",
                "errorCode": ["NODE_LOST"],
            },
        }
    ]


def nic_inclusion(platform: PlatformConfig) -> str | None:
    """The rails' HCAs, exactly (a regex nic-health-monitor matches against /sys/class/infiniband names; it turns its
    automatic filters off). None on a fabric whose NICs fastpath does not name (no RDMA rails)."""
    hcas = [r.hca for r in fabric.rails(platform.fabric)]
    if not platform.fabric.kind_row.rdma or not hcas:
        return None
    return "^(" + "|".join(dict.fromkeys(hcas)) + ")$"


def values(platform: PlatformConfig) -> dict[str, Any]:
    """Helm values for the NVSentinel umbrella chart: only what differs from its defaults, each for a reason."""
    h = platform.health
    nics = nic_inclusion(platform)
    reboot = h.remediation == "reboot"
    layer = platform.fabric.kind_row.link_layer
    v: dict[str, Any] = {
        "global": {
            # The GPU Operator's hostengine (gpu_operator.values turns it on with health).
            "dcgm": {
                "mode": "operator-service",
                "service": {"endpoint": f"nvidia-dcgm.{gpu_operator.NAMESPACE}.svc", "port": DCGM_PORT},
            },
            # Quarantine, drain and remediation read health events from a datastore; the bundled MongoDB (3
            # replicas, TLS through cert-manager, volumes from the default StorageClass).
            "mongodbStore": {"enabled": True},
            "faultQuarantine": {"enabled": True},
            "nodeDrainer": {"enabled": True},
            # Off by default, on when the stack needs them (below).
            **({"nicHealthMonitor": {"enabled": True}} if nics is not None else {}),
            **({"kubernetesObjectMonitor": {"enabled": True}} if h.lost_node_minutes is not None else {}),
            **(
                {
                    "faultRemediation": {"enabled": True},
                    "janitor": {"enabled": True},
                    "janitorProvider": {"enabled": True},
                }
                if reboot
                else {}
            ),
        },
        # Pinned both ways (the chart renders a PodMonitor unconditionally by default): only with the Prometheus
        # Operator, whose CRD it needs.
        "podMonitor": {"enabled": platform.monitoring.enabled},
    }
    if platform.gpu.driver_preinstalled:
        # With a host driver no driver DaemonSet pod exists for the labeler to see, and the NIC monitor would never
        # be scheduled (its node selector wants driver.installed): NVS:.../charts/labeler/values.yaml.
        v["labeler"] = {"assumeDriverInstalled": True}
    v |= {
        "fault-quarantine": {
            "circuitBreaker": {"enabled": True, "percentage": h.circuit_breaker_percent, "duration": "5m"},
            "ruleSets": rule_sets(platform),
        },
        "node-drainer": {
            "systemNamespaces": system_namespaces(),
            # Training pods go at once: their gang restarts from its checkpoint elsewhere. Anything else is left
            # to finish (the chart's default for every namespace).
            "userNamespaces": [
                *({"name": ns, "mode": "Immediate"} for ns in platform.training_namespaces),
                {"name": "*", "mode": "AllowCompletion"},
            ],
        },
    }
    if nics is not None:
        checks = NIC_CHECKS.get(layer or "", [*NIC_CHECKS["InfiniBand"], *NIC_CHECKS["Ethernet"]])
        v["nic-health-monitor"] = {"nicInclusionRegexOverride": nics, "enabledChecks": checks}
    if h.lost_node_minutes is not None:
        v["kubernetes-object-monitor"] = {"policies": object_policies(platform)}
    if h.storage_class is not None:
        # The bundled Bitnami MongoDB's volumes (NVS:.../charts/mongodb-store/Chart.yaml: dependency mongodb 16.2.2,
        # whose persistence.storageClass empty means the default class).
        v["mongodb-store"] = {"mongodb": {"persistence": {"storageClass": h.storage_class}}}
    if reboot:
        # The simulated `kind` provider is the default; on real nodes, reboot through a privileged Job.
        v["janitor-provider"] = {"csp": {"provider": "generic"}}
    return k8s.merge_values(v, placement.site_values(versions.NVSENTINEL_CHART, platform))


def cert_manager_values(platform: PlatformConfig) -> dict[str, Any]:
    """cert-manager installs its CRDs with the release (the chart's `crds.enabled`, false by default; `crds.keep`,
    true by default, keeps them when the release goes: cert-manager/cert-manager@v1.21.1:deploy/charts/cert-manager/
    values.yaml). That file is not among the locked upstream files, so tests/test_platform.py does not check it. Its
    controller, webhook, cainjector and startup check go to the system nodes when the stack names them."""
    v = {"crds": {"enabled": True}}
    return k8s.merge_values(v, placement.site_values(versions.CERT_MANAGER_CHART, platform))


@dataclass
class HealthArgs:
    platform: PlatformConfig
    after: list[Any]
    """The GPU Operator's release: its DCGM hostengine is what the GPU monitor reads."""


class Health(pulumi.ComponentResource):
    """Installs NVIDIA NVSentinel (chart oci://ghcr.io/nvidia/nvsentinel, version pinned in components/versions.py)
    into the `nvsentinel` namespace, and cert-manager unless the cluster has one: GPU and NIC health monitoring,
    quarantine of a sick node (cordon, taint fastpath.dev/quarantined), its training pods evicted so their gangs
    restart from their checkpoints, a lost node tainted out of service, optional reboot remediation.

    Needs: the GPU Operator with its DCGM hostengine (gpu_operator.values sets dcgm.enabled with health), a default
    StorageClass (the datastore's volumes).

    Example:
        Health("health", HealthArgs(platform=cfg.platform, after=[gpu.release]), opts=pulumi.ResourceOptions(parent=p))
    """

    def __init__(self, name: str, args: HealthArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("fastpath:platform:Health", name, None, opts)
        p = args.platform
        after = list(args.after)
        if p.health.install_cert_manager:
            _, cm = k8s.operator_install(
                self,
                p.cluster,
                COMPONENT,
                CERT_MANAGER_NAMESPACE,
                "baseline",
                "cert-manager's controller, webhook and cainjector need no host access",
                "cert-manager",
                *mirrors.chart_source(versions.CERT_MANAGER_CHART, versions.CERT_MANAGER_REPO, p.mirrors),
                versions.CERT_MANAGER_VERSION,
                cert_manager_values(p),
            )
            after.append(cm)
        ns = k8s.apply(
            k8s.namespace(
                NAMESPACE, p.cluster, COMPONENT, "privileged", "its monitors read host sysfs, /proc and the kernel log"
            ),
            pulumi.ResourceOptions(parent=self),
        )
        self.release = k8s.helm_release(
            "nvsentinel",
            *mirrors.chart_source(versions.NVSENTINEL_CHART, None, p.mirrors),
            versions.NVSENTINEL_VERSION,
            NAMESPACE,
            values(p),
            pulumi.ResourceOptions(parent=self, depends_on=[ns, *after]),
        )
        self.register_outputs({"namespace": NAMESPACE})
