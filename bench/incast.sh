#!/usr/bin/env bash
# HBM incast benchmark: 4 sender namespaces, each with 2 bulk TCP streams and
# a 10 KB request/response loop, into one receiver through a Linux bridge
# whose port to the receiver is the bottleneck (tbf 2gbit, 128 KB queue).
# Every congestion control runs without HBM and with a mark-only ingress
# limit at 90% of the bottleneck on the receiver's cgroup
# (hbm set CGROUP --ingress 1.8gbit --no-drop: its defaults, mark and burst 200us).
# Prints a table (or --json): goodput, retransmissions, bottleneck drops,
# HBM marks, 10 KB RPC P50/P99.
#
# Usage: bench/incast.sh [--json] [extra `hbm workload incast` flags]
# Environment:
#   DURATION  measurement seconds per cell (default 8)
#   WARMUP    warm-up seconds per cell (default 2)
#   CCS       comma list (default cubic,cubic+ecn,bbr,dctcp; dctcp runs only
#             when registered: hbm cc install dctcp)
#   HBM_ARGS  hbm set flags besides --ingress (default --no-drop)
#   HBM_BIN   hbm binary (default bin/hbm; built by `make build`)
#   HBM_PIN_DIR  HBM's state directory (default /sys/fs/bpf/hbm)
# About 8 cells x (DURATION + WARMUP + ~2 s): ~2 minutes by default.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
hbm="${HBM_BIN:-$root/bin/hbm}"
name=incbench
group=/hbm-incbench/r

. "$here/lib.sh"

"$hbm" workload incast \
	--name "$name" --cgroup "$group" \
	--senders 4 --streams 2 --rpc 1 --rpc-size 10KB \
	--rate 2gbit --buffer 131072 --ingress 1.8gbit \
	--hbm-args "${HBM_ARGS:---no-drop}" \
	--duration "$(secs "${DURATION:-8}")" --warmup "$(secs "${WARMUP:-2}")" \
	--ccs "${CCS:-cubic,cubic+ecn,bbr,dctcp}" \
	"$@"
