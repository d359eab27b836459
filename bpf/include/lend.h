/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Borrowing: a guarantee, a ceiling, and what a parent lends.
 *
 * A group's configured rate is its guarantee; its ceiling (ceil_bps) is the
 * most it may take. The rate in force (hbm_queue.eff_bps) lies between them:
 * the guarantee times what the nearest limited group above it lends
 * (lend_q16), at most the ceiling. One multiple for all the groups below a
 * lender is weighted max-min fairness with the guarantees as weights: a
 * group that wants less leaves the rest to the others in proportion to
 * their guarantees, and since the guarantees below a lender sum to at most
 * its rate, a multiple of at least one gives each group its guarantee.
 *
 * The lender moves its multiple once per lending interval, from what its
 * own virtual queue sees (the sum of everything below it), after RCP:
 * - its queue stands above the mark and has not fallen since the last
 *   interval's end: the groups below take more than it has; down by the
 *   ratio of its rate to what passed (at least a sixteenth, at most half),
 *   at once: a group that wakes gets its guarantee back within a few
 *   intervals. Above the mark but falling, it stays: the cuts made are
 *   draining the queue, and cutting on while it drains (the caps below
 *   follow a cut only at their flows' next packets) took the multiple
 *   below the rate, then back up past it, every few tens of intervals
 *   (docs/design.md, "The lender cuts only while its queue grows");
 * - below the mark, less passed than its rate and a borrower below wanted
 *   more within LEND_WANT_NS: up a quarter of the way to that ratio (at
 *   most 2);
 * - otherwise it stays: nobody wants what is left, and the multiple does
 *   not grow without bound for a group that will wake into it.
 * The lender's own policing holds the sum meanwhile, as for any nested
 * limit (policy.h, police_path).
 *
 * Priorities (hbm_config.priority): a lender keeps one multiple per class
 * (latency, normal, batch). The one that grows is the highest class's that
 * wants more; the one that falls, the lowest class's still above one. So
 * what is left goes to latency groups first and batch groups last, and a
 * latency group that wakes takes back from batch groups first; every group
 * keeps its guarantee whatever its class.
 *
 * Per packet, each level counts what it passed under its own queue's lock,
 * as the policer does anyway (a lender's lock is thus taken by every packet
 * below it, as any nested limit's is). Once per interval, after the walk
 * (lend_walk, in global functions), the first borrower whose interval
 * ended asks the levels above it until one answers with its class's
 * multiple (the first limited level above it, its lender), and lend_apply
 * writes the borrower's new rate into its queue. Above a borrower, its
 * lender neither splits its flows by its own per-flow share (its rate in
 * force paces them) nor marks or drops what it sends within its guarantee
 * (policy.h, verdict.borrowed and verdict.guaranteed). The lender is
 * whatever limited group the walk finds next, so nothing in the
 * configuration names it, and a borrower with none (the topmost limited
 * group) keeps its guarantee. Include after vmlinux.h. */
#ifndef HBM_LEND_H
#define HBM_LEND_H

#include "hbm.h"
#include "maps.h"
#include "vqueue.h"
/* and struct verdict (policy.h, which includes this after it) */

#include "lendctl.h"

/* lend_level is one level's part in borrowing (group id, direction dir):
 * asked (ask: bit 0; bit 1, the borrower wants more; bits 2-3, its class,
 * lend_rank) by a borrower below whose interval ended on this packet, it
 * answers its class's multiple and notes the want; then, if due, it ends
 * its own interval (lend_tick). Returns the answer (bits 0-31; 0: not
 * asked, or no limit), bit 32 if it is a borrower that ended its interval,
 * bit 33 if it wants more, bits 34-35 its class. A global function: verified
 * once, its stack not the program's. */
__noinline __u64 lend_level(__u32 dir, __u64 id, __u64 now, __u32 ask, __u32 due)
{
	struct hbm_key key = { .cgroup_id = id, .dir = dir };
	const struct hbm_config *cfg;
	struct hbm_queue *q;
	__u64 ans = 0, borrower = 0;
	__u32 rank;
	__u8 want = 0;

	cfg = bpf_map_lookup_elem(&hbm_limit_map, &key);
	q = bpf_map_lookup_elem(&hbm_queue_map, &key);
	if (!cfg || !q)
		return 0;
	bpf_spin_lock(&q->lock);
	if (ask) {
		rank = (ask >> 2) & 3;
		if (rank >= HBM_PRIO_CLASSES)
			rank = HBM_PRIO_CLASSES - 1;
		ans = q->lend_q16[rank] ? q->lend_q16[rank] : LEND_ONE;
		if (ask & 2)
			q->lend_want_ns[rank] = now;
	}
	if (due)
		borrower = lend_tick(q, cfg, (__s64)(q->vtime_ns - now), now, &want);
	bpf_spin_unlock(&q->lock);
	return ans | borrower << 32 | (__u64)(want != 0) << 33 | (__u64)lend_rank(cfg->priority) << 34;
}

/* lend_rate is the rate in force for a guarantee rate and a ceiling ceil
 * (bits/s) under a lender's multiple phi: rate x phi, at most ceil. The
 * product is formed only below ceil x 2^16 (< 2^55). */
static __always_inline __u64 lend_rate(__u64 rate, __u64 ceil, __u64 phi)
{
	if (!rate || phi >= (ceil << 16) / rate)
		return ceil;
	return rate * phi >> 16;
}

/* lend_apply writes borrower id's rate in force from its lender's multiple
 * phi (0: no lender answered: no limited group above it, so its guarantee),
 * with the cost of a byte at it: the divisions once per interval, not per
 * packet. A global function: its stack is not the program's. */
__noinline int lend_apply(__u64 id, __u32 dir, __u64 phi)
{
	struct hbm_key key = { .cgroup_id = id, .dir = dir };
	const struct hbm_config *cfg;
	struct hbm_queue *q;
	__u64 eff = 0, whole = 0, rem;
	__u32 frac = 0;

	cfg = bpf_map_lookup_elem(&hbm_limit_map, &key);
	q = bpf_map_lookup_elem(&hbm_queue_map, &key);
	if (!cfg || !q)
		return 0;
	if (phi && cfg->ceil_bps > cfg->rate_bps)
		eff = lend_rate(cfg->rate_bps, cfg->ceil_bps, phi);
	if (eff > cfg->rate_bps) {
		/* 8e9 ns-bits per byte over bits/s; rem < eff < 2^39, so
		 * rem << 24 < 2^63: the fraction to 24 bits. */
		whole = 8000000000ULL / eff;
		rem = 8000000000ULL % eff;
		frac = (__u32)(((rem << 24) / eff) << 8);
	}
	bpf_spin_lock(&q->lock);
	/* The share (share.h) rests on the rate in force: computed again at
	 * the next packet, not at the end of the group's control interval,
	 * which at a small guarantee lasts longer than the lender takes to
	 * move (128 full packets: 77 ms at 20 Mbit/s). Measured (borrow-ten,
	 * docs/design.md): the 20 and 40mbit groups, whose flows kept the
	 * caps of a rate in force tens of lending intervals old, got 0.74
	 * and 0.83 of their weighted max-min share; with this, 0.96-1.01. */
	if (q->eff_bps != (eff > cfg->rate_bps ? eff : cfg->rate_bps))
		q->recount = 1;
	if (eff > cfg->rate_bps) {
		q->eff_bps = eff;
		q->eff_ns_per_byte = whole;
		q->eff_frac = frac;
		q->eff_base_bps = cfg->rate_bps;
	} else {
		q->eff_bps = 0; /* its guarantee (rate_sync) */
	}
	bpf_spin_unlock(&q->lock);
	return 0;
}

/* lend_walk ends the lending intervals due on this packet (v->lend_due),
 * up the levels that charged it, in the walk's order: the first borrower
 * among them asks each level above it until one answers (the first
 * limited level above it that passed the packet, its lender), then gets its
 * new rate (lend_apply): its guarantee where none answered and nothing
 * was dropped (no limited group above it). After police_walk; only the
 * first VERDICT_CHARGED limited levels of a path take part. */
__noinline int lend_walk(struct verdict *v)
{
	__u64 r, phi = 0;
	__u32 i, n, due, ask, borrower = 0, want = 0, rank = 1;

	if (!v)
		return 0;
	n = v->ncharged;
	for (i = 0; i < VERDICT_CHARGED; i++) {
		if (i >= n)
			break;
		due = (v->lend_due >> i) & 1;
		ask = borrower && !phi ? 1 | want << 1 | rank << 2 : 0;
		if (!due && !ask)
			continue;
		r = lend_level(v->dir, v->charged_id[i], v->now, ask, due);
		if (ask)
			phi = r & 0xffffffffULL;
		if (((r >> 32) & 1) && !borrower) {
			borrower = i + 1;
			want = (r >> 33) & 1;
			rank = (r >> 34) & 3;
		}
	}
	if (borrower && (phi || !v->drop))
		lend_apply(v->charged_id[(borrower - 1) & (VERDICT_CHARGED - 1)], v->dir, phi);
	return 0;
}

#endif /* HBM_LEND_H */

