/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Types shared by HBM's BPF programs and its Go manager (internal/dataplane).
 *
 * State is keyed by (cgroup id, direction) in three maps, so one limit is one
 * key everywhere:
 *   hbm_limit_map  what user space set: rate as a per-byte cost, thresholds in ns.
 *               Written whole by `hbm set`; a live rate change is one update.
 *   hbm_queue_map  the virtual queue, under its own bpf_spin_lock; never written
 *               by user space after creation, so a rate change keeps it.
 *   hbm_stats_map  per-CPU counters; no shared cache line on the fast path.
 * A later work-conserving hierarchy (guaranteed rate plus ceiling, borrowing
 * from idle siblings) adds a parent key and a ceiling cost to hbm_config and
 * reads the parent's queue by key; the queue itself needs no change.
 */
#ifndef HBM_H
#define HBM_H

#ifndef __VMLINUX_H__ /* programs built on vmlinux.h have these types */
#include <linux/types.h>
#include <linux/bpf.h>
#endif

#define HBM_DIR_EGRESS  0
#define HBM_DIR_INGRESS 1

/* hbm_config.flags */
#define HBM_F_LOOPBACK (1U << 0) /* police loopback traffic too */
#define HBM_F_NO_DROP  (1U << 1) /* mark only, never drop (incast protection) */
#define HBM_F_PACE     (1U << 2) /* pacing assist: TCP paces itself to its share */
#define HBM_F_RELEASE  (1U << 3) /* being removed: pass all, lift pacing caps */

/* Return codes of cgroup skb programs. Egress programs loaded with the
 * egress expected attach type may set bit 1: the kernel then returns
 * NET_XMIT_CN to TCP, which calls tcp_enter_cwr(). */
#define HBM_RET_DROP    0
#define HBM_RET_PASS    1
#define HBM_RET_DROP_CN 2
#define HBM_RET_PASS_CN 3

#define LOOPBACK_IFINDEX 1

struct hbm_key {
	__u64 cgroup_id;
	__u32 dir;
	__u32 pad;
};

struct hbm_config {
	__u64 rate_bps;         /* configured rate, bits per second (for reports) */
	__u64 ns_per_byte;      /* time one byte takes at the rate: whole ns ... */
	__u32 ns_per_byte_frac; /* ... plus this many 2^-32 ns */
	__u32 flags;            /* HBM_F_* */
	__u64 burst_ns;         /* most credit an idle queue accrues */
	__u64 mark_ns;          /* backlog above which packets are marked */
	__u64 drop_large_ns;    /* backlog above which large packets drop; end of the cwr ramp */
	__u64 drop_small_ns;    /* backlog above which all packets drop */
	__u64 max_backlog_ns;   /* backlog never grows past this (bounded recovery) */
	__u32 small_pkt_bytes;  /* packets below this are "small" (SYN, pure ACK) */
	__u32 min_inflight;     /* TCP flows with fewer packets out are never dropped */
	__s64 pace_target_ns;   /* pacing assist cuts rates above this backlog */
};

/* The virtual queue. Instead of a byte credit that needs rate * elapsed time
 * (which overflows at high rates or loses precision at low ones), it keeps the
 * time at which the queue drains: vtime_ns. A packet advances it by its cost;
 * backlog = vtime_ns - now (negative = credit, bounded by burst_ns). Costs
 * carry a 32-bit fraction of a ns, so 400 Gbit/s (0.02 ns per byte) and
 * 8 kbit/s (1 ms per byte) are both exact to better than 1e-8. */
struct hbm_queue {
	struct bpf_spin_lock lock;
	__u32 frac;     /* fraction of vtime_ns, in 2^-32 ns */
	__u64 vtime_ns; /* bpf_ktime_get_ns() time at which the queue is empty */
	__u64 pace_Bps;   /* pacing assist: the group's per-flow rate, bytes/s (0: unset) */
	__u64 pace_ns;    /* start of the current control interval */
	__u64 pace_bytes; /* wire bytes passed in it */
};

struct hbm_stats {
	__u64 bytes;         /* wire bytes passed (GSO counted per segment) */
	__u64 packets;       /* wire packets passed (GSO segments) */
	__u64 marked;        /* packets given CE */
	__u64 cwr;           /* packets returned with the congestion code */
	__u64 dropped;       /* packets dropped */
	__u64 dropped_bytes; /* wire bytes dropped */
};

/* Pacing assist state of one socket (sk_storage): the rate each limited
 * level above it allows, so that nested limits each keep their own. */
#define HBM_PACE_LEVELS 8

struct hbm_flow {
	__u64 level_Bps[HBM_PACE_LEVELS]; /* per cgroup level, bytes/s (0: none) */
	__u64 applied_Bps;                /* SO_MAX_PACING_RATE last set */
};

/* Ingress state of one receiving socket (sk_storage, hbm_rx_map). A drop
 * opens a hole in the flow's sequence space; until the receiver's rcv_nxt
 * passes hole_end (the retransmission arrived) no further packet of the flow
 * is dropped, so a loss is always followed by packets that reveal it, and a
 * retransmission is never dropped. */
struct hbm_rx {
	__u64 hole_ns;  /* when the hole was made (0: none) */
	__u32 hole_end; /* sequence number just past the dropped payload */
	__u32 clamp;    /* receive-window assist: TCP_WINDOW_CLAMP last set (0: none) */
	__u64 level_Bps[HBM_PACE_LEVELS]; /* receive-window assist: rate per cgroup level */
};

#endif /* HBM_H */
