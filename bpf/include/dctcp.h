/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Types shared by HBM's BPF DCTCP (bpf/dctcp.bpf.c) and its Go loader
 * (internal/cc). Include after vmlinux.h.
 */
#ifndef HBM_DCTCP_H
#define HBM_DCTCP_H

/* alpha is fixed point: DCTCP_MAX_ALPHA stands for 1.0 (all data marked). */
#define DCTCP_MAX_ALPHA 1024U
/* EWMA gain g = 1/2^DCTCP_SHIFT_G = 1/16 (RFC 8257 section 4.2). */
#define DCTCP_SHIFT_G 4U

/* ca->flags */
#define DCTCP_F_RENO 1U /* ECN not negotiated and the switch to reno failed */

/*
 * Per-socket DCTCP state, kept in the congestion control private area of the
 * socket (inet_csk_ca, ICSK_CA_PRIV_SIZE = 104 bytes). The socket iterator
 * reads it back for `hbm cc show`, so its layout is part of the ABI between
 * the two programs of this object.
 */
struct hbm_dctcp {
	__u32 old_delivered;    /* tp->delivered at the start of the window */
	__u32 old_delivered_ce; /* tp->delivered_ce at the start of the window */
	__u32 prior_rcv_nxt;    /* receiver: rcv_nxt when the CE state last changed */
	__u32 alpha;            /* EWMA of the CE-marked fraction, 0..DCTCP_MAX_ALPHA */
	__u32 next_seq;         /* snd_nxt at the start of the window: its end */
	__u32 ce_state;         /* receiver: 1 if the last data segment was CE-marked */
	__u32 loss_cwnd;        /* cwnd before the last reduction (for undo) */
	__u32 flags;            /* DCTCP_F_* */
	__u32 magic;            /* DCTCP_MAGIC once init ran: tells a live state from zeroes */
	__u32 last_cwnd;        /* cwnd as of our last callback (a sane reference) */
	__u32 repairs;          /* impossible windows found and repaired (see repair_window) */
};

#define DCTCP_MAGIC 0x48424d44U /* "HBMD" */

/*
 * One record per socket using dctcp, written by the iter/tcp program with
 * bpf_seq_write. Fixed layout of 104 bytes, no implicit padding (the Go
 * decoder in internal/cc/sockets.go mirrors it).
 */
struct dctcp_sock_info {
	__u64 cookie;        /* socket cookie (ss -e shows it as sk:...) */
	__u8 saddr[16];      /* IPv4 in the first 4 bytes for AF_INET */
	__u8 daddr[16];
	__u16 family;        /* AF_INET or AF_INET6 */
	__u16 sport;         /* host order */
	__u16 dport;         /* host order */
	__u8 state;          /* TCP state (TCP_ESTABLISHED = 1...) */
	__u8 ca_state;       /* TCP_CA_Open = 0 ... TCP_CA_Loss = 4 */
	__u32 uid;
	__u32 alpha;         /* 0..DCTCP_MAX_ALPHA */
	__u32 ce_state;
	__u32 ecn_flags;     /* tp->ecn_flags */
	__u32 dctcp_flags;   /* DCTCP_F_* */
	__u32 snd_cwnd;
	__u32 snd_ssthresh;
	__u32 srtt_us;       /* smoothed RTT in microseconds */
	__u32 mss;
	__u32 delivered;     /* packets delivered (cumulative) */
	__u32 delivered_ce;  /* of which acknowledged as CE-marked (cumulative) */
	__u32 total_retrans;
	__u32 repairs;       /* hbm_dctcp.repairs */
	__u32 _pad;
};

#endif /* HBM_DCTCP_H */
