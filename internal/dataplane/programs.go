package dataplane

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/cilium/ebpf"
)

// The programs are loaded (and verified) once per hbm build and pinned under
// progs/<hash of the embedded object>/, so `hbm set` attaches a program that
// is already loaded: no load, no verification, whatever the number of groups.

// buildHash names this build's programs.
func buildHash() string {
	sum := sha256.Sum256(_HbmBytes)
	return hex.EncodeToString(sum[:8])
}

// programs returns this build's pinned programs, loading and pinning them
// first if needed. The caller closes them.
func (m *Manager) programs() (*hbmPrograms, error) {
	if m.progs != nil {
		return m.progs, nil
	}
	root := filepath.Join(m.dir, progsDir)
	dir := filepath.Join(root, buildHash())
	p, err := loadPinnedPrograms(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err != nil {
		if p, err = m.loadPrograms(root, dir); err != nil {
			return nil, err
		}
	}
	m.progs = p
	return p, nil
}

func loadPinnedPrograms(dir string) (*hbmPrograms, error) {
	p := &hbmPrograms{}
	for name, dst := range map[string]**ebpf.Program{
		hbmProgHbmEgress: &p.HbmEgress, hbmProgHbmIngress: &p.HbmIngress,
		hbmProgHbmPaceOps: &p.HbmPaceOps, hbmProgHbmRxwinOps: &p.HbmRxwinOps, hbmProgHbmSockets: &p.HbmSockets,
	} {
		prog, err := ebpf.LoadPinnedProgram(filepath.Join(dir, name), nil)
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("load pinned program %s: %w", name, err)
		}
		*dst = prog
	}
	return p, nil
}

// loadPrograms loads the embedded object against the pinned maps and pins
// its programs at root/<hash> (pinPrograms). The links of earlier builds
// are switched to them: with the same layout (else upgrade would have run)
// the new code serves every limit at once, not only new attachments.
func (m *Manager) loadPrograms(root, dir string) (*hbmPrograms, error) {
	spec, err := loadHbm()
	if err != nil {
		return nil, fmt.Errorf("load embedded BPF object: %w", err)
	}
	p := &hbmPrograms{}
	if err := spec.LoadAndAssign(p, &ebpf.CollectionOptions{MapReplacements: m.st.replacements()}); err != nil {
		return nil, loadError(err)
	}
	if err := pinPrograms(p, root, filepath.Base(dir)); err != nil {
		p.Close()
		return nil, err
	}
	if n, err := m.switchLinks(roleProgs(p)); err != nil {
		m.warn("%d links switched to this build's programs, then: %v (the others run an earlier build's, on the same maps)", n, err)
	}
	return p, nil
}

func loadError(err error) error {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return fmt.Errorf("kernel rejected HBM's programs: %+v", ve)
	}
	return fmt.Errorf("load HBM's programs: %w", err)
}

// pinPrograms pins p's programs at root/hash: into a scratch directory
// first, renamed into place whole, so a killed hbm never leaves a partial
// set where the next one looks. Earlier builds' programs and scratch left
// by a killed hbm are unpinned first: their links hold their own
// references, so that detaches nothing.
func pinPrograms(p *hbmPrograms, root, hash string) error {
	if old, err := os.ReadDir(root); err == nil {
		for _, e := range old {
			os.RemoveAll(filepath.Join(root, e.Name()))
		}
	}
	tmp := filepath.Join(root, fmt.Sprintf("loading_%d", os.Getpid())) // bpffs names may not hold dots
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return fmt.Errorf("pin programs: %w", err)
	}
	for name, prog := range namedPrograms(p) {
		if err := pinAlso(prog, filepath.Join(tmp, name)); err != nil {
			os.RemoveAll(tmp)
			return fmt.Errorf("pin program %s: %w", name, err)
		}
	}
	if err := os.Rename(tmp, filepath.Join(root, hash)); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("pin programs: %w", err)
	}
	return nil
}

// namedPrograms is every program of p by its name in the object.
func namedPrograms(p *hbmPrograms) map[string]*ebpf.Program {
	return map[string]*ebpf.Program{
		hbmProgHbmEgress: p.HbmEgress, hbmProgHbmIngress: p.HbmIngress,
		hbmProgHbmPaceOps: p.HbmPaceOps, hbmProgHbmRxwinOps: p.HbmRxwinOps, hbmProgHbmSockets: p.HbmSockets,
	}
}

// VerifierLimit is the most instructions the kernel's verifier processes
// for one program (BPF_COMPLEXITY_LIMIT_INSNS) before it refuses it.
const VerifierLimit = 1_000_000

// ProgramVerdict is what the verifier made of one of HBM's programs.
type ProgramVerdict struct {
	Name string
	// Instructions the verifier processed (0: the kernel does not say).
	Instructions uint32
}

// Verify loads HBM's programs on the running kernel with maps of their own
// (nothing pinned, nothing attached: what `hbm set` loads, without touching
// its state) and returns the verifier's count for each. An error is the
// verifier's refusal, with its log.
func Verify() ([]ProgramVerdict, error) {
	var objs hbmObjects
	if err := loadHbmObjects(&objs, nil); err != nil {
		return nil, loadError(err)
	}
	defer objs.Close()
	var out []ProgramVerdict
	progs := namedPrograms(&objs.hbmPrograms)
	for _, name := range slices.Sorted(maps.Keys(progs)) {
		v := ProgramVerdict{Name: name}
		if info, err := progs[name].Info(); err == nil {
			v.Instructions, _ = info.VerifiedInstructions()
		}
		out = append(out, v)
	}
	return out, nil
}
