/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* A lender's multiple, moved once per lending interval (lend.h says what
 * borrowing is; this is its controller, a pure function of a level's queue
 * and limit, tested by BPF_PROG_TEST_RUN: internal/dataplane/rxfreshtest).
 * Include after vmlinux.h and hbm.h. */
#ifndef HBM_LENDCTL_H
#define HBM_LENDCTL_H

#define LEND_INTERVAL_NS 1000000ULL          /* the lending interval */
#define LEND_DT_MAX_NS   1000000000ULL       /* an idle interval counts this long at most */
#define LEND_ONE         (1ULL << 16)        /* the multiple one: nothing lent */
#define LEND_MAX         (LEND_ONE << 12)    /* a guarantee grows at most 4096-fold */
#define LEND_DOWN_MIN    (LEND_ONE >> 1)     /* down by half per interval at most ... */
#define LEND_DOWN_MAX    (LEND_ONE - (LEND_ONE >> 4)) /* ... and at least by a sixteenth */
#define LEND_UP_MAX      (LEND_ONE << 1)     /* up to twice per interval at most */
#define LEND_WANT_NS     (4 * LEND_INTERVAL_NS) /* a borrower's want lasts this long */

/* lend_rank is a priority's class, highest first: latency, normal, batch. */
static __always_inline __u32 lend_rank(__u32 prio)
{
	return prio == HBM_PRIO_LATENCY ? 0 : prio == HBM_PRIO_BATCH ? 2 : 1;
}

/* lend_tick ends a lending interval if one is due: moves the level's
 * multiple as a lender and, for a borrower (ceil_bps above rate_bps), says
 * whether it wants more than it has (*want) and returns 1: the caller asks
 * the lender above for its multiple. backlog: the queue's, after the
 * packet. Called with the queue locked. Rates < 2^39 bits/s, bytes per
 * interval < 2^40 (dt <= 1 s). */
static __always_inline int lend_tick(struct hbm_queue *q, const struct hbm_config *cfg, __s64 backlog,
				     __u64 now, __u8 *want)
{
	__u64 dt, y, rate, phi, ratio, up;
	__u32 prev;
	int c;

	dt = now - q->lend_ns;
	if ((__s64)dt < (__s64)LEND_INTERVAL_NS)
		return 0; /* another CPU ended it */
	if (dt > LEND_DT_MAX_NS)
		dt = LEND_DT_MAX_NS;
	y = q->lend_bytes * 1000000ULL / (dt / 1000); /* bytes/s */
	q->lend_y_Bps = y;
	q->lend_bytes = 0; /* a lock-free charge's add now may be lost: a packet's bytes in a rate sample (policy.h, police_fast) */
	q->lend_ns = now;
	rate = q->eff_bps / 8;

	/* Priorities: the multiple that falls is the lowest class's still
	 * lent (batch first), the one that grows the highest class's that
	 * wants more (latency first). */
	/* Down only while the queue grows or stands: one that falls is
	 * already drained by the cuts made (lend.h). */
	prev = q->lend_backlog_ns;
	q->lend_backlog_ns = backlog <= 0 ? 0 : backlog >= 0xffffffffLL ? 0xffffffff : (__u32)backlog;
	if (backlog > (__s64)cfg->mark_ns && backlog >= (__s64)prev) {
		ratio = y > rate ? (rate << 16) / y : LEND_DOWN_MAX;
		if (ratio > LEND_DOWN_MAX)
			ratio = LEND_DOWN_MAX;
		if (ratio < LEND_DOWN_MIN)
			ratio = LEND_DOWN_MIN;
		for (c = HBM_PRIO_CLASSES - 1; c >= 0; c--) {
			phi = q->lend_q16[c & 3];
			if (phi <= LEND_ONE)
				continue;
			phi = phi * ratio >> 16;
			q->lend_q16[c & 3] = phi > LEND_ONE ? phi : 0;
			break;
		}
	} else if (backlog <= (__s64)cfg->mark_ns) {
		/* The highest class that wants more grows: a quarter of the
		 * way to rate / y where there is room; where there is none
		 * but a lower class is lent more than its guarantees, by a
		 * sixteenth, so that the queue stands and the lower class's
		 * multiple falls (above). Without that a full lender whose
		 * queue its flows' pacing keeps low never moved. */
		ratio = y ? (rate << 16) / y : LEND_UP_MAX;
		if (ratio > LEND_UP_MAX)
			ratio = LEND_UP_MAX;
		for (c = 0; c < HBM_PRIO_CLASSES; c++) {
			if ((__s64)(now - q->lend_want_ns[c & 3]) >= (__s64)LEND_WANT_NS)
				continue;
			phi = q->lend_q16[c & 3] ? q->lend_q16[c & 3] : LEND_ONE;
			if (y < rate) {
				up = phi * ratio >> 16;
				phi += (up - phi) >> 2;
			} else if ((c < 1 && q->lend_q16[1] > LEND_ONE) || (c < 2 && q->lend_q16[2] > LEND_ONE)) {
				phi += phi >> 4;
			}
			q->lend_q16[c & 3] = phi > LEND_MAX ? LEND_MAX : phi == LEND_ONE ? 0 : phi;
			break;
		}
	}

	if (cfg->ceil_bps <= cfg->rate_bps) {
		if (q->eff_bps != cfg->rate_bps)
			q->eff_bps = 0; /* no longer a borrower: its guarantee (rate_sync) */
		return 0;
	}
	/* Held by what it has (its own queue stands) or using nearly all of
	 * it, below its ceiling: it wants more. */
	*want = q->eff_bps < cfg->ceil_bps && (backlog > (__s64)cfg->mark_ns || y >= rate - (rate >> 4));
	return 1;
}

#endif /* HBM_LENDCTL_H */
