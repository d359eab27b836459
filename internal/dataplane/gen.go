package dataplane

// The data plane is one BPF object compiled from bpf/hbm.bpf.c and embedded;
// bpf2go generates its typed objects and every shared struct and enum, so
// nothing in Go mirrors the C by hand. It is built on bpf/vmlinux/vmlinux.h
// (checked in; CO-RE relocates it on the running kernel). BPF_CORE_CFLAGS
// comes from the Makefile.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "$BPF_CORE_CFLAGS" -target bpfel -type hbm_key -type hbm_config -type hbm_queue -type hbm_stats -type hbm_sock -type hbm_walk -type hbm_flags -type hbm_dir -type hbm_prio hbm ../../bpf/hbm.bpf.c
