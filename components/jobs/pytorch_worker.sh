# shellcheck shell=sh
# The PyTorch worker's entrypoint: sh -c <this> fastpath <torchrun command> (operator_v1.pytorch_job). launch.py
# loads it: comment lines are dropped, the rest goes into the manifest as it is.
#
# The worker runs under restartPolicy ExitCode: the operator reads this container's exit code (kubeflow/
# trainer@v1.9.4 pkg/controller.v1/common/pod.go) and recreates the pod only for codes >= 128 (pkg/util/train).
# SIGTERM (drain, eviction, preemption) is answered with 143 from the first line on: retryable, the pod comes back
# and rejoins (torchrun itself exits 1 on SIGTERM, which would fail the job).
trap 'exit 143' TERM INT
# The preflight first: a failure exits 3, which the operator does not retry: the job fails, the gang is freed.
if [ -n "${FASTPATH_PREFLIGHT:-}" ]; then
  sh "$FASTPATH_PREFLIGHT" || { echo "fastpath: preflight failed: the job stops here, nodes released" >&2; exit 3; }
fi
# A start budget: the operator recreates an ExitCode pod without counting, so a pod that keeps dying (an OOM kill
# takes the whole container on cgroup v2, 137) would come back forever when no survivor's torchrun budget ends the
# job (a one-node job). Each start is counted in the job's own rendezvous store, and a pod started more than
# FASTPATH_MAX_STARTS times exits 1.
if [ -n "${FASTPATH_MAX_STARTS:-}" ]; then
  starts=$(python -c 'import datetime, os, torch.distributed as d
host, port = os.environ["PET_RDZV_ENDPOINT"].rsplit(":", 1)
store = d.TCPStore(host, int(port), is_master=False, timeout=datetime.timedelta(seconds=600))
key = os.environ.get("FASTPATH_POD") or os.environ.get("HOSTNAME", "pod")
print(store.add("fastpath/starts/" + key, 1))' 2>/dev/null) || starts=0
  if [ "$starts" -gt "$FASTPATH_MAX_STARTS" ]; then
    echo "fastpath: this pod started $starts times (at most $FASTPATH_MAX_STARTS): failing the job" >&2; exit 1
  fi
fi
# torchrun as a child, its own exit passed on; a signal that killed it (not our SIGTERM) as 1.
"$@" &
child=$!
trap 'kill -TERM "$child" 2>/dev/null; wait "$child"; exit 143' TERM INT
wait "$child"
rc=$?
if [ "$rc" -gt 128 ]; then
  echo "fastpath: $1 was killed by signal $((rc - 128)) (out of memory?)" >&2
  exit 1
fi
exit "$rc"
