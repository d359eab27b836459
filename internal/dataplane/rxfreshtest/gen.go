// Package rxfreshtest holds the test harness of the ingress RPC class's
// decisions (bpf/include/rxfresh.h): a syscall program run with
// BPF_PROG_TEST_RUN on a socket state and a packet (bpf/test/rxfresh.bpf.c).
// Only its test uses it.
package rxfreshtest

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "$BPF_CORE_CFLAGS" -target bpfel -type rxfresh_case rxfresh ../../../bpf/test/rxfresh.bpf.c
