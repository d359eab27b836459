package cgroup

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

// Level returns g's level in the whole cgroup hierarchy (the root group is
// 0), as the kernel counts it (struct cgroup's level) and as BPF programs
// see a socket's cgroup path (bpf_skb_ancestor_cgroup_id counts from the
// real root). Under a cgroup namespace the mount's root is not the real
// root, so a path's depth below the mount says nothing of it: the level is
// read by a small BPF cgroup iterator (iter/cgroup, one group, the program
// built here from the kernel's BTF: no object file) over g's directory.
func Level(g Group) (int, error) {
	f, err := os.Open(g.Dir)
	if err != nil {
		return 0, fmt.Errorf("open cgroup %s: %w", g.Dir, err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return 0, fmt.Errorf("stat cgroup %s: %w", g.Dir, err)
	}
	if g.ID != 0 && st.Ino != g.ID {
		return 0, fmt.Errorf("%s is cgroup id %d, not %d", g, st.Ino, g.ID)
	}
	prog, err := levelProgram()
	if err != nil {
		return 0, fmt.Errorf("cgroup level of %s: %w", g, err)
	}
	lvl, err := iterCgroup(prog, int(f.Fd()))
	if err != nil {
		return 0, fmt.Errorf("cgroup level of %s: %w", g, err)
	}
	return lvl, nil
}

var (
	levelOnce sync.Once
	levelProg *ebpf.Program
	levelErr  error
)

// levelProgram loads (once per process) the iterator program: for the
// group it is given, it writes cgrp->level (4 bytes) to the iterator.
func levelProgram() (*ebpf.Program, error) {
	levelOnce.Do(func() {
		spec, err := btf.LoadKernelSpec()
		if err != nil {
			levelErr = fmt.Errorf("kernel BTF: %w", err)
			return
		}
		var cg *btf.Struct
		if err := spec.TypeByName("cgroup", &cg); err != nil {
			levelErr = fmt.Errorf("kernel BTF: struct cgroup: %w", err)
			return
		}
		off := -1
		for _, m := range cg.Members {
			if m.Name == "level" && m.BitfieldSize == 0 && m.Offset%8 == 0 {
				off = int(m.Offset / 8)
			}
		}
		if off < 0 {
			levelErr = errors.New("kernel BTF: struct cgroup has no level")
			return
		}
		// ctx: struct bpf_iter__cgroup { bpf_iter_meta *meta; cgroup *cgroup; },
		// each in a u64 slot; meta's first field is the seq_file.
		insns := asm.Instructions{
			asm.Mov.Reg(asm.R6, asm.R1),
			asm.LoadMem(asm.R7, asm.R6, 8, asm.DWord), // ctx->cgroup
			asm.JEq.Imm(asm.R7, 0, "out"),             // NULL: the iteration's end
			asm.LoadMem(asm.R2, asm.R7, int16(off), asm.Word),
			asm.StoreMem(asm.RFP, -8, asm.R2, asm.Word),
			asm.LoadMem(asm.R1, asm.R6, 0, asm.DWord), // ctx->meta
			asm.LoadMem(asm.R1, asm.R1, 0, asm.DWord), // meta->seq
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -8),
			asm.Mov.Imm(asm.R3, 4),
			asm.FnSeqWrite.Call(),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
			asm.Return(),
		}
		levelProg, levelErr = ebpf.NewProgram(&ebpf.ProgramSpec{
			Name:         "hbm_cg_level",
			Type:         ebpf.Tracing,
			AttachType:   ebpf.AttachTraceIter,
			AttachTo:     "cgroup",
			License:      "GPL",
			Instructions: insns,
		})
		if levelErr != nil {
			levelErr = fmt.Errorf("load the cgroup iterator: %w", levelErr)
		}
	})
	return levelProg, levelErr
}

// bpfIterLinkInfoCgroup is union bpf_iter_link_info's cgroup member.
type bpfIterLinkInfoCgroup struct {
	Order    uint32 // BPF_CGROUP_ITER_SELF_ONLY
	CgroupFD uint32
	CgroupID uint64
}

const bpfCgroupIterSelfOnly = 1

// iterCgroup runs prog as an iterator over the one group cgroupFD and reads
// the level it writes. cilium/ebpf's AttachIter takes no cgroup, so the
// link is made with BPF_LINK_CREATE itself.
func iterCgroup(prog *ebpf.Program, cgroupFD int) (int, error) {
	info := bpfIterLinkInfoCgroup{Order: bpfCgroupIterSelfOnly, CgroupFD: uint32(cgroupFD)}
	var attr [64]byte // union bpf_attr's BPF_LINK_CREATE part, zero-padded
	*(*uint32)(unsafe.Pointer(&attr[0])) = uint32(prog.FD())
	*(*uint32)(unsafe.Pointer(&attr[8])) = unix.BPF_TRACE_ITER
	*(*uint64)(unsafe.Pointer(&attr[16])) = uint64(uintptr(unsafe.Pointer(&info)))
	*(*uint32)(unsafe.Pointer(&attr[24])) = uint32(unsafe.Sizeof(info))
	lfd, _, e := unix.Syscall(unix.SYS_BPF, unix.BPF_LINK_CREATE, uintptr(unsafe.Pointer(&attr[0])), unsafe.Sizeof(attr))
	if e != 0 {
		return 0, fmt.Errorf("create cgroup iterator link: %w", e)
	}
	defer unix.Close(int(lfd))
	var iattr [8]byte // link_fd, flags
	*(*uint32)(unsafe.Pointer(&iattr[0])) = uint32(lfd)
	ifd, _, e := unix.Syscall(unix.SYS_BPF, unix.BPF_ITER_CREATE, uintptr(unsafe.Pointer(&iattr[0])), unsafe.Sizeof(iattr))
	if e != 0 {
		return 0, fmt.Errorf("create cgroup iterator: %w", e)
	}
	it := os.NewFile(ifd, "cgroup-iter")
	defer it.Close()
	b, err := io.ReadAll(io.LimitReader(it, 64))
	if err != nil {
		return 0, fmt.Errorf("read cgroup iterator: %w", err)
	}
	if len(b) != 4 {
		return 0, fmt.Errorf("cgroup iterator wrote %d bytes, want 4", len(b))
	}
	return int(int32(*(*uint32)(unsafe.Pointer(&b[0])))), nil
}
