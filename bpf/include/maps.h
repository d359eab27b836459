/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The maps every HBM program shares; user space pins them under
 * /sys/fs/bpf/hbm/ and hands the pinned ones to each program it loads. */
#ifndef HBM_MAPS_H
#define HBM_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "hbm.h"
#include "flow.h"

#define HBM_MAX_LIMITS 16384

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, HBM_MAX_LIMITS);
	__type(key, struct hbm_key);
	__type(value, struct hbm_config);
} hbm_limit_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, HBM_MAX_LIMITS);
	__type(key, struct hbm_key);
	__type(value, struct hbm_queue);
} hbm_queue_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, HBM_MAX_LIMITS);
	__type(key, struct hbm_key);
	__type(value, struct hbm_stats);
} hbm_stats_map SEC(".maps");


#endif /* HBM_MAPS_H */
