# shellcheck shell=sh
# A multi-node NVLink pod (gpu.nvlinkDomain): sh -c <this> fastpath-imex <entrypoint...> (operator_v1 builders).
# launch.py loads it: comment lines are dropped, the rest goes into the manifest as it is.
#
# Before NCCL starts, what its MNNVL needs, each named when missing (NVIDIA/nccl@v2.30.7-1 src/mnnvl.cc
# ncclMnnvlCheck; docs troubleshooting: CUDA error 800 without the channel):
# - the IMEX channel the job's ComputeDomain claim injects (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1
#   cmd/compute-domain-kubelet-plugin device_state.go applyComputeDomainChannelConfig: /dev/nvidia-caps-imex-channels);
# - every GPU's fabric registration complete (nvidia-smi -q, Fabric State).
# Exit 3 (the preflight's code): the job fails instead of hanging in NCCL init or running over the network.
DEV=${FASTPATH_DEV:-/dev}
if ! ls "$DEV"/nvidia-caps-imex-channels/channel* >/dev/null 2>&1; then
  echo "fastpath: no IMEX channel in $DEV/nvidia-caps-imex-channels: the pod's ComputeDomain claim gave none" >&2
  exit 3
fi
if command -v nvidia-smi >/dev/null 2>&1; then
  # The State line of each GPU's Fabric section (the sections' own headers are indented the same way).
  states=$(nvidia-smi -q | awk '/^ *Fabric *$/ {f = 1; next} f && /^ *State *:/ {sub(/^[^:]*: */, ""); print; f = 0}' | sort -u)
  case "$states" in
    *"In Progress"*|*"Not Started"*|*Failed*)
      echo "fastpath: GPU fabric registration is not complete ($states): multi-node NVLink is not up on this node" >&2
      exit 3 ;;
  esac
fi
exec "$@"
