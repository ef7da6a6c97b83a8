"""Training-time fabric telemetry on the cluster side: a PodMonitor per training namespace that scrapes the
nccl-metrics sidecar of every GPU pod (components/jobs/telemetry.py), and a PrometheusRule whose recording rules
and alerts make a slow rank or a slow rail visible while a job trains.

Metrics read:
- NCCL Inspector (NVIDIA/nccl@v2.30.7-1:plugins/profiler/inspector/inspector_prom.cc): gauge
  `nccl_bus_bandwidth_gbs` per process and GPU, labelled with `node`, `gpu`, `collective`, `message_size` (a size
  bucket), `nranks`, `n_nodes`, `comm_name`, `algo_proto`.
- node-exporter's infiniband collector (prometheus/node_exporter@v1.12.1:collector/infiniband_linux.go, on by
  default), one series per HCA `device` and `port`: `node_infiniband_port_data_transmitted_bytes_total`,
  `node_infiniband_state_id` (4 is ACTIVE), `node_infiniband_link_downed_total`.
- the GPU Operator's DCGM exporter (4.6.0-4.8.3 at gpu-operator v26.7.0; read at the nearest tag in the snapshot,
  NVIDIA/dcgm-exporter@4.5.3-4.8.2:etc/default-counters.csv): `DCGM_FI_DEV_XID_ERRORS` (the last XID a GPU raised),
  labelled `gpu` and the node's name, `Hostname` up to that tag and `hostname` after (NVIDIA/dcgm-exporter#655).
"""

from __future__ import annotations

from typing import Any

from components import k8s
from components.fabric import wiring as fabric
from components.jobs import telemetry
from components.jobs.resolve import ROLE_LABEL
from components.model.config import PlatformConfig

COMPONENT = "telemetry"
NAME = "fastpath-nccl"
JOB_LABEL_OUT = "fastpath_job"
# A rank under this share of its job's median bus bandwidth, for the same collective and size, is slow: one rank on
# a degraded link or a missing rail pulls the ring down to its pace, and this names it.
SLOW_RANK_RATIO = 0.8
# A rail carrying under this share of its node's median rail while the node's rails are busy (over BUSY_BYTES/s).
SLOW_RAIL_RATIO = 0.5
BUSY_BYTES = 1e9
FOR = "10m"
INSPECTOR_METRIC = "nccl_bus_bandwidth_gbs"


def pod_monitors(platform: PlatformConfig) -> list[dict[str, Any]]:
    """One per training namespace: every pod with the role label and the nccl-metrics port. The job's name, a v1
    pod's fastpath.dev/job or a v2 pod's JobSet name, becomes the `fastpath_job` label."""
    mon = platform.monitoring
    out = []
    for ns in platform.training_namespaces:
        md = k8s.meta(NAME, platform.cluster, COMPONENT, namespace=ns, extra_labels=dict(mon.service_monitor_labels))
        out.append(
            {
                "apiVersion": "monitoring.coreos.com/v1",
                "kind": "PodMonitor",
                "metadata": md,
                "spec": {
                    "selector": {"matchExpressions": [{"key": ROLE_LABEL, "operator": "Exists"}]},
                    "podMetricsEndpoints": [
                        {
                            "port": telemetry.PORT_NAME,
                            "interval": "30s",
                            "relabelings": [
                                {
                                    "sourceLabels": [
                                        "__meta_kubernetes_pod_label_fastpath_dev_job",
                                        "__meta_kubernetes_pod_label_jobset_sigs_k8s_io_jobset_name",
                                    ],
                                    "separator": "",
                                    "targetLabel": JOB_LABEL_OUT,
                                }
                            ],
                        }
                    ],
                },
            }
        )
    return out


def rules(platform: PlatformConfig) -> dict[str, Any]:
    """The PrometheusRule: recording rules for a job's median and each rank's share of it, each rail's traffic, and
    alerts naming the slow rank (node, GPU), the slow or down rail (node, HCA) and a GPU's XID."""
    # Per communicator (the Inspector's comm_name): a tensor-parallel group on NVLink and a data-parallel group on
    # the network run the same collective at very different rates, and only ranks of one communicator compare.
    by = f"namespace, {JOB_LABEL_OUT}, comm_name, collective, message_size"
    hcas = "|".join(dict.fromkeys(r.hca for r in fabric.rails(platform.fabric))) or ".+"
    rail = f'device=~"{hcas}"'
    median = f"{JOB_LABEL_OUT}:{INSPECTOR_METRIC}:median"
    share = f"{JOB_LABEL_OUT}:{INSPECTOR_METRIC}:share_of_median"
    tx = "fastpath_rail:transmit_bytes:rate5m"
    recording = [
        {"record": median, "expr": f"quantile by ({by}) (0.5, {INSPECTOR_METRIC})"},
        {"record": share, "expr": f"{INSPECTOR_METRIC} / on ({by}) group_left {median}"},
        {
            "record": tx,
            "expr": (
                f"sum by (instance, device) (rate(node_infiniband_port_data_transmitted_bytes_total{{{rail}}}[5m]))"
            ),
        },
    ]
    node_median = f"quantile by (instance) (0.5, {tx})"
    alerts = [
        {
            "alert": "FastpathNcclSlowRank",
            "expr": f"{share} < {SLOW_RANK_RATIO}",
            "for": FOR,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "A rank of {{ $labels.fastpath_job }} runs {{ $labels.collective }} slower than its peers",
                "description": (
                    "{{ $labels.node }} GPU {{ $labels.gpu }} gets {{ $value | humanizePercentage }} of the job's "
                    "median bus bandwidth ({{ $labels.collective }}, {{ $labels.message_size }}): a degraded link or "
                    "a rail missing on that node; compare fastpath_rail:transmit_bytes:rate5m there"
                ),
            },
        },
        {
            "alert": "FastpathRailSlow",
            "expr": (
                f"{tx} < on (instance) group_left () ({SLOW_RAIL_RATIO} * {node_median}) "
                f"and on (instance) ({node_median} > {BUSY_BYTES:.0f})"
            ),
            "for": FOR,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "Rail {{ $labels.device }} on {{ $labels.instance }} carries less than its node's others",
                "description": (
                    "{{ $labels.device }} sends {{ $value | humanize }}B/s, under half its node's median rail"
                ),
            },
        },
        {
            "alert": "FastpathRailDown",
            "expr": (
                f"node_infiniband_state_id{{{rail}}} != 4 or "
                f"increase(node_infiniband_link_downed_total{{{rail}}}[10m]) > 0"
            ),
            "for": "2m",
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": "Rail {{ $labels.device }} on {{ $labels.instance }} is not ACTIVE or went down",
                "description": "NCCL skips a port that is not ACTIVE: jobs there run on fewer rails, or over TCP",
            },
        },
        {
            "alert": "FastpathGpuXid",
            "expr": "DCGM_FI_DEV_XID_ERRORS > 0",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": (
                    "GPU {{ $labels.gpu }} on {{ $labels.Hostname }}{{ $labels.hostname }} raised XID {{ $value }}"
                ),
                "description": "see NVIDIA's XID catalogue; with health on, a fatal XID quarantines the node",
            },
        },
    ]
    mon = platform.monitoring
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": k8s.meta(
            NAME,
            platform.cluster,
            COMPONENT,
            namespace=platform.training_namespaces[0],
            extra_labels=dict(mon.service_monitor_labels),
        ),
        "spec": {"groups": [{"name": "fastpath-nccl", "rules": [*recording, *alerts]}]},
    }


def objects(platform: PlatformConfig) -> list[dict[str, Any]]:
    """Nothing unless the stack turns telemetry on (monitoring.enabled with an Inspector image)."""
    if not (platform.monitoring.enabled and platform.monitoring.nccl_inspector_image):
        return []
    return [*pod_monitors(platform), rules(platform)]
