/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Receive-window assist: the ingress mirror of the pacing assist.
 *
 * Why: on ingress HBM can only mark or drop, and a TCP sender cannot be held
 * below about two segments per RTT by either (cwnd does not go below 2). On
 * a veth RTT of tens of microseconds that floor is above 1 Gbit/s per flow,
 * and a sender whose window is large sends it as one TSO burst, which is
 * what overflows a switch buffer in an incast. The receiver controls one
 * thing the sender must obey: its advertised window.
 *
 * Control: the ingress program computes the group's per-flow rate pace_Bps
 * in the same RCP loop as egress pacing (pacing.h, pace_update on the
 * ingress queue). A sockops program on the group, called for every received
 * segment (BPF_SOCK_OPS_PARSE_ALL_HDR_OPT_CB_FLAG), clamps each socket's
 * receive window (TCP_WINDOW_CLAMP) to pace_Bps x the flow's RTT, and at
 * least RXWIN_MIN_MSS segments. A window clamp never retracts a window
 * already advertised; it stops it from opening further, so the clamp takes
 * hold within an RTT. Marks and drops stay as the backstop.
 */
#ifndef HBM_RXWIN_H
#define HBM_RXWIN_H

#include "hbm.h"
#include "maps.h"
#include "flow.h"
#include "tcp.h"

#ifndef SOL_TCP
#define SOL_TCP 6
#endif
#define RXWIN_MIN_MSS        2      /* never clamp below this many segments */
#define RXWIN_MIN_RTT_US     20     /* RTT floor of the window estimate */

static __always_inline int hbm_rxwin(struct bpf_sock_ops *skops, __u64 cgroup_id, __u32 level)
{
	struct hbm_key key = { .cgroup_id = cgroup_id, .dir = HBM_DIR_INGRESS };
	const struct hbm_config *cfg;
	struct hbm_queue *q;
	struct hbm_rx *rx;
	struct bpf_sock *sk;
	struct tcp_sock *tp;
	__u64 c, rtt, win, mss, least, cur;
	__u32 val;

	switch (skops->op) {
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		/* Ask for a callback on every segment received. */
		bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags | BPF_SOCK_OPS_PARSE_ALL_HDR_OPT_CB_FLAG);
		break;
	case BPF_SOCK_OPS_PARSE_HDR_OPT_CB:
		break;
	default:
		return 1;
	}
	sk = skops->sk;
	if (!sk)
		return 1;
	cfg = bpf_map_lookup_elem(&hbm_limit_map, &key);
	q = bpf_map_lookup_elem(&hbm_queue_map, &key);
	if (cfg && !(cfg->flags & HBM_F_LOOPBACK) && ops_local(skops))
		return 1; /* not policed: its window is not clamped either */
	if (!cfg || !q || !(cfg->flags & HBM_F_PACE) || (cfg->flags & HBM_F_RELEASE)) {
		/* Clamped before (assist off, or the limit is going): lift it. */
		rx = bpf_sk_storage_get(&hbm_rx_map, sk, 0, 0);
		if (rx && rx->clamp) {
			rx->level_Bps[level & (HBM_PACE_LEVELS - 1)] = 0;
			val = RXWIN_MAX;
			/* Another level still clamping sets its own on its callback. */
			if (!rx_clamped(rx) &&
			    !bpf_setsockopt(skops, SOL_TCP, TCP_WINDOW_CLAMP_OPT, &val, sizeof(val)))
				rx->clamp = 0;
		}
		return 1;
	}
	rx = bpf_sk_storage_get(&hbm_rx_map, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!rx)
		return 1;
	c = q->pace_Bps; /* racy read of one word: fine */
	if (!c)
		c = cfg->rate_bps / 8;
	rx->level_Bps[level & (HBM_PACE_LEVELS - 1)] = c;
	least = levels_least(rx->level_Bps, c);
	tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return 1;
	/* The flow's RTT as the receiver sees it: its own estimate (a receiver
	 * that sends no data has only the handshake's srtt), or srtt if larger. */
	rtt = tp->rcv_rtt_est.rtt_us >> 3;
	if (rtt < skops->srtt_us >> 3)
		rtt = skops->srtt_us >> 3;
	if (rtt < RXWIN_MIN_RTT_US)
		rtt = RXWIN_MIN_RTT_US;
	mss = skops->mss_cache ? skops->mss_cache : 1448;
	win = least * rtt / 1000000;
	if (win < RXWIN_MIN_MSS * mss)
		win = RXWIN_MIN_MSS * mss;
	if (win > RXWIN_MAX)
		win = RXWIN_MAX;
	/* Skip the setsockopt unless the socket's clamp is off by more than
	 * 1/8. The socket's own, not the one last set: receive autotuning
	 * raises the clamp with the receive buffer (tcp_rcv_space_adjust). */
	cur = tp->window_clamp;
	if (win <= cur + (cur >> 3) && win + (win >> 3) >= cur)
		return 1;
	val = win;
	if (!bpf_setsockopt(skops, SOL_TCP, TCP_WINDOW_CLAMP_OPT, &val, sizeof(val)))
		rx->clamp = val;
	return 1;
}

#endif /* HBM_RXWIN_H */
