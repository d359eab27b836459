/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* A socket's cgroup path, read in the kernel: the group it was created in
 * and that group's ancestors, root first. The sockops and iterator
 * programs that need a socket's groups (the walker's membership test, a
 * socket leaving its groups' flow counts, a client's gate) read it here;
 * the skb programs read theirs with bpf_skb_ancestor_cgroup_id. Read from
 * the kernel's cgroup, so it holds under a cgroup namespace too. Include
 * after vmlinux.h. */
#ifndef HBM_CGPATH_H
#define HBM_CGPATH_H

#include "hbm.h"

/* sk_cgroup is the cgroup sk was created in, its level (0: the root) in
 * *level; NULL when the socket names none. */
static __always_inline struct cgroup *sk_cgroup(struct sock *sk, int *level)
{
	struct cgroup *cg = BPF_CORE_READ(sk, sk_cgrp_data.cgroup);

	*level = cg ? BPF_CORE_READ(cg, level) : 0;
	return cg;
}

/* cgroup_level_id is the id of cg's ancestor at level i (0: the root; cg's
 * own at its level, level): 0 above cg or when unreadable, which ends a
 * walk up the path. */
static __always_inline __u64 cgroup_level_id(struct cgroup *cg, int level, int i)
{
	struct cgroup *anc = NULL;

	if (i > level)
		return 0;
	if (bpf_core_read(&anc, sizeof(anc), &cg->ancestors[i]) || !anc)
		return 0;
	return BPF_CORE_READ(anc, kn, id);
}

#endif
