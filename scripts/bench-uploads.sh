#!/bin/bash
# bench-uploads.sh: clients in a limited group uploading on a new connection
# per request (ab -p, a POST of SIZE bytes each) to nginx on a second host,
# hbm against htb on the clients' interface. The handshake gate's client
# side (bpf/include/gate.h, gate_active; docs/design.md, "The handshake
# gate"). hbm eval's http flows put the server in the limited group; this is
# the other way round.
#
# Usage: scripts/bench-uploads.sh [-b HBM] [-r RATE] [-s "10k 30k"] [-c "8 64"]
#        [-l "hbm htb"] [-n RUNS] [-d SECONDS]
# Needs root, ip, tc, nginx and ab (Debian: nginx-light apache2-utils).
# Prints one line per run and the median (min-max) of each cell. Hosts are
# network namespaces hbmup-c and hbmup-s (198.18.7.1 and .2), the group
# /hbm-bench-uploads; all removed at the end, also on failure or Ctrl-C.
set -u
HBM=./bin/hbm RATE=200mbit SIZES="10k 30k" COUNTS="8 64" LIMITERS="hbm htb" RUNS=3 SECS=10
while getopts "b:r:s:c:l:n:d:" o; do
	case $o in
	b) HBM=$OPTARG ;; r) RATE=$OPTARG ;; s) SIZES=$OPTARG ;; c) COUNTS=$OPTARG ;;
	l) LIMITERS=$OPTARG ;; n) RUNS=$OPTARG ;; d) SECS=$OPTARG ;;
	*) sed -n '2,16p' "$0"; exit 2 ;;
	esac
done
. "$(dirname "$0")/lib/nspair.sh"
nspair_require bench-uploads ip tc nginx ab "$HBM" || exit 1
BPS=$(nspair_bps "$RATE") || exit 2
CG=$(nspair_cgroot)
[ -n "$CG" ] || { echo "bench-uploads: no cgroup2 mount" >&2; exit 1; }
GROUP=/hbm-bench-uploads C=hbmup-c S=hbmup-s
WORK=$(mktemp -d /tmp/hbm-bench-uploads.XXXXXX)
chmod 755 "$WORK"

cleanup() { nspair_cleanup "$HBM" "$CG" $C $S "$GROUP"; }
trap 'cleanup; rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM

lab() {
	cleanup
	nspair_up $C $S up0 198.18.7 && mkdir -p "$CG$GROUP" || return 1
	mkdir -p "$WORK/ng"
	cat >"$WORK/ng/nginx.conf" <<EOF
daemon off;
worker_processes 2;
pid $WORK/ng/nginx.pid;
error_log $WORK/ng/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $WORK/ng/body;
    proxy_temp_path $WORK/ng/proxy;
    fastcgi_temp_path $WORK/ng/fastcgi;
    uwsgi_temp_path $WORK/ng/uwsgi;
    scgi_temp_path $WORK/ng/scgi;
    client_max_body_size 64m;
    client_body_buffer_size 1m;
    server { listen 198.18.7.2:80; location / { return 204; } }
}
EOF
	ip netns exec $S setsid nginx -p "$WORK/ng/" -c "$WORK/ng/nginx.conf" </dev/null >/dev/null 2>&1 &
	for _ in $(seq 50); do
		ip netns exec $C bash -c 'exec 3<>/dev/tcp/198.18.7.2/80' 2>/dev/null && return 0
		sleep 0.1
	done
	echo "bench-uploads: nginx not answering" >&2
	return 1
}

bytes() { case $1 in *k) echo $((${1%k} * 1024)) ;; *m) echo $((${1%m} * 1048576)) ;; *) echo "$1" ;; esac; }

run() { # LIMITER SIZE COUNT: one line "wire P50 P99 dropped gated"
	local l=$1 size=$2 n=$3 tx0 tx1 out d0 d1
	lab || return 1
	head -c "$(bytes "$size")" /dev/urandom >"$WORK/body"
	case $l in
	hbm) "$HBM" set "$GROUP" --egress "$RATE" >/dev/null || return 1 ;;
	htb) ip netns exec $C tc qdisc add dev up0 root handle 1: htb default 1 &&
		ip netns exec $C tc class add dev up0 parent 1: classid 1:1 htb rate "$RATE" 2>/dev/null || return 1 ;;
	esac
	d0=$(counters)
	tx0=$(ip netns exec $C cat /sys/class/net/up0/statistics/tx_bytes)
	out=$(bash -c "echo \$\$ >$CG$GROUP/cgroup.procs && exec ip netns exec $C ab -c $n -t $SECS -n 10000000 -s 30 -r -q \
		-p $WORK/body -T application/octet-stream http://198.18.7.2/up" 2>&1)
	tx1=$(ip netns exec $C cat /sys/class/net/up0/statistics/tx_bytes)
	d1=$(counters)
	echo "$out" | grep -q "Failed requests: *0" || { echo "bench-uploads: ab: $(echo "$out" | tail -3)" >&2; return 1; }
	awk -v t0="$tx0" -v t1="$tx1" -v s="$SECS" -v bps="$BPS" -v d0="$d0" -v d1="$d1" '
		/^ +50%/ {p50 = $2} /^ +99%/ {p99 = $2}
		END { split(d0, a); split(d1, b)
		      printf "%.3f %d %d %d %d\n", (t1 - t0) * 8 / s / bps, p50, p99, b[1] - a[1], b[2] - a[2] }' <<<"$out"
}

counters() { # dropped gated of the group's egress (0 0 without hbm)
	"$HBM" show --json 2>/dev/null | python3 -c '
import json, sys
g = [x for x in json.load(sys.stdin) if x.get("cgroup") == "'"$GROUP"'"]
e = (g[0].get("egress") or {}) if g else {}
print(e.get("dropped", 0), e.get("gated", 0))' 2>/dev/null || echo "0 0"
}

echo "# $RATE, ab -p (a new connection per upload), ${SECS}s runs; wire share, ab P50/P99 ms, hbm refusals and gated connections"
for size in $SIZES; do
	for n in $COUNTS; do
		for l in $LIMITERS; do
			rows=()
			for r in $(seq "$RUNS"); do
				row=$(run "$l" "$size" "$n") || exit 1
				echo "$l $size x$n run $r: $row"
				rows+=("$row")
			done
			IFS=$'\t' read -r wire p50 p99 refused gated < <(printf '%s\n' "${rows[@]}" | nspair_medians)
			echo "MEDIAN $l $size x$n: wire $wire, P50 $p50, P99 $p99 ms, refusals $refused, gated $gated"
		done
	done
done
