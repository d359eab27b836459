/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Pacing assist: the TCP flows of a limited group pace themselves to the
 * group's per-flow share (share.h): SO_MAX_PACING_RATE turns on TCP's
 * internal pacing (an hrtimer per socket, no fq needed) and caps its rate.
 *
 * The egress program computes each socket's want (the least share of its
 * limited groups) on every packet; this sockops program applies it on the
 * socket's ACKs (BPF_SOCK_OPS_RTT_CB), comparing with the cap the socket
 * really has, so a workload that lifts its own cap is capped again on its
 * next ACK.
 *
 * Transfers: a socket whose every written byte was acked is idle; it leaves
 * its groups' flow counts at once (share_depart), and so does a socket that
 * closes. Its cap becomes its share as a transfer (weight XFER_WEIGHT,
 * share.h), which the first packet of its next transfer, one TSO packet,
 * leaves at whatever the cap: TCP delays a paced socket's packet only by
 * the time the one before it took at the cap. Where its own group has
 * credit when it goes idle, the next transfer's first window, as much as
 * that credit holds for it (idle_room), leaves unpaced: TCP puts at most
 * half its cwnd in one packet (tcp_cwnd_test), so at the cap a 10 KB
 * request in a 100mbit group left in two packets, the second 0.3 ms later,
 * where an htb class with tokens sends it whole. Data plane v2 lifted an idle
 * socket's cap to 64 KB per millisecond for an "RPC class" at 7/8 of the
 * rate: a back-to-back 10 KB loop then took 168 of its group's 200 Mbit/s
 * and left 12 to a 1 MB loop beside it (1 MB P99 680 ms against htb's 97).
 * Credit is not such a class: a loop that keeps its group busy leaves its
 * queue none, and is paced at its share as before.
 */
#ifndef HBM_PACING_H
#define HBM_PACING_H

#include "assist.h"
#include "cgpath.h"
#include "gate.h"
#include "policy.h"

#define TCP_CLOSE_STATE 7 /* TCP_CLOSE, the state a socket ends in */

/* idle_room is what group (q, cfg) lets a socket's next transfer send
 * unpaced, bytes: the credit its queue holds (at most burst_ns), at the
 * rate in force, shared with the flows it counted in its last window, the
 * transfer weighing XFER_WEIGHT as there. Read when the socket goes idle,
 * right after its last transfer was charged: a lower bound of what the
 * group holds when the next one starts. Called with the queue locked. */
static __always_inline __u64 idle_room(const struct hbm_queue *q, const struct hbm_config *cfg, __u64 now)
{
	__s64 credit = (__s64)(now - q->vtime_ns);
	__u64 rate = q->eff_bps && q->eff_base_bps == cfg->rate_bps ? q->eff_bps : cfg->rate_bps, bytes;

	if (credit <= 0)
		return 0;
	if ((__u64)credit > cfg->burst_ns)
		credit = (__s64)cfg->burst_ns;
	/* credit <= burst_ns < 2^42 ns (an hour, rate.Validate) and rate <
	 * 2^39 bits/s: us x bytes per ms < 2^59. */
	bytes = (__u64)credit / 1000 * (rate / 8000) / 1000;
	return bytes * XFER_WEIGHT / (q->flows + XFER_WEIGHT);
}

/* depart leaves every group the socket is counted in (share.h,
 * share_depart; closed: for good): each level of its cgroup path with a
 * slot in s->seen, read from the socket's cgroup path (cgpath.h). Returns
 * the deepest such group's idle_room: what the socket's own group lets its
 * next transfer send at once (0 when closed). */
static __always_inline __u64 depart(struct tcp_sock *tp, struct hbm_sock *s, int closed)
{
	struct hbm_key key = { .dir = HBM_DIR_EGRESS };
	const struct hbm_config *cfg;
	struct hbm_queue *q;
	struct cgroup *cg;
	__u64 now = bpf_ktime_get_ns(), room = 0;
	int level, i;

	s->burst = 0;
	cg = sk_cgroup((struct sock *)tp, &level);
	if (!cg)
		return 0;
	for (i = 0; i < HBM_MAX_LEVELS; i++) {
		if (i > level)
			break;
		if (!s->seen[i])
			continue;
		key.cgroup_id = cgroup_level_id(cg, level, i);
		if (!key.cgroup_id)
			break;
		q = bpf_map_lookup_elem(&hbm_queue_map, &key);
		cfg = bpf_map_lookup_elem(&hbm_limit_map, &key);
		if (!q) {
			s->seen[i] = 0;
			continue;
		}
		bpf_spin_lock(&q->lock);
		share_depart(q, s, i, closed);
		room = cfg && !closed ? idle_room(q, cfg, now) : 0;
		bpf_spin_unlock(&q->lock);
	}
	return room;
}

/* cwnd_fit is the cwnd clamp, in segments, that paces a socket capped at
 * cap bytes/s in small packets: TCP sizes a TSO packet to 64 KB whatever
 * its pacing rate below 512 us of min RTT (tcp_tso_rtt_log), and a paced
 * socket sends one such packet, then waits its time at the cap: 84 ms for
 * a flow at 6 Mbit/s. A 100 KB response was one such wait, and a share
 * that dipped when the packet left stalled the flow for the whole wait
 * (measured: 32 clients of 1 MB responses at 0.86 of 200mbit, 0.98 with
 * tcp_tso_rtt_log=0). The cwnd bounds a TSO packet too, so the clamp is a
 * millisecond at the cap, as TCP sizes packets at larger RTTs, and never
 * below twice what the cap needs in flight at the socket's RTT, nor below
 * CWND_MIN_SEGS. 0: no clamp (no cap). */
static __always_inline __u32 cwnd_fit(struct tcp_sock *tp, __u64 cap)
{
	__u64 mss = tp->mss_cache, srtt_us = tp->srtt_us >> 3, ms, bdp;

	if (!cap || cap > PACE_MAX_BPS)
		return 0;
	if (!mss)
		mss = 1448;
	ms = cap / 1000 / mss;
	bdp = 2 * cap * srtt_us / 1000000 / mss; /* cap < 2^32, srtt < 2^31 */
	if (ms < bdp)
		ms = bdp;
	if (ms < CWND_MIN_SEGS)
		ms = CWND_MIN_SEGS;
	return ms > 65535 ? 0 : (__u32)ms;
}

/* pace applies cap to the socket: its pacing cap and the cwnd clamp that
 * goes with it (cwnd_fit). */
static __always_inline void pace(struct bpf_sock_ops *skops, struct tcp_sock *tp, struct hbm_sock *s,
				 __u64 cap)
{
	pace_set(skops, tp, s, cap);
	cwnd_set(skops, tp, s, cwnd_fit(tp, cap));
}

/* xfer_time_first is how long a connection's first transfer stays one: as
 * long as the last of its listener's connections (a server answering each
 * request on a new connection; share.h, xfer_time_next), else XFER_TIME. */
static __always_inline __u32 xfer_time_first(struct bpf_sock_ops *skops)
{
	struct hbm_listen *l = listen_entry(skops);

	return l && l->xfer_time ? l->xfer_time : XFER_TIME;
}

static __always_inline int hbm_pace(struct bpf_sock_ops *skops)
{
	struct hbm_sock *s;
	struct tcp_sock *tp;
	struct bpf_sock *sk;

	switch (skops->op) {
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		/* Ask for a callback on every ACK and on the socket's end. */
		bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags | BPF_SOCK_OPS_RTT_CB_FLAG |
						 BPF_SOCK_OPS_STATE_CB_FLAG);
		gate_peer_note(skops);
		jiffy_ns(bpf_ktime_get_ns()); /* starts the gate's clock */
		sk = skops->sk;
		if (skops->op == BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB && sk) {
			/* A server's connection: its handshake went through
			 * the gate, which holds its first segments (a
			 * client's is marked by gate_active, if the gate
			 * could hold it). */
			s = bpf_sk_storage_get(&hbm_flow_map, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
			if (s)
				s->gate_open = 1;
		}
		return 1;
	case BPF_SOCK_OPS_TIMEOUT_INIT:
		return gate_timeout(skops);
	case BPF_SOCK_OPS_STATE_CB:
		if (skops->args[1] == TCP_CLOSE_STATE)
			gate_peer_note(skops);
		break;
	case BPF_SOCK_OPS_RTT_CB:
		break;
	default:
		return 1;
	}
	sk = skops->sk;
	if (!sk)
		return 1;
	s = bpf_sk_storage_get(&hbm_flow_map, sk, 0, 0);
	if (!s)
		return 1; /* the data plane has not seen it send: nothing to apply */
	tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return 1;
	if (skops->op == BPF_SOCK_OPS_STATE_CB) {
		if (skops->args[1] == TCP_CLOSE_STATE)
			depart(tp, s, 1);
		return 1;
	}
	if (!s->xfer_time)
		s->xfer_time = xfer_time_first(skops);
	if (tp_idle(tp)) {
		__u64 room = 0;

		if (s->burst) {
			struct hbm_listen *l = listen_entry(skops);

			/* The transfer ends: its length sets the next's, and
			 * the first of its listener's next connection. */
			s->xfer_time = xfer_time_next((__u32)(bpf_ktime_get_ns() >> XFER_TIME_SHIFT) -
						      s->xfer_start);
			if (l && l->xfer_time != s->xfer_time)
				l->xfer_time = s->xfer_time;
			room = depart(tp, s, 0);
		}
		if (s->want_Bps && room >= (__u64)CWND_MIN_SEGS * tp->mss_cache) {
			/* Its group has room: the next transfer's first
			 * window, at most the room, leaves unpaced (an htb
			 * class with tokens sends a whole packet, of any
			 * size), and its first ACK paces it at its share
			 * again (below). */
			__u64 segs = room / tp->mss_cache;

			pace_set(skops, tp, s, PACE_MAX_BPS);
			cwnd_set(skops, tp, s, segs > CWND_XFER_SEGS ? CWND_XFER_SEGS : (__u32)segs);
			return 1;
		}
		pace(skops, tp, s, s->xfer_Bps ? s->xfer_Bps : s->want_Bps);
		return 1;
	}
	pace(skops, tp, s, s->want_Bps);
	return 1;
}

#endif /* HBM_PACING_H */
