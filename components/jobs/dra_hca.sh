# shellcheck shell=sh
# A `dra` pod with part of a node's GPUs: sh -c <this> fastpath-hca <entrypoint...> (operator_v1.pytorch_job).
# launch.py loads it: comment lines are dropped, the rest goes into the manifest as it is.
#
# Its claim got one rail NIC per GPU, each on that GPU's PCIe root (components/fabric/dra.py), and dranet moved each
# NIC's netdev into this pod's network namespace (kubernetes-sigs/dranet@v1.4.0 pkg/driver/nri_hooks.go
# runPodSandbox); which HCA (mlx5_N) each is, dranet publishes nowhere for a NIC with a netdev, so it is read
# here: the infiniband/ entry under each netdev's PCI device. NCCL_IB_HCA then names exactly those, and NCCL never
# tries an HCA of the host's whose verbs device this pod was not given.
#
# It also checks what the claim promised: as many NICs as GPUs, and every GPU on the PCIe root of one of them
# (the root bus is the path element under /sys/devices, as Kubernetes' pcieRoot attribute is). Exit 3 (the
# preflight's code) on a mismatch: the job fails instead of training across the PCIe fabric.
SYS=${FASTPATH_SYS:-/sys}
for tool in sed grep tr; do
  command -v "$tool" >/dev/null 2>&1 || { echo "fastpath: $tool is missing from this image: the claim cannot be read" >&2; exit 3; }
done
hcas=""
roots=""
for dev in "$SYS"/class/net/*/device/infiniband/*; do
  [ -e "$dev" ] || continue
  hca=${dev##*/}
  case ",$hcas," in *",$hca,"*) continue ;; esac
  hcas="${hcas:+$hcas,}$hca"
  root=$(cd "${dev%/infiniband/*}" && pwd -P | sed -n 's#.*/devices/\(pci[^/]*\)/.*#\1#p')
  roots="$roots $root"
done
if [ -z "$hcas" ]; then
  echo "fastpath: no RDMA NIC in this pod: its claim ($FASTPATH_CLAIM_NICS NICs) put none here" >&2
  exit 3
fi
count=$(echo "$hcas" | tr ',' '\n' | grep -c .)
if [ "$count" -ne "${FASTPATH_CLAIM_NICS:-$count}" ]; then
  echo "fastpath: $count RDMA NICs ($hcas), the claim asked for $FASTPATH_CLAIM_NICS" >&2
  exit 3
fi
if command -v nvidia-smi >/dev/null 2>&1; then
  for bus in $(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader); do
    addr=$(echo "$bus" | tr 'A-F' 'a-f' | sed 's/^0000\(....:\)/\1/')
    gpu_root=$(cd "$SYS/bus/pci/devices/$addr" 2>/dev/null && pwd -P | sed -n 's#.*/devices/\(pci[^/]*\)/.*#\1#p')
    if [ -z "$gpu_root" ]; then
      echo "fastpath: GPU $bus: its PCIe root cannot be read under $SYS/bus/pci/devices" >&2; exit 3
    fi
    case " $roots " in
      *" $gpu_root "*) ;;
      *) echo "fastpath: GPU $bus (PCIe root ${gpu_root:-unknown}) has no NIC of this pod on its root ($roots)" >&2; exit 3 ;;
    esac
  done
fi
NCCL_IB_HCA="=$hcas"
# The preflight then checks these HCAs' ports (active, link layer) as it does a whole node's.
PREFLIGHT_HCAS=$(echo "$hcas" | tr ',' ' ')
export NCCL_IB_HCA PREFLIGHT_HCAS
exec "$@"
