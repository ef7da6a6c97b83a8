# shellcheck shell=sh
# The fabric acceptance's pairwise stage: every rail of every node measured alone against a partner node, so that a
# rail below the floor is named by node and rail (python -m tools.pairwise reads the marker lines). pairwise.py
# loads it: comment lines are dropped, __FLOOR__, __TIMEOUT__, __LAUNCHER__ and __COMMAND__ become the plan's values
# and __PLAN__ its steps: per round of disjoint pairs, one `start` per pair, `wait`, one `report` per pair.
#
# One measurement is nccl-tests' sendrecv between two nodes, one GPU each, over one rail: `env` on the ranks'
# command line sets NCCL_IB_HCA to that rail's HCA alone (`=`: an exact name, or mlx5_1 would take mlx5_10 and
# mlx5_11 too) and CUDA_VISIBLE_DEVICES to the GPU nearest it, over whatever mpirun forwards with -x.
floor=__FLOOR__
limit=__TIMEOUT__
dir=${TMPDIR:-/tmp}/fastpath-pairwise.$$
rm -rf "$dir" && mkdir -p "$dir" || exit 1
trap 'rm -rf "$dir"' EXIT
trap 'exit 143' TERM INT
measured=0
low=0
failed=0

# start ID HCA GPU HOST_A HOST_B: one measurement in the background, its output in $dir/ID.log and its exit status in
# $dir/ID.rc. `timeout` (coreutils, busybox) ends a pair that hangs (a port down on one side: NCCL waits to connect).
start() {
    id=$1 hca=$2 gpu=$3
    set -- __LAUNCHER__ -np 2 -H "$4:1,$5:1" env NCCL_IB_HCA="=$hca" CUDA_VISIBLE_DEVICES="$gpu" __COMMAND__
    if command -v timeout >/dev/null 2>&1; then
        set -- timeout -k 10 "$limit" "$@"
    fi
    (
        "$@" >"$dir/$id.log" 2>&1
        echo "$?" >"$dir/$id.rc"
    ) &
}

# report ID RAIL HOST_A HOST_B: the marker line of a finished measurement, `fastpath-pairwise: RAIL A B GBPS` or
# `... FAILED` (mpirun failed, or printed no bandwidth). nccl-tests ends with `# Avg bus bandwidth    : %g` (GB/s,
# the mean over the sizes run: here one). The output of a pair that failed or is under the floor follows its marker
# line, indented (its last 60 lines), for the cause: NCCL's INFO lines name the transport it fell back to.
report() {
    rc=$(cat "$dir/$1.rc" 2>/dev/null) || rc=
    bw=$(sed -n 's/^.*# Avg bus bandwidth *: *\([0-9][0-9.eE+-]*\).*$/\1/p' "$dir/$1.log" 2>/dev/null | tail -n 1)
    measured=$((measured + 1))
    if [ "$rc" != 0 ] || [ -z "$bw" ]; then
        failed=$((failed + 1))
        echo "fastpath-pairwise: $2 $3 $4 FAILED"
        [ "$rc" = 124 ] && echo "    (no result in $limit s: timed out)"
    else
        bw=$(LC_ALL=C awk -v v="$bw" 'BEGIN { printf "%.2f", v + 0 }')
        echo "fastpath-pairwise: $2 $3 $4 $bw"
        LC_ALL=C awk -v v="$bw" -v f="$floor" 'BEGIN { exit !(v + 0 < f + 0) }' || return 0
        low=$((low + 1))
    fi
    tail -n 60 "$dir/$1.log" 2>/dev/null | sed 's/^/    /'
}

__PLAN__
echo "fastpath-pairwise: end $measured measurements, $low below $floor GB/s, $failed failed"
[ "$low" -eq 0 ] && [ "$failed" -eq 0 ]
