package dataplane

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/cilium/ebpf/btf"
)

var (
	u32 = &btf.Int{Name: "__u32", Size: 4}
	u64 = &btf.Int{Name: "__u64", Size: 8}
)

func member(name string, t btf.Type, off uint32) btf.Member {
	return btf.Member{Name: name, Type: t, Offset: btf.Bits(off * 8)}
}

// TestCopyPlan: members are carried by name (moved, grown arrays, nested
// structs); renamed, resized or new members start at zero; locks never
// move.
func TestCopyPlan(t *testing.T) {
	lock := &btf.Struct{Name: "bpf_spin_lock", Size: 4, Members: []btf.Member{member("val", u32, 0)}}
	oldSt := &btf.Struct{Name: "st", Size: 8, Members: []btf.Member{member("bytes", u64, 0)}}
	newSt := &btf.Struct{Name: "st", Size: 16, Members: []btf.Member{member("bytes", u64, 0), member("gated", u64, 8)}}
	old := &btf.Struct{Name: "v", Size: 40, Members: []btf.Member{
		member("lock", lock, 0),
		member("a", u32, 4),
		member("rpc_Bps", u64, 8),
		member("seen", &btf.Array{Type: u32, Nelems: 2}, 16),
		member("st", oldSt, 24),
		member("narrow", u32, 32),
	}}
	nw := &btf.Struct{Name: "v", Size: 64, Members: []btf.Member{
		member("lock", lock, 0),
		member("xfer_Bps", u64, 8), // renamed: its meaning changed
		member("st", newSt, 16),    // moved and grown
		member("seen", &btf.Array{Type: u32, Nelems: 4}, 32),
		member("a", u32, 48), // moved
		member("narrow", u64, 56),
	}}
	from := make([]byte, 40)
	for i := range from {
		from[i] = byte(i + 1)
	}
	to := make([]byte, 64)
	apply(copyPlan(old, nw), from, to)
	want := make([]byte, 64)
	copy(want[16:24], from[24:32]) // st.bytes
	copy(want[32:40], from[16:24]) // seen[0..1]; seen[2..3] zero
	copy(want[48:52], from[4:8])   // a
	if !bytes.Equal(to, want) {
		t.Errorf("carried\n%v\nwant\n%v", to, want)
	}
	if layoutOf(old) == layoutOf(nw) {
		t.Error("layouts that differ describe the same")
	}
	renamed := *old
	renamed.Members = append([]btf.Member(nil), old.Members...)
	renamed.Members[2].Name = "xfer_Bps"
	if layoutOf(old) == layoutOf(&renamed) {
		t.Error("a member renamed within the same size does not change the layout")
	}
}

// TestCopyPlanIdentity: this build's own layouts carry every byte but the
// queue's lock.
func TestCopyPlanIdentity(t *testing.T) {
	spec, err := loadHbm()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range programMaps() {
		ms := spec.Maps[name]
		if ms.Value == nil {
			continue
		}
		from := bytes.Repeat([]byte{0xa5}, int(ms.ValueSize))
		to := make([]byte, ms.ValueSize)
		apply(copyPlan(ms.Value, ms.Value), from, to)
		n := bytes.Count(to, []byte{0xa5})
		want := int(ms.ValueSize)
		if name == hbmMapHbmQueueMap {
			want -= 4 // the spin lock
		}
		// Padding members (named pad) are carried too; unnamed padding is not.
		if n > want || n < want-16 {
			t.Errorf("%s: %d of %d value bytes carried onto itself, want about %d", name, n, ms.ValueSize, want)
		}
		if layoutOf(ms.Value) != layoutOf(ms.Value) {
			t.Errorf("%s: layout not stable", name)
		}
	}
}

// TestRemakeConfig: a carried configuration is made again from its limit;
// thresholds a layout lacked get their defaults.
func TestRemakeConfig(t *testing.T) {
	l := Limit{Rate: 100e6}
	c, err := config(l)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := binary.Append(nil, binary.NativeEndian, &c)
	if got := remakeConfig(b); !bytes.Equal(got, b) {
		t.Errorf("a configuration of this layout changed when made again")
	}
	c.PaceTargetNs = 0 // a member an older layout lacked
	c.MaxBacklogNs = 0
	b0, _ := binary.Append(nil, binary.NativeEndian, &c)
	if got := remakeConfig(b0); !bytes.Equal(got, b) {
		t.Errorf("thresholds an older layout lacked did not get their defaults")
	}
}
