package cc

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
)

// marker CE-marks a percentage of the ECN-capable packets leaving an
// interface: a tcx egress program calling bpf_skb_ecn_set_ce with
// probability pct/100, pct read from a one-element array. It stands in for
// HBM's marking, which this package does not depend on; no qdisc of these
// kernels marks CE.
type marker struct {
	pct  *ebpf.Map
	prog *ebpf.Program
	link link.Link
}

func newMarker(ifindex int) (*marker, error) {
	m := &marker{}
	var err error
	m.pct, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		return nil, err
	}
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1), // skb
		asm.StoreImm(asm.R10, -4, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, m.pct.FD()),
		asm.Mov.Reg(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.LoadMem(asm.R7, asm.R0, 0, asm.Word), // pct
		asm.FnGetPrandomU32.Call(),
		asm.Mod.Imm32(asm.R0, 100),
		asm.JGE.Reg(asm.R0, asm.R7, "pass"),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.FnSkbEcnSetCe.Call(),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("pass"), // TCX_PASS
		asm.Return(),
	}
	m.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, Instructions: insns, License: "GPL"})
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("marker program: %w", err)
	}
	m.link, err = link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: m.prog, Attach: ebpf.AttachTCXEgress})
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("marker attach: %w", err)
	}
	return m, nil
}

func (m *marker) set(pct uint32) error { return m.pct.Put(uint32(0), pct) }

func (m *marker) Close() {
	if m.link != nil {
		m.link.Close()
	}
	if m.prog != nil {
		m.prog.Close()
	}
	m.pct.Close()
}

// snapshot is the sender's DCTCP state.
func senderState(p *pair) (*Socket, error) {
	socks, err := Sockets()
	if err != nil {
		return nil, err
	}
	s := findSocket(socks, cookieOf(p.client))
	if s == nil {
		return nil, fmt.Errorf("sender socket not found")
	}
	return s, nil
}

// Alpha follows the marked fraction: it rises to about 1 when everything is
// marked and decays without marks; with a fraction marked, the receiver's
// CE state machine echoes about that fraction (not one mark per window, as
// a classic ECN receiver latching ECE until CWR would).
func TestAlphaUnderMarking(t *testing.T) {
	isolate(t)
	if _, err := Install(DCTCP); err != nil {
		t.Fatal(err)
	}
	inNetns(t, func() error {
		lo, err := net.InterfaceByName("lo")
		if err != nil {
			return err
		}
		mk, err := newMarker(lo.Index)
		if err != nil {
			return err
		}
		defer mk.Close()

		p, err := newPair(DCTCP, DCTCP)
		if err != nil {
			return err
		}
		defer p.Close()

		phase := func(pct uint32, rounds int) (*Socket, float64, error) {
			if err := mk.set(pct); err != nil {
				return nil, 0, err
			}
			before, err := senderState(p)
			if err != nil {
				return nil, 0, err
			}
			if err := p.transfer(256<<10, rounds); err != nil {
				return nil, 0, err
			}
			after, err := senderState(p)
			if err != nil {
				return nil, 0, err
			}
			delivered := after.Delivered - before.Delivered
			echoed := after.DeliveredCE - before.DeliveredCE
			frac := float64(echoed) / float64(max(delivered, 1))
			t.Logf("marking %3d%%: alpha %.3f, CE echoed for %d of %d packets (%.2f), cwnd %d, ssthresh %d, retrans %d",
				pct, after.Alpha, echoed, delivered, frac, after.Cwnd, after.Ssthresh, after.Retrans)
			return after, frac, nil
		}

		s, frac, err := phase(100, 300)
		if err != nil {
			return err
		}
		if s.Alpha < 0.8 || frac < 0.9 {
			return fmt.Errorf("all packets marked: alpha %.3f, echoed fraction %.2f; want alpha >= 0.8, fraction >= 0.9", s.Alpha, frac)
		}
		if s.Ssthresh > 1<<20 {
			return fmt.Errorf("all packets marked but ssthresh never set (%d): no window reduction", s.Ssthresh)
		}

		s, frac, err = phase(0, 300)
		if err != nil {
			return err
		}
		if s.Alpha > 0.2 || frac != 0 {
			return fmt.Errorf("no marking: alpha %.3f, echoed fraction %.2f; want alpha <= 0.2, fraction 0", s.Alpha, frac)
		}

		s, frac, err = phase(25, 600)
		if err != nil {
			return err
		}
		if frac < 0.1 || frac > 0.45 || s.Alpha < 0.05 || s.Alpha > 0.6 {
			return fmt.Errorf("25%% marked: alpha %.3f, echoed fraction %.2f; want both near 0.25", s.Alpha, frac)
		}
		if s.Retrans != 0 {
			return fmt.Errorf("%d retransmissions: marking alone must not cause loss", s.Retrans)
		}
		return nil
	})
}

// memberOffset is the byte offset of a member of a kernel struct.
func memberOffset(structName, member string) (int16, error) {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return 0, err
	}
	var st *btf.Struct
	if err := spec.TypeByName(structName, &st); err != nil {
		return 0, err
	}
	for _, m := range st.Members {
		if m.Name == member {
			return int16(m.Offset.Bytes()), nil
		}
		// anonymous unions (__bpf_md_ptr)
		if u, ok := m.Type.(*btf.Union); ok && m.Name == "" {
			for _, um := range u.Members {
				if um.Name == member {
					return int16(m.Offset.Bytes() + um.Offset.Bytes()), nil
				}
			}
		}
	}
	return 0, fmt.Errorf("%s has no member %s", structName, member)
}

// dropper loses the next n data packets (longer than 1000 bytes) sent over
// loopback, as the network would: a tcx egress program tags them with a
// mark and records the sender's cwnd at the first, a tcx ingress program
// drops what carries the mark. (Dropping at egress would not do: the
// sender sees the local drop and treats it as congestion, not loss.)
type dropper struct {
	state *ebpf.Map // [0] = drops to do, [1] = cwnd at the first drop
	progs []*ebpf.Program
	links []link.Link
}

const dropMark = 0x484d

func newDropper(ifindex int) (*dropper, error) {
	skOff, err := memberOffset("__sk_buff", "sk")
	if err != nil {
		return nil, err
	}
	markOff, err := memberOffset("__sk_buff", "mark")
	if err != nil {
		return nil, err
	}
	d := &dropper{}
	d.state, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		return nil, err
	}
	egress := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R2, asm.R6, 0, asm.Word), // skb->len
		asm.JLT.Imm(asm.R2, 1000, "pass"),
		asm.StoreImm(asm.R10, -4, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, d.state.FD()),
		asm.Mov.Reg(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.LoadMem(asm.R3, asm.R7, 0, asm.Word),
		asm.JEq.Imm(asm.R3, 0, "pass"),
		asm.Sub.Imm(asm.R3, 1),
		asm.StoreMem(asm.R7, 0, asm.R3, asm.Word),
		asm.Mov.Imm(asm.R3, dropMark),
		asm.StoreMem(asm.R6, markOff, asm.R3, asm.Word),
		// cwnd of the sending socket, once
		asm.LoadMem(asm.R3, asm.R7, 4, asm.Word),
		asm.JNE.Imm(asm.R3, 0, "pass"),
		asm.LoadMem(asm.R1, asm.R6, skOff, asm.DWord),
		asm.JEq.Imm(asm.R1, 0, "pass"),
		asm.FnSkFullsock.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.Mov.Reg(asm.R1, asm.R0),
		asm.FnTcpSock.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.LoadMem(asm.R3, asm.R0, 0, asm.Word), // bpf_tcp_sock.snd_cwnd
		asm.StoreMem(asm.R7, 4, asm.R3, asm.Word),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("pass"), // TCX_PASS
		asm.Return(),
	}
	ingress := asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, markOff, asm.Word),
		asm.Mov.Imm(asm.R0, 0), // TCX_PASS
		asm.JNE.Imm(asm.R2, dropMark, "out"),
		asm.Mov.Imm(asm.R0, 2), // TCX_DROP
		asm.Return().WithSymbol("out"),
	}
	for _, p := range []struct {
		insns  asm.Instructions
		attach ebpf.AttachType
	}{{egress, ebpf.AttachTCXEgress}, {ingress, ebpf.AttachTCXIngress}} {
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, Instructions: p.insns, License: "GPL"})
		if err != nil {
			d.Close()
			return nil, fmt.Errorf("dropper program: %w", err)
		}
		d.progs = append(d.progs, prog)
		l, err := link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: prog, Attach: p.attach})
		if err != nil {
			d.Close()
			return nil, fmt.Errorf("dropper attach: %w", err)
		}
		d.links = append(d.links, l)
	}
	return d, nil
}

func (d *dropper) Close() {
	for _, l := range d.links {
		l.Close()
	}
	for _, p := range d.progs {
		p.Close()
	}
	d.state.Close()
}

// A loss halves the window as Reno does, whatever alpha: with alpha near 0
// an alpha-based cut would leave ssthresh at cwnd.
func TestLossHalves(t *testing.T) {
	isolate(t)
	if _, err := Install(DCTCP); err != nil {
		t.Fatal(err)
	}
	inNetns(t, func() error {
		lo, err := net.InterfaceByName("lo")
		if err != nil {
			return err
		}
		dr, err := newDropper(lo.Index)
		if err != nil {
			return err
		}
		defer dr.Close()
		p, err := newPair(DCTCP, DCTCP)
		if err != nil {
			return err
		}
		defer p.Close()
		// No marks: alpha decays to about 0; cwnd grows.
		if err := p.transfer(1<<20, 200); err != nil {
			return err
		}
		s, err := senderState(p)
		if err != nil {
			return err
		}
		t.Logf("before the loss: alpha %.3f cwnd %d ssthresh %d", s.Alpha, s.Cwnd, s.Ssthresh)
		if s.Alpha > 0.1 {
			return fmt.Errorf("alpha %.3f after 200 unmarked transfers, want about 0", s.Alpha)
		}
		if err := dr.state.Put(uint32(0), uint64(1)); err != nil { // one drop, cwnd unknown
			return err
		}
		ext0 := tcpExt()
		if err := p.transfer(1<<20, 20); err != nil {
			return err
		}
		events := tcpExtEvents(ext0, tcpExt())
		var st [2]uint32
		if err := dr.state.Lookup(uint32(0), &st); err != nil {
			return err
		}
		after, err := senderState(p)
		if err != nil {
			return err
		}
		t.Logf("loss at cwnd %d: ssthresh %d, retrans %d, alpha %.3f, cwnd now %d; TCP events: %s", st[1], after.Ssthresh, after.Retrans, after.Alpha, after.Cwnd, events)
		if st[0] != 0 || st[1] == 0 {
			return fmt.Errorf("dropper did not drop (%v)", st)
		}
		if after.Retrans == 0 {
			return fmt.Errorf("no retransmission after a drop")
		}
		want := max(st[1]/2, 2)
		if after.Ssthresh > want+1 {
			return fmt.Errorf("ssthresh %d after a loss at cwnd %d, want about %d (halved); TCP events: %s", after.Ssthresh, st[1], want, events)
		}
		return nil
	})
}

// tcpExt reads the TcpExt counters of the calling thread's network
// namespace (/proc/thread-self: /proc/self/net is the main thread's).
func tcpExt() map[string]int64 {
	b, err := os.ReadFile("/proc/thread-self/net/netstat")
	if err != nil {
		return nil
	}
	lines := strings.Split(string(b), "\n")
	out := map[string]int64{}
	for i := 0; i+1 < len(lines); i += 2 {
		names, vals := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(names) == 0 || names[0] != "TcpExt:" || len(vals) != len(names) {
			continue
		}
		for j := 1; j < len(names); j++ {
			v, _ := strconv.ParseInt(vals[j], 10, 64)
			out[names[j]] = v
		}
	}
	return out
}

// tcpExtEvents lists the loss-recovery counters that moved between a and b.
func tcpExtEvents(a, b map[string]int64) string {
	var ev []string
	for _, k := range []string{"TCPTimeouts", "TCPLossProbes", "TCPLossProbeRecovery", "TCPSackRecovery", "TCPRenoRecovery",
		"TCPFullUndo", "TCPPartialUndo", "TCPDSACKUndo", "TCPLossUndo", "TCPSpuriousRTOs", "TCPSackRecoveryFail",
		"TCPLostRetransmit", "TCPFastRetrans", "TCPSlowStartRetrans", "TCPDSACKRecv", "TCPSpuriousRtxHostQueues"} {
		if d := b[k] - a[k]; d != 0 {
			ev = append(ev, fmt.Sprintf("%s %d", k, d))
		}
	}
	if len(ev) == 0 {
		return "none"
	}
	return strings.Join(ev, ", ")
}
