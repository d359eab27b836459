/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The skeleton both assists and the socket walker share: what a socket's
 * assist state (struct hbm_sock) means, how an assist applies its want to a
 * socket without undoing what the socket's owner chose, and how it lets go.
 *
 * The data-plane programs (policy.h) write want_Bps on every packet; the
 * sockops programs (pacing.h, rxwin.h) apply it; the walker (sockets.h)
 * reaches sockets that send nothing. Include after vmlinux.h. */
#ifndef HBM_ASSIST_H
#define HBM_ASSIST_H

#include "hbm.h"
#include "maps.h"
#include "tcp.h"

#define PACE_UNLIMITED_OPT 0xffffffffU   /* SO_MAX_PACING_RATE: no limit */
#define PACE_UNLIMITED     (~0UL)        /* ... as the kernel holds it */
#define PACE_MAX_BPS       0xfffffffeULL /* the option is 32-bit bytes per second */
#define RXWIN_MAX          (64U << 20)   /* a window clamp that clamps nothing */

/* netns_note records that an assist changed a socket of this cgroup in this
 * network namespace (hbm_netns_map), so that `hbm unset` finds the
 * namespace to walk even when no process of the group is left in it
 * (internal/dataplane/sockets.go). Called only when a socket is changed,
 * which is rare next to packets. */
static __always_inline void netns_note(struct tcp_sock *tp)
{
	struct sock *sk = (struct sock *)tp;
	struct hbm_netns_key k = {};
	struct cgroup *cg;
	__u64 now = bpf_ktime_get_ns();

	k.netns_ino = BPF_CORE_READ(sk, __sk_common.skc_net.net, ns.inum);
	cg = BPF_CORE_READ(sk, sk_cgrp_data.cgroup);
	if (cg)
		k.cgroup_id = BPF_CORE_READ(cg, kn, id);
	if (k.netns_ino && k.cgroup_id)
		bpf_map_update_elem(&hbm_netns_map, &k, &now, BPF_ANY);
}

/* pace_set makes the socket's pacing cap want (0: none), unless the cap the
 * socket has is within 1/32 of it, or is lower and not HBM's (the socket's
 * owner capped itself lower: that stays). A cap above want is lowered
 * whoever set it: a workload cannot lift its group's cap. Returns 1 if it
 * changed the socket. ctx is the sockops or iterator context. */
static __always_inline int pace_set(void *ctx, struct tcp_sock *tp, struct hbm_sock *s, __u64 want)
{
	__u64 cur = tp_max_pacing_rate(tp), target = PACE_UNLIMITED;
	__u32 val = PACE_UNLIMITED_OPT;

	if (want && want <= PACE_MAX_BPS) {
		target = want;
		val = (__u32)want;
	}
	if (target == cur)
		return 0;
	if (target != PACE_UNLIMITED && cur != PACE_UNLIMITED &&
	    target <= cur + (cur >> 5) && target + (target >> 5) >= cur)
		return 0;
	if (target > cur && cur != s->applied)
		return 0;
	if (bpf_setsockopt(ctx, SOL_SOCKET, SO_MAX_PACING_RATE_OPT, &val, sizeof(val)))
		return 0;
	if (target != PACE_UNLIMITED)
		netns_note(tp);
	s->applied = target;
	return 1;
}

#define TCP_BPF_SNDCWND_CLAMP_OPT 1002 /* TCP_BPF_SNDCWND_CLAMP, SOL_TCP */
#define CWND_MIN_SEGS  4          /* never clamp cwnd below this */
#define CWND_XFER_SEGS 44         /* an unpaced first window, at most (64 KB) */
#define CWND_FREE_SEGS 0x7fffffff /* a clamp that clamps nothing */

/* cwnd_segs is the cwnd clamp, in segments of mss bytes, that paces a
 * socket capped at cap bytes/s in small packets, in a group whose rate in
 * force is group_Bps (0: not known). TCP sizes a TSO packet to 64 KB
 * whatever its pacing rate below 512 us of min RTT (tcp_tso_rtt_log), and
 * a paced socket sends one such packet, then waits its time at the cap: 84
 * ms for a flow at 6 Mbit/s. A 100 KB response was one such wait, and a
 * share that dipped when the packet left stalled the flow for the whole
 * wait (measured: 32 clients of 1 MB responses at 0.86 of 200mbit, 0.98
 * with tcp_tso_rtt_log=0). The cwnd bounds a TSO packet too, so the clamp
 * is a millisecond at the cap, as TCP sizes packets at larger RTTs; a flow
 * that is a small part of a fast group gets up to half a millisecond at
 * the group's rate, at most four at its cap: a packet's length is the
 * group's queue's business, and a millisecond at the cap of one of 32
 * streams in a 1gbit group is 4 KB, which made them leave in 3.8 KB
 * packets at 0.64 cores where htb's left in 65 KB (with the group's half
 * millisecond: 8.8 KB and 0.49 cores, their 10 KB neighbour's tail no
 * longer; docs/design.md). Never below twice what the cap needs in flight
 * at the socket's smoothed RTT srtt_us, nor below CWND_MIN_SEGS. 0: no
 * clamp (no cap, or more than 65535 segments). */
static __always_inline __u32 cwnd_segs(__u64 mss, __u64 srtt_us, __u64 cap, __u64 group_Bps)
{
	__u64 segs, grp, most, bdp;

	if (!cap || cap > PACE_MAX_BPS)
		return 0;
	if (!mss)
		mss = 1448;
	if (group_Bps > PACE_MAX_BPS)
		group_Bps = PACE_MAX_BPS;
	segs = cap / 1000 / mss;
	grp = group_Bps / 2000 / mss;
	most = 4 * cap / 1000 / mss;
	if (grp > most)
		grp = most;
	if (segs < grp)
		segs = grp;
	if (srtt_us > 0x7fffffff)
		srtt_us = 0x7fffffff;
	bdp = 2 * cap * srtt_us / 1000000 / mss; /* cap < 2^32, srtt < 2^31 */
	if (segs < bdp)
		segs = bdp;
	if (segs < CWND_MIN_SEGS)
		segs = CWND_MIN_SEGS;
	return segs > 65535 ? 0 : (__u32)segs;
}

/* cwnd_set makes the socket's cwnd clamp segs (0: none), unless the clamp
 * it has is within a quarter of it, or is lower and not HBM's (the
 * socket's owner clamped it). The kernel also sets ssthresh to the clamp
 * (TCP_BPF_SNDCWND_CLAMP): below the clamp the flow is in slow start, which
 * pacing holds. Returns 1 if it changed the socket. */
static __always_inline int cwnd_set(void *ctx, struct tcp_sock *tp, struct hbm_sock *s, __u32 segs)
{
	__u32 cur = tp->snd_cwnd_clamp;
	int val = segs ? (int)segs : CWND_FREE_SEGS;

	if (!segs && !s->cwnd_applied)
		return 0;
	if (segs && cur != s->cwnd_applied && cur < segs)
		return 0; /* the owner's, and lower */
	if (segs && cur <= segs + (segs >> 2) && cur + (cur >> 2) >= segs)
		return 0;
	if (!segs && cur != s->cwnd_applied) {
		s->cwnd_applied = 0; /* the owner's now: leave it */
		return 0;
	}
	if (bpf_setsockopt(ctx, SOL_TCP, TCP_BPF_SNDCWND_CLAMP_OPT, &val, sizeof(val)))
		return 0;
	s->cwnd_applied = segs;
	return 1;
}

/* clamp_lift lifts the receive-window clamp HBM set, if any. */
static __always_inline int clamp_lift(void *ctx, struct hbm_sock *s)
{
	__u32 val = RXWIN_MAX;

	if (!s->applied)
		return 0;
	if (bpf_setsockopt(ctx, SOL_TCP, TCP_WINDOW_CLAMP_OPT, &val, sizeof(val)))
		return 0;
	s->applied = 0;
	return 1;
}

#endif /* HBM_ASSIST_H */
