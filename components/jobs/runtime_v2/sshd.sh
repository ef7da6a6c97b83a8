# shellcheck shell=sh
# The MPI `node` container: sh -c <this> <where the ssh Secret is mounted>. A TrainJob cannot replace it (its
# image, command and args reach only the launcher). build.py loads it: comment lines are dropped, each __NAME__ is
# build.NAME.
#
# The image needs openssh-server and openssh-client, no prepared configuration: host keys are made at start, every
# option is on the command line (they win over the image's sshd_config, which `-f /dev/null` skips anyway), root
# logs in with the trainer's key only, StrictModes off because the key files are the Secret's (root-owned, 0644).
# SetEnv (server side since OpenSSH 7.8) hands the image's PATH and LD_LIBRARY_PATH to the sessions Open MPI
# starts, which otherwise get sshd's compiled-in PATH and find no `orted`/`prted`. A missing tool exits
# __FAIL_RUN_EXIT__ at once: the run fails with the reason, no restart.
#
# sshd runs as a child, never exec'd: it exits 0 on SIGTERM, and a pod that ends Succeeded after an eviction or a
# preemption is not a failure the Job's podFailurePolicy can see (its DisruptionTarget rule would never match, and
# the restart would be charged to maxRestarts through the launcher instead). So SIGTERM is answered with 143 from
# the first line on, and an sshd that ends by itself fails the pod.
trap 'exit 143' TERM INT
export PATH="$PATH:/usr/sbin:/sbin"
for tool in sshd ssh-keygen ssh; do
  # shellcheck disable=SC2242 # __FAIL_RUN_EXIT__ is a number once loaded
  command -v "$tool" >/dev/null 2>&1 || {
    echo "fastpath: no $tool in this image: the MPI runtime's nodes need openssh-server and openssh-client (fastpath:platform.trainer.mpiImage)" >&2; exit __FAIL_RUN_EXIT__; }
done
# ssh is told to use this 0600 copy: OpenSSH ignores the Secret's key, 0640 (build.py, SSH_KEY).
mkdir -p /run/sshd __SSH_KEY_DIR__
cp "$0/id_rsa" __SSH_KEY__ && chmod 600 __SSH_KEY__
ssh-keygen -A >/dev/null
set -- -f /dev/null -p __SSHD_PORT__ -o PermitRootLogin=prohibit-password -o AuthorizedKeysFile="$0/authorized_keys"   -o StrictModes=no -o PasswordAuthentication=no -o "SetEnv=PATH=$PATH LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
# The options tried first: an sshd that refuses them would otherwise exit 255 and restart the gang maxRestarts
# times for nothing. sshd re-executes itself and so must be started by its absolute path.
err=$("$(command -v sshd)" -t "$@" 2>&1) || {
  echo "fastpath: this image's sshd refuses fastpath's options (OpenSSH 7.8 or later is needed): $err" >&2
  # shellcheck disable=SC2242 # __FAIL_RUN_EXIT__ is a number once loaded
  exit __FAIL_RUN_EXIT__; }
"$(command -v sshd)" -De "$@" &
sshd=$!
trap 'kill -TERM "$sshd" 2>/dev/null; wait "$sshd"; exit 143' TERM INT
wait "$sshd"
rc=$?
echo "fastpath: sshd exited $rc" >&2
[ "$rc" -ne 0 ] || rc=1
exit "$rc"
