//go:build ignore

// SPDX-License-Identifier: GPL-2.0
//
// Probe for `hbm check`: a hash map whose value holds a bpf_spin_lock (the
// map needs BTF describing the lock) and a cgroup_skb egress program that
// takes the lock, as HBM's per-cgroup virtual queue does.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct probe_vq {
	struct bpf_spin_lock lock;
	__u64 credit;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct probe_vq);
} probe_vqs SEC(".maps");

SEC("cgroup_skb/egress")
int probe_spin_lock(struct __sk_buff *skb)
{
	__u32 key = 0;
	struct probe_vq *vq = bpf_map_lookup_elem(&probe_vqs, &key);

	if (!vq)
		return 1;
	bpf_spin_lock(&vq->lock);
	vq->credit += skb->len;
	bpf_spin_unlock(&vq->lock);
	return 1;
}

char _license[] SEC("license") = "GPL";
