package daemon

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/cilium/ebpf"

	"github.com/hbm-dev/hbm/internal/dataplane"
)

// Ownership. The daemon records every limit it applies in a map pinned in
// the data plane's pin directory, next to the limits: it lives exactly as
// long as they do (a reboot clears both), each record is written atomically
// by the kernel, and it survives the daemon's SIGKILL. A limit without a
// record was set by hand (hbm set) and is never touched.
//
// Order makes a kill at any moment safe: a record is written before the
// limit is created and dropped after it is removed. A record without a limit
// (killed in between) is forgotten by the next pass; a limit without a
// record cannot come from the daemon.

// OwnedMapName is the pinned map's name in the pin directory.
const OwnedMapName = "hbm_daemon_owned"

type ownedKey struct {
	ID  uint64
	Dir uint32
	_   uint32
}

var ownedSpec = ebpf.MapSpec{
	Name:       OwnedMapName,
	Type:       ebpf.Hash,
	KeySize:    16,
	ValueSize:  8,
	MaxEntries: 65536, // the data plane's HBM_MAX_LIMITS
	Pinning:    ebpf.PinByName,
}

// Owned is the daemon's ownership record.
type Owned struct{ m *ebpf.Map }

// OpenOwned opens (creating if needed) the record in pinDir, which must
// exist (dataplane.Open makes it).
func OpenOwned(pinDir string) (*Owned, error) {
	m, err := ebpf.NewMapWithOptions(&ownedSpec, ebpf.MapOptions{PinPath: pinDir})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", filepath.Join(pinDir, OwnedMapName), err)
	}
	return &Owned{m}, nil
}

// Close releases the map; the record stays pinned.
func (o *Owned) Close() error { return o.m.Close() }

// All returns every key recorded.
func (o *Owned) All() (map[Key]bool, error) {
	out := map[Key]bool{}
	var (
		k ownedKey
		v uint64
	)
	it := o.m.Iterate()
	for it.Next(&k, &v) {
		out[Key{k.ID, dataplane.Direction(k.Dir)}] = true
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", OwnedMapName, err)
	}
	return out, nil
}

// Add records k as the daemon's.
func (o *Owned) Add(k Key) error {
	v := uint64(1)
	if err := o.m.Put(&ownedKey{ID: k.ID, Dir: uint32(k.Dir)}, &v); err != nil {
		return fmt.Errorf("record %d %v as the daemon's: %w", k.ID, k.Dir, err)
	}
	return nil
}

// Remove drops k's record (missing is not an error).
func (o *Owned) Remove(k Key) error {
	err := o.m.Delete(&ownedKey{ID: k.ID, Dir: uint32(k.Dir)})
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("drop record of %d %v: %w", k.ID, k.Dir, err)
	}
	return nil
}
