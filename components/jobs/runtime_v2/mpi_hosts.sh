# shellcheck shell=sh
# The MPI launcher's init container: sh -c <this> <where the ssh Secret is mounted>, with FASTPATH_TRAINJOB set to
# the JobSet's name. Every host of the hostfile but the launcher itself must take an ssh login before the
# TrainJob's mpirun starts; a real login also proves the image's ssh end to end. Bounded: a host that never answers
# fails the launcher with the last ssh error, and the gang restarts. build.py loads it: comment lines are dropped,
# each __NAME__ is build.NAME.
export PATH="$PATH:/usr/sbin:/sbin"
command -v ssh >/dev/null 2>&1 || {
  echo "fastpath: no ssh client in this image (fastpath:platform.trainer.mpiImage needs openssh-client)" >&2
  # shellcheck disable=SC2242 # __FAIL_RUN_EXIT__ is a number once loaded
  exit __FAIL_RUN_EXIT__; }
# The launcher's `node` container reads the 0600 copy through the emptyDir at __SSH_KEY_DIR__.
mkdir -p __SSH_KEY_DIR__ && cp "$0/id_rsa" __SSH_KEY__ && chmod 600 __SSH_KEY__
deadline=$(( $(date +%s) + __MPI_HOSTS_TIMEOUT__ ))
# shellcheck disable=SC2013 # a host name per line (the mpi plugin writes `<host> slots=<n>`): no blanks, no globs
for host in $(awk '{print $1}' __MPI_HOSTFILE__); do
  case "$host" in "$FASTPATH_TRAINJOB-__LAUNCHER__-"*) continue;; esac
  until err=$(ssh __SSH_OPTIONS__ -o BatchMode=yes -o ConnectTimeout=5 "$host" true 2>&1); do
    [ "$(date +%s)" -lt "$deadline" ] || {
      echo "fastpath: $host took no ssh login on port __SSHD_PORT__ within __MPI_HOSTS_TIMEOUT__s: $err" >&2; exit 1; }
    sleep 5
  done
done
