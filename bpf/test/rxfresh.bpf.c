// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Test harness for the ingress socket decisions: the RPC class (rxfresh.h)
 * and the receive-window clamp (rxwin.h), run with BPF_PROG_TEST_RUN by
 * internal/dataplane/rxfreshtest. The data plane's own test runs cannot
 * reach them: a cgroup_skb test run's skb carries a dummy, non-TCP socket,
 * so there is no socket state to decide on. A syscall program takes the
 * socket state and the packet (or the ACK's moment) in its context and
 * writes the decisions back. learn_run is what a packet's verdict leaves
 * in its socket's state for both assists (policy.h, verdict_learn);
 * held_run whether an egress packet may be refused at all (flow_held);
 * protect_run how an egress TCP packet is protected (tx_protected);
 * spare_run whether a packet goes unmarked (signal_spared);
 * step_run one step of a group's share loop (share.h, share_step);
 * floor_run the floor's cut at an interval's end (share.h, floor_steer);
 * room_run the room a transfer's first window is given (room.h);
 * count_run a flow counted in its group's flow-count windows (share.h,
 * share_count); lend_run a lending interval's end (lendctl.h, lend_tick);
 * gate_run the handshake gate's queue and gate_wait_run the wait it asks
 * for (gateq.h). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "hbm.h"
#include "rxfresh.h"
#include "rxwin.h"
#include "room.h"
#include "lendctl.h"
#include "gateq.h"

struct rxfresh_case {
	struct hbm_sock s; /* in and out: the socket's ingress state */
	__u32 seq;         /* in: the packet's first payload byte */
	__u32 payload;     /* in: its payload bytes */
	__u32 segs_out;    /* in: the receiver's data_segs_out */
	__u32 rcv_nxt;     /* in: the receiver's rcv_nxt after the packet */
	__u32 candidate;   /* out: rx_fresh */
	__u32 win_bytes;   /* out: rx_rpc_win_bytes after the packet */
};

SEC("syscall")
int rxfresh_run(struct rxfresh_case *c)
{
	struct pkt p = { .is_tcp = 1 };

	p.seq = c->seq;
	p.payload = c->payload;
	c->candidate = rx_fresh(&p, c->segs_out, &c->s);
	c->win_bytes = rx_rpc_win_bytes(&c->s, c->rcv_nxt, c->segs_out);
	return 0;
}

struct rxwin_case {
	struct hbm_sock s; /* in and out: the socket's ingress state (want_Bps set) */
	__u64 now_ns;      /* in: the clock */
	__u64 rtt_us;      /* in: the kernel's RTT estimate */
	__u32 mss;         /* in: the socket's mss_cache */
	__u32 rcv_nxt;     /* in: the receiver's rcv_nxt */
	__u32 segs_out;    /* in: the receiver's data_segs_out */
	__u32 win_bytes;   /* out: rxwin_bytes, the clamp */
};

SEC("syscall")
int rxwin_run(struct rxwin_case *c)
{
	/* A copy: the verifier refuses a context pointer moved and then read. */
	struct hbm_sock s = c->s;

	c->win_bytes = rxwin_bytes(&s, c->rtt_us, c->mss, c->rcv_nxt, c->segs_out, c->now_ns);
	c->s = s;
	return 0;
}

struct rxdescend_case {
	__u64 win;        /* in: the clamp wanted (rxwin_bytes) */
	__u64 cur;        /* in: the socket's clamp now */
	__s32 left;       /* in: rcv_wup + rcv_wnd - rcv_nxt */
	__u32 pad;
	__u64 clamp;      /* out: rxwin_descend (cur: nothing to set) */
};

SEC("syscall")
int rxdescend_run(struct rxdescend_case *c)
{
	c->clamp = rxwin_descend(c->win, c->cur, c->left);
	return 0;
}

struct learn_case {
	__u64 last_want_Bps; /* in: the socket's want_Bps before the packet */
	__u64 last_xfer_Bps; /* in: ... and xfer_Bps */
	__u64 want_Bps;      /* in: the verdict's least share (0: no limit) */
	__u64 xfer_Bps;      /* in: its transfer share */
	__u32 dir;           /* in: HBM_DIR_* */
	__u32 drop;          /* in: some level refused the packet */
	__u64 out_want_Bps;  /* out: the socket's want_Bps after it */
	__u64 out_xfer_Bps;  /* out: ... and xfer_Bps */
	__u64 group_Bps;     /* in: the verdict's least rate in force */
	__u32 last_group_kBps; /* in: the socket's group_kBps before the packet */
	__u32 out_group_kBps;  /* out: ... and after it */
};

SEC("syscall")
int learn_run(struct learn_case *c)
{
	struct hbm_sock s = {};
	struct verdict v = {};
	__u64 lw = c->last_want_Bps, lx = c->last_xfer_Bps, w = c->want_Bps, x = c->xfer_Bps;
	__u64 g = c->group_Bps;
	__u32 lg = c->last_group_kBps;

	/* Values, not places: the compiler may otherwise pick between two
	 * context fields' addresses where the code picks between their
	 * values, and the verifier refuses a context pointer so moved. */
	barrier_var(lw);
	barrier_var(lx);
	barrier_var(w);
	barrier_var(x);
	barrier_var(g);
	barrier_var(lg);
	s.want_Bps = lw;
	s.xfer_Bps = lx;
	s.group_kBps = lg;
	v.want_Bps = w;
	v.xfer_Bps = x;
	v.group_Bps = g;
	v.dir = c->dir;
	v.drop = c->drop;
	verdict_learn(&s, &v);
	c->out_want_Bps = s.want_Bps;
	c->out_xfer_Bps = s.xfer_Bps;
	c->out_group_kBps = s.group_kBps;
	return 0;
}

struct cwnd_case {
	__u64 mss;        /* in: the socket's mss_cache */
	__u64 srtt_us;    /* in: its smoothed RTT */
	__u64 cap;        /* in: its pacing cap, bytes/s */
	__u64 group_Bps;  /* in: its groups' least rate in force (0: not known) */
	__u32 segs;       /* out: cwnd_segs */
	__u32 pad;
};

SEC("syscall")
int cwnd_run(struct cwnd_case *c)
{
	c->segs = cwnd_segs(c->mss, c->srtt_us, c->cap, c->group_Bps);
	return 0;
}

struct held_case {
	__u64 want_Bps;  /* in: the share the socket's last packet was given */
	__u64 applied;   /* in: the pacing cap the assist last set (~0: none) */
	__u32 gate_open; /* in: a connection the gate saw open */
	__u32 candidate; /* in: one of the connection's first segments */
	__u32 no_state;  /* in: the socket has no assist state */
	__u32 held;      /* out: flow_held */
};

SEC("syscall")
int held_run(struct held_case *c)
{
	struct hbm_sock s = {};
	__u64 w = c->want_Bps, a = c->applied;
	__u32 cand = c->candidate, open = c->gate_open;
	int held;

	barrier_var(w);
	barrier_var(a);
	barrier_var(cand);
	barrier_var(open);
	s.want_Bps = w;
	s.applied = a;
	s.gate_open = open;
	/* Two calls, not one with a chosen pointer: the verifier refuses a
	 * pointer that may be NULL or the stack's once the compiler merges
	 * them. */
	if (c->no_state)
		held = flow_held(NULL, cand);
	else
		held = flow_held(&s, cand);
	barrier_var(held);
	c->held = held;
	return 0;
}

struct protect_case {
	__u32 syn;          /* in: a SYN or SYN-ACK */
	__u32 held;         /* in: flow_held said so */
	__u32 packets_out;  /* in: the sender's packets in flight */
	__u32 min_inflight; /* in: the limit's */
	__u32 pace;         /* in: the limit has the pacing assist */
	__u32 ingress;      /* in: an ingress packet (its count unknown), its own
	                     * protection rx (rx_protected's) */
	__u32 rx;
	__u32 prot;         /* out: protection, PROTECT_* */
};

SEC("syscall")
int protect_run(struct protect_case *c)
{
	struct hbm_config cfg = {};
	struct verdict v = {};
	__u32 syn = c->syn, held = c->held, out = c->packets_out, min = c->min_inflight, pace = c->pace;
	__u32 in = c->ingress, rx = c->rx;

	barrier_var(syn);
	barrier_var(held);
	barrier_var(out);
	barrier_var(min);
	barrier_var(pace);
	barrier_var(in);
	barrier_var(rx);
	v.p.is_tcp = 1;
	v.p.tcp_flags = syn ? TCPF_SYN : 0;
	/* As the hooks set them (hbm.bpf.c). */
	if (in) {
		v.protected = rx;
		v.packets_out = ~0U;
	} else {
		v.protected = tx_protected(&v.p, held);
		v.packets_out = out;
	}
	cfg.min_inflight = min;
	cfg.flags = pace ? HBM_F_PACE : 0;
	c->prot = protection(&v, &cfg);
	return 0;
}

struct spare_case {
	__s64 backlog_ns;   /* in: the queue with the packet's charge */
	__u64 mark_ns;      /* in: the limit's thresholds */
	__u64 drop_large_ns;
	__u32 pace;         /* in: the limit has the pacing assist */
	__u32 egress_tcp;   /* in: an egress TCP packet (the hook may return the congestion code) */
	__u32 counted;      /* in: its socket has assist state */
	__u32 candidate;    /* in: one of the connection's first segments */
	__u32 guaranteed;   /* in: a borrower's within its guarantee */
	__u32 spared;       /* out: signal_spared */
};

SEC("syscall")
int spare_run(struct spare_case *c)
{
	struct hbm_config cfg = {};
	struct verdict v = {};
	__s64 backlog = c->backlog_ns;
	__u32 pace = c->pace, tcp = c->egress_tcp, counted = c->counted, cand = c->candidate, g = c->guaranteed;

	barrier_var(backlog);
	barrier_var(pace);
	barrier_var(tcp);
	barrier_var(counted);
	barrier_var(cand);
	barrier_var(g);
	cfg.mark_ns = c->mark_ns;
	cfg.drop_large_ns = c->drop_large_ns;
	cfg.flags = pace ? HBM_F_PACE : 0;
	/* As the egress hook sets them (hbm.bpf.c). */
	v.cn_able = tcp;
	v.counted = counted;
	v.candidate = cand;
	v.guaranteed = g;
	c->spared = signal_spared(&v, &cfg, backlog);
	return 0;
}

struct floor_case {
	__s64 standing;    /* in: the interval's least backlog, ns */
	__s64 target_ns;   /* in: the loop's target */
	__u64 mark_ns;     /* in: the mark threshold */
	__u32 floor_cut;   /* in and out: the queue's floor_cut (FLOOR_BINDS included) */
	__u32 pad;
};

SEC("syscall")
int floor_run(struct floor_case *c)
{
	struct hbm_config cfg = {};
	struct hbm_queue q = {};
	__s64 standing = c->standing, target = c->target_ns;
	__u64 mark = c->mark_ns;
	__u32 cut = c->floor_cut;

	barrier_var(standing);
	barrier_var(target);
	barrier_var(mark);
	barrier_var(cut);
	cfg.mark_ns = mark;
	q.floor_cut = cut;
	floor_steer(&q, &cfg, standing, target);
	c->floor_cut = q.floor_cut;
	return 0;
}

struct lend_case {
	__u64 q16[HBM_PRIO_CLASSES];     /* in and out: the lender's multiples */
	__u64 want_ns[HBM_PRIO_CLASSES]; /* in: when each class last wanted more */
	__u64 eff_bps;     /* in: the level's rate in force */
	__u64 rate_bps;    /* in: its guarantee */
	__u64 ceil_bps;    /* in: its ceiling */
	__u64 mark_ns;     /* in: its mark */
	__u64 bytes;       /* in: what passed in the interval */
	__u64 start_ns;    /* in: the interval's start */
	__u64 now_ns;      /* in: the clock */
	__s64 backlog;     /* in: the queue's backlog, ns */
	__u32 prev_ns;     /* in: the backlog at the last interval's end; out: now's */
	__u32 ret;         /* out: lend_tick (1: a borrower) */
	__u32 want;        /* out: it wants more */
	__u32 pad;
};

SEC("syscall")
int lend_run(struct lend_case *c)
{
	struct hbm_config cfg = {};
	struct hbm_queue q = {};
	__u8 want = 0;
	int i;

	for (i = 0; i < HBM_PRIO_CLASSES; i++) {
		q.lend_q16[i] = c->q16[i];
		q.lend_want_ns[i] = c->want_ns[i];
	}
	q.eff_bps = c->eff_bps;
	q.lend_bytes = c->bytes;
	q.lend_ns = c->start_ns;
	q.lend_backlog_ns = c->prev_ns;
	cfg.rate_bps = c->rate_bps;
	cfg.ceil_bps = c->ceil_bps;
	cfg.mark_ns = c->mark_ns;
	c->ret = lend_tick(&q, &cfg, c->backlog, c->now_ns, &want);
	c->want = want;
	for (i = 0; i < HBM_PRIO_CLASSES; i++)
		c->q16[i] = q.lend_q16[i];
	c->prev_ns = q.lend_backlog_ns;
	return 0;
}

struct gate_case {
	__u64 vtime_ns;      /* in: the queue's vtime (after vq_clamp) */
	__u64 gate_vt_ns;    /* in and out: the gate's queue */
	__u64 now_ns;        /* in: the clock */
	__u64 drop_large_ns; /* in: the limit's drop-large threshold ... */
	__u64 mark_ns;       /* in: ... its mark ... */
	__u64 max_backlog_ns; /* in: ... and its backlog's bound */
	__u64 cost_ns;       /* in: a packet's charge (0: none) */
	__s64 over_ns;       /* out: gate_over_ns before the packet */
	__u64 gate_until_ns; /* in: when the last held connection is let go */
};

SEC("syscall")
int gate_run(struct gate_case *c)
{
	struct hbm_config cfg = {};
	struct hbm_queue q = {};

	q.vtime_ns = c->vtime_ns;
	q.gate_vt_ns = c->gate_vt_ns;
	q.gate_until_ns = c->gate_until_ns;
	cfg.drop_large_ns = c->drop_large_ns;
	cfg.mark_ns = c->mark_ns;
	cfg.max_backlog_ns = c->max_backlog_ns;
	c->over_ns = gate_over_ns(&q, &cfg, c->now_ns);
	if (c->cost_ns)
		gate_charge(&q, &cfg, q.vtime_ns, c->cost_ns, c->now_ns);
	c->gate_vt_ns = q.gate_vt_ns;
	return 0;
}

struct gate_wait_case {
	__s64 wait_ns;  /* in: the groups' excess */
	__s64 least_ns; /* in: the least wait for the peer */
	__u64 jiffy_ns; /* in: the kernel's tick */
	__u32 fits;     /* in: connections like it send at most ADMIT_BYTES */
	__u32 admits;   /* in: every group over its threshold admits */
	__u32 reply;    /* out: the timeout, jiffies (0: not gated) */
	__u32 pad;
};

SEC("syscall")
int gate_wait_run(struct gate_wait_case *c)
{
	c->reply = gate_reply(c->wait_ns, c->least_ns, gate_longest_ns(c->fits, c->admits), c->jiffy_ns);
	return 0;
}

struct step_case {
	__u64 m;           /* in: the share multiplier, 1/2^16 (SHARE_Q) */
	__u64 ratio;       /* in: the interval's correction, 1/2^16 */
	__u32 egress;      /* in: the direction is egress */
	__u32 pad;
	__u64 out_m;       /* out: share_step */
};

SEC("syscall")
int step_run(struct step_case *c)
{
	c->out_m = share_step(c->m, c->ratio, c->egress);
	return 0;
}

/* room_run: one step on a group's queue and two sockets kept in maps
 * between runs (a queue has a spin lock, which only a map value may hold). */
#define ROOM_RESET  0 /* the queue: vtime_ns, fresh_vt_ns and flows as given; the sockets: no plan */
#define ROOM_PLAN   1 /* socket sock plans its transfer's first window at now (room_plan) */
#define ROOM_CHARGE 2 /* the window socket sock planned leaves: charged to the queue as the policer does */

struct room_case {
	__u64 now_ns;      /* in: the clock */
	__u64 rate_bps;    /* in: the group's rate ... */
	__u64 ns_per_byte; /* in: ... a byte's time at it, whole ns ... */
	__u32 frac;        /* in: ... plus this many 2^-32 ns */
	__u32 op;          /* in: ROOM_* */
	__u64 burst_ns;    /* in: the group's burst */
	__u64 vtime_ns;    /* in (reset) and out: the queue's vtime_ns */
	__u64 plan_vt_ns;  /* in (reset) and out: its fresh_vt_ns, the plans' end */
	__u32 flows;       /* in (reset): its flow count */
	__u32 sock;        /* in: which socket, 0 or 1 */
	__u32 mss;         /* in: the socket's mss */
	__u32 segs;        /* out (plan): the window planned, segments */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hbm_queue);
} room_queue SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct hbm_sock);
} room_socks SEC(".maps");

SEC("syscall")
int room_run(struct room_case *c)
{
	struct hbm_config cfg = {};
	__u32 zero = 0, idx = c->sock & 1, segs, frac;
	__u64 now = c->now_ns, mss = c->mss, wire;
	struct hbm_queue *q = bpf_map_lookup_elem(&room_queue, &zero);
	struct hbm_sock *s = bpf_map_lookup_elem(&room_socks, &idx), *o;

	if (!q || !s)
		return 1;
	cfg.rate_bps = c->rate_bps;
	cfg.ns_per_byte = c->ns_per_byte;
	cfg.ns_per_byte_frac = c->frac;
	cfg.burst_ns = c->burst_ns;
	switch (c->op) {
	case ROOM_RESET:
		idx ^= 1;
		o = bpf_map_lookup_elem(&room_socks, &idx);
		if (!o)
			return 1;
		s->plan_ns = s->plan_vt_ns = s->room_segs = 0;
		o->plan_ns = o->plan_vt_ns = o->room_segs = 0;
		bpf_spin_lock(&q->lock);
		q->vtime_ns = c->vtime_ns;
		q->fresh_vt_ns = c->plan_vt_ns;
		q->flows = c->flows;
		q->frac = 0;
		q->eff_bps = 0;
		bpf_spin_unlock(&q->lock);
		break;
	case ROOM_PLAN:
		bpf_spin_lock(&q->lock);
		segs = room_plan(q, &cfg, s, now, mss);
		bpf_spin_unlock(&q->lock);
		s->room_segs = segs;
		c->segs = segs;
		break;
	case ROOM_CHARGE:
		/* As police_level: clamp, then each full segment's frame (pkt.h). */
		wire = (__u64)s->room_segs * (mss + 52 + LINK_HDR_BYTES);
		s->plan_ns = 0; /* xfer_begin */
		bpf_spin_lock(&q->lock);
		rate_sync(q, &cfg);
		vq_clamp(q, &cfg, now);
		frac = q->frac;
		q->vtime_ns += cost_ns(q, &cfg, wire, &frac);
		q->frac = frac;
		bpf_spin_unlock(&q->lock);
		break;
	}
	bpf_spin_lock(&q->lock);
	c->vtime_ns = q->vtime_ns;
	c->plan_vt_ns = q->fresh_vt_ns;
	bpf_spin_unlock(&q->lock);
	return 0;
}

/* count_run: one flow's packet counted in a group's flow-count windows
 * (share_count), on a queue and a socket state kept in maps between runs. */
#define COUNT_RESET 0 /* the queue's counts zero, its window begun at now_ns, win_ns long; the socket uncounted */
#define COUNT_PKT   1 /* a packet of the flow at now_ns, of class xfer */
#define COUNT_IDLE  2 /* the flow went idle (share_depart) */
#define COUNT_CLOSE 3 /* the flow closed (share_depart) */
#define COUNT_WRITE 4 /* its owner writes, the socket having received rcv bytes (share_write) */
#define COUNT_SOCKS 4

struct count_case {
	__u64 now_ns;     /* in: the clock */
	__u64 win_ns;     /* in (reset): the window's length */
	__u32 op;         /* in: COUNT_* */
	__u32 xfer;       /* in (packet): the flow is in a transfer */
	__u32 sock;       /* in: which flow (0 .. COUNT_SOCKS-1) */
	__u32 flows;      /* out: the last window's flow count ... */
	__u32 flows_now;  /* out: ... and the current one's */
	__u32 seen;       /* out: the same for the seen counts */
	__u32 seen_now;
	__u32 share_flows; /* out: the count the share divides by (share_flows) */
	__u32 epoch;      /* out: the window's number */
	__u32 grace;      /* out: idle flows not back yet (grace_w) */
	__u32 rcv;        /* in (packet, write): the socket's bytes_received */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hbm_queue);
} count_queue SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, COUNT_SOCKS);
	__type(key, __u32);
	__type(value, struct hbm_sock);
} count_socks SEC(".maps");

SEC("syscall")
int count_run(struct count_case *c)
{
	struct hbm_config cfg = {};
	__u32 zero = 0, xfer = c->xfer, i = c->sock;
	__u64 now = c->now_ns;
	struct hbm_queue *q = bpf_map_lookup_elem(&count_queue, &zero);
	struct hbm_sock *s = bpf_map_lookup_elem(&count_socks, &i);

	if (!q || !s)
		return 1;
	barrier_var(xfer);
	if (c->op == COUNT_RESET) {
		for (i = 0; i < COUNT_SOCKS; i++) {
			struct hbm_sock *o = bpf_map_lookup_elem(&count_socks, &i);

			if (o) {
				o->seen[0] = 0;
				o->burst = 0;
			}
		}
	}
	bpf_spin_lock(&q->lock);
	if (c->op == COUNT_RESET) {
		q->flows = q->flows_now = q->seen = q->seen_now = q->grace_w = 0;
		q->bulk = q->bulk_now = q->idled = q->idled_now = 0;
		q->pkt_max = q->pkt_max_now = 0;
		q->epoch = 0;
		q->epoch_ns = now;
		q->win_len_ns = c->win_ns;
	} else if (c->op == COUNT_IDLE || c->op == COUNT_CLOSE) {
		share_depart(q, s, 0, c->op == COUNT_CLOSE);
		s->burst = 0; /* as pacing.h's depart */
	} else if (c->op == COUNT_WRITE) {
		share_write(q, &cfg, s, 0, c->rcv, now);
	} else {
		if (!s->burst) { /* as hbm.bpf.c */
			s->burst = 1;
			s->xfer_rcv = c->rcv;
		}
		share_count(q, &cfg, s, 0, 1514, xfer, now);
	}
	c->flows = q->flows;
	c->flows_now = q->flows_now;
	c->seen = q->seen;
	c->seen_now = q->seen_now;
	c->share_flows = share_flows(q);
	c->epoch = q->epoch;
	c->grace = q->grace_w;
	bpf_spin_unlock(&q->lock);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
