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
 *    window number). The window lasts about four of a flow's sending gaps at
 *    its share (two full segments at limit/N), within [250 ms, 500 ms], so a
 *    flow held to a small share is still seen (bbr flows at a few Mbit/s
 *    stall for 100+ ms between clumps: docs/design.md); a flow that stops is
 *    forgotten within two windows, and a new one counts at once.
 *  - The share, after RCP: every control interval (share_interval) it measures what the
 *    group sent, y, and scales the share by target / y, where target is the
 *    rate less what drains the backlog above pace_target_ns in SHARE_DRAIN_NS.
 *    Flows that send less than the share (RPCs) leave it to the others. The
 *    share stays within [limit/N - 1/64, limit]: at limit/N the N flows together
 *    send the limit, so the group is neither starved (BBR spirals down under
 *    lower floors) nor let over it by its number of connections.
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
#ifndef SHARE_GAIN_DEN
#define SHARE_GAIN_DEN      4
#endif
#ifndef SHARE_RATIO_SHIFT
#define SHARE_RATIO_SHIFT   1
#endif
#define SHARE_RATIO_MAX     ((1ULL << SHARE_Q) << SHARE_RATIO_SHIFT) /* at most 4x up ... */
#define SHARE_RATIO_MIN     ((1ULL << SHARE_Q) >> SHARE_RATIO_SHIFT) /* ... or down per interval */
#define FLOW_WINDOW_MIN_NS  250000000ULL  /* flow-count window bounds */
#define FLOW_WINDOW_MAX_NS  500000000ULL
#define FLOW_GAP_BYTES      (4 * 2 * 1514ULL) /* four gaps of two full segments */
#define PAYLOAD_Q16_DEFAULT 63250
/* Fresh bursts together may take at most 7/8 of a group's rate (bulk flows
 * keep an eighth): a group's budget, FRESH_BURST_BYTES deep, charged at
 * 8/7 of a packet's cost. */
#define FRESH_COST_NUM 8
#define FRESH_COST_DEN 7
#ifndef SHARE_FLOOR_SHIFT
#define SHARE_FLOOR_SHIFT 1
#endif        /* 1448 / 1500 in 16-bit fixed point */

/* share_flows is the group's flow count: the larger of the last window's and
 * the current one's, so a burst of new flows lowers the share at once. */
static __always_inline __u32 share_flows(const struct hbm_queue *q)
{
	__u32 n = q->flows > q->flows_now ? q->flows : q->flows_now;

	return n ? n : 1;
}

/* share_count counts the flow of socket state s (its slot for this group:
 * s->seen[lvl]) in this window, first closing the window if it has run its
 * course. Called with the queue locked; s may be NULL (not a counted flow). */
static __always_inline void share_count(struct hbm_queue *q, const struct hbm_config *cfg,
					struct hbm_sock *s, __u32 lvl, __u64 now)
{
	__u64 rate = cfg->rate_bps / 8, win;

	win = rate ? FLOW_GAP_BYTES * 1000000000ULL / rate : FLOW_WINDOW_MAX_NS;
	if (win >= FLOW_WINDOW_MAX_NS)
		win = FLOW_WINDOW_MAX_NS;
	else
		win *= share_flows(q) > 65536 ? 65536 : share_flows(q);
	if (win < FLOW_WINDOW_MIN_NS)
		win = FLOW_WINDOW_MIN_NS;
	if (win > FLOW_WINDOW_MAX_NS)
		win = FLOW_WINDOW_MAX_NS;
	if ((__s64)(now - q->epoch_ns) >= (__s64)win) {
		/* A window skipped while idle counts as empty. */
		q->flows = now - q->epoch_ns < 2 * win ? q->flows_now : 0;
		q->flows_now = 0;
		q->epoch++;
		q->epoch_ns = now;
	}
	lvl &= HBM_MAX_LEVELS - 1;
	if (s && s->seen[lvl] != q->epoch + 1) {
		s->seen[lvl] = q->epoch + 1;
		q->flows_now++;
	}
}

/* share_interval is the control interval at rate bytes/s: long enough for
 * SHARE_INTERVAL_PKTS full packets, so that what a group sends in one is not
 * all or nothing (bursty senders, sparse ACKs), within [1 ms, 64 ms]. */
static __always_inline __u64 share_interval(__u64 rate)
{
	__u64 t = rate ? SHARE_INTERVAL_PKTS * 1514ULL * 1000000000ULL / rate : 0;

	if (t < SHARE_INTERVAL_NS)
		return SHARE_INTERVAL_NS;
	return t > 64 * SHARE_INTERVAL_NS ? 64 * SHARE_INTERVAL_NS : t;
}

/* share_update accounts a packet to the control interval and, when one ends,
 * corrects the group's share. Called with the queue locked. Bounds keep
 * products below 2^63: rates <= 5e10 bytes/s, the ratio <= 2^20, bytes per
 * interval <= 2^40 (dt is capped). */
static __always_inline void share_update(struct hbm_queue *q, const struct hbm_config *cfg,
					 const struct pkt *p, __s64 backlog, __u64 now)
{
	__u64 rate = cfg->rate_bps / 8, c = q->share_Bps, dt, y, y_rpc, r, target, ratio, floor, ceil;
	__u32 pq = q->payload_q16 ? q->payload_q16 : PAYLOAD_Q16_DEFAULT;
	__s64 excess, left;

	ceil = rate * pq >> 16;
	/* A 64th below the fair share: the share loop, not the floor, settles
	 * the group on its rate (at the floor the loop cannot pull it lower). */
	/* Fresh bursts (RPCs, policy.h) go first: the bulk flows share what
	 * they leave, and never less than an eighth of the rate. */
	floor = q->fresh_Bps * pq >> 16;
	floor = floor < ceil - (ceil >> 3) ? ceil - floor : ceil >> 3;
	floor /= share_flows(q);
	floor -= floor >> 6;
	if (!c || c > ceil)
		c = ceil; /* new limit, or the rate was lowered */
	if (c < floor)
		c = floor; /* flows left */
	q->ctl_wire += p->wire_bytes;
	if (p->is_tcp) {
		q->ctl_tcp_wire += p->wire_bytes;
		q->ctl_tcp_payload += p->payload;
	}
	dt = now - q->ctl_ns;
	if ((__s64)dt < (__s64)share_interval(rate)) {
		q->share_Bps = c ? c : 1;
		return;
	}
	if (dt > 1000 * SHARE_INTERVAL_NS)
		dt = 1000 * SHARE_INTERVAL_NS; /* after idling: y is ~0 either way */
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
	/* Halfway to the computed rate: smooths the estimate. */
	c = (c * (SHARE_GAIN_DEN - 1) + ((c * ratio) >> SHARE_Q)) / SHARE_GAIN_DEN;
	if (c > ceil)
		c = ceil;
	if (c < floor)
		c = floor;
	q->share_Bps = c ? c : 1;
}

#endif /* HBM_SHARE_H */
