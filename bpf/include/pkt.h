/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Packet facts the policy needs, read from a cgroup skb (data starts at the
 * network header): protocol, ECN codepoint, header length, wire cost.
 * Include after vmlinux.h and bpf_helpers.h. */
#ifndef HBM_PKT_H
#define HBM_PKT_H

#include <bpf/bpf_endian.h>

#define ETH_P_IP    0x0800
#define ETH_P_IPV6  0x86DD
#define ECN_MASK    3
#define ECN_NOT_ECT 0
#define ECN_CE      3

#define UDP_HDR_BYTES 8
/* Rates count frames, as tc's qdiscs do: every segment leaves with a link
 * layer header the cgroup hook does not see (its data starts at the network
 * header). Ethernet's 14 bytes: without them a group of 700-byte packets
 * sent 2% more frame bytes than htb at the same rate, 64-byte datagrams 15%. */
#define LINK_HDR_BYTES 14
/* TSO/GSO packets larger than this are accounted as this (BIG TCP tops at 512 KB). */
#define MAX_PKT_BYTES (1U << 20)

struct pkt {
	__u64 wire_bytes; /* what the packet costs on the wire: all segments' frames */
	__u32 segs;       /* wire packets it becomes */
	__u32 len;        /* skb length (first segment's headers + all payload) */
	__u32 seq;        /* TCP: sequence number of the first payload byte */
	__u32 payload;    /* TCP: payload bytes (0: SYN, FIN, pure ACK) */
	__u8 is_tcp;
	__u8 ecn;
	__u8 tcp_flags;   /* TCP: header byte 13 (FIN 0x01 SYN 0x02 RST 0x04 PSH 0x08) */
	__u8 pad;
};

#define TCPF_FIN 0x01
#define TCPF_SYN 0x02
#define TCPF_RST 0x04
#define TCPF_PSH 0x08

/* pkt_parse fills p. Unknown or truncated packets still get a cost (their
 * length) so that nothing goes unaccounted. */
static __always_inline void pkt_parse(struct __sk_buff *skb, struct pkt *p)
{
	__u32 hdr = 0, proto = 0;

	p->len = skb->len;
	if (p->len > MAX_PKT_BYTES)
		p->len = MAX_PKT_BYTES;
	p->is_tcp = 0;
	p->ecn = ECN_NOT_ECT;
	p->seq = 0;
	p->payload = 0;
	p->tcp_flags = 0;

	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		struct iphdr ip;

		if (bpf_skb_load_bytes(skb, 0, &ip, sizeof(ip)))
			goto done;
		p->ecn = ip.tos & ECN_MASK;
		proto = ip.protocol;
		hdr = ip.ihl * 4;
	} else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr ip6;

		if (bpf_skb_load_bytes(skb, 0, &ip6, sizeof(ip6)))
			goto done;
		p->ecn = (ip6.flow_lbl[0] >> 4) & ECN_MASK;
		proto = ip6.nexthdr; /* extension headers: accounted as non-TCP */
		hdr = sizeof(ip6);
	}

	if (proto == IPPROTO_TCP) {
		struct tcphdr th;

		if (!bpf_skb_load_bytes(skb, hdr, &th, sizeof(th))) {
			p->is_tcp = 1;
			p->seq = bpf_ntohl(th.seq);
			p->tcp_flags = ((__u8 *)&th)[13];
			hdr += th.doff * 4;
			if (hdr < p->len)
				p->payload = p->len - hdr;
		}
	} else if (proto == IPPROTO_UDP) {
		hdr += UDP_HDR_BYTES;
	}
done:
	/* A GSO packet leaves as gso_segs packets, each with its own headers. */
	p->segs = skb->gso_segs > 1 ? skb->gso_segs : 1;
	p->wire_bytes = p->len + (__u64)p->segs * LINK_HDR_BYTES;
	if (p->segs > 1 && hdr < p->len)
		p->wire_bytes += (__u64)(p->segs - 1) * hdr;
}

#endif /* HBM_PKT_H */
