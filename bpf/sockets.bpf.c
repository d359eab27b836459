// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* HBM socket walker: a TCP socket iterator run by `hbm set` and `hbm unset`
 * in each network namespace the group's processes use.
 *
 * On set (hbm_release == 0) it turns on the sockops callback the assist of
 * direction hbm_dir needs (egress pacing: every ACK; ingress receive window:
 * every segment) for sockets connected before the limit existed, so the
 * assist reaches them too (sockops sees only connections established after
 * attach). On unset (hbm_release == 1) it lifts what this level's assist set
 * (the pacing cap, the receive-window clamp), so no socket keeps a limit that
 * is gone, idle ones included. Built on vmlinux.h (CO-RE):
 * it reads the socket's cgroup, which no uapi struct exposes. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "flow.h"

#define SOL_SOCKET 1
#define SOL_TCP 6
#define SOCK_OPS_CB_FLAGS_OPT 1008 /* TCP_BPF_SOCK_OPS_CB_FLAGS */

const volatile __u64 hbm_cgroup_id = 0;
const volatile __u32 hbm_cgroup_level = 0;
const volatile __u32 hbm_release = 0;
const volatile __u32 hbm_dir = HBM_DIR_EGRESS;

/* Counts for user space: sockets of the group seen, and changed. */
__u64 seen = 0;
__u64 changed = 0;

/* in_group reports whether the socket was created in the limited group or
 * below it: its cgroup's ancestor at the group's level is the group. */
static __always_inline int in_group(struct sock *sk)
{
	struct cgroup *cg = BPF_CORE_READ(sk, sk_cgrp_data.cgroup);
	struct cgroup *anc = NULL;
	__u32 lvl = hbm_cgroup_level & 0xff;
	int level;

	if (!cg)
		return 0;
	level = BPF_CORE_READ(cg, level);
	if (level < (int)lvl)
		return 0;
	if (bpf_core_read(&anc, sizeof(anc), &cg->ancestors[lvl]) || !anc)
		return 0;
	return BPF_CORE_READ(anc, kn, id) == hbm_cgroup_id;
}

/* release_rx lifts the receive-window clamp this level set, unless another
 * level still clamps. */
static __always_inline int release_rx(struct tcp_sock *tp)
{
	struct hbm_rx *rx = bpf_sk_storage_get(&hbm_rx_map, tp, 0, 0);
	__u32 val = RXWIN_MAX;

	if (!rx || !rx->level_Bps[hbm_cgroup_level & (HBM_PACE_LEVELS - 1)])
		return 0;
	rx->level_Bps[hbm_cgroup_level & (HBM_PACE_LEVELS - 1)] = 0;
	if (rx_clamped(rx) || !rx->clamp)
		return 0;
	if (!bpf_setsockopt(tp, SOL_TCP, TCP_WINDOW_CLAMP_OPT, &val, sizeof(val))) {
		rx->clamp = 0;
		changed++;
	}
	return 0;
}

SEC("iter/tcp")
int hbm_sockets(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	struct hbm_flow *f;
	struct tcp_sock *tp;
	__u64 want;
	__u32 val;
	int flags, want_flag;

	if (!skc)
		return 0;
	tp = bpf_skc_to_tcp_sock(skc);
	if (!tp || !in_group((struct sock *)tp))
		return 0;
	seen++;
	if (!hbm_release) {
		want_flag = hbm_dir == HBM_DIR_INGRESS ? BPF_SOCK_OPS_PARSE_ALL_HDR_OPT_CB_FLAG
						       : BPF_SOCK_OPS_RTT_CB_FLAG;
		flags = tp->bpf_sock_ops_cb_flags;
		if (flags & want_flag)
			return 0;
		flags |= want_flag;
		if (!bpf_setsockopt(tp, SOL_TCP, SOCK_OPS_CB_FLAGS_OPT, &flags, sizeof(flags)))
			changed++;
		return 0;
	}
	if (hbm_dir == HBM_DIR_INGRESS)
		return release_rx(tp);
	f = bpf_sk_storage_get(&hbm_flow_map, tp, 0, 0);
	if (!f || !f->level_Bps[hbm_cgroup_level & (HBM_PACE_LEVELS - 1)])
		return 0;
	f->level_Bps[hbm_cgroup_level & (HBM_PACE_LEVELS - 1)] = 0;
	want = flow_want(f);
	val = pacing_opt(want);
	if (!bpf_setsockopt(tp, SOL_SOCKET, SO_MAX_PACING_RATE_OPT, &val, sizeof(val))) {
		f->applied_Bps = want;
		changed++;
	}
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
