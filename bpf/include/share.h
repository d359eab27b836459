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
 *  - The flow count N: TCP flows that sent in the last window, each
 *    counted with its weight (egress: XFER_WEIGHT while the flow is in a
 *    transfer begun after it was idle, for XFER_TIME or twice its last
 *    transfer, 1 once it is bulk; ingress: 1). A flow is counted once per
 *    window (its per-level slot in hbm_sock.seen holds the window number
 *    and its class), and an egress flow that goes idle or closes leaves
 *    the count at once (share_depart, called by the pacing assist): a
 *    server's connections that live for milliseconds are not counted for
 *    a whole window after they finished (data plane v2 counted 100-200 flows where 32 were
 *    sending, and held a web server at 0.4-0.7 of its limit). The window lasts two of a flow's sending gaps at its
 *    share, within [250 ms, 4 s], so a flow held to a small share is still
 *    seen. A gap is the group's largest TCP packet at limit/N: below 512 us
 *    of min RTT (tcp_tso_rtt_log) TCP sends 64 KB TSO packets whatever its
 *    pacing rate, so 128 flows held to 1.6 Mbit/s each send one every 250
 *    ms (measured; docs/design.md). A flow that stops is forgotten within
 *    two windows (the share loop lifts the share off a stale floor within
 *    a few intervals), and a new one counts at once.
 *  - The share, after RCP: a multiple m of the fair share per unit of
 *    weight (the paced room over N, so that a change in N acts at once). Every control interval
 *    (share_interval) the loop measures what the group sent, y, and scales
 *    m by target / y, where target is the rate less what drains the backlog
 *    above pace_target_ns in SHARE_DRAIN_NS. Flows that send less than the
 *    share (RPCs) leave it to the others. The share stays within
 *    [fair - 1/64, limit]: at the fair share the N flows together send the
 *    limit, so the group is neither starved (BBR spirals down under lower
 *    floors) nor let over it by its number of connections.
 * Shares are in payload bytes, the unit TCP paces in; the limit counts wire
 * bytes (every segment's frame: pkt.h), so the floor is scaled by the measured
 * payload / wire ratio of the group's TCP traffic.
 */
#ifndef HBM_SHARE_H
#define HBM_SHARE_H

#include "hbm.h"
#include "vqueue.h"

#define SHARE_INTERVAL_NS   1000000ULL   /* control interval, at least ... */
#define SHARE_INTERVAL_PKTS 128          /* ... and the time of this many full packets */
#define SHARE_DRAIN_NS      4000000ULL   /* drain the backlog above target in this, */
#define SHARE_DRAIN_INTERVALS 4          /* ... on egress in this many control intervals at least */
#define SHARE_Q             16           /* fixed-point shift of the correction ratio */
#define SHARE_GAIN_SHIFT    2            /* move 1/4 of the way per interval ... */
#define SHARE_GAIN_SHIFT_EGRESS 4        /* ... on egress 1/16 (share_step) */
#define SHARE_RATIO_SHIFT   1
#define SHARE_RATIO_MAX     ((1ULL << SHARE_Q) << SHARE_RATIO_SHIFT) /* ratio at most 2 ... */
#define SHARE_RATIO_MIN     ((1ULL << SHARE_Q) >> SHARE_RATIO_SHIFT) /* ... and at least 1/2 */
#define SHARE_MUL_MIN       ((1ULL << SHARE_Q) - (1ULL << (SHARE_Q - 6))) /* 63/64 */
#define FLOW_WINDOW_MIN_NS  250000000ULL  /* flow-count window bounds */
#define FLOW_WINDOW_MAX_NS  4000000000ULL
#define FLOW_WINDOW_GAPS    2                 /* window: this many sending gaps */
#define FLOW_GAP_MIN_BYTES  (2 * 1514ULL)     /* a gap is at least two full segments */
#define PAYLOAD_Q16_DEFAULT 62679        /* 1448 / 1514 in 16-bit fixed point */
/* Ingress: fresh bursts together may take at most 7/8 of a group's rate
 * (bulk flows keep an eighth): a group's budget, FRESH_BURST_BYTES deep,
 * charged at 8/7 of a packet's cost. */
#define FRESH_COST_NUM 8
#define FRESH_COST_DEN 7

/* Egress transfers: a flow that began sending less than XFER_TIME ago after
 * it was last idle (everything it wrote acked) is in a transfer and weighs
 * XFER_WEIGHT bulk flows; past that it is bulk. Time, not bytes: N
 * streams starting together are bulk after XFER_TIME whatever their share
 * (4 MB at 1/128 of 200 Mbit/s would take 20 s). Small transfers go first
 * without a class of their own: a 10 KB request loop beside one stream
 * gets 8/9 of the group, beside 128 streams 8/136, and beside a 1 MB loop
 * and a stream as much as the 1 MB loop (data plane v2's RPC class took 7/8
 * of the rate for the 10 KB loop and left the 1 MB loop 6%). */
#define XFER_TIME_SHIFT 20  /* hbm_sock.xfer_start: bpf_ktime_get_ns() >> this (~1.05 ms) */
#define XFER_TIME       954 /* ~1 s in those units */
#define XFER_WEIGHT     8
/* ... and a flow whose last transfer took longer stays in its next one for
 * up to twice as long (XFER_TIME_LAST_MUL), at most XFER_TIME_MAX (~64 s).
 * Why: with one XFER_TIME for all, equal responses longer than it changed
 * class mid-response, and one that began while many others were in their
 * first second went at an eighth of their rate: 64 keep-alive clients of
 * 1 MB at 200mbit (2.7 s a response) had a P99 of 4.0 s against htb's 3.1
 * (a fluid model of the rule: 4.4 s, against 2.6 for equal shares). A
 * flow's last transfer is the length of the responses it serves, so a
 * keep-alive connection stays a transfer through each of its responses,
 * while a stream, busy since it began, is bulk after XFER_TIME as before. A
 * stream that goes idle once is a transfer again for up to twice what it had
 * been busy: beside other transfers it then shares equally, as under htb. A
 * server's new connection has no last transfer: its first takes its
 * listener's last connection's (hbm_listen.xfer_time, pacing.h). */
#define XFER_TIME_LAST_MUL 2
#define XFER_TIME_MAX   61035 /* ~64 s */

/* xfer_time_next is how long a flow's next transfer stays one, given that
 * its last took len (xfer_start's units). */
static __always_inline __u32 xfer_time_next(__u32 len)
{
	if (len >= XFER_TIME_MAX / XFER_TIME_LAST_MUL)
		return XFER_TIME_MAX;
	len *= XFER_TIME_LAST_MUL;
	return len > XFER_TIME ? len : XFER_TIME;
}

/* xfer_time_of is how long socket state s's current transfer stays one. */
static __always_inline __u32 xfer_time_of(const struct hbm_sock *s)
{
	return s->xfer_time ? s->xfer_time : XFER_TIME;
}
/* TCP never paces a connection's first segments (tcp_update_skb_after_send:
 * data_segs_out >= 10), so what it sends before that leaves at once
 * whatever its cap: the room of the paced flows is the rate less that. */
#define TCP_UNPACED_SEGS 10

/* hbm_sock.seen[lvl]: the window the flow was last counted in (+1, 28 bits),
 * its class then (1: transfer), whether it left since (idle or closed: it is
 * in the seen counts, not in the flow counts) and whether it is in the
 * last window's flow count as well. */
#define SEEN_WIN_MASK 0x07ffffffU
#define SEEN_IDLED    (1U << 27)  /* went idle in the window (q->idled_now) */
#define SEEN_XFER     (1U << 28)
#define SEEN_LEFT     (1U << 29)
#define SEEN_PREV_SEEN (1U << 30) /* in the last window's seen count */
#define SEEN_PREV     (1U << 31)  /* in the last window's flow count */

static __always_inline __u32 seen_weight(__u32 seen)
{
	return seen & SEEN_XFER ? XFER_WEIGHT : 1;
}

static __always_inline __u32 sat_sub(__u32 a, __u32 b)
{
	return a > b ? a - b : 0;
}

/* share_flows is the group's flow count: the larger of the last window's and
 * the current one's, so a burst of new flows lowers the share at once. The
 * current one's holds, on egress, the flows that went idle and have not
 * sent since (grace_w, halved every control interval): a keep-alive
 * connection's next response waits in its socket until its first packet's
 * pacing time, and counted from that packet only, the responses waiting
 * so raised the share of the others (measured: 128 keep-alive clients of
 * 3 KB at 50mbit, a sixth of the sockets at any time with their whole
 * response unsent, the count between 584 and 1,024 of 1,024 units from one
 * 17 ms sample to the next, the share with it, and a request P99 of 94 ms
 * against htb's 74; 88 with them counted: docs/design.md). A flow that
 * closes leaves at once. */
static __always_inline __u32 share_flows(const struct hbm_queue *q)
{
	__u32 now = q->flows_now + q->grace_w;
	__u32 n = q->flows > now ? q->flows : now;

	return n ? n : 1;
}

/* share_flows_seen is the weight of every flow that sent in the window,
 * those that left included: N flows that each send a 10 KB response and go
 * idle are rarely all counted in share_flows at once, yet together they
 * are N flows of the group. The share's floor rests on it. */
static __always_inline __u32 share_flows_seen(const struct hbm_queue *q)
{
	__u32 n = q->seen > q->seen_now ? q->seen : q->seen_now;

	return n ? n : 1;
}

/* bulk_room is what the group's paced flows share, in payload bytes/s: the
 * rate (payload part) less what no share can pace (egress: connections'
 * first segments; ingress: RPC bursts, which go first), and never less than
 * an eighth of it. */
static __always_inline __u64 bulk_room(const struct hbm_queue *q, __u64 rate)
{
	__u32 pq = q->payload_q16 ? q->payload_q16 : PAYLOAD_Q16_DEFAULT;
	__u64 ceil = rate * pq >> 16, fresh = q->fresh_Bps * pq >> 16;

	return fresh < ceil - (ceil >> 3) ? ceil - fresh : ceil >> 3;
}

/* flow_gap_ns is how long a flow of the group waits between its packets at
 * the fair share, bulk_room / N: the group's largest bulk TCP packet (at
 * least two full segments) at that share, at most FLOW_WINDOW_MAX_NS. */
static __always_inline __u64 flow_gap_ns(const struct hbm_queue *q, __u64 rate, __u32 n)
{
	__u64 pkt = q->pkt_max > q->pkt_max_now ? q->pkt_max : q->pkt_max_now, gap;
	__u64 room = bulk_room(q, rate);

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
 * s->seen[lvl]) in this window with its class (xfer: in a transfer, weight
 * XFER_WEIGHT, else 1), and its packet of pkt_wire bytes in the window's
 * largest (0: not a paced packet), first closing the window if it has run
 * its course. A flow whose class changed within the window is counted
 * again with its new weight. Called with the queue locked; s may be NULL
 * (not a counted flow). */
/* share_window_ns is the length of the flow-count window: two sending gaps
 * of a flow at the floor's share, so that a flow held there is still seen,
 * within [FLOW_WINDOW_MIN_NS, FLOW_WINDOW_MAX_NS]. */
static __always_inline __u64 share_window_ns(const struct hbm_queue *q, const struct hbm_config *cfg)
{
	__u64 win = FLOW_WINDOW_GAPS * flow_gap_ns(q, rate_bps(q, cfg) / 8, share_flows_seen(q));

	if (win < FLOW_WINDOW_MIN_NS)
		win = FLOW_WINDOW_MIN_NS;
	return win > FLOW_WINDOW_MAX_NS ? FLOW_WINDOW_MAX_NS : win;
}

/* share_count ... returns 1 if the counts the share rests on changed. */
static __always_inline int share_count(struct hbm_queue *q, const struct hbm_config *cfg,
				       struct hbm_sock *s, __u32 lvl, __u32 pkt_wire, int xfer,
				       __u64 now)
{
	__u64 win = q->win_len_ns ? q->win_len_ns : FLOW_WINDOW_MIN_NS;
	__u32 cur, w, e;
	int changed = 0, prev, prev_seen;

	if ((__s64)(now - q->epoch_ns) >= (__s64)win) {
		/* A window skipped while idle counts as empty. */
		q->flows = now - q->epoch_ns < 2 * win ? q->flows_now : 0;
		q->flows_now = 0;
		q->seen = now - q->epoch_ns < 2 * win ? q->seen_now : 0;
		q->seen_now = 0;
		q->bulk = q->bulk_now;
		q->bulk_now = 0;
		q->idled = q->idled_now;
		q->idled_now = 0;
		q->pkt_max = q->pkt_max_now;
		q->pkt_max_now = 0;
		/* Numbered past a skipped window too: a flow last counted
		 * before it is not in the last window's (emptied) counts. */
		q->epoch += now - q->epoch_ns < 2 * win ? 1 : 2;
		q->epoch_ns = now;
		q->win_len_ns = share_window_ns(q, cfg);
		changed = 1;
	}
	lvl &= HBM_MAX_LEVELS - 1;
	if (pkt_wire > q->pkt_max_now)
		q->pkt_max_now = pkt_wire;
	if (!s)
		return changed;
	e = (q->epoch + 1) & SEEN_WIN_MASK;
	if (!e)
		e = 1; /* 0 means not counted */
	cur = s->seen[lvl];
	w = xfer ? XFER_WEIGHT : 1;
	if (cur & SEEN_LEFT)
		q->grace_w = sat_sub(q->grace_w, seen_weight(cur)); /* back */
	if ((cur & SEEN_WIN_MASK) == e) {
		/* Counted in this window already: back from idle, or of
		 * another class now. */
		if (cur & SEEN_LEFT)
			q->flows_now += w;
		else if (!(cur & SEEN_XFER) == !xfer)
			return changed;
		else
			q->flows_now = sat_sub(q->flows_now, seen_weight(cur)) + w;
		if (!(cur & SEEN_XFER) != !xfer) {
			/* In the last window's counts too, where it is there:
			 * else a flow turned bulk keeps its transfer weight
			 * there, and N flows turning bulk together get an
			 * eighth of their share for up to a window (measured:
			 * 128 cubic streams at 0.45 of the limit). */
			q->seen_now = sat_sub(q->seen_now, seen_weight(cur)) + w;
			if (cur & SEEN_PREV)
				q->flows = sat_sub(q->flows, seen_weight(cur)) + w;
			if (cur & SEEN_PREV_SEEN)
				q->seen = sat_sub(q->seen, seen_weight(cur)) + w;
			if (!xfer)
				q->bulk_now++;
		}
		s->seen[lvl] = (cur & ~(SEEN_XFER | SEEN_LEFT)) | (xfer ? SEEN_XFER : 0);
		return 1;
	}
	q->flows_now += w;
	q->seen_now += w;
	if (!xfer)
		q->bulk_now++;
	prev = cur && (cur & (SEEN_WIN_MASK | SEEN_LEFT)) == ((e - 1) & SEEN_WIN_MASK);
	prev_seen = cur && (cur & SEEN_WIN_MASK) == ((e - 1) & SEEN_WIN_MASK);
	if (!(cur & SEEN_XFER) != !xfer) {
		/* Of another class than the last window counted it with:
		 * its counts take the new weight too, as for a change within
		 * a window (above). A group's first flows begin with its
		 * first window and stay transfers for four of the shortest
		 * windows (XFER_TIME), so they turn bulk as a window ends:
		 * each kept its transfer weight in the last window's count,
		 * the larger, for a window more (measured: 4 streams starting
		 * together in a 1gbit group, every cap at a third of its
		 * share and the group at 0.4-0.6 of its limit for 100-200 ms,
		 * a second after they began). */
		if (prev)
			q->flows = sat_sub(q->flows, seen_weight(cur)) + w;
		if (prev_seen)
			q->seen = sat_sub(q->seen, seen_weight(cur)) + w;
	}
	s->seen[lvl] = e | (xfer ? SEEN_XFER : 0) | (prev ? SEEN_PREV : 0) | (prev_seen ? SEEN_PREV_SEEN : 0);
	return 1;
}

/* write_answers reports whether its owner's write to an idle socket with
 * state s answers something: the socket received data (rcv, its
 * bytes_received, low 32 bits) since its last transfer began (hbm.bpf.c
 * sets s->xfer_rcv): a server's response to the next request, a client's
 * next request after a response. TCP's own small-queue handler writes too,
 * right after a socket went idle (pacing.h, xfer_plan), answering nothing. */
static __always_inline int write_answers(const struct hbm_sock *s, __u32 rcv)
{
	return rcv != s->xfer_rcv;
}

/* share_write counts back, at its owner's write, the flow of socket state s
 * (its slot for this group: s->seen[lvl]) that went idle, where the write
 * answers something (write_answers; rcv: the socket's bytes_received, low
 * 32 bits): as a transfer, the class its first packet will have
 * (hbm.bpf.c). That packet may wait for its pacing time (set by the last
 * transfer's last packet) for a good part of the flow's gap; counted only
 * from it, a keep-alive pool's flows spent that wait in grace_w, halved
 * every control interval, and the share moved with the count (measured:
 * 128 keep-alive clients of 5 KB at 100mbit, share_flows 648-1,000 of
 * 1,024 units and the share 9,855-14,552 B/s between the 5th and 95th
 * percentiles of 20 ms samples; counted at the write, 1,024 and
 * 11,411-11,714: docs/design.md, "Counted at the write"). Returns 1 if it
 * was counted back. Called with the queue locked. */
static __always_inline int share_write(struct hbm_queue *q, const struct hbm_config *cfg,
				       struct hbm_sock *s, __u32 lvl, __u32 rcv, __u64 now)
{
	lvl &= HBM_MAX_LEVELS - 1;
	if (!(s->seen[lvl] & SEEN_LEFT) || !write_answers(s, rcv))
		return 0;
	share_count(q, cfg, s, lvl, 0, 1, now);
	q->recount = 1;
	return 1;
}

/* share_of is the share of a flow of weight w (1 or XFER_WEIGHT) in the
 * group, payload bytes/s, at most the group's rate. */
static __always_inline __u64 share_of(const struct hbm_queue *q, const struct hbm_config *cfg, __u32 w)
{
	__u32 pq = q->payload_q16 ? q->payload_q16 : PAYLOAD_Q16_DEFAULT;
	__u64 ceil = (rate_bps(q, cfg) / 8) * pq >> 16, c = q->share_Bps * w;

	return c < ceil ? c : ceil;
}

/* share_depart takes the flow of socket state s out of the group's flow
 * counts (its slot s->seen[lvl]): it went idle or closed. An idle flow
 * stays in the seen counts (share_flows_seen: it may send again at once); a
 * closed one leaves them too (a server's connection per request is not
 * counted after its end). Called with the queue locked. Counts never go
 * below zero: a slot left from a limit that was removed and set again may
 * name a window of the old queue. */
static __always_inline void share_depart(struct hbm_queue *q, struct hbm_sock *s, __u32 lvl,
					 int closed)
{
	__u32 cur, e, w, cw;

	lvl &= HBM_MAX_LEVELS - 1;
	cur = s->seen[lvl];
	if (!cur)
		return;
	e = (q->epoch + 1) & SEEN_WIN_MASK;
	if (!e)
		e = 1;
	w = seen_weight(cur);
	cw = cur & SEEN_WIN_MASK;
	if (!(cur & SEEN_LEFT) && !closed && (cw == e || cw == ((e - 1) & SEEN_WIN_MASK)))
		q->grace_w += w; /* out of a count it was in, till it sends */
	else if ((cur & SEEN_LEFT) && closed)
		q->grace_w = sat_sub(q->grace_w, w); /* idle, now closed */
	if (!(cur & SEEN_LEFT)) {
		if (cw == e) {
			q->flows_now = sat_sub(q->flows_now, w);
			if (cur & SEEN_PREV)
				q->flows = sat_sub(q->flows, w);
		} else if (cw == ((e - 1) & SEEN_WIN_MASK)) {
			q->flows = sat_sub(q->flows, w);
		}
	}
	if (!closed) {
		if (cw == e && !(cur & SEEN_IDLED)) {
			q->idled_now += w;
			cur |= SEEN_IDLED;
		}
		s->seen[lvl] = (cur & ~SEEN_PREV) | SEEN_LEFT;
		q->recount = 1;
		return;
	}
	if (cw == e) {
		q->seen_now = sat_sub(q->seen_now, w);
		if (cur & SEEN_PREV_SEEN)
			q->seen = sat_sub(q->seen, w);
		/* A closed flow sends no more: out of the idle count too
		 * (a connection per request goes idle, then closes). */
		if (cur & SEEN_IDLED)
			q->idled_now = sat_sub(q->idled_now, w);
	} else if (cw == ((e - 1) & SEEN_WIN_MASK)) {
		q->seen = sat_sub(q->seen, w);
	}
	s->seen[lvl] = 0;
	q->recount = 1;
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
	/* The flows that send least often: bulk ones (weight 1) if the
	 * window has any, else transfers (XFER_WEIGHT). */
	__u32 n = share_flows(q);
	__u64 t, gap;

	if (!q->bulk && !q->bulk_now)
		n = n / XFER_WEIGHT ? n / XFER_WEIGHT : 1;
	t = share_interval_pkts(rate);
	gap = flow_gap_ns(q, rate, n);

	return gap > t ? gap : t;
}

/* share_target_ns is the backlog the loop steers the group to: --pace, and
 * on egress at least two of the group's largest packets: 32 flows each
 * sending one 64 KB TSO packet per sending gap keep a virtual queue of a
 * few such packets at their rate (2.7 ms each at 200 Mbit/s), and a target
 * below that held 32 clients of 1 MB responses at 0.86 of the limit. */
static __always_inline __s64 share_target_ns(const struct hbm_queue *q, const struct hbm_config *cfg,
					     int egress)
{
	__u64 pkt = q->pkt_max > q->pkt_max_now ? q->pkt_max : q->pkt_max_now;
	__s64 t = cfg->pace_target_ns, p;

	if (!egress)
		return t;
	p = (__s64)cost_ns_bytes(q, cfg, 2 * pkt);
	return p > t ? p : t;
}

#define FLOOR_CUT_MAX  (1U << 15) /* the floor goes down to half at most ... */
#define FLOOR_CUT_UP   (1U << 12) /* ... by 1/16 per interval ... */
#define FLOOR_CUT_DOWN (1U << 10) /* ... and comes back by 1/64 per interval */
#define FLOOR_BINDS    (1U << 16) /* in floor_cut: the floor bound the share when it was last computed */

/* floor_steer lowers the egress share's floor while the group's standing
 * queue (the least backlog of a control interval) stays above the mark
 * threshold and the floor bound the share when it was last computed
 * (FLOOR_BINDS), and lifts it back once the queue drains below the loop's
 * target. A share above its floor is the loop's to lower: a cut there does
 * nothing until the loop has taken the share below where the floor was,
 * and then holds it there. Measured (borrow-ten, docs/design.md): a small
 * borrower's queue stood above the mark while its rate in force moved
 * under it (20-150 Mbit/s between samples 100 ms apart), its floor was cut
 * to half with the share at 0.8-1.2 of the fair one, and the 20-80 Mbit/s
 * groups got a median of 0.92-0.97 of their due (64% of all 100 ms
 * windows within 5% of it; 69% with the floor cut only where it binds,
 * the 90th percentile of the deviation 0.086 against 0.133).
 *
 * Flows the pacing assist holds are neither marked nor given the
 * congestion code up to the drop-large threshold (policy.h,
 * signal_spared): a queue that stands above the mark with the share at its
 * floor is theirs, their caps together above the rate (TCP's pacing runs a
 * little over its cap: 4 cubic streams at the floor of a 1gbit group held
 * the queue at 11 ms, just under drop-large), and only the floor can bring
 * it down. Above drop-large the policer refuses every packet it may, and a
 * queue that still never drains is made of packets it may not refuse
 * (paced flows with fewer than two packets out; measured: 32 clients of 100
 * KB responses, every response paced at the floor, 1.04 of the limit and
 * 0.4 s of backlog forgotten in 10 s). target_ns is the loop's target
 * (share_target_ns). Called at the end of a control interval with the
 * queue locked. */
static __always_inline void floor_steer(struct hbm_queue *q, const struct hbm_config *cfg, __s64 standing,
					__s64 target_ns)
{
	__u32 cut = q->floor_cut & (FLOOR_BINDS - 1);

	if (standing > (__s64)cfg->mark_ns && (q->floor_cut & FLOOR_BINDS))
		cut = cut + FLOOR_CUT_UP < FLOOR_CUT_MAX ? cut + FLOOR_CUT_UP : FLOOR_CUT_MAX;
	else if (standing <= target_ns)
		cut = cut > FLOOR_CUT_DOWN ? cut - FLOOR_CUT_DOWN : 0;
	q->floor_cut = cut | (q->floor_cut & FLOOR_BINDS);
}

/* Admission or pacing of a group's new connections (egress).
 *
 * A server's connection can be held in two places: at the handshake gate
 * (gate.h: its SYN-ACK waits out the group's backlog) or by its pacing cap
 * once it sends. Pacing costs nothing per connection, but its caps rest on
 * the flow count, and where many connections start and end together the
 * count, and every cap with it, swings by up to 4x from one response to the
 * next: 64 clients of 30 KB responses on new connections at 200mbit had a
 * request P99 of 108 ms (107-111) against htb's 88 (86-89). Admission at
 * the gate with the response's first ADMIT_BYTES unpaced is a FIFO at the
 * handshake, as htb's queue is: 88 ms (88-89) there, and 32 clients 48
 * against 54 paced (htb 69). But a held handshake waits one or two of the
 * kernel's ticks (4-8 ms at HZ 250) whatever it needs, which costs where a
 * response at its share takes only a few ticks: 8 clients of 30 KB, 11 ms
 * paced against 16 admitted (htb 15). So a group admits while a first
 * flight of ADMIT_BYTES at a transfer's fair share would take over
 * ADMIT_ON_NS, and paces again once it would take under ADMIT_OFF_NS
 * (admit_steer); between the two it keeps its regime, and the measures it
 * decides on move slowly, so that it does not move between the regimes as
 * its count moves: deciding per connection from the share of the moment
 * gave 96 ms in the 64-client cell, and a count smoothed over a quarter
 * second 168 ms and 1.14x the limit (docs/design.md, "Admission or
 * pacing, per group"). Only connections that send no more than
 * ADMIT_BYTES in all, by the record of their kind (gate.h, admit_fits:
 * a server's connections by their listener's, hbm_listen.conn_bytes; a
 * client's by their server's, hbm_peer.conn_bytes): a keep-alive pool
 * gains nothing from its first responses admitted; with the first 64 KB
 * unpaced, 64 clients of 100 KB escaped to 1.41x the limit, and with 32
 * KB of 100 KB unpaced their P99 was 336 ms against 297 paced (htb
 * 284-316): the gate let through connections whose rest then shared the
 * group paced. */
#define ADMIT_BYTES    32768
#define ADMIT_ON_NS    40000000ULL /* 10 ticks at HZ 250 */
#define ADMIT_OFF_NS   20000000ULL
#define ADMIT_ON       (1U << 31)
#define ADMIT_TAU_SHIFT 20 /* decay per interval: its length in 2^20 ns over 2^10: ~1.07 s */

/* admit_steer sets or clears ADMIT_ON in q->admit as the control interval
 * that ended (dt ns long) closes, at time now; rate is the rate in force,
 * wire bytes/s. Called with the queue locked. Two measures of how long a
 * response waits its turn, and the longer decides:
 *  - the flow count's recent peak (share_flows, decaying by half in about
 *    0.7 s; the count itself swings by 4x within tens of milliseconds when
 *    a crowd's responses end together), as the time a first flight of
 *    ADMIT_BYTES would take at a transfer's fair share: while paced;
 *  - the gate's backlog (gate_vt_ns): while admitting, the crowd waits at
 *    the handshake and its responses leave in a millisecond or two, so the
 *    count of sending flows is near zero and says nothing of the crowd. */
static __always_inline void admit_steer(struct hbm_queue *q, __u64 rate, __u64 dt, __u64 now)
{
	__u64 g = dt >> ADMIT_TAU_SHIFT, w16 = q->admit & ~ADMIT_ON, n16 = (__u64)share_flows(q) << 4;
	__s64 gate_ns = (__s64)(q->gate_vt_ns - now);
	__u32 on = q->admit & ADMIT_ON;

	if (g > 1024)
		g = 1024;
	w16 -= w16 * g >> 10;
	if (n16 > w16)
		w16 = n16;
	if (w16 >= ADMIT_ON)
		w16 = ADMIT_ON - 1;
	/* A first flight of ADMIT_BYTES at rate x XFER_WEIGHT / (w16 / 16)
	 * takes ADMIT_BYTES x w16 / (16 x XFER_WEIGHT x rate) s: compared
	 * without a division. w16 < 2^31, so the products stay below 2^63
	 * for rates up to 5e10 bytes/s. */
	if (gate_ns > (__s64)ADMIT_ON_NS ||
	    w16 * ADMIT_BYTES * (1000000000ULL / ADMIT_ON_NS) > 16 * XFER_WEIGHT * rate)
		on = ADMIT_ON;
	else if (gate_ns < (__s64)ADMIT_OFF_NS &&
		 w16 * ADMIT_BYTES * (1000000000ULL / ADMIT_OFF_NS) < 16 * XFER_WEIGHT * rate)
		on = 0;
	q->admit = (__u32)w16 | on;
}

/* share_step is m moved part of the way to m * ratio (ratio in 1/2^SHARE_Q):
 * smooths the estimate. Ingress a quarter of the way per interval. Egress a
 * sixteenth: a server's new connections' first segments, which no cap
 * holds, come and go in bursts (a gated batch let go together), and a
 * quarter made every paced response's cap swing with them (64 clients of
 * 30 KB responses: m between 0.4 and 0.9 in a cycle of 125 ms, 20,000
 * refusals in 10 s; with a sixteenth, 1,600, the median request 82 ms
 * against 94). A gain graded by the unpaced part of the rate (a quarter
 * where nearly all is paced) measured the same as a sixteenth everywhere,
 * keep-alive pools included (docs/design.md). m <= 2^35, ratio <= 2^17,
 * the shift <= 4: products below 2^53. */
static __always_inline __u64 share_step(__u64 m, __u64 ratio, int egress)
{
	int g = egress ? SHARE_GAIN_SHIFT_EGRESS : SHARE_GAIN_SHIFT;

	return ((m << g) - m + ((m * ratio) >> SHARE_Q)) >> g;
}

/* share_update accounts a packet to the control interval and, when one ends,
 * corrects the group's share. Called with the queue locked. Bounds keep
 * products below 2^63: rates <= 5e10 bytes/s, the ratio <= 2^17, bytes per
 * interval <= 2^40 (dt is capped). */
static __always_inline void share_update(struct hbm_queue *q, const struct hbm_config *cfg,
					 const struct pkt *p, __s64 backlog, __u64 now, int egress,
					 int changed)
{
	__u64 rate = rate_bps(q, cfg) / 8, m = q->share_mul, dt, y, y_rpc, target, ratio, fair, ceil, c;
	__u64 room, floor, drain = SHARE_DRAIN_NS, u;
	__u32 n;
	__u32 pq = q->payload_q16 ? q->payload_q16 : PAYLOAD_Q16_DEFAULT;
	__s64 excess, left, target_ns;
	int over;

	ceil = rate * pq >> 16;
	__sync_fetch_and_add(&q->ctl_wire, p->wire_bytes); /* police_fast adds without the lock */
	if (p->is_tcp) {
		q->ctl_tcp_wire += p->wire_bytes;
		q->ctl_tcp_payload += p->payload;
	}
	dt = now - q->ctl_ns;
	if (backlog < q->ctl_min_backlog_ns)
		q->ctl_min_backlog_ns = backlog;
	/* Over the drop threshold the group is far over its rate (a burst of
	 * new flows, or flows that lost their caps): correct at once, at the
	 * time of 128 packets, by the whole ratio (at most half). */
	over = backlog > (__s64)cfg->drop_large_ns;
	/* Egress: that cut only once m has climbed above the fair share (the
	 * case it is for: caps grown while the group idled). Below it the
	 * backlog comes from what caps cannot hold at once (connections'
	 * first packets), and cutting m to an eighth per interval for it held
	 * a web server of 100 KB responses at 0.7 of its limit. The cut also
	 * stops at the fair share (below): from just above it, halved, m took
	 * a keep-alive pool's caps to half their fair share at its start
	 * (its new connections' first flights put the backlog over the
	 * threshold), and the loop's gain then needed a second or more to
	 * bring them back (docs/design.md, "The cut stops at the fair
	 * share"). */
	if (egress && m <= (1ULL << SHARE_Q))
		over = 0;
	if (!q->ctl_len_ns) {
		q->ctl_min_ns = share_interval_pkts(rate);
		q->ctl_len_ns = share_interval(q, rate);
		q->win_len_ns = share_window_ns(q, cfg);
	}
	if ((__s64)dt >= (__s64)q->ctl_len_ns || (over && (__s64)dt >= (__s64)q->ctl_min_ns)) {
		changed = 1;
		if (dt > 2 * FLOW_WINDOW_MAX_NS)
			dt = 2 * FLOW_WINDOW_MAX_NS; /* after idling: y is ~0 either way */
		y = q->ctl_wire * 1000000ULL / (dt / 1000); /* bytes/s; dt in us */
		if (q->ctl_tcp_wire > 64 * 1024 && q->ctl_tcp_payload <= q->ctl_tcp_wire)
			q->payload_q16 = (q->ctl_tcp_payload << 16) / q->ctl_tcp_wire;
		/* Halfway to this interval's rate of what no share paces. */
		y_rpc = q->ctl_fresh * 1000000ULL / (dt / 1000);
		q->fresh_Bps = (q->fresh_Bps + y_rpc) / 2;
		q->ctl_fresh = 0;
		y_rpc = q->ctl_unpaced * 1000000ULL / (dt / 1000);
		q->unpaced_Bps = (q->unpaced_Bps + y_rpc) / 2;
		q->ctl_unpaced = 0;
		q->grace_w >>= 1; /* idle flows that did not come back fade */
		if (egress)
			admit_steer(q, rate, dt, now);
		q->ctl_ns = now;
		q->ctl_min_ns = share_interval_pkts(rate);
		q->ctl_len_ns = share_interval(q, rate);
		q->win_len_ns = share_window_ns(q, cfg);
		q->ctl_wire = 0; /* a lock-free charge's add now may be lost: a packet's bytes in a rate sample (policy.h, police_fast) */
		q->ctl_tcp_wire = 0;
		q->ctl_tcp_payload = 0;

		/* target = rate * (1 - excess / drain), within [rate/16, 2 rate].
		 * Egress steers the standing queue, the least backlog of the
		 * interval (as CoDel does), and drains it over four control
		 * intervals at least: bursts of what caps cannot hold (a
		 * connection's first segments) are not a rate to correct (the
		 * backlog at the interval's end held 32 clients of 30 KB
		 * responses at 0.87 of the limit), and flows take up a new cap
		 * only at their next ACK, a response later for a keep-alive
		 * connection: drained within one interval, m swung 0.53-1.46
		 * every 50 ms for 64 keep-alive clients of 10 KB responses, their
		 * caps with it, and the request P99 was twice the median
		 * (docs/design.md). dt < 2^33 here. */
		if (egress) {
			if (SHARE_DRAIN_INTERVALS * dt > drain)
				drain = SHARE_DRAIN_INTERVALS * dt;
			if (q->ctl_min_backlog_ns < backlog)
				backlog = q->ctl_min_backlog_ns;
		}
		q->ctl_min_backlog_ns = 0x7fffffffffffffffLL;
		target_ns = share_target_ns(q, cfg, egress);
		if (egress)
			floor_steer(q, cfg, backlog, target_ns);
		excess = backlog - target_ns;
		left = (__s64)drain - excess;
		if (left < (__s64)(drain >> 4))
			left = drain >> 4;
		if (left > (__s64)(2 * drain))
			left = 2 * drain;
		/* In 1/65536ths of the rate (left / drain <= 2, so <= 2^17):
		 * rate * left overflowed 64 bits once an idle group's first
		 * interval was long (drain = 4 dt: from about 0.5 s at
		 * 40 Gbit/s), and the wrapped target cut the share of a group
		 * that sent half its rate to the floor. left < 2^36 (dt < 2^33). */
		target = rate * (((__u64)left << 16) / drain) >> 16;
		ratio = y ? (target << SHARE_Q) / y : SHARE_RATIO_MAX;
		if (ratio > SHARE_RATIO_MAX)
			ratio = SHARE_RATIO_MAX;
		if (ratio < SHARE_RATIO_MIN)
			ratio = SHARE_RATIO_MIN;
		/* Part of the way to the computed rate (share_step): smooths
		 * the estimate. The cut over the drop threshold (over) is at
		 * once; on egress down to the fair share, no further (above).
		 * m <= 2^35 (below), ratio <= 2^17. */
		if (over && ratio < (1ULL << SHARE_Q)) {
			m = (m * ratio) >> SHARE_Q;
			if (egress && m < (1ULL << SHARE_Q))
				m = 1ULL << SHARE_Q;
		} else {
			m = share_step(m, ratio, egress);
		}
	}

	/* The share is a multiple m of the fair share, the bulk flows' room
	 * over their number: a change in the flow count moves the share at
	 * once; the loop above only corrects m for flows that send less than
	 * their share. Computed only when m or the counts changed: the
	 * divisions are most of the policer's cost per packet. */
	if (!changed && !q->recount && q->share_Bps)
		return;
	q->recount = 0;
	room = bulk_room(q, rate);
	fair = room / share_flows(q);
	if (!fair)
		fair = 1;
	/* Ingress (v2): a 64th below the fair share at least.
	 * Egress: a 64th below the share of every flow that sent in the
	 * window (and did not close), where a flow that went idle in it counts
	 * twice. The loop, not the floor, settles the group on its rate (at the
	 * floor it cannot pull lower); if all those flows send at once they
	 * still fill the rate, so greedy flows are not let spiral down (128
	 * bbr flows sent 0.82 of the limit with the floor at half their
	 * share). Idle flows count twice because TCP lets a paced socket that
	 * idled past its next send time send its next packet up to half its
	 * time early (tcp_update_skb_after_send's credit): a server's
	 * keep-alive connections, idle between requests, send up to twice
	 * their caps (measured: 64 keep-alive clients of 10 KB responses at
	 * 1.25-1.37 of the limit with them counted once). With flows that come
	 * and go, the floor is below the fair share of those sending now. */
	if (egress) {
		/* What the paced flows get if all send at once: the room
		 * less what no cap holds (a server's new connections' first
		 * segments: 32 clients of 30 KB responses sent 2.5x the limit
		 * with the floor at the whole room's share). */
		u = q->unpaced_Bps * pq >> 16;
		c = u < room - (room >> 3) ? room - u : room >> 3;
		n = share_flows_seen(q) + (q->idled > q->idled_now ? q->idled : q->idled_now);
		/* ... and where connections come and go, their flows are
		 * late for their send times (retried after a refusal, or
		 * new) and get TCP's pacing credit: up to twice their caps,
		 * in proportion to the unpaced part (32 clients of 30 KB
		 * responses, cubic: 1.5x the limit with the floor at the
		 * paced room's share). n < 2^20, u < 2^36. */
		n += (__u32)(((__u64)n * (u < room ? u : room)) / (room ? room : 1));
		floor = c / n;
		floor -= floor >> 6;
		floor -= floor * (q->floor_cut & (FLOOR_BINDS - 1)) >> 16;
	} else {
		floor = fair - (fair >> 6);
	}
	if (!floor)
		floor = 1;
	if (m < SHARE_MUL_MIN >> 16)
		m = SHARE_MUL_MIN >> 16; /* m stays above 2^-16 */
	/* fair < 2^36 and m >> 16 < 2^19: products below 2^55. */
	c = fair * (m >> SHARE_Q) + ((fair * (m & ((1ULL << SHARE_Q) - 1))) >> SHARE_Q);
	q->floor_cut &= FLOOR_BINDS - 1;
	if (c < floor) {
		c = floor;
		m = (floor << SHARE_Q) / fair; /* <= 2^16: floor <= fair */
		q->floor_cut |= FLOOR_BINDS;
	}
	if (c > ceil) {
		c = ceil;
		m = (ceil << SHARE_Q) / fair; /* < 2^35: fair >= ceil / 8 / 2^16 */
	}
	q->share_mul = m;
	q->share_Bps = c ? c : 1;
}

#endif /* HBM_SHARE_H */
