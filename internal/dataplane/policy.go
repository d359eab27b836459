package dataplane

import (
	"fmt"
	"strconv"
	"time"

	"github.com/hbm-dev/hbm/internal/rate"
)

// Direction is the traffic direction a limit applies to.
type Direction uint32

const (
	Egress  = Direction(hbmHbmDirHBM_DIR_EGRESS)
	Ingress = Direction(hbmHbmDirHBM_DIR_INGRESS)
)

// Directions lists both, in the order commands report them.
var Directions = []Direction{Egress, Ingress}

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
	Rate rate.Rate // the guarantee
	// Ceil is the most the group may take: above Rate it borrows what the
	// other groups under the nearest limited group above it leave unused,
	// in proportion to their rates (bpf/include/lend.h). 0 or Rate: no
	// borrowing, the rate is a hard cap.
	Ceil rate.Rate
	// Priority: which borrowers get what is left first (bpf/include/lend.h).
	Priority   Priority
	Thresholds rate.Thresholds // zero value: rate.Default(Rate)
	Loopback   bool            // police loopback traffic too
	NoDrop     bool            // mark only, never drop
	NoPace     bool            // no assist (egress pacing, ingress window clamp): police only
	// MinInflight overrides the default protection of TCP flows with few
	// packets out (0: DefaultMinInflight). For experiments.
	MinInflight uint32
}

// Priority is a borrowing class: what a lender leaves goes to latency
// groups first and batch groups last; each keeps its guarantee.
type Priority uint32

const (
	PriorityNormal  = Priority(hbmHbmPrioHBM_PRIO_NORMAL)
	PriorityLatency = Priority(hbmHbmPrioHBM_PRIO_LATENCY)
	PriorityBatch   = Priority(hbmHbmPrioHBM_PRIO_BATCH)
)

// Priorities are the names of the priorities, as the CLI and the daemon's
// file spell them.
var Priorities = map[string]Priority{"latency": PriorityLatency, "normal": PriorityNormal, "batch": PriorityBatch}

func (p Priority) String() string {
	for n, q := range Priorities {
		if q == p {
			return n
		}
	}
	return "priority(" + strconv.Itoa(int(p)) + ")"
}

// ParsePriority reads a priority's name.
func ParsePriority(s string) (Priority, error) {
	if p, ok := Priorities[s]; ok {
		return p, nil
	}
	return 0, fmt.Errorf("priority %q: want latency, normal or batch", s)
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

// MaxLevel is the deepest cgroup level a limit may be set on: the data plane
// keeps one flow-count slot per level in each socket's state.
var MaxLevel = len(hbmHbmSock{}.Seen) - 1

// Stats are a limit's counters, summed over CPUs.
type Stats struct {
	Bytes        uint64 `json:"bytes"`
	Packets      uint64 `json:"packets"`
	Marked       uint64 `json:"marked"`
	CWR          uint64 `json:"cwr"`
	Dropped      uint64 `json:"dropped"`
	DroppedBytes uint64 `json:"dropped_bytes"`
	// Gated counts new connections whose handshake waited out the
	// group's backlog (bpf/include/gate.h).
	Gated uint64 `json:"gated"`
	// InForce is the rate in force: Limit.Rate, or more while the group
	// borrows (up to Limit.Ceil).
	InForce rate.Rate `json:"rate_in_force_bps"`
}

// Validate checks a limit without touching any state.
func (l Limit) Validate() error {
	_, err := config(l)
	return err
}

// config turns a Limit into the data plane's configuration.
func config(l Limit) (hbmHbmConfig, error) {
	if l.Rate < rate.Min || l.Rate > rate.Max {
		return hbmHbmConfig{}, fmt.Errorf("rate %v out of range [%v, %v]", l.Rate, rate.Min, rate.Max)
	}
	if l.Ceil != 0 && l.Ceil < l.Rate {
		return hbmHbmConfig{}, fmt.Errorf("ceiling %v below the rate %v", l.Ceil, l.Rate)
	}
	if l.Ceil > rate.Max {
		return hbmHbmConfig{}, fmt.Errorf("ceiling %v above %v", l.Ceil, rate.Max)
	}
	th := l.Thresholds
	if th == (rate.Thresholds{}) {
		th = rate.Default(l.Rate)
	}
	if err := th.Validate(); err != nil {
		return hbmHbmConfig{}, err
	}
	whole, frac := l.Rate.NsPerByte()
	c := hbmHbmConfig{
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
	if l.Ceil > l.Rate {
		c.CeilBps = uint64(l.Ceil)
	}
	if l.Priority > PriorityBatch {
		return hbmHbmConfig{}, fmt.Errorf("unknown %v", l.Priority)
	}
	c.Priority = hbmHbmPrio(l.Priority)
	if l.Loopback {
		c.Flags |= hbmHbmFlagsHBM_F_LOOPBACK
	}
	if l.NoDrop {
		c.Flags |= hbmHbmFlagsHBM_F_NO_DROP
	}
	if !l.NoPace {
		c.Flags |= hbmHbmFlagsHBM_F_PACE
	}
	return c, nil
}

func limitOf(c hbmHbmConfig) Limit {
	var ceil rate.Rate
	if c.CeilBps > c.RateBps {
		ceil = rate.Rate(c.CeilBps)
	}
	return Limit{
		Rate:     rate.Rate(c.RateBps),
		Ceil:     ceil,
		Priority: Priority(c.Priority),
		Thresholds: rate.Thresholds{
			Burst:      time.Duration(c.BurstNs),
			Pace:       time.Duration(c.PaceTargetNs),
			Mark:       time.Duration(c.MarkNs),
			DropLarge:  time.Duration(c.DropLargeNs),
			DropSmall:  time.Duration(c.DropSmallNs),
			MaxBacklog: time.Duration(c.MaxBacklogNs),
		},
		Loopback:    c.Flags&hbmHbmFlagsHBM_F_LOOPBACK != 0,
		NoDrop:      c.Flags&hbmHbmFlagsHBM_F_NO_DROP != 0,
		NoPace:      c.Flags&hbmHbmFlagsHBM_F_PACE == 0,
		MinInflight: c.MinInflight,
	}
}

func key(id uint64, d Direction) hbmHbmKey { return hbmHbmKey{CgroupId: id, Dir: hbmHbmDir(d)} }
