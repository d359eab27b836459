/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The policy: charge the packet to its group's virtual queue, then pass,
 * mark, return congestion or drop by how far the queue stands in time.
 *
 *   backlog <= mark             pass
 *   mark < backlog              ECT: CE. Non-ECT TCP (egress): congestion code
 *                               with probability rising linearly to 1 at
 *                               drop_large. Other traffic: pass.
 *   backlog > drop_large        large packets dropped
 *   backlog > drop_small        all packets dropped
 * Never dropped: anything under HBM_F_NO_DROP; on egress, TCP flows with
 * fewer than min_inflight packets out (the probe timer would stall them); on
 * ingress, what rx_protected() spares (the receiver's proxy for the same
 * rule). Dropped packets are not charged.
 *
 * Ingress can only signal the sender: no congestion code (the kernel ignores
 * bit 1 there), a drop is a real loss the sender must detect and repair. */
#ifndef HBM_POLICY_H
#define HBM_POLICY_H

#include "hbm.h"
#include "maps.h"
#include "pkt.h"
#include "vqueue.h"
#include "pacing.h"

/* Resolution of the cwr probability ramp. */
#define CWR_RAMP_STEPS 1024

/* tcp_protected reports whether dropping this egress TCP packet could leave
 * its flow with fewer than min_inflight packets out. */
static __always_inline int tcp_protected(struct __sk_buff *skb, const struct hbm_config *cfg)
{
	struct bpf_sock *sk = skb->sk;
	struct bpf_tcp_sock *tp;

	if (!sk)
		return 0;
	sk = bpf_sk_fullsock(sk);
	if (!sk)
		return 0;
	tp = bpf_tcp_sock(sk);
	return tp && tp->packets_out < cfg->min_inflight;
}

/* How long an ingress hole may stay open before the flow may be dropped
 * from again (the sender gave up, or the retransmission went elsewhere). */
#define RX_HOLE_TIMEOUT_NS 1000000000ULL

/* rx_protected reports whether dropping this ingress TCP packet could leave
 * its sender unable to see the loss quickly, or repeat a loss it is already
 * repairing. The receiver cannot read the sender's packets_out, so it uses
 * what it sees:
 *  - no payload (SYN, FIN, pure ACK): nothing to gain, and an ACK lost
 *    stalls the group's own sending;
 *  - PSH, FIN, RST: usually the last segment of a burst; nothing follows it
 *    to reveal its loss but the sender's loss-probe or retransmit timer;
 *  - an open hole: the flow already lost a packet to us and the receiver's
 *    rcv_nxt has not passed it. Its retransmission (and everything until it
 *    arrives) passes, so at most one loss per flow is outstanding and it is
 *    always followed by packets that reveal it (SACK, RACK). */
static __always_inline int rx_protected(struct __sk_buff *skb, const struct pkt *p, __u64 now)
{
	struct bpf_sock *sk = skb->sk;
	struct bpf_tcp_sock *tp;
	struct hbm_rx *rx;

	if (!p->payload || (p->tcp_flags & (TCPF_PSH | TCPF_FIN | TCPF_SYN | TCPF_RST)))
		return 1;
	if (!sk)
		return 0;
	sk = bpf_sk_fullsock(sk);
	if (!sk)
		return 0;
	tp = bpf_tcp_sock(sk);
	if (!tp)
		return 0;
	rx = bpf_sk_storage_get(&hbm_rx_map, sk, 0, 0);
	if (!rx || !rx->hole_ns)
		return 0;
	if ((__s32)(tp->rcv_nxt - rx->hole_end) < 0 && now - rx->hole_ns < RX_HOLE_TIMEOUT_NS)
		return 1;
	rx->hole_ns = 0; /* repaired (or given up on) */
	return 0;
}

/* rx_hole records that this ingress TCP packet was dropped. */
static __always_inline void rx_hole(struct __sk_buff *skb, const struct pkt *p, __u64 now)
{
	struct bpf_sock *sk = skb->sk;
	struct hbm_rx *rx;

	if (!sk)
		return;
	sk = bpf_sk_fullsock(sk);
	if (!sk)
		return;
	rx = bpf_sk_storage_get(&hbm_rx_map, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!rx)
		return;
	rx->hole_ns = now ? now : 1;
	rx->hole_end = p->seq + p->payload;
}

/* cwr_roll draws the congestion code with probability (backlog - mark) /
 * (drop_large - mark), 1 at and beyond drop_large. */
static __always_inline int cwr_roll(const struct hbm_config *cfg, __s64 backlog)
{
	__u64 excess = backlog - cfg->mark_ns;
	__u64 span = cfg->drop_large_ns - cfg->mark_ns;

	if (cfg->drop_large_ns <= cfg->mark_ns || excess >= span)
		return 1;
	return (bpf_get_prandom_u32() % CWR_RAMP_STEPS) < excess * CWR_RAMP_STEPS / span;
}

static __always_inline int hbm_police(struct __sk_buff *skb, __u64 cgroup_id, __u32 dir)
{
	struct hbm_key key = { .cgroup_id = cgroup_id, .dir = dir };
	const struct hbm_config *cfg;
	struct hbm_stats *st;
	struct hbm_queue *q;
	struct pkt p;
	__s64 backlog;
	__u64 now, cost;
	__u32 frac;
	int drop = 0, may_drop;

	cfg = bpf_map_lookup_elem(&hbm_limit_map, &key);
	if (!cfg || (!cfg->ns_per_byte && !cfg->ns_per_byte_frac) || (cfg->flags & HBM_F_RELEASE))
		return HBM_RET_PASS;
	if (!(cfg->flags & HBM_F_LOOPBACK) && skb->ifindex == LOOPBACK_IFINDEX)
		return HBM_RET_PASS;
	q = bpf_map_lookup_elem(&hbm_queue_map, &key);
	st = bpf_map_lookup_elem(&hbm_stats_map, &key);
	if (!q || !st)
		return HBM_RET_PASS;

	pkt_parse(skb, &p);
	now = bpf_ktime_get_ns();
	may_drop = !(cfg->flags & HBM_F_NO_DROP);
	if (may_drop && p.is_tcp) {
		if (dir == HBM_DIR_EGRESS && tcp_protected(skb, cfg))
			may_drop = 0;
		else if (dir == HBM_DIR_INGRESS && rx_protected(skb, &p, now))
			may_drop = 0;
	}

	bpf_spin_lock(&q->lock);
	backlog = vq_clamp(q, cfg, now);
	frac = q->frac;
	cost = cost_ns(cfg, p.wire_bytes, &frac);
	backlog += cost;
	if (may_drop && (backlog > (__s64)cfg->drop_small_ns ||
			 (p.len >= cfg->small_pkt_bytes && backlog > (__s64)cfg->drop_large_ns))) {
		drop = 1;
	} else {
		q->vtime_ns += cost;
		q->frac = frac;
		pace_update(q, cfg, backlog, now, p.wire_bytes);
	}
	bpf_spin_unlock(&q->lock);

	if (drop) {
		st->dropped += p.segs;
		st->dropped_bytes += p.wire_bytes;
		if (dir == HBM_DIR_INGRESS) {
			if (p.is_tcp)
				rx_hole(skb, &p, now);
			return HBM_RET_DROP;
		}
		/* Egress TCP learns of the drop at once and enters CWR. */
		return p.is_tcp ? HBM_RET_DROP_CN : HBM_RET_DROP;
	}
	st->packets += p.segs;
	st->bytes += p.wire_bytes;
	if (backlog <= (__s64)cfg->mark_ns)
		return HBM_RET_PASS;

	if (p.ecn != ECN_NOT_ECT) {
		/* Already CE: the path upstream marked it; nothing to add. */
		if (p.ecn != ECN_CE && bpf_skb_ecn_set_ce(skb))
			st->marked += p.segs;
		return HBM_RET_PASS;
	}
	if (p.is_tcp && dir == HBM_DIR_EGRESS && cwr_roll(cfg, backlog)) {
		st->cwr++;
		return HBM_RET_PASS_CN;
	}
	return HBM_RET_PASS;
}

#endif /* HBM_POLICY_H */
