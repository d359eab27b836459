package integration

// The handshake gate for clients (bpf/include/gate.h, gate_active): a client
// in a limited group that opens a connection per request sends its request
// in TCP's unpaced first flight, which only the gate can hold. Before it,
// such clients were held by refusals of those first flights (8 clients
// uploading 10 KB each into 100mbit: 16,000 refusals in 10 s for 12,000
// connections, 1.03-1.06 of the limit on the wire, the P99 twice htb's).

import (
	"io"
	"net"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

func TestEgressClientGate(t *testing.T) {
	l := egSetup(t, "cligate")
	group, dir := l.cgroup(t, "c")
	l.set(t, group, "100mbit")
	// IPv4 and IPv6: the gate knows a server by its address (hbm_peer_map).
	few := uploads{rate: "100mbit", bps: 100e6, clients: 8, size: 10 << 10}
	t.Run("ipv4", func(t *testing.T) { clientGate(t, l, group, dir, l.tb.ReceiverIP4, few) })
	t.Run("ipv6", func(t *testing.T) { clientGate(t, l, group, dir, l.tb.ReceiverIP6, few) })
	// A crowd of clients whose uploads wait long for their turn: their
	// group admits them at the gate, each upload leaving whole once its
	// SYN went (share.h, admit_steer; pacing.h, admit_fits, by the
	// server's record). Paced instead, every cap swung with the crowd's
	// count: ab's P99 1.45x its median (120 against 83 ms; htb 98).
	t.Run("crowd", func(t *testing.T) {
		l.set(t, group, "200mbit")
		clientGate(t, l, group, dir, l.tb.ReceiverIP4, uploads{rate: "200mbit", bps: 200e6, clients: 64, size: 30 << 10, tail: 1.25})
	})
}

// uploads is one clientGate cell: clients uploading size bytes on a
// connection each into a group limited to rate (bps bits/s); tail, if not 0,
// the most an upload's P99 may be over its median (dial to the server's
// answer).
type uploads struct {
	rate          string
	bps           float64
	clients, size int
	tail          float64
}

// clientGate runs u.clients clients uploading u.size bytes on a connection
// each from group (directory dir, limited to u.rate) to a sink at ip, and
// checks that the gate, not refusals, holds them.
func clientGate(t *testing.T, l *egLab, group, dir string, ip net.IP, u uploads) {
	var (
		rate    = u.rate
		clients = u.clients
		size    = u.size
	)
	const dur = 4 * time.Second

	// A sink in the receiver: read the upload, answer a byte, close.
	var ln net.Listener
	inNamedNetns(t, l.tb.ReceiverNS, func() error {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
		return err
	})
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				io.Copy(io.Discard, c)
				c.Write([]byte{1})
			}()
		}
	}()
	addr := ln.Addr().String()

	// Warm the gate's clock (it measures the kernel's tick over the first
	// connections of a limited group) and the peer's RTT.
	var mu sync.Mutex
	var conns, failed int
	var firstErr error
	var took []time.Duration
	upload := func(buf []byte, until time.Time) {
		one := make([]byte, 1)
		for time.Now().Before(until) {
			began := time.Now()
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err == nil {
				c.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err = c.Write(buf); err == nil {
					c.(*net.TCPConn).CloseWrite()
					_, err = io.ReadFull(c, one)
				}
				c.Close()
			}
			mu.Lock()
			if err != nil {
				failed++
				if firstErr == nil {
					firstErr = err
				}
			} else {
				conns++
				took = append(took, time.Since(began))
			}
			mu.Unlock()
		}
	}
	// clients goroutines, each on a thread of its own in the sender's
	// namespace (a socket takes its thread's), the process in the group.
	run := func(d time.Duration) {
		h, err := netns.GetFromName(l.tb.SenderNS)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		until := time.Now().Add(d)
		var wg sync.WaitGroup
		for i := 0; i < clients; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				runtime.LockOSThread() // not unlocked: the thread dies with its netns
				if err := netns.Set(h); err != nil {
					mu.Lock()
					failed++
					firstErr = err
					mu.Unlock()
					return
				}
				upload(make([]byte, size), until)
			}()
		}
		wg.Wait()
	}
	inCgroup(t, dir, func() { run(time.Second) })
	if failed > 0 {
		t.Fatalf("warm-up: %d connections failed (first: %v)", failed, firstErr)
	}
	conns, took = 0, nil
	before := egressCounters(t, l, group)
	tx0, err := l.tb.SenderTxBytes()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	inCgroup(t, dir, func() { run(dur) })
	secs := time.Since(start).Seconds()
	tx1, err := l.tb.SenderTxBytes()
	if err != nil {
		t.Fatal(err)
	}
	d := egressCounters(t, l, group).Sub(before)
	wire := float64(tx1-tx0) * 8 / secs / u.bps
	t.Logf("%d clients x %d B uploads, a connection each, into %s: %d connections (%.0f/s), %d failed, wire %.3f of the limit; hbm: dropped %d, gated %d, cwr %d",
		clients, size, rate, conns, float64(conns)/secs, failed, wire, d.Dropped, d.Gated, d.CWR)
	// The gate holds a first SYN, never a connection.
	if failed > 0 {
		t.Errorf("%d connections failed (first: %v)", failed, firstErr)
	}
	if conns < 200 {
		t.Fatalf("only %d uploads in %.1f s", conns, secs)
	}
	if wire < 0.80 || wire > 1.10 {
		t.Errorf("wire %.3f of the limit, want [0.80, 1.10]", wire)
	}
	if d.Gated == 0 {
		t.Errorf("no connection gated: the client's first flights were not held at the handshake")
	}
	// Held at the handshake, the first flights need no refusal (before: 1.3
	// refusals per connection).
	if d.Dropped*20 > uint64(conns) {
		t.Errorf("%d refusals for %d connections, want at most one per 20", d.Dropped, conns)
	}
	if u.tail > 0 && len(took) > 0 {
		slices.Sort(took)
		p50, p99 := took[len(took)/2], took[len(took)*99/100]
		t.Logf("upload P50 %v, P99 %v (%.2fx)", p50, p99, float64(p99)/float64(p50))
		if float64(p99) > u.tail*float64(p50) {
			t.Errorf("upload P99 %v is %.2fx the median %v, want at most %.2fx", p99, float64(p99)/float64(p50), p50, u.tail)
		}
	}
}
