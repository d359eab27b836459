package analyze

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/hbm-dev/hbm/internal/analyze/schema"
	"github.com/hbm-dev/hbm/internal/testbed"
	"github.com/hbm-dev/hbm/internal/testutil"
)

// inNS runs fn on an OS thread switched into the named network namespace.
// Sockets fn creates stay in that namespace; the thread is never handed
// back to the scheduler (its goroutine exits locked), so no other goroutine
// ever runs in the namespace by accident.
func inNS(name string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread ends with the goroutine
		ns, err := netns.GetFromName(name)
		if err != nil {
			errc <- fmt.Errorf("open netns %s: %w", name, err)
			return
		}
		defer ns.Close()
		if err := netns.Set(ns); err != nil {
			errc <- fmt.Errorf("enter netns %s: %w", name, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// capturer writes what an AF_PACKET socket on one interface sees into a
// pcap file: headers only, as tcpdump -s 128 would.
type capturer struct {
	h        *pcapgo.EthernetHandle
	f        *os.File
	w        *pcapgo.Writer
	done     chan error
	stopping atomic.Bool
}

const snapLen = 128

func startCapture(dev, path string) (*capturer, error) {
	h, err := pcapgo.NewEthernetHandle(dev)
	if err != nil {
		return nil, fmt.Errorf("AF_PACKET capture on %s: %w", dev, err)
	}
	f, err := os.Create(path)
	if err != nil {
		h.Close()
		return nil, err
	}
	c := &capturer{h: h, f: f, w: pcapgo.NewWriterNanos(f), done: make(chan error, 1)}
	if err := c.w.WriteFileHeader(snapLen, layers.LinkTypeEthernet); err != nil {
		h.Close()
		f.Close()
		return nil, err
	}
	go func() {
		for {
			data, ci, err := h.ReadPacketData()
			if err != nil {
				if c.stopping.Load() { // the read that Close ended
					err = nil
				}
				c.done <- err
				return
			}
			if len(data) > snapLen {
				data = data[:snapLen]
			}
			ci.CaptureLength = len(data)
			ci.InterfaceIndex = 0
			if err := c.w.WritePacket(gopacket.CaptureInfo{Timestamp: ci.Timestamp, CaptureLength: ci.CaptureLength, Length: ci.Length}, data); err != nil {
				c.done <- err
				return
			}
		}
	}()
	return c, nil
}

// stop ends the capture and reports the packets the socket dropped (its
// receive buffer overflowed): a capture with drops misses segments.
func (c *capturer) stop() (drops uint32, err error) {
	st, serr := c.h.Stats()
	c.stopping.Store(true)
	c.h.Close()
	err = <-c.done
	if cerr := c.f.Close(); err == nil {
		err = cerr
	}
	if serr != nil {
		return 0, serr
	}
	return st.Drops, err
}

// TestCaptureEndToEnd captures a known transfer between two namespaces
// (through a 200 Mbit/s tbf, so the capture keeps up) and checks the
// analysis against what the application sent and what the sender's kernel
// says: bytes, retransmissions (TCP_INFO's total_retrans) and the RTT.
//
// Not checked: CE counts against a limiter's marks. This kernel's tc has no
// marking qdisc here (no red, fq_codel, codel, pie), and HBM's own marks
// would need the data plane in the test; see the README.
func TestCaptureEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs root and network namespaces")
	}
	testutil.RequireRoot(t)
	testutil.RequireCommand(t, "ip")
	testutil.RequireCommand(t, "tc")
	tb, err := testbed.New("analyze", testbed.Options{})
	if err != nil {
		testutil.Missing(t, "network namespaces", err)
	}
	t.Cleanup(func() {
		if err := tb.Close(); err != nil {
			t.Errorf("testbed close: %v", err)
		}
	})
	if err := tb.SetTBF(200e6, 0); err != nil {
		t.Fatal(err)
	}

	const total = 8<<20 + 12345 // bytes the application sends
	var ln net.Listener
	if err := inNS(tb.ReceiverNS, func() (err error) {
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
	var (
		capt *capturer
		conn *net.TCPConn
	)
	if err := inNS(tb.SenderNS, func() error {
		var err error
		if capt, err = startCapture(tb.SenderDev, path); err != nil {
			return err
		}
		d := net.Dialer{Timeout: 10 * time.Second}
		c, err := d.Dial("tcp4", ln.Addr().String())
		if err != nil {
			return err
		}
		conn = c.(*net.TCPConn)
		return nil
	}); err != nil {
		if capt != nil {
			capt.stop()
		}
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			capt.stop()
		}
	})
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
	info, err := tcpInfo(conn)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the last ACKs and FINs into the capture
	drops, err := capt.stop()
	stopped = true
	if err != nil {
		t.Fatal(err)
	}
	if drops > 0 {
		t.Fatalf("the capture socket dropped %d packets: the analysis cannot be checked", drops)
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
	t.Logf("%s -> %s: %d bytes, %d retransmissions (%d spurious), RTT min %.0f p50 %.0f p99 %.0f µs (%d samples), %d rounds; TCP_INFO total_retrans %d, rtt %d µs",
		c.Src, c.Dst, c.Bytes, c.Retransmissions, c.SpuriousRetransmissions, c.RTT.Min, c.RTT.P50, c.RTT.P99, c.RTT.Samples, len(c.Rounds), info.Total_retrans, info.Rtt)

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

func tcpInfo(c *net.TCPConn) (*unix.TCPInfo, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var info *unix.TCPInfo
	var serr error
	if err := rc.Control(func(fd uintptr) {
		info, serr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil {
		return nil, err
	}
	return info, serr
}
