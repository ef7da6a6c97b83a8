"""fastpath reaper: ends a training job whose pods cannot start, so its GPUs go back to the queue.

Neither Kubernetes nor the job operators end a job whose pod waits forever: a pod in ImagePullBackOff or
CreateContainerConfigError stays Pending (kubernetes/kubernetes#122300), the Training Operator v1 and JobSet wait
with it (kubeflow/trainer#2001), and the gang holds every GPU it was given. This program, run as one Deployment,
looks at fastpath's training pods (label fastpath.dev/role) every INTERVAL seconds and, for a pod stuck past its
deadline, fails the job with the reason in its status:

- Trainer v2 (the pod's owner is a batch Job): the pod's status gets phase Failed and the condition
  `fastpath.dev/StartFailed` (reason and message: what the kubelet said), as the pod GC controller marks pods it
  ends (kubernetes/kubernetes pkg/controller/podgc markFailedAndDeletePodWithCondition; the apiserver has no rule
  on status.phase in ValidatePodStatusUpdate, and the kubelet never moves a pod out of a terminal phase). The
  runtime's podFailurePolicy fails the Job on that condition and its JobSet failure policy fails the run at once
  (no restart: the next attempt would be stuck the same way); the TrainJob copies the JobSet's Failed condition.
- Training Operator v1 (owner kind PyTorchJob, MPIJob or TFJob): the job's status gets condition Failed (reason
  and message as above; Running False). kubeflow/trainer@v1.9.4:pkg/controller.v1/common/job.go ReconcileJobs then
  sees a finished job (pkg/util/status.go IsFinished) and deletes its Running and Pending pods and its PodGroup
  (cleanPodPolicy Running). Failing the pod would not do: a PyTorch worker under ExitCode is recreated, stuck
  again, forever (a container that never ran has no exit code; the operator's placeholder 0xbeef counts as
  retryable).

Stuck means (stuck() below): a pod on a node whose container or init container waits with a reason that does not
clear by waiting (IMAGE_AND_CONFIG) for START_DEADLINE seconds since it was scheduled, or that is still creating
its containers then (a volume that cannot be mounted: a missing ConfigMap, Secret or claim); a pod that names a
claim that does not exist; and, only when PENDING_DEADLINE is set, a pod the scheduler has not placed for that
long (a gang waiting for GPUs is queueing, not stuck, so this is off unless a stack sets it).

Environment: NAMESPACES (space-separated), START_DEADLINE (seconds), PENDING_DEADLINE (seconds, empty: off),
INTERVAL (seconds), DRY_RUN (1: log only). It talks to the API server with its ServiceAccount token and the
Python standard library only, so any Python 3.10+ image runs it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

ROLE_LABEL = "fastpath.dev/role"  # components/jobs/resolve.py TRAINING_POD_SELECTOR
CONDITION = "fastpath.dev/StartFailed"  # components/jobs/runtime_v2/build.py START_FAILED_RULE matches it
# Waiting reasons that do not clear by waiting: the image cannot be pulled or named, or the container cannot be
# created from its config (a Secret or ConfigMap key in env is missing).
IMAGE_AND_CONFIG = frozenset(
    {
        "ImagePullBackOff",
        "ErrImagePull",
        "ErrImageNeverPull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)
# Still making its containers (pulling a large image, mounting volumes): waiting is normal for a while.
CREATING = frozenset({"ContainerCreating", "PodInitializing"})
V1_KINDS = {"PyTorchJob": "pytorchjobs", "MPIJob": "mpijobs", "TFJob": "tfjobs"}


@dataclass(frozen=True)
class Stuck:
    pod: str
    namespace: str
    reason: str
    message: str


@dataclass(frozen=True)
class Action:
    """What to do: `fail-pod` (patch the pod's status) or `fail-job` (patch the v1 job's status), on `target`."""

    kind: str
    namespace: str
    target: str
    resource: str  # pods, or the v1 job's plural
    stuck: Stuck


def parse_time(value: str | None) -> float | None:
    if not value:
        return None
    return dt.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()


def _condition(pod: dict, ctype: str) -> dict:
    return next((c for c in pod.get("status", {}).get("conditions") or [] if c.get("type") == ctype), {})


def stuck(pod: dict, now: float, start_deadline: float, pending_deadline: float | None) -> Stuck | None:
    """Why `pod` counts as stuck at `now`, or None."""
    meta, status = pod.get("metadata", {}), pod.get("status", {})
    if status.get("phase") != "Pending" or meta.get("deletionTimestamp"):
        return None
    if _condition(pod, CONDITION).get("status") == "True":
        return None  # already ended
    name, ns = meta.get("name", ""), meta.get("namespace", "")
    created = parse_time(meta.get("creationTimestamp")) or now
    scheduled = _condition(pod, "PodScheduled")
    if not pod.get("spec", {}).get("nodeName"):
        message = scheduled.get("message") or ""
        # The scheduler's VolumeBinding plugin: a claim that does not exist never appears by waiting in a queue.
        if "persistentvolumeclaim" in message and "not found" in message and now - created >= start_deadline:
            return Stuck(name, ns, "ClaimNotFound", message)
        if pending_deadline is not None and now - created >= pending_deadline:
            why = message or "the scheduler has not placed it"
            return Stuck(name, ns, "Unschedulable", f"not scheduled in {int(pending_deadline)} s: {why}")
        return None
    since = parse_time(scheduled.get("lastTransitionTime")) or created
    if now - since < start_deadline:
        return None
    statuses = [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
    waiting = [(s.get("name", ""), (s.get("state") or {}).get("waiting") or {}) for s in statuses]
    for container, w in waiting:
        if w.get("reason") in IMAGE_AND_CONFIG:
            return Stuck(name, ns, w["reason"], f"container {container}: {w.get('message') or w['reason']}")
    if not statuses or any(w.get("reason") in CREATING for _, w in waiting):
        return Stuck(
            name,
            ns,
            "ContainersNotCreated",
            f"containers not created {int(start_deadline)} s after scheduling: a volume cannot be mounted (a "
            "missing ConfigMap, Secret or claim) or the image pull is slower than the deadline; see the pod's events",
        )
    return None


JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"


def action(pod: dict, s: Stuck) -> Action | None:
    """Whom to fail for a stuck pod: its v1 job, or the pod itself when it is a v2 run's (a JobSet's Job owns it,
    and the runtime's rule fails the run on the condition). Any other batch Job's pod (a v1 PyTorch job's
    rendezvous store) is left: failing it would only have its Job make another, stuck the same way; its job's
    workers, stuck on the same image, fail the job."""
    labels = pod.get("metadata", {}).get("labels") or {}
    for owner in pod.get("metadata", {}).get("ownerReferences") or []:
        if not owner.get("controller"):
            continue
        if owner.get("kind") in V1_KINDS and owner.get("apiVersion") == "kubeflow.org/v1":
            return Action("fail-job", s.namespace, owner["name"], V1_KINDS[owner["kind"]], s)
        if owner.get("kind") == "Job" and owner.get("apiVersion") == "batch/v1" and JOBSET_LABEL in labels:
            return Action("fail-pod", s.namespace, s.pod, "pods", s)
    return None


def _stamp(now: float) -> str:
    return dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_status_patch(pod: dict, s: Stuck, now: float) -> dict:
    """The pod's new status: Failed, with the condition the runtime's podFailurePolicy matches."""
    conditions = [c for c in pod.get("status", {}).get("conditions") or [] if c.get("type") != CONDITION]
    conditions.append(
        {
            "type": CONDITION,
            "status": "True",
            "reason": s.reason,
            "message": s.message,
            "lastTransitionTime": _stamp(now),
        }
    )
    return {"status": {"phase": "Failed", "reason": s.reason, "message": s.message, "conditions": conditions}}


def job_status_patch(job: dict, s: Stuck, now: float) -> dict | None:
    """The v1 job's conditions with Failed True (None: it has already finished). Training Operator v1 conditions
    carry lastUpdateTime and lastTransitionTime (kubeflow/trainer@v1.9.4:pkg/apis/kubeflow.org/v1/common_types.go
    JobCondition)."""
    conditions = list(job.get("status", {}).get("conditions") or [])
    if any(c.get("type") in ("Succeeded", "Failed") and c.get("status") == "True" for c in conditions):
        return None
    stamp = _stamp(now)
    out = []
    for c in conditions:
        if c.get("type") == "Running" and c.get("status") == "True":
            c = {**c, "status": "False", "lastUpdateTime": stamp, "lastTransitionTime": stamp}
        out.append(c)
    out.append(
        {
            "type": "Failed",
            "status": "True",
            "reason": s.reason,
            "message": f"pod {s.pod} could not start: {s.message} (fastpath reaper)",
            "lastUpdateTime": stamp,
            "lastTransitionTime": stamp,
        }
    )
    return {"metadata": {"resourceVersion": job["metadata"]["resourceVersion"]}, "status": {"conditions": out}}


class Api:
    """The in-cluster API server, through the pod's ServiceAccount (stdlib only)."""

    SA = "/var/run/secrets/kubernetes.io/serviceaccount"

    def __init__(self) -> None:
        host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
        self.base = f"https://{host}:{port}"
        self.ctx = ssl.create_default_context(cafile=f"{self.SA}/ca.crt")

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        with open(f"{self.SA}/token") as f:  # the kubelet rotates it: read it every time
            token = f.read().strip()
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/merge-patch+json"
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        with urllib.request.urlopen(req, context=self.ctx, timeout=30) as resp:
            return json.loads(resp.read() or b"{}")


def sweep(api: Any, namespaces: list[str], now: float, start: float, pending: float | None, dry: bool) -> list[Action]:
    """One pass: every stuck pod's action, carried out unless `dry`."""
    done = []
    for ns in namespaces:
        pods = api.call("GET", f"/api/v1/namespaces/{ns}/pods?labelSelector={ROLE_LABEL}").get("items", [])
        for pod in pods:
            s = stuck(pod, now, start, pending)
            a = action(pod, s) if s else None
            if a is None:
                continue
            print(f"reaper: {a.kind} {ns}/{a.target}: pod {s.pod}: {s.reason}: {s.message}", flush=True)  # type: ignore[union-attr]
            if not dry:
                if a.kind == "fail-pod":
                    api.call(
                        "PATCH", f"/api/v1/namespaces/{ns}/pods/{a.target}/status", pod_status_patch(pod, a.stuck, now)
                    )
                else:
                    path = f"/apis/kubeflow.org/v1/namespaces/{ns}/{a.resource}/{a.target}"
                    patch = job_status_patch(api.call("GET", path), a.stuck, now)
                    if patch is None:
                        continue
                    api.call("PATCH", f"{path}/status", patch)
            done.append(a)
    return done


def main() -> int:
    namespaces = os.environ.get("NAMESPACES", "").split()
    start = float(os.environ.get("START_DEADLINE", "1800"))
    pending = float(os.environ["PENDING_DEADLINE"]) if os.environ.get("PENDING_DEADLINE") else None
    interval = float(os.environ.get("INTERVAL", "60"))
    dry = os.environ.get("DRY_RUN") == "1"
    api = Api()
    while True:
        try:
            sweep(api, namespaces, time.time(), start, pending, dry)
        except (urllib.error.URLError, OSError, ValueError, KeyError) as err:  # the next pass tries again
            print(f"reaper: pass failed: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
        time.sleep(interval)


if __name__ == "__main__":
    sys.exit(main())
