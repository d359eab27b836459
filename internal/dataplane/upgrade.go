package dataplane

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/hbm-dev/hbm/internal/cgroup"
	"github.com/hbm-dev/hbm/internal/rate"
)

// The upgrade of the pinned state. A build whose maps have another layout
// than the pinned ones (layout.go) carries the state over while the old
// programs keep enforcing every limit, then hands over link by link:
//
//  1. stage, under <pin>/upgrade/: second pins of the old maps (old/), the
//     new maps (new/, and second pins in keep/; a map whose layout did not
//     change is the old map itself), the new programs loaded against them
//     (new/progs/<hash>/, second pins by link role in roles/), then every
//     entry of the old maps carried to the new layout (last, so that the
//     old programs' live state, the queues, is as fresh as it can be);
//  2. the new maps take the old ones' names, one atomic rename each. The
//     first rename is the commit: from then on the pin directory holds a
//     map an older hbm cannot open (it refuses every change), and the next
//     hbm finishes the upgrade instead of discarding it;
//  3. every pinned link is switched to the new program of its role
//     (BPF_LINK_UPDATE: atomic, the group is never without a program);
//  4. the sockets' assist state is carried from the old socket storage to
//     the new one (an iterator over every network namespace, built here
//     from both maps' BTF), so the new assists and the walker can lift the
//     pacing caps and window clamps the old ones set;
//  5. the new programs take their place under progs/, and upgrade/ goes.
//
// Killed before the commit, the next hbm discards upgrade/ (the pinned
// state is as it was); killed after it, the next hbm (of any build that
// has this) finishes it: each step may be repeated, and none needs the
// build that staged it. A build run on state of another layout upgrades it
// the same way, whichever is newer; hbm downgrade does it towards an
// earlier build that does not have this.

const (
	upgradeDir  = "upgrade"        // the upgrade under way
	trashPrefix = "upgrade_trash_" // an upgrade's remains being removed
)

// programMaps are the pinned maps the programs use.
func programMaps() []string {
	var out []string
	for name := range (&state{}).replacements() {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// roleProgs maps a link's role (its pin's name after "<id>-") to the
// program of this build that serves it.
func roleProgs(p *hbmPrograms) map[string]*ebpf.Program {
	return map[string]*ebpf.Program{
		Egress.String(): p.HbmEgress, Egress.String() + "-sockops": p.HbmPaceOps,
		Ingress.String(): p.HbmIngress, Ingress.String() + "-sockops": p.HbmRxwinOps,
	}
}

// ErrUpgradePending: the pinned state has another layout than this build's
// and only a command that may change it (not show) upgrades it.
var ErrUpgradePending = errors.New("the pinned state is from another hbm build")

// target is the build an upgrade carries the state to: its BPF object's
// spec and hash (where its programs are pinned: progs/<hash>), and whether
// it is this build (whose Go types read its configuration).
type target struct {
	spec *ebpf.CollectionSpec
	hash string
	ours bool
}

// upgrade makes the pinned state this build's layout, finishing or
// discarding an upgrade a killed hbm left first. It runs under the
// exclusive lock, before the state is opened for writing.
func (m *Manager) upgrade() error {
	spec, err := loadHbm()
	if err != nil {
		return fmt.Errorf("load embedded BPF object: %w", err)
	}
	_, err = m.upgradeTo(target{spec, buildHash(), true})
	return err
}

// upgradeTo carries the pinned state to b's layout; false if it had it.
func (m *Manager) upgradeTo(b target) (bool, error) {
	removeTrash(m.dir)
	up := filepath.Join(m.dir, upgradeDir)
	if pinExists(up) {
		done, err := m.committed()
		switch {
		case err != nil:
			return false, fmt.Errorf("an upgrade of the pinned state is under way and cannot be read: %w", err)
		case done:
			if err := m.finishUpgrade(); err != nil {
				return false, fmt.Errorf("finish the upgrade of the pinned state an earlier hbm left half done: %w (every limit stays enforced, by the old programs or the new; the next hbm command that changes limits tries again)", err)
			}
			m.warn("finished the upgrade of the pinned state that an earlier hbm left half done")
		default:
			if err := trash(m.dir, up); err != nil {
				return false, err
			}
		}
	}
	diffs, err := layoutDiffs(m.dir, b.spec)
	if err != nil || len(diffs) == 0 {
		return false, err
	}
	what := strings.Join(diffs, "; ")
	carried, err := m.stageUpgrade(b)
	if err != nil {
		trash(m.dir, up)
		return false, fmt.Errorf("upgrade the pinned state to another layout (%s): %w; nothing changed, the limits stay enforced by the build that set them", what, err)
	}
	if err := m.finishUpgrade(); err != nil {
		return false, fmt.Errorf("upgrade the pinned state to another layout (%s), half done: %w (every limit stays enforced, by the old programs or the new; the next hbm command that changes limits finishes it)", what, err)
	}
	whose := "this hbm build's layout"
	if !b.ours {
		whose = "the layout of build " + b.hash
	}
	m.warn("upgraded the pinned state to %s (%s): %s", whose, what, carried)
	return true, nil
}

// Downgrade carries the pinned state under dir to the layout of obj, the
// BPF object of another hbm build (ObjectIn finds it in that build's
// binary): its programs are loaded against the carried maps and pinned
// where that build looks for its own, and every link switched to them.
// For a rollback to a build older than the upgrade, which refuses state of
// a newer layout; a build that has the upgrade carries the state back by
// itself. It returns what it did.
func Downgrade(dir string, obj []byte) ([]string, error) {
	spec, err := ebpf.LoadCollectionSpecFromReader(bytes.NewReader(obj))
	if err != nil {
		return nil, fmt.Errorf("the other build's BPF object: %w", err)
	}
	if !Pinned(dir) {
		return nil, nil
	}
	mnt, err := cgroup.Mount()
	if err != nil {
		return nil, err
	}
	lock, err := lockDir(dir, unix.LOCK_EX)
	if err != nil {
		return nil, err
	}
	m := &Manager{dir: dir, mount: mnt, lock: lock}
	defer m.Close()
	sum := sha256.Sum256(obj)
	did, err := m.upgradeTo(target{spec, hex.EncodeToString(sum[:8]), false})
	if err == nil && !did {
		m.warn("the pinned state already has that build's layout: nothing to carry")
	}
	return m.Warnings, err
}

// ObjectIn finds the BPF object (HBM's data plane) an hbm binary embeds:
// an ELF object for BPF (EM_BPF, little endian) holding hbm_egress, whose
// length its section header table's end gives.
func ObjectIn(binary string) ([]byte, error) {
	data, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	magic := []byte("\x7fELF\x02\x01\x01") // 64-bit, little endian, version 1
	for off := 0; ; {
		i := bytes.Index(data[off:], magic)
		if i < 0 {
			return nil, fmt.Errorf("%s embeds no HBM BPF object (not an hbm binary?)", binary)
		}
		i += off
		off = i + 1
		h := data[i:]
		const emBPF = 247
		if len(h) < 64 || le.Uint16(h[18:]) != emBPF {
			continue
		}
		end := le.Uint64(h[40:]) + uint64(le.Uint16(h[58:]))*uint64(le.Uint16(h[60:]))
		if end > uint64(len(h)) {
			continue
		}
		obj := h[:end]
		spec, err := ebpf.LoadCollectionSpecFromReader(bytes.NewReader(obj))
		if err == nil && spec.Programs[hbmProgHbmEgress] != nil {
			return obj, nil
		}
	}
}

var le = binary.LittleEndian

// layoutDiffs lists the pinned program maps whose layout differs from
// spec's, with what differs.
func layoutDiffs(dir string, spec *ebpf.CollectionSpec) ([]string, error) {
	var out []string
	for _, name := range programMaps() {
		mp, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), &ebpf.LoadPinOptions{ReadOnly: true})
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("open map %s in %s: %w", name, dir, err)
		}
		same, why, err := sameLayout(mp, spec.Maps[name])
		mp.Close()
		if err != nil {
			return nil, fmt.Errorf("map %s in %s: %w", name, dir, err)
		}
		if !same {
			out = append(out, name+": "+why)
		}
	}
	return out, nil
}

// stageUpgrade builds the new state under upgrade/ (step 1): nothing any
// program runs yet uses it. It returns what it carried, for the message.
func (m *Manager) stageUpgrade(b target) (string, error) {
	spec := b.spec
	up := filepath.Join(m.dir, upgradeDir)
	for _, d := range []string{"old", "new", "keep", "roles", "hash"} {
		if err := os.MkdirAll(filepath.Join(up, d), 0o700); err != nil {
			return "", err
		}
	}
	olds, news := map[string]*ebpf.Map{}, map[string]*ebpf.Map{}
	defer func() {
		for _, mp := range olds {
			mp.Close()
		}
		for _, mp := range news {
			mp.Close()
		}
	}()
	var changed []string
	for _, name := range programMaps() {
		ms := spec.Maps[name].Copy()
		ms.Pinning = ebpf.PinNone
		old, err := ebpf.LoadPinnedMap(filepath.Join(m.dir, name), nil)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return "", fmt.Errorf("open map %s: %w", name, err)
		default:
			olds[name] = old
			if err := pinAlso(old, filepath.Join(up, "old", name)); err != nil {
				return "", err
			}
		}
		var nm *ebpf.Map
		if old != nil {
			same, _, err := sameLayout(old, ms)
			if err != nil {
				return "", fmt.Errorf("map %s: %w", name, err)
			}
			if same {
				nm, err = old.Clone()
				if err != nil {
					return "", err
				}
			}
		}
		if nm == nil {
			if nm, err = ebpf.NewMapWithOptions(ms, ebpf.MapOptions{}); err != nil {
				return "", fmt.Errorf("create map %s: %w", name, err)
			}
			changed = append(changed, name)
		}
		news[name] = nm
		for _, d := range []string{"new", "keep"} {
			if err := pinAlso(nm, filepath.Join(up, d, name)); err != nil {
				return "", err
			}
		}
	}
	m.step("staged maps")
	p := &hbmPrograms{}
	if err := spec.LoadAndAssign(p, &ebpf.CollectionOptions{MapReplacements: news}); err != nil {
		return "", loadError(err)
	}
	defer p.Close()
	if err := pinPrograms(p, filepath.Join(up, "new", progsDir), b.hash); err != nil {
		return "", err
	}
	for role, prog := range roleProgs(p) {
		if err := pinAlso(prog, filepath.Join(up, "roles", role)); err != nil {
			return "", err
		}
	}
	if err := os.MkdirAll(filepath.Join(up, "hash", b.hash), 0o700); err != nil {
		return "", err
	}
	m.step("staged programs")
	var carried []string
	for _, name := range changed {
		old := olds[name]
		if old == nil || old.Type() == ebpf.SkStorage {
			continue // socket storage: carried socket by socket after the hand-over
		}
		n, err := carry(name, old, news[name], spec.Maps[name], b.ours)
		if err != nil {
			return "", err
		}
		carried = append(carried, fmt.Sprintf("%s %d entries", name, n))
	}
	m.step("carried state")
	if len(carried) == 0 {
		return "no entry to carry", nil
	}
	return "carried " + strings.Join(carried, ", "), nil
}

// pinAlso pins obj at path beside its other pins (a clone: Pin on an
// object loaded from a pin would move that pin).
func pinAlso[T interface {
	Clone() (T, error)
	Pin(string) error
	Close() error
}](obj T, path string) error {
	c, err := obj.Clone()
	if err != nil {
		return err
	}
	defer c.Close()
	os.Remove(path) // a killed staging's
	if err := c.Pin(path); err != nil {
		return fmt.Errorf("pin %s: %w", path, err)
	}
	return nil
}

// carry writes every entry of old into nm, in nm's layout. Into this
// build's layout (remake), a limit's configuration is made again from what
// it means (limitOf, config): a member new to the layout gets this build's
// value, not zero.
func carry(name string, old, nm *ebpf.Map, ms *ebpf.MapSpec, remake bool) (int, error) {
	c, err := newCarrier(old, ms)
	if err != nil {
		return 0, fmt.Errorf("carry %s: %w", name, err)
	}
	n := 0
	err = c.each(old, func(k, v []byte) error {
		if remake && name == hbmMapHbmLimitMap {
			v = remakeConfig(v)
		}
		if err := nm.Update(k, v, ebpf.UpdateAny); err != nil {
			return err
		}
		n++
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("carry %s: %w", name, err)
	}
	return n, nil
}

// remakeConfig makes a carried configuration again from the limit it
// means; thresholds an older layout lacked (zero) get their defaults. If
// that is not a valid limit the carried bytes stay.
func remakeConfig(v []byte) []byte {
	var c hbmHbmConfig
	if _, err := binary.Decode(v, binary.NativeEndian, &c); err != nil {
		return v
	}
	l := limitOf(c)
	cfg, err := config(l)
	if err != nil {
		def := rate.Default(l.Rate)
		th := &l.Thresholds
		for _, f := range [][2]*time.Duration{
			{&th.Burst, &def.Burst}, {&th.Pace, &def.Pace}, {&th.Mark, &def.Mark},
			{&th.DropLarge, &def.DropLarge}, {&th.DropSmall, &def.DropSmall}, {&th.MaxBacklog, &def.MaxBacklog},
		} {
			if *f[0] == 0 {
				*f[0] = *f[1]
			}
		}
		if cfg, err = config(l); err != nil {
			return v
		}
	}
	out, err := binary.Append(nil, binary.NativeEndian, &cfg)
	if err != nil || len(out) != len(v) {
		return v
	}
	return out
}

// committed reports whether the upgrade under way passed its commit: a
// map pinned under its name is one of the upgrade's new maps (keep/) and
// not the old map it replaces (a map whose layout did not change is both).
func (m *Manager) committed() (bool, error) {
	up := filepath.Join(m.dir, upgradeDir)
	ents, err := os.ReadDir(filepath.Join(up, "keep"))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, e := range ents {
		name := e.Name()
		keep, err := pinnedMapID(filepath.Join(up, "keep", name))
		if err != nil {
			continue // a killed staging's: not committed by this map
		}
		cur, err := pinnedMapID(filepath.Join(m.dir, name))
		if err != nil || cur != keep {
			continue
		}
		if old, err := pinnedMapID(filepath.Join(up, "old", name)); err != nil || old != keep {
			return true, nil
		}
	}
	return false, nil
}

func pinnedMapID(path string) (ebpf.MapID, error) {
	mp, err := ebpf.LoadPinnedMap(path, &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return 0, err
	}
	defer mp.Close()
	info, err := mp.Info()
	if err != nil {
		return 0, err
	}
	id, _ := info.ID()
	return id, nil
}

// finishUpgrade runs steps 2 to 5 of a staged upgrade; every step may be
// repeated, and none needs the build that staged it: the programs are
// pinned by role, the socket storage is carried by its BTF.
func (m *Manager) finishUpgrade() error {
	up := filepath.Join(m.dir, upgradeDir)
	// 2. The new maps take the old ones' names; the first rename commits.
	ents, err := os.ReadDir(filepath.Join(up, "new"))
	if err != nil {
		return err
	}
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() {
			continue
		}
		from := filepath.Join(up, "new", name)
		keep, err1 := pinnedMapID(filepath.Join(up, "keep", name))
		cur, err2 := pinnedMapID(filepath.Join(m.dir, name))
		if err1 == nil && err2 == nil && keep == cur {
			os.Remove(from) // the same map: its layout did not change
			continue
		}
		if err := os.Rename(from, filepath.Join(m.dir, name)); err != nil {
			return fmt.Errorf("replace map %s: %w", name, err)
		}
		m.step("replaced " + name)
	}
	// 3. Every link to the new program of its role.
	roles := map[string]*ebpf.Program{}
	rents, err := os.ReadDir(filepath.Join(up, "roles"))
	if err != nil {
		return err
	}
	for _, e := range rents {
		prog, err := ebpf.LoadPinnedProgram(filepath.Join(up, "roles", e.Name()), nil)
		if err != nil {
			return fmt.Errorf("load the new program for %s links: %w", e.Name(), err)
		}
		defer prog.Close()
		roles[e.Name()] = prog
	}
	if _, err := m.switchLinks(roles); err != nil {
		return err
	}
	// 4. The sockets' assist state.
	kents, _ := os.ReadDir(filepath.Join(up, "keep"))
	var nets, unreached []string
	for _, e := range kents {
		if nets == nil {
			nets, unreached = everyNetns()
		}
		carried, err := m.carrySockets(filepath.Join(up, "old", e.Name()), filepath.Join(up, "keep", e.Name()), nets)
		if err != nil {
			return err
		}
		if !carried {
			continue
		}
		if len(unreached) > 0 {
			m.warn("the sockets' assist state was not carried in every network namespace: %v: the pacing caps and window clamps the earlier build's assists set on sockets there stay after unset", unreachedError(unreached))
			unreached = nil
		}
	}
	// 5. The programs under progs/, the old ones and upgrade/ gone.
	hents, _ := os.ReadDir(filepath.Join(up, "hash"))
	for _, h := range hents {
		dst := filepath.Join(m.dir, progsDir, h.Name())
		src := filepath.Join(up, "new", progsDir, h.Name())
		if pinExists(src) && !pinExists(dst) {
			if err := os.MkdirAll(filepath.Join(m.dir, progsDir), 0o700); err != nil {
				return err
			}
			if err := os.Rename(src, dst); err != nil {
				return fmt.Errorf("pin the new programs: %w", err)
			}
		}
		pents, _ := os.ReadDir(filepath.Join(m.dir, progsDir))
		for _, p := range pents {
			if p.Name() != h.Name() {
				os.RemoveAll(filepath.Join(m.dir, progsDir, p.Name()))
			}
		}
		m.step("replaced programs")
	}
	if err := trash(m.dir, up); err != nil {
		return err
	}
	m.step("upgrade done")
	return nil
}

// switchLinks makes every pinned link run the program of its role in
// roles (BPF_LINK_UPDATE: the kernel swaps the program atomically). A link
// of a removed group (ENOLINK) is left to prune; a role roles lacks is a
// warning (a link of a build with roles this one does not know).
func (m *Manager) switchLinks(roles map[string]*ebpf.Program) (int, error) {
	ids := map[string]ebpf.ProgramID{}
	for role, prog := range roles {
		info, err := prog.Info()
		if err != nil {
			return 0, err
		}
		ids[role], _ = info.ID()
	}
	dir := filepath.Join(m.dir, linksDir)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range ents {
		name := e.Name()
		i := strings.IndexByte(name, '-')
		prog := roles[name[i+1:]]
		if i < 0 || prog == nil {
			m.warn("link %s: this hbm build has no program for it; left as it is", name)
			continue
		}
		l, err := link.LoadPinnedLink(filepath.Join(dir, name), nil)
		if err != nil {
			m.warn("link %s: %v; left as it is", name, err)
			continue
		}
		if info, err := l.Info(); err == nil && info.Program == ids[name[i+1:]] {
			l.Close()
			continue
		}
		err = l.Update(prog)
		l.Close()
		if errors.Is(err, errNoLink) {
			continue // its group was removed: prune's
		}
		if err != nil {
			return n, fmt.Errorf("switch link %s to the new program: %w", name, err)
		}
		n++
		m.step("switched " + name)
	}
	return n, nil
}

// carrySockets carries the socket storage of old (a pinned sk_storage map)
// into nw, where they are different maps: every socket with old storage
// gets new storage, each member of the old layout filling the member of
// the same name (copyPlan) where the new storage holds zero there (the new
// programs may have written it since the hand-over: what they wrote
// stays). What matters most is `applied`: the pacing cap or window clamp
// the old assist set, which the new assist and walker lift only if they
// know it is theirs. Sockets are found by a TCP iterator in every network
// namespace hbm can enter.
func (m *Manager) carrySockets(oldPath, newPath string, nets []string) (bool, error) {
	old, err := ebpf.LoadPinnedMap(oldPath, nil)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer old.Close()
	nw, err := ebpf.LoadPinnedMap(newPath, nil)
	if err != nil {
		return false, err
	}
	defer nw.Close()
	if old.Type() != ebpf.SkStorage || nw.Type() != ebpf.SkStorage {
		return false, nil
	}
	oi, err1 := old.Info()
	ni, err2 := nw.Info()
	if err1 != nil || err2 != nil {
		return false, errors.Join(err1, err2)
	}
	oid, _ := oi.ID()
	nid, _ := ni.ID()
	if oid == nid {
		return false, nil // the same map: nothing to carry
	}
	_, ov, err := mapBTF(old)
	if err != nil {
		return false, err
	}
	_, nv, err := mapBTF(nw)
	if err != nil {
		return false, err
	}
	if ov == nil || nv == nil {
		m.warn("%s: no BTF to carry the sockets' assist state by: pacing caps and window clamps the earlier build's assists set stay on their sockets", filepath.Base(newPath))
		return false, nil
	}
	prog, err := mergeProgram(old, nw, copyPlan(ov, nv))
	if err != nil {
		return false, fmt.Errorf("carry the sockets' assist state (%s): %w", filepath.Base(newPath), err)
	}
	defer prog.Close()
	it, err := link.AttachIter(link.IterOptions{Program: prog})
	if err != nil {
		return false, fmt.Errorf("carry the sockets' assist state: attach iterator: %w", err)
	}
	defer it.Close()
	var unreached []string
	var n int64
	for _, ns := range nets {
		err := inNetns(ns, func() error {
			r, err := it.Open()
			if err != nil {
				return err
			}
			defer r.Close()
			c, err := io.Copy(io.Discard, r)
			n += c
			return err
		})
		if err != nil && !gone(err) {
			unreached = append(unreached, fmt.Sprintf("%s: %v", ns, err))
		}
	}
	if len(unreached) > 0 {
		m.warn("%s: the sockets' assist state not carried in %v: the pacing caps and window clamps the earlier build's assists set on sockets there stay after unset", filepath.Base(newPath), unreachedError(unreached))
	}
	m.step(fmt.Sprintf("carried %s of %d sockets", filepath.Base(newPath), n))
	return true, nil
}

// mergeProgram builds the iterator that carries one socket's storage from
// old to nw by ops (one byte written to the iterator per socket carried).
// Built here, with the offsets as constants, so it needs no object file
// and serves any pair of layouts.
func mergeProgram(old, nw *ebpf.Map, ops []copyOp) (*ebpf.Program, error) {
	sizes := map[uint32]asm.Size{1: asm.Byte, 2: asm.Half, 4: asm.Word, 8: asm.DWord}
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R1, asm.R6, 8, asm.DWord), // ctx->sk_common
		asm.JEq.Imm(asm.R1, 0, "out"),
		asm.FnSkcToTcpSock.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.Mov.Reg(asm.R7, asm.R0),
	}
	// R8: the socket's old storage (none: nothing to carry); R9: its new
	// storage, made if need be (BPF_SK_STORAGE_GET_F_CREATE).
	for _, g := range []struct {
		m      *ebpf.Map
		create int32
		dst    asm.Register
	}{{old, 0, asm.R8}, {nw, 1, asm.R9}} {
		insns = append(insns,
			asm.LoadMapPtr(asm.R1, g.m.FD()),
			asm.Mov.Reg(asm.R2, asm.R7),
			asm.Mov.Imm(asm.R3, 0),
			asm.Mov.Imm(asm.R4, g.create),
			asm.FnSkStorageGet.Call(),
			asm.JEq.Imm(asm.R0, 0, "out"),
			asm.Mov.Reg(g.dst, asm.R0),
		)
	}
	var chunks []copyOp
	for _, op := range ops {
		for off := uint32(0); off < op.size; {
			sz := uint32(8)
			for sz > op.size-off || (op.src+off)%sz != 0 || (op.dst+off)%sz != 0 {
				sz /= 2
			}
			chunks = append(chunks, copyOp{op.src + off, op.dst + off, sz})
			off += sz
		}
	}
	for i, c := range chunks {
		next := "next" + strconv.Itoa(i)
		insns = append(insns,
			asm.LoadMem(asm.R1, asm.R9, int16(c.dst), sizes[c.size]),
			asm.JNE.Imm(asm.R1, 0, next),
			asm.LoadMem(asm.R1, asm.R8, int16(c.src), sizes[c.size]),
			asm.StoreMem(asm.R9, int16(c.dst), asm.R1, sizes[c.size]),
			asm.Mov.Reg(asm.R1, asm.R1).WithSymbol(next), // a no-op to jump to
		)
	}
	insns = append(insns,
		asm.StoreImm(asm.RFP, -8, 1, asm.Byte),
		asm.LoadMem(asm.R1, asm.R6, 0, asm.DWord), // ctx->meta
		asm.LoadMem(asm.R1, asm.R1, 0, asm.DWord), // meta->seq
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -8),
		asm.Mov.Imm(asm.R3, 1),
		asm.FnSeqWrite.Call(),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
		asm.Return(),
	)
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "hbm_sk_carry", Type: ebpf.Tracing, AttachType: ebpf.AttachTraceIter, AttachTo: "tcp",
		License: "GPL", Instructions: insns,
	})
	if err != nil {
		return nil, fmt.Errorf("load the socket storage carrier: %w", err)
	}
	return prog, nil
}

// everyNetns returns a path for each network namespace hbm can find: its
// own, the named ones, every process's; and those it could not read.
func everyNetns() (paths, unreached []string) {
	seen := map[uint64]bool{}
	add := func(p string) {
		ino, err := inodeErr(p)
		if err != nil {
			if !gone(err) {
				unreached = append(unreached, err.Error())
			}
			return
		}
		if !seen[ino] {
			seen[ino] = true
			paths = append(paths, p)
		}
	}
	add("/proc/self/ns/net")
	for _, dir := range []string{"/run/netns", "/var/run/netns"} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			add(filepath.Join(dir, e.Name()))
		}
	}
	procs, _ := os.ReadDir("/proc")
	for _, e := range procs {
		if _, err := strconv.Atoi(e.Name()); err == nil {
			add(filepath.Join("/proc", e.Name(), "ns/net"))
		}
	}
	return paths, unreached
}

// trash renames dir out of the way (atomically) and removes it.
func trash(pin, dir string) error {
	t := filepath.Join(pin, fmt.Sprintf("%s%d", trashPrefix, os.Getpid()))
	os.RemoveAll(t)
	if err := os.Rename(dir, t); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return os.RemoveAll(t)
}

// removeTrash removes what a killed trash left.
func removeTrash(pin string) {
	ents, _ := os.ReadDir(pin)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), trashPrefix) {
			os.RemoveAll(filepath.Join(pin, e.Name()))
		}
	}
}

// UpgradePending says, for show, whether the pinned state differs from
// this build's layout or an upgrade was left under way ("" if neither).
func UpgradePending(dir string) string {
	var notes []string
	if pinExists(filepath.Join(dir, upgradeDir)) {
		notes = append(notes, "an upgrade of the pinned state was left under way (the next hbm command that changes limits finishes or discards it)")
	}
	spec, err := loadHbm()
	if err != nil {
		return ""
	}
	if diffs, err := layoutDiffs(dir, spec); err == nil && len(diffs) > 0 {
		notes = append(notes, fmt.Sprintf("%v (%s): shown as this build reads it; the next hbm command that changes limits upgrades it", ErrUpgradePending, strings.Join(diffs, "; ")))
	}
	return strings.Join(notes, "; ")
}

// errNoLink: BPF_LINK_UPDATE on the link of a removed group.
var errNoLink = unix.ENOLINK
