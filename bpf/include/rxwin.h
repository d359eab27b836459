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
 * advertised; it stops it from opening further. A lower clamp follows the
 * window already advertised down as it drains (rxwin_descend): within a
 * round trip, not at once, so that no ACK waits for it. Marks and drops
 * stay as the backstop.
 *
 * Two guards keep the window from opening on a flow that does not use it
 * (measured with iperf3 and sockperf into a shallow port, docs/design.md,
 * "The window grows only as it is used"): the share loop raises a group's
 * share while its flows send less than the rate (share.h), up to the whole
 * rate per flow when CPU-starved senders cannot fill even two segments, and
 * the receiver's RTT estimate has the 1 ms grain of TCP timestamps. A flow
 * whose window was sized on both then opened it to 100-800 KB at once, and
 * eight of them overflowed the port. So:
 *  - the window's RTT is the least estimate of the last second (rxwin_rtt_us):
 *    a 1 ms timestamp sample, or the time to receive a window the flow did
 *    not fill, no longer sizes it;
 *  - the window is at most twice what the flow delivered per RTT in its last
 *    two intervals (rxwin_use), as cwnd grows only while it is used (RFC
 *    7661): a wound-up share opens it one doubling per interval, and only
 *    as far as the flow keeps up. Per RTT as the kernel estimates it now,
 *    not the least one: on a path whose queue (not this flow's) holds the
 *    RTT above twice its minimum, a cap on the least RTT would shrink the
 *    window round after round, down to the floor.
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
#define RXWIN_MSS_DEFAULT 1448 /* a socket's mss before it has one */
#define RXWIN_MIN_RTT_US 20 /* RTT floor of the window estimate */
#define RXWIN_RTT_WIN_NS 1000000000ULL /* the window's RTT: least estimate in this long */
#define RXWIN_USE_MIN_NS 1000000ULL    /* a use interval: an RTT, at least this */
#define RXWIN_RTT_MAX_US 4000000ULL    /* products below 2^63 (rxwin_use) */

/* rxwin_mss is a socket's mss_cache, or the usual one while it has none. */
static __always_inline __u32 rxwin_mss(__u32 mss_cache)
{
	return mss_cache ? mss_cache : RXWIN_MSS_DEFAULT;
}

/* rxwin_at_floor reports whether the assist holds the socket (state s,
 * mss_cache) at its floor, within a segment: CE could not slow it further
 * (policy.h leaves it unmarked). */
static __always_inline int rxwin_at_floor(const struct hbm_sock *s, __u32 mss_cache)
{
	return s->applied && s->applied <= (RXWIN_MIN_MSS + 1) * rxwin_mss(mss_cache);
}

/* rxwin_rtt_us is the RTT the window is sized on: the least of the
 * receiver's estimates over the last RXWIN_RTT_WIN_NS (two halves). */
static __always_inline __u64 rxwin_rtt_us(struct hbm_sock *s, __u64 rtt, __u64 now)
{
	if (!s->rtt_min_ns || now - s->rtt_min_ns >= RXWIN_RTT_WIN_NS / 2) {
		s->rtt_min_prev_us = s->rtt_min_ns && now - s->rtt_min_ns < RXWIN_RTT_WIN_NS ? s->rtt_min_us : rtt;
		s->rtt_min_us = rtt;
		s->rtt_min_ns = now;
	} else if (rtt < s->rtt_min_us) {
		s->rtt_min_us = rtt;
	}
	return s->rtt_min_us < s->rtt_min_prev_us ? s->rtt_min_us : s->rtt_min_prev_us;
}

/* rxwin_use returns the most window the flow may have: twice what it
 * delivered per RTT (rtt_us) in the better of its last two use intervals.
 * rcv_nxt is the socket's. */
static __always_inline __u64 rxwin_use(struct hbm_sock *s, __u32 rcv_nxt, __u64 rtt_us, __u64 now)
{
	__u64 iv = rtt_us * 1000, dt = now - s->use_ns, got, used;

	if (iv < RXWIN_USE_MIN_NS)
		iv = RXWIN_USE_MIN_NS;
	if (!s->use_ns) {
		s->use_ns = now;
		s->use_seq = rcv_nxt;
	} else if (dt >= iv) {
		got = (__u32)(rcv_nxt - s->use_seq);
		if (got > 0x7fffffffULL)
			got = 0; /* rcv_nxt never goes back: a bad start */
		/* got < 2^31, rtt_us <= RXWIN_RTT_MAX_US < 2^22 */
		used = got * rtt_us / (dt / 1000 ? dt / 1000 : 1);
		s->used_prev = s->used;
		s->used = used > RXWIN_MAX ? RXWIN_MAX : used;
		s->use_ns = now;
		s->use_seq = rcv_nxt;
	}
	used = s->used > s->used_prev ? s->used : s->used_prev;
	return 2 * used;
}

/* rxwin_bytes is the window clamp (bytes) of a receiving socket with state s
 * (its want_Bps set): want x the least recent RTT, at most what the flow
 * uses (rxwin_use), at least RXWIN_MIN_MSS segments, and an RPC socket's
 * open window (rxfresh.h). rtt_us is the kernel's current estimate, mss,
 * rcv_nxt and segs_out the socket's, now bpf_ktime_get_ns(). Updates s. */
static __always_inline __u64 rxwin_bytes(struct hbm_sock *s, __u64 rtt_us, __u32 mss, __u32 rcv_nxt,
					 __u32 segs_out, __u64 now)
{
	__u64 rtt, win, use, rpc_bytes;

	if (rtt_us > RXWIN_RTT_MAX_US)
		rtt_us = RXWIN_RTT_MAX_US;
	rtt = rxwin_rtt_us(s, rtt_us, now);
	if (rtt < RXWIN_MIN_RTT_US)
		rtt = RXWIN_MIN_RTT_US;
	if (rtt_us < rtt)
		rtt_us = rtt;
	mss = rxwin_mss(mss);
	win = s->want_Bps * rtt / 1000000;
	use = rxwin_use(s, rcv_nxt, rtt_us, now);
	if (win > use)
		win = use;
	if (win < RXWIN_MIN_MSS * mss)
		win = RXWIN_MIN_MSS * mss;
	/* Small transfers first: an RPC socket's window stays open for a
	 * whole request (rxfresh.h). */
	rpc_bytes = rx_rpc_win_bytes(s, rcv_nxt, segs_out);
	if (win < rpc_bytes)
		win = rpc_bytes;
	return win > RXWIN_MAX ? RXWIN_MAX : win;
}

/* rxwin_descend is the clamp to set for a wanted clamp win (bytes), given
 * the socket's clamp now (cur) and the part of its last advertised window
 * the sender has not yet used (left: rcv_wup + rcv_wnd - rcv_nxt); cur when
 * there is nothing to set: win within 1/8 of cur (not worth a setsockopt),
 * or a lower win that the window left already covers. A raise is set at
 * once; a lower clamp no lower than left.
 *
 * Why no lower than left: the receiver ACKs at once only while the window
 * it would advertise now is at least the one it advertised last
 * (__tcp_ack_snd_check compares __tcp_select_window with rcv_wnd). A clamp
 * below that holds every ACK back until the application reads
 * (tcp_cleanup_rbuf), the delayed-ACK timer fires (40 ms) or the sender's
 * tail-loss probe comes back as a duplicate (2 x srtt + 2 jiffies: 8-12 ms
 * at HZ=250): on a shared CPU the probe came first, and an incast's probes
 * came back as duplicates (docs/design.md, Ingress, issue 24's sweep). The
 * ACK being sent (the clamp is set in its HDR_OPT_LEN callback) never
 * shrinks the window's right edge (tcp_select_window): it advertises
 * rcv_wnd = the larger of the clamp and left, each rounded up to the
 * window-scale unit. With the clamp at left that is left rounded up, which
 * the clamp itself rounds up to as well, so the next check holds.
 *
 * Why as low as left, each ACK: the window then shrinks by what arrived
 * since the last ACK (a unit or more per ACK, to win within one round
 * trip), however often the receiver ACKs. The first version kept a
 * segment and a scale unit above left: a receiver that ACKs every segment
 * (quick-ACK after CE marks: DCTCP, or any ECN flow the limit marks) then
 * never lowered its clamp at all, and ACKing every two segments the scale
 * unit's rounding held it too. A socket that opened its first burst's
 * 64 KB window kept 20 KB of it for a whole run while its share wanted 3
 * KB: one such socket took most of a 1gbit limit's drops, each drop's hole
 * let the rest of its window through (rx_protected), and the limit read
 * 1.2-3.7x on the wire (docs/design.md, "Drop storms"). The 1/8 is
 * measured on the wanted clamp, not the step: a step is often less. */
static __always_inline __u64 rxwin_descend(__u64 win, __u64 cur, __s32 left)
{
	if (win <= cur + (cur >> 3) && win + (win >> 3) >= cur)
		return cur;
	if (win >= cur)
		return win;
	if (left > 0 && win < (__u64)left)
		win = left;
	return win < cur ? win : cur;
}

static __always_inline int hbm_rxwin(struct bpf_sock_ops *skops)
{
	struct hbm_sock *s;
	struct bpf_sock *sk;
	struct tcp_sock *tp;
	__u64 rtt, win, cur;
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
	win = rxwin_bytes(s, rtt, skops->mss_cache, tp->rcv_nxt, tp->data_segs_out, bpf_ktime_get_ns());
	/* The socket's own clamp, not the one last set: receive autotuning
	 * raises the clamp with the receive buffer (tcp_rcv_space_adjust). */
	cur = tp->window_clamp;
	win = rxwin_descend(win, cur, (__s32)(tp->rcv_wup + tp->rcv_wnd - tp->rcv_nxt));
	if (win == cur)
		return 1;
	val = win;
	if (!bpf_setsockopt(skops, SOL_TCP, TCP_WINDOW_CLAMP_OPT, &val, sizeof(val))) {
		netns_note(tp);
		s->applied = val;
	}
	return 1;
}

#endif /* HBM_RXWIN_H */
