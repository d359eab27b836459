// Package cc ships TCP congestion controls written in BPF (struct_ops
// tcp_congestion_ops) with HBM: today DCTCP (RFC 8257), for kernels built
// without tcp_dctcp.
//
// Install loads bpf/dctcp.bpf.c, registers it under the name "dctcp" through
// a struct_ops BPF link and pins that link in bpffs (PinDir/dctcp), so the
// registration outlives the process; Remove unpins and releases it. Sockets
// keep using a removed congestion control until they close (they hold a
// reference on it); new ones can no longer select it.
//
// Sockets finds the sockets that use dctcp and reads their DCTCP state
// (alpha, the CE state) with a BPF socket iterator.
package cc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// DCTCP is the name HBM's BPF DCTCP registers under.
const DCTCP = "dctcp"

// BPFFS is the BPF filesystem mount point; PinDir holds one pinned struct_ops
// link per congestion control HBM installed, named after it.
var (
	BPFFS  = "/sys/fs/bpf"
	PinDir = "/sys/fs/bpf/hbm/cc"
)

var (
	// ErrNotRoot: installing or inspecting BPF congestion controls needs
	// root (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN for bpffs and object ids).
	ErrNotRoot = errors.New("needs root (CAP_BPF, CAP_NET_ADMIN and CAP_SYS_ADMIN)")
	// ErrNoStructOps: the kernel cannot run TCP congestion controls written
	// in BPF (no BTF, no struct_ops, or no tcp_congestion_ops support).
	ErrNoStructOps = errors.New("kernel cannot register BPF TCP congestion controls (needs BTF, CONFIG_BPF_JIT and struct_ops tcp_congestion_ops)")
	// ErrNameTaken: a congestion control of that name exists that HBM did
	// not install and that is not the kernel's own.
	ErrNameTaken = errors.New("congestion control name taken")
	// ErrNotOurs: Remove was asked for a congestion control HBM did not install.
	ErrNotOurs = errors.New("not installed by HBM")
	// ErrIsDefault: Remove was asked for the default congestion control of
	// this network namespace (net.ipv4.tcp_congestion_control).
	ErrIsDefault = errors.New("is the default congestion control")
	// ErrUnknown: HBM ships no congestion control of that name.
	ErrUnknown = errors.New("unknown congestion control")
)

// Names lists the congestion controls HBM can install.
func Names() []string { return []string{DCTCP} }

func checkName(name string) error {
	if !slices.Contains(Names(), name) {
		return fmt.Errorf("%w %q (HBM ships: %s)", ErrUnknown, name, strings.Join(Names(), ", "))
	}
	return nil
}

func pinPath(name string) string { return filepath.Join(PinDir, name) }

func requireRoot() error {
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	return nil
}

// Outcome says what Install did.
type Outcome int

const (
	// Installed: HBM's BPF congestion control was registered now.
	Installed Outcome = iota
	// AlreadyInstalled: HBM's was registered before; nothing changed.
	AlreadyInstalled
	// NativePresent: the kernel has its own (registered, built in or as a
	// module); HBM left it alone and installed nothing.
	NativePresent
)

func (o Outcome) String() string {
	switch o {
	case Installed:
		return "installed"
	case AlreadyInstalled:
		return "already installed"
	case NativePresent:
		return "native"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// InstallResult reports an Install.
type InstallResult struct {
	Name    string
	Outcome Outcome
	Detail  string // human-readable: what was found or done
	Pin     string // pinned link, for Installed and AlreadyInstalled
	LinkID  link.ID
	MapID   ebpf.MapID
}

// state is what the system holds for one congestion control name.
type state struct {
	registered bool   // listed in tcp_available_congestion_control
	ours       *ourCA // HBM's pinned link, nil if none
	foreign    []bpfCA
}

// ourCA is HBM's pinned link for a congestion control.
type ourCA struct {
	pin     string
	linkID  link.ID
	mapID   ebpf.MapID
	healthy bool   // the link holds a map that registered the name
	problem string // why not healthy
}

// inspect gathers the state of name. Needs root and the bpffs mounted.
func inspect(name string, layout *tcpOpsLayout) (*state, error) {
	st := &state{}
	var err error
	if st.registered, err = registered(name); err != nil {
		return nil, err
	}
	cas, err := bpfCongestionControls(layout)
	if err != nil {
		return nil, err
	}
	if _, err := os.Lstat(pinPath(name)); err == nil {
		st.ours = inspectPin(pinPath(name), name, cas, st.registered)
	}
	for _, ca := range cas {
		if ca.Name != name || !ca.Registered {
			continue
		}
		if st.ours != nil && ca.MapID == st.ours.mapID {
			continue
		}
		st.foreign = append(st.foreign, ca)
	}
	return st, nil
}

func inspectPin(path, name string, cas []bpfCA, registered bool) *ourCA {
	o := &ourCA{pin: path}
	l, err := link.LoadPinnedLink(path, nil)
	if err != nil {
		o.problem = fmt.Sprintf("pin %s is not a usable link: %v", path, err)
		return o
	}
	defer l.Close()
	if info, err := l.Info(); err == nil {
		o.linkID = info.ID
	}
	fd, ok := l.(interface{ FD() int })
	if !ok {
		o.problem = "pinned link has no file descriptor"
		return o
	}
	typ, mapID, err := structOpsLinkMap(fd.FD())
	switch {
	case err != nil:
		o.problem = err.Error()
		return o
	case typ != uint32(link.StructOpsType):
		o.problem = fmt.Sprintf("pin %s is not a struct_ops link", path)
		return o
	case mapID == 0:
		o.problem = "link was detached"
		return o
	}
	o.mapID = ebpf.MapID(mapID)
	for _, ca := range cas {
		if ca.MapID == o.mapID {
			if ca.Name != name {
				o.problem = fmt.Sprintf("link holds congestion control %q", ca.Name)
				return o
			}
			if !registered {
				o.problem = "not registered in the kernel"
				return o
			}
			o.healthy = true
			return o
		}
	}
	o.problem = fmt.Sprintf("map %d of the link is not a tcp_congestion_ops", mapID)
	return o
}

func describeForeign(cas []bpfCA) string {
	var parts []string
	for _, ca := range cas {
		s := fmt.Sprintf("BPF struct_ops map id %d", ca.MapID)
		if ca.LinkID != 0 {
			s += fmt.Sprintf(", link id %d", ca.LinkID)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// Install registers HBM's BPF congestion control name (only "dctcp") unless
// it, or the kernel's own, is already there. Idempotent.
func Install(name string) (InstallResult, error) {
	res := InstallResult{Name: name}
	if err := checkName(name); err != nil {
		return res, err
	}
	if err := requireRoot(); err != nil {
		return res, err
	}
	layout, err := loadTCPOpsLayout()
	if err != nil {
		return res, fmt.Errorf("%w: %v", ErrNoStructOps, err)
	}
	if err := ensureBPFFS(); err != nil {
		return res, err
	}
	if err := os.MkdirAll(PinDir, 0o700); err != nil {
		return res, fmt.Errorf("create %s: %w", PinDir, err)
	}
	unlock, err := lockDir(PinDir)
	if err != nil {
		return res, err
	}
	defer unlock()

	st, err := inspect(name, layout)
	if err != nil {
		return res, err
	}
	if o := st.ours; o != nil {
		if o.healthy {
			res.Outcome, res.Pin, res.LinkID, res.MapID = AlreadyInstalled, o.pin, o.linkID, o.mapID
			res.Detail = fmt.Sprintf("HBM's BPF %s is registered (link id %d, map id %d, pinned at %s)", name, o.linkID, o.mapID, o.pin)
			return res, nil
		}
		// Leftover of a crashed or tampered-with install, registering
		// nothing under name (see inspectPin): replace it.
		if err := os.Remove(o.pin); err != nil && !errors.Is(err, os.ErrNotExist) {
			return res, fmt.Errorf("remove stale pin %s (%s): %w", o.pin, o.problem, err)
		}
	}
	if len(st.foreign) > 0 {
		return res, fmt.Errorf("%w: %q is registered by a BPF program HBM did not install (%s); remove it first or leave it",
			ErrNameTaken, name, describeForeign(st.foreign))
	}
	if st.registered {
		res.Outcome = NativePresent
		res.Detail = fmt.Sprintf("the kernel's own %s is registered; HBM leaves it alone", name)
		return res, nil
	}
	if mod := nativeModule(name); mod != "" {
		res.Outcome = NativePresent
		res.Detail = fmt.Sprintf("the kernel has a native %s module (%s), loaded on first use or with `modprobe tcp_%s`; HBM leaves it alone", name, mod, name)
		return res, nil
	}

	l, mapID, err := load(name)
	if err != nil {
		return res, err
	}
	defer l.Close()
	if err := l.Pin(pinPath(name)); err != nil {
		return res, fmt.Errorf("pin %s link at %s: %w", name, pinPath(name), err)
	}
	if err := waitRegistered(name, true, true); err != nil {
		_ = l.Unpin()
		return res, err
	}
	res.Outcome, res.Pin, res.MapID = Installed, pinPath(name), mapID
	if info, err := l.Info(); err == nil {
		res.LinkID = info.ID
	}
	res.Detail = fmt.Sprintf("BPF %s registered (link id %d, map id %d), pinned at %s", name, res.LinkID, mapID, res.Pin)
	return res, nil
}

// load loads the BPF congestion control and registers it through a link.
func load(name string) (link.Link, ebpf.MapID, error) {
	_ = rlimit.RemoveMemlock() // only matters before 5.11's memcg accounting
	spec, err := loadDctcp()
	if err != nil {
		return nil, 0, err
	}
	// The socket iterator is loaded on demand by Sockets.
	delete(spec.Programs, dctcpProgDctcpSockets)
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, 0, loadError(err)
	}
	defer coll.Close()
	m := coll.Maps[dctcpMapDctcp]
	var mapID ebpf.MapID
	if info, err := m.Info(); err == nil {
		mapID, _ = info.ID()
	}
	l, err := link.AttachStructOps(link.StructOpsOptions{Map: m})
	switch {
	case errors.Is(err, unix.EEXIST):
		return nil, 0, fmt.Errorf("%w: %q was registered meanwhile by someone else", ErrNameTaken, name)
	case errors.Is(err, unix.EPERM):
		return nil, 0, fmt.Errorf("register %s: %w: %v", name, ErrNotRoot, err)
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, ebpf.ErrNotSupported):
		return nil, 0, fmt.Errorf("%w: register %s: %v", ErrNoStructOps, name, err)
	case err != nil:
		return nil, 0, fmt.Errorf("register %s: %w", name, err)
	}
	return l, mapID, nil
}

// loadError turns the library's load errors into the package's.
func loadError(err error) error {
	var ve *ebpf.VerifierError
	switch {
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("load BPF congestion control: %w: %v", ErrNotRoot, err)
	case errors.Is(err, ebpf.ErrNotSupported):
		return fmt.Errorf("%w: %v", ErrNoStructOps, err)
	case errors.As(err, &ve):
		return fmt.Errorf("load BPF congestion control: verifier rejected it: %+v", ve)
	}
	return fmt.Errorf("load BPF congestion control: %w", err)
}

// waitRegistered waits (briefly) until name is, or is no longer, registered:
// releasing a link frees it from a work queue.
func waitRegistered(name string, want, wait bool) error {
	if !wait {
		return nil
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		got, err := registered(name)
		if err != nil {
			return err
		}
		if got == want {
			return nil
		}
		if time.Now().After(deadline) {
			if want {
				return fmt.Errorf("%s not in %s after registration", name, procAvailable)
			}
			return fmt.Errorf("%s still in %s after its link was released", name, procAvailable)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// RemoveResult reports a Remove.
type RemoveResult struct {
	Name    string
	Removed bool   // false: HBM had nothing installed
	Detail  string // human-readable
	// Sockets of this network namespace that still use the removed
	// congestion control (they keep it until they close); -1 if unknown.
	Sockets int
}

// Remove unregisters HBM's congestion control name. Removing what is not
// installed is not an error; removing a dctcp HBM did not install is
// (ErrNotOurs). Unless force is set, Remove refuses while name is the
// default congestion control (ErrIsDefault): the default keeps a reference
// to it, so new sockets would go on getting the unregistered copy.
func Remove(name string, force bool) (RemoveResult, error) {
	res := RemoveResult{Name: name, Sockets: -1}
	if err := checkName(name); err != nil {
		return res, err
	}
	if err := requireRoot(); err != nil {
		return res, err
	}
	path := pinPath(name)
	if mounted, err := isBPFFS(BPFFS); err != nil || !mounted {
		return notInstalled(res)
	}
	if _, err := os.Stat(PinDir); err != nil {
		return notInstalled(res)
	}
	unlock, err := lockDir(PinDir)
	if err != nil {
		return res, err
	}
	defer unlock()

	l, err := link.LoadPinnedLink(path, nil)
	if errors.Is(err, os.ErrNotExist) {
		return notInstalled(res)
	}
	if err != nil {
		// Not a link (stale file): drop it.
		if rmErr := os.Remove(path); rmErr != nil {
			return res, fmt.Errorf("remove %s: %w", path, rmErr)
		}
		res.Removed = true
		res.Detail = fmt.Sprintf("removed stale pin %s (%v)", path, err)
		return res, nil
	}
	if fd, ok := l.(interface{ FD() int }); ok {
		if _, mapID, err := structOpsLinkMap(fd.FD()); err == nil && mapID == 0 {
			// Detached by someone else: registers nothing any more.
			l.Close()
			if err := os.Remove(path); err != nil {
				return res, fmt.Errorf("remove %s: %w", path, err)
			}
			res.Removed = true
			res.Detail = fmt.Sprintf("removed stale pin %s (link was detached)", path)
			return res, nil
		}
	}
	if def, _ := readWords(procDefault); len(def) > 0 && def[0] == name && !force {
		l.Close()
		return res, fmt.Errorf("%s %w (net.ipv4.tcp_congestion_control): set another default first", name, ErrIsDefault)
	}
	if socks, err := Sockets(); err == nil {
		res.Sockets = len(socks)
	}
	unpinErr := l.Unpin()
	closeErr := l.Close()
	if unpinErr != nil {
		return res, fmt.Errorf("unpin %s: %w", path, unpinErr)
	}
	if closeErr != nil {
		return res, fmt.Errorf("release %s link: %w", name, closeErr)
	}
	if err := waitRegistered(name, false, true); err != nil {
		return res, err
	}
	res.Removed = true
	res.Detail = fmt.Sprintf("BPF %s unregistered", name)
	if res.Sockets > 0 {
		res.Detail += fmt.Sprintf("; %d socket(s) here still use it until they close", res.Sockets)
	}
	return res, nil
}

func notInstalled(res RemoveResult) (RemoveResult, error) {
	reg, err := registered(res.Name)
	if err != nil {
		return res, err
	}
	if reg {
		return res, fmt.Errorf("%s: %w (the kernel's own or another BPF program's); left alone", res.Name, ErrNotOurs)
	}
	res.Detail = fmt.Sprintf("%s is not installed", res.Name)
	return res, nil
}
