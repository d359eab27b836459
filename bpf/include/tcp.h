/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Socket fields HBM's programs read through BTF pointers (bpf_skc_to_tcp_sock),
 * relocated by CO-RE against the running kernel; vmlinux.h has the types. */
#ifndef HBM_TCP_H
#define HBM_TCP_H

#ifndef SOL_SOCKET
#define SOL_SOCKET 1
#endif
#ifndef SOL_TCP
#define SOL_TCP 6
#endif
#define SO_MAX_PACING_RATE_OPT 47   /* SO_MAX_PACING_RATE, SOL_SOCKET */
#define TCP_WINDOW_CLAMP_OPT   10   /* TCP_WINDOW_CLAMP, SOL_TCP */
#define SOCK_OPS_CB_FLAGS_OPT  1008 /* TCP_BPF_SOCK_OPS_CB_FLAGS, SOL_TCP */

#ifndef AF_INET
#define AF_INET  2
#define AF_INET6 10
#endif

/* tp_max_pacing_rate is the socket's SO_MAX_PACING_RATE as the kernel holds
 * it (~0UL: none), whoever set it: the socket's owner may have. */
static __always_inline __u64 tp_max_pacing_rate(struct tcp_sock *tp)
{
	return tp->inet_conn.icsk_inet.sk.sk_max_pacing_rate;
}

/* tp_idle reports whether everything the socket's owner wrote was acked. */
static __always_inline int tp_idle(struct tcp_sock *tp)
{
	return tp->write_seq == tp->snd_una;
}

#endif /* HBM_TCP_H */
