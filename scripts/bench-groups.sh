#!/bin/bash
# bench-groups.sh: the cost per packet of a deep, wide hierarchy of limits
# (issue 27's target: with 10,000 groups in a hierarchy 4 deep, within 20%
# of a flat limit's). Two senders of 64-byte UDP datagrams in one leaf group
# T/a/b/c of a tree with FANOUT children per group, 4 levels
# (1 + F + F^2 + F^3 groups: 11,155 for F = 22), under limits never
# reached, so what is measured is the cost of deciding, not of holding:
#   none       no limit anywhere (the programs are not attached)
#   flat       only the leaf limited (40gbit)
#   path       the 4 groups on the leaf's path limited (40gbit each)
#   tree       every group of the tree limited (40gbit each)
#   tree-ceil  every group of the tree limited with a guarantee and a
#              ceiling (borrowing: each group guaranteed 1/F of its
#              parent's guarantee, T 40gbit, all up to 40gbit)
# The tree's limits are declared to `hbm daemon` by globs (the operator's
# path for thousands of groups); the time of its first pass is reported.
# Per mode: the datagrams sent per second (the workload's count) and the
# egress program's run time per packet (bpf_stats: run_time_ns/run_cnt over
# the window). Medians of RUNS runs with min-max.
#
# Usage: scripts/bench-groups.sh [-b HBM] [-F FANOUT] [-n RUNS] [-T SECONDS]
#        [-m "none flat path tree tree-ceil"]
# Needs root, ip, bpftool, python3. Hosts are network namespaces hbmgr-c
# and hbmgr-s (198.18.9.1 and .2), the tree /hbm-bench-groups; all removed
# at the end, also on failure or Ctrl-C (the daemon's limits by declaring
# nothing and reloading it, as an operator would).
set -u
HBM=./bin/hbm F=22 RUNS=3 T=5 MODES="none flat path tree tree-ceil"
while getopts "b:F:n:T:m:" o; do
	case $o in
	b) HBM=$OPTARG ;; F) F=$OPTARG ;; n) RUNS=$OPTARG ;; T) T=$OPTARG ;; m) MODES=$OPTARG ;;
	*) sed -n '2,28p' "$0"; exit 2 ;;
	esac
done
. "$(dirname "$0")/lib/nspair.sh"
nspair_require bench-groups ip bpftool python3 "$HBM" || exit 1
case $F in '' | *[!0-9]*) echo "bench-groups: -F $F: a number" >&2; exit 2 ;; esac
[ "$F" -ge 1 ] && [ "$F" -le 40 ] || { echo "bench-groups: -F $F: 1 to 40" >&2; exit 2; }
HBM=$(realpath "$HBM")
CG=$(nspair_cgroot)
[ -n "$CG" ] || { echo "bench-groups: no cgroup2 mount" >&2; exit 1; }
TOP=/hbm-bench-groups C=hbmgr-c S=hbmgr-s
LEAF=$TOP/g0/g0/g0
WORK=$(mktemp -d /tmp/hbm-bench-groups.XXXXXX)
DAEMON=

# ours: how many limits `hbm show` lists under $TOP (others' limits, if the
# machine has any, are not counted and never touched).
ours() {
	"$HBM" show --json 2>/dev/null | python3 -c '
import json, sys
top = sys.argv[1]
print(sum(1 for l in (json.load(sys.stdin) or []) if l["cgroup"] == top or l["cgroup"].startswith(top + "/")))' "$TOP" 2>/dev/null
}

# undeclare: the daemon removes what it applied (declare nothing, reload),
# then stops.
undeclare() {
	[ -n "$DAEMON" ] || return 0
	echo "limits: []" >"$WORK/hbm.yaml"
	kill -HUP "$DAEMON" 2>/dev/null
	local i
	for i in $(seq 600); do
		[ "$(ours)" = 0 ] && break
		sleep 0.5
	done
	kill "$DAEMON" 2>/dev/null
	wait "$DAEMON" 2>/dev/null
	DAEMON=
}

cleanup() {
	undeclare
	"$HBM" unset "$LEAF" >/dev/null 2>&1
	for g in $TOP/g0/g0 $TOP/g0 $TOP; do "$HBM" unset "$g" >/dev/null 2>&1; done
	nspair_down $C $S
	[ -d "$CG$TOP" ] && find "$CG$TOP" -depth -type d -exec rmdir {} + 2>/dev/null
	return 0
}
trap 'cleanup; rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM

tree() { # the directories, F per level, 4 levels
	python3 - "$CG$TOP" "$F" <<'EOF'
import os, sys
root, f = sys.argv[1], int(sys.argv[2])
os.makedirs(root, exist_ok=True)
for a in range(f):
    for b in range(f):
        for c in range(f):
            os.makedirs(f"{root}/g{a}/g{b}/g{c}", exist_ok=True)
EOF
}

# declare_tree MODE: the daemon applies the tree's limits; APPLIED is the
# seconds from its start to every limit in force. Run in this shell (not a
# subshell): cleanup needs DAEMON.
declare_tree() {
	local g1 g2 g3 ceil=
	if [ "$1" = tree-ceil ]; then
		g1=$(python3 -c "print(int(40e9/$F))") g2=$(python3 -c "print(int(40e9/$F/$F))") g3=$(python3 -c "print(int(40e9/$F/$F/$F))")
		ceil="    egress_ceil: 40gbit"
	else
		g1=40000000000 g2=$g1 g3=$g1
	fi
	cat >"$WORK/hbm.yaml" <<EOF
limits:
  - cgroup: $TOP
    egress: 40gbit
  - glob: $TOP/*
    egress: ${g1}bit
$ceil
    max_groups: 65536
  - glob: $TOP/*/*
    egress: ${g2}bit
$ceil
    max_groups: 65536
  - glob: $TOP/*/*/*
    egress: ${g3}bit
$ceil
    max_groups: 65536
EOF
	sed -i '/^$/d' "$WORK/hbm.yaml"
	local want=$((1 + F + F * F + F * F * F)) t0 n i
	t0=$(date +%s.%N)
	# Its own session, and no descriptor but the log: a lock file held
	# by whoever runs this script (flock) must not outlive the script.
	setsid "$HBM" daemon --config "$WORK/hbm.yaml" --metrics 127.0.0.1:0 >"$WORK/daemon.log" 2>&1 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&- </dev/null &
	DAEMON=$!
	for i in $(seq 1200); do
		n=$(ours)
		[ "$n" = "$want" ] && { APPLIED=$(python3 -c "print('%.1f' % ($(date +%s.%N) - $t0))"); return 0; }
		kill -0 "$DAEMON" 2>/dev/null || break
		sleep 0.5
	done
	echo "bench-groups: the daemon applied ${n:-0} of $want limits; its log:" >&2
	tail -5 "$WORK/daemon.log" >&2
	return 1
}

limit() { # MODE
	case $1 in
	none) ;;
	flat) "$HBM" set "$LEAF" --egress 40gbit >/dev/null ;;
	path) for g in $TOP $TOP/g0 $TOP/g0/g0 $LEAF; do "$HBM" set "$g" --egress 40gbit >/dev/null || return 1; done ;;
	tree | tree-ceil) declare_tree "$1" || return 1
		echo "$1: the daemon put $((1 + F + F * F + F * F * F)) limits in force in $APPLIED s" ;;
	*) echo "bench-groups: mode $1: none, flat, path, tree or tree-ceil" >&2; return 1 ;;
	esac
}

unlimit() { # MODE
	case $1 in
	flat) "$HBM" unset "$LEAF" >/dev/null ;;
	path) for g in $LEAF $TOP/g0/g0 $TOP/g0 $TOP; do "$HBM" unset "$g" >/dev/null; done ;;
	tree | tree-ceil) undeclare ;;
	esac
	return 0
}

# progstats: "run_time_ns run_cnt" of the egress programs attached on the
# leaf's path (so no other program of the same name, e.g. another pin
# directory's data plane, is counted).
progstats() {
	local ids= g
	for g in $TOP $TOP/g0 $TOP/g0/g0 $LEAF; do
		ids="$ids $(bpftool cgroup show "$CG$g" --json 2>/dev/null | python3 -c '
import json, sys
try:
    print(" ".join(str(p["id"]) for p in json.load(sys.stdin) if p.get("attach_type") == "cgroup_inet_egress"))
except ValueError:
    pass')"
	done
	bpftool prog show --json 2>/dev/null | python3 -c '
import json, sys
ids = set(int(i) for i in sys.argv[1:])
t = n = 0
for p in json.load(sys.stdin):
    if p["id"] in ids:
        t += p.get("run_time_ns", 0); n += p.get("run_cnt", 0)
print(t, n)' $ids
}

run() { # MODE: one line "pps ns_per_packet"
	local s0 s1
	s0=$(progstats)
	bash -c "echo \$\$ >$CG$LEAF/cgroup.procs && exec ip netns exec $C $HBM workload run --connect 198.18.9.2:5201 --streams 0 --rpc 0 --udp 2 --udp-size 64 --udp-rate 20gbit --warmup 1s --duration ${T}s --json" >"$WORK/run.json" 2>"$WORK/run.err" ||
		{ echo "workload: $(tail -2 "$WORK/run.err")" >&2; return 1; }
	s1=$(progstats)
	python3 - "$WORK/run.json" "$T" "$s0" "$s1" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
t0, n0 = map(int, sys.argv[3].split()); t1, n1 = map(int, sys.argv[4].split())
pps = r.get("udp_sent_bytes", 0) / 64 / float(sys.argv[2])
ns = (t1 - t0) / (n1 - n0) if n1 > n0 else 0
print("%.0f %.0f" % (pps, ns))
EOF
}

cleanup
nspair_up $C $S gr0 198.18.9 || { echo "bench-groups: lab" >&2; exit 1; }
ip netns exec $S setsid "$HBM" workload serve --listen 198.18.9.2:5201 >/dev/null 2>&1 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&- </dev/null &
tree || exit 1
sysctl -q -w kernel.bpf_stats_enabled=1
sleep 0.5
echo "# 2 x 64-byte UDP senders in $LEAF; tree of $((1 + F + F * F + F * F * F)) groups (fanout $F, 4 levels); ${T}s windows, $RUNS runs"
for m in $MODES; do
	limit "$m" || { echo "bench-groups: $m: limits not set" >&2; exit 1; }
	rows=()
	for r in $(seq "$RUNS"); do
		row=$(run "$m") || { echo "bench-groups: $m run $r failed" >&2; exit 1; }
		echo "$m run $r: $row"
		rows+=("$row")
	done
	unlimit "$m"
	IFS=$'\t' read -r dps ns < <(printf '%s\n' "${rows[@]}" | nspair_medians)
	echo "MEDIAN $m: $dps datagrams/s, egress program $ns ns a packet"
done
sysctl -q -w kernel.bpf_stats_enabled=0
