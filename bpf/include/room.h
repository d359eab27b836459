/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The room: how much of a transfer's first window leaves unpaced, read from
 * its group's credit as its owner writes (pacing.h, xfer_plan) and reserved
 * there, so that sockets writing together share the credit instead of each
 * taking it. An htb class with tokens sends a whole packet of any size; TCP,
 * paced, sends its second packet the first's time at the cap later. Called
 * with the queue locked; the decision table is
 * internal/dataplane/rxfreshtest (TestRoomPlan). */
#ifndef HBM_ROOM_H
#define HBM_ROOM_H

#include "hbm.h"
#include "assist.h"
#include "share.h"
#include "vqueue.h"

/* plan_base is where the next plan starts in the group's virtual time:
 * after the queue's backlog and the plans not yet sent (fresh_vt_ns), and
 * at most burst_ns before now (an idle queue's credit, as vq_clamp). */
static __always_inline __u64 plan_base(const struct hbm_queue *q, const struct hbm_config *cfg, __u64 now)
{
	__u64 base = q->vtime_ns, floor = now > cfg->burst_ns ? now - cfg->burst_ns : 0;

	if ((__s64)(q->fresh_vt_ns - base) > 0)
		base = q->fresh_vt_ns;
	if ((__s64)(floor - base) > 0)
		base = floor;
	return base;
}

/* idle_room is what group (q, cfg) lets a socket's next transfer send
 * unpaced, bytes: the credit its queue holds now (at most burst_ns) after
 * the first windows already planned from it and not yet sent (fresh_vt_ns,
 * room_reserve), at the rate in force, shared with the flows it counts,
 * the transfer weighing XFER_WEIGHT as there. The socket's own plan, if it
 * is the last one reserved, is returned first: TCP also asks for a plan
 * right after the socket went idle, and its owner's write plans again
 * (xfer_plan). Called with the queue locked. */
static __always_inline __u64 idle_room(struct hbm_queue *q, const struct hbm_config *cfg, struct hbm_sock *s,
				       __u64 now)
{
	__s64 credit;
	__u64 bytes;

	rate_sync(q, cfg);
	if (s->plan_ns && q->fresh_vt_ns == s->plan_vt_ns)
		q->fresh_vt_ns -= s->plan_ns;
	s->plan_ns = 0;
	credit = (__s64)(now - plan_base(q, cfg, now));
	if (credit <= 0)
		return 0;
	/* credit <= burst_ns < 2^42 ns (an hour, rate.Validate) and rate <
	 * 2^39 bits/s: us x bytes per ms < 2^59. */
	bytes = (__u64)credit / 1000 * (rate_bps(q, cfg) / 8000) / 1000;
	return bytes * XFER_WEIGHT / (q->flows + XFER_WEIGHT);
}

/* room_reserve reserves a first window of payload bytes (wire bytes at
 * the queue's payload ratio) in the group's credit (queue locked): it
 * moves fresh_vt_ns (egress) as the window's packets will move vtime_ns when they
 * leave, so once they have the two agree and nothing is counted twice; a
 * plan never sent lapses as time passes it. Without it 64 keep-alive
 * connections waking together each read the same credit, and their first
 * windows overran the queue's bound and were refused (100 KB responses at
 * 200mbit: refusals in 8 of 18 runs, up to 155 packets; none in 15 runs
 * with it). */
static __always_inline void room_reserve(struct hbm_queue *q, const struct hbm_config *cfg, struct hbm_sock *s,
					 __u64 now, __u64 bytes)
{
	if (!bytes)
		return;
	bytes = bytes * 65536 / (q->payload_q16 ? q->payload_q16 : PAYLOAD_Q16_DEFAULT);
	s->plan_ns = cost_ns_bytes(q, cfg, bytes);
	q->fresh_vt_ns = plan_base(q, cfg, now) + s->plan_ns;
	s->plan_vt_ns = q->fresh_vt_ns;
}

/* room_plan is the first window, segments of mss bytes, group (q, cfg)
 * gives socket s's transfer at now: what its credit holds for it
 * (idle_room), at most CWND_XFER_SEGS, none below CWND_MIN_SEGS (paced as a
 * transfer from its second packet, pacing.h); reserved (room_reserve). */
static __always_inline __u32 room_plan(struct hbm_queue *q, const struct hbm_config *cfg, struct hbm_sock *s,
				       __u64 now, __u64 mss)
{
	__u64 segs = idle_room(q, cfg, s, now) / (mss ? mss : 1448);

	segs = segs < CWND_MIN_SEGS ? 0 : segs > CWND_XFER_SEGS ? CWND_XFER_SEGS : segs;
	room_reserve(q, cfg, s, now, segs * mss);
	return (__u32)segs;
}

#endif /* HBM_ROOM_H */
