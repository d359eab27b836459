package analyze

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/hbm-dev/hbm/internal/netlab/labtest"
)

// The socket filter and the parse together, in the kernel: datagrams sent
// over IPv4 and IPv6 between two namespaces are counted on the receiver's
// interface as the frames they are, each family toward its own port, and
// a third port nobody counts is not.
func TestRatesOnInterface(t *testing.T) {
	p := labtest.Pair(t)
	const n, size = 50, 1000
	ports := []uint16{40001, 40002}
	r, err := StartRates(p.ReceiverNS, p.ReceiverDev, ports, time.Now(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	send := func(ip net.IP, port int) {
		t.Helper()
		err := inNetnsRestore(p.SenderNS, func() error {
			// Unconnected: no listener answers, and a connected
			// socket would fail on the port-unreachable errors.
			c, err := net.ListenPacket("udp", ":0")
			if err != nil {
				return err
			}
			defer c.Close()
			to, err := net.ResolveUDPAddr("udp", net.JoinHostPort(ip.String(), strconv.Itoa(port)))
			if err != nil {
				return err
			}
			b := make([]byte, size)
			for i := 0; i < n; i++ {
				if _, err := c.WriteTo(b, to); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("send to %s port %d: %v", ip, port, err)
		}
	}
	send(p.ReceiverIP4, 40001)
	send(p.ReceiverIP6, 40002)
	send(p.ReceiverIP6, 40003)
	time.Sleep(200 * time.Millisecond) // the reads catch up
	bytes, _, st, err := r.Stop()
	if err != nil {
		t.Fatal(err)
	}
	sum := func(bins []uint64) (s uint64) {
		for _, b := range bins {
			s += b
		}
		return s
	}
	for _, c := range []struct {
		port uint16
		hdr  uint64 // Ethernet, IP and UDP headers
	}{{40001, 14 + 20 + 8}, {40002, 14 + 40 + 8}} {
		if got, want := sum(bytes[c.port]), uint64(n*(size+c.hdr)); got != want {
			t.Errorf("port %d: %d bytes counted, want %d (%d datagrams of %d)", c.port, got, want, n, size)
		}
	}
	if _, ok := bytes[40003]; ok {
		t.Errorf("port 40003 (not asked for) counted: %v", bytes[40003])
	}
	if st.Dropped != 0 {
		t.Errorf("%d packets dropped by the count's socket", st.Dropped)
	}
}
