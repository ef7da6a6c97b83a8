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
  # Each GPU's Fabric section: NCCL leaves MNNVL off without a word, even when required, when a GPU's fabric state
  # is not Completed or its cluster UUID is zero (NVIDIA/nccl@v2.30.7-1 src/mnnvl.cc ncclMnnvlCheck; nvidia-smi prints
  # N/A for a GPU not in a fabric, and no UUID is zero or N/A), and GFD labels
  # no clique unless the status is Success (NVIDIA/k8s-device-plugin@v0.20.0 internal/lm/imex.go, IsFabricAttached).
  # The section ends at the first line indented no deeper than its header.
  bad=$(nvidia-smi -q | awk '
    /^ *Fabric *$/ { f = 1; match($0, /^ */); at = RLENGTH; next }
    f { match($0, /^ */); if (RLENGTH <= at) f = 0 }
    f && /^ *State *:/ { sub(/^[^:]*: */, ""); if ($0 != "Completed") print "state " $0 }
    f && /^ *Status *:/ { sub(/^[^:]*: */, ""); if ($0 != "Success") print "status " $0 }
    f && /^ *ClusterUUID *:/ { sub(/^[^:]*: */, ""); if ($0 !~ /^[0-9a-fA-F-]+$/ || $0 !~ /[1-9a-fA-F]/) print "cluster UUID " $0 }
  ' | sort -u | tr '\n' ';')
  if [ -n "$bad" ]; then
    echo "fastpath: GPU fabric registration is not complete ($bad): multi-node NVLink is not up on this node" >&2
    exit 3
  fi
fi
exec "$@"
