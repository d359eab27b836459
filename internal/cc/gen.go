package cc

// The BPF DCTCP is compiled from bpf/dctcp.bpf.c against the kernel types in
// bpf/vmlinux/vmlinux.h (made by `make generate`, CO-RE relocated at load).
// BPF_CORE_CFLAGS comes from the Makefile.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -no-global-types -cflags "$BPF_CORE_CFLAGS" -target bpfel dctcp ../../bpf/dctcp.bpf.c
