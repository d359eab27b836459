package dataplane

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

// Layouts. Every map the programs use carries the BTF of its key and value
// (bpf2go's object has it; the kernel keeps it with the map), so what a
// pinned map holds can be read without the build that made it: a layout is
// its BTF, and a value is carried from one layout to another member by
// member, by name (copyPlan). That makes the upgrade (upgrade.go) generic:
// it needs no knowledge of the layout it upgrades from, and an older build
// can carry a newer build's state back the same way.

// mapBTF returns the BTF key and value types the kernel holds for m (nil,
// nil when it has none). cilium/ebpf's MapInfo has the BTF id but not the
// type ids, so bpf_map_info is read here.
func mapBTF(m *ebpf.Map) (key, value btf.Type, err error) {
	var info [256]byte // struct bpf_map_info, zero tail
	attr := struct {
		fd, n uint32
		info  uint64
	}{uint32(m.FD()), uint32(len(info)), uint64(uintptr(unsafe.Pointer(&info[0])))}
	_, _, e := unix.Syscall(unix.SYS_BPF, unix.BPF_OBJ_GET_INFO_BY_FD, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	runtime.KeepAlive(&info)
	if e != 0 {
		return nil, nil, fmt.Errorf("map info: %w", e)
	}
	// bpf_map_info: btf_id at 64, btf_key_type_id at 68, btf_value_type_id at 72.
	id := binary.NativeEndian.Uint32(info[64:])
	kid, vid := binary.NativeEndian.Uint32(info[68:]), binary.NativeEndian.Uint32(info[72:])
	if id == 0 {
		return nil, nil, nil
	}
	spec, err := btfSpec(btf.ID(id))
	if err != nil {
		return nil, nil, err
	}
	if kid != 0 {
		if key, err = spec.TypeByID(btf.TypeID(kid)); err != nil {
			return nil, nil, err
		}
	}
	if vid != 0 {
		if value, err = spec.TypeByID(btf.TypeID(vid)); err != nil {
			return nil, nil, err
		}
	}
	return key, value, nil
}

var (
	btfMu    sync.Mutex
	btfSpecs = map[btf.ID]*btf.Spec{}
)

// btfSpec reads BTF object id, once per process: every map of one BPF
// object shares its BTF.
func btfSpec(id btf.ID) (*btf.Spec, error) {
	btfMu.Lock()
	defer btfMu.Unlock()
	if spec, ok := btfSpecs[id]; ok {
		return spec, nil
	}
	h, err := btf.NewHandleFromID(id)
	if err != nil {
		return nil, fmt.Errorf("map BTF %d: %w", id, err)
	}
	defer h.Close()
	spec, err := h.Spec(nil)
	if err != nil {
		return nil, fmt.Errorf("map BTF %d: %w", id, err)
	}
	btfSpecs[id] = spec
	return spec, nil
}

// layoutOf describes a type's layout: member names, offsets, sizes and
// kinds, recursively. Two maps whose keys and values describe the same hold
// the same layout; the names of types and enum values do not count.
func layoutOf(t btf.Type) string {
	var b strings.Builder
	describeType(&b, t, 0)
	return b.String()
}

func describeType(b *strings.Builder, t btf.Type, depth int) {
	if depth > 16 {
		b.WriteString("...")
		return
	}
	switch v := btf.UnderlyingType(t).(type) {
	case *btf.Int:
		fmt.Fprintf(b, "i%d", v.Size)
	case *btf.Enum:
		fmt.Fprintf(b, "e%d", v.Size)
	case *btf.Float:
		fmt.Fprintf(b, "f%d", v.Size)
	case *btf.Pointer:
		b.WriteString("p")
	case *btf.Array:
		fmt.Fprintf(b, "[%d]", v.Nelems)
		describeType(b, v.Type, depth+1)
	case *btf.Struct:
		if special(v.Name) {
			fmt.Fprintf(b, "%s", v.Name)
			return
		}
		describeMembers(b, "s", v.Size, v.Members, depth)
	case *btf.Union:
		describeMembers(b, "u", v.Size, v.Members, depth)
	case nil:
		b.WriteString("?")
	default:
		fmt.Fprintf(b, "%T", v)
	}
}

func describeMembers(b *strings.Builder, kind string, size uint32, ms []btf.Member, depth int) {
	fmt.Fprintf(b, "%s%d{", kind, size)
	for _, m := range ms {
		fmt.Fprintf(b, "%s@%d", m.Name, m.Offset)
		if m.BitfieldSize != 0 {
			fmt.Fprintf(b, ":%d", m.BitfieldSize)
		}
		b.WriteByte('=')
		describeType(b, m.Type, depth+1)
		b.WriteByte(',')
	}
	b.WriteByte('}')
}

// special kernel types in map values: never copied (a lock, a timer, ...),
// and a value holding one is written by its owner only.
func special(name string) bool {
	return strings.HasPrefix(name, "bpf_spin_lock") || strings.HasPrefix(name, "bpf_timer") ||
		strings.HasPrefix(name, "bpf_list_") || strings.HasPrefix(name, "bpf_rb_") ||
		strings.HasPrefix(name, "bpf_refcount") || strings.HasPrefix(name, "bpf_wq")
}

// sameLayout reports whether the pinned map m holds what spec describes:
// cilium/ebpf's check (type, sizes, flags), then the BTF layout of key and
// value, which catches a member renamed or moved within the same size (a
// meaning changed: hbm_sock's rpc_Bps became xfer_Bps). A map or spec
// without BTF is judged by sizes alone. why says what differs.
func sameLayout(m *ebpf.Map, spec *ebpf.MapSpec) (same bool, why string, err error) {
	if err := spec.Compatible(m); err != nil {
		return false, strings.TrimSuffix(err.Error(), ": "+ebpf.ErrMapIncompatible.Error()), nil
	}
	if spec.Key == nil && spec.Value == nil {
		return true, "", nil
	}
	k, v, err := mapBTF(m)
	if err != nil {
		return false, "", err
	}
	if k == nil && v == nil {
		return true, "", nil
	}
	if spec.Key != nil && k != nil && layoutOf(k) != layoutOf(spec.Key) {
		return false, "key members differ", nil
	}
	if spec.Value != nil && v != nil && layoutOf(v) != layoutOf(spec.Value) {
		return false, "value members differ", nil
	}
	return true, "", nil
}

// copyOp copies size bytes at src of a value of one layout to dst of
// another.
type copyOp struct{ src, dst, size uint32 }

// copyPlan is how a value of layout from is carried to layout to: every
// member of to that from has under the same name (recursively through
// structs; arrays element by element, the shorter one's length), when both
// are integers, enums or floats of one size; any other member of to starts
// at zero. Locks, timers and other special kernel types are never copied.
// The contract this asks of the BPF code: a member whose meaning changes
// is renamed.
func copyPlan(from, to btf.Type) []copyOp {
	var ops []copyOp
	planAt(from, to, 0, 0, &ops, 0)
	return ops
}

func planAt(from, to btf.Type, src, dst uint32, ops *[]copyOp, depth int) {
	if depth > 16 {
		return
	}
	f, t := btf.UnderlyingType(from), btf.UnderlyingType(to)
	if fs, ok := scalarSize(f); ok {
		if ts, ok := scalarSize(t); ok && fs == ts {
			*ops = append(*ops, copyOp{src, dst, ts})
		}
		return
	}
	switch tv := t.(type) {
	case *btf.Struct:
		fv, ok := f.(*btf.Struct)
		if !ok || special(tv.Name) || special(fv.Name) {
			return
		}
		for _, tm := range tv.Members {
			if tm.Name == "" || tm.BitfieldSize != 0 || tm.Offset%8 != 0 {
				continue
			}
			for _, fm := range fv.Members {
				if fm.Name == tm.Name && fm.BitfieldSize == 0 && fm.Offset%8 == 0 {
					planAt(fm.Type, tm.Type, src+uint32(fm.Offset/8), dst+uint32(tm.Offset/8), ops, depth+1)
					break
				}
			}
		}
	case *btf.Array:
		fv, ok := f.(*btf.Array)
		if !ok {
			return
		}
		fsz, err1 := btf.Sizeof(fv.Type)
		tsz, err2 := btf.Sizeof(tv.Type)
		if err1 != nil || err2 != nil {
			return
		}
		for i := uint32(0); i < min(fv.Nelems, tv.Nelems); i++ {
			planAt(fv.Type, tv.Type, src+i*uint32(fsz), dst+i*uint32(tsz), ops, depth+1)
		}
	}
}

// scalarSize is the size of an integer, enum or float type.
func scalarSize(t btf.Type) (uint32, bool) {
	switch v := t.(type) {
	case *btf.Int:
		return v.Size, true
	case *btf.Enum:
		return v.Size, true
	case *btf.Float:
		return v.Size, true
	}
	return 0, false
}

// apply carries from (a value of the plan's source layout) into to.
func apply(ops []copyOp, from, to []byte) {
	for _, op := range ops {
		if int(op.src+op.size) <= len(from) && int(op.dst+op.size) <= len(to) {
			copy(to[op.dst:op.dst+op.size], from[op.src:op.src+op.size])
		}
	}
}

// carrier carries the entries of a map of one layout to another.
type carrier struct {
	key, value   []copyOp
	keyN, valueN int // the sizes of the new layout
}

// newCarrier plans carrying from's entries (a pinned map) into the layout
// of spec. Without BTF on either side only an identical size is carried,
// byte for byte.
func newCarrier(from *ebpf.Map, spec *ebpf.MapSpec) (*carrier, error) {
	c := &carrier{keyN: int(spec.KeySize), valueN: int(spec.ValueSize)}
	k, v, err := mapBTF(from)
	if err != nil {
		return nil, err
	}
	c.key, err = sidePlan(k, spec.Key, from.KeySize(), spec.KeySize, "key")
	if err != nil {
		return nil, err
	}
	c.value, err = sidePlan(v, spec.Value, from.ValueSize(), spec.ValueSize, "value")
	if err != nil {
		return nil, err
	}
	return c, nil
}

func sidePlan(from, to btf.Type, fromN, toN uint32, what string) ([]copyOp, error) {
	if from != nil && to != nil {
		return copyPlan(from, to), nil
	}
	if fromN == toN {
		return []copyOp{{0, 0, toN}}, nil
	}
	return nil, fmt.Errorf("%s of %d bytes cannot be carried to %d bytes without BTF", what, fromN, toN)
}

// each calls fn with every entry of from, carried to the new layout.
func (c *carrier) each(from *ebpf.Map, fn func(k, v []byte) error) error {
	var ok, ov []byte
	it := from.Iterate()
	for it.Next(&ok, &ov) {
		k, v := make([]byte, c.keyN), make([]byte, c.valueN)
		apply(c.key, ok, k)
		apply(c.value, ov, v)
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return it.Err()
}
