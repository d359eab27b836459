/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The handshake gate's queue (gate.h says what the gate is; this is its
 * arithmetic on a group's queue, pure functions tested by
 * BPF_PROG_TEST_RUN: internal/dataplane/rxfreshtest, TestGateQueue).
 *
 * The gate holds a new connection while its group's backlog stands above
 * the drop-large threshold, for the time the excess takes to drain. The
 * queue's own backlog is bounded (max_backlog_ns, vqueue.h, vq_clamp): past
 * the bound the policer forgets what passed, so that a flood's recovery
 * stays bounded. What passes the bound on egress is mostly what the policer
 * never refuses: connections' first flights, the ones the gate let go. A
 * gate that answered to the bounded backlog could never ask more than the
 * bound less the threshold (36 ms at the defaults), and where a round of the
 * group's new connections needs more, what they sent past the bound was
 * never waited for: 128 clients of 3 KB responses on a new connection each
 * sent 1.8x a 50mbit limit, every connection held (docs/design.md, "The
 * gate's queue"). So the gate keeps the same queue without the bound,
 * gate_vt_ns: charged with every packet the group's queue is charged with
 * (and refunded with it), never cut at the bound, and at most GATE_MAX_NS
 * past the threshold and the allowance below. Two things make it forget, as
 * the bounded queue did for every burst before:
 * - an allowance of one bound's worth of what the bound cut: a group's
 *   first flights starting together (64 new clients at once) pass the bound
 *   once, and waiting all of it out held every connection after it and
 *   made their P99 longer (107-111 against 103-104 ms); a group over its
 *   rate round after round passes the allowance, and past it the gate
 *   waits for every byte;
 * - the group's queue draining to its mark once no connection it held is
 *   still waiting (gate_until_ns): the group is under its rate again, and
 *   what passed before is not repaid by holding connections later (else
 *   every connection was held for the rest of the run). While some wait,
 *   the group's queue drains because they do: forgotten then, the next
 *   connections were answered short waits and went ahead of them, and 256
 *   clients of 20 KB at 100mbit (a 440 ms round) sent 1.77x the limit.
 * Where the bound never cuts, it is the group's queue. Also how long a
 * connection may wait (gate_longest_ns, gate_reply). Include after
 * vmlinux.h and hbm.h. */
#ifndef HBM_GATEQ_H
#define HBM_GATEQ_H

#include "hbm.h"

/* The most wait asked for at once, and how far past the threshold the
 * gate's queue remembers. A held connection waits once, so this is the
 * longest round of new connections the gate can hold a group to (every
 * client waiting its turn, as in htb's queue), where the connections then
 * leave whole (admitted: share.h, admit_steer); past it the queue forgets
 * and their first flights escape: at 100 ms, 128 clients of 20 KB
 * responses on a new connection each (a 220 ms round at 100mbit) sent
 * 2.03x the limit (docs/design.md, "The gate's longest wait"). Below the
 * client's own SYN timer (TCP_TIMEOUT_INIT, 1 s), which would otherwise
 * send the SYN again and its answer ungated, and below the kernel's
 * default request timeout, by which gate_synack tells a timeout the gate
 * set. A connection that is paced after the gate waits at most
 * GATE_PACED_MAX_NS there (gate_longest_ns, below): its response waits
 * its share as well, and the round's time is the pacing's to keep (128
 * clients of 50 KB at 100mbit: P99 815 ms with 600 ms waits, 622 with
 * 100, htb 592). */
#define GATE_MAX_NS (600 * 1000000ULL)
#define GATE_PACED_MAX_NS (100 * 1000000ULL)
_Static_assert(GATE_MAX_NS + 2 * 10000000ULL < 1000000000ULL,
	       "a gated wait, two ticks late at HZ 100, must stay below the client's 1 s SYN timer");

/* gate_charge charges the gate's queue with a packet of cost ns that the
 * group's queue, at prev before it (after vq_clamp), was charged with: on
 * top of what the bound cut, or from prev where the gate's queue has fallen
 * behind it (a refund, the group's credit) or the group's queue stands at
 * or below its mark with no held connection still waiting. Call with q
 * locked. */
static __always_inline void gate_charge(struct hbm_queue *q, const struct hbm_config *cfg, __u64 prev,
					__u64 cost, __u64 now)
{
	__u64 vt = q->gate_vt_ns, end = now + cfg->max_backlog_ns + cfg->drop_large_ns + GATE_MAX_NS;

	if ((__s64)(vt - prev) < 0 ||
	    ((__s64)(prev - now) <= (__s64)cfg->mark_ns && (__s64)(now - q->gate_until_ns) >= 0))
		vt = prev;
	vt += cost;
	if ((__s64)(vt - end) > 0)
		vt = end;
	q->gate_vt_ns = vt;
}

/* gate_over_ns is how far the backlog the gate answers to stands above the
 * limit's drop-large threshold (<= 0: not over): the group's queue's, or
 * the gate's past the allowance (one bound). Unlocked callers read two
 * aligned 64-bit words. */
static __always_inline __s64 gate_over_ns(const struct hbm_queue *q, const struct hbm_config *cfg, __u64 now)
{
	__s64 backlog = (__s64)(q->vtime_ns - now);
	__s64 held = (__s64)(q->gate_vt_ns - now) - (__s64)cfg->max_backlog_ns;

	return (held > backlog ? held : backlog) - (__s64)cfg->drop_large_ns;
}

/* gate_longest_ns is the most a connection may wait at the gate:
 * GATE_MAX_NS where it then leaves whole (fits: connections like it fit
 * ADMIT_BYTES, gate.h, conn_fits; admits: every group over its threshold
 * admits, share.h, admit_steer), else GATE_PACED_MAX_NS (above says why). */
static __always_inline __s64 gate_longest_ns(int fits, int admits)
{
	return fits && admits ? (__s64)GATE_MAX_NS : (__s64)GATE_PACED_MAX_NS;
}

/* gate_reply is the timeout, in jiffies of j ns, for a wait of wait (ns:
 * the groups' excess) that must be at least least (gate_least_ns for a
 * server's request, gate_active_least_ns for a client's SYN) and at most
 * longest (gate_longest_ns): 0 where the least is beyond GATE_MAX_NS (the
 * peer too far to gate). */
static __always_inline __u32 gate_reply(__s64 wait, __s64 least, __s64 longest, __u64 j)
{
	if (least > (__s64)GATE_MAX_NS)
		return 0; /* too far to gate */
	if (wait > longest)
		wait = longest;
	if (wait < least)
		wait = least;
	return ((__u64)wait + j - 1) / j;
}

#endif /* HBM_GATEQ_H */
