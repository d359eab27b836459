package probe

// The spin lock probe. BPF_CFLAGS comes from the Makefile; the trailing -I
// lets a bare `go generate` find <asm/types.h> on Debian x86-64 as well
// (clang ignores include directories that do not exist).
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cflags "$BPF_CFLAGS" -target bpfel spinlock spinlock.bpf.c -- -I/usr/include/x86_64-linux-gnu
