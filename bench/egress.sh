#!/usr/bin/env bash
# HBM egress benchmark: hbm vs tc htb vs tc tbf (and no limiter, as the
# reference) on a two-namespace veth testbed. In one cgroup of the sender
# namespace: 3 bulk TCP streams + one 10 KB request/response loop, at 200mbit
# and 1gbit, for cubic, cubic+ECN and bbr. Prints a table (or --json).
#
# Usage: bench/egress.sh [--json] [extra `hbm workload bench` flags]
# Environment:
#   DURATION  measurement seconds per cell (default 10)
#   WARMUP    warm-up seconds per cell (default 2)
#   RATES     comma list of limits (default 200mbit,1gbit)
#   CCS       comma list (default cubic,cubic+ecn,bbr,dctcp; dctcp is installed
#             with `hbm cc install` if the kernel has none, removed at the end)
#   LIMITERS  comma list (default none,hbm,htb,tbf)
#   HBM_BIN   hbm binary (default bin/hbm; built by `make build`)
# About 28 cells x (DURATION + WARMUP + ~1 s): ~6 minutes by default.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
hbm="${HBM_BIN:-$root/bin/hbm}"
name=bench
group=/hbm-bench/w

if [ "$(id -u)" -ne 0 ]; then
	echo "egress.sh: needs root (namespaces, cgroups, BPF)" >&2
	exit 1
fi
if [ ! -x "$hbm" ]; then
	echo "egress.sh: $hbm not found: run make build (or set HBM_BIN)" >&2
	exit 1
fi

# The Go side removes everything itself, also on SIGINT/SIGTERM. This trap is
# the backstop for a harder death: only what this benchmark creates.
cleanup() {
	local rc=$?
	# Another live benchmark holds the testbed lock: its state is not ours.
	local lock=/run/hbm-testbed/$name.lock
	if [ -e "$lock" ] && command -v flock >/dev/null && ! flock -n "$lock" true; then
		exit "$rc"
	fi
	"$hbm" unset "$group" >/dev/null 2>&1 || true
	for ns in "hbm-$name-snd" "hbm-$name-rcv"; do
		if [ -e "/run/netns/$ns" ]; then
			for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
			ip netns del "$ns" 2>/dev/null || true
		fi
	done
	local mnt
	mnt="$(awk '{ for (i = 1; i <= NF; i++) if ($i == "-") { if ($(i + 1) == "cgroup2") print $5; break } }' /proc/self/mountinfo | head -n1)"
	if [ -n "$mnt" ] && [ -d "$mnt/hbm-bench" ]; then
		rmdir "$mnt$group" "$mnt/hbm-bench" 2>/dev/null || true
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

secs() { case "$1" in *[a-z]) echo "$1" ;; *) echo "${1}s" ;; esac; }

"$hbm" workload bench \
	--name "$name" --cgroup "$group" \
	--duration "$(secs "${DURATION:-10}")" --warmup "$(secs "${WARMUP:-2}")" \
	--rates "${RATES:-200mbit,1gbit}" --ccs "${CCS:-cubic,cubic+ecn,bbr,dctcp}" \
	--limiters "${LIMITERS:-none,hbm,htb,tbf}" \
	--streams 3 --rpc 1 --rpc-size 10KB \
	"$@"
