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
 * Small transfers first: a socket whose every written byte was acked is idle;
 * its cap is lifted, so the next burst it sends (an RPC's request or reply)
 * leaves at once instead of at the bulk share, and the egress program does
 * not mark it (policy.h, fresh bursts). The first ACK that finds data still
 * outstanding caps it again: bulk transfers are paced from their first RTT.
 */
#ifndef HBM_PACING_H
#define HBM_PACING_H

#include "assist.h"

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
		pace_set(skops, tp, s, 0);
		return 1;
	}
	pace_set(skops, tp, s, s->want_Bps);
	return 1;
}

#endif /* HBM_PACING_H */
