package cc

// bpf/dctcp/vmlinux.h holds the kernel's types, dumped from the running
// kernel's BTF; it is generated, not committed (a build machine without BTF
// keeps an existing copy). CO-RE relocations adapt the object to the kernel
// it is loaded on.
//go:generate sh -c "if [ -r /sys/kernel/btf/vmlinux ]; then bpftool btf dump file /sys/kernel/btf/vmlinux format c > ../../bpf/dctcp/vmlinux.h.tmp && mv ../../bpf/dctcp/vmlinux.h.tmp ../../bpf/dctcp/vmlinux.h; elif [ ! -f ../../bpf/dctcp/vmlinux.h ]; then echo 'no /sys/kernel/btf/vmlinux to generate bpf/dctcp/vmlinux.h from' >&2; exit 1; fi"
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -no-global-types -cflags "$BPF_CFLAGS" -target bpfel dctcp ../../bpf/dctcp.bpf.c -- -I../../bpf/dctcp
