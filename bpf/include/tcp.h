/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The tcp_sock fields HBM's programs on uapi headers read (through
 * bpf_skc_to_tcp_sock), relocated by CO-RE against the running kernel.
 * Programs built on vmlinux.h have the whole type. */
#ifndef HBM_TCP_H
#define HBM_TCP_H

#ifndef __VMLINUX_H__
struct tcp_sock {
	__u32 window_clamp; /* the receive window's upper bound */
	struct {
		__u32 rtt_us; /* receiver's RTT estimate, << 3 */
		__u32 seq;
		__u64 time;
	} rcv_rtt_est;
} __attribute__((preserve_access_index));
#endif

#endif /* HBM_TCP_H */
