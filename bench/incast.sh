#!/usr/bin/env bash
# HBM incast benchmark: 4 sender namespaces, each with 2 bulk TCP streams and
# a 10 KB request/response loop, into one receiver through a Linux bridge
# whose port to the receiver is the bottleneck (tbf 2gbit, 128 KB queue).
# Every congestion control runs without HBM and with a mark-only ingress
# limit at 90% of the bottleneck on the receiver's cgroup
# (hbm set CGROUP --ingress 1.8gbit --no-drop --mark 200us --burst 200us).
# Prints a table (or --json): goodput, retransmissions, bottleneck drops,
# HBM marks, 10 KB RPC P50/P99.
#
# Usage: bench/incast.sh [--json] [extra `hbm workload incast` flags]
# Environment:
#   DURATION  measurement seconds per cell (default 8)
#   WARMUP    warm-up seconds per cell (default 2)
#   CCS       comma list (default cubic,cubic+ecn,bbr,dctcp; dctcp runs only
#             when registered: hbm cc install dctcp)
#   HBM_ARGS  hbm set flags besides --ingress (default --no-drop --mark 200us --burst 200us)
#   HBM_BIN   hbm binary (default bin/hbm; built by `make build`)
#   HBM_PIN_DIR  HBM's state directory (default /sys/fs/bpf/hbm)
# About 8 cells x (DURATION + WARMUP + ~2 s): ~2 minutes by default.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
hbm="${HBM_BIN:-$root/bin/hbm}"
name=incbench
group=/hbm-incbench/r

if [ "$(id -u)" -ne 0 ]; then
	echo "incast.sh: needs root (namespaces, cgroups, BPF)" >&2
	exit 1
fi
if [ ! -x "$hbm" ]; then
	echo "incast.sh: $hbm not found: run make build (or set HBM_BIN)" >&2
	exit 1
fi

# The Go side removes everything itself, also on SIGINT/SIGTERM. This trap is
# the backstop for a harder death: only what this benchmark creates.
cleanup() {
	local rc=$?
	local lock=/run/hbm-testbed/$name.lock
	if [ -e "$lock" ] && command -v flock >/dev/null && ! flock -n "$lock" true; then
		exit "$rc"
	fi
	"$hbm" unset "$group" >/dev/null 2>&1 || true
	for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^hbm-$name-[^-]+$" || true); do
		for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
		ip netns del "$ns" 2>/dev/null || true
	done
	local mnt
	mnt="$(awk '{ for (i = 1; i <= NF; i++) if ($i == "-") { if ($(i + 1) == "cgroup2") print $5; break } }' /proc/self/mountinfo | head -n1)"
	if [ -n "$mnt" ] && [ -d "$mnt/hbm-incbench" ]; then
		rmdir "$mnt$group" "$mnt/hbm-incbench" 2>/dev/null || true
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

secs() { case "$1" in *[a-z]) echo "$1" ;; *) echo "${1}s" ;; esac; }

"$hbm" workload incast \
	--name "$name" --cgroup "$group" \
	--senders 4 --streams 2 --rpc 1 --rpc-size 10KB \
	--rate 2gbit --buffer 131072 --ingress 1.8gbit \
	--hbm-args "${HBM_ARGS:---no-drop --mark 200us --burst 200us}" \
	--duration "$(secs "${DURATION:-8}")" --warmup "$(secs "${WARMUP:-2}")" \
	--ccs "${CCS:-cubic,cubic+ecn,bbr,dctcp}" \
	"$@"
