package netlab

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Qdisc is a root qdisc SetQdisc installs: TBF, HTB or NoQdisc.
type Qdisc interface {
	install(h *netlink.Handle, link netlink.Link) error
}

// TBF is a token bucket filter: Rate bits/s, a bucket of Burst bytes
// (0: TBFBurst(Rate)), a queue of Limit bytes (0: 10 ms at Rate plus the
// bucket, as tc's `latency 10ms`).
type TBF struct {
	Rate         uint64
	Burst, Limit int
}

// TBFBurst is the default tbf bucket: 2 ms at the rate and at least 64 KB,
// so one full GSO packet fits (a smaller bucket makes tbf segment every GSO
// packet in software, and bursts of back-to-back segments then overflow it).
func TBFBurst(rateBps uint64) int { return max(int(rateBps/8*2/1000), 64<<10) }

// HTB is an htb qdisc. With one class and no ports it is the whole
// device's limit (class 1:1, the default); otherwise each class carries the
// TCP/UDP destination ports listed (u32 filters), and the rest is
// unlimited. A class with Leaf set has a tbf of that rate under an
// unlimited htb class instead of an htb rate (tbf per class). A class
// with Parent set is a child of an earlier class: it is guaranteed its Rate
// and borrows what its siblings leave of the parent's up to its Ceil, as
// `tc class add ... parent 1:P htb rate R ceil C prio N` sets it up.
type HTB struct{ Classes []HTBClass }

// HTBClass is one class of an HTB.
type HTBClass struct {
	Rate  uint64 // bits/s
	Ports []int  // destination ports classified into it
	Leaf  *TBF   // a tbf under the class instead of the class's own rate
	// Ceil is the most the class may take by borrowing from its parent
	// (0: Rate, no borrowing).
	Ceil uint64
	// Prio orders borrowing among siblings (htb's prio, 0 first, to 7).
	Prio int
	// Parent is the class's parent: 0 the root, i+1 Classes[i] (which
	// must come before it and carry no ports of its own).
	Parent int
}

// NoQdisc removes the root qdisc (back to the default).
type NoQdisc struct{}

// SetQdisc replaces the root qdisc of dev in namespace ns with q.
func SetQdisc(ns, dev string, q Qdisc) error {
	return withLink(ns, dev, func(nh *netlink.Handle, link netlink.Link) error {
		if err := clearRoot(nh, link); err != nil {
			return fmt.Errorf("netlab: clear qdisc on %s in %s: %w", dev, ns, err)
		}
		if err := q.install(nh, link); err != nil {
			return fmt.Errorf("netlab: qdisc on %s in %s: %w", dev, ns, err)
		}
		return nil
	})
}

// SetQdisc is SetQdisc on host's interface on link.
func (l *Lab) SetQdisc(host, link string, q Qdisc) error {
	h := l.hosts[host]
	if h == nil || h.Dev[link] == "" {
		return fmt.Errorf("netlab: no host %q on link %q", host, link)
	}
	return SetQdisc(h.NS, h.Dev[link], q)
}

func clearRoot(nh *netlink.Handle, link netlink.Link) error {
	qs, err := nh.QdiscList(link)
	if err != nil {
		return err
	}
	for _, q := range qs {
		if q.Attrs().Parent == netlink.HANDLE_ROOT && q.Type() != "noqueue" {
			if err := nh.QdiscDel(q); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
				return err
			}
		}
	}
	return nil
}

func (NoQdisc) install(*netlink.Handle, netlink.Link) error { return nil }

func (t TBF) qdisc(link netlink.Link, parent, handle uint32) *netlink.Tbf {
	burst := t.Burst
	if burst <= 0 {
		burst = TBFBurst(t.Rate)
	}
	limit := t.Limit
	if limit <= 0 {
		limit = int(t.Rate/8/100) + burst // 10 ms
	}
	bytesPS := t.Rate / 8
	return &netlink.Tbf{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: link.Attrs().Index, Parent: parent, Handle: handle},
		Rate:       bytesPS,
		Limit:      uint32(limit),
		Buffer:     netlink.Xmittime(bytesPS, uint32(burst)),
	}
}

func (t TBF) install(nh *netlink.Handle, link netlink.Link) error {
	if t.Rate == 0 {
		return errors.New("tbf: no rate")
	}
	return nh.QdiscReplace(t.qdisc(link, netlink.HANDLE_ROOT, netlink.MakeHandle(1, 0)))
}

func (h HTB) install(nh *netlink.Handle, link netlink.Link) error {
	if len(h.Classes) == 0 {
		return errors.New("htb: no classes")
	}
	idx := link.Attrs().Index
	root := netlink.MakeHandle(1, 0)
	single := len(h.Classes) == 1 && len(h.Classes[0].Ports) == 0 && h.Classes[0].Leaf == nil
	q := netlink.NewHtb(netlink.QdiscAttrs{LinkIndex: idx, Parent: netlink.HANDLE_ROOT, Handle: root})
	if single {
		q.Defcls = 1
	}
	if err := nh.QdiscReplace(q); err != nil {
		return err
	}
	for i, c := range h.Classes {
		minor := uint16(10 + i)
		if single {
			minor = 1
		}
		id := netlink.MakeHandle(1, minor)
		rate := c.Rate
		if c.Leaf != nil {
			rate = 100e9 // unlimited: the tbf under it limits
		}
		ceil := max(c.Ceil, rate)
		parent := root
		if c.Parent > 0 {
			if c.Parent > i || h.Classes[c.Parent-1].Leaf != nil || len(h.Classes[c.Parent-1].Ports) > 0 {
				return fmt.Errorf("htb class %d: parent %d is not an earlier class without ports or leaf", i, c.Parent)
			}
			parent = netlink.MakeHandle(1, uint16(10+c.Parent-1))
		}
		if c.Prio < 0 || c.Prio > 7 {
			return fmt.Errorf("htb class %d: prio %d out of range 0..7", i, c.Prio)
		}
		cl := netlink.NewHtbClass(netlink.ClassAttrs{LinkIndex: idx, Parent: parent, Handle: id},
			netlink.HtbClassAttrs{Rate: rate, Ceil: ceil, Prio: uint32(c.Prio)})
		if err := nh.ClassAdd(cl); err != nil {
			return fmt.Errorf("htb class 1:%d: %w", minor, err)
		}
		if c.Leaf != nil {
			if err := nh.QdiscAdd(c.Leaf.qdisc(link, id, netlink.MakeHandle(minor, 0))); err != nil {
				return fmt.Errorf("tbf under 1:%d: %w", minor, err)
			}
		}
		for _, port := range c.Ports {
			// tc's "match ip dport PORT 0xffff" and "match ip6 dport
			// PORT 0xffff": the low half of the word after an
			// option-less IPv4 header (20 bytes) or an IPv6 header
			// without extensions (40). One priority per protocol (tc
			// keeps one protocol per priority).
			for i, fam := range []struct {
				proto uint16
				off   int32
			}{{unix.ETH_P_IP, 20}, {unix.ETH_P_IPV6, 40}} {
				f := &netlink.U32{
					FilterAttrs: netlink.FilterAttrs{LinkIndex: idx, Parent: root, Priority: uint16(1 + i), Protocol: fam.proto},
					ClassId:     id,
					Sel: &netlink.TcU32Sel{
						Flags: netlink.TC_U32_TERMINAL,
						Keys:  []netlink.TcU32Key{{Mask: 0xffff, Val: uint32(port), Off: fam.off}},
					},
				}
				if err := nh.FilterAdd(f); err != nil {
					return fmt.Errorf("u32 filter dport %d (protocol %#x): %w", port, fam.proto, err)
				}
			}
		}
	}
	return nil
}

// QdiscStats are a root qdisc's counters.
type QdiscStats struct {
	Kind                       string
	Drops, Overlimits, Backlog uint64
}

// ReadQdisc returns the root qdisc of dev in namespace ns.
func ReadQdisc(ns, dev string) (QdiscStats, error) {
	var st QdiscStats
	err := withLink(ns, dev, func(nh *netlink.Handle, link netlink.Link) error {
		qs, err := nh.QdiscList(link)
		if err != nil {
			return fmt.Errorf("netlab: qdiscs of %s in %s: %w", dev, ns, err)
		}
		for _, q := range qs {
			a := q.Attrs()
			if a.Parent != netlink.HANDLE_ROOT {
				continue
			}
			st.Kind = q.Type()
			if a.Statistics != nil && a.Statistics.Queue != nil {
				st.Drops = uint64(a.Statistics.Queue.Drops)
				st.Overlimits = uint64(a.Statistics.Queue.Overlimits)
				st.Backlog = uint64(a.Statistics.Queue.Backlog)
			}
			return nil
		}
		return fmt.Errorf("netlab: no root qdisc on %s in %s", dev, ns)
	})
	return st, err
}

// RouteCC sets the congestion control of every route of host (congctl; ""
// removes the setting). DCTCP needs it at the receiving end too: a Linux
// listener negotiates ECN with a DCTCP (ECT-marked) SYN only if its own
// congestion control needs ECN, and a child namespace may not make HBM's
// BPF dctcp its default.
func (l *Lab) RouteCC(host, cc string) error {
	h := l.hosts[host]
	if h == nil {
		return fmt.Errorf("netlab: no host %q", host)
	}
	nh, err := handle(h.NS)
	if err != nil {
		return err
	}
	defer nh.Close()
	for _, dev := range h.Dev {
		link, err := nh.LinkByName(dev)
		if err != nil {
			return fmt.Errorf("netlab: %s in %s: %w", dev, h.NS, err)
		}
		for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
			routes, err := nh.RouteListFiltered(fam, &netlink.Route{LinkIndex: link.Attrs().Index, Table: unix.RT_TABLE_MAIN},
				netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
			if err != nil {
				return fmt.Errorf("netlab: routes of %s in %s: %w", dev, h.NS, err)
			}
			for _, r := range routes {
				if r.Dst == nil || r.Dst.IP.IsLinkLocalUnicast() || r.Dst.IP.IsMulticast() {
					continue
				}
				if r.Congctl == cc {
					continue
				}
				r.Congctl = cc
				if err := nh.RouteReplace(&r); err != nil {
					return fmt.Errorf("netlab: route %s congctl %q in %s: %w", r.Dst, cc, h.NS, err)
				}
			}
		}
	}
	return nil
}
