/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Per-socket pacing state (sk_storage), shared by the pacing assist
 * (pacing.h) and the socket walker (sockets.bpf.c). Include after
 * bpf_helpers.h, on uapi headers or on vmlinux.h. */
#ifndef HBM_FLOW_H
#define HBM_FLOW_H

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

/* flow_want is the least rate the socket's limited levels allow, bytes/s. */
static __always_inline __u64 flow_want(const struct hbm_flow *f)
{
	__u64 want = PACE_UNLIMITED;
	int i;

	for (i = 0; i < HBM_PACE_LEVELS; i++)
		if (f->level_Bps[i] && f->level_Bps[i] < want)
			want = f->level_Bps[i];
	return want;
}

/* pacing_opt turns a rate into the SO_MAX_PACING_RATE value. */
static __always_inline __u32 pacing_opt(__u64 want)
{
	return want > PACE_MAX_BPS ? PACE_UNLIMITED : (__u32)want;
}

#endif /* HBM_FLOW_H */
