package daemon

import (
	"errors"
	"fmt"
	"hash/fnv"
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
//
// A record also says which limit the daemon applied: its value holds a hash
// of that limit and of the one before (a change is recorded before it is
// applied, so a kill in between leaves the old limit, which still matches).
// A limit that matches neither was changed by hand (hbm set on a group the
// daemon limited): it is then the operator's, and the daemon drops its
// record and leaves the limit alone, as it does any hand-set limit. The CLI
// needs no knowledge of the record (an older hbm, or any other tool, is
// noticed the same way). What it cannot notice: a hand-set limit equal to
// the one the daemon applied (nothing to tell them apart, and nothing
// differs), or equal to the one before the daemon's last change.

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

// Record is the value of one ownership record: two 32-bit hashes, of the
// limit applied (low half) and of the one it replaced (high half; 0 for
// none). LegacyRecord (1, written before records held hashes) matches any
// limit.
type Record uint64

// LegacyRecord is the value older daemons wrote: it matches every limit.
const LegacyRecord Record = 1

// limitHash is a 31-bit hash of l with the top bit set (never 0 or 1).
func limitHash(l dataplane.Limit) uint32 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%+v", l)
	s := h.Sum64()
	return uint32(s^(s>>32))&0x7fffffff | 0x80000000
}

// RecordOf is the record of applying next over prev (nil: no limit before).
func RecordOf(prev *dataplane.Limit, next dataplane.Limit) Record {
	r := Record(limitHash(next))
	if prev != nil {
		r |= Record(limitHash(*prev)) << 32
	}
	return r
}

// Matches reports whether l is the limit the record says the daemon
// applied (or the one it replaced).
func (r Record) Matches(l dataplane.Limit) bool {
	if r <= LegacyRecord {
		return true
	}
	h := Record(limitHash(l))
	return r&0xffffffff == h || r>>32 == h
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

// All returns every record.
func (o *Owned) All() (map[Key]Record, error) {
	out := map[Key]Record{}
	var (
		k ownedKey
		v uint64
	)
	it := o.m.Iterate()
	for it.Next(&k, &v) {
		out[Key{k.ID, dataplane.Direction(k.Dir)}] = Record(v)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", OwnedMapName, err)
	}
	return out, nil
}

// Add records k as the daemon's, with the limit it applies.
func (o *Owned) Add(k Key, r Record) error {
	v := uint64(r)
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
