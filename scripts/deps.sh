#!/usr/bin/env bash
# Installs the build and test toolchain on a fresh Debian machine. Idempotent and quiet when all is present.
# With --node, also what the single-node test (make test-node) runs under its
# containerd: runc (the OCI runtime) and containernetworking-plugins (the CNI
# bridge, host-local and loopback plugins, in /usr/lib/cni).
set -euo pipefail
node=false
case "${1:-}" in
--node) node=true ;;
"") ;;
*) echo "usage: deps.sh [--node]" >&2; exit 2 ;;
esac
need=()
command -v clang   >/dev/null || need+=(clang llvm)
[ -f /usr/include/bpf/bpf_helpers.h ] || need+=(libbpf-dev)
[ -f /usr/include/linux/bpf.h ] || need+=(linux-libc-dev)
command -v bpftool >/dev/null || need+=(bpftool)
command -v ip      >/dev/null || need+=(iproute2)
command -v tc      >/dev/null || need+=(iproute2)
# The daemon's end-to-end test scrapes it with a real Prometheus; promtool
# (same package) lints the metrics.
command -v prometheus >/dev/null && command -v promtool >/dev/null || need+=(prometheus)
# hbm eval's web scenarios (and their test) run a real server and client.
[ -x /usr/sbin/nginx ] || need+=(nginx-light)
command -v wrk >/dev/null || need+=(wrk)
command -v ab >/dev/null || need+=(apache2-utils) # ab: HTTP latency with the connect included
# The incast benchmarks with other people's tools (TestIngressIncastTools,
# TestIngressIncastSweep).
command -v iperf3 >/dev/null || need+=(iperf3)
command -v sockperf >/dev/null || need+=(sockperf)
if $node; then
	command -v runc >/dev/null || need+=(runc)
	[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
fi
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "deps: missing ${need[*]}; run as root or install them" >&2
		exit 1
	fi
	echo "deps: installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
command -v go >/dev/null || { echo "deps: Go toolchain not found (need go >= 1.24)" >&2; exit 1; }
