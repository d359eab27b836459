/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The handshake gate: a new connection to a server whose group is over its
 * limit waits out the group's backlog before its SYN-ACK leaves.
 *
 * Why: TCP paces none of a connection's first 10 segments
 * (tcp_update_skb_after_send), and the policer cannot refuse a flow's only
 * packets in flight without stalling it for the 200 ms retransmission
 * timer. So a response of up to ~14 KB on a new connection leaves whole,
 * whatever the group's rate, and a server answering each request on a new
 * connection escaped its limit (32 clients of 10 KB responses: 4-5x the
 * limit; 30 KB: 1.25x). What the data plane can hold is when the response
 * begins: the handshake.
 *
 * How: the kernel asks the listener's sockops programs for a request's SYN
 * timeout (BPF_SOCK_OPS_TIMEOUT_INIT) just before its first SYN-ACK. If a
 * limited group on the listener's path stands above its drop-large
 * threshold, gate_timeout answers with the time the excess takes to drain
 * (in jiffies, at least GATE_MIN_NS and a 15th of the client's RTT), and
 * the egress program refuses that first SYN-ACK (police_level, v->gate);
 * the request's timer sends it again after the wait. Only the first send
 * is ever refused: the kernel drops a request whose timer-driven
 * retransmission fails (reqsk_timer_handler), and the client's own SYN
 * timer is a second. The request's timer backs off from the short timeout
 * (x2 each time) and it expires after 63 timeouts, hence the RTT's part in
 * the wait (docs/design.md, "The handshake gate").
 *
 * A client in a limited group is held the same way, by its first SYN
 * (gate_active): the kernel asks for an active open's SYN timeout before
 * the SYN leaves, and a refused SYN is sent again by the socket's timer.
 *
 * The backlog is the group's queue without its bound (gateq.h): what the
 * bound forgets, the gate still waits for.
 *
 * The timeout callback runs for a request socket, which names no cgroup:
 * the listener's limited groups are learnt from its SYN-ACKs, keyed by
 * (network namespace, port) in hbm_listen_map. Include after vmlinux.h. */
#ifndef HBM_GATE_H
#define HBM_GATE_H

#include "cgpath.h"
#include "gateq.h"
#include "hbm.h"
#include "maps.h"
#include "policy.h"
#include "tcp.h"

#define GATE_MIN_NS (4 * 1000000ULL)   /* least wait */
/* A request lives 63 timeouts (tcp_synack_retries 5, each twice the last):
 * the wait is at least a 15th of the client's RTT (its ACK must come in
 * time), and a client whose RTT is not known waits at least this, which
 * lets a request live about a second, as the kernel's first timeout does. */
#define GATE_RTT_DIV 15
#define GATE_UNKNOWN_NS (16 * 1000000ULL)
/* A client is gated only towards a server at most this far (its RTT): the
 * least wait, 3/4 of the RTT (gate_active_least_ns), is otherwise far more
 * than most excesses need, where htb's queue would hold its SYN only for
 * the excess. */
#define GATE_ACTIVE_MAX_RTT_US 8000
/* so a client's least wait never exceeds the most asked for (gate_reply) */
_Static_assert(GATE_ACTIVE_MAX_RTT_US * 750ULL <= GATE_MAX_NS,
	       "a client's least wait, 3/4 of its server's RTT, must fit GATE_MAX_NS");
/* A SYN-ACK sent within this of the request's first is the first (its
 * retransmissions come a timeout later, at least a jiffy). */
#define GATE_FIRST_US 1000
/* The tick is measured over at least this many jiffies (16-160 ms) and
 * taken to be the nearest of the usual HZ's ticks when within 1/16 of it (a
 * jiffies64 read lags by at most one: 1/16 of the span). The measurement
 * starts at the first connection of a limited group (pacing.h). */
#define GATE_CLOCK_JIFFIES 16

/* gate_tick snaps a measured tick to HZ 1000, 300, 250 or 100 (0: none). */
static __always_inline __u64 gate_tick(__u64 est)
{
	if (est * 16 >= 15 * 1000000ULL && est * 16 <= 17 * 1000000ULL)
		return 1000000ULL;
	if (est * 16 >= 15 * 3333333ULL && est * 16 <= 17 * 3333333ULL)
		return 3333333ULL;
	if (est * 16 >= 15 * 4000000ULL && est * 16 <= 17 * 4000000ULL)
		return 4000000ULL;
	if (est * 16 >= 15 * 10000000ULL && est * 16 <= 17 * 10000000ULL)
		return 10000000ULL;
	return 0;
}

/* jiffy_ns is the kernel's tick in ns, measured against ktime since the
 * first call (HZ is a build option: 100-1000); 0 until measured. */
static __always_inline __u64 jiffy_ns(__u64 now)
{
	struct hbm_clock *c;
	__u32 zero = 0;
	__u64 j = bpf_jiffies64(), est, tick;

	c = bpf_map_lookup_elem(&hbm_clock_map, &zero);
	if (!c)
		return 0;
	if (c->jiffy_ns)
		return c->jiffy_ns;
	if (!c->ns0) {
		c->jiffies0 = j;
		c->ns0 = now;
		return 0;
	}
	if (j - c->jiffies0 < GATE_CLOCK_JIFFIES)
		return 0;
	est = (now - c->ns0) / (j - c->jiffies0);
	tick = gate_tick(est);
	if (tick)
		c->jiffy_ns = tick;
	/* An unusual HZ: the measurement, better as the span grows. */
	return tick ? tick : est;
}

/* gate_excess_ns is how far group id's egress backlog, unbounded
 * (gateq.h), stands above its drop-large threshold (<= 0: not over): where
 * the policer would refuse a bulk packet, the gate holds a new connection.
 * Not the mark: a backlog between the two is a burst the group may take,
 * and what keeps the rate is that the backlog stays bounded (below the
 * clamp that would forget it), not that it stays low; gating at the mark
 * held a third of 8 clients' connections for a few ms each and lengthened
 * their tail. Unlocked: aligned 64-bit reads. */
static __always_inline __s64 gate_excess_ns(__u64 id, __u64 now, int *admits)
{
	struct hbm_key key = { .cgroup_id = id, .dir = HBM_DIR_EGRESS };
	const struct hbm_config *cfg;
	struct hbm_queue *q;
	__s64 e;

	cfg = bpf_map_lookup_elem(&hbm_limit_map, &key);
	if (!cfg || (cfg->flags & HBM_F_NO_DROP))
		return 0;
	q = bpf_map_lookup_elem(&hbm_queue_map, &key);
	if (!q)
		return 0;
	e = gate_over_ns(q, cfg, now);
	if (e <= 0)
		return e;
	if (!(q->admit & ADMIT_ON))
		*admits = 0;
	/* About when this connection is let go (the wait asked for is this
	 * level's excess, or another's, within bounds): the gate's queue is
	 * kept till then (gateq.h). A plain store, unlocked: the latest of
	 * two racing answers may be lost, a few ms of keeping. */
	if ((__s64)(now + e - q->gate_until_ns) > 0)
		q->gate_until_ns = now + e;
	return e;
}

/* peer_key fills k with the socket's remote address and network namespace. */
static __always_inline void peer_key(struct bpf_sock_ops *skops, struct hbm_peer_key *k)
{
	k->netns_cookie = bpf_get_netns_cookie(skops);
	if (skops->family == AF_INET6) {
		k->addr[0] = skops->remote_ip6[0];
		k->addr[1] = skops->remote_ip6[1];
		k->addr[2] = skops->remote_ip6[2];
		k->addr[3] = skops->remote_ip6[3];
	} else {
		k->addr[0] = skops->remote_ip4;
	}
}

/* gate_peer_note records a connection's smoothed RTT for its peer (called
 * when a connection of a limited group is established and when it ends). */
static __always_inline void gate_peer_note(struct bpf_sock_ops *skops)
{
	struct hbm_peer_key k = {};
	struct hbm_peer v = {}, *old;

	v.rtt_us = skops->srtt_us >> 3;
	if (!v.rtt_us)
		return;
	peer_key(skops, &k);
	old = bpf_map_lookup_elem(&hbm_peer_map, &k);
	if (old) {
		if (old->rtt_us != v.rtt_us)
			old->rtt_us = v.rtt_us;
		return;
	}
	bpf_map_update_elem(&hbm_peer_map, &k, &v, BPF_ANY);
}

/* gate_least_ns is the least wait for the request's client: GATE_MIN_NS,
 * and a 15th of its RTT as earlier connections measured it (unknown:
 * GATE_UNKNOWN_NS). Above GATE_MAX_NS the client is too far to gate. */
static __always_inline __s64 gate_least_ns(struct bpf_sock_ops *skops)
{
	struct hbm_peer_key k = {};
	__s64 least = GATE_UNKNOWN_NS;
	struct hbm_peer *p;

	peer_key(skops, &k);
	p = bpf_map_lookup_elem(&hbm_peer_map, &k);
	if (p && p->rtt_us)
		least = (__s64)p->rtt_us * 1000 / GATE_RTT_DIV;
	return least < (__s64)GATE_MIN_NS ? (__s64)GATE_MIN_NS : least;
}

/* gate_active_least_ns is the least wait for an active open to its server:
 * three quarters of the server's RTT as earlier connections measured it, at
 * least GATE_MIN_NS; -1 (not gated) for a server never seen or further than
 * GATE_ACTIVE_MAX_RTT_US. A client's SYN timer doubles after the gated
 * send, so a wait of more than half the RTT lets the SYN-ACK come back
 * before the next retransmission: one SYN
 * retransmission, the gated one, and TCP cuts a connection's first cwnd to
 * one segment only after two (tcp_init_transfer). Not gated when unknown:
 * a first connection to a far server would otherwise retransmit its SYN on
 * every doubling of a short timer. (A server's request can only wait a
 * 15th of its client's RTT, gate_least_ns: it has one timer for the whole
 * request; a client's SYN-ACK retransmissions cost its server nothing of
 * the kind.) */
static __always_inline __s64 gate_active_least_ns(struct bpf_sock_ops *skops)
{
	struct hbm_peer_key k = {};
	struct hbm_peer *p;
	__s64 least;

	peer_key(skops, &k);
	p = bpf_map_lookup_elem(&hbm_peer_map, &k);
	if (!p || !p->rtt_us || p->rtt_us > GATE_ACTIVE_MAX_RTT_US)
		return -1;
	least = (__s64)p->rtt_us * 750;
	return least < (__s64)GATE_MIN_NS ? (__s64)GATE_MIN_NS : least;
}

/* listen_entry is the listener entry of a request or of a server's
 * connection: the one for its network namespace and local port, which
 * both share with their listener (NULL: none, not a limited server's). */
static __always_inline struct hbm_listen *listen_entry(struct bpf_sock_ops *skops)
{
	struct hbm_listen_key k = {};

	k.netns_cookie = bpf_get_netns_cookie(skops);
	k.port = skops->local_port;
	return bpf_map_lookup_elem(&hbm_listen_map, &k);
}

/* conn_fits says whether connections whose record (admit_note: what each
 * sent, smoothed; 0 none closed yet) is conn_bytes each send what fits in
 * ADMIT_BYTES, so that the gate can admit them whole: beyond it the gate
 * let through connections whose rest then shared the group paced (64
 * clients of 100 KB on new connections, P99 336 ms against 297 paced from
 * the start). Unknown: no. */
static __always_inline int conn_fits(__u32 conn_bytes)
{
	return conn_bytes && conn_bytes <= ADMIT_BYTES;
}

/* admit_fits is conn_fits for connections like skops's: a server's by its
 * listener's record, a client's by its server's. */
static __always_inline int admit_fits(struct bpf_sock_ops *skops)
{
	struct hbm_listen *l = listen_entry(skops);
	struct hbm_peer_key k = {};
	struct hbm_peer *p;
	__u32 c = 0;

	if (l) {
		c = l->conn_bytes;
	} else {
		peer_key(skops, &k);
		p = bpf_map_lookup_elem(&hbm_peer_map, &k);
		if (p)
			c = p->conn_bytes;
	}
	return conn_fits(c);
}

/* gate_active answers BPF_SOCK_OPS_TIMEOUT_INIT for an active open (a
 * client in a limited group connecting to a server it has reached before,
 * at most GATE_ACTIVE_MAX_RTT_US away): as for a server's request, if a
 * limited group on the socket's cgroup path stands above its drop-large
 * threshold, the wait in jiffies (at least gate_active_least_ns), and the
 * socket is marked (syn_gated) so that the egress program refuses its
 * first SYN; TCP sends it again when the timeout expires, and that send is
 * never refused. Without it a client's first flight (TCP's unpaced first
 * ten segments) was held only by refusals: 8 clients uploading 10 KB on a
 * new connection each into a 100mbit group sent 1.03-1.05 of the limit
 * with 16,000 refusals in 10 s and a P99 twice htb's (docs/design.md, "The
 * handshake gate"). The socket's own path is read from its cgroup (the
 * request socket of a server's connection names none, hence
 * hbm_listen_map there). A SYN carrying data (TCP Fast Open) is not gated.
 * An open the gate could hold (it knows the server, near enough) is marked
 * gate_open whether held or not: its first segments are the gate's, never
 * refused (policy.h, flow_held); other clients' first flights stay
 * refusable, as before the gate held any. */
static __always_inline int gate_active(struct bpf_sock_ops *skops)
{
	struct bpf_sock *sk = skops->sk;
	struct cgroup *cg;
	struct tcp_sock *tp;
	struct hbm_sock *s;
	__u64 now = bpf_ktime_get_ns(), j;
	__s64 wait = 0, e, least;
	__u64 id;
	__u32 n;
	int level, i, admits = 1;

	if (!sk)
		return 1;
	tp = bpf_skc_to_tcp_sock(sk);
	if (!tp || tp->fastopen_req)
		return 1;
	j = jiffy_ns(now);
	if (!j)
		return 1;
	least = gate_active_least_ns(skops);
	if (least < 0)
		return 1; /* never gated: its first flight stays refusable */
	cg = sk_cgroup((struct sock *)tp, &level);
	if (!cg)
		return 1;
	s = bpf_sk_storage_get(&hbm_flow_map, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!s)
		return 1;
	/* The gate holds this connection's first flight, now or never: the
	 * policer leaves it (flow_held). */
	s->gate_open = 1;
	for (i = 0; i < HBM_MAX_LEVELS; i++) {
		id = cgroup_level_id(cg, level, i);
		if (!id)
			break;
		e = gate_excess_ns(id, now, &admits);
		if (e > wait)
			wait = e;
	}
	if (wait <= 0)
		return 1;
	n = gate_reply(wait, least, gate_longest_ns(admit_fits(skops), admits), j);
	if (!n)
		return 1;
	s->syn_gated = 1;
	skops->reply = n;
	return 1;
}

/* gate_timeout answers BPF_SOCK_OPS_TIMEOUT_INIT for a request to a
 * listener whose groups are over: the wait, in jiffies. Otherwise it leaves
 * the kernel's timeout. */
static __always_inline int gate_timeout(struct bpf_sock_ops *skops)
{
	struct hbm_listen *l;
	__u64 now = bpf_ktime_get_ns(), j;
	__s64 wait = 0, e;
	__u32 n;
	int i, admits = 1;

	if (skops->is_fullsock)
		return gate_active(skops);
	l = listen_entry(skops);
	if (!l)
		return 1;
	j = jiffy_ns(now);
	if (!j)
		return 1;
	for (i = 0; i < HBM_GATE_LEVELS; i++) {
		if (!l->cgroup_id[i])
			break;
		e = gate_excess_ns(l->cgroup_id[i], now, &admits);
		if (e > wait)
			wait = e;
	}
	if (wait <= 0)
		return 1;
	n = gate_reply(wait, gate_least_ns(skops), gate_longest_ns(conn_fits(l->conn_bytes), admits), j);
	if (n)
		skops->reply = n;
	return 1;
}

/* gate_synack looks at a SYN-ACK leaving listener sk: the cgroup hook hands
 * the policy the listener, not the request socket the SYN-ACK belongs to,
 * so the request is looked up by the packet's addresses. It fills k (the
 * listener's key in hbm_listen_map) and returns 1 if this is the first send
 * of a request whose timeout gate_timeout shortened: the one send the gate
 * may hold (a retransmission never: the kernel would drop the request). */
static __always_inline int gate_synack(struct __sk_buff *skb, struct bpf_sock *sk, __u64 now,
				       struct hbm_listen_key *k)
{
	struct bpf_sock_tuple t = {};
	struct tcp_request_sock *req;
	struct bpf_sock *skc;
	__u32 size, hdr;
	__u16 ports[2];
	__u64 snt_us, j;
	__u32 timeout;
	int held = 0;

	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		struct iphdr ip;

		if (bpf_skb_load_bytes(skb, 0, &ip, sizeof(ip)))
			return 0;
		hdr = ip.ihl * 4;
		t.ipv4.saddr = ip.daddr;
		t.ipv4.daddr = ip.saddr;
		size = sizeof(t.ipv4);
	} else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr ip6;

		if (bpf_skb_load_bytes(skb, 0, &ip6, sizeof(ip6)))
			return 0;
		hdr = sizeof(ip6);
		__builtin_memcpy(t.ipv6.saddr, &ip6.daddr, sizeof(t.ipv6.saddr));
		__builtin_memcpy(t.ipv6.daddr, &ip6.saddr, sizeof(t.ipv6.daddr));
		size = sizeof(t.ipv6);
	} else {
		return 0;
	}
	if (bpf_skb_load_bytes(skb, hdr, ports, sizeof(ports)))
		return 0;
	/* As the client's packets arrive: from its port to ours. */
	if (size == sizeof(t.ipv4)) {
		t.ipv4.sport = ports[1];
		t.ipv4.dport = ports[0];
	} else {
		t.ipv6.sport = ports[1];
		t.ipv6.dport = ports[0];
	}
	skc = bpf_skc_lookup_tcp(skb, &t, size, BPF_F_CURRENT_NETNS, 0);
	if (!skc)
		return 0;
	req = bpf_skc_to_tcp_request_sock(skc);
	if (req) {
		k->netns_cookie = BPF_CORE_READ(req, req.req.__req_common.skc_net.net, net_cookie);
		k->port = sk->src_port;
		snt_us = BPF_CORE_READ(req, snt_synack);
		if (bpf_core_field_exists(req->req.req.timeout) && now / 1000 - snt_us <= GATE_FIRST_US) {
			j = jiffy_ns(now);
			timeout = BPF_CORE_READ(req, req.req.timeout);
			/* A timeout the gate may have set (the kernel's is a
			 * second, TCP_TIMEOUT_INIT). */
			held = j && (__u64)timeout * j <= GATE_MAX_NS + j;
		}
	}
	bpf_sk_release(skc);
	return held;
}

/* gate_learn records the limited groups a listener's SYN-ACK was charged
 * to (v->charged_id: its own group first) under its key k, for
 * gate_timeout. */
static __always_inline void gate_learn(const struct hbm_listen_key *k, const struct verdict *v)
{
	struct hbm_listen val = {}, *old;
	__u32 i;

	if (!v->ncharged || !k->port)
		return;
	for (i = 0; i < HBM_GATE_LEVELS && i < VERDICT_CHARGED; i++)
		if (i < v->ncharged)
			val.cgroup_id[i] = v->charged_id[i];
	old = bpf_map_lookup_elem(&hbm_listen_map, k);
	if (old) {
		val.xfer_time = old->xfer_time;
		val.conn_bytes = old->conn_bytes;
	}
	if (old && old->cgroup_id[0] == val.cgroup_id[0] && old->cgroup_id[1] == val.cgroup_id[1] &&
	    old->cgroup_id[2] == val.cgroup_id[2] && old->cgroup_id[3] == val.cgroup_id[3])
		return;
	bpf_map_update_elem(&hbm_listen_map, k, &val, BPF_ANY);
}

#endif /* HBM_GATE_H */
