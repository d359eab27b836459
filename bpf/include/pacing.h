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
 * closes. Its cap is lifted and its header-option callback turned on
 * (armed), so that its owner's next write reaches this program (from
 * tcp_current_mss) before anything of it is queued: the transfer's first
 * window is as much as its own group's credit holds for it then
 * (xfer_plan) and leaves unpaced; with less room than its cwnd it is
 * paced at its share as a transfer (weight XFER_WEIGHT, share.h) from its
 * second packet on (xfer_begin), and from its first ACK on at its share,
 * unless all it wrote fits in the room. TCP
 * puts at most half its cwnd in one packet (tcp_cwnd_test) and delays a
 * paced socket's packet by the time the one before it took at the cap, so
 * at the cap a 10 KB request in a 100mbit group left in two packets, the
 * second 0.3 ms later, where an htb class with tokens sends it whole. With
 * the credit read when the socket went idle instead, right after its last
 * transfer was charged, a 30 KB request in a 100mbit group had 14 of its
 * 22 segments unpaced and the rest at the cap (P50 1.5 ms, now 0.12).
 * Data plane v2 lifted an idle
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
#include "room.h"

#define TCP_CLOSE_STATE 7 /* TCP_CLOSE, the state a socket ends in */

#define COUNTED_DEPART 0 /* it went idle (share.h, share_depart) */
#define COUNTED_CLOSE  1 /* it closed (share_depart, for good) */
#define COUNTED_WRITE  2 /* its owner writes, the socket having received rcv (share_write) */

/* counted_walk applies op (COUNTED_*) to every group the socket has a slot
 * in (s->seen; for COUNTED_WRITE, those it left), each a level of its
 * cgroup path (cgpath.h), under the group's queue lock. A slot whose group
 * has no queue any more is emptied. */
static __always_inline void counted_walk(struct tcp_sock *tp, struct hbm_sock *s, int op, __u32 rcv)
{
	struct hbm_key key = { .dir = HBM_DIR_EGRESS };
	const struct hbm_config *cfg;
	struct hbm_queue *q;
	struct cgroup *cg;
	__u64 now = bpf_ktime_get_ns();
	int level, i;

	cg = sk_cgroup((struct sock *)tp, &level);
	if (!cg)
		return;
	for (i = 0; i < HBM_MAX_LEVELS; i++) {
		if (i > level)
			break;
		if (!s->seen[i] || (op == COUNTED_WRITE && !(s->seen[i] & SEEN_LEFT)))
			continue;
		key.cgroup_id = cgroup_level_id(cg, level, i);
		if (!key.cgroup_id)
			break;
		q = bpf_map_lookup_elem(&hbm_queue_map, &key);
		if (!q) {
			s->seen[i] = 0;
			continue;
		}
		if (op == COUNTED_WRITE) {
			cfg = bpf_map_lookup_elem(&hbm_limit_map, &key);
			if (!cfg || !(cfg->flags & HBM_F_PACE))
				continue;
			bpf_spin_lock(&q->lock);
			share_write(q, cfg, s, i, rcv, now);
			bpf_spin_unlock(&q->lock);
			continue;
		}
		bpf_spin_lock(&q->lock);
		share_depart(q, s, i, op == COUNTED_CLOSE);
		bpf_spin_unlock(&q->lock);
	}
}

/* depart leaves every group the socket is counted in (share.h,
 * share_depart; closed: for good). */
static __always_inline void depart(struct tcp_sock *tp, struct hbm_sock *s, int closed)
{
	s->burst = 0;
	counted_walk(tp, s, closed ? COUNTED_CLOSE : COUNTED_DEPART, 0);
}

/* recount counts the socket back in its groups' flow counts at its owner's
 * write after it went idle, where that write answers something (share.h,
 * share_write, write_answers): its first packet may wait out its pacing
 * time first. */
static __always_inline void recount(struct tcp_sock *tp, struct hbm_sock *s)
{
	__u32 rcv = (__u32)tp->bytes_received;

	if (write_answers(s, rcv))
		counted_walk(tp, s, COUNTED_WRITE, rcv);
}

/* xfer_room is the first window, segments of mss bytes, that the
 * socket's own group (the deepest level it was counted in, s->seen, with a
 * limit) gives the transfer it is about to begin (room.h, room_plan, read
 * as the owner writes). */
static __always_inline __u32 xfer_room(struct tcp_sock *tp, struct hbm_sock *s, __u64 mss)
{
	struct hbm_key key = { .dir = HBM_DIR_EGRESS };
	const struct hbm_config *cfg;
	struct hbm_queue *q;
	struct cgroup *cg;
	__u64 now = bpf_ktime_get_ns();
	int level, top, i, j;
	__u32 segs;

	cg = sk_cgroup((struct sock *)tp, &level);
	if (!cg)
		return 0;
	top = level < HBM_MAX_LEVELS ? level : HBM_MAX_LEVELS - 1;
	for (j = 0; j < HBM_MAX_LEVELS; j++) {
		if (top - j < 0)
			break;
		i = (top - j) & (HBM_MAX_LEVELS - 1); /* the verifier's bound */
		if (!s->seen[i])
			continue;
		key.cgroup_id = cgroup_level_id(cg, level, i);
		if (!key.cgroup_id)
			continue;
		q = bpf_map_lookup_elem(&hbm_queue_map, &key);
		if (!q)
			continue;
		cfg = bpf_map_lookup_elem(&hbm_limit_map, &key);
		if (!cfg)
			continue;
		bpf_spin_lock(&q->lock);
		segs = room_plan(q, cfg, s, now, mss);
		bpf_spin_unlock(&q->lock);
		return segs;
	}
	return 0;
}

/* admit_fold is record c (0: none yet) a quarter of the way to b. */
static __always_inline __u32 admit_fold(__u32 c, __u64 b)
{
	if (b > 0xffffffffULL)
		b = 0xffffffffULL;
	if (!c)
		return (__u32)b;
	if (b > c)
		return c + (__u32)((b - c) >> 2);
	return c - (__u32)((c - b) >> 2);
}

/* admit_note folds what a connection the gate could hold sent, as it
 * closes, into the record of connections like it: a server connection's
 * listener's (hbm_listen.conn_bytes), else, for a client's, its server's
 * (hbm_peer.conn_bytes). admit_fits reads it: whether the gate can admit
 * such connections whole. A connection's whole, not its first transfer: a
 * keep-alive connection's first response admitted unpaced gains nothing
 * (its next ones are paced anyway) and costs its pool's start (64
 * keep-alive clients of 30 KB at 200mbit: P99 94 ms against 92). */
static __always_inline void admit_note(struct bpf_sock_ops *skops, struct tcp_sock *tp)
{
	struct hbm_listen *l = listen_entry(skops);
	struct hbm_peer_key k = {};
	struct hbm_peer *p;

	if (l) {
		l->conn_bytes = admit_fold(l->conn_bytes, tp->bytes_acked);
		return;
	}
	peer_key(skops, &k);
	p = bpf_map_lookup_elem(&hbm_peer_map, &k);
	if (p)
		p->conn_bytes = admit_fold(p->conn_bytes, tp->bytes_acked);
}

/* xfer_end ends the socket's transfer (everything it wrote was acked): its
 * length sets how long its next stays one, and the first of its
 * listener's next connection (share.h, xfer_time_next); it leaves its
 * groups' flow counts (depart). */
static __always_inline void xfer_end(struct bpf_sock_ops *skops, struct tcp_sock *tp, struct hbm_sock *s)
{
	struct hbm_listen *l = listen_entry(skops);

	s->xfer_time = xfer_time_next((__u32)(bpf_ktime_get_ns() >> XFER_TIME_SHIFT) - s->xfer_start);
	if (l && l->xfer_time != s->xfer_time)
		l->xfer_time = s->xfer_time;
	depart(tp, s, 0);
}

/* cwnd_fit is the cwnd clamp, in segments, for a socket capped at cap
 * bytes/s: cwnd_segs at its mss and smoothed RTT and the rate of its
 * groups the policer last saw (group_kBps). 0: no clamp. */
static __always_inline __u32 cwnd_fit(struct tcp_sock *tp, struct hbm_sock *s, __u64 cap)
{
	return cwnd_segs(tp->mss_cache, tp->srtt_us >> 3, cap, (__u64)s->group_kBps << 10);
}

/* cwnd_floor is the cwnd clamp for a socket capped at cap: cwnd_fit, at
 * least the first window its transfer was given (s->room_segs): a lower
 * clamp would take the cwnd that window needs from the next transfer (TCP
 * grows a cwnd only on ACKs, and the ACK that makes a socket idle is
 * processed after this callback, the clamp applied to it). */
static __always_inline __u32 cwnd_floor(struct tcp_sock *tp, struct hbm_sock *s, __u64 cap)
{
	__u32 segs = cwnd_fit(tp, s, cap);

	return segs && segs < s->room_segs ? s->room_segs : segs;
}

/* pace applies cap to the socket: its pacing cap and the cwnd clamp that
 * goes with it (cwnd_floor). */
static __always_inline void pace(struct bpf_sock_ops *skops, struct tcp_sock *tp, struct hbm_sock *s,
				 __u64 cap)
{
	pace_set(skops, tp, s, cap);
	cwnd_set(skops, tp, s, cwnd_floor(tp, s, cap));
}

/* hdr_cb_shared reports whether the receive-window assist (rxwin.h) wants
 * the socket's header-option callbacks too, which it turns on when a
 * connection of an ingress-limited group is established: the socket has
 * its state (it received payload), or a level of its cgroup path has an
 * ingress limit. The pacing assist then leaves the flag on when its own
 * use of it ends. */
static __always_inline int hdr_cb_shared(struct bpf_sock *sk, struct tcp_sock *tp)
{
	struct hbm_key key = { .dir = HBM_DIR_INGRESS };
	struct cgroup *cg;
	int level, i;

	if (bpf_sk_storage_get(&hbm_rx_map, sk, 0, 0))
		return 1;
	cg = sk_cgroup((struct sock *)tp, &level);
	if (!cg)
		return 0;
	for (i = 0; i < HBM_MAX_LEVELS; i++) {
		if (i > level)
			break;
		key.cgroup_id = cgroup_level_id(cg, level, i);
		if (!key.cgroup_id)
			break;
		if (bpf_map_lookup_elem(&hbm_limit_map, &key))
			return 1;
	}
	return 0;
}

/* xfer_plan gives the transfer the socket's owner is about to begin (it
 * writes after the socket went idle) its first window: as much as its own
 * group's credit holds for it now (xfer_room), at most CWND_XFER_SEGS, to
 * leave unpaced, the cwnd clamped to it (s->room_segs; 0: less room than
 * CWND_MIN_SEGS, paced at its share as a transfer when it begins,
 * xfer_begin). An htb class with tokens sends a whole packet of any size;
 * TCP puts at most half its cwnd in one packet (tcp_cwnd_test) and, paced,
 * sends the next one the first's time at the cap later.
 *
 * Called from tcp_current_mss while the socket is idle: first in the
 * owner's write, before anything of it is queued, but also from TCP's own
 * small-queue handler (tcp_tsq_write) when the server frees the last
 * request's packets, right after the socket went idle: in one run of 30 KB
 * requests that call gave half of them the credit left right after the
 * last one was charged. So each call plans afresh (its own plan, if the
 * last one reserved, returned to the credit first: room.h), the write's
 * call is the last, and the transfer takes the plan when its first packet
 * leaves. */
static __always_inline void xfer_plan(struct bpf_sock_ops *skops, struct tcp_sock *tp, struct hbm_sock *s)
{
	__u64 mss = tp->mss_cache ? tp->mss_cache : 1448;

	if (!s->want_Bps)
		return; /* no limit (any more): nothing to apply */
	s->room_segs = xfer_room(tp, s, mss);
	s->xfer_seq = tp->write_seq;
	cwnd_set(skops, tp, s, s->room_segs ? s->room_segs : cwnd_floor(tp, s, s->xfer_Bps ? s->xfer_Bps : s->want_Bps));
}

/* xfer_begin is the first packet of the transfer planned (xfer_plan)
 * leaving: with room for less than the socket's cwnd, it is paced at its
 * share as a transfer from its next packet on (the cwnd clamp lowers no
 * cwnd before an ACK, so the cap bounds what goes beyond the room); else
 * its first ACK paces it at its share (hbm_pace).
 *
 * The cap was lifted when the socket went idle (hbm_pace, armed), not in
 * xfer_plan: lifting SO_MAX_PACING_RATE leaves the pacing rate TCP
 * computed on its last ACK (sk_setsockopt lowers it to the cap, never
 * raises it), and no ACK comes before the first window leaves; lowering
 * acts at once. */
static __always_inline void xfer_begin(struct bpf_sock_ops *skops, struct tcp_sock *tp, struct hbm_sock *s)
{
	s->armed = 0;
	s->plan_ns = 0; /* its packets now charge what it reserved */
	if (!s->want_Bps)
		return;
	if (s->room_segs < tp->snd_cwnd)
		pace(skops, tp, s, s->xfer_Bps ? s->xfer_Bps : s->want_Bps);
}

/* hbm_sock.armed: why its header-option callbacks are on (0: they are not,
 * or only for the window assist). */
#define ARMED_IDLE  1 /* idle: the next write plans its transfer (xfer_plan) */
#define ARMED_WATCH 2 /* a transfer that fits its room is under way: the
		       * write after it ends it if its last ACK comes without
		       * a callback (xfer_end) */

/* arm turns on the socket's header-option callbacks, so that its owner's
 * next write plans its first window (xfer_plan, from tcp_current_mss)
 * before anything of it is queued. Returns 1 if they are on. */
static __always_inline int arm(struct bpf_sock_ops *skops)
{
	int flags = skops->bpf_sock_ops_cb_flags | BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG;

	return bpf_sock_ops_cb_flags_set(skops, flags) == 0;
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
	__u64 cap;

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
	case BPF_SOCK_OPS_HDR_OPT_LEN_CB:
		/* While armed (below): from tcp_current_mss (xfer_plan) and
		 * for every packet the socket sends, pure ACKs too. */
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
		if (skops->args[1] == TCP_CLOSE_STATE) {
			if (s->gate_open)
				admit_note(skops, tp);
			depart(tp, s, 1);
		}
		return 1;
	}
	if (skops->op == BPF_SOCK_OPS_HDR_OPT_LEN_CB) {
		if (!s->armed)
			return 1; /* the window assist's (rxwin.h) */
		if (tp_idle(tp)) {
			/* Nothing unacked, nothing queued: a pure ACK, or
			 * a write may begin. The transfer before it ends
			 * here if its last ACK came without a callback. */
			if (skops->args[0] == BPF_WRITE_HDR_TCP_CURRENT_MSS) {
				if (s->burst)
					xfer_end(skops, tp, s);
				xfer_plan(skops, tp, s);
				recount(tp, s);
				s->armed = ARMED_IDLE;
			}
			return 1;
		}
		if (s->armed == ARMED_WATCH)
			return 1; /* the transfer it watches still sends */
		/* Its owner wrote: the transfer's first packet leaves. The
		 * callbacks go off, unless the window assist wants them. */
		xfer_begin(skops, tp, s);
		if (!hdr_cb_shared(sk, tp))
			bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags &
								 ~BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG);
		return 1;
	}
	if (!s->xfer_time)
		s->xfer_time = xfer_time_first(skops);
	if (tp_idle(tp)) {
		if (s->burst) {
			xfer_end(skops, tp, s);
			/* Its next transfer's first window comes from its
			 * group's credit when it begins (xfer_plan): the
			 * credit now, right after this transfer was charged,
			 * is the least it will be. */
			s->armed = s->want_Bps && arm(skops) ? ARMED_IDLE : 0;
		}
		cap = s->xfer_Bps ? s->xfer_Bps : s->want_Bps;
		if (s->armed) {
			/* Unpaced until the write, which paces it again if
			 * its group has no room then; its cwnd clamp as
			 * paced, which bounds what a write that comes
			 * without the callback sends before its first ACK. */
			pace_set(skops, tp, s, PACE_MAX_BPS);
			cwnd_set(skops, tp, s, cwnd_floor(tp, s, cap));
			return 1;
		}
		pace(skops, tp, s, cap);
		return 1;
	}
	/* In a transfer: paced at its share from its first ACK on, unless
	 * all its owner wrote fits in the first window it was given. Then
	 * nothing of it is left to pace, and a cap lowered now would pace
	 * the next transfer's first window at its share: TCP computes the
	 * pacing rate on ACKs, and the ACK that ends a transfer can come
	 * without this callback (seen with 30 KB requests at 100mbit: a 6
	 * KB tail waited 1 ms, in one transfer of ten). So the next write
	 * is watched for from here on (armed), and ends this transfer
	 * itself if that ACK's callback does not come. */
	if (s->room_segs && tp->write_seq - s->xfer_seq <= s->room_segs * tp->mss_cache) {
		if (!s->armed && arm(skops))
			s->armed = ARMED_WATCH;
		return 1;
	}
	/* A connection the handshake gate admitted (its group admits rather
	 * than paces: share.h, admit_steer) sends its first ADMIT_BYTES
	 * unpaced; the gate held it for them. */
	if (s->gate_open && s->admit && tp->bytes_acked < ADMIT_BYTES && admit_fits(skops)) {
		pace_set(skops, tp, s, PACE_MAX_BPS);
		return 1;
	}
	pace(skops, tp, s, s->want_Bps);
	return 1;
}

#endif /* HBM_PACING_H */
