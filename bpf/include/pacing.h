/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Pacing assist: TCP flows of a limited group pace themselves to the group's
 * fair-share rate (SO_MAX_PACING_RATE turns on TCP's internal pacing; no fq).
 *
 * Why: policing alone cannot hold TCP below about one MSS per RTT per flow:
 * cwnd does not go below 2, and a flow with fewer than 2 packets out must not
 * be dropped (it would wait for its probe timer). On a 12 us veth RTT that
 * floor is about 1 Gbit/s per flow. Pacing spaces packets in time instead,
 * which is what the seed's EDT variant did with fq.
 *
 * Control, after RCP: one rate per group, pace_Bps, that every flow may use.
 * Each control interval (PACE_INTERVAL_NS) the egress program measures what
 * the group sent, y, and picks the rate that would have made it send its
 * target instead: pace_Bps *= target / y, where target is the group rate less
 * what drains the backlog above pace_target_ns in PACE_DRAIN_NS (more than the
 * rate while the queue has credit). Backlogged flows settle on equal shares;
 * flows sending less than the share (RPCs) are not slowed by it, and what they
 * leave goes to the others. The sockops program applies the rate to each
 * socket on its ACKs. Marks and drops stay as the backstop.
 */
#ifndef HBM_PACING_H
#define HBM_PACING_H

#include "hbm.h"
#include "maps.h"
#include "flow.h"

#ifndef SOL_SOCKET
#define SOL_SOCKET 1
#endif

#define PACE_INTERVAL_NS 1000000ULL /* control interval */
#define PACE_DRAIN_NS    4000000ULL /* drain the backlog above target in this */
#define PACE_FLOOR_SHIFT 2          /* the share never drops below rate / 4 */
#define PACE_Q           16         /* fixed-point shift of the correction ratio */
#define PACE_RATIO_MAX   (16ULL << PACE_Q) /* at most 16x up or down per interval */

/* pace_update accounts wire_bytes to the control interval and, when one
 * ends, corrects the group's per-flow rate. Called with the queue locked.
 * Bounds keep products below 2^63: rates <= 5e10 bytes/s, the ratio <= 2^20,
 * bytes per interval <= 2^40 (dt is capped). */
static __always_inline void pace_update(struct hbm_queue *q, const struct hbm_config *cfg,
					__s64 backlog, __u64 now, __u64 wire_bytes)
{
	__u64 rate = cfg->rate_bps / 8, c = q->pace_Bps, dt, y, target, ratio;
	__s64 excess, left;

	if (!(cfg->flags & HBM_F_PACE))
		return;
	if (!c || c > rate)
		c = rate; /* new limit, or the rate was lowered */
	q->pace_bytes += wire_bytes;
	dt = now - q->pace_ns;
	if ((__s64)dt < (__s64)PACE_INTERVAL_NS) {
		q->pace_Bps = c;
		return;
	}
	if (dt > 1000 * PACE_INTERVAL_NS)
		dt = 1000 * PACE_INTERVAL_NS; /* after idling: y is ~0 either way */
	y = q->pace_bytes * 1000000ULL / (dt / 1000); /* bytes/s; dt in us */
	q->pace_ns = now;
	q->pace_bytes = 0;

	/* target = rate * (1 - excess / PACE_DRAIN_NS), within [rate/16, 2 rate]. */
	excess = backlog - cfg->pace_target_ns;
	left = (__s64)PACE_DRAIN_NS - excess;
	if (left < (__s64)(PACE_DRAIN_NS >> 4))
		left = PACE_DRAIN_NS >> 4;
	if (left > (__s64)(2 * PACE_DRAIN_NS))
		left = 2 * PACE_DRAIN_NS;
	target = rate * (__u64)left / PACE_DRAIN_NS;
	ratio = y ? (target << PACE_Q) / y : PACE_RATIO_MAX;
	if (ratio > PACE_RATIO_MAX)
		ratio = PACE_RATIO_MAX;
	if (ratio < ((1ULL << PACE_Q) >> 4))
		ratio = (1ULL << PACE_Q) >> 4;
	/* Halfway to the computed rate: smooths the estimate. */
	c = (c + ((c * ratio) >> PACE_Q)) / 2;
	if (c > rate)
		c = rate;
	if (c < (rate >> PACE_FLOOR_SHIFT))
		c = rate >> PACE_FLOOR_SHIFT;
	q->pace_Bps = c ? c : 1;
}

/* flow_apply sets the socket's max pacing rate to the least its levels allow. */
static __always_inline void flow_apply(struct bpf_sock_ops *skops, struct hbm_flow *f)
{
	__u64 want = flow_want(f);
	__u32 val;

	/* Skip the setsockopt unless the rate moved by more than 1/32. */
	if (f->applied_Bps && want <= f->applied_Bps + (f->applied_Bps >> 5) &&
	    want + (want >> 5) >= f->applied_Bps)
		return;
	val = pacing_opt(want);
	if (!bpf_setsockopt(skops, SOL_SOCKET, SO_MAX_PACING_RATE_OPT, &val, sizeof(val)))
		f->applied_Bps = want;
}

static __always_inline int hbm_pace(struct bpf_sock_ops *skops, __u64 cgroup_id, __u32 level)
{
	struct hbm_key key = { .cgroup_id = cgroup_id, .dir = HBM_DIR_EGRESS };
	const struct hbm_config *cfg;
	struct hbm_queue *q;
	struct hbm_flow *f;
	struct bpf_sock *sk;
	__u64 c;

	switch (skops->op) {
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		/* Ask for a callback on every ACK. */
		bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags | BPF_SOCK_OPS_RTT_CB_FLAG);
		break;
	case BPF_SOCK_OPS_RTT_CB:
		break;
	default:
		return 1;
	}
	cfg = bpf_map_lookup_elem(&hbm_limit_map, &key);
	q = bpf_map_lookup_elem(&hbm_queue_map, &key);
	sk = skops->sk;
	if (!cfg || !q || !sk)
		return 1;
	if (!(cfg->flags & HBM_F_LOOPBACK) && ops_local(skops))
		return 1; /* not policed: not paced either */
	if (!(cfg->flags & HBM_F_PACE) || (cfg->flags & HBM_F_RELEASE)) {
		/* Paced before (pacing turned off, or the limit is going): lift it. */
		f = bpf_sk_storage_get(&hbm_flow_map, sk, 0, 0);
		if (f && f->level_Bps[level & (HBM_PACE_LEVELS - 1)]) {
			f->level_Bps[level & (HBM_PACE_LEVELS - 1)] = 0;
			flow_apply(skops, f);
		}
		return 1;
	}
	f = bpf_sk_storage_get(&hbm_flow_map, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!f)
		return 1;
	c = q->pace_Bps; /* racy read of one word: fine */
	if (!c)
		c = cfg->rate_bps / 8;
	f->level_Bps[level & (HBM_PACE_LEVELS - 1)] = c;
	flow_apply(skops, f);
	return 1;
}

#endif /* HBM_PACING_H */
