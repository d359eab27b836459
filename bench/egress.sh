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

. "$here/lib.sh"

"$hbm" workload bench \
	--name "$name" --cgroup "$group" \
	--duration "$(secs "${DURATION:-10}")" --warmup "$(secs "${WARMUP:-2}")" \
	--rates "${RATES:-200mbit,1gbit}" --ccs "${CCS:-cubic,cubic+ecn,bbr,dctcp}" \
	--limiters "${LIMITERS:-none,hbm,htb,tbf}" \
	--streams 3 --rpc 1 --rpc-size 10KB \
	"$@"
