/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The group's per-flow share: what each TCP flow of a limited group may send,
 * in payload bytes per second. The assists turn it into a pacing cap (egress,
 * pacing.h) or a receive-window clamp (ingress, rxwin.h).
 *
 * Why: marks, the congestion code and drops cannot hold a TCP flow below
 * about two segments per RTT (cwnd does not go below 2; a flow with fewer
 * than 2 packets out must not be dropped or it waits for its probe timer).
 * On a veth RTT of tens of microseconds that floor is about 1 Gbit/s per
 * flow, so a group of N flows escapes any limit below N x 1 Gbit/s unless
 * each flow is held to its share by pacing. Measured (docs/design.md): a
 * static cap of limit/N holds 16-128 cubic and bbr flows at 1.00-1.01.
 *
 * Two parts, both under the queue's lock:
 *  - The flow count N: TCP flows that sent in the last window. A flow is
 *    counted once per window (its per-level slot in hbm_sock.seen holds the
 *    window number). The window lasts two of a flow's sending gaps at its
 *    share, within [250 ms, 4 s], so a flow held to a small share is still
 *    seen. A gap is the group's largest TCP packet at limit/N: below 512 us
 *    of min RTT (tcp_tso_rtt_log) TCP sends 64 KB TSO packets whatever its
 *    pacing rate, so 128 flows held to 1.6 Mbit/s each send one every 250
 *    ms (measured; docs/design.md). A flow that stops is forgotten within
 *    two windows (the share loop lifts the share off a stale floor within
 *    a few intervals), and a new one counts at once.
 *  - The share, after RCP: a multiple m of the fair share (the bulk room
 *    over N, so that a change in N acts at once). Every control interval
 *    (share_interval) the loop measures what the group sent, y, and scales
 *    m by target / y, where target is the rate less what drains the backlog
 *    above pace_target_ns in SHARE_DRAIN_NS. Flows that send less than the
 *    share (RPCs) leave it to the others. The share stays within
 *    [fair - 1/64, limit]: at the fair share the N flows together send the
 *    limit, so the group is neither starved (BBR spirals down under lower
 *    floors) nor let over it by its number of connections.
 * Shares are in payload bytes, the unit TCP paces in; the limit counts wire
 * bytes (headers of every segment), so the floor is scaled by the measured
 * payload / wire ratio of the group's TCP traffic.
 */
#ifndef HBM_SHARE_H
#define HBM_SHARE_H

#include "hbm.h"

#define SHARE_INTERVAL_NS   1000000ULL   /* control interval, at least ... */
#define SHARE_INTERVAL_PKTS 128          /* ... and the time of this many full packets */
#define SHARE_DRAIN_NS      4000000ULL   /* drain the backlog above target in this */
#define SHARE_Q             16           /* fixed-point shift of the correction ratio */
#define SHARE_GAIN_DEN      4            /* move 1/4 of the way per interval */
#define SHARE_RATIO_SHIFT   1
#define SHARE_RATIO_MAX     ((1ULL << SHARE_Q) << SHARE_RATIO_SHIFT) /* ratio at most 2 ... */
#define SHARE_RATIO_MIN     ((1ULL << SHARE_Q) >> SHARE_RATIO_SHIFT) /* ... and at least 1/2 */
#define SHARE_RATIO_MIN_OVER ((1ULL << SHARE_Q) >> 3) /* down per interval over the drop threshold */
#define SHARE_MUL_MIN       ((1ULL << SHARE_Q) - (1ULL << (SHARE_Q - 6))) /* 63/64 */
#define FLOW_WINDOW_MIN_NS  250000000ULL  /* flow-count window bounds */
#define FLOW_WINDOW_MAX_NS  4000000000ULL
#define FLOW_WINDOW_GAPS    2                 /* window: this many sending gaps */
#define FLOW_GAP_MIN_BYTES  (2 * 1514ULL)     /* a gap is at least two full segments */
#define PAYLOAD_Q16_DEFAULT 63250        /* 1448 / 1500 in 16-bit fixed point */
/* Fresh bursts together may take at most 7/8 of a group's rate (bulk flows
 * keep an eighth): a group's budget, FRESH_BURST_BYTES deep, charged at
 * 8/7 of a packet's cost. */
#define FRESH_COST_NUM 8
#define FRESH_COST_DEN 7

/* share_flows is the group's flow count: the larger of the last window's and
 * the current one's, so a burst of new flows lowers the share at once. */
static __always_inline __u32 share_flows(const struct hbm_queue *q)
{
	__u32 n = q->flows > q->flows_now ? q->flows : q->flows_now;

	return n ? n : 1;
}

/* bulk_room is what the group's bulk flows share, in payload bytes/s: the
 * rate (payload part) less what fresh bursts (RPCs, policy.h) take, since
 * they go first, and never less than an eighth of it. */
static __always_inline __u64 bulk_room(const struct hbm_queue *q, __u64 rate)
{
	__u32 pq = q->payload_q16 ? q->payload_q16 : PAYLOAD_Q16_DEFAULT;
	__u64 ceil = rate * pq >> 16, fresh = q->fresh_Bps * pq >> 16;

	return fresh < ceil - (ceil >> 3) ? ceil - fresh : ceil >> 3;
}

/* flow_gap_ns is how long a flow of the group waits between its packets at
 * the fair share, bulk_room / N: the group's largest bulk TCP packet (at
 * least two full segments) at that share, at most FLOW_WINDOW_MAX_NS. */
static __always_inline __u64 flow_gap_ns(const struct hbm_queue *q, __u64 rate)
{
	__u64 pkt = q->pkt_max > q->pkt_max_now ? q->pkt_max : q->pkt_max_now, gap;
	__u64 room = bulk_room(q, rate);
	__u32 n = share_flows(q);

	if (pkt < FLOW_GAP_MIN_BYTES)
		pkt = FLOW_GAP_MIN_BYTES;
	if (!room)
		return FLOW_WINDOW_MAX_NS;
	/* pkt < 2^24 wire bytes (pkt.h bounds a packet): no product overflows. */
	gap = pkt * 1000000000ULL / room;
	if (gap >= FLOW_WINDOW_MAX_NS)
		return FLOW_WINDOW_MAX_NS;
	gap *= n > 65536 ? 65536 : n;
	return gap > FLOW_WINDOW_MAX_NS ? FLOW_WINDOW_MAX_NS : gap;
}

/* share_count counts the flow of socket state s (its slot for this group:
 * s->seen[lvl]) in this window, and its packet of pkt_wire bytes in the
 * window's largest (0: not a bulk packet), first closing the window if it
 * has run its course. Called with the queue locked; s may be NULL (not a
 * counted flow). */
static __always_inline void share_count(struct hbm_queue *q, const struct hbm_config *cfg,
					struct hbm_sock *s, __u32 lvl, __u32 pkt_wire, __u64 now)
{
	__u64 win = FLOW_WINDOW_GAPS * flow_gap_ns(q, cfg->rate_bps / 8);

	if (win < FLOW_WINDOW_MIN_NS)
		win = FLOW_WINDOW_MIN_NS;
	if (win > FLOW_WINDOW_MAX_NS)
		win = FLOW_WINDOW_MAX_NS;
	if ((__s64)(now - q->epoch_ns) >= (__s64)win) {
		/* A window skipped while idle counts as empty. */
		q->flows = now - q->epoch_ns < 2 * win ? q->flows_now : 0;
		q->flows_now = 0;
		q->pkt_max = q->pkt_max_now;
		q->pkt_max_now = 0;
		q->epoch++;
		q->epoch_ns = now;
	}
	lvl &= HBM_MAX_LEVELS - 1;
	if (pkt_wire > q->pkt_max_now)
		q->pkt_max_now = pkt_wire;
	if (s && s->seen[lvl] != q->epoch + 1) {
		s->seen[lvl] = q->epoch + 1;
		q->flows_now++;
	}
}

/* share_interval_pkts is the time of SHARE_INTERVAL_PKTS full packets at
 * rate bytes/s, within [1 ms, 64 ms]: long enough that what a group sends in
 * a control interval is not all or nothing (bursty senders, sparse ACKs). */
static __always_inline __u64 share_interval_pkts(__u64 rate)
{
	__u64 t = rate ? SHARE_INTERVAL_PKTS * 1514ULL * 1000000000ULL / rate : 0;

	if (t < SHARE_INTERVAL_NS)
		return SHARE_INTERVAL_NS;
	return t > 64 * SHARE_INTERVAL_NS ? 64 * SHARE_INTERVAL_NS : t;
}

/* share_interval is the control interval of the group at rate bytes/s:
 * share_interval_pkts, and at least a flow's sending gap (flow_gap_ns), because a
 * flow takes up a new share only at its next packet's ACK (pacing.h): a
 * loop faster than that acts on what it sees of a few flows and strews
 * shares it no longer means over the others (measured: 128 bbr flows at
 * 1.6 Mbit/s, one 64 KB packet each per 250 ms, held caps from 1.7 to 11
 * Mbit/s against a share of 1.5, and sent 1.2x the limit). */
static __always_inline __u64 share_interval(const struct hbm_queue *q, __u64 rate)
{
	__u64 t = share_interval_pkts(rate), gap = flow_gap_ns(q, rate);

	return gap > t ? gap : t;
}

/* share_update accounts a packet to the control interval and, when one ends,
 * corrects the group's share. Called with the queue locked. Bounds keep
 * products below 2^63: rates <= 5e10 bytes/s, the ratio <= 2^17, bytes per
 * interval <= 2^40 (dt is capped). */
static __always_inline void share_update(struct hbm_queue *q, const struct hbm_config *cfg,
					 const struct pkt *p, __s64 backlog, __u64 now)
{
	__u64 rate = cfg->rate_bps / 8, m = q->share_mul, dt, y, y_rpc, r, target, ratio, fair, ceil, c;
	__u32 pq = q->payload_q16 ? q->payload_q16 : PAYLOAD_Q16_DEFAULT;
	__s64 excess, left;
	int over;

	ceil = rate * pq >> 16;
	q->ctl_wire += p->wire_bytes;
	if (p->is_tcp) {
		q->ctl_tcp_wire += p->wire_bytes;
		q->ctl_tcp_payload += p->payload;
	}
	dt = now - q->ctl_ns;
	/* Over the drop threshold the group is far over its rate (a burst of
	 * new flows, or flows that lost their caps): correct at once, at the
	 * time of 128 packets, and all the way down. */
	over = backlog > (__s64)cfg->drop_large_ns;
	if ((__s64)dt >= (__s64)share_interval(q, rate) ||
	    (over && (__s64)dt >= (__s64)share_interval_pkts(rate))) {
		if (dt > 2 * FLOW_WINDOW_MAX_NS)
			dt = 2 * FLOW_WINDOW_MAX_NS; /* after idling: y is ~0 either way */
		y = q->ctl_wire * 1000000ULL / (dt / 1000); /* bytes/s; dt in us */
		if (q->ctl_tcp_wire > 64 * 1024 && q->ctl_tcp_payload <= q->ctl_tcp_wire)
			q->payload_q16 = (q->ctl_tcp_payload << 16) / q->ctl_tcp_wire;
		/* Halfway to this interval's rate of RPCs. */
		y_rpc = q->ctl_fresh * 1000000ULL / (dt / 1000);
		q->fresh_Bps = (q->fresh_Bps + y_rpc) / 2;
		q->ctl_fresh = 0;
		/* The RPC cap, after RCP too: RPCs together at most 7/8 of the rate. */
		r = q->rpc_Bps ? q->rpc_Bps : ceil;
		ratio = y_rpc ? ((rate * FRESH_COST_DEN / FRESH_COST_NUM) << SHARE_Q) / y_rpc : SHARE_RATIO_MAX;
		if (ratio > SHARE_RATIO_MAX)
			ratio = SHARE_RATIO_MAX;
		if (ratio < SHARE_RATIO_MIN)
			ratio = SHARE_RATIO_MIN;
		r = (r + ((r * ratio) >> SHARE_Q)) / 2;
		if (r > ceil)
			r = ceil;
		if (r < (ceil >> 6))
			r = ceil >> 6;
		q->rpc_Bps = r;
		q->ctl_ns = now;
		q->ctl_wire = 0;
		q->ctl_tcp_wire = 0;
		q->ctl_tcp_payload = 0;

		/* target = rate * (1 - excess / SHARE_DRAIN_NS), within [rate/16, 2 rate]. */
		excess = backlog - cfg->pace_target_ns;
		left = (__s64)SHARE_DRAIN_NS - excess;
		if (left < (__s64)(SHARE_DRAIN_NS >> 4))
			left = SHARE_DRAIN_NS >> 4;
		if (left > (__s64)(2 * SHARE_DRAIN_NS))
			left = 2 * SHARE_DRAIN_NS;
		target = rate * (__u64)left / SHARE_DRAIN_NS;
		ratio = y ? (target << SHARE_Q) / y : SHARE_RATIO_MAX;
		if (ratio > SHARE_RATIO_MAX)
			ratio = SHARE_RATIO_MAX;
		if (ratio < SHARE_RATIO_MIN)
			ratio = SHARE_RATIO_MIN;
		/* A quarter of the way to the computed rate: smooths the estimate.
		 * m <= 2^35 (below), ratio <= 2^17. */
		if (over && ratio < (1ULL << SHARE_Q))
			m = (m * (ratio < SHARE_RATIO_MIN_OVER ? SHARE_RATIO_MIN_OVER : ratio)) >> SHARE_Q;
		else
			m = (m * (SHARE_GAIN_DEN - 1) + ((m * ratio) >> SHARE_Q)) / SHARE_GAIN_DEN;
	}

	/* The share is a multiple m of the fair share, the bulk flows' room
	 * over their number: a change in the flow count moves the share at
	 * once; the loop above only corrects m for flows that send less than
	 * their share. */
	fair = bulk_room(q, rate) / share_flows(q);
	if (!fair)
		fair = 1;
	/* A 64th below the fair share at least: the share loop, not the floor,
	 * settles the group on its rate (at the floor the loop cannot pull it
	 * lower). */
	if (m < SHARE_MUL_MIN)
		m = SHARE_MUL_MIN;
	/* fair < 2^36 and m >> 16 < 2^19: products below 2^55. */
	c = fair * (m >> SHARE_Q) + ((fair * (m & ((1ULL << SHARE_Q) - 1))) >> SHARE_Q);
	if (c > ceil) {
		c = ceil;
		m = (ceil << SHARE_Q) / fair; /* < 2^35: fair >= ceil / 8 / 2^16 */
	}
	q->share_mul = m;
	q->share_Bps = c ? c : 1;
}

#endif /* HBM_SHARE_H */
