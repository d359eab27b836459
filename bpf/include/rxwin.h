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
 * Control: the ingress program writes each receiving socket's want (the
 * least per-flow share of its limited groups, share.h) on every packet. This
 * sockops program, called for every segment the socket sends, ACKs included
 * (BPF_SOCK_OPS_HDR_OPT_LEN_CB, asked for with
 * BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG; it runs in __tcp_transmit_skb before
 * tcp_select_window, so the clamp shapes the window of that very ACK),
 * clamps the socket's receive
 * window (TCP_WINDOW_CLAMP) to want x the flow's RTT, and at least
 * RXWIN_MIN_MSS segments. A window clamp never retracts a window already
 * advertised; it stops it from opening further, so the clamp takes hold
 * within an RTT. Marks and drops stay as the backstop.
 *
 * Not BPF_SOCK_OPS_PARSE_HDR_OPT_CB (the first version): the kernel runs it
 * only for slow-path segments, so a bulk stream received in order (header
 * prediction) kept its autotuned window in most runs. Reserving no option
 * space means the WRITE_HDR_OPT_CB itself is never called.
 */
#ifndef HBM_RXWIN_H
#define HBM_RXWIN_H

#include "assist.h"
#include "rxfresh.h"

#define RXWIN_MIN_MSS    2  /* never clamp below this many segments */
#define RXWIN_MIN_RTT_US 20 /* RTT floor of the window estimate */

static __always_inline int hbm_rxwin(struct bpf_sock_ops *skops)
{
	struct hbm_sock *s;
	struct bpf_sock *sk;
	struct tcp_sock *tp;
	__u64 rtt, win, mss, cur, rpc_bytes;
	__u32 val;

	switch (skops->op) {
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		/* Ask for a callback on every segment sent (each ACK). */
		bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags | BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG);
		return 1;
	case BPF_SOCK_OPS_HDR_OPT_LEN_CB:
		break;
	default:
		return 1;
	}
	sk = skops->sk;
	if (!sk)
		return 1;
	s = bpf_sk_storage_get(&hbm_rx_map, sk, 0, 0);
	if (!s)
		return 1;
	if (!s->want_Bps) {
		clamp_lift(skops, s); /* the limit went, or never assisted */
		return 1;
	}
	tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return 1;
	/* The flow's RTT as the receiver sees it: its own estimate of the data
	 * path (tcp_rcv_rtt_update: it follows a lower sample at once and a
	 * higher one by 1/8), srtt only until it has one. Not the larger of
	 * the two: an RPC server's srtt times its replies, whose ACK waits for
	 * the client's next request (delayed ACK, the client's think time):
	 * measured 2-4 ms against a data-path RTT of 0.2 ms on the seed's
	 * incast, which opened the 1 MB and 8 MB requests' windows to 64 KB. */
	rtt = tp->rcv_rtt_est.rtt_us >> 3;
	if (!rtt)
		rtt = skops->srtt_us >> 3;
	if (rtt < RXWIN_MIN_RTT_US)
		rtt = RXWIN_MIN_RTT_US;
	mss = skops->mss_cache ? skops->mss_cache : 1448;
	win = s->want_Bps * rtt / 1000000;
	if (win < RXWIN_MIN_MSS * mss)
		win = RXWIN_MIN_MSS * mss;
	/* Small transfers first: an RPC socket's window stays open for a
	 * whole request (rxfresh.h). */
	rpc_bytes = rx_rpc_win_bytes(s, tp->rcv_nxt, tp->data_segs_out);
	if (win < rpc_bytes)
		win = rpc_bytes;
	if (win > RXWIN_MAX)
		win = RXWIN_MAX;
	/* Skip the setsockopt unless the socket's clamp is off by more than
	 * 1/8. The socket's own, not the one last set: receive autotuning
	 * raises the clamp with the receive buffer (tcp_rcv_space_adjust). */
	cur = tp->window_clamp;
	if (win <= cur + (cur >> 3) && win + (win >> 3) >= cur)
		return 1;
	val = win;
	if (!bpf_setsockopt(skops, SOL_TCP, TCP_WINDOW_CLAMP_OPT, &val, sizeof(val))) {
		netns_note(tp);
		s->applied = val;
	}
	return 1;
}

#endif /* HBM_RXWIN_H */
