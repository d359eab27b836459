package cc

import (
	"errors"
	"os"
	"slices"
	"sort"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Source says where a congestion control comes from.
type Source string

const (
	SourceKernel Source = "kernel" // built in or a module
	SourceHBM    Source = "hbm"    // HBM's BPF, pinned under PinDir
	SourceBPF    Source = "bpf"    // BPF struct_ops HBM did not install
	// SourceUnknown: not determined (List without root).
	SourceUnknown Source = "?"
)

// Entry is one congestion control.
type Entry struct {
	Name       string     `json:"name"`
	Source     Source     `json:"source"`
	Registered bool       `json:"registered"` // in tcp_available_congestion_control
	Allowed    bool       `json:"allowed"`    // unprivileged sockets may select it
	Default    bool       `json:"default"`    // net.ipv4.tcp_congestion_control
	Pin        string     `json:"pin,omitempty"`
	LinkID     link.ID    `json:"link_id,omitempty"`
	MapID      ebpf.MapID `json:"map_id,omitempty"`
	Problem    string     `json:"problem,omitempty"` // an HBM pin that registers nothing
}

// Listing is what the kernel offers and what HBM installed.
type Listing struct {
	Entries []Entry `json:"entries"`
	// Installable: what HBM ships that is not registered.
	Installable []string `json:"installable"`
	// Partial is set when BPF details could not be read (not root).
	Partial string `json:"partial,omitempty"`
}

// List reports the registered congestion controls, where each comes from,
// and HBM's pins. Without root it lists the kernel's view only.
func List() (*Listing, error) {
	avail, err := Available()
	if err != nil {
		return nil, err
	}
	allowed, _ := readWords(procAllowed)
	def, _ := readWords(procDefault)
	l := &Listing{}
	for _, name := range avail {
		l.Entries = append(l.Entries, Entry{
			Name:       name,
			Source:     SourceKernel,
			Registered: true,
			Allowed:    slices.Contains(allowed, name),
			Default:    len(def) > 0 && def[0] == name,
		})
	}
	for _, n := range Names() {
		if !slices.Contains(avail, n) {
			l.Installable = append(l.Installable, n)
		}
	}
	if err := l.addBPF(); err != nil {
		l.Partial = "sources not determined: " + err.Error()
		for i := range l.Entries {
			if l.Entries[i].Name != "reno" { // always built in
				l.Entries[i].Source = SourceUnknown
			}
		}
	}
	return l, nil
}

// addBPF marks BPF entries and HBM's pins.
func (l *Listing) addBPF() error {
	if err := requireRoot(); err != nil {
		return err
	}
	layout, err := loadTCPOpsLayout()
	if err != nil {
		if errors.Is(err, errNoTCPStructOps) {
			return nil // no BPF congestion control can exist
		}
		return err
	}
	cas, err := bpfCongestionControls(layout)
	if err != nil {
		return err
	}
	ours := map[string]*ourCA{}
	if ok, _ := isBPFFS(BPFFS); ok {
		dents, _ := os.ReadDir(PinDir)
		for _, d := range dents {
			reg := false
			for _, e := range l.Entries {
				if e.Name == d.Name() {
					reg = true
				}
			}
			ours[d.Name()] = inspectPin(pinPath(d.Name()), d.Name(), cas, reg)
		}
	}
	for i := range l.Entries {
		e := &l.Entries[i]
		if o := ours[e.Name]; o != nil && o.healthy {
			e.Source, e.Pin, e.LinkID, e.MapID = SourceHBM, o.pin, o.linkID, o.mapID
			continue
		}
		for _, ca := range cas {
			if ca.Name == e.Name && ca.Registered {
				e.Source, e.LinkID, e.MapID = SourceBPF, ca.LinkID, ca.MapID
			}
		}
	}
	// Pins that register nothing (leftovers): show them, install repairs them.
	for name, o := range ours {
		if !o.healthy {
			l.Entries = append(l.Entries, Entry{Name: name, Source: SourceHBM, Pin: o.pin, LinkID: o.linkID, MapID: o.mapID, Problem: o.problem})
		}
	}
	sort.SliceStable(l.Entries, func(i, j int) bool { return l.Entries[i].Name < l.Entries[j].Name })
	return nil
}
