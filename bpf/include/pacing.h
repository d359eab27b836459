/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Pacing assist: the TCP flows of a limited group pace themselves to the
 * group's per-flow share (share.h): SO_MAX_PACING_RATE turns on TCP's
 * internal pacing (an hrtimer per socket, no fq needed) and caps its rate.
 *
 * The egress program computes each socket's want (the least share of its
 * limited groups) on every packet; this sockops program applies it on the
 * socket's ACKs (BPF_SOCK_OPS_RTT_CB), comparing with the cap the socket
 * really has, so a workload that lifts its own cap is capped again on its
 * next ACK.
 *
 * Small transfers first: a socket whose every written byte was acked is
 * idle, and what it writes next, up to 64 KB, is an RPC (policy.h,
 * flow_fresh). Its cap is raised to FRESH_BPS while its group's RPC budget
 * had room for its last RPC, so the next burst leaves at once instead of at
 * the bulk share: TCP sizes a TSO packet to a millisecond at the pacing
 * rate, so at FRESH_BPS its first 64 KB go as one packet, unpaced. Without
 * room it gets the group's RPC cap (share.h: RPCs together at 7/8 of the
 * rate). It keeps that cap until the RPC is acked, while all its owner wrote
 * fits in the 64 KB; a larger write is bulk and the next ACK caps it to its
 * share. Not unlimited: a socket with a large cwnd would send a whole 1 MB
 * transfer within the RTT before its first ACK (measured: a group of 1 MB
 * RPCs at 8x its limit).
 */
#ifndef HBM_PACING_H
#define HBM_PACING_H

#include "assist.h"
#include "policy.h"

/* What an idle socket may send at: its first FRESH_BURST_BYTES as one TSO
 * packet (TCP sizes them to sk_pacing_rate >> 10 bytes). */
#define FRESH_BPS ((__u64)FRESH_BURST_BYTES << 10)

/* idle_cap is the cap of an RPC socket (idle, or sending an RPC): FRESH_BPS
 * while its groups' RPC budgets had room for its last RPC; else (RPCs want
 * more than the budget) the groups' RPC cap (share.h), so that a
 * back-to-back RPC loop paces itself to its class's 7/8 of the rate instead
 * of being dropped; never below the socket's share. */
static __always_inline __u64 idle_cap(const struct hbm_sock *s)
{
	__u64 c;

	if (!s->want_Bps)
		return 0;
	if (s->fresh_room)
		return s->want_Bps < FRESH_BPS ? FRESH_BPS : s->want_Bps;
	c = s->rpc_Bps;
	return c > s->want_Bps ? c : s->want_Bps;
}

static __always_inline int hbm_pace(struct bpf_sock_ops *skops)
{
	struct hbm_sock *s;
	struct tcp_sock *tp;
	struct bpf_sock *sk;

	switch (skops->op) {
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		/* Ask for a callback on every ACK. */
		bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags | BPF_SOCK_OPS_RTT_CB_FLAG);
		return 1;
	case BPF_SOCK_OPS_RTT_CB:
		break;
	default:
		return 1;
	}
	sk = skops->sk;
	if (!sk)
		return 1;
	s = bpf_sk_storage_get(&hbm_flow_map, sk, 0, 0);
	if (!s)
		return 1; /* the data plane has not seen it send: nothing to apply */
	tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return 1;
	if (tp_idle(tp)) {
		s->burst = 0;
		pace_set(skops, tp, s, idle_cap(s));
		return 1;
	}
	/* An RPC under way: all its owner wrote since idle fits in the fresh
	 * burst. It keeps the RPC cap until acked; a larger write is bulk. */
	if (s->burst && (__s32)(tp->write_seq - s->burst_end) <= 0) {
		pace_set(skops, tp, s, idle_cap(s));
		return 1;
	}
	pace_set(skops, tp, s, s->want_Bps);
	return 1;
}

#endif /* HBM_PACING_H */
