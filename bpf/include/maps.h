/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Every map of HBM's data plane, in one place. User space pins them under
 * the pin directory (/sys/fs/bpf/hbm) and loads the programs once against
 * the pinned ones. Include after vmlinux.h and bpf_helpers.h. */
#ifndef HBM_MAPS_H
#define HBM_MAPS_H

#include "hbm.h"

/* What user space set, per (cgroup id, direction). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, HBM_MAX_LIMITS);
	__type(key, struct hbm_key);
	__type(value, struct hbm_config);
} hbm_limit_map SEC(".maps");

/* The virtual queue, per-flow share and counters of each limit. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, HBM_MAX_LIMITS);
	__type(key, struct hbm_key);
	__type(value, struct hbm_queue);
} hbm_queue_map SEC(".maps");

/* Egress state of each socket: its pacing want, fresh bursts, flow counts. */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct hbm_sock);
} hbm_flow_map SEC(".maps");

/* Ingress state of each receiving socket: its window want, holes, flow counts. */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct hbm_sock);
} hbm_rx_map SEC(".maps");

/* Where the assists changed sockets: (socket's cgroup, network namespace)
 * -> last time (ns). `hbm unset` walks these namespaces to lift what the
 * assist set (sockets.h), also when no process of the group is left in
 * them to name the namespace: a socket outlives its creator's presence
 * there (a listener's accepted sockets, fds passed on, threads that moved).
 * LRU: bounded; an entry is written only when an assist changes a socket. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, HBM_MAX_LIMITS);
	__type(key, struct hbm_netns_key);
	__type(value, __u64);
} hbm_netns_map SEC(".maps");

/* Listening ports -> the limited groups on their listener's path, learnt
 * from the SYN-ACKs the egress program sees (gate.h): the handshake gate's
 * sockops callback runs for a request socket, which names no cgroup. LRU:
 * bounded, and a stale entry only names groups whose limits are looked up
 * anew. Not pinned: it lives with the programs that fill it. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct hbm_listen_key);
	__type(value, struct hbm_listen);
} hbm_listen_map SEC(".maps");

/* Peers' RTTs, us, as their connections to limited groups measured them
 * (gate.h): the handshake gate never waits so briefly that the request
 * could expire before a far client's ACK. LRU: bounded; an unknown peer
 * gets a long enough wait. And, for a server its limited clients reach,
 * what they sent it per connection (pacing.h, admit_note). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct hbm_peer_key);
	__type(value, struct hbm_peer);
} hbm_peer_map SEC(".maps");

/* The kernel's tick length, measured (gate.h). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hbm_clock);
} hbm_clock_map SEC(".maps");

/* The socket walker's parameters and results (one entry). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hbm_walk);
} hbm_walk_map SEC(".maps");

#endif /* HBM_MAPS_H */
