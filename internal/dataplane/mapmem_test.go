package dataplane_test

import (
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/hbm-dev/hbm/internal/daemon"
	"github.com/hbm-dev/hbm/internal/dataplane"
	"github.com/hbm-dev/hbm/internal/testutil"
)

// mapMemBudget is the most kernel memory HBM's maps may take on a node of
// mapMemCPUs possible CPUs with every limit slot used (issue 25).
const (
	mapMemBudget = 64 << 20
	mapMemCPUs   = 256
)

// mapMem models what the kernel charges for map m (its memlock, fdinfo) on
// a machine of ncpu possible CPUs, with every entry used: Linux 6.x's
// htab_map_mem_usage and array_map_mem_usage. A preallocated hash holds
// max_entries elements of 48 bytes of header (struct htab_elem) plus key
// and value rounded to 8, one more per CPU (the extra element an update
// swaps in; not for LRU maps), 16-byte buckets (max_entries rounded to a
// power of 2), 8 per-CPU lock counters of 4 bytes and, for a per-CPU hash,
// a copy of each value per CPU. The struct bpf_htab (under 1 KiB) is left
// out. sk_storage is per socket (docs/design.md), not modelled: its fixed
// part (memlock) is taken as is, with no per-CPU part.
func mapMem(t *testing.T, info *ebpf.MapInfo, memlock uint64, ncpu int) (uint64, error) {
	t.Helper()
	r8 := func(n uint32) uint64 { return uint64(n+7) &^ 7 }
	cpus := uint64(ncpu)
	entries := uint64(info.MaxEntries)
	switch info.Type {
	case ebpf.Hash, ebpf.LRUHash, ebpf.PerCPUHash, ebpf.LRUCPUHash:
		if info.Flags&uint32(1) != 0 { // BPF_F_NO_PREALLOC: elements as used, + an llist node each
			t.Logf("%s: not preallocated: modelled full", info.Name)
		}
		percpu := info.Type == ebpf.PerCPUHash || info.Type == ebpf.LRUCPUHash
		lru := info.Type == ebpf.LRUHash || info.Type == ebpf.LRUCPUHash
		elem := 48 + r8(info.KeySize)
		if percpu {
			elem += 8 // a pointer to the per-CPU values
		} else {
			elem += r8(info.ValueSize)
		}
		n := entries
		if !percpu && !lru {
			n += cpus
		}
		u := 16*(uint64(1)<<bits.Len64(entries-1)) + 4*cpus*8 + elem*n
		switch {
		case percpu:
			u += r8(info.ValueSize) * cpus * n
		case !lru:
			u += 8 * cpus
		}
		return u, nil
	case ebpf.Array, ebpf.PerCPUArray:
		if info.Type == ebpf.PerCPUArray {
			return entries*8 + entries*r8(info.ValueSize)*cpus, nil
		}
		return entries * r8(info.ValueSize), nil
	case ebpf.SkStorage:
		return memlock, nil
	}
	return 0, fmt.Errorf("%s: no memory model for map type %v: add one (does it grow with the CPUs?)", info.Name, info.Type)
}

// TestMapMemory: every map HBM pins (the data plane's and the daemon's
// ownership record), with every one of its 65,536 limit slots filled, takes
// what the model says on this machine (the kernel's memlock, within 4 KiB a
// map), and at most 64 MiB in all on a 256-CPU node by the same model.
func TestMapMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: creates BPF maps")
	}
	testutil.RequireRoot(t)
	const pinDir = "/sys/fs/bpf/hbm-test-mapmem"
	os.RemoveAll(pinDir) // a crashed run's leftovers
	t.Cleanup(func() { os.RemoveAll(pinDir) })
	m, err := dataplane.Open(pinDir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	own, err := daemon.OpenOwned(pinDir)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	possible, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}

	ents, err := os.ReadDir(pinDir)
	if err != nil {
		t.Fatal(err)
	}
	var total, totalHere uint64
	var rows []string
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue // links/, progs/
		}
		mp, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, e.Name()), nil)
		if err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		defer mp.Close()
		info, err := mp.Info()
		if err != nil {
			t.Fatal(err)
		}
		// Every slot used: limits as many as the maps hold (fake group
		// ids; nothing is attached).
		if info.Type == ebpf.Hash || info.Type == ebpf.LRUHash {
			fill(t, mp, info)
		}
		if info, err = mp.Info(); err != nil {
			t.Fatal(err)
		}
		memlock, ok := info.Memlock()
		if !ok {
			testutil.Missing(t, "memlock in a map's fdinfo", fmt.Errorf("none for %s", e.Name()))
		}
		here, err := mapMem(t, info, memlock, possible)
		if err != nil {
			t.Fatal(err)
		}
		at, _ := mapMem(t, info, memlock, mapMemCPUs)
		if d := int64(memlock) - int64(here); d < 0 || d > 4096 {
			t.Errorf("%s (%v, key %d B, value %d B, %d entries): the kernel charges %d bytes on %d CPUs, the model %d",
				info.Name, info.Type, info.KeySize, info.ValueSize, info.MaxEntries, memlock, possible, here)
		}
		total += memlock + (at - here) // the kernel's figure, plus what more CPUs add
		totalHere += memlock
		rows = append(rows, fmt.Sprintf("%-18s %-10v key %3d value %4d entries %6d: %9d B here, %9d B on %d CPUs (%d B per CPU)",
			info.Name, info.Type, info.KeySize, info.ValueSize, info.MaxEntries, memlock, memlock+at-here, mapMemCPUs, (at-here)/uint64(mapMemCPUs-possible)))
	}
	t.Logf("maps with every slot used:\n%s\nin all %.1f MiB here (%d possible CPUs), %.2f MiB on %d CPUs",
		strings.Join(rows, "\n"), float64(totalHere)/(1<<20), possible, float64(total)/(1<<20), mapMemCPUs)
	if total > mapMemBudget {
		t.Errorf("HBM's maps take %.1f MiB on a %d-CPU node, want at most %d MiB", float64(total)/(1<<20), mapMemCPUs, mapMemBudget>>20)
	}

	// The DaemonSet's memory limit covers the maps, the daemon and the
	// socket storage with 20% to spare (docs/design.md, "Kernel memory").
	const (
		daemonRSS   = 64 << 20 // measured 45 MB with 250 pods (README)
		sockets     = 100000   // TCP sockets of limited groups, both directions limited
		socketBytes = 520      // measured: hbm_sock storage charged per socket and direction
	)
	need := float64(total) + daemonRSS + 2*sockets*socketBytes
	limit := daemonSetMemoryLimit(t)
	t.Logf("DaemonSet memory limit %.0f MiB; maps %.1f + daemon %d + %d sockets x 2 x %d B = %.1f MiB",
		float64(limit)/(1<<20), float64(total)/(1<<20), daemonRSS>>20, sockets, socketBytes, need/(1<<20))
	if float64(limit) < 1.2*need {
		t.Errorf("the DaemonSet's memory limit is %.0f MiB, want at least 1.2 x %.1f MiB", float64(limit)/(1<<20), need/(1<<20))
	}
}

// daemonSetMemoryLimit reads the hbm container's memory limit from
// deploy/kubernetes/daemonset.yaml.
func daemonSetMemoryLimit(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("../../deploy/kubernetes/daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(b, &ds); err != nil {
		t.Fatalf("daemonset.yaml: %v", err)
	}
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == "hbm" {
			if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
				return q.Value()
			}
		}
	}
	t.Fatal("daemonset.yaml: no memory limit on the hbm container")
	return 0
}

// fill writes distinct keys (zero values) into mp up to its max_entries.
func fill(t *testing.T, mp *ebpf.Map, info *ebpf.MapInfo) {
	t.Helper()
	key := make([]byte, info.KeySize)
	val := make([]byte, info.ValueSize)
	for i := uint32(0); i < info.MaxEntries; i++ {
		for b := 0; b < 4 && b < len(key); b++ {
			key[b] = byte((i + 1) >> (8 * b))
		}
		if len(key) > 8 {
			key[8] = 1 // hbm_key.dir: egress
		}
		if err := mp.Update(key, val, ebpf.UpdateAny); err != nil {
			t.Fatalf("%s: entry %d of %d: %v", info.Name, i+1, info.MaxEntries, err)
		}
	}
}
