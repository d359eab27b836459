package rate

import (
	"fmt"
	"time"
)

// Thresholds place a limit's marks and drops in time: how long the virtual
// queue stands at the configured rate, not how many bytes it holds. Byte
// thresholds fit one rate only: the upstream sample's 60 KB mark threshold is
// one 64 KB GSO packet, so at 200 Mbit/s it marks nearly every packet.
type Thresholds struct {
	Burst      time.Duration // credit an idle group keeps: how far it may run ahead
	Pace       time.Duration // pacing assist: backlog the group's flow rate steers to
	Mark       time.Duration // backlog above which packets are marked (CE or cwr ramp)
	DropLarge  time.Duration // backlog above which large packets are dropped
	DropSmall  time.Duration // backlog above which all packets are dropped
	MaxBacklog time.Duration // backlog bound: recovery after a flood stays bounded
}

// Defaults, in time at the configured rate. The queue is virtual: these set
// how far a group may run ahead of its rate for a moment, not a delay any
// packet sees. Measured on veth with 3 cubic/bbr flows at 200 Mbit/s and
// 1 Gbit/s: burst and mark below ~2 ms waste 2-5% of the rate (the credit
// caps while flows back off); see docs/design.md.
const (
	DefaultBurst     = 4 * time.Millisecond
	DefaultPace      = 2 * time.Millisecond
	DefaultMark      = 4 * time.Millisecond
	DefaultDropLarge = 12 * time.Millisecond
	DefaultDropSmall = 24 * time.Millisecond
)

// Incast protection (a mark-only ingress limit set just below the link, `hbm
// set / --ingress RATE --no-drop`): mark and burst default to these instead.
// The virtual queue sees only what the switch let through, at most the link
// rate, so it fills at the link rate less the limit (a tenth of it at 90%):
// marks must start after a few packets, or the switch's shallow buffer (128
// KB is 0.5 ms at 2 Gbit/s) overflows first. Measured on the incast
// testbed: docs/design.md.
const (
	IncastMark  = 200 * time.Microsecond
	IncastBurst = 200 * time.Microsecond
)

// Incast gives t the incast-protection defaults (IncastMark, IncastBurst)
// for mark and burst where the user gave none (markGiven, burstGiven): what
// `--ingress RATE --no-drop` means, from the command line, the configuration
// file and the Kubernetes annotations alike.
func (t Thresholds) Incast(markGiven, burstGiven bool) Thresholds {
	if !markGiven {
		t.Mark = IncastMark
	}
	if !burstGiven {
		t.Burst = IncastBurst
	}
	return t
}

// Floors in bytes: at low rates a time threshold would sit below one packet
// (1 ms at 8 kbit/s is one byte), so each threshold also holds this many
// full-size packets, and the drop thresholds leave room above the mark one.
const (
	FrameBytes      = 1500 + LinkHdrBytes // a full-size Ethernet frame, as the data plane charges it
	burstFloorPkts  = 2
	markFloorPkts   = 4
	dropLargeMargin = 8 // packets between mark and drop-large, at least
	dropSmallMargin = 4 // packets between drop-large and drop-small, at least
)

// Default returns the default thresholds at r.
func Default(r Rate) Thresholds {
	return Thresholds{
		Burst:     DefaultBurst,
		Pace:      DefaultPace,
		Mark:      DefaultMark,
		DropLarge: DefaultDropLarge,
		DropSmall: DefaultDropSmall,
	}.Fit(r)
}

// Fit raises each threshold to its floor at r, orders them (burst, mark <=
// drop-large <= drop-small) and derives MaxBacklog when unset.
func (t Thresholds) Fit(r Rate) Thresholds {
	pkt := func(n uint64) time.Duration { return time.Duration(r.CostExact(n*FrameBytes) + 0.5) }
	t.Burst = max(t.Burst, pkt(burstFloorPkts))
	t.Mark = max(t.Mark, pkt(markFloorPkts))
	t.Pace = min(t.Pace, t.Mark)
	t.DropLarge = max(t.DropLarge, t.Mark+pkt(dropLargeMargin))
	t.DropSmall = max(t.DropSmall, t.DropLarge+pkt(dropSmallMargin))
	if t.MaxBacklog < t.DropSmall {
		t.MaxBacklog = 2 * t.DropSmall
	}
	return t
}

// Validate rejects thresholds the data plane cannot use.
func (t Thresholds) Validate() error {
	const limit = time.Hour // keeps every ns sum far from overflow
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"burst", t.Burst}, {"pace", t.Pace}, {"mark", t.Mark}, {"drop-large", t.DropLarge}, {"drop-small", t.DropSmall}, {"max backlog", t.MaxBacklog}} {
		if d.v < 0 || d.v > limit {
			return fmt.Errorf("%s threshold %v out of range [0, %v]", d.name, d.v, limit)
		}
	}
	if !(t.Mark <= t.DropLarge && t.DropLarge <= t.DropSmall && t.DropSmall <= t.MaxBacklog) {
		return fmt.Errorf("thresholds out of order: want mark (%v) <= drop-large (%v) <= drop-small (%v)", t.Mark, t.DropLarge, t.DropSmall)
	}
	return nil
}
