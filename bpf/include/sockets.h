/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The socket walker: a TCP socket iterator `hbm set` and `hbm unset` run in
 * each network namespace a group's processes use, with its parameters in
 * hbm_walk_map (one program, loaded once, for every group).
 *
 * On set (release 0) it turns on the sockops callback the assist of the
 * direction needs (egress pacing: every ACK received; ingress window: every segment sent)
 * for sockets connected before the limit, so the assist reaches them too
 * (sockops sees only connections established after attach). On unset
 * (release 1) it lifts what the assist set (the pacing cap, the window
 * clamp), so no socket keeps a limit that is gone, idle ones included.
 * Membership is read from the socket's cgroup path (cgpath.h). */
#ifndef HBM_SOCKETS_H
#define HBM_SOCKETS_H

#include "assist.h"
#include "cgpath.h"

/* in_group reports whether the socket was created in group id or below it. */
static __always_inline int in_group(struct sock *sk, __u64 id)
{
	struct cgroup *cg;
	__u64 lvl_id;
	int level, i;

	cg = sk_cgroup(sk, &level);
	if (!cg)
		return 0;
	for (i = 0; i < HBM_MAX_LEVELS; i++) {
		lvl_id = cgroup_level_id(cg, level, i);
		if (!lvl_id)
			return 0;
		if (lvl_id == id)
			return 1;
	}
	return 0;
}

static __always_inline int hbm_walk(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	struct hbm_walk *w;
	struct hbm_sock *s;
	struct tcp_sock *tp;
	__u32 zero = 0;
	int flags, want_flag;

	w = bpf_map_lookup_elem(&hbm_walk_map, &zero);
	if (!skc || !w)
		return 0;
	tp = bpf_skc_to_tcp_sock(skc);
	if (!tp || !in_group((struct sock *)tp, w->cgroup_id))
		return 0;
	w->seen++;
	if (!w->release) {
		/* egress: every ACK (pacing) and the socket's end (it
		 * leaves its groups' flow counts, pacing.h) */
		want_flag = w->dir == HBM_DIR_INGRESS ? BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG
						      : BPF_SOCK_OPS_RTT_CB_FLAG | BPF_SOCK_OPS_STATE_CB_FLAG;
		flags = tp->bpf_sock_ops_cb_flags;
		if ((flags & want_flag) == want_flag)
			return 0;
		flags |= want_flag;
		if (!bpf_setsockopt(tp, SOL_TCP, SOCK_OPS_CB_FLAGS_OPT, &flags, sizeof(flags)))
			w->changed++;
		return 0;
	}
	if (w->dir == HBM_DIR_INGRESS) {
		s = bpf_sk_storage_get(&hbm_rx_map, tp, 0, 0);
		if (!s)
			return 0;
		s->want_Bps = 0;
		w->changed += clamp_lift(tp, s);
		return 0;
	}
	s = bpf_sk_storage_get(&hbm_flow_map, tp, 0, 0);
	if (!s)
		return 0;
	s->want_Bps = 0;
	s->burst = 0;
	s->room_segs = 0;
	s->armed = 0;
	w->changed += pace_set(tp, tp, s, 0) | cwnd_set(tp, tp, s, 0);
	return 0;
}

#endif /* HBM_SOCKETS_H */
