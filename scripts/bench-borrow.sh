#!/bin/bash
# bench-borrow.sh: borrowing between two groups under a limited parent
# (bpf/include/lend.h; docs/design.md, "Borrowing"), hbm against htb's
# rate/ceil on the senders' interface. Group a runs alone for T seconds,
# then b joins for T seconds; iperf3 -P STREAMS each, one congestion
# control. Measured from a capture on the receiver (frames per destination
# port, 10 ms windows): a alone, as a share of the link; a and b together,
# each as a share of its guarantee; and how long after b's first data b
# takes to reach 0.9 of its guarantee (three 10 ms windows in a row).
#
# Usage: scripts/bench-borrow.sh [-b HBM] [-L LINK] [-A RATE] [-B RATE]
#        [-P STREAMS] [-c CC] [-p "PRIO_A PRIO_B"] [-l "hbm htb"] [-n RUNS]
#        [-T SECONDS]
# PRIO: latency, normal or batch (hbm set --priority; htb class prio 0, 3, 7).
# Defaults: link 1gbit, a 300mbit, b 700mbit, both up to the link, 4 cubic
# streams each, 3 runs of 2 x 3 s. Needs root, ip, tc, iperf3, tcpdump,
# python3. Hosts are network namespaces hbmbw-c and hbmbw-s (198.18.8.1
# and .2), the groups /hbm-bench-borrow/p/{a,b}; all removed at the end,
# also on failure or Ctrl-C.
set -u
HBM=./bin/hbm LINK=1gbit GA=300mbit GB=700mbit P=4 CC=cubic LIMITERS="hbm htb" RUNS=3 T=3 PRIOS="normal normal"
while getopts "b:L:A:B:P:c:p:l:n:T:" o; do
	case $o in
	b) HBM=$OPTARG ;; L) LINK=$OPTARG ;; A) GA=$OPTARG ;; B) GB=$OPTARG ;; P) P=$OPTARG ;;
	c) CC=$OPTARG ;; p) PRIOS=$OPTARG ;; l) LIMITERS=$OPTARG ;; n) RUNS=$OPTARG ;; T) T=$OPTARG ;;
	*) sed -n '2,20p' "$0"; exit 2 ;;
	esac
done
. "$(dirname "$0")/lib/nspair.sh"
nspair_require bench-borrow ip tc iperf3 tcpdump python3 "$HBM" || exit 1
LBPS=$(nspair_bps "$LINK") && ABPS=$(nspair_bps "$GA") && BBPS=$(nspair_bps "$GB") || exit 2
read -r PA PB <<<"$PRIOS"
htbprio() { case $1 in latency) echo 0 ;; normal) echo 3 ;; batch) echo 7 ;; *) echo "bench-borrow: priority $1" >&2; return 1 ;; esac; }
HPA=$(htbprio "$PA") && HPB=$(htbprio "${PB:-normal}") || exit 2
CG=$(nspair_cgroot)
[ -n "$CG" ] || { echo "bench-borrow: no cgroup2 mount" >&2; exit 1; }
TOP=/hbm-bench-borrow C=hbmbw-c S=hbmbw-s
WORK=$(mktemp -d /tmp/hbm-bench-borrow.XXXXXX)

cleanup() { nspair_cleanup "$HBM" "$CG" $C $S $TOP/p/a $TOP/p/b $TOP/p $TOP; }
trap 'cleanup; rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM

lab() {
	cleanup
	nspair_up $C $S bw0 198.18.8 && mkdir -p "$CG$TOP/p/a" "$CG$TOP/p/b" || return 1
	for port in 5201 5202; do
		ip netns exec $S setsid iperf3 -s -p $port -D >/dev/null 2>&1 || return 1
	done
	sleep 0.5
}

limit() { # LIMITER
	case $1 in
	hbm) "$HBM" set "$TOP/p" --egress "$LINK" >/dev/null &&
		"$HBM" set "$TOP/p/a" --egress "$GA" --egress-ceil "$LINK" --priority "$PA" >/dev/null 2>&1 &&
		"$HBM" set "$TOP/p/b" --egress "$GB" --egress-ceil "$LINK" --priority "${PB:-normal}" >/dev/null 2>&1 ;;
	htb) local tcn="ip netns exec $C tc"
		$tcn qdisc add dev bw0 root handle 1: htb default 1 &&
		$tcn class add dev bw0 parent 1: classid 1:1 htb rate "$LINK" ceil "$LINK" &&
		$tcn class add dev bw0 parent 1:1 classid 1:10 htb rate "$GA" ceil "$LINK" prio "$HPA" &&
		$tcn class add dev bw0 parent 1:1 classid 1:20 htb rate "$GB" ceil "$LINK" prio "$HPB" &&
		$tcn filter add dev bw0 parent 1: protocol ip prio 1 u32 match ip dport 5201 0xffff flowid 1:10 &&
		$tcn filter add dev bw0 parent 1: protocol ip prio 1 u32 match ip dport 5202 0xffff flowid 1:20 ;;
	none) ;;
	*) echo "bench-borrow: limiter $1: hbm, htb or none" >&2; return 1 ;;
	esac
}

client() { # GROUP PORT SECONDS: iperf3 in the group, in the background
	bash -c "echo \$\$ >$CG$TOP/p/$1/cgroup.procs && exec ip netns exec $C iperf3 -c 198.18.8.2 -p $2 -P $P -C $CC -t $3" \
		>"$WORK/iperf-$1.log" 2>&1 &
}

run() { # LIMITER: one line "a_alone a_both b_both wake_ms"
	lab && limit "$1" || return 1
	ip netns exec $S tcpdump -i bw0 -n -s 64 -B 16384 -w "$WORK/cap.pcap" "tcp and dst host 198.18.8.2" 2>/dev/null &
	local dump=$!
	sleep 1
	client a 5201 $((2 * T + 1))
	sleep "$T"
	client b 5202 "$T"
	sleep $((T + 2))
	kill -INT $dump 2>/dev/null
	wait $dump 2>/dev/null
	wait
	python3 - "$WORK/cap.pcap" "$T" "$LBPS" "$ABPS" "$BBPS" <<'EOF'
import struct, sys
path, T, L, GA, GB = sys.argv[1], float(sys.argv[2]), *map(float, sys.argv[3:])
W = 0.01
f = open(path, 'rb')
hdr = f.read(24)
magic = struct.unpack('<I', hdr[:4])[0]
ns = magic == 0xa1b23c4d
bins = {5201: {}, 5202: {}}
first = {5201: None, 5202: None}
while True:
    h = f.read(16)
    if len(h) < 16:
        break
    sec, frac, incl, orig = struct.unpack('<IIII', h)
    d = f.read(incl)
    t = sec + frac / (1e9 if ns else 1e6)
    if len(d) < 38 or d[12:14] != b'\x08\x00':
        continue
    ihl = (d[14] & 15) * 4
    iplen = struct.unpack('>H', d[16:18])[0]
    dport = struct.unpack('>H', d[14 + ihl + 2:14 + ihl + 4])[0]
    if dport not in bins:
        continue
    if first[dport] is None and iplen > 1000:
        first[dport] = t
    k = int(t / W)
    bins[dport][k] = bins[dport].get(k, 0) + iplen
if first[5201] is None or first[5202] is None:
    sys.exit('no data of a or of b in the capture')
def rate(port, t0, t1):
    b = sum(v for k, v in bins[port].items() if t0 <= k * W < t1)
    return b * 8 / (t1 - t0)
ta, tb = first[5201], first[5202]
a_alone = rate(5201, ta + 1.0, tb - 0.2) / L
a_both = rate(5201, tb + 1.0, tb + T - 0.2) / GA
b_both = rate(5202, tb + 1.0, tb + T - 0.2) / GB
k0, run, wake = int(tb / W), 0, None
for k in range(k0, k0 + int(T / W)):
    if bins[5202].get(k, 0) * 8 / W >= 0.9 * GB:
        run += 1
        if run == 3:
            wake = ((k - 2) * W - tb) * 1000
            break
    else:
        run = 0
print('%.3f %.3f %.3f %s' % (a_alone, a_both, b_both, '%.0f' % max(wake, 0) if wake is not None else 'never'))
EOF
}

echo "# link $LINK: a $GA ($PA), b $GB (${PB:-normal}), both up to $LINK; iperf3 -P $P -C $CC; ${T}s alone, ${T}s together"
echo "# a alone (share of link), a and b together (share of guarantee), b's wake (ms to 0.9 of its guarantee)"
for l in $LIMITERS; do
	rows=()
	for r in $(seq "$RUNS"); do
		row=$(run "$l") || { echo "bench-borrow: $l run $r failed: $row" >&2; exit 1; }
		echo "$l run $r: $row"
		rows+=("$row")
	done
	IFS=$'\t' read -r alone atog btog wake < <(printf '%s\n' "${rows[@]}" | nspair_medians)
	echo "MEDIAN $l: a alone $alone, a together $atog, b together $btog, b wake $wake ms"
done
