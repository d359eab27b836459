/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Per-socket state (sk_storage) of the pacing assist (pacing.h), the
 * ingress policy and receive-window assist (policy.h, rxwin.h), shared with
 * the socket walker (sockets.bpf.c). Include after
 * bpf_helpers.h, on uapi headers or on vmlinux.h. */
#ifndef HBM_FLOW_H
#define HBM_FLOW_H

#include <bpf/bpf_endian.h>
#include "hbm.h"

#define SO_MAX_PACING_RATE_OPT 47    /* SO_MAX_PACING_RATE, SOL_SOCKET */
#define PACE_UNLIMITED 0xffffffffU   /* SO_MAX_PACING_RATE: no limit */
#define PACE_MAX_BPS   0xfffffffeULL /* the option is 32-bit bytes per second */

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct hbm_flow);
} hbm_flow_map SEC(".maps");

/* Ingress: per receiving socket state (struct hbm_rx). */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct hbm_rx);
} hbm_rx_map SEC(".maps");

#define TCP_WINDOW_CLAMP_OPT 10         /* TCP_WINDOW_CLAMP, SOL_TCP */
#define RXWIN_MAX            (64U << 20) /* a window clamp that clamps nothing */

/* levels_least is the least non-zero per-level rate, bytes/s, at most max. */
static __always_inline __u64 levels_least(const __u64 *level_Bps, __u64 max)
{
	__u64 least = max;
	int i;

	for (i = 0; i < HBM_PACE_LEVELS; i++)
		if (level_Bps[i] && level_Bps[i] < least)
			least = level_Bps[i];
	return least;
}

/* flow_want is the least rate the socket's limited levels allow, bytes/s. */
static __always_inline __u64 flow_want(const struct hbm_flow *f)
{
	return levels_least(f->level_Bps, PACE_UNLIMITED);
}

/* rx_clamped reports whether any cgroup level still clamps the socket's
 * receive window (the least-rate level sets its own clamp). */
static __always_inline int rx_clamped(const struct hbm_rx *rx)
{
	int i;

	for (i = 0; i < HBM_PACE_LEVELS; i++)
		if (rx->level_Bps[i])
			return 1;
	return 0;
}

#ifndef AF_INET
#define AF_INET  2
#define AF_INET6 10
#endif

/* ops_local reports whether a sockops socket's connection stays on this host
 * (a loopback address, or the same address at both ends): its packets cross
 * lo, which the policer exempts unless the limit has HBM_F_LOOPBACK, so the
 * assists must leave it alone too. */
static __always_inline int ops_local(const struct bpf_sock_ops *skops)
{
	/* Every field read once, up front: the verifier rejects a context load
	 * through a pointer the compiler computed for a shared tail. */
	__u32 family = skops->family;
	__u32 r4 = skops->remote_ip4, l4 = skops->local_ip4;
	__u32 r0 = skops->remote_ip6[0], r1 = skops->remote_ip6[1];
	__u32 r2 = skops->remote_ip6[2], r3 = skops->remote_ip6[3];
	__u32 l0 = skops->local_ip6[0], l1 = skops->local_ip6[1];
	__u32 l2 = skops->local_ip6[2], l3 = skops->local_ip6[3];

	if (family == AF_INET)
		return (bpf_ntohl(r4) >> 24) == 127 || r4 == l4;
	if (family != AF_INET6)
		return 0;
	if (!r0 && !r1 && !r2 && r3 == bpf_htonl(1))
		return 1; /* ::1 */
	if (!r0 && !r1 && r2 == bpf_htonl(0xffff) && (bpf_ntohl(r3) >> 24) == 127)
		return 1; /* ::ffff:127.0.0.0/104 */
	return r0 == l0 && r1 == l1 && r2 == l2 && r3 == l3;
}

/* pacing_opt turns a rate into the SO_MAX_PACING_RATE value. */
static __always_inline __u32 pacing_opt(__u64 want)
{
	return want > PACE_MAX_BPS ? PACE_UNLIMITED : (__u32)want;
}

#endif /* HBM_FLOW_H */
