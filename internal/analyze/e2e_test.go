package analyze

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/hbm-dev/hbm/internal/analyze/schema"
	"github.com/hbm-dev/hbm/internal/netlab/labtest"
	"github.com/hbm-dev/hbm/internal/testutil"
	"github.com/hbm-dev/hbm/internal/workload"
)

// impair is a tcx program on one interface that acts on every nth packet of
// at least 1000 bytes (data, never a handshake or a pure ACK): it drops it,
// or CE-marks it if it is ECN-capable. It counts what it did, so the test
// knows the truth the capture must show. It stands in for a limiter: no
// qdisc of these kernels marks CE or drops on purpose (no red, fq_codel,
// netem or gact), and HBM's data plane is not what this test is about.
type impair struct {
	m    *ebpf.Map // one impairState
	prog *ebpf.Program
	link link.Link
}

type impairState struct {
	Done  uint64 // packets dropped or marked
	Every uint32
	Seen  uint32
}

func newImpair(dev string, every uint32, drop bool, attach ebpf.AttachType) (*impair, error) {
	ifc, err := net.InterfaceByName(dev) // in the caller's namespace
	if err != nil {
		return nil, err
	}
	im := &impair{}
	im.m, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 16, MaxEntries: 1})
	if err != nil {
		return nil, err
	}
	if err := im.m.Put(uint32(0), impairState{Every: every}); err != nil {
		im.Close()
		return nil, err
	}
	act := asm.Instructions{ // drop
		asm.Mov.Imm(asm.R3, 1),
		asm.StoreXAdd(asm.R7, asm.R3, asm.DWord),
		asm.Mov.Imm(asm.R0, 2), // TCX_DROP
		asm.Return(),
	}
	if !drop {
		act = asm.Instructions{
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.FnSkbEcnSetCe.Call(),
			asm.JEq.Imm(asm.R0, 0, "pass"), // not ECN-capable: not marked
			asm.Mov.Imm(asm.R3, 1),
			asm.StoreXAdd(asm.R7, asm.R3, asm.DWord),
			asm.Ja.Label("pass"),
		}
	}
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),              // skb
		asm.LoadMem(asm.R2, asm.R6, 0, asm.Word), // skb->len
		asm.JLT.Imm(asm.R2, 1000, "pass"),
		asm.StoreImm(asm.R10, -4, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, im.m.FD()),
		asm.Mov.Reg(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.LoadMem(asm.R3, asm.R7, 8, asm.Word), // every
		asm.JEq.Imm(asm.R3, 0, "pass"),
		asm.LoadMem(asm.R4, asm.R7, 12, asm.Word), // seen
		asm.Add.Imm(asm.R4, 1),
		asm.StoreMem(asm.R7, 12, asm.R4, asm.Word),
		asm.Mod.Reg32(asm.R4, asm.R3),
		asm.JNE.Imm(asm.R4, 0, "pass"),
	}
	insns = append(insns, act...)
	insns = append(insns,
		asm.Mov.Imm(asm.R0, 0).WithSymbol("pass"), // TCX_PASS
		asm.Return(),
	)
	im.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, Instructions: insns, License: "GPL"})
	if err != nil {
		im.Close()
		return nil, fmt.Errorf("impair program: %w", err)
	}
	im.link, err = link.AttachTCX(link.TCXOptions{Interface: ifc.Index, Program: im.prog, Attach: attach})
	if err != nil {
		im.Close()
		return nil, fmt.Errorf("impair attach to %s: %w", dev, err)
	}
	return im, nil
}

func (im *impair) done() (uint64, error) {
	var st impairState
	err := im.m.Lookup(uint32(0), &st)
	return st.Done, err
}

func (im *impair) Close() {
	if im.link != nil {
		im.link.Close()
	}
	if im.prog != nil {
		im.prog.Close()
	}
	im.m.Close()
}

// TestCaptureEndToEnd captures a known transfer between two namespaces
// (through a 200 Mbit/s tbf, so the capture keeps up), with every 37th data
// packet lost on the way into the receiver (after the capture point) and
// every 7th CE-marked on the way out of the sender (before it), and checks
// the analysis against what the application sent and what the kernel and
// the impairments say: bytes, retransmissions (the sender's TCP_INFO
// total_retrans), the RTT, CE marks and their ECE echoes.
func TestCaptureEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs root and network namespaces")
	}
	testutil.RequireRoot(t)
	testutil.RequireCommand(t, "ip")
	testutil.RequireCommand(t, "tc")
	tb := labtest.Pair(t)
	// tbf with a queue long enough that it never drops (TSQ lets a socket
	// queue up to tcp_limit_output_bytes, and a packet lost before the
	// capture point would take a mark with it), and a bucket larger than a
	// GSO packet, which tbf would otherwise split into segments that each
	// carry the one mark.
	if out, err := exec.Command("tc", "-n", tb.SenderNS, "qdisc", "replace", "dev", tb.SenderDev, "root",
		"tbf", "rate", "200mbit", "burst", "256k", "limit", "32mb").CombinedOutput(); err != nil {
		t.Fatalf("tc tbf: %v: %s", err, out)
	}
	if err := tb.SetECN(true); err != nil {
		t.Fatal(err)
	}
	var marker, dropper *impair
	if err := inNetnsRestore(tb.SenderNS, func() (err error) {
		marker, err = newImpair(tb.SenderDev, 7, false, ebpf.AttachTCXEgress)
		return err
	}); err != nil {
		testutil.Missing(t, "tcx BPF programs", err)
	}
	t.Cleanup(marker.Close)
	if err := inNetnsRestore(tb.ReceiverNS, func() (err error) {
		dropper, err = newImpair(tb.ReceiverDev, 37, true, ebpf.AttachTCXIngress)
		return err
	}); err != nil {
		testutil.Missing(t, "tcx BPF programs", err)
	}
	t.Cleanup(dropper.Close)

	const total = 8<<20 + 12345 // bytes the application sends
	var ln net.Listener
	if err := inNetnsRestore(tb.ReceiverNS, func() (err error) {
		ln, err = net.Listen("tcp4", net.JoinHostPort(tb.ReceiverIP4.String(), "0"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var (
		wg       sync.WaitGroup
		received int64
		recvErr  error
	)
	wg.Add(1)
	go func() { // the receiver: read everything, then close
		defer wg.Done()
		ln.(*net.TCPListener).SetDeadline(time.Now().Add(30 * time.Second))
		c, err := ln.Accept()
		if err != nil {
			recvErr = err
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second))
		received, recvErr = io.Copy(io.Discard, c)
	}()

	path := filepath.Join(t.TempDir(), "transfer.pcap")
	capt, err := StartCapture(tb.SenderNS, tb.SenderDev, path, 128, 0)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			capt.Stop()
		}
	})
	var conn *net.TCPConn
	if err := inNetnsRestore(tb.SenderNS, func() error {
		d := net.Dialer{Timeout: 10 * time.Second}
		c, err := d.Dial("tcp4", ln.Addr().String())
		if err != nil {
			return err
		}
		conn = c.(*net.TCPConn)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	conn.SetDeadline(time.Now().Add(30 * time.Second))
	if n, err := conn.Write(make([]byte, total)); err != nil || n != total {
		t.Fatalf("wrote %d of %d bytes: %v", n, total, err)
	}
	if err := conn.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, conn); err != nil { // until the receiver closes
		t.Fatal(err)
	}
	wg.Wait()
	if recvErr != nil || received != total {
		t.Fatalf("receiver got %d of %d bytes: %v", received, total, recvErr)
	}
	info, err := workload.TCPInfo(conn)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the last ACKs and FINs into the capture
	cst, err := capt.Stop()
	stopped = true
	if err != nil {
		t.Fatal(err)
	}
	if cst.Dropped > 0 || cst.Full || cst.Packets == 0 {
		t.Fatalf("capture: %+v: the analysis cannot be checked", cst)
	}

	marks, err := marker.done()
	if err != nil {
		t.Fatal(err)
	}
	drops, err := dropper.done()
	if err != nil {
		t.Fatal(err)
	}
	if st, err := tb.QdiscStats(); err != nil || st.Drops != 0 {
		t.Fatalf("tbf dropped packets before the capture point: %+v, %v", st, err)
	}
	if dir := os.Getenv("HBM_ANALYZE_KEEP"); dir != "" { // keep the capture to look at
		if b, err := os.ReadFile(path); err == nil {
			os.WriteFile(filepath.Join(dir, "transfer.pcap"), b, 0o644)
		}
	}
	rep, err := File(path)
	if err != nil {
		t.Fatal(err)
	}
	src := conn.LocalAddr().String()
	var c *schema.Connection
	for i := range rep.Connections {
		if rep.Connections[i].Src == src {
			c = &rep.Connections[i]
		}
	}
	if c == nil {
		t.Fatalf("no connection from %s in the capture: %+v", src, rep.Connections)
	}
	t.Logf("%s -> %s: %d bytes, %d retransmissions (%d spurious), RTT min %.0f p50 %.0f p99 %.0f µs (%d samples), %d rounds, CE %d, ECE %d; "+
		"TCP_INFO total_retrans %d, rtt %d µs; %d packets marked, %d dropped",
		c.Src, c.Dst, c.Bytes, c.Retransmissions, c.SpuriousRetransmissions, c.RTT.Min, c.RTT.P50, c.RTT.P99, c.RTT.Samples, len(c.Rounds), c.CE, c.ECE,
		info.Total_retrans, info.Rtt, marks, drops)
	if drops == 0 || info.Total_retrans == 0 {
		t.Errorf("%d packets dropped, %d retransmitted: the test lost nothing to check retransmissions with", drops, info.Total_retrans)
	}
	if marks == 0 || c.CE != int64(marks) {
		t.Errorf("analysis counts %d CE-marked segments, the marker marked %d", c.CE, marks)
	}
	if c.ECE == 0 {
		t.Errorf("no ECE echoes of %d CE marks", c.CE)
	}

	if diff := float64(c.Bytes-total) / total; diff > 0.001 || diff < -0.001 {
		t.Errorf("analysis says %d bytes, the application sent %d (%.3f%% off, want within 0.1%%)", c.Bytes, total, 100*diff)
	}
	if c.Dst != ln.Addr().String() {
		t.Errorf("dst %s, want the listener %s", c.Dst, ln.Addr())
	}
	if c.Retransmissions != int64(info.Total_retrans) {
		t.Errorf("analysis counts %d retransmissions, the sender's TCP_INFO total_retrans %d", c.Retransmissions, info.Total_retrans)
	}
	if c.RTT.Samples == 0 || !(c.RTT.Min > 0) || !(c.RTT.P99 < 100e3) || c.RTT.Min > c.RTT.P99 {
		t.Errorf("RTT %+v: want samples between 0 and 100 ms", c.RTT)
	}
	if len(c.Rounds) < 2 {
		t.Errorf("%d rounds for %d bytes", len(c.Rounds), total)
	}
	var sent int64
	for _, r := range c.Rounds {
		sent += r.SentBytes
	}
	if sent < total {
		t.Errorf("rounds sent %d bytes in all, less than the %d delivered", sent, total)
	}
}
