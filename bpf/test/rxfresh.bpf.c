// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Test harness for the ingress RPC class's decisions (rxfresh.h), run with
 * BPF_PROG_TEST_RUN by internal/dataplane/rxfreshtest. The data plane's own
 * test runs cannot reach them: a cgroup_skb test run's skb carries a dummy,
 * non-TCP socket, so there is no socket state to decide on. A syscall
 * program takes the socket state and the packet in its context and writes
 * the decisions back. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "hbm.h"
#include "rxfresh.h"

struct rxfresh_case {
	struct hbm_sock s; /* in and out: the socket's ingress state */
	__u32 seq;         /* in: the packet's first payload byte */
	__u32 payload;     /* in: its payload bytes */
	__u32 segs_out;    /* in: the receiver's data_segs_out */
	__u32 rcv_nxt;     /* in: the receiver's rcv_nxt after the packet */
	__u32 candidate;   /* out: rx_fresh */
	__u32 win_bytes;   /* out: rx_rpc_win_bytes after the packet */
};

SEC("syscall")
int rxfresh_run(struct rxfresh_case *c)
{
	struct pkt p = { .is_tcp = 1 };

	p.seq = c->seq;
	p.payload = c->payload;
	c->candidate = rx_fresh(&p, c->segs_out, &c->s);
	c->win_bytes = rx_rpc_win_bytes(&c->s, c->rcv_nxt, c->segs_out);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
