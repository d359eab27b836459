/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Types shared by HBM's BPF programs and its Go manager (internal/dataplane,
 * which gets them from bpf2go: every struct and enum here is generated Go,
 * nothing is mirrored by hand). Include after vmlinux.h.
 *
 * One program per hook serves every limited group. A limit is keyed by
 * (cgroup id, direction) in two maps (maps.h):
 *   hbm_limit_map  what user space set: rate as a per-byte cost, thresholds in ns.
 *               Written whole by `hbm set`; a live rate change is one update.
 *   hbm_queue_map  the virtual queue and the group's per-flow share, under its
 *               own bpf_spin_lock; never written by user space after creation,
 *               so a rate change keeps it.
 * A packet is charged to every limited group on its socket's cgroup path
 * (ancestors found with bpf_skb_ancestor_cgroup_id, its own group first, up
 * to the topmost limited group: HBM_F_TOP), so nested limits hold together
 * and the cost per packet does not grow with the number of groups, only with
 * the levels between the socket's group and the topmost limit.
 */
#ifndef HBM_H
#define HBM_H

enum hbm_dir {
	HBM_DIR_EGRESS = 0,
	HBM_DIR_INGRESS = 1,
};

/* hbm_config.flags */
enum hbm_flags {
	HBM_F_LOOPBACK = 1 << 0, /* police loopback traffic too */
	HBM_F_NO_DROP = 1 << 1,  /* mark only, never drop (incast protection) */
	HBM_F_PACE = 1 << 2,     /* assist: egress pacing, ingress window clamp */
	/* No group above this one is limited in this direction (user space
	 * keeps it so: the topmost limited groups, the attached ones): the
	 * policer stops its walk up the socket's cgroup path here instead of
	 * looking up every level to the root (policy.h, police_path). Only
	 * an optimisation: a limit without it is walked past, as before. */
	HBM_F_TOP = 1 << 3,
};

/* cgroup levels searched for limits: a limit on a group deeper than this is
 * refused by user space (it reads the bound from hbm_sock.seen's length). */
#define HBM_MAX_LEVELS 32
#define HBM_MAX_LIMITS 65536

/* Return codes of cgroup skb programs. Egress programs loaded with the
 * egress expected attach type may set bit 1: the kernel then returns
 * NET_XMIT_CN to the sender (TCP calls tcp_enter_cwr; for a drop, UDP sees
 * ENOBUFS, which it hides unless IP_RECVERR: what a qdisc drop looks like). */
#define HBM_RET_DROP    0
#define HBM_RET_PASS    1
#define HBM_RET_DROP_CN 2
#define HBM_RET_PASS_CN 3

#define LOOPBACK_IFINDEX 1

/* Borrowing priorities (hbm_config.priority; 0, the default, is normal). */
enum hbm_prio {
	HBM_PRIO_NORMAL = 0,
	HBM_PRIO_LATENCY = 1, /* borrows first, gives back last */
	HBM_PRIO_BATCH = 2,   /* borrows last, gives back first */
};
#define HBM_PRIO_CLASSES 3

struct hbm_key {
	__u64 cgroup_id;
	enum hbm_dir dir;
	__u32 pad;
};

struct hbm_config {
	__u64 rate_bps;         /* configured rate, bits per second (for reports) */
	__u64 ns_per_byte;      /* time one byte takes at the rate: whole ns ... */
	__u32 ns_per_byte_frac; /* ... plus this many 2^-32 ns */
	enum hbm_flags flags;   /* HBM_F_* or'ed */
	__u64 burst_ns;         /* most credit an idle queue accrues */
	__u64 mark_ns;          /* backlog above which packets are marked */
	__u64 drop_large_ns;    /* backlog above which large packets drop; end of the cwr ramp */
	__u64 drop_small_ns;    /* backlog above which all packets drop */
	__u64 max_backlog_ns;   /* backlog never grows past this (bounded recovery) */
	__u32 small_pkt_bytes;  /* packets below this are "small" (SYN, pure ACK) */
	__u32 min_inflight;     /* TCP flows with fewer packets out are never dropped */
	__s64 pace_target_ns;   /* the share loop steers the backlog to this */
	__u64 ceil_bps;         /* most the group may take, borrowing what the other
	                         * groups under the nearest limited group above it
	                         * leave (lend.h); <= rate_bps: no borrowing */
	enum hbm_prio priority; /* who borrows first (lend.h) */
	__u32 pad;
};


/* A limit's counters, in its queue (struct hbm_queue), updated under the
 * queue's lock the policer takes anyway, or by atomic adds where it takes
 * none (policy.h, police_fast): no map of per-CPU copies, whose size grew
 * with the CPU count (11.5 MiB per 2 CPUs). */
struct hbm_stats {
	__u64 bytes;         /* wire bytes passed (GSO counted per segment) */
	__u64 packets;       /* wire packets passed (GSO segments) */
	__u64 marked;        /* packets given CE */
	__u64 cwr;           /* packets returned with the congestion code */
	__u64 dropped;       /* packets dropped */
	__u64 dropped_bytes; /* wire bytes dropped */
	__u64 gated;         /* new connections whose handshake waited out the
	                      * group's backlog (gate.h) */
};

/* The virtual queue. Instead of a byte credit that needs rate * elapsed time
 * (which overflows at high rates or loses precision at low ones), it keeps the
 * time at which the queue drains: vtime_ns. A packet advances it by its cost;
 * backlog = vtime_ns - now (negative = credit, bounded by burst_ns). Costs
 * carry a 32-bit fraction of a ns, so 400 Gbit/s (0.02 ns per byte) and
 * 8 kbit/s (1 ms per byte) are both exact to better than 1e-8.
 *
 * The rest is the group's per-flow share (share.h): what a TCP flow of the
 * group may send per unit of weight, in payload bytes per second, and the
 * weighted flow count it rests on. */
struct hbm_queue {
	struct bpf_spin_lock lock;
	__u32 frac;        /* fraction of vtime_ns, in 2^-32 ns */
	__u64 vtime_ns;    /* bpf_ktime_get_ns() time at which the queue is empty */
	__u64 share_Bps;   /* share of one unit of flow weight, payload bytes/s
	                    * (0: not yet computed) */
	__u64 ctl_ns;      /* start of the current control interval */
	__u64 ctl_wire;    /* wire bytes passed in it, all traffic */
	__u64 ctl_tcp_wire;    /* ... of which TCP */
	__u64 ctl_tcp_payload; /* TCP payload bytes in it */
	__u64 epoch_ns;    /* start of the current flow-count window */
	__u32 epoch;       /* flow-count window number */
	__u32 flows_now;   /* weight of the TCP flows counted in the current window
	                    * that have not left (share.h) */
	__u32 flows;       /* ... in the last complete window */
	__u32 grace_w;     /* egress: weight of the flows that went idle (not
	                    * closed) and have not sent since, halved every
	                    * control interval (share.h, share_flows) */
	__u32 admit;       /* egress: bit 31 (ADMIT_ON) set while the handshake gate
	                    * admits the group's new connections, whose first
	                    * ADMIT_BYTES then leave unpaced; below it the flow
	                    * count's recent peak (share_flows, decaying), in
	                    * 1/16ths (share.h, admit_steer). Was padding */
	__u32 payload_q16; /* TCP payload / wire bytes, 16-bit fixed point (0: unknown) */
	__u64 ctl_fresh;   /* wire bytes no share can pace in the interval (egress:
	                    * a connection's first segments, which TCP never paces;
	                    * ingress: RPC bursts, rxfresh.h) */
	__u64 fresh_Bps;   /* ... as a rate, smoothed: what the paced flows leave to them */
	__u64 fresh_vt_ns; /* ingress: the group's RPC budget (policy.h, fresh_budget):
	                    * ahead of now while fresh bursts take more; egress:
	                    * where vtime_ns will be once the first windows planned
	                    * from the queue's credit and not yet sent have left
	                    * (pacing.h, room_reserve) */
	__u64 share_mul;   /* share_Bps over the fair share, 16-bit fixed point
	                    * (share.h; 0: not yet computed) */
	__u32 pkt_max_now; /* largest TCP packet (wire bytes, all segments) in the
	                    * current flow-count window ... */
	__u32 pkt_max;     /* ... and in the last one: a flow's burst (share.h) */
	__u32 seen_now;    /* weight of the TCP flows counted in the current window,
	                    * departed or not (the share's floor, share.h) ... */
	__u32 seen;        /* ... in the last complete window */
	__u32 bulk_now;    /* egress: flows counted as bulk (weight 1) in the current
	                    * window (share.h, flow_gap_ns) ... */
	__u32 bulk;        /* ... in the last complete window */
	__u32 idled_now;   /* egress: weight of the flows that went idle (not closed)
	                    * in the current window (share.h, the floor) ... */
	__u32 idled;       /* ... in the last complete window */
	/* Lengths computed once per control interval (share.h), not per
	 * packet: each needs a 64-bit division. 0: not yet computed. */
	__u64 win_len_ns;  /* the flow-count window */
	__u64 ctl_len_ns;  /* the control interval */
	__u64 ctl_min_ns;  /* ... and its shortest (share_interval_pkts) */
	__u32 recount;     /* 1: a flow left, or the rate in force changed (lend.h),
	                    * since the share was computed */
	__u32 floor_cut;   /* egress: how far the share's floor is lowered, 16-bit
	                    * fixed point (share.h, floor_steer; 0: not), and bit
	                    * 16 (FLOOR_BINDS) set while the floor bound the share */
	__s64 ctl_min_backlog_ns; /* egress: least backlog seen in the control interval
	                           * (the standing queue, share.h) */
	__u64 ctl_unpaced; /* egress: wire bytes TCP does not pace (a connection's
	                    * first segments) in the control interval ... */
	__u64 unpaced_Bps; /* ... as a rate, smoothed (the share's floor, share.h) */
	__u64 gate_vt_ns;  /* vtime_ns as it would be without the backlog's bound,
	                    * until the queue drains to its mark: what the
	                    * handshake gate waits out (gateq.h) */
	/* Borrowing (lend.h). The rate in force, written once per lending
	 * interval, not divided per packet: */
	__u64 eff_bps;          /* rate_bps plus what the group borrows */
	__u64 eff_ns_per_byte;  /* time one byte takes at it: whole ns ... */
	__u32 eff_frac;         /* ... plus this many 2^-32 ns */
	__u32 lend_backlog_ns;  /* the queue's backlog at the last lending
	                         * interval's end (lend.h; at most 2^32-1) */
	__u64 eff_base_bps;     /* the configured rate they were written for
	                         * (vqueue.h, rate_sync) */
	__u64 lend_ns;          /* start of the current lending interval */
	__u64 lend_bytes;       /* wire bytes passed in it */
	__u64 lend_y_Bps;       /* ... in the last, as a rate (wire bytes/s): a
	                         * borrower within its guarantee is its lender's
	                         * to carry (policy.h, verdict.guaranteed) */
	/* As a lender, per borrowing class (lend.h, lend_rank: latency,
	 * normal, batch): */
	__u64 lend_q16[HBM_PRIO_CLASSES];     /* the multiple of their guarantees the
	                                       * class's borrowers below may take,
	                                       * 16-bit fixed point (0: one) */
	__u64 lend_want_ns[HBM_PRIO_CLASSES]; /* last time one of them wanted more */
	struct hbm_stats st; /* the limit's counters */
	__u64 frac_fast_q32; /* sub-ns remainders of the packets charged without
	                      * the lock (policy.h, police_fast), in 2^-32 ns:
	                      * moved into vtime_ns as whole ns by the next
	                      * packet that takes the lock */
	__u64 gate_until_ns; /* egress: when the last connection the handshake
	                      * gate held is let go, about (gate.h,
	                      * gate_excess_ns): until then the gate's queue is
	                      * kept when the group's drains (gateq.h) */
};


/* Per-socket state of one direction (sk_storage: hbm_flow_map for egress,
 * hbm_rx_map for ingress). The data-plane program writes want_Bps on every
 * packet: the least per-flow share of the limited groups on the socket's
 * path. The sockops assist reads it and applies it (egress: the pacing cap;
 * ingress: the receive-window clamp); it never looks a limit up itself. */
struct hbm_sock {
	__u64 want_Bps;    /* least share of the socket's limited groups (0: none) */
	__u64 applied;     /* what the assist last set (pacing cap B/s, or window clamp bytes) */
	__u32 seen[HBM_MAX_LEVELS]; /* per cgroup level: how the flow is counted
	                    * there (share.h, SEEN_*): 0 not counted */
	__u64 xfer_Bps;    /* egress: the least share of its groups for a transfer
	                    * (weight XFER_WEIGHT, share.h), payload bytes/s: the cap
	                    * an idle socket keeps for its next transfer */
	__u32 fresh_room;  /* ingress: 1 if its last fresh packet found room in every
	                    * group's fresh budget (policy.h, fresh_budget) */
	__u32 rx_segs_out; /* ingress: the receiver's data_segs_out when the current
	                    * burst began: once it replies, the next data is a new
	                    * burst (rxfresh.h) */
	__u32 burst_end;   /* sequence number where the current fresh burst ends
	                    * (egress: sent; ingress: received) */
	__u32 burst;       /* 1 while a burst is under way (egress: 0 once everything
	                    * the socket wrote was acked: its next packet starts a
	                    * fresh burst; ingress: see rxfresh.h) */
	/* ingress only: a drop opens a hole in the flow's sequence space; until
	 * the receiver's rcv_nxt passes hole_end no further packet of the flow
	 * is dropped (policy.h, rx_protected). */
	__u64 hole_ns;     /* when the hole was made (0: none) */
	__u32 hole_end;    /* sequence number just past the dropped payload */
	__u16 rx_rpc;      /* ingress: 1 while the socket's bursts fit in the fresh
	                    * burst (an RPC socket: rxfresh.h); its window stays open
	                    * for a whole request */
	__u16 rx_ect;      /* ingress: 1 once the flow's data arrived ECN-capable
	                    * (ECT or CE): a mark-only limit acts on it (policy.h) */
	/* ingress, the window assist (rxwin.h): the least RTT estimate in the
	 * current and the last half of RXWIN_RTT_WIN_NS, and when the current
	 * half began; what the flow delivered per RTT in the last two use
	 * intervals, and where (time, rcv_nxt) the current one began */
	__u32 rtt_min_us;
	__u32 rtt_min_prev_us;
	__u64 rtt_min_ns;
	__u64 use_ns;
	__u32 use_seq;
	__u32 used;
	__u32 used_prev;
	__u32 xfer_start;  /* egress: when its current transfer began (it sent
	                    * after being idle), bpf_ktime_get_ns() >> 20 (share.h) */
	__u32 tx_paced;    /* egress: packets sent after its first TCP_UNPACED_SEGS
	                    * segments, up to 2: what TCP does not yet pace in full
	                    * (hbm.bpf.c) */
	__u32 cwnd_applied; /* egress: the cwnd clamp the assist last set, segments
	                     * (pacing.h; 0: none) */
	__u32 xfer_time;   /* egress: how long its current transfer stays one, in
	                    * xfer_start's units: twice its last (share.h,
	                    * xfer_time_next; 0: XFER_TIME) */
	__u32 gate_open;   /* egress: 1 for a connection whose open the handshake
	                    * gate could hold, which then holds its first segments
	                    * (policy.h, flow_held): a server's (the pacing assist
	                    * saw it established) or a client's towards a server it
	                    * knows (gate.h, gate_active). Was "passive" (servers
	                    * only) before the gate held clients too */
	__u32 syn_gated;   /* egress: 1 from the moment the handshake gate timed an
	                    * active open's SYN (gate.h, gate_active) until that
	                    * SYN, its first send, is refused */
	__u32 room_segs;   /* egress: the unpaced first window its current transfer
	                    * was given from its group's credit, segments (pacing.h,
	                    * xfer_plan; 0: none): its cwnd clamp stays at least
	                    * this until its next transfer is planned */
	__u32 armed;       /* egress: while its header-option callback waits for its
	                    * owner's next write (pacing.h, ARMED_*): from the moment
	                    * it went idle, unpaced, or all its transfer wrote fitted
	                    * in the room, until that write's first packet leaves */
	__u32 xfer_seq;    /* egress: write_seq when that transfer was planned: its
	                    * first byte (pacing.h, xfer_plan) */
	__u32 group_kBps;  /* egress: the least rate in force of the groups that
	                    * gave want_Bps, KiB/s (policy.h, verdict_learn; 0:
	                    * not known, as in a socket from a release before
	                    * it: assist.h, cwnd_segs). Was padding: the layout
	                    * and size are unchanged */
	__u64 plan_vt_ns;  /* egress: the queue's fresh_vt_ns right after this
	                    * socket's plan was reserved in it ... */
	__u64 plan_ns;     /* ... and how much it reserved, ns at the rate (0: no
	                    * plan waiting for its first packet; pacing.h,
	                    * xfer_room) */
	__u32 admit;       /* egress: 1 while every group that gave want_Bps admits
	                    * new connections at the handshake gate (share.h,
	                    * admit_steer): a connection the gate could hold then
	                    * sends its first ADMIT_BYTES unpaced (pacing.h) */
	__u32 xfer_rcv;    /* egress: the socket's bytes_received (low 32 bits) when
	                    * its current transfer began (hbm.bpf.c): moved at its
	                    * owner's next write after it went idle, that write
	                    * answers something, and the flow is counted back at
	                    * once (pacing.h, recount). Was padding: the layout and
	                    * size are unchanged */
};

/* Key of hbm_netns_map: a network namespace (its inode number, as
 * /proc/PID/ns/net shows it) in which an assist changed a socket of cgroup
 * cgroup_id (the socket's own group). */
struct hbm_netns_key {
	__u64 cgroup_id;
	__u32 netns_ino;
	__u32 pad;
};

/* Key of hbm_listen_map: a listening port (host byte order) in a network
 * namespace (its cookie, bpf_get_netns_cookie). */
struct hbm_listen_key {
	__u64 netns_cookie;
	__u32 port;
	__u32 pad;
};

/* The limited egress groups on a listener's cgroup path, its own group
 * first (gate.h): up to HBM_GATE_LEVELS of them. 0 ends the list. */
#define HBM_GATE_LEVELS 4
struct hbm_listen {
	__u64 cgroup_id[HBM_GATE_LEVELS];
	__u32 xfer_time; /* how long its connections' last transfer stays one
	                  * (hbm_sock.xfer_time): a new connection's first
	                  * transfer takes it (pacing.h; 0: XFER_TIME) */
	__u32 conn_bytes; /* what its connections sent, bytes, smoothed (pacing.h,
	                   * admit_note; 0: none closed yet): only a listener
	                   * whose connections each send what fits in
	                   * ADMIT_BYTES has them admitted unpaced (share.h,
	                   * admit_steer). Was padding */
};

/* Key of hbm_peer_map: a remote address (IPv4 in addr[0]) in a network
 * namespace. */
struct hbm_peer_key {
	__u64 netns_cookie;
	__u32 addr[4];
};

/* Value of hbm_peer_map. */
struct hbm_peer {
	__u32 rtt_us;     /* its last smoothed RTT, us (gate.h; 0: unknown). Was
	                   * the whole value */
	__u32 conn_bytes; /* what a limited group's clients sent it per
	                   * connection, bytes, smoothed (pacing.h, admit_note;
	                   * 0: none closed yet): a client's hbm_listen.conn_bytes */
};

/* The kernel's tick, measured (gate.h): jiffies64 and ktime at the first
 * reading, and the tick once known (0: not yet). */
struct hbm_clock {
	__u64 jiffies0;
	__u64 ns0;
	__u64 jiffy_ns;
};

/* Parameters and results of one run of the socket walker (sockets.h). */
struct hbm_walk {
	__u64 cgroup_id; /* the group whose sockets are walked (and its descendants) */
	enum hbm_dir dir; /* which assist */
	__u32 release;   /* 0: turn the assist's callback on; 1: lift what it set */
	__u64 seen;      /* sockets of the group seen */
	__u64 changed;   /* sockets changed */
};

#endif /* HBM_H */
