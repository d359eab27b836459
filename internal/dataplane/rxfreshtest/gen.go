// Package rxfreshtest holds the test harness of the data plane's decisions
// that a cgroup_skb test run cannot reach: the ingress RPC class
// (bpf/include/rxfresh.h) and receive-window clamp (bpf/include/rxwin.h),
// what a verdict leaves in a socket's state, the egress cwnd clamp, which egress packets may be
// refused and which go unsignalled (policy.h), one step of the share loop, the floor's cut and a flow's count (share.h), a transfer's
// first window (room.h) and the handshake gate's queue and wait (gateq.h). Syscall
// programs run with BPF_PROG_TEST_RUN on the state and inputs in their
// context (bpf/test/rxfresh.bpf.c). Only its tests use it.
package rxfreshtest

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "$BPF_CORE_CFLAGS" -target bpfel -type rxfresh_case -type rxwin_case -type rxdescend_case -type learn_case -type cwnd_case -type held_case -type protect_case -type spare_case -type step_case -type floor_case -type lend_case -type gate_case -type gate_wait_case -type room_case -type count_case -type hbm_dir rxfresh ../../../bpf/test/rxfresh.bpf.c
