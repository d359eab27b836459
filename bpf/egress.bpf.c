// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* HBM egress limiter: one instance per limited cgroup, attached to it with a
 * multi-attach cgroup link, so nested limits each run (the child's first).
 * The instance learns its group from a load-time constant, which keys the
 * shared maps. Loaded with the egress expected attach type so that it may
 * return the congestion code (values 2 and 3). */
#include "policy.h"

/* Set by the loader before load: the cgroup this instance limits. */
const volatile __u64 hbm_cgroup_id = 0;
/* ... and its depth in the hierarchy (0 for the root group). */
const volatile __u32 hbm_cgroup_level = 0;

SEC("cgroup_skb/egress")
int hbm_egress(struct __sk_buff *skb)
{
	return hbm_police(skb, hbm_cgroup_id, HBM_DIR_EGRESS);
}




SEC("sockops")
int hbm_sockops(struct bpf_sock_ops *skops)
{
	return hbm_pace(skops, hbm_cgroup_id, hbm_cgroup_level);
}
char LICENSE[] SEC("license") = "Dual BSD/GPL";
