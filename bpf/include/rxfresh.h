/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Small transfers first, on ingress: the receiver's view of an RPC.
 *
 * Why: the egress RPC class (policy.h, flow_fresh; pacing.h) knows an RPC
 * by the sender going idle (everything it wrote acked). A receiver cannot
 * see the sender's write queue, but it sees a request/response exchange
 * turn over: the receiving socket sent data (its reply) since the last data
 * it received. What arrives next is a new burst, and its first
 * FRESH_BURST_BYTES are an RPC *candidate*: never marked (a CE on a 10 KB
 * request cuts the sender's cwnd, and DCTCP's alpha, for the next request
 * too) and, within the group's RPC budget (fresh_budget, 7/8 of the rate),
 * never dropped. The first burst of a connection is one too.
 *
 * The window: a socket whose last burst fit in FRESH_BURST_BYTES is an RPC
 * socket (rx_rpc). While it is between requests or inside a fresh burst,
 * and its last candidate found room in the budget, the receive-window assist
 * (rxwin.h) keeps its window at FRESH_BURST_BYTES instead of the bulk
 * share's few segments, so a 10 KB request arrives in one flight instead of
 * two segments per round trip (measured before this: an incast's 10 KB P99
 * 2.2-2.5x worse with the assist than without HBM, docs/design.md). A
 * socket whose bursts are larger (1 MB, 8 MB requests, streams) keeps the
 * bulk clamp from its first segment: an incast of large requests opening
 * 64 KB windows at once is what overflows a shallow switch buffer.
 */
#ifndef HBM_RXFRESH_H
#define HBM_RXFRESH_H

#include "hbm.h"
#include "policy.h"

/* rx_fresh reports whether this ingress TCP data packet is an RPC candidate
 * (the first FRESH_BURST_BYTES of a burst), starting a new burst when the
 * receiver replied since the current one began, or on the connection's
 * first data. segs_out is the receiving socket's data_segs_out. */
static __always_inline int rx_fresh(const struct pkt *p, __u32 segs_out, struct hbm_sock *s)
{
	if (!s->burst) {
		s->burst = 1;
		s->rx_rpc = 1; /* nothing known yet: the first burst decides */
		s->rx_segs_out = segs_out;
		s->burst_end = p->seq + FRESH_BURST_BYTES;
	} else if (segs_out != s->rx_segs_out) {
		/* The last burst was an RPC if it ended within its fresh part. */
		s->rx_rpc = (__s32)(p->seq - s->burst_end) <= 0;
		s->rx_segs_out = segs_out;
		s->burst_end = p->seq + FRESH_BURST_BYTES;
	} else if ((__s32)(p->seq + p->payload - s->burst_end) > 0) {
		s->rx_rpc = 0; /* this burst outgrew the fresh part */
	}
	return (__s32)(p->seq + p->payload - s->burst_end) <= 0;
}

/* rx_rpc_win_bytes is the window (bytes) an RPC socket keeps while its next
 * request may arrive or one is arriving: FRESH_BURST_BYTES; 0 for any other
 * socket. rcv_nxt and segs_out are the receiving socket's. */
static __always_inline __u32 rx_rpc_win_bytes(const struct hbm_sock *s, __u32 rcv_nxt, __u32 segs_out)
{
	if (!s->burst || !s->rx_rpc || !s->fresh_room)
		return 0;
	if (segs_out != s->rx_segs_out || (__s32)(rcv_nxt - s->burst_end) < 0)
		return FRESH_BURST_BYTES;
	return 0;
}

#endif /* HBM_RXFRESH_H */
