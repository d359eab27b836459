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
CACHE="${HBM_K8S_CACHE:-/var/cache/hbm-k8s}"
GO="${GO:-go}"

apiserver="$CACHE/kube-apiserver-v$K8S_VERSION"
etcd="$CACHE/etcd-v$ETCD_VERSION"
mkdir -p "$CACHE"

work=$(mktemp -d "${TMPDIR:-/tmp}/hbm-k8s-build.XXXXXX")
trap 'rm -rf "$work"' EXIT

export CGO_ENABLED=0 GOFLAGS=-mod=mod GOWORK=off

build_apiserver() {
	local minor="${K8S_VERSION#*.}"; minor="${minor%%.*}"
	local staging="v0.${K8S_VERSION#*.}"
	local d="$work/apiserver"
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
	} >"$d/go.mod"
	# The staging modules carry no replace of their own; kubernetes's other
	# requirements come through its go.mod. -mod=mod fills go.sum from the proxy
	# and checks it against the checksum database.
	(cd "$d" && "$GO" mod download k8s.io/kubernetes >/dev/null &&
		"$GO" build -trimpath -o "$apiserver.tmp" \
			-ldflags "-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor" \
			k8s.io/kubernetes/cmd/kube-apiserver)
	mv "$apiserver.tmp" "$apiserver"
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
	build_apiserver
fi
if ! "$etcd" --version >/dev/null 2>&1; then
	echo "k8s-bins: building etcd v$ETCD_VERSION (once)" >&2
	build_etcd
fi
echo "$apiserver"
echo "$etcd"
