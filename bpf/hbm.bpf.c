// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* HBM's data plane: one object, loaded once and pinned, whose programs serve
 * every limited group.
 *
 * hbm_egress, hbm_ingress (cgroup_skb) are attached to the topmost limited
 * groups only (user space keeps it so: a limited group below an attached one
 * is served by its ancestor's attachment), so each packet runs each program
 * once; it finds the limits on its socket's cgroup path itself (policy.h).
 * hbm_egress is loaded with the egress expected attach type so that it may
 * return the congestion code (values 2 and 3).
 * hbm_pace_ops, hbm_rxwin_ops (sockops) are the assists (pacing.h, rxwin.h),
 * attached beside them. hbm_sockets (iter/tcp) is the socket walker. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "hbm.h"
#include "maps.h"
#include "policy.h"
#include "gate.h"
#include "pacing.h"
#include "rxfresh.h"
#include "rxwin.h"
#include "sockets.h"

/* verdict_start parses the packet and returns its TCP socket (full socket
 * and its TCP view), if it has one: NULL for anything else. */
static __always_inline struct bpf_sock *verdict_start(struct __sk_buff *skb, struct verdict *v,
						      struct bpf_tcp_sock **tp)
{
	struct bpf_sock *sk = skb->sk;

	pkt_parse(skb, &v->p);
	v->now = bpf_ktime_get_ns();
	*tp = NULL;
	if (!sk || !v->p.is_tcp)
		return NULL;
	sk = bpf_sk_fullsock(sk);
	if (sk)
		*tp = bpf_tcp_sock(sk);
	return sk;
}

SEC("cgroup_skb/egress")
int hbm_egress(struct __sk_buff *skb)
{
	struct verdict v = { .dir = HBM_DIR_EGRESS, .packets_out = ~0U };
	struct hbm_listen_key lk = {};
	struct hbm_sock *s = NULL;
	struct bpf_tcp_sock *tp;
	struct bpf_sock *sk;

	sk = verdict_start(skb, &v, &tp);
	if (sk && sk->state == BPF_TCP_LISTEN) {
		/* A SYN-ACK (the hook names its listener): gate.h. */
		if (v.p.tcp_flags & TCPF_SYN)
			v.gate = gate_synack(skb, sk, v.now, &lk);
	} else if (sk) {
		if (tp)
			v.packets_out = tp->packets_out;
		/* An active open's first SYN, timed by the gate: gate.h. */
		if (tp && (v.p.tcp_flags & TCPF_SYN)) {
			s = bpf_sk_storage_get(&hbm_flow_map, sk, 0, 0);
			if (s && s->syn_gated) {
				s->syn_gated = 0;
				v.gate = 1;
			}
			s = NULL;
		}
		/* Assist state for TCP sockets that send data. */
		if (tp && v.p.payload)
			s = bpf_sk_storage_get(&hbm_flow_map, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
		if (s) {
			__u32 t = v.now >> XFER_TIME_SHIFT;

			/* The first packet after idle (pacing.h clears burst)
			 * begins a transfer (share.h). */
			if (!s->burst) {
				s->burst = 1;
				s->xfer_start = t;
				s->xfer_rcv = (__u32)tp->bytes_received;
			}
			v.xfer = t - s->xfer_start < xfer_time_of(s);
			/* TCP paces none of a connection's first segments,
			 * nor the packet after them (no earlier packet set
			 * its send time), and the one after that only half
			 * (the first's gap gets TCP's pacing credit: its
			 * last send time is the connection's start): what no
			 * share holds. */
			v.candidate = s->tx_paced < 2;
			if (v.candidate && tp->data_segs_out - v.p.segs >= TCP_UNPACED_SEGS)
				s->tx_paced++;
			v.held = flow_held(s, v.candidate);
			v.counted = 1;
		}
	}
	if (v.p.is_tcp) {
		v.protected = tx_protected(&v.p, v.held);
		/* Not a pure ACK: the code slows no ACK (what arrives clocks
		 * them) and cuts the socket's cwnd for the data it sends
		 * next (policy.h, signal_spared). */
		v.cn_able = v.p.payload != 0;
	}
	police_path(skb, &v, s);
	verdict_learn(s, &v);
	if (lk.port && !v.drop)
		gate_learn(&lk, &v);
	if (v.drop)
		return HBM_RET_DROP_CN;
	return v.cn ? HBM_RET_PASS_CN : HBM_RET_PASS;
}

SEC("cgroup_skb/ingress")
int hbm_ingress(struct __sk_buff *skb)
{
	/* RPC bursts go first (rxfresh.h); a mark-only limit reaches a flow
	 * only by CE. */
	struct verdict v = { .dir = HBM_DIR_INGRESS, .packets_out = ~0U, .first = 1, .ce_only = 1 };
	struct bpf_tcp_sock *tp;
	struct hbm_sock *s = NULL;
	struct bpf_sock *sk;

	sk = verdict_start(skb, &v, &tp);
	if (sk) {
		if (tp && v.p.payload)
			s = bpf_sk_storage_get(&hbm_rx_map, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
		if (s && tp) {
			v.counted = 1;
			v.fresh = v.candidate = rx_fresh(&v.p, tp->data_segs_out, s);
			/* Sticky: cubic's ECN leaves retransmissions Not-ECT. */
			if (v.p.ecn != ECN_NOT_ECT)
				s->rx_ect = 1;
			v.ect = s->rx_ect;
			v.at_floor = rxwin_at_floor(s, tp->mss_cache);
		}
	}
	if (v.p.is_tcp)
		v.protected = rx_protected(&v.p, tp, s, v.now);
	police_path(skb, &v, s);
	verdict_learn(s, &v);
	if (s && v.candidate)
		s->fresh_room = v.fresh;
	if (!v.drop)
		return HBM_RET_PASS;
	if (s) {
		s->hole_ns = v.now ? v.now : 1;
		s->hole_end = v.p.seq + v.p.payload;
	}
	return HBM_RET_DROP;
}

SEC("sockops")
int hbm_pace_ops(struct bpf_sock_ops *skops)
{
	return hbm_pace(skops);
}

SEC("sockops")
int hbm_rxwin_ops(struct bpf_sock_ops *skops)
{
	return hbm_rxwin(skops);
}

SEC("iter/tcp")
int hbm_sockets(struct bpf_iter__tcp *ctx)
{
	return hbm_walk(ctx);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
