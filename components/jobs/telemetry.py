"""Training-time fabric telemetry: every GPU pod loads NCCL's Inspector profiler plugin and exports its
per-collective bus bandwidth and time to Prometheus, so a slow rank or rail shows while the job trains, not only at
the next acceptance run (components/platform/telemetry.py has the scrape config and the rules).

The plugin is not in libnccl nor in NGC's images (NVIDIA/nccl@v2.30.7-1:plugins/profiler/inspector/Makefile builds
libnccl-profiler-inspector.so on its own): the stack names an image holding it (monitoring.ncclInspectorImage),
an init container copies it into the pod, and NCCL loads it by path. Its variables, as its environment table reads
them (plugins/profiler/inspector/inspector.cc, v2.30.7-1): NCCL_INSPECTOR_ENABLE 1 (0 by default: loaded but off),
NCCL_INSPECTOR_PROM_DUMP 1 (Prometheus files instead of JSON; since 2.29.3-1), a dump every 30 s (the minimum it
allows with PROM_DUMP), into a directory the nccl-metrics sidecar serves.
"""

from __future__ import annotations

from pathlib import Path

from components import versions

VOLUME = "nccl-inspector"
MOUNT = "/nccl-inspector"
PLUGIN_FILE = "libnccl-profiler-inspector.so"
PLUGIN_IN_IMAGE = f"/nccl-inspector/{PLUGIN_FILE}"  # where the stack's image must hold it
COPY_MOUNT = "/fastpath-out"  # the shared volume in the copying container
METRICS_DIR = f"{MOUNT}/metrics"
PORT = 9464
PORT_NAME = "nccl-metrics"
DUMP_MICROSECONDS = 30_000_000
PROGRAM = Path(__file__).with_name("nccl_metrics.py")
SMALL = {"cpu": "50m", "memory": "64Mi"}


def env() -> dict[str, str]:
    """What each training container gets."""
    return {
        "NCCL_PROFILER_PLUGIN": f"{MOUNT}/lib/{PLUGIN_FILE}",
        "NCCL_INSPECTOR_ENABLE": "1",
        "NCCL_INSPECTOR_PROM_DUMP": "1",
        "NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS": str(DUMP_MICROSECONDS),
        "NCCL_INSPECTOR_DUMP_DIR": METRICS_DIR,
    }


def volume() -> dict:
    return {"name": VOLUME, "emptyDir": {"sizeLimit": "256Mi"}}


def init_containers(image: str, metrics_image: str = versions.OPS_PYTHON_IMAGE) -> list[dict]:
    """Two native sidecars (restartPolicy Always, Kubernetes 1.29 or later): neither keeps a finished pod running,
    so jobs still complete, and neither fails its pod, which under a v1 ExitCode replica would be recreated forever
    (the operator reads no exit code from a main container that never ran; the policy pack's init-fail-fast). The
    first copies the plugin into the pod and stays; the kubelet starts the training container once its startup
    probe sees the copy tried (without the file NCCL runs on without the profiler). The second serves the metrics."""
    mount = {"name": VOLUME, "mountPath": MOUNT}
    resources = {"requests": dict(SMALL), "limits": dict(SMALL)}
    # The copy sees the shared volume elsewhere: mounted at MOUNT it would hide the image's own /nccl-inspector.
    copy = (
        f'mkdir -p "$0/lib" "$0/metrics"; cp {PLUGIN_IN_IMAGE} "$0/lib/" || '
        f'echo "nccl-inspector: no {PLUGIN_IN_IMAGE} in this image: no training-time telemetry"; '
        'touch "$0/lib/.tried"; while :; do sleep 3600; done'
    )
    return [
        {
            "name": "nccl-inspector-plugin",
            "image": image,
            "restartPolicy": "Always",
            "command": ["sh", "-c", copy, COPY_MOUNT],
            "startupProbe": {
                "exec": {"command": ["test", "-e", f"{COPY_MOUNT}/lib/.tried"]},
                "periodSeconds": 1,
                "failureThreshold": 60,
            },
            "resources": resources,
            "volumeMounts": [{**mount, "mountPath": COPY_MOUNT}],
        },
        {
            "name": "nccl-metrics",
            "image": metrics_image,
            "restartPolicy": "Always",
            "command": ["python3", "-c", PROGRAM.read_text(), METRICS_DIR, str(PORT)],
            "ports": [{"name": PORT_NAME, "containerPort": PORT}],
            "resources": resources,
            "volumeMounts": [{**mount, "readOnly": True}],
        },
    ]


def wire(
    pod_spec: dict, containers: list[dict], image: str | None, metrics_image: str = versions.OPS_PYTHON_IMAGE
) -> None:
    """Add the plugin, the sidecar and the variables to a GPU pod spec (nothing when telemetry is off). The
    sidecars go last: the preflight and the other checks run first, as without telemetry, and the sidecars start
    once they passed, before the training container."""
    if image is None:
        return
    pod_spec["initContainers"] = [*pod_spec.get("initContainers", []), *init_containers(image, metrics_image)]
    pod_spec["volumes"] = [*pod_spec.get("volumes", []), volume()]
    for c in containers:
        c["env"] = [*c.get("env", []), *({"name": k, "value": v} for k, v in env().items())]
        c["volumeMounts"] = [*c.get("volumeMounts", []), {"name": VOLUME, "mountPath": MOUNT}]
