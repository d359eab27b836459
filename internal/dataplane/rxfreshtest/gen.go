// Package rxfreshtest holds the test harness of the ingress socket
// decisions, the RPC class (bpf/include/rxfresh.h) and the receive-window
// clamp (bpf/include/rxwin.h): syscall programs run with BPF_PROG_TEST_RUN
// on a socket state and a packet or an ACK's moment (bpf/test/rxfresh.bpf.c).
// Only its tests use it.
package rxfreshtest

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "$BPF_CORE_CFLAGS" -target bpfel -type rxfresh_case -type rxwin_case -type rxdescend_case -type learn_case -type held_case -type step_case -type hbm_dir rxfresh ../../../bpf/test/rxfresh.bpf.c
