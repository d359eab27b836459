/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The policy: charge the packet to each limited group's virtual queue on its
 * socket's cgroup path, then pass, mark, return congestion or drop by how far
 * the queue stands in time.
 *
 *   backlog <= mark             pass
 *   mark < backlog              ECT: CE. Non-ECT TCP with payload (egress):
 *                               congestion code with probability rising
 *                               linearly to 1 at drop_large. Other traffic
 *                               (pure ACKs, SYNs included): pass.
 *   backlog > drop_large        large packets dropped
 *   backlog > drop_small        all packets dropped
 * Never dropped: anything under HBM_F_NO_DROP; on egress, TCP flows with
 * fewer than min_inflight packets out (the probe timer would stall them)
 * and flows their pacing cap or the handshake gate holds (flow_held); on
 * ingress, what rx_protected() spares (the receiver's proxy for the same
 * rule; a flow's last segments and an open hole's only while the queue
 * stands below max_backlog) and fresh RPC packets (within their group's
 * RPC budget, fresh_budget). Never marked: a connection's first segments,
 * which TCP does not pace either (egress), and RPC bursts (ingress): a CE
 * or congestion code there ends slow start of a transfer that pacing and
 * the share already steer; nor, up to drop_large, egress TCP flows the
 * pacing assist holds, whose cwnd a signal would only shrink (and with it
 * their packets: signal_spared). Dropped packets are not charged.
 *
 * Egress drops carry the congestion code: TCP learns of the drop at once and
 * enters CWR; UDP sees ENOBUFS, which it hides from the sender unless
 * IP_RECVERR, as for a qdisc drop. Ingress can only signal the sender: no
 * congestion code (the kernel ignores bit 1 there), a drop is a real loss
 * the sender must detect and repair. */
#ifndef HBM_POLICY_H
#define HBM_POLICY_H

#include "hbm.h"
#include "maps.h"
#include "pkt.h"
#include "vqueue.h"
#include "gateq.h"
#include "share.h"

/* Resolution of the cwr probability ramp. */
#define CWR_RAMP_STEPS 1024
/* The burst a flow within its share may send unmarked (and, idle, unpaced). */
#define FRESH_BURST_BYTES (64 * 1024)
/* How long an ingress hole may stay open before the flow may be dropped
 * from again (the sender gave up, or the retransmission went elsewhere). */
#define RX_HOLE_TIMEOUT_NS 1000000000ULL

#define VERDICT_CHARGED 4

/* What one packet brings to every level's decision, and what they decide.
 * Scalars only: police_level is a global function, verified once. The
 * direction's differences are the packet's properties, set by its hook
 * before the walk (hbm.bpf.c): the levels decide alike in both, but for
 * the share loop's tuning (share.h). */
struct verdict {
	struct pkt p;
	__u64 now;
	__u64 want_Bps;     /* least share of the levels that assist (0: none) */
	__u64 xfer_Bps;     /* egress: least share of the levels for a transfer (0: none) */
	__u64 group_Bps;    /* least rate in force of the levels that gave a share,
	                     * bytes/s (0: none): sizes the cwnd clamp (assist.h,
	                     * cwnd_segs) */
	__u32 dir;
	__u32 counted;      /* the socket has assist state (hbm_sock): count its flow */
	__u32 packets_out;  /* egress TCP: the sender's packets in flight (~0: unknown,
	                     * and on ingress: the receiver cannot read them) */
	__u8 protected;     /* the packet's own protection from refusal, PROTECT_*
	                     * (ingress: rx_protected; egress: tx_protected) */
	__u8 candidate;     /* egress: one of the connection's first segments, which
	                     * TCP does not pace (share.h, TCP_UNPACED_SEGS);
	                     * ingress: in the first 64 KB after idle (rx_fresh) */
	__u8 fresh;         /* ingress: ... and within every group's fresh budget:
	                     * never marked, never dropped */
	__u8 first;         /* a candidate goes first, the paced flows sharing what
	                     * it leaves (ingress: an RPC burst); else the loop
	                     * corrects for it (egress: TCP's unpaced segments) */
	__u8 xfer;          /* egress: the flow is in a transfer (share.h) */
	__u8 ect;           /* ingress: the flow's data arrives ECN-capable (hbm_sock.rx_ect) */
	__u8 ce_only;       /* a mark-only level (HBM_F_NO_DROP) can reach the flow
	                     * only by CE, so leaves its share alone unless it is
	                     * ECN-capable (ingress: a window clamp; egress pacing
	                     * holds a flow whatever its ECN) */
	__u8 at_floor;      /* ingress: the window assist holds the socket at its
	                     * two-segment floor (hbm.bpf.c) */
	__u8 held;          /* egress: TCP's pacing or the handshake gate holds the
	                     * flow (flow_held): never refused */
	__u8 gate;          /* egress: the first SYN-ACK of a request the handshake
	                     * gate timed (gate.h): refused while a level stands
	                     * above its drop-large threshold */
	__u8 cn_able;       /* the hook can return the congestion code (egress TCP with payload) */
	__u8 cn;            /* some level returned the congestion code */
	__u8 drop;          /* some level dropped it */
	/* The levels that charged the packet (police_path): refunded if a
	 * level above them drops it. The first VERDICT_CHARGED only: deeper
	 * nesting than that pays for what a level above drops. */
	__u8 ncharged;
	__u8 lend_due;      /* bit i: the level of charged_id[i] has a lending
	                     * interval to end (lend.h, lend_walk) */
	__u8 borrowed;      /* a level below that may borrow passed it: the levels
	                     * above leave its flows' shares to it (lend.h) */
	__u8 guaranteed;    /* the level below is a borrower sending within its
	                     * guarantee: this level, its lender, neither marks nor
	                     * drops the packet (lend.h) ... */
	__u8 guaranteed_up; /* ... the same, for the level above this one */
	__u8 no_admit;      /* egress: a level that gave a share paces its new
	                     * connections rather than admit them (share.h,
	                     * admit_steer) */
	__u64 charged_id[VERDICT_CHARGED];
	/* ... and what each charged, in 16 ns (a 64 KB packet at 8 kbit/s
	 * costs 65 s: 2^32 x 16 ns is 68 s; more is refunded as that). 32
	 * bits, not 64: the programs' stack is at its 512-byte bound. */
	__u32 charged_ns16[VERDICT_CHARGED];
};

#include "lend.h"

/* How a TCP packet is protected from refusal (rx_protected, tx_protected) */
#define PROTECT_NONE   0 /* dropped by the thresholds like any packet */
#define PROTECT_BOUND  1 /* passes while its charge fits the queue's bound */
#define PROTECT_ALWAYS 2 /* always passes */

/* rx_protected reports whether dropping this ingress TCP packet could leave
 * its sender unable to see the loss quickly, or repeat a loss it is already
 * repairing. The receiver cannot read the sender's packets_out, so it uses
 * what it sees:
 *  - no payload (pure ACK), SYN, RST: nothing to gain, an ACK lost stalls
 *    the group's own sending, a SYN lost waits out the 1 s handshake timer
 *    (PROTECT_ALWAYS);
 *  - PSH, FIN: usually the last segment of a burst; nothing follows it to
 *    reveal its loss but the sender's loss-probe or retransmit timer;
 *  - an open hole: the flow already lost a packet to us and the receiver's
 *    rcv_nxt has not passed it. Its retransmission (and everything until it
 *    arrives) passes, so at most one loss per flow is outstanding and it is
 *    always followed by packets that reveal it (SACK, RACK).
 * The last two (PROTECT_BOUND) pass only while the virtual queue can
 * charge them (police_level): a hole passes the rest of its flow's window,
 * and flows whose windows the assist cannot bring down (a clamp stuck
 * above its share, --no-pace, a socket the assist never reached) could
 * otherwise pass any rate through their holes, uncharged once the queue
 * stands at its bound (so a CI run passed 2.5x its limit: docs/design.md,
 * "Drop storms"). */
static __always_inline int rx_protected(const struct pkt *p, struct bpf_tcp_sock *tp,
					struct hbm_sock *s, __u64 now)
{
	if (!p->payload || (p->tcp_flags & (TCPF_SYN | TCPF_RST)))
		return PROTECT_ALWAYS;
	if (p->tcp_flags & (TCPF_PSH | TCPF_FIN))
		return PROTECT_BOUND;
	if (!tp || !s || !s->hole_ns)
		return PROTECT_NONE;
	if ((__s32)(tp->rcv_nxt - s->hole_end) < 0 && now - s->hole_ns < RX_HOLE_TIMEOUT_NS)
		return PROTECT_BOUND;
	s->hole_ns = 0; /* repaired (or given up on) */
	return PROTECT_NONE;
}

/* flow_held reports whether something other than a refusal already holds
 * an egress packet's flow to its group's rate; such a packet is never
 * refused. A refusal cannot lower the rate of a flow so held; it only stops
 * the flow until its loss-probe timer resends (a tick or two: 4-8 ms at HZ
 * 250), and a flow refused again after each probe sends a segment or two
 * per tick. Measured (64 clients of 30 KB responses at 200mbit,
 * docs/design.md): the responses refused that way took 105 ms against 82
 * for the rest, and made the request P99. Held are:
 *  - a packet TCP paces (not among a connection's first segments,
 *    candidate) of a socket the pacing assist capped (pacing.h) at most
 *    1/32 above the share its last packet was given (s->want_Bps): TCP
 *    sends it no faster than the share whatever the policer does;
 *  - a connection's first segments where its open went through the
 *    handshake gate (s->gate_open: a server's connection, or a client's
 *    towards a server it knows): the gate (gate.h) is what holds those, at
 *    the connection's start. Measured with both: every web-new-200m
 *    cell's share as before (0.98-1.00), and refusals in 10 s from 19,950
 *    to none (30 KB x 64), 45,286 to 1 (10 KB x 64); 8 clients uploading
 *    10 KB on new connections into 100mbit, 16,365 to 3, the P99 26 to 13
 *    ms.
 * Refusals stay for what nothing else holds: a client's first segments
 * towards a server never reached before or far (gate.h), sockets the
 * assist has not capped yet or whose cap stands above the share (until
 * their next ACK caps them again), UDP, --no-pace. */
static __always_inline int flow_held(const struct hbm_sock *s, int candidate)
{
	__u64 w;

	if (!s)
		return 0;
	if (candidate)
		return s->gate_open != 0;
	w = s->want_Bps;
	if (!w || !s->applied || s->applied == ~0ULL)
		return 0;
	return s->applied <= w + (w >> 5);
}

/* tx_protected is an egress TCP packet's own protection from refusal
 * (PROTECT_*, v->protected): a SYN or SYN-ACK always (a refused one waits
 * for TCP's 1 s handshake timer, and a refused SYN-ACK retransmission ends
 * the request: a connection's first round trip is refused only by the
 * handshake gate, v->gate), as is a flow something else already holds
 * (flow_held). */
static __always_inline int tx_protected(const struct pkt *p, int held)
{
	return (p->tcp_flags & TCPF_SYN) || held ? PROTECT_ALWAYS : PROTECT_NONE;
}

/* protection is how a TCP packet is protected from refusal at a level of
 * limit cfg (PROTECT_*): its own protection (v->protected), else, for a
 * flow with fewer than the limit's min_inflight packets out (a refusal
 * would stall it until the loss-probe timer), always where the pacing
 * assist holds the group's flows and only while its charge fits the
 * queue's bound without it: without the assist nothing else holds a server
 * whose responses never have two packets out (64 keep-alive clients of 10
 * KB responses took 12x a 200mbit limit with --no-pace, the excess
 * forgotten at the bound). On ingress the count is unknown (~0) and
 * rx_protected stands for it. */
static __always_inline int protection(const struct verdict *v, const struct hbm_config *cfg)
{
	if (v->protected)
		return v->protected;
	if (v->packets_out < cfg->min_inflight)
		return cfg->flags & HBM_F_PACE ? PROTECT_ALWAYS : PROTECT_BOUND;
	return PROTECT_NONE;
}

/* fresh_budget charges an RPC packet (a fresh-burst candidate) of cost ns
 * at the group's rate to the group's RPC budget, a token bucket at 7/8 of
 * the rate, FRESH_BURST_BYTES deep, and reports whether it had room: then
 * the packet is fresh (never marked or dropped). RPCs that want more than
 * the budget are bulk for the excess, and their sockets are paced to the
 * group's RPC cap (share.h) when they go idle. Called with the queue locked. */
static __always_inline int fresh_budget(struct hbm_queue *q, const struct hbm_config *cfg,
					__u64 cost, __u64 now)
{
	__u64 depth = cost_ns_bytes(q, cfg, FRESH_BURST_BYTES);
	__u64 c = cost * FRESH_COST_NUM / FRESH_COST_DEN;
	int room;

	if ((__s64)(q->fresh_vt_ns - (now - depth)) < 0)
		q->fresh_vt_ns = now - depth; /* idle: a full bucket at most */
	room = (__s64)(q->fresh_vt_ns + c - now) <= 0;
	q->fresh_vt_ns += c;
	if ((__s64)(q->fresh_vt_ns - (now + depth)) > 0)
		q->fresh_vt_ns = now + depth; /* bounded debt */
	return room;
}

/* cwr_roll draws the congestion code with probability (backlog - mark) /
 * (drop_large - mark), 1 at and beyond drop_large. */
static __always_inline int cwr_roll(const struct hbm_config *cfg, __s64 backlog)
{
	__u64 excess = backlog - cfg->mark_ns;
	__u64 span = cfg->drop_large_ns - cfg->mark_ns;

	if (cfg->drop_large_ns <= cfg->mark_ns || excess >= span)
		return 1;
	return (bpf_get_prandom_u32() % CWR_RAMP_STEPS) < excess * CWR_RAMP_STEPS / span;
}

/* assisted reports whether a level of limit cfg has an assist that holds
 * the packet's flow: the level paces (HBM_F_PACE) and the socket has
 * assist state (v->counted); its flow is then counted in the level's share
 * (police_level) and, on egress, spared signals below drop-large
 * (signal_spared). */
static __always_inline int assisted(const struct verdict *v, const struct hbm_config *cfg)
{
	return (cfg->flags & HBM_F_PACE) && v->counted;
}

/* signal_spared reports whether a packet whose charge leaves the virtual
 * queue at backlog goes unsignalled at a level of limit cfg: neither CE
 * nor the congestion code. Spared are packets at or below the mark
 * threshold, a connection's first segments (v->candidate), a borrower's
 * within its guarantee (v->guaranteed), and, up to the drop-large
 * threshold, every egress TCP flow the pacing assist holds at this level
 * (assist state, a level that paces): its cap is the group's signal, and
 * the share loop steers the standing queue below the mark (share.h,
 * floor_steer). A mark or congestion code there lowers no rate (a flow
 * TCP paces at a veth RTT of 50 us needs two segments of cwnd for 250
 * Mbit/s); it cuts cwnd, and a paced flow, rarely cwnd-limited, never
 * grows it back: TCP puts at most half its cwnd in one packet, so 4 cubic
 * streams in a 1gbit group went on in 7 KB packets against htb's 65 KB,
 * the machine 0.51 cores busy against htb's 0.12 (now 33 KB and 0.15:
 * docs/design.md, "Signals a paced flow is spared"). Past drop-large the
 * queue stands far above what the loop steers to, and they are signalled
 * as before. */
static __always_inline int signal_spared(const struct verdict *v, const struct hbm_config *cfg, __s64 backlog)
{
	if (backlog <= (__s64)cfg->mark_ns || v->candidate || v->guaranteed)
		return 1;
	return v->cn_able && assisted(v, cfg) && backlog <= (__s64)cfg->drop_large_ns;
}

/* police_level's results */
#define POLICE_PASS 0 /* go on to the level above */
#define POLICE_DROP 1 /* dropped: stop */
#define POLICE_TOP  2 /* passed, and no level above is limited: stop */

/* police_passed is POLICE_TOP for a configuration with HBM_F_TOP, else
 * POLICE_PASS: arithmetic, not a branch, so that the verifier does not
 * carry two states through the rest of police_level. */
_Static_assert(HBM_F_TOP >> 2 == POLICE_TOP, "police_passed shifts HBM_F_TOP onto POLICE_TOP");

static __always_inline int police_passed(const struct hbm_config *cfg)
{
	return (cfg->flags & HBM_F_TOP) >> 2;
}

/* The lock-free charge (police_fast): taken by a packet that needs nothing
 * of its group's queue but its charge, so that packets from many CPUs in one
 * group do not pass its lock and cache lines between them. Measured with
 * 64-byte UDP under a limit never reached (scripts/bench-pps.sh, docs/
 * design.md "The cost per packet, taken apart"). */

/* frac_fast_settle moves the whole ns of the lock-free charges' remainders
 * (frac_fast_q32) into vtime_ns. Called with the queue locked; the fast
 * path adds to both meanwhile, so both are moved by atomic adds. */
static __always_inline void frac_fast_settle(struct hbm_queue *q)
{
	__u64 whole = q->frac_fast_q32 >> 32;

	if (!whole)
		return;
	__sync_fetch_and_add(&q->frac_fast_q32, -(whole << 32));
	__sync_fetch_and_add(&q->vtime_ns, whole);
}

/* police_fast charges the packet to queue q of limit cfg without the lock
 * and reports 1 if it did (*backlog, *cost: as police_level's), 0 if the
 * packet takes the locked path. Taken only by a packet that the locked
 * path would pass unmarked and that changes nothing there but the charge
 * and the counters: no TCP (its flows are counted and paced: share.h), no
 * socket state (sk), no handshake gate, no RPC budget, no borrowing at
 * this level; the queue below half its mark (no signal, whatever the
 * lock-free charges of the other CPUs at that moment; its credit floor is
 * applied here, below); its rate in force synced (rate_sync);
 * and no interval due (the control, flow-count and lending intervals end
 * on a packet that takes the lock, as before). The charge is exact: the
 * sub-ns remainder goes to frac_fast_q32, settled by the next locked
 * packet (at least once a control interval). */
static __always_inline int police_fast(struct hbm_queue *q, const struct hbm_config *cfg,
				       const struct verdict *v, const struct hbm_sock *sk,
				       __s64 *backlog, __u64 *cost)
{
	__s64 b;
	__u32 f = 0;

	if (sk || v->p.is_tcp || v->gate || v->fresh || v->candidate || v->guaranteed ||
	    cfg->ceil_bps > cfg->rate_bps)
		return 0;
	if (!q->eff_bps || q->eff_base_bps != cfg->rate_bps || !q->ctl_len_ns || !q->win_len_ns)
		return 0;
	if ((__s64)(v->now - q->ctl_ns) >= (__s64)q->ctl_len_ns ||
	    (__s64)(v->now - q->epoch_ns) >= (__s64)q->win_len_ns ||
	    (__s64)(v->now - q->lend_ns) >= (__s64)LEND_INTERVAL_NS)
		return 0;
	b = (__s64)(q->vtime_ns - v->now);
	if (b >= (__s64)(cfg->mark_ns >> 1) || v->now < cfg->burst_ns)
		return 0;
	/* cost_ns from a zero remainder, not the queue's own (q->frac, the
	 * locked path's): whole ns now, the sub-ns rest (f) to frac_fast_q32. */
	*cost = cost_ns(q, cfg, v->p.wire_bytes, &f);
	if (b < -(__s64)cfg->burst_ns) {
		/* Idle past its burst's credit (a group that never fills its
		 * rate, at every packet): vq_clamp's floor, with a plain
		 * store. A lock-free charge of another CPU at this moment may
		 * be forgotten, as the floor forgets time: the queue stands at
		 * full credit either way. */
		b = -(__s64)cfg->burst_ns;
		q->vtime_ns = v->now + b + *cost;
	} else {
		__sync_fetch_and_add(&q->vtime_ns, *cost);
	}
	if (f)
		__sync_fetch_and_add(&q->frac_fast_q32, f);
	__sync_fetch_and_add(&q->st.packets, v->p.segs);
	__sync_fetch_and_add(&q->st.bytes, v->p.wire_bytes);
	__sync_fetch_and_add(&q->lend_bytes, v->p.wire_bytes);
	__sync_fetch_and_add(&q->ctl_wire, v->p.wire_bytes);
	*backlog = b + (__s64)*cost;
	return 1;
}

/* police_level applies the limit of group id (at cgroup level lvl) to the
 * packet and returns a POLICE_* result; sk is the socket's assist state of
 * the packet's direction (NULL: none), fetched once per packet by the
 * program. A global function: the verifier checks it once, not once per
 * level of the caller's loop. */
__noinline int police_level(struct __sk_buff *skb, struct verdict *v, struct hbm_sock *sk, __u64 id,
			    __u32 lvl)
{
	struct hbm_sock *s = NULL;
	struct hbm_key key = { .cgroup_id = id };
	const struct hbm_config *cfg;
	struct hbm_stats *st;
	struct hbm_queue *q;
	__s64 backlog;
	__u64 cost, share = 0, xfer_share = 0, group = 0;
	__u32 frac;
	int drop = 0, may_drop, bounded = 0, changed;

	if (!v)
		return POLICE_PASS;
	key.dir = v->dir;
	cfg = bpf_map_lookup_elem(&hbm_limit_map, &key);
	if (!cfg || (!cfg->ns_per_byte && !cfg->ns_per_byte_frac))
		return POLICE_PASS;
	if (!(cfg->flags & HBM_F_LOOPBACK) && skb->ifindex == LOOPBACK_IFINDEX)
		return police_passed(cfg);
	q = bpf_map_lookup_elem(&hbm_queue_map, &key);
	if (!q)
		return POLICE_PASS;
	st = &q->st;

	/* Below the lender, a borrower within its guarantee: the packet is
	 * its guarantee's, which the lender must carry (lend.h). */
	v->guaranteed = v->guaranteed_up;
	v->guaranteed_up = 0;
	may_drop = !(cfg->flags & HBM_F_NO_DROP) && !v->guaranteed;
	if (may_drop && v->p.is_tcp) {
		int prot = protection(v, cfg);

		if (prot) {
			bounded = prot == PROTECT_BOUND;
			may_drop = 0;
		}
	}
	if (assisted(v, cfg))
		s = sk;

	if (police_fast(q, cfg, v, sk, &backlog, &cost))
		goto charged;

	bpf_spin_lock(&q->lock);
	rate_sync(q, cfg);
	frac_fast_settle(q);
	backlog = vq_clamp(q, cfg, v->now);
	if (v->gate && !(cfg->flags & HBM_F_NO_DROP) && gate_over_ns(q, cfg, v->now) > 0) {
		/* gate.h: its timer sends it again once the backlog drained
		 * (the gate's, unbounded: gateq.h). */
		st->gated++;
		bpf_spin_unlock(&q->lock);
		return POLICE_DROP;
	}
	frac = q->frac;
	cost = cost_ns(q, cfg, v->p.wire_bytes, &frac);
	backlog += cost;
	if (v->fresh)
		v->fresh = fresh_budget(q, cfg, cost, v->now);
	/* A packet protected up to the bound is refused where its charge
	 * would take the queue past it (vq_clamp would forget the excess). */
	if ((may_drop && !v->fresh && (backlog > (__s64)cfg->drop_small_ns ||
			 (v->p.len >= cfg->small_pkt_bytes && backlog > (__s64)cfg->drop_large_ns))) ||
	    (bounded && !v->fresh && backlog > (__s64)cfg->max_backlog_ns)) {
		drop = 1;
		st->dropped += v->p.segs;
		st->dropped_bytes += v->p.wire_bytes;
	} else {
		gate_charge(q, cfg, q->vtime_ns, cost, v->now);
		/* Atomic adds: police_fast adds to these without the lock. */
		__sync_fetch_and_add(&q->vtime_ns, cost);
		q->frac = frac;
		__sync_fetch_and_add(&st->packets, v->p.segs);
		__sync_fetch_and_add(&st->bytes, v->p.wire_bytes);
		/* lend.h: counted here, the interval ended after the walk
		 * (lend_walk) by the level's place in charged_id (below). */
		__sync_fetch_and_add(&q->lend_bytes, v->p.wire_bytes);
		if ((__s64)(v->now - q->lend_ns) >= (__s64)LEND_INTERVAL_NS)
			v->lend_due |= 1 << (v->ncharged & 7);
		if (cfg->flags & HBM_F_PACE) {
			/* Ingress: RPC bursts go first; the paced flows share
			 * what they leave. Egress: a server's unpaced first
			 * packets come at the rate its caps let connections
			 * end, so the loop corrects for them, not the room;
			 * they lower only the share's floor (share.h). */
			if (v->candidate && v->first)
				q->ctl_fresh += v->p.wire_bytes;
			else if (v->candidate)
				q->ctl_unpaced += v->p.wire_bytes;
			/* Paced packets only: what TCP does not pace (egress)
			 * or an RPC's fresh burst (ingress) leaves whatever the
			 * flow's share. */
			changed = share_count(q, cfg, s, lvl, s && !v->candidate ? (__u32)v->p.wire_bytes : 0,
					      v->xfer, v->now);
			share_update(q, cfg, &v->p, backlog, v->now, v->dir == HBM_DIR_EGRESS, changed);
			/* Above a borrower its rate in force paces its
			 * flows: the lender's own share, divided by flows
			 * rather than guarantees, would split it equally
			 * among its groups (lend.h). */
			if (!v->borrowed) {
				share = share_of(q, cfg, v->xfer ? XFER_WEIGHT : 1);
				xfer_share = share_of(q, cfg, XFER_WEIGHT);
				if (!(q->admit & ADMIT_ON))
					v->no_admit = 1;
			}
			group = rate_bps(q, cfg) / 8;
		}
	}
	bpf_spin_unlock(&q->lock);

	if (drop)
		return POLICE_DROP;
charged:
	v->borrowed |= cfg->ceil_bps > cfg->rate_bps;
	v->guaranteed_up = cfg->ceil_bps > cfg->rate_bps && q->lend_y_Bps * 8 <= cfg->rate_bps;
	if (v->ncharged < VERDICT_CHARGED) {
		v->charged_id[v->ncharged & (VERDICT_CHARGED - 1)] = id;
		v->charged_ns16[v->ncharged & (VERDICT_CHARGED - 1)] =
			cost >> 4 > 0xffffffffULL ? 0xffffffffU : (__u32)(cost >> 4);
		v->ncharged++;
	}
	/* A mark-only ingress limit (incast protection) signals with CE alone,
	 * so it leaves a flow that cannot carry CE exactly as without HBM: no
	 * window clamp either. Measured (docs/design.md): clamping cubic
	 * without ECN to its share removed its incast drops but doubled its
	 * 10 KB P99 and gave it 200 ms timeouts (a two-segment window cannot
	 * fast-retransmit). */
	if (v->ce_only && (cfg->flags & HBM_F_NO_DROP) && !v->ect)
		share = 0;
	if (share && (!v->want_Bps || share < v->want_Bps))
		v->want_Bps = share;
	if (xfer_share && (!v->xfer_Bps || xfer_share < v->xfer_Bps))
		v->xfer_Bps = xfer_share;
	if (share && group && (!v->group_Bps || group < v->group_Bps))
		v->group_Bps = group;
	if (signal_spared(v, cfg, backlog))
		return police_passed(cfg);
	/* A mark-only ingress limit does not mark a TCP flow whose window the
	 * assist holds at its two-segment floor (rxwin.h): CE cannot push it
	 * below that either (cwnd's floor is two segments too). It would only
	 * make the receiver ACK every segment (quick-ACK on CE) and the sender
	 * send one segment per packet: measured on the incast benchmark with
	 * streams, the same rate and no drops either way, but 1.6 KB packets
	 * instead of 4 KB, two cores saturated and the 10 KB P99 27 ms
	 * against 8-10 ms (docs/design.md). A flow clamped above its floor is
	 * marked as before: with back-to-back 1 MB and 8 MB requests, windows
	 * open between bursts, and CE is what keeps their first round trips
	 * from overflowing a shallow buffer. Marks also stay for traffic the
	 * clamp cannot reach (UDP, sockets the assist never clamped) and with
	 * --no-pace. */
	if ((cfg->flags & HBM_F_NO_DROP) && (cfg->flags & HBM_F_PACE) && v->ect && v->at_floor)
		return police_passed(cfg);

	if (v->p.ecn != ECN_NOT_ECT) {
		/* Already CE: the path upstream (or a level above) marked it. */
		if (v->p.ecn != ECN_CE && !bpf_skb_ecn_set_ce(skb))
			return police_passed(cfg);
		if (v->p.ecn != ECN_CE)
			__sync_fetch_and_add(&st->marked, v->p.segs);
		v->p.ecn = ECN_CE;
		return police_passed(cfg);
	}
	if (v->cn_able && cwr_roll(cfg, backlog)) {
		__sync_fetch_and_add(&st->cwr, 1);
		v->cn = 1;
	}
	return police_passed(cfg);
}

/* refund takes back what the levels below a dropping one charged for the
 * packet: its time in their virtual queues and its bytes in their counts.
 * Only packets that leave are charged. */
static __always_inline void refund(struct verdict *v)
{
	struct hbm_key key = { .dir = v->dir };
	struct hbm_queue *q;
	__u32 i;

	for (i = 0; i < VERDICT_CHARGED; i++) {
		if (i >= v->ncharged)
			break;
		key.cgroup_id = v->charged_id[i];
		q = bpf_map_lookup_elem(&hbm_queue_map, &key);
		if (!q)
			continue;
		bpf_spin_lock(&q->lock);
		/* Atomic: police_fast adds to these without the lock. */
		__sync_fetch_and_add(&q->vtime_ns, -((__u64)v->charged_ns16[i] << 4));
		q->gate_vt_ns -= (__u64)v->charged_ns16[i] << 4;
		__sync_fetch_and_add(&q->st.packets, -(__u64)v->p.segs);
		__sync_fetch_and_add(&q->st.bytes, -v->p.wire_bytes);
		bpf_spin_unlock(&q->lock);
	}
}

/* police_path applies every limit on the socket's cgroup path, its own
 * group first, then its ancestors up to the root: a packet a group drops is
 * never charged to the groups above it, and one a group above drops is
 * refunded to those below. So a child's limit is reachable inside its
 * parent's: with /p at 1gbit and /p/a at 100mbit, a UDP flood in /p/a
 * reaches /p as the 100 Mbit/s /p/a lets through (police root first, /p
 * dropped the flood and /p/a delivered 19 Mbit/s of its 100). The walk
 * ends at a limit marked HBM_F_TOP: no group above it is limited in this
 * direction (attach.go keeps the flag), so the levels up to the root are
 * not looked up (on a pod's path, 3-4 lookups of levels no limit is on). */
__noinline int police_walk(struct __sk_buff *skb, struct verdict *v, struct hbm_sock *s, __u32 depth)
{
	__u32 lvl, i;
	__u64 id;
	int r;

	if (!v)
		return 0;
	for (i = 0; i < HBM_MAX_LEVELS; i++) {
		if (i >= depth)
			break;
		lvl = depth - 1 - i;
		id = bpf_skb_ancestor_cgroup_id(skb, lvl);
		if (!id)
			continue;
		r = police_level(skb, v, s, id, lvl);
		if (r == POLICE_DROP) {
			v->drop = 1;
			refund(v);
			break;
		}
		if (r == POLICE_TOP)
			break; /* no limit above */
	}
	return 0;
}

static __always_inline void police_path(struct __sk_buff *skb, struct verdict *v, struct hbm_sock *s)
{
	__u32 depth;

	for (depth = 0; depth < HBM_MAX_LEVELS; depth++)
		if (!bpf_skb_ancestor_cgroup_id(skb, depth))
			break; /* past the socket's own group */
	police_walk(skb, v, s, depth);
	if (v->lend_due)
		lend_walk(v);
}

/* verdict_learn writes what the levels learned of the packet's flow into its
 * socket's assist state s: the least share of its limited groups (want_Bps,
 * 0 for none: the assist then lifts its cap) and, on egress, the transfer
 * share and the least rate in force of those groups (group_kBps). Only
 * from a packet that passed: the level that refuses a packet stops before
 * computing its share, so a refused packet's verdict says 0,
 * "no limit". Written anyway, it lifted the window clamp at the receiver's
 * next ACK; the sender opened its window into the limit's drops, whose own
 * zeros lifted more clamps: plain 1gbit ingress limits of 4-16 streams read
 * 1.2-1.4 of the limit on the wire in about one run of ten, with 30-110
 * thousand drops in 6 s (docs/design.md, "Drop storms"). On egress the same
 * zero lifted a pacing cap and cwnd clamp at the next ACK. */
static __always_inline void verdict_learn(struct hbm_sock *s, const struct verdict *v)
{
	if (!s || v->drop)
		return;
	s->want_Bps = v->want_Bps;
	if (v->dir == HBM_DIR_EGRESS) {
		s->xfer_Bps = v->xfer_Bps;
		s->group_kBps = v->group_Bps >> 10 > 0xffffffffULL ? 0xffffffffU : (__u32)(v->group_Bps >> 10);
		s->admit = v->want_Bps && !v->no_admit;
	}
}

#endif /* HBM_POLICY_H */
