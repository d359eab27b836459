/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The virtual queue: credit accrues with time at the configured rate, each
 * packet costs its wire bytes. Kept as the time the queue drains (vtime), so
 * the fast path multiplies bytes by a per-byte cost and never rate by time. */
#ifndef HBM_VQUEUE_H
#define HBM_VQUEUE_H

#include "hbm.h"

/* rate_sync makes the queue's rate in force the configured one where it
 * was written for another configured rate (a new queue, a changed limit).
 * Call with the queue locked, before rate_bps or cost_ns: those then read
 * the queue alone, without a branch per use (one per use took police_level
 * past the verifier's limit). */
static __always_inline void rate_sync(struct hbm_queue *q, const struct hbm_config *cfg)
{
	if (q->eff_base_bps == cfg->rate_bps && q->eff_bps)
		return;
	q->eff_base_bps = cfg->rate_bps;
	q->eff_bps = cfg->rate_bps;
	q->eff_ns_per_byte = cfg->ns_per_byte;
	q->eff_frac = cfg->ns_per_byte_frac;
}

/* rate_bps is the rate in force: the configured rate, or more while the
 * group borrows (lend.h), in bits per second. After rate_sync. */
static __always_inline __u64 rate_bps(const struct hbm_queue *q, const struct hbm_config *cfg)
{
	return q->eff_bps;
}

/* cost_ns returns the time wire_bytes take at the rate in force, adding the
 * sub-ns remainder to *frac. wire_bytes <= 2^40 and ns_per_byte <= 2^20 keep
 * both products below 2^64. After rate_sync. */
static __always_inline __u64 cost_ns(const struct hbm_queue *q, const struct hbm_config *cfg,
				     __u64 wire_bytes, __u32 *frac)
{
	__u64 f = wire_bytes * q->eff_frac + *frac;

	*frac = (__u32)f;
	return wire_bytes * q->eff_ns_per_byte + (f >> 32);
}

/* cost_ns_bytes is cost_ns without the remainder, for budgets. */
static __always_inline __u64 cost_ns_bytes(const struct hbm_queue *q, const struct hbm_config *cfg,
					   __u64 wire_bytes)
{
	__u32 frac = 0;

	return cost_ns(q, cfg, wire_bytes, &frac);
}

/* vq_clamp applies the queue's bounds and returns its backlog before the next
 * packet: negative means credit. An idle queue keeps at most burst_ns of credit
 * however long it idled (hours, or a vtime of 0 on creation), and the backlog
 * never passes max_backlog_ns, so recovery after a flood is bounded. Call with
 * the queue locked; it moves vtime for the bounds only, never for a packet. */
static __always_inline __s64 vq_clamp(struct hbm_queue *q, const struct hbm_config *cfg, __u64 now)
{
	__u64 floor = now - cfg->burst_ns;
	__u64 ceil = now + cfg->max_backlog_ns;

	if (now < cfg->burst_ns)
		floor = 0;
	/* Signed comparisons: vtime may lead now (backlog) or trail it (credit);
	 * another CPU may have read a slightly later clock. */
	/* Plain stores: a lock-free charge (policy.h, police_fast) at that
	 * moment may be forgotten, as the bounds forget time. That path runs
	 * only below half the mark, never near the ceiling. */
	if ((__s64)(q->vtime_ns - floor) < 0) {
		q->vtime_ns = floor;
		q->frac = 0;
	} else if ((__s64)(q->vtime_ns - ceil) > 0) {
		q->vtime_ns = ceil;
	}
	return (__s64)(q->vtime_ns - now);
}

#endif /* HBM_VQUEUE_H */
