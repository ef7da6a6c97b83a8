#!/bin/sh
# fastpath preflight: runs as an init container of RDMA training pods and fails fast, with the fix, instead of
# letting NCCL fall back to TCP or die mid-job. Expectations come from the environment (set by TrainingJob):
#   PREFLIGHT_GPUS          GPUs the pod must see (/dev/nvidiaN)
#   PREFLIGHT_RDMA_DEVICES  RDMA verbs devices the pod must see (/dev/infiniband/uverbsN)
#   PREFLIGHT_HCAS          HCA names that must exist (/sys/class/infiniband/NAME); empty for SR-IOV VFs
#   PREFLIGHT_INTERFACES    secondary interfaces that must be up with an IPv4 address (net1 net2 ...)
#   PREFLIGHT_SHM_BYTES     smallest acceptable /dev/shm
# PREFLIGHT_SYS, PREFLIGHT_DEV and PREFLIGHT_PROC move /sys, /dev and /proc (tests use fake trees).
SYS=${PREFLIGHT_SYS:-/sys}
DEV=${PREFLIGHT_DEV:-/dev}
PROC=${PREFLIGHT_PROC:-/proc}
failed=0

ok() { echo "preflight ok: $*"; }
fail() { echo "preflight FAIL: $*"; failed=1; }

count() { # number of existing paths matching a glob
  n=0
  for f in $1; do [ -e "$f" ] && n=$((n + 1)); done
  echo "$n"
}

gpus=$(count "$DEV/nvidia[0-9]*")
if [ "$gpus" -lt "${PREFLIGHT_GPUS:-0}" ]; then
  fail "$gpus GPUs visible, $PREFLIGHT_GPUS expected: the nvidia.com/gpu limit or the device plugin is wrong"
else
  ok "$gpus GPUs"
fi

verbs=$(count "$DEV/infiniband/uverbs*")
if [ "$verbs" -lt "${PREFLIGHT_RDMA_DEVICES:-0}" ]; then
  fail "$verbs RDMA devices in $DEV/infiniband, $PREFLIGHT_RDMA_DEVICES expected: the pod lacks the rail resources (rdma/..., nvidia.com/sriov_...) or the device plugin has no free device; NCCL would fall back to TCP"
else
  ok "$verbs RDMA devices"
fi

for hca in ${PREFLIGHT_HCAS:-}; do
  if [ -e "$SYS/class/infiniband/$hca" ]; then ok "HCA $hca"; else
    fail "HCA $hca not present: NCCL_IB_HCA names it; check the host HCA names (ibdev2netdev) in fabric.rails"
  fi
done

for iface in ${PREFLIGHT_INTERFACES:-}; do
  state=$(cat "$SYS/class/net/$iface/operstate" 2>/dev/null || echo missing)
  if [ "$state" = missing ]; then
    fail "interface $iface missing: the Multus networks annotation or its NetworkAttachmentDefinition is wrong"
  elif [ "$state" != up ] && [ "$state" != unknown ]; then
    fail "interface $iface is $state: the rail link is down on this node"
  elif ! ip -4 -o addr show dev "$iface" 2>/dev/null | grep -q " inet "; then
    fail "interface $iface has no IPv4 address: the rail's IPAM (NV-IPAM pool) gave none"
  else
    ok "interface $iface up with an address"
  fi
done

# Memory registration needs either an unlimited memlock limit or CAP_IPC_LOCK (bit 14 of CapEff).
memlock=$(awk '/^Max locked memory/ {print $4}' "$PROC/self/limits" 2>/dev/null)
capeff=$(awk '/^CapEff:/ {print $2}' "$PROC/self/status" 2>/dev/null)
if [ "$memlock" = unlimited ] || [ $(( 0x${capeff:-0} >> 14 & 1 )) -eq 1 ]; then
  ok "memory can be locked (memlock ${memlock:-?}, IPC_LOCK $(( 0x${capeff:-0} >> 14 & 1 )))"
else
  fail "memlock is ${memlock:-unknown} and IPC_LOCK is missing: RDMA cannot register memory; add IPC_LOCK"
fi

if [ -n "${PREFLIGHT_SHM_BYTES:-}" ]; then
  shm=$(awk '$2 == "/dev/shm" { n = split($4, o, ","); for (i = 1; i <= n; i++) if (o[i] ~ /^size=/) {
          v = substr(o[i], 6); m = 1
          if (v ~ /k$/) m = 1024; else if (v ~ /m$/) m = 1048576; else if (v ~ /g$/) m = 1073741824
          sub(/[kmg]$/, "", v); printf "%.0f\n", v * m } }' "$PROC/mounts" 2>/dev/null | tail -n 1)
  if [ -z "$shm" ]; then
    fail "/dev/shm is not a sized tmpfs: mount a memory-backed emptyDir with a sizeLimit"
  elif [ "$shm" -lt "$PREFLIGHT_SHM_BYTES" ]; then
    fail "/dev/shm is $shm bytes, $PREFLIGHT_SHM_BYTES expected: raise the emptyDir sizeLimit"
  else
    ok "/dev/shm $shm bytes"
  fi
fi

if [ "$failed" -ne 0 ]; then
  echo "preflight: this node or pod is not on the fast path; fix the above (or set preflight: false on the job)"
  exit 1
fi
echo "preflight: all checks passed"
