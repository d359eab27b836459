// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* HBM ingress limiter: one instance per limited cgroup, attached to it with a
 * multi-attach cgroup link (the child's first, as on egress). It shares the
 * egress policy and virtual queue (policy.h, vqueue.h) under the key
 * (cgroup id, HBM_DIR_INGRESS). Ingress can only signal the sender: CE on
 * ECN-capable packets, drops past the drop thresholds (none with
 * HBM_F_NO_DROP, the incast-protection mode). */
#include "policy.h"
#include "rxwin.h"

/* Set by the loader before load: the cgroup this instance limits. */
const volatile __u64 hbm_cgroup_id = 0;
/* ... and its depth in the hierarchy (0 for the root group). */
const volatile __u32 hbm_cgroup_level = 0;

SEC("cgroup_skb/ingress")
int hbm_ingress(struct __sk_buff *skb)
{
	return hbm_police(skb, hbm_cgroup_id, HBM_DIR_INGRESS);
}

/* Receive-window assist (rxwin.h): clamps the group's receive windows to
 * its per-flow rate x RTT. */
SEC("sockops")
int hbm_rx_sockops(struct bpf_sock_ops *skops)
{
	return hbm_rxwin(skops, hbm_cgroup_id, hbm_cgroup_level);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
