# shellcheck shell=sh
# The MPI launcher's entrypoint on Training Operator v1: sh -c <this> launcher <mpirun command> (operator_v1.mpi_job;
# the acceptance job's launcher runs its series through it too). launch.py loads it: comment lines are dropped,
# the rest goes into the manifest as it is.
#
# The v1 launcher starts as soon as it is created, not when its workers run (kubeflow/trainer@v1.9.4
# pkg/controller.v1/mpi), and the operator never recreates a worker: so wait until each worker takes an exec
# (kubexec.sh, as Open MPI will) for at most 10 minutes, stop at once on a worker that failed (its preflight) or is
# being deleted (its node is gone), then run mpirun, and after a failure clear what is left of the ranks on the
# workers and relaunch it, FASTPATH_MAX_RESTARTS times. The launcher runs under Never, so the pod that ends keeps
# its log (cleanPodPolicy Running deletes only Running and Pending pods).
mpi=${FASTPATH_MPI_DIR:-/etc/mpi}
kubectl=${FASTPATH_KUBECTL:-/opt/kube/kubectl}
workers() { awk '{print $1}' "$mpi/hostfile"; }
limit=$(command -v timeout >/dev/null 2>&1 && echo "timeout 30")
gone() {
  state=$("$kubectl" get pod "$1" -o 'jsonpath={.status.phase} {.metadata.deletionTimestamp}' 2>/dev/null)
  case "$state" in
    Failed*|Succeeded*|*T*) echo "fastpath: worker $1 is gone ($state): kubectl describe pod $1" >&2; return 0;;
  esac
  return 1
}
wait_workers() {
  deadline=$(( $(date +%s) + 600 ))
  for w in $(workers); do
    while :; do
      if gone "$w"; then exit 2; fi
      $limit "$mpi/kubexec.sh" "$w" true >/dev/null 2>&1 && break
      [ "$(date +%s)" -lt "$deadline" ] || { echo "fastpath: worker $w unreachable for 10 minutes" >&2; exit 3; }
      sleep 2
    done
  done
}
wait_workers
attempt=0
while :; do
  "$@" && exit 0
  rc=$?
  attempt=$((attempt + 1))
  if [ "$attempt" -gt "${FASTPATH_MAX_RESTARTS:-0}" ]; then
    echo "fastpath: $1 failed $attempt times (last exit $rc)" >&2; exit "$rc"
  fi
  echo "fastpath: $1 exited $rc; relaunch $attempt of $FASTPATH_MAX_RESTARTS" >&2
  for w in $(workers); do "$mpi/kubexec.sh" "$w" 'kill -9 -1' >/dev/null 2>&1; done
  wait_workers
done
