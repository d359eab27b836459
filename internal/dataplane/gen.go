package dataplane

// The BPF objects are compiled from bpf/ and embedded; BPF_CFLAGS comes from
// the Makefile (include paths, -O2 -g -Werror).
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "$BPF_CFLAGS" -target bpfel -type hbm_key -type hbm_config -type hbm_queue -type hbm_stats egress ../../bpf/egress.bpf.c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "$BPF_CFLAGS" -target bpfel ingress ../../bpf/ingress.bpf.c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "$BPF_CORE_CFLAGS" -target bpfel sockets ../../bpf/sockets.bpf.c
