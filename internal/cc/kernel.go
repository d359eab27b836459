package cc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// What the kernel offers, read from procfs. Overridable in tests.
var (
	procAvailable = "/proc/sys/net/ipv4/tcp_available_congestion_control"
	procAllowed   = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"
	procDefault   = "/proc/sys/net/ipv4/tcp_congestion_control"
	modulesDir    = "/lib/modules"
)

// readWords reads a procfs file holding space-separated words.
func readWords(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(b)), nil
}

// Available returns the congestion controls registered in the kernel
// (net.ipv4.tcp_available_congestion_control).
func Available() ([]string, error) {
	w, err := readWords(procAvailable)
	if err != nil {
		return nil, fmt.Errorf("read available congestion controls: %w", err)
	}
	return w, nil
}

func registered(name string) (bool, error) {
	avail, err := Available()
	if err != nil {
		return false, err
	}
	for _, a := range avail {
		if a == name {
			return true, nil
		}
	}
	return false, nil
}

// nativeModule returns the path of a kernel module providing congestion
// control name (tcp_<name>.ko, as modules.dep or modules.builtin list it),
// or "" if the running kernel has none.
func nativeModule(name string) string {
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return ""
	}
	release := unix.ByteSliceToString(uts.Release[:])
	want := "tcp_" + name + ".ko"
	for _, f := range []string{"modules.builtin", "modules.dep"} {
		file, err := os.Open(filepath.Join(modulesDir, release, f))
		if err != nil {
			continue
		}
		s := bufio.NewScanner(file)
		s.Buffer(make([]byte, 64*1024), 1024*1024)
		for s.Scan() {
			mod, _, _ := strings.Cut(s.Text(), ":")
			base := filepath.Base(mod)
			if base == want || strings.HasPrefix(base, want+".") { // .ko.xz, .ko.zst...
				file.Close()
				return mod
			}
		}
		file.Close()
	}
	return ""
}

// Raw BPF object information, for the fields the library does not expose:
// the map a struct_ops link holds and the kernel value type of a struct_ops map.

const bpfObjGetInfoByFD = 15 // BPF_OBJ_GET_INFO_BY_FD

func objInfo(fd int, info []byte) error {
	attr := struct {
		fd   uint32
		len  uint32
		info uint64
	}{uint32(fd), uint32(len(info)), uint64(uintptr(unsafe.Pointer(&info[0])))}
	_, _, errno := unix.Syscall(unix.SYS_BPF, bpfObjGetInfoByFD, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if errno != 0 {
		return errno
	}
	return nil
}

// structOpsLinkMap returns the id of the map a struct_ops link holds, 0 once
// the link was detached (struct bpf_link_info: type, id, prog_id, then the
// 8-byte aligned union whose struct_ops member starts with map_id).
func structOpsLinkMap(fd int) (linkType uint32, mapID uint32, err error) {
	var info [64]byte
	if err := objInfo(fd, info[:]); err != nil {
		return 0, 0, fmt.Errorf("link info: %w", err)
	}
	return nativeUint32(info[0:]), nativeUint32(info[16:]), nil
}

// mapVmlinuxValueType returns btf_vmlinux_value_type_id of a map (struct
// bpf_map_info: type, id, key_size, value_size, max_entries, map_flags,
// name[16], ifindex, btf_vmlinux_value_type_id).
func mapVmlinuxValueType(fd int) (uint32, error) {
	var info [88]byte
	if err := objInfo(fd, info[:]); err != nil {
		return 0, fmt.Errorf("map info: %w", err)
	}
	return nativeUint32(info[44:]), nil
}

func nativeUint32(b []byte) uint32 { return *(*uint32)(unsafe.Pointer(&b[0])) }

// tcpOpsLayout locates fields of the kernel value of a tcp_congestion_ops
// struct_ops map (struct bpf_struct_ops_tcp_congestion_ops), from kernel BTF.
type tcpOpsLayout struct {
	typeID  btf.TypeID
	size    uint32
	nameOff uint32 // offset of data.name
	nameLen uint32
}

var errNoTCPStructOps = errors.New("kernel BTF has no bpf_struct_ops_tcp_congestion_ops")

func loadTCPOpsLayout() (*tcpOpsLayout, error) {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return nil, fmt.Errorf("kernel BTF: %w", err)
	}
	var value *btf.Struct
	if err := spec.TypeByName("bpf_struct_ops_tcp_congestion_ops", &value); err != nil {
		return nil, errNoTCPStructOps
	}
	id, err := spec.TypeID(value)
	if err != nil {
		return nil, err
	}
	l := &tcpOpsLayout{typeID: id, size: value.Size}
	for _, m := range value.Members {
		if m.Name != "data" {
			continue
		}
		ops, ok := btf.As[*btf.Struct](m.Type)
		if !ok {
			break
		}
		for _, om := range ops.Members {
			if om.Name == "name" {
				arr, ok := btf.As[*btf.Array](om.Type)
				if !ok {
					break
				}
				l.nameOff = m.Offset.Bytes() + om.Offset.Bytes()
				l.nameLen = arr.Nelems
				return l, nil
			}
		}
	}
	return nil, fmt.Errorf("kernel BTF: bpf_struct_ops_tcp_congestion_ops has no data.name")
}

// bpfCA is a BPF congestion control (a tcp_congestion_ops struct_ops map).
type bpfCA struct {
	Name       string
	MapID      ebpf.MapID
	LinkID     link.ID // the struct_ops link holding it, 0 if none
	Registered bool    // linked, or a legacy map registered by update
}

// bpfCongestionControls lists the tcp_congestion_ops struct_ops maps of the
// system and whether each is registered. Needs CAP_SYS_ADMIN.
func bpfCongestionControls(layout *tcpOpsLayout) ([]bpfCA, error) {
	linked := map[ebpf.MapID]link.ID{}
	it := new(link.Iterator)
	defer it.Close()
	for it.Next() {
		fd, ok := it.Link.(interface{ FD() int })
		if !ok {
			continue
		}
		typ, mapID, err := structOpsLinkMap(fd.FD())
		if err == nil && typ == uint32(link.StructOpsType) && mapID != 0 {
			linked[ebpf.MapID(mapID)] = it.ID
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("iterate links: %w", err)
	}

	var out []bpfCA
	var id ebpf.MapID
	for {
		next, err := ebpf.MapGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("iterate maps: %w", err)
		}
		id = next
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			continue // gone meanwhile
		}
		ca, ok := tcpCAOfMap(m, id, layout)
		m.Close()
		if !ok {
			continue
		}
		if lid, ok := linked[id]; ok {
			ca.LinkID = lid
			ca.Registered = true
		}
		out = append(out, ca)
	}
	return out, nil
}

// tcpCAOfMap reads name and state of a tcp_congestion_ops struct_ops map.
func tcpCAOfMap(m *ebpf.Map, id ebpf.MapID, layout *tcpOpsLayout) (bpfCA, bool) {
	if m.Type() != ebpf.StructOpsMap || m.ValueSize() != layout.size {
		return bpfCA{}, false
	}
	vt, err := mapVmlinuxValueType(m.FD())
	if err != nil || btf.TypeID(vt) != layout.typeID {
		return bpfCA{}, false
	}
	value := make([]byte, layout.size)
	if err := m.Lookup(uint32(0), value); err != nil {
		return bpfCA{}, false
	}
	name := value[layout.nameOff : layout.nameOff+layout.nameLen]
	if i := bytes.IndexByte(name, 0); i >= 0 {
		name = name[:i]
	}
	// struct bpf_struct_ops_common_value { refcount_t refcnt; enum state; }:
	// BPF_STRUCT_OPS_STATE_INUSE (1) is a legacy (non-link) map registered
	// by its update.
	state := nativeUint32(value[4:])
	return bpfCA{Name: string(name), MapID: id, Registered: state == 1}, true
}
