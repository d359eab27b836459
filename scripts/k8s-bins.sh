#!/usr/bin/env bash
# Builds the real kube-apiserver and etcd that the Kubernetes end-to-end test
# (test/k8s) starts, from their Go modules (nothing is downloaded from outside
# the Go module proxy), and caches them by version:
#
#   $HBM_K8S_CACHE/kube-apiserver-v$K8S_VERSION
#   $HBM_K8S_CACHE/etcd-v$ETCD_VERSION
#
# (HBM_K8S_CACHE defaults to /var/cache/hbm-k8s). A cached binary that runs is
# kept; a repeat run takes well under a second. Prints the two paths, one a line.
#
# With --node it also builds what the single-node test (test/node, make
# test-node) runs, and prints their paths after the first two, one a line:
#
#   $HBM_K8S_CACHE/kubelet-v$K8S_VERSION                      (same wrapper module)
#   $HBM_K8S_CACHE/containerd-v$CONTAINERD_VERSION/bin        (a directory holding
#       containerd, containerd-shim-runc-v2 and ctr: containerd finds its shim
#       by name on PATH, so the test puts this directory first there)
#
# containerd comes from github.com/containerd/containerd/v2 on the Go module
# proxy (CGO off, without the btrfs/devmapper/zfs snapshotters that need C).
# runc and the CNI plugins are not built: scripts/deps.sh --node installs them
# from Debian (runc, containernetworking-plugins).
#
# kube-apiserver: `go install k8s.io/kubernetes/cmd/kube-apiserver@v1.X.Y` is
# refused because k8s.io/kubernetes's go.mod replaces its staging modules
# (k8s.io/api, k8s.io/apiserver, ...) with local directories. So this writes a
# throwaway wrapper module that requires k8s.io/kubernetes v1.X.Y and replaces
# each of those staging modules with its published twin v0.X.Y, then builds the
# command from it. etcd: a wrapper main that calls etcdmain.Main, as etcd's own
# main does.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-3.7.3}"
CONTAINERD_VERSION="${CONTAINERD_VERSION:-2.4.2}"
node=false
case "${1:-}" in
--node) node=true ;;
"") ;;
*) echo "usage: k8s-bins.sh [--node]" >&2; exit 2 ;;
esac
CACHE="${HBM_K8S_CACHE:-/var/cache/hbm-k8s}"
GO="${GO:-go}"

apiserver="$CACHE/kube-apiserver-v$K8S_VERSION"
etcd="$CACHE/etcd-v$ETCD_VERSION"
kubelet="$CACHE/kubelet-v$K8S_VERSION"
ctrdir="$CACHE/containerd-v$CONTAINERD_VERSION/bin"
mkdir -p "$CACHE"

work=$(mktemp -d "${TMPDIR:-/tmp}/hbm-k8s-build.XXXXXX")
trap 'rm -rf "$work"' EXIT

export CGO_ENABLED=0 GOFLAGS=-mod=mod GOWORK=off

# k8s_wrapper writes the wrapper module (see above) into $work/k8s once.
k8s_wrapper() {
	local staging="v0.${K8S_VERSION#*.}"
	local d="$work/k8s"
	[ -f "$d/go.mod" ] && return 0
	mkdir -p "$d"
	# k8s.io/kubernetes's own go.mod names its staging modules in replace
	# directives (k8s.io/foo => ./staging/src/k8s.io/foo).
	local gomod
	gomod=$(cd "$d" && "$GO" mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
	[ -f "$gomod" ] || { echo "k8s-bins: no go.mod for k8s.io/kubernetes@v$K8S_VERSION" >&2; return 1; }
	{
		echo "module hbm.local/kube-apiserver-build"
		echo
		sed -n 's/^go \([0-9.]*\)$/go \1/p' "$gomod" | head -1
		echo
		echo "require k8s.io/kubernetes v$K8S_VERSION"
		echo
		grep -Eo 'k8s\.io/[a-z0-9-]+ => \./staging/src/k8s\.io/[a-z0-9-]+' "$gomod" |
			awk -v v="$staging" '{ print "replace " $1 " => " $1 " " v }'
	} >"$d/go.mod.tmp"
	mv "$d/go.mod.tmp" "$d/go.mod"
}

# build_k8s CMD OUT: k8s.io/kubernetes/cmd/CMD from the wrapper module.
build_k8s() {
	local minor="${K8S_VERSION#*.}"; minor="${minor%%.*}"
	k8s_wrapper
	# The staging modules carry no replace of their own; kubernetes's other
	# requirements come through its go.mod. -mod=mod fills go.sum from the proxy
	# and checks it against the checksum database.
	(cd "$work/k8s" && "$GO" mod download k8s.io/kubernetes >/dev/null &&
		"$GO" build -trimpath -o "$2.tmp" \
			-ldflags "-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor" \
			"k8s.io/kubernetes/cmd/$1")
	mv "$2.tmp" "$2"
}

build_containerd() {
	local d="$work/containerd" tmp="$ctrdir.tmp"
	mkdir -p "$d" "$tmp"
	printf 'module hbm.local/containerd-build\n\ngo 1.24\n' >"$d/go.mod"
	(cd "$d" && "$GO" get "github.com/containerd/containerd/v2@v$CONTAINERD_VERSION" >/dev/null 2>&1 &&
		"$GO" build -trimpath -tags no_btrfs,no_devmapper,no_zfs -o "$tmp/" \
			-ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=v$CONTAINERD_VERSION" \
			github.com/containerd/containerd/v2/cmd/containerd \
			github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
			github.com/containerd/containerd/v2/cmd/ctr)
	rm -rf "$ctrdir"
	mv "$tmp" "$ctrdir"
}

build_etcd() {
	local d="$work/etcd"
	mkdir -p "$d"
	cat >"$d/main.go" <<'EOF'
// etcd, as its own main runs it.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
	printf 'module hbm.local/etcd-build\n\ngo 1.24\n' >"$d/go.mod"
	(cd "$d" && "$GO" get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" >/dev/null 2>&1 &&
		"$GO" mod tidy >/dev/null 2>&1 &&
		"$GO" build -trimpath -ldflags '-s -w' -o "$etcd.tmp" .)
	mv "$etcd.tmp" "$etcd"
}

if ! "$apiserver" --version >/dev/null 2>&1; then
	echo "k8s-bins: building kube-apiserver v$K8S_VERSION (a few minutes, once)" >&2
	build_k8s kube-apiserver "$apiserver"
fi
if ! "$etcd" --version >/dev/null 2>&1; then
	echo "k8s-bins: building etcd v$ETCD_VERSION (once)" >&2
	build_etcd
fi
if $node && ! "$kubelet" --version >/dev/null 2>&1; then
	echo "k8s-bins: building kubelet v$K8S_VERSION (a few minutes, once)" >&2
	build_k8s kubelet "$kubelet"
fi
if $node && ! { "$ctrdir/containerd" --version && "$ctrdir/ctr" --version &&
	[ -x "$ctrdir/containerd-shim-runc-v2" ]; } >/dev/null 2>&1; then
	echo "k8s-bins: building containerd v$CONTAINERD_VERSION, its runc shim and ctr (once)" >&2
	build_containerd
fi
echo "$apiserver"
echo "$etcd"
if $node; then
	echo "$kubelet"
	echo "$ctrdir"
fi
