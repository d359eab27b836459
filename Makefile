# HBM build. `make test` is what CI runs; it installs what a fresh machine lacks.
GO        ?= go
BIN       := bin/hbm
BPF_SRC   := $(wildcard bpf/*.bpf.c bpf/include/*.h)
GO_SRC    := $(shell find cmd internal -name '*.go' -not -name '*_test.go')
ARCH_INC  := /usr/include/$(shell uname -m)-linux-gnu
export BPF_CFLAGS := -O2 -g -Wall -Werror -fdebug-prefix-map=$(CURDIR)=. -I$(CURDIR)/bpf/include -I$(ARCH_INC)
export BPF_CORE_CFLAGS := -O2 -g -Wall -Werror -fdebug-prefix-map=$(CURDIR)=. -I$(CURDIR)/bpf/vmlinux -I$(CURDIR)/bpf/include

.PHONY: all build generate vmlinux deps k8s-bins node-bins test test-k8s test-node test-upgrade test-unit test-priv demo bench clean

all: build

## deps: install the toolchain a fresh Debian machine lacks (clang, libbpf headers, bpftool, iproute2).
deps:
	@./scripts/deps.sh

## generate: compile the BPF C and regenerate the Go bindings (bpf2go).
## Needs clang (make deps installs it); the kernel types come from the
## checked-in bpf/vmlinux/vmlinux.h (CO-RE relocates them on the running
## kernel), so the build does not depend on the build host's kernel.
## The objects are reproducible: -fdebug-prefix-map keeps the checkout's
## path out of their BTF, so a build in any clone leaves them byte for byte
## as committed (.ci/run fails otherwise).
generate:
	@command -v clang >/dev/null || { echo "clang not found: run 'make deps' (as root) first" >&2; exit 1; }
	$(GO) generate ./internal/...

## vmlinux: refresh bpf/vmlinux/vmlinux.h from this kernel's BTF (rarely needed).
vmlinux:
	bpftool btf dump file /sys/kernel/btf/vmlinux format c > bpf/vmlinux/vmlinux.h.tmp
	mv bpf/vmlinux/vmlinux.h.tmp bpf/vmlinux/vmlinux.h

## build: one static binary with the BPF objects embedded.
build: generate
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(BIN) ./cmd/hbm

## k8s-bins: build (once; cached by version in $$HBM_K8S_CACHE, default
## /var/cache/hbm-k8s) the real kube-apiserver and etcd that test/k8s starts,
## from their Go modules. Cold: about 16 minutes on 2 cores; cached: instant.
k8s-bins:
	@./scripts/k8s-bins.sh >/dev/null

## node-bins: k8s-bins plus the kubelet (same module) and containerd, its
## runc shim and ctr (Go module proxy) that test/node runs; cached the same way.
node-bins:
	@./scripts/k8s-bins.sh --node >/dev/null

NODE_ENV = HBM_K8S_KUBELET=$$(./scripts/k8s-bins.sh --node | sed -n 3p) HBM_K8S_CONTAINERD=$$(./scripts/k8s-bins.sh --node | sed -n 4p)

K8S_ENV = HBM_K8S_APISERVER=$$(./scripts/k8s-bins.sh | sed -n 1p) HBM_K8S_ETCD=$$(./scripts/k8s-bins.sh | sed -n 2p)

## test: everything CI runs (unit tests under the race detector, then every
## test: unit, BPF decision and namespace integration tests, the
## Kubernetes end-to-end test against a real API server, and the real node
## of test-node: kubelet, containerd, the DaemonSet as shipped).
test: deps
	@./scripts/deps.sh --node
	$(MAKE) build
	$(MAKE) k8s-bins
	$(MAKE) node-bins
	$(GO) vet ./...
	$(GO) test -race -count=1 -short -timeout 20m ./...
	$(K8S_ENV) $(NODE_ENV) HBM_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -p 1 -timeout 50m ./...

## test-k8s: the Kubernetes end-to-end test alone (a real etcd and
## kube-apiserver, pods' cgroups, real traffic; root).
test-k8s: deps
	$(MAKE) build
	$(MAKE) k8s-bins
	$(K8S_ENV) HBM_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -v -timeout 20m ./test/k8s/

## test-node: the single-node test alone: the control plane of test-k8s plus a
## real kubelet and containerd (runc and CNI plugins from Debian), the
## DaemonSet of deploy/kubernetes, annotated pods and their traffic (root).
test-node: deps
	@./scripts/deps.sh --node
	$(MAKE) build
	$(MAKE) node-bins
	$(K8S_ENV) $(NODE_ENV) HBM_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -v -timeout 20m ./test/node/

## test-upgrade: the upgrade tests alone (root; part of test): an earlier
## hbm, built from git history, sets limits; this build upgrades them with
## traffic running (TestUpgradeTraffic), and killed at its steps
## (TestUpgradeKill). About 2 minutes on the 2-core machine.
test-upgrade: deps
	$(MAKE) build
	HBM_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -v -run 'TestUpgrade' -timeout 10m ./test/integration/

## test-unit: tests that need no privileges.
test-unit:
	$(GO) test -count=1 -short ./...

## demo: build, then a quick built-in comparison (hbm eval egress-200m --quick: hbm vs htb vs tbf vs none).
demo: deps
	$(MAKE) build
	./$(BIN) demo

## bench: the benchmarks, which are hbm eval scenarios: the full default suite
## by default; SCENARIOS, RUNS (repetitions, medians reported) and OUT narrow it,
## e.g. make bench SCENARIOS="many-flows-200m incast-streams" RUNS=3 OUT=/tmp/b
SCENARIOS ?=
RUNS      ?= 1
OUT       ?=
bench: build
	./$(BIN) eval --runs $(RUNS) $(if $(OUT),--out $(OUT)) $(SCENARIOS)

clean:
	rm -rf bin
