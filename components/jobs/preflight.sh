#!/bin/sh
# fastpath preflight: runs as an init container of RDMA training pods and fails fast, with the fix, instead of
# letting NCCL fall back to TCP or die mid-job. Expectations come from the environment (set by TrainingJob):
#   PREFLIGHT_GPUS          GPUs the pod must see (/dev/nvidiaN)
#   PREFLIGHT_RDMA_DEVICES  RDMA verbs devices the pod must see (/dev/infiniband/uverbsN)
#   PREFLIGHT_HCAS          HCA names that must exist (/sys/class/infiniband/NAME); empty for SR-IOV VFs
#   PREFLIGHT_LINK_LAYER    link layer port 1 of every HCA in PREFLIGHT_HCAS must have (InfiniBand, Ethernet); the
#                           port must also be ACTIVE (NCCL skips a port that is not, and may fall back to TCP)
#   PREFLIGHT_INTERFACES    secondary interfaces that must be up with an IPv4 address (net1 net2 ...)
#   PREFLIGHT_BOOTSTRAP     on the host network: the node interface NCCL bootstrap and gloo are told to use
#   PREFLIGHT_SHM_BYTES     smallest acceptable /dev/shm
#   PREFLIGHT_ROCE_GIDS     RoCE on a shared port: "net1:mlx5_0 net2:mlx5_1", the pod's address on each interface
#                           must be a GID of that HCA's port (else NCCL cannot pick the pod's own GID)
# Platform facts come from platform.env beside this script (the same ConfigMap), so a platform change reaches the
# pods started next without changing, and so replacing, any job; the environment overrides it (tests):
#   PREFLIGHT_GPUDIRECT     GPUDirect RDMA mode the node must offer (gpu.gpuDirect): `peermem` (a peer-memory
#                           module NCCL detects) or `dmabuf` (the open GPU kernel module on Linux 5.12 or later);
#                           checked in pods with GPUs and RDMA devices. Without it NCCL still runs over the NICs,
#                           through host memory, and nothing else says so
# PREFLIGHT_SYS, PREFLIGHT_DEV and PREFLIGHT_PROC move /sys, /dev and /proc (tests use fake trees).
# It reads /sys and /proc with sh and awk only: no iproute2 or rdma-core in the user's image is assumed.
# Exit 1 with every failed check; the last lines are the pod's termination message (kubectl describe pod).
SYS=${PREFLIGHT_SYS:-/sys}
DEV=${PREFLIGHT_DEV:-/dev}
PROC=${PREFLIGHT_PROC:-/proc}
failed=0
if [ -z "${PREFLIGHT_GPUDIRECT:-}" ] && [ -r "$(dirname "$0")/platform.env" ]; then
  PREFLIGHT_GPUDIRECT=$(sed -n 's/^PREFLIGHT_GPUDIRECT=//p' "$(dirname "$0")/platform.env")
fi

ok() { echo "preflight ok: $*"; }
fail() { echo "preflight FAIL: $*"; failed=1; }

if ! command -v awk >/dev/null 2>&1; then
  echo "preflight FAIL: awk is not in this image, so /proc cannot be read: the checks cannot run (this says" \
       "nothing about the node); use an image with awk, or set preflight: false on the job"
  exit 1
fi

# The IPv4 addresses of an interface, from /proc/net/route (its connected subnets) and /proc/net/fib_trie (the
# local addresses): what `ip -4 addr show dev X` prints, without iproute2.
ipv4_of() {
  awk -v ifc="$1" '
    function dotted(h,  a, i, s) { s = ""; for (i = 7; i >= 1; i -= 2) s = s (s == "" ? "" : ".") strtonum16(substr(h, i, 2)); return s }
    function strtonum16(x,  d, n, i) { n = 0; x = tolower(x); for (i = 1; i <= length(x); i++) { d = index("0123456789abcdef", substr(x, i, 1)) - 1; n = n * 16 + d }; return n }
    function num(ip,  p) { split(ip, p, "."); return ((p[1] * 256 + p[2]) * 256 + p[3]) * 256 + p[4] }
    FNR == 1 { file++ }
    file == 1 && $1 == ifc && $3 == "00000000" { nets++; net[nets] = num(dotted($2)); mask[nets] = num(dotted($8)) }
    file == 2 && $1 == "|--" { last = $2 }
    file == 2 && /\/32 host LOCAL/ { local[last] = 1 }
    END { for (a in local) for (i = 1; i <= nets; i++) {
            m = mask[i]; x = num(a); ok = 1
            # x AND m == net, bit by bit (awk has no bitwise AND in POSIX)
            for (b = 31; b >= 0; b--) { p = 2 ^ b; xb = int(x / p) % 2; mb = int(m / p) % 2; nb = int(net[i] / p) % 2
              if (mb == 1 && xb != nb) { ok = 0; break } }
            if (ok) print a } }
  ' "$PROC/net/route" "$PROC/net/fib_trie" 2>/dev/null | sort -u
}

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

hcas=${PREFLIGHT_HCAS:-}
if [ -n "$hcas" ] && [ "$verbs" -gt 0 ] && [ "$(count "$SYS/class/infiniband/*")" -eq 0 ]; then
  fail "the pod has RDMA devices but sees no HCA in $SYS/class/infiniband: the node's RDMA subsystem is in exclusive network-namespace mode (ib_core netns_mode=0, left by an earlier SR-IOV setup); set it back to shared (rdma system set netns shared) on the node"
  hcas=""  # each HCA would be "not present" for the same reason, burying this one
fi
for hca in $hcas; do
  if [ ! -e "$SYS/class/infiniband/$hca" ]; then
    fail "HCA $hca not present: NCCL_IB_HCA names it; check the host HCA names (ibdev2netdev) in fabric.rails"
    continue
  fi
  ok "HCA $hca"
  [ -n "${PREFLIGHT_LINK_LAYER:-}" ] || continue
  layer=$(cat "$SYS/class/infiniband/$hca/ports/1/link_layer" 2>/dev/null || echo unknown)
  state=$(cat "$SYS/class/infiniband/$hca/ports/1/state" 2>/dev/null || echo unknown)
  if [ "$layer" != "$PREFLIGHT_LINK_LAYER" ]; then
    fail "HCA $hca port 1 is $layer, $PREFLIGHT_LINK_LAYER expected: fabric.kind does not match this NIC (or its firmware LINK_TYPE)"
  elif [ "${state#*: }" != ACTIVE ]; then
    fail "HCA $hca port 1 is ${state#*: }, not ACTIVE: the link is down or (InfiniBand) no subnet manager serves it; NCCL would skip it"
  else
    ok "HCA $hca port 1 $layer ACTIVE"
  fi
done

for iface in ${PREFLIGHT_INTERFACES:-}; do
  state=$(cat "$SYS/class/net/$iface/operstate" 2>/dev/null || echo missing)
  if [ "$state" = missing ]; then
    fail "interface $iface missing: the Multus networks annotation or its NetworkAttachmentDefinition is wrong (on the host network: fabric.rails[].interface names no netdev of this node)"
  elif [ "$state" != up ] && [ "$state" != unknown ]; then
    fail "interface $iface is $state: the rail link is down on this node"
  elif [ ! -r "$PROC/net/route" ] || [ ! -r "$PROC/net/fib_trie" ]; then
    fail "cannot read $PROC/net/route or $PROC/net/fib_trie to find $iface's address (not a verdict on the rail)"
  elif [ -z "$(ipv4_of "$iface")" ]; then
    fail "interface $iface has no IPv4 address: the rail's IPAM (NV-IPAM pool) gave none"
  else
    ok "interface $iface up with $(ipv4_of "$iface" | tr '\n' ' ')"
  fi
done

if [ -n "${PREFLIGHT_BOOTSTRAP:-}" ]; then
  iface=$PREFLIGHT_BOOTSTRAP
  state=$(cat "$SYS/class/net/$iface/operstate" 2>/dev/null || echo missing)
  if [ "$state" = missing ]; then
    fail "node interface $iface missing: NCCL_SOCKET_IFNAME names it (fabric.podInterface); on the host network it must be the GPU nodes' primary interface"
  elif [ "$state" != up ] && [ "$state" != unknown ]; then
    fail "node interface $iface is $state: NCCL bootstrap and gloo cannot use it (fabric.podInterface)"
  elif [ -z "$(ipv4_of "$iface")" ]; then
    fail "node interface $iface has no IPv4 address: NCCL bootstrap and gloo cannot use it (fabric.podInterface)"
  else
    ok "bootstrap interface $iface with $(ipv4_of "$iface" | tr '\n' ' ')"
  fi
fi

for pair in ${PREFLIGHT_ROCE_GIDS:-}; do
  iface=${pair%%:*}; hca=${pair#*:}
  for addr in $(ipv4_of "$iface"); do
    # An IPv4 RoCEv2 GID is ::ffff:a.b.c.d, written 0000:...:ffff:aabb:ccdd in sysfs.
    want=$(echo "$addr" | awk -F. '{ printf "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x\n", $1, $2, $3, $4 }')
    if cat "$SYS/class/infiniband/$hca/ports/"*/gids/* 2>/dev/null | grep -qx "$want"; then
      ok "$hca has a GID for $iface's $addr"
    else
      fail "$hca has no GID for $iface's $addr: NCCL would pick another address's GID on the shared port; the macvlan is not on $hca's port (fabric.rails[].interface) or the GID table is full"
    fi
  done
done

# GPUDirect RDMA. NVIDIA/nccl@v2.30.7-1:src/transport/net_ib/gdr.cc ncclIbGdrSupport: peer memory is there when
# one of three sysfs files exists; src/init.cc dmaBufSupported: DMA-BUF needs the GPU to report
# CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, which only the open kernel module does, and gdr.cc ncclIbDmaBufSupport
# needs ibv_reg_dmabuf_mr, which the kernel's RDMA core has from Linux 5.12 (ib_umem_dmabuf). Either missing: NCCL
# moves every byte through host memory (NET/IB without "GDRDMA"), slower, and the job still "works".
[ "${PREFLIGHT_GPUS:-0}" -gt 0 ] && [ "${PREFLIGHT_RDMA_DEVICES:-0}" -gt 0 ] || PREFLIGHT_GPUDIRECT=""
case "${PREFLIGHT_GPUDIRECT:-}" in
  peermem)
    found=""
    for f in "$SYS/module/nvidia_peermem/version" "$SYS/kernel/mm/memory_peers/nv_mem/version" \
             "$SYS/kernel/mm/memory_peers/nv_mem_nc/version"; do
      [ -e "$f" ] && found=${f#"$SYS"/} && break
    done
    if [ -n "$found" ]; then
      ok "GPUDirect RDMA: peer memory module loaded ($found)"
    else
      fail "GPUDirect RDMA: no peer memory module on this node (/sys/module/nvidia_peermem): NCCL would copy through host memory; the GPU Operator's driver.rdma.enabled (gpu.gpuDirect peermem) loads it, or use gpu.gpuDirect dmabuf with the open kernel module"
    fi
    ;;
  dmabuf)
    driver=$(head -n 1 "$PROC/driver/nvidia/version" 2>/dev/null)
    kernel=$(cat "$PROC/sys/kernel/osrelease" 2>/dev/null)
    major=$(echo "$kernel" | awk -F. '{ print $1 + 0 }'); minor=$(echo "$kernel" | awk -F. '{ print $2 + 0 }')
    if [ -z "$driver" ]; then
      fail "GPUDirect RDMA: cannot read $PROC/driver/nvidia/version to tell the GPU kernel module (not a verdict on the node)"
    elif ! echo "$driver" | grep -q "Open Kernel Module"; then
      fail "GPUDirect RDMA: the node runs the proprietary GPU kernel module, which offers no DMA-BUF: NCCL would copy through host memory; install the open kernel module (GPU Operator driver.kernelModuleType open) or use gpu.gpuDirect peermem"
    elif [ -z "$kernel" ]; then
      fail "GPUDirect RDMA: cannot read $PROC/sys/kernel/osrelease to tell the kernel (not a verdict on the node)"
    elif [ "$major" -lt 5 ] || { [ "$major" -eq 5 ] && [ "$minor" -lt 12 ]; }; then
      fail "GPUDirect RDMA: kernel $kernel has no DMA-BUF import in its RDMA core (Linux 5.12 or later): NCCL would copy through host memory; upgrade the node's kernel or use gpu.gpuDirect peermem"
    else
      ok "GPUDirect RDMA: open GPU kernel module, kernel $kernel (DMA-BUF)"
    fi
    ;;
  "") ;;
  *) fail "PREFLIGHT_GPUDIRECT is ${PREFLIGHT_GPUDIRECT}: peermem or dmabuf expected (a fastpath bug)" ;;
esac

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
