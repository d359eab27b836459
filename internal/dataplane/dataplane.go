// Package dataplane loads, attaches and pins HBM's BPF programs and keeps the
// state of every limit: one pinned program link per (cgroup, direction) and
// three pinned maps shared by all of them (see bpf/include/hbm.h).
//
// Everything lives under a pin directory (DefaultPinDir) so that limits
// outlive the CLI; a Manager is a handle on that directory, holding its lock.
package dataplane

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/hbm-dev/hbm/internal/cgroup"
	"github.com/hbm-dev/hbm/internal/rate"
)

// DefaultPinDir is where HBM pins its state.
const DefaultPinDir = "/sys/fs/bpf/hbm"

// Direction is the traffic direction a limit applies to.
type Direction uint32

const (
	Egress  Direction = 0 // HBM_DIR_EGRESS
	Ingress Direction = 1 // HBM_DIR_INGRESS
)

func (d Direction) String() string {
	switch d {
	case Egress:
		return "egress"
	case Ingress:
		return "ingress"
	}
	return "direction(" + strconv.Itoa(int(d)) + ")"
}

// Limit is what a user sets on one direction of one group.
type Limit struct {
	Rate       rate.Rate
	Thresholds rate.Thresholds // zero value: rate.Default(Rate)
	Loopback   bool            // police loopback traffic too
	NoDrop     bool            // mark only, never drop
	NoPace     bool            // no pacing assist: police only (the seed's behaviour)
	// MinInflight overrides the default protection of TCP flows with few
	// packets out (0: DefaultMinInflight). For experiments.
	MinInflight uint32
}

// Policy constants of the data plane, outside the user's Limit.
const (
	// SmallPacketBytes: packets below it (SYN, pure ACK, small RPC headers)
	// are dropped only past the small-packet threshold.
	SmallPacketBytes = 120
	// DefaultMinInflight: an egress TCP flow with fewer packets out is never
	// dropped, or it would wait for its probe timer.
	DefaultMinInflight = 2
)

// Stats are a limit's counters, summed over CPUs.
type Stats struct {
	Bytes        uint64 `json:"bytes"`
	Packets      uint64 `json:"packets"`
	Marked       uint64 `json:"marked"`
	CWR          uint64 `json:"cwr"`
	Dropped      uint64 `json:"dropped"`
	DroppedBytes uint64 `json:"dropped_bytes"`
}

// Entry is one limit as found in the pinned state.
type Entry struct {
	CgroupID uint64
	Cgroup   string // path relative to the cgroup2 mount; "" if the group is gone
	Dir      Direction
	Limit    Limit
	Stats    Stats
}

// Manager is a handle on HBM's pinned state, holding its lock.
type Manager struct {
	// Warnings collects what went wrong without failing the operation.
	Warnings []string

	dir    string
	lock   *os.File
	limits *ebpf.Map
	queues *ebpf.Map
	stats  *ebpf.Map
	flows  *ebpf.Map // pacing assist's per-socket state (sk_storage)
	rx     *ebpf.Map // ingress per-socket state (sk_storage)
}

const (
	mapLimits = "hbm_limit_map"
	mapQueues = "hbm_queue_map"
	mapStats  = "hbm_stats_map"
	mapFlows  = "hbm_flow_map"
	mapRx     = "hbm_rx_map"
	linksDir  = "links"
)

// ErrNotFound means no limit is set for that group and direction.
var ErrNotFound = errors.New("no limit set")

// Open opens (creating if needed) the pinned state under dir, mounting bpffs
// on dir's parent if nothing is mounted there, and takes dir's lock so that
// concurrent hbm invocations apply one at a time.
func Open(dir string) (*Manager, error) {
	if err := ensureBPFFS(filepath.Dir(dir)); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, linksDir), 0o700); err != nil {
		return nil, fmt.Errorf("create pin directory %s: %w", dir, err)
	}
	return open(dir, unix.LOCK_EX, true)
}

// OpenReadOnly opens existing state for reading, sharing the lock with other
// readers. It returns (nil, nil) when no state was ever pinned.
func OpenReadOnly(dir string) (*Manager, error) {
	if !Pinned(dir) {
		return nil, nil
	}
	return open(dir, unix.LOCK_SH, false)
}

// noLimits reports whether no limit is attached under dir.
func noLimits(dir string) bool {
	links, err := os.ReadDir(filepath.Join(dir, linksDir))
	return err == nil && len(links) == 0
}

// Pinned reports whether HBM state was ever pinned under dir.
func Pinned(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, mapLimits))
	return err == nil
}

func open(dir string, how int, create bool) (*Manager, error) {
	lock, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("open pin directory: %w", err)
	}
	if err := flock(lock, how); err != nil {
		lock.Close()
		return nil, err
	}
	m := &Manager{dir: dir, lock: lock}
	spec, err := loadEgress()
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("load embedded BPF object: %w", err)
	}
	for name, dst := range map[string]**ebpf.Map{mapLimits: &m.limits, mapQueues: &m.queues, mapStats: &m.stats, mapFlows: &m.flows, mapRx: &m.rx} {
		ms := spec.Maps[name].Copy()
		var mp *ebpf.Map
		if create {
			ms.Pinning = ebpf.PinByName
			mp, err = ebpf.NewMapWithOptions(ms, ebpf.MapOptions{PinPath: dir})
			if errors.Is(err, ebpf.ErrMapIncompatible) && noLimits(dir) {
				// Left by another hbm version with no limit set: nothing
				// depends on it, so replace it.
				os.Remove(filepath.Join(dir, name))
				mp, err = ebpf.NewMapWithOptions(ms, ebpf.MapOptions{PinPath: dir})
			}
		} else {
			mp, err = ebpf.LoadPinnedMap(filepath.Join(dir, name), &ebpf.LoadPinOptions{ReadOnly: true})
		}
		if err != nil {
			m.Close()
			if errors.Is(err, ebpf.ErrMapIncompatible) {
				return nil, fmt.Errorf("map %s pinned in %s is from an incompatible hbm version: %w (remove the old limits first)", name, dir, err)
			}
			return nil, fmt.Errorf("open map %s in %s: %w", name, dir, err)
		}
		*dst = mp
	}
	return m, nil
}

// flock takes the lock, waiting at most 10 s for another hbm to finish.
func flock(f *os.File, how int) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("lock %s: %w", f.Name(), err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("lock %s: another hbm has held it for 10s", f.Name())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ensureBPFFS mounts bpffs at dir unless one is there, and checks it is writable.
func ensureBPFFS(dir string) error {
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return fmt.Errorf("bpffs: statfs %s: %w", dir, err)
	}
	if fs.Type != unix.BPF_FS_MAGIC {
		if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
			return fmt.Errorf("bpffs not mounted at %s and mounting it failed: %w", dir, err)
		}
	}
	if err := unix.Access(dir, unix.W_OK); err != nil {
		return fmt.Errorf("bpffs at %s is not writable: %w", dir, err)
	}
	return nil
}

// Close releases the maps and the lock. Pinned state stays.
func (m *Manager) Close() error {
	for _, mp := range []*ebpf.Map{m.limits, m.queues, m.stats, m.flows, m.rx} {
		if mp != nil {
			mp.Close()
		}
	}
	if m.lock != nil {
		return m.lock.Close()
	}
	return nil
}

func (m *Manager) linkPath(id uint64, d Direction) string {
	return filepath.Join(m.dir, linksDir, fmt.Sprintf("%d-%s", id, d))
}

func key(id uint64, d Direction) egressHbmKey { return egressHbmKey{CgroupId: id, Dir: uint32(d)} }

// config turns a Limit on direction d into the data plane's configuration.
func config(d Direction, l Limit) (egressHbmConfig, error) {
	if l.Rate < rate.Min || l.Rate > rate.Max {
		return egressHbmConfig{}, fmt.Errorf("rate %v out of range [%v, %v]", l.Rate, rate.Min, rate.Max)
	}
	th := l.Thresholds
	if th == (rate.Thresholds{}) {
		th = rate.Default(l.Rate)
	}
	if err := th.Validate(); err != nil {
		return egressHbmConfig{}, err
	}
	whole, frac := l.Rate.NsPerByte()
	c := egressHbmConfig{
		RateBps:       uint64(l.Rate),
		NsPerByte:     whole,
		NsPerByteFrac: frac,
		BurstNs:       uint64(th.Burst),
		MarkNs:        uint64(th.Mark),
		DropLargeNs:   uint64(th.DropLarge),
		DropSmallNs:   uint64(th.DropSmall),
		MaxBacklogNs:  uint64(th.MaxBacklog),
		SmallPktBytes: SmallPacketBytes,
		MinInflight:   DefaultMinInflight,
		PaceTargetNs:  int64(th.Pace),
	}
	if l.MinInflight != 0 {
		c.MinInflight = l.MinInflight
	}
	if l.Loopback {
		c.Flags |= flagLoopback
	}
	if l.NoDrop {
		c.Flags |= flagNoDrop
	}
	if !l.NoPace {
		c.Flags |= flagPace // egress: pacing assist; ingress: receive-window assist
	}
	return c, nil
}

const (
	flagLoopback = 1 << 0 // HBM_F_LOOPBACK
	flagNoDrop   = 1 << 1 // HBM_F_NO_DROP
	flagPace     = 1 << 2 // HBM_F_PACE
	flagRelease  = 1 << 3 // HBM_F_RELEASE
)

func limitOf(c egressHbmConfig) Limit {
	return Limit{
		Rate: rate.Rate(c.RateBps),
		Thresholds: rate.Thresholds{
			Burst:      time.Duration(c.BurstNs),
			Pace:       time.Duration(c.PaceTargetNs),
			Mark:       time.Duration(c.MarkNs),
			DropLarge:  time.Duration(c.DropLargeNs),
			DropSmall:  time.Duration(c.DropSmallNs),
			MaxBacklog: time.Duration(c.MaxBacklogNs),
		},
		Loopback: c.Flags&flagLoopback != 0,
		NoDrop:   c.Flags&flagNoDrop != 0,
		NoPace:   c.Flags&flagPace == 0,
	}
}

// Set limits direction d of group g. On a group already limited it changes
// the configuration in place: the program stays attached and the queue and
// counters carry on. On a new group the configuration is written before the
// program is attached, so no packet passes unlimited.
func (m *Manager) Set(g cgroup.Group, d Direction, l Limit) error {
	if d != Egress && d != Ingress {
		return fmt.Errorf("unknown direction %v", d)
	}
	cfg, err := config(d, l)
	if err != nil {
		return err
	}
	k := key(g.ID, d)
	lp := m.linkPath(g.ID, d)
	if _, err := os.Stat(lp); err == nil {
		if err := m.checkLink(lp); err == nil {
			if err := m.limits.Update(&k, &cfg, ebpf.UpdateAny); err != nil {
				return fmt.Errorf("update limit of %s: %w", g, err)
			}
			return nil
		}
		// A link whose group was removed and recreated under the same id
		// cannot happen (ids are not reused); a defunct one is replaced.
		m.remove(g.ID, d)
	}
	m.gc()

	zeroStats := make([]egressHbmStats, ebpf.MustPossibleCPU())
	if err := m.stats.Update(&k, zeroStats, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("create counters for %s: %w", g, err)
	}
	if err := m.queues.Update(&k, &egressHbmQueue{}, ebpf.UpdateAny); err != nil {
		m.remove(g.ID, d)
		return fmt.Errorf("create queue for %s: %w", g, err)
	}
	if err := m.limits.Update(&k, &cfg, ebpf.UpdateAny); err != nil {
		m.remove(g.ID, d)
		return fmt.Errorf("write limit for %s: %w", g, err)
	}
	if err := m.attach(g, d, lp); err != nil {
		m.remove(g.ID, d)
		return err
	}
	if l.NoPace {
		return nil
	}
	// Connections opened before the limit get the assist too. Without it
	// they are still limited, by marks and drops only: not fatal.
	if _, _, err := m.walkSockets(g, d, false); err != nil {
		m.Warnings = append(m.Warnings, fmt.Sprintf("existing connections of %s %v not assisted: %v", g, d, err))
	}
	return nil
}

// attach loads an instance of direction d's program for g and attaches it
// with a link pinned at lp (egress: with its pacing assist's sockops program,
// pinned at lp-sockops).
func (m *Manager) attach(g cgroup.Group, d Direction, lp string) error {
	load, prog, hook := loadEgress, "hbm_egress", ebpf.AttachCGroupInetEgress
	if d == Ingress {
		load, prog, hook = loadIngress, "hbm_ingress", ebpf.AttachCGroupInetIngress
	}
	spec, err := load()
	if err != nil {
		return fmt.Errorf("load embedded BPF object: %w", err)
	}
	if err := spec.Variables["hbm_cgroup_id"].Set(g.ID); err != nil {
		return fmt.Errorf("set program constant: %w", err)
	}
	if err := spec.Variables["hbm_cgroup_level"].Set(level(g)); err != nil {
		return fmt.Errorf("set program constant: %w", err)
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{
		MapReplacements: m.shared(spec),
	})
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return fmt.Errorf("kernel rejected the %v program: %+v", d, ve)
		}
		return fmt.Errorf("load %v program: %w", d, err)
	}
	defer coll.Close()
	l, err := link.AttachCgroup(link.CgroupOptions{Path: g.Dir, Attach: hook, Program: coll.Programs[prog]})
	if err != nil {
		return fmt.Errorf("attach %v program to %s: %w", d, g.Dir, err)
	}
	defer l.Close()
	if err := l.Pin(lp); err != nil {
		return fmt.Errorf("pin link for %s at %s: %w", g, lp, err)
	}
	sp := coll.Programs["hbm_sockops"]
	if d == Ingress {
		sp = coll.Programs["hbm_rx_sockops"]
	}
	if sp == nil {
		return nil
	}
	sl, err := link.AttachCgroup(link.CgroupOptions{Path: g.Dir, Attach: ebpf.AttachCGroupSockOps, Program: sp})
	if err != nil {
		return fmt.Errorf("attach sockops program to %s: %w", g.Dir, err)
	}
	defer sl.Close()
	if err := sl.Pin(lp + "-sockops"); err != nil {
		return fmt.Errorf("pin link: %w", err)
	}
	return nil
}

// shared returns the pinned maps that spec's object declares, by name.
func (m *Manager) shared(spec *ebpf.CollectionSpec) map[string]*ebpf.Map {
	all := map[string]*ebpf.Map{mapLimits: m.limits, mapQueues: m.queues, mapStats: m.stats, mapFlows: m.flows, mapRx: m.rx}
	out := map[string]*ebpf.Map{}
	for name, mp := range all {
		if _, ok := spec.Maps[name]; ok {
			out[name] = mp
		}
	}
	return out
}

// checkLink reports whether the pinned link at lp is still attached to a group.
func (m *Manager) checkLink(lp string) error {
	l, err := link.LoadPinnedLink(lp, nil)
	if err != nil {
		return err
	}
	defer l.Close()
	info, err := l.Info()
	if err != nil {
		return err
	}
	if cg := info.Cgroup(); cg == nil || cg.CgroupId == 0 {
		return errors.New("link is defunct: its cgroup was removed")
	}
	return nil
}

// Unset removes the limit on direction d of g and everything it pinned.
func (m *Manager) Unset(g cgroup.Group, d Direction) error {
	k := key(g.ID, d)
	var c egressHbmConfig
	_, statErr := os.Stat(m.linkPath(g.ID, d))
	if err := m.limits.Lookup(&k, &c); err != nil && statErr != nil {
		return fmt.Errorf("%s %v: %w", g, d, ErrNotFound)
	}
	m.release(g, d, k, c)
	if err := m.remove(g.ID, d); err != nil {
		return err
	}
	m.gc()
	return nil
}

// release turns an assisted limit into a pass-through, then lifts what its
// assist set on sockets before the links go: the egress pacing caps or the
// ingress receive-window clamps. The socket walker reaches idle sockets too;
// a socket in a namespace no process of the group uses any more keeps its
// last cap or clamp until it closes (or, if it is active, until its next
// ACK or segment runs the releasing sockops program).
func (m *Manager) release(g cgroup.Group, d Direction, k egressHbmKey, c egressHbmConfig) {
	if c.Flags&flagPace == 0 {
		return
	}
	c.Flags |= flagRelease
	if err := m.limits.Update(&k, &c, ebpf.UpdateExist); err != nil {
		return
	}
	if _, _, err := m.walkSockets(g, d, true); err != nil {
		m.Warnings = append(m.Warnings, fmt.Sprintf("%v assists of %s not all lifted: %v", d, g, err))
	}
}

// remove detaches and unpins the link of (id, d), then deletes its map
// entries. Detaching first means no packet sees a half-removed limit.
func (m *Manager) remove(id uint64, d Direction) error {
	lp := m.linkPath(id, d)
	if l, err := link.LoadPinnedLink(lp, nil); err == nil {
		err = l.Unpin()
		l.Close()
		if err != nil {
			return fmt.Errorf("unpin %s: %w", lp, err)
		}
	} else if _, statErr := os.Stat(lp); statErr == nil {
		if err := os.Remove(lp); err != nil {
			return fmt.Errorf("remove %s: %w", lp, err)
		}
	}
	if l, err := link.LoadPinnedLink(lp+"-sockops", nil); err == nil {
		l.Unpin()
		l.Close()
	}
	k := key(id, d)
	for _, mp := range []*ebpf.Map{m.limits, m.queues, m.stats} {
		if err := mp.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete state of cgroup id %d %v: %w", id, d, err)
		}
	}
	return nil
}

// gc removes the limits of groups that no longer exist.
func (m *Manager) gc() { m.Prune() }

// Prune removes the limits of groups that no longer exist and returns them.
func (m *Manager) Prune() ([]Entry, error) {
	entries, err := m.List()
	if err != nil {
		return nil, err
	}
	var gone []Entry
	for _, e := range entries {
		if e.Cgroup != "" {
			continue
		}
		if err := m.remove(e.CgroupID, e.Dir); err != nil {
			return gone, err
		}
		gone = append(gone, e)
	}
	return gone, nil
}

// List returns every limit, sorted by cgroup path then direction.
func (m *Manager) List() ([]Entry, error) {
	var (
		k   egressHbmKey
		c   egressHbmConfig
		out []Entry
	)
	it := m.limits.Iterate()
	for it.Next(&k, &c) {
		st, err := m.readStats(k)
		if err != nil {
			return nil, err
		}
		e := Entry{CgroupID: k.CgroupId, Dir: Direction(k.Dir), Limit: limitOf(c), Stats: st}
		if g, err := cgroup.PathOf(k.CgroupId); err == nil {
			e.Cgroup = g.Rel
		}
		out = append(out, e)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list limits: %w", err)
	}
	sortEntries(out)
	return out, nil
}

func (m *Manager) readStats(k egressHbmKey) (Stats, error) {
	var per []egressHbmStats
	if err := m.stats.Lookup(&k, &per); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return Stats{}, nil
		}
		return Stats{}, fmt.Errorf("read counters of cgroup id %d: %w", k.CgroupId, err)
	}
	var s Stats
	for _, p := range per {
		s.Bytes += p.Bytes
		s.Packets += p.Packets
		s.Marked += p.Marked
		s.CWR += p.Cwr
		s.Dropped += p.Dropped
		s.DroppedBytes += p.DroppedBytes
	}
	return s, nil
}

func sortEntries(es []Entry) {
	slices.SortFunc(es, func(a, b Entry) int {
		// Removed groups ("") sort last.
		return cmp.Or(
			compareBool(a.Cgroup == "", b.Cgroup == ""),
			strings.Compare(a.Cgroup, b.Cgroup),
			cmp.Compare(a.CgroupID, b.CgroupID),
			cmp.Compare(a.Dir, b.Dir))
	})
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}
