#!/bin/bash
# bench-pps.sh: the cost per packet of a limit never reached, as packet rate
# (issue 23's target: 64-byte UDP at 0.95 of the unlimited rate). sockperf
# sends SIZE-byte UDP datagrams as fast as it can from SOCKETS senders in a
# group to a receiver in another namespace, each sender on CPU (i-1) mod
# NCPU and the receiver on the last CPU (-P: no pinning). Limiters: hbm (the
# group limited to RATE), hook (a cgroup_skb egress program that only
# returns "pass", attached to the group: what any such program costs, the
# floor under HBM's), htb (a class at RATE on the sender's veth) and none.
# Each line: the limiter's packet rate and its ratio to none's in the same
# round, medians of RUNS rounds (min-max), the limiters taking turns.
#
# Usage: scripts/bench-pps.sh [-b HBM] [-R RATE] [-m SIZE] [-s SOCKETS]
#        [-l "hbm hook htb none"] [-n RUNS] [-T SECONDS] [-P]
# Defaults: 40gbit, 64 B, 1 socket, 5 runs of 4 s. Needs root, ip, tc,
# sockperf, clang and bpftool (for hook). Hosts are network namespaces
# hbmpp-c and hbmpp-s (198.18.11.1 and .2), the group /hbm-bench-pps; all
# removed at the end, also on failure or Ctrl-C.
set -u
HBM=./bin/hbm RATE=40gbit SIZE=64 SOCKETS=1 LIMITERS="hbm hook htb none" RUNS=5 T=4 PIN=1
while getopts "b:R:m:s:l:n:T:P" o; do
	case $o in
	b) HBM=$OPTARG ;; R) RATE=$OPTARG ;; m) SIZE=$OPTARG ;; s) SOCKETS=$OPTARG ;;
	l) LIMITERS=$OPTARG ;; n) RUNS=$OPTARG ;; T) T=$OPTARG ;; P) PIN=0 ;;
	*) sed -n '2,18p' "$0"; exit 2 ;;
	esac
done
. "$(dirname "$0")/lib/nspair.sh"
nspair_require bench-pps ip tc sockperf taskset "$HBM" || exit 1
for l in $LIMITERS; do
	case $l in hbm | hook | htb | none) ;; *) echo "bench-pps: limiter $l: hbm, hook, htb or none" >&2; exit 2 ;; esac
done
case " $LIMITERS " in *" none "*) ;; *) echo "bench-pps: the limiters must include none (the ratios' base)" >&2; exit 2 ;; esac
case " $LIMITERS " in *" hook "*)
	for t in clang bpftool; do command -v $t >/dev/null || { echo "bench-pps: $t not found (needed by hook)" >&2; exit 1; }; done ;;
esac
[[ $SOCKETS =~ ^[1-9][0-9]?$ && $RUNS =~ ^[1-9][0-9]?$ && $T =~ ^[1-9][0-9]*$ && $SIZE =~ ^[1-9][0-9]*$ ]] ||
	{ echo "bench-pps: -s 1-99, -n 1-99, -T and -m positive integers" >&2; exit 2; }
nspair_bps "$RATE" >/dev/null || exit 2
CG=$(nspair_cgroot)
[ -n "$CG" ] || { echo "bench-pps: no cgroup2 mount" >&2; exit 1; }
BPFFS=$(awk '$9 == "bpf" {print $5; exit}' /proc/self/mountinfo)
GROUP=/hbm-bench-pps C=hbmpp-c S=hbmpp-s DEV=pp0
WORK=$(mktemp -d /tmp/hbm-bench-pps.XXXXXX)
PIN_PROG=${BPFFS:-/sys/fs/bpf}/hbm-bench-pps-hook
NCPU=$(nproc)

cleanup() {
	[ -e "$PIN_PROG" ] && { bpftool cgroup detach "$CG$GROUP" egress pinned "$PIN_PROG" 2>/dev/null; rm -f "$PIN_PROG"; }
	nspair_cleanup "$HBM" "$CG" $C $S "$GROUP"
}
trap 'cleanup; rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM

if [[ " $LIMITERS " == *" hook "* ]]; then
	cat >"$WORK/hook.bpf.c" <<-'EOF'
	#define SEC(n) __attribute__((section(n), used))
	SEC("cgroup_skb/egress") int hbm_bench_hook(void *skb) { return 1; }
	char LICENSE[] SEC("license") = "GPL";
	EOF
	clang -O2 -target bpf -c "$WORK/hook.bpf.c" -o "$WORK/hook.o" || { echo "bench-pps: clang failed" >&2; exit 1; }
fi

cpu() { # I: the CPU list for sender I (1-based), or the receiver (0)
	if [ "$PIN" = 0 ]; then echo "0-$((NCPU - 1))"
	elif [ "$1" = 0 ]; then echo $((NCPU - 1))
	else echo $(( ($1 - 1) % NCPU )); fi
}

run() { # LIMITER: one line, the datagrams a second all senders sent
	local i pids=""
	cleanup
	nspair_up $C $S $DEV 198.18.11 && mkdir -p "$CG$GROUP" || return 1
	case $1 in
	hbm) "$HBM" set "$GROUP" --egress "$RATE" >/dev/null || return 1 ;;
	hook) bpftool prog load "$WORK/hook.o" "$PIN_PROG" type cgroup/skb &&
		bpftool cgroup attach "$CG$GROUP" egress pinned "$PIN_PROG" || return 1 ;;
	htb) ip netns exec $C tc qdisc add dev $DEV root handle 1: htb default 1 &&
		ip netns exec $C tc class add dev $DEV parent 1: classid 1:1 htb rate "$RATE" ceil "$RATE" 2>/dev/null || return 1 ;;
	none) ;;
	*) echo "bench-pps: limiter $1: hbm, hook, htb or none" >&2; return 1 ;;
	esac
	ip netns exec $S setsid taskset -c "$(cpu 0)" sockperf server -i 198.18.11.2 -p 11111 </dev/null >/dev/null 2>&1 &
	sleep 0.5
	for i in $(seq "$SOCKETS"); do
		bash -c "echo \$\$ >$CG$GROUP/cgroup.procs && exec ip netns exec $C taskset -c $(cpu "$i") sockperf throughput -i 198.18.11.2 -p 11111 -m $SIZE -t $T" \
			>"$WORK/tp.$i.log" 2>&1 </dev/null &
		pids+=" $!"
	done
	# shellcheck disable=SC2086
	wait $pids || { cat "$WORK"/tp.*.log >&2; return 1; }
	for i in $(seq "$SOCKETS"); do
		awk '/Message Rate is/ { for (k = 1; k <= NF; k++) if ($k == "is") print $(k + 1) }' "$WORK/tp.$i.log"
	done | awk '{ t += $1; n++ } END { if (n != '"$SOCKETS"' || t == 0) exit 1; printf "%d\n", t }'
}

echo "# $SIZE-byte UDP, $SOCKETS socket(s), limit $RATE, ${T}s runs; datagrams/s and ratio to none, medians of $RUNS (min-max)"
declare -A rows=() rate=()
for r in $(seq "$RUNS"); do
	for l in $LIMITERS; do
		rate[$l]=$(run "$l") || { echo "bench-pps: $l run $r failed" >&2; exit 1; }
	done
	for l in $LIMITERS; do
		rows[$l]+="${rate[$l]} $(awk -v a="${rate[$l]}" -v b="${rate[none]}" 'BEGIN { printf "%.3f", a / b }')"$'\n'
	done
done
for l in $LIMITERS; do
	IFS=$'\t' read -r pps ratio < <(printf '%s' "${rows[$l]}" | nspair_medians)
	printf "%-4s %s/s  of none %s\n" "$l" "$pps" "$ratio"
done
