// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * HBM's DCTCP: Data Center TCP (RFC 8257) as a BPF TCP congestion control
 * (struct_ops tcp_congestion_ops), registered under the name "dctcp" on
 * kernels built without tcp_dctcp. Behaviour follows the Linux module
 * (net/ipv4/tcp_dctcp.c):
 *
 *  - TCP_CONG_NEEDS_ECN: sockets request ECN on the handshake and send ECT(0).
 *  - Sender: once per window of data (snd_una passing the snd_nxt recorded
 *    at the window's start) alpha <- (1 - g) * alpha + g * F, g = 1/16, F
 *    the fraction of the window's delivered packets that came back marked.
 *    On ECE the kernel enters CWR (at most once per window) and asks
 *    ssthresh(): cwnd * (1 - alpha / 2). Loss halves cwnd, as Reno.
 *  - Receiver: the two-state CE machine; when the CE codepoint of arriving
 *    data flips, a delayed ACK still pending is sent at once with the old
 *    ECE value, and the next ACK goes out immediately (no delayed-ACK wait:
 *    the 40 ms / 200 ms tails of seed 001).
 *  - Without negotiated ECN the socket switches to reno (the module's
 *    dctcp-reno), which also stops it sending ECT.
 *
 * A second program, an iter/tcp socket iterator, reports per-socket alpha
 * for `hbm cc show` (BPF congestion controls cannot implement get_info, so
 * ss -i shows no dctcp details).
 */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "dctcp.h"

char _license[] SEC("license") = "Dual BSD/GPL";

/* Macros of the kernel headers that BTF (vmlinux.h) does not carry. */
#define TCP_CONG_NEEDS_ECN 0x2
#define TCP_ECN_MODE_RFC3168 (1U << 0)
#define TCP_ECN_DEMAND_CWR (1U << 2)
#define TCP_ECN_MODE_ACCECN (1U << 4)
#define TCP_ECN_MODE_ANY (TCP_ECN_MODE_RFC3168 | TCP_ECN_MODE_ACCECN)
#define TCP_INFINITE_SSTHRESH 0x7fffffffU
#define SOL_TCP 6
#define TCP_CONGESTION 13
#define AF_INET 2
#define AF_INET6 10

#define WRITE_ONCE(x, v) (*(volatile typeof(x) *)&(x) = (v))

/* The fallback when ECN was not negotiated. */
static const char reno[] = "reno";

/* Reno's window growth, exported to BPF congestion controls as kfuncs. */
extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;

static __always_inline struct tcp_sock *tcp_sk(const struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline struct inet_connection_sock *inet_csk(const struct sock *sk)
{
	return (struct inet_connection_sock *)sk;
}

static __always_inline struct hbm_dctcp *dctcp_ca(const struct sock *sk)
{
	return (struct hbm_dctcp *)inet_csk(sk)->icsk_ca_priv;
}

static __always_inline __u32 max_u32(__u32 a, __u32 b)
{
	return a > b ? a : b;
}

static __always_inline __u32 min_u32(__u32 a, __u32 b)
{
	return a < b ? a : b;
}

/* seq1 is before seq2, modulo 2^32. */
static __always_inline bool seq_before(__u32 seq1, __u32 seq2)
{
	return (__s32)(seq1 - seq2) < 0;
}

/* Start a new observation window: it ends when snd_nxt of now is acked. */
static __always_inline void window_reset(const struct tcp_sock *tp, struct hbm_dctcp *ca)
{
	ca->next_seq = tp->snd_nxt;
	ca->old_delivered = tp->delivered;
	ca->old_delivered_ce = tp->delivered_ce;
}

/*
 * Guard against impossible windows. On Linux 6.18 a BPF congestion control
 * under ECN marking occasionally finds snd_ssthresh holding a value no
 * callback returned (it is stack garbage: the low half of a kernel return
 * address, above TCP_INFINITE_SSTHRESH), and PRR then derives a garbage
 * cwnd from it (10^8..10^9 packets). The same happens with a minimal
 * Reno-like BPF congestion control, never with the built-in ones; see
 * docs/dctcp.md. Whatever the cause, a DCTCP sender must not run with such
 * a window: on each callback, an ssthresh above TCP_INFINITE_SSTHRESH is
 * recomputed as ssthresh() would have from the cwnd at the reduction
 * (prior_cwnd), and a cwnd more than twice anything it has legitimately
 * been (our last view of it, or the cwnd before the last cut) falls back.
 */
static __always_inline void repair_window(struct tcp_sock *tp, struct hbm_dctcp *ca)
{
	__u32 ref = max_u32(max_u32(ca->last_cwnd, ca->loss_cwnd), 2);
	__u32 cwnd = tp->snd_cwnd, base;

	if (tp->snd_ssthresh > TCP_INFINITE_SSTHRESH) {
		base = tp->prior_cwnd;
		if (!base || base > 2 * ref + 16)
			base = ref;
		tp->snd_ssthresh = max_u32(base - ((base * ca->alpha) >> 11), 2);
		ca->repairs++;
	}
	if (cwnd > 2 * ref + 16) {
		tp->snd_cwnd = max_u32(min_u32(ref, tp->snd_ssthresh), 2);
		ca->repairs++;
	}
	ca->last_cwnd = tp->snd_cwnd;
}

SEC("struct_ops/dctcp_init")
void BPF_PROG(dctcp_init, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct hbm_dctcp *ca = dctcp_ca(sk);
	__u8 state = sk->__sk_common.skc_state;

	if (!(tp->ecn_flags & TCP_ECN_MODE_ANY) && state != TCP_LISTEN && state != TCP_CLOSE) {
		/*
		 * The peer did not negotiate ECN: behave as Reno. Switching the
		 * socket to reno also makes the kernel stop sending ECT, which
		 * DCTCP's NEEDS_ECN flag turned on for the handshake. The kernel
		 * allows exactly this one switch from init; if it fails anyway,
		 * stay here and act as Reno (alpha pinned at 1: cuts are halvings).
		 */
		if (bpf_setsockopt(sk, SOL_TCP, TCP_CONGESTION, (void *)reno, sizeof(reno)) == 0)
			return; /* the private area now belongs to reno */
		ca->flags = DCTCP_F_RENO;
	} else {
		ca->flags = 0;
	}

	ca->prior_rcv_nxt = tp->rcv_nxt;
	/* Start from alpha = 1 (RFC 8257 section 3.3): the first cut halves. */
	ca->alpha = DCTCP_MAX_ALPHA;
	ca->loss_cwnd = 0;
	ca->ce_state = 0;
	ca->magic = DCTCP_MAGIC;
	ca->last_cwnd = tp->snd_cwnd;
	ca->repairs = 0;
	window_reset(tp, ca);
}

/* ECE received (the kernel calls this once per window, entering CWR) or loss. */
SEC("struct_ops/dctcp_ssthresh")
__u32 BPF_PROG(dctcp_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct hbm_dctcp *ca = dctcp_ca(sk);
	__u32 cwnd;

	repair_window(tp, ca);
	cwnd = tp->snd_cwnd;
	ca->loss_cwnd = cwnd;
	/* cwnd * (1 - alpha/2), alpha scaled by 1024: cwnd - cwnd*alpha/2048. */
	return max_u32(cwnd - ((cwnd * ca->alpha) >> 11), 2);
}

/* Every ACK: close the window once snd_una passed its end, update alpha. */
SEC("struct_ops/dctcp_update_alpha")
void BPF_PROG(dctcp_update_alpha, struct sock *sk, __u32 flags)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct hbm_dctcp *ca = dctcp_ca(sk);
	__u32 alpha, delivered, delivered_ce, decay;

	repair_window(tp, ca);
	if (ca->flags & DCTCP_F_RENO)
		return;
	if (seq_before(tp->snd_una, ca->next_seq))
		return;

	delivered_ce = tp->delivered_ce - ca->old_delivered_ce;
	alpha = ca->alpha;

	/* alpha -= g * alpha, but let a small alpha still reach zero. */
	decay = alpha >> DCTCP_SHIFT_G;
	alpha -= decay ? decay : alpha;

	if (delivered_ce) {
		delivered = max_u32(tp->delivered - ca->old_delivered, 1);
		/* alpha += g * F = (ce / delivered) * 1024 / 16, no overflow for g = 1/16 */
		delivered_ce <<= 10 - DCTCP_SHIFT_G;
		alpha = min_u32(alpha + delivered_ce / delivered, DCTCP_MAX_ALPHA);
	}
	/* A single aligned store: the iterator may read it concurrently. */
	WRITE_ONCE(ca->alpha, alpha);
	window_reset(tp, ca);
}

static __always_inline void react_to_loss(struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct hbm_dctcp *ca = dctcp_ca(sk);

	repair_window(tp, ca);
	ca->loss_cwnd = tp->snd_cwnd;
	tp->snd_ssthresh = max_u32(tp->snd_cwnd >> 1, 2);
}

SEC("struct_ops/dctcp_state")
void BPF_PROG(dctcp_state, struct sock *sk, __u8 new_state)
{
	__u8 old = BPF_CORE_READ_BITFIELD(inet_csk(sk), icsk_ca_state);

	/*
	 * Entering fast recovery: a loss, halve as Reno does (ssthresh() alone
	 * would cut by alpha/2). An RTO is handled in cwnd_event, so that only
	 * one loss reduction happens per window.
	 */
	if (new_state == TCP_CA_Recovery && new_state != old)
		react_to_loss(sk);
}

static __always_inline void set_demand_cwr(struct tcp_sock *tp, __u32 ce_state)
{
	if (ce_state)
		tp->ecn_flags |= TCP_ECN_DEMAND_CWR;
	else
		tp->ecn_flags &= ~TCP_ECN_DEMAND_CWR;
}

/*
 * Receiver side CE state machine (RFC 8257 section 3.2): ACKs carry ECE
 * exactly while the data they acknowledge was CE-marked. When the CE state
 * of arriving data flips:
 *  - a delayed ACK still pending covers data of the old state: send it now,
 *    with the old ECE value, for the old rcv_nxt;
 *  - ACK the new segment at once (ICSK_ACK_NOW, what the module does since
 *    it stopped using tcp_enter_quickack_mode).
 */
static __always_inline void ce_state_update(struct sock *sk, struct hbm_dctcp *ca, __u32 new_ce)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct inet_connection_sock *icsk = inet_csk(sk);

	if (ca->ce_state != new_ce) {
		if (icsk->icsk_ack.pending & ICSK_ACK_TIMER) {
			set_demand_cwr(tp, ca->ce_state);
			bpf_tcp_send_ack(tp, ca->prior_rcv_nxt);
		}
		icsk->icsk_ack.pending |= ICSK_ACK_NOW;
	}
	ca->prior_rcv_nxt = tp->rcv_nxt;
	ca->ce_state = new_ce;
	set_demand_cwr(tp, new_ce);
}

SEC("struct_ops/dctcp_cwnd_event")
void BPF_PROG(dctcp_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	struct hbm_dctcp *ca = dctcp_ca(sk);

	switch (ev) {
	case CA_EVENT_ECN_IS_CE:
		ce_state_update(sk, ca, 1);
		break;
	case CA_EVENT_ECN_NO_CE:
		ce_state_update(sk, ca, 0);
		break;
	case CA_EVENT_LOSS: /* RTO */
		react_to_loss(sk);
		break;
	default:
		break;
	}
}

/* Undo of a spurious reduction: back to the cwnd before it. */
SEC("struct_ops/dctcp_cwnd_undo")
__u32 BPF_PROG(dctcp_cwnd_undo, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct hbm_dctcp *ca = dctcp_ca(sk);
	__u32 cwnd;

	repair_window(tp, ca);
	cwnd = max_u32(tp->snd_cwnd, ca->loss_cwnd);
	ca->last_cwnd = cwnd;
	return cwnd;
}

/* Window growth is Reno's: slow start, then one segment per RTT. */
SEC("struct_ops/dctcp_cong_avoid")
void BPF_PROG(dctcp_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct hbm_dctcp *ca = dctcp_ca(sk);

	repair_window(tp, ca);
	tcp_reno_cong_avoid(sk, ack, acked);
	ca->last_cwnd = tp->snd_cwnd;
}

SEC(".struct_ops.link")
struct tcp_congestion_ops dctcp = {
	.init = (void *)dctcp_init,
	.in_ack_event = (void *)dctcp_update_alpha,
	.cwnd_event = (void *)dctcp_cwnd_event,
	.ssthresh = (void *)dctcp_ssthresh,
	.cong_avoid = (void *)dctcp_cong_avoid,
	.undo_cwnd = (void *)dctcp_cwnd_undo,
	.set_state = (void *)dctcp_state,
	.flags = TCP_CONG_NEEDS_ECN,
	.name = "dctcp",
};

/*
 * Socket iterator for diagnostics: one struct dctcp_sock_info per TCP socket
 * (of the reader's network namespace) whose congestion control is "dctcp".
 */
SEC("iter/tcp")
int dctcp_sockets(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	const struct tcp_congestion_ops *ops;
	struct dctcp_sock_info rec = {};
	struct hbm_dctcp ca = {};
	struct tcp_sock *tp;
	char name[16];

	if (!skc)
		return 0;
	tp = bpf_skc_to_tcp_sock(skc);
	if (!tp)
		return 0; /* request or timewait socket */

	ops = tp->inet_conn.icsk_ca_ops;
	if (!ops || bpf_probe_read_kernel_str(name, sizeof(name), ops->name) < 0)
		return 0;
	if (name[0] != 'd' || name[1] != 'c' || name[2] != 't' || name[3] != 'c' ||
	    name[4] != 'p' || name[5] != 0)
		return 0;

	bpf_probe_read_kernel(&ca, sizeof(ca), &tp->inet_conn.icsk_ca_priv);

	rec.cookie = bpf_get_socket_cookie(tp);
	rec.family = skc->skc_family;
	if (rec.family == AF_INET) {
		bpf_probe_read_kernel(rec.saddr, 4, &skc->skc_rcv_saddr);
		bpf_probe_read_kernel(rec.daddr, 4, &skc->skc_daddr);
	} else {
		bpf_probe_read_kernel(rec.saddr, 16, &skc->skc_v6_rcv_saddr);
		bpf_probe_read_kernel(rec.daddr, 16, &skc->skc_v6_daddr);
	}
	rec.sport = skc->skc_num;
	rec.dport = bpf_ntohs(skc->skc_dport);
	rec.state = skc->skc_state;
	rec.ca_state = BPF_CORE_READ_BITFIELD(&tp->inet_conn, icsk_ca_state);
	rec.uid = ctx->uid;
	rec.alpha = ca.magic == DCTCP_MAGIC ? ca.alpha : 0xffffffff;
	rec.ce_state = ca.ce_state;
	rec.dctcp_flags = ca.flags;
	rec.ecn_flags = tp->ecn_flags;
	rec.snd_cwnd = tp->snd_cwnd;
	rec.snd_ssthresh = tp->snd_ssthresh;
	rec.srtt_us = tp->srtt_us >> 3;
	rec.mss = tp->mss_cache;
	rec.delivered = tp->delivered;
	rec.delivered_ce = tp->delivered_ce;
	rec.total_retrans = tp->total_retrans;
	rec.repairs = ca.repairs;

	bpf_seq_write(ctx->meta->seq, &rec, sizeof(rec));
	return 0;
}
