# shellcheck shell=sh
# The MPI launcher's command on Trainer v2: sh -c <this> mpirun <mpirun command> (trainjob.train_job). launch.py
# loads it: comment lines are dropped, __MPI_FAILURE_GRACE__ becomes launch.MPI_FAILURE_GRACE.
#
# mpirun runs as a child so that SIGTERM (the launcher deleted, the gang restarted) reaches it and ends the launcher
# with 143 at once: a shell that is PID 1 ignores a signal it has no handler for.
"$@" &
child=$!
trap 'kill -TERM "$child" 2>/dev/null; wait "$child"; exit 143' TERM INT
wait "$child"
rc=$?
# A failed mpirun waits before the launcher fails: when a node pod was evicted or preempted, its Job must fail
# first (DisruptionTarget: a restart that spends no budget), not the launcher's ordinary failure, which JobSet
# would act on first and charge to maxRestarts.
[ "$rc" -eq 0 ] || sleep __MPI_FAILURE_GRACE__
exit "$rc"
