#!/bin/bash
# bench-sparse.sh: sparse requests in a group well under its limit
# (bpf/include/pacing.h, xfer_plan; docs/design.md, "A transfer's first
# window from its group's credit"), hbm against htb (rate = ceil on the
# sender's veth) and no limit. sockperf pings SIZE-byte messages (the reply
# as large) MPS times a second over TCP from the group; its round trip P50
# and P99 in us, each the median of RUNS runs (min-max), the limiters taking
# turns.
#
# Usage: scripts/bench-sparse.sh [-b HBM] [-R RATE] [-m "SIZE..."] [-r MPS]
#        [-c CC] [-l "hbm htb none"] [-n RUNS] [-T SECONDS]
# CC: the client's congestion control (its route's congctl). Defaults: cubic, 100mbit, sizes 1024 10240 30720 61440, 200 a second, 3 runs of
# 5 s. Needs root, ip, tc, sockperf. Hosts are network namespaces hbmsp-c
# and hbmsp-s (198.18.10.1 and .2), the group /hbm-bench-sparse; all
# removed at the end, also on failure or Ctrl-C.
set -u
HBM=./bin/hbm CC=cubic RATE=100mbit SIZES="1024 10240 30720 61440" MPS=200 LIMITERS="hbm htb none" RUNS=3 T=5
while getopts "b:R:m:r:c:l:n:T:" o; do
	case $o in
	b) HBM=$OPTARG ;; R) RATE=$OPTARG ;; m) SIZES=$OPTARG ;; r) MPS=$OPTARG ;; c) CC=$OPTARG ;;
	l) LIMITERS=$OPTARG ;; n) RUNS=$OPTARG ;; T) T=$OPTARG ;;
	*) sed -n '2,17p' "$0"; exit 2 ;;
	esac
done
. "$(dirname "$0")/lib/nspair.sh"
nspair_require bench-sparse ip tc sockperf "$HBM" || exit 1
nspair_bps "$RATE" >/dev/null || exit 2
CG=$(nspair_cgroot)
[ -n "$CG" ] || { echo "bench-sparse: no cgroup2 mount" >&2; exit 1; }
GROUP=/hbm-bench-sparse C=hbmsp-c S=hbmsp-s
WORK=$(mktemp -d /tmp/hbm-bench-sparse.XXXXXX)

cleanup() { nspair_cleanup "$HBM" "$CG" $C $S "$GROUP"; }
trap 'cleanup; rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM

run() { # LIMITER SIZE: one line "p50 p99" (us)
	cleanup
	nspair_up $C $S sp0 198.18.10 && ip -n $C route replace 198.18.10.0/24 dev sp0 congctl "$CC" &&
		mkdir -p "$CG$GROUP" || return 1
	ip netns exec $S setsid sockperf server --tcp -i 198.18.10.2 -p 11111 </dev/null >/dev/null 2>&1 &
	sleep 0.5
	case $1 in
	hbm) "$HBM" set "$GROUP" --egress "$RATE" >/dev/null || return 1 ;;
	htb) ip netns exec $C tc qdisc add dev sp0 root handle 1: htb default 1 &&
		ip netns exec $C tc class add dev sp0 parent 1: classid 1:1 htb rate "$RATE" ceil "$RATE" 2>/dev/null || return 1 ;;
	none) ;;
	*) echo "bench-sparse: limiter $1: hbm, htb or none" >&2; return 1 ;;
	esac
	bash -c "echo \$\$ >$CG$GROUP/cgroup.procs && exec ip netns exec $C sockperf ping-pong --tcp -i 198.18.10.2 -p 11111 -m $2 -t $T --mps $MPS --full-rtt" \
		>"$WORK/sp.log" 2>&1 || { cat "$WORK/sp.log" >&2; return 1; }
	awk '/percentile 50.000/ {p50 = $NF} /percentile 99.000/ {p99 = $NF}
		END { if (p50 == "" || p99 == "") exit 1; printf "%.0f %.0f\n", p50, p99 }' "$WORK/sp.log"
}

echo "# $RATE, $CC, sockperf TCP ping-pong at $MPS a second, ${T}s; round trip P50 / P99 (us), medians of $RUNS (min-max)"
for m in $SIZES; do
	declare -A rows=()
	for r in $(seq "$RUNS"); do
		for l in $LIMITERS; do
			row=$(run "$l" "$m") || { echo "bench-sparse: $l $m B run $r failed" >&2; exit 1; }
			rows[$l]+="$row"$'\n'
		done
	done
	for l in $LIMITERS; do
		IFS=$'\t' read -r p50 p99 < <(printf '%s' "${rows[$l]}" | nspair_medians)
		printf "%6s B %-4s P50 %s  P99 %s\n" "$m" "$l" "$p50" "$p99"
	done
	unset rows
done
