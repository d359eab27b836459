package analyze

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/hbm-dev/hbm/internal/rate"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Rates counts, on one interface, the frame bytes of the TCP and UDP
// packets it receives (IPv4, and IPv6 whose first header is TCP or UDP),
// per destination port, in windows of a fixed width from an origin: the
// rate of each traffic class over time as the wire delivered it (what
// `tcpdump -w` and a script summing frame lengths per port and window would
// give), without writing a capture. Packets the
// interface sends are not counted. A GSO packet (a veth carries the
// sender's TSO packets whole) counts as the segments a NIC would send it
// as, each with its own Ethernet, IP and TCP or UDP headers, as HBM's
// policer and htb charge it: counted once, 5-10 KB packets read 1.5-3%
// below what a wire carries.
type Rates struct {
	fd       int
	origin   int64 // Unix ns
	width    int64 // ns
	ports    map[uint16][]uint64
	first    map[uint16]int64 // Unix ns of the first packet of over 1000 bytes
	done     chan error
	stopping atomic.Bool
	unsized  atomic.Int64 // packets lost to a GSO type the header cannot carry
}

// RatesStats is what a rate count saw.
type RatesStats struct {
	Packets int64 // counted
	Dropped int64 // lost by the socket (receive buffer full, or a GSO type it could not describe)
}

// StartRates counts the packets interface dev of network namespace ns
// ("" for the caller's) receives toward ports, in windows of width from
// origin (earlier packets are not counted).
func StartRates(ns, dev string, ports []uint16, origin time.Time, width time.Duration) (*Rates, error) {
	if width <= 0 {
		return nil, errors.New("rates: window width must be positive")
	}
	fd, err := packetSocketIn(ns, dev)
	if err != nil {
		return nil, fmt.Errorf("rates on %s: %w", dev, err)
	}
	// A GSO packet's segment size comes with it (struct virtio_net_hdr
	// before the frame).
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("rates on %s: PACKET_VNET_HDR: %w", dev, err)
	}
	// Only what is counted comes up, and only its headers: a socket read
	// per packet is the count's cost, on the CPUs the run measures.
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: uint16(len(ratesFilter)), Filter: &ratesFilter[0]}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("rates on %s: socket filter: %w", dev, err)
	}
	r := &Rates{fd: fd, origin: origin.UnixNano(), width: int64(width), ports: map[uint16][]uint64{},
		first: map[uint16]int64{}, done: make(chan error, 1)}
	for _, p := range ports {
		r.ports[p] = nil
	}
	go r.loop()
	return r, nil
}

// ratesFilter passes the first 96 bytes of received (not sent) TCP and UDP
// packets: IPv4 (protocol at 14+9), IPv6 (next header at 14+6).
var ratesFilter = []unix.SockFilter{
	{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: uint32(0xfffff000 + 4)}, // SKF_AD_OFF + SKF_AD_PKTTYPE
	{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: unix.PACKET_OUTGOING, Jt: 9},
	{Code: unix.BPF_LD | unix.BPF_H | unix.BPF_ABS, K: 12},
	{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: 0x0800, Jt: 1},
	{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: 0x86dd, Jt: 2, Jf: 6},
	{Code: unix.BPF_LD | unix.BPF_B | unix.BPF_ABS, K: 14 + 9},
	{Code: unix.BPF_JMP | unix.BPF_JA, K: 1},
	{Code: unix.BPF_LD | unix.BPF_B | unix.BPF_ABS, K: 14 + 6},
	{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: unix.IPPROTO_TCP, Jt: 1},
	{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: unix.IPPROTO_UDP, Jf: 1},
	{Code: unix.BPF_RET | unix.BPF_K, K: 96},
	{Code: unix.BPF_RET | unix.BPF_K, K: 0},
}

// maxWindows bounds a count's memory (an hour of 10 ms windows is 360,000).
const maxWindows = 1 << 20

// inNetnsRestore runs fn on this goroutine's OS thread switched into the
// named network namespace ("" runs it here), then switches the thread back
// and hands it back to the scheduler, never ending the thread: a thread
// that ends sends SIGKILL to the children it started with Pdeathsig
// (netlab's processes), and any thread may have started one (a capture
// whose thread ended killed eval clients at random). Only if the switch back fails does the thread end with the
// goroutine that runs fn.
func inNetnsRestore(name string, fn func() error) error {
	if name == "" {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("current netns: %w", err)
			return
		}
		defer orig.Close()
		h, err := netns.GetFromName(name)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open netns %s: %w", name, err)
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter netns %s: %w", name, err)
			return
		}
		err = fn()
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		} // else the thread stays locked and ends with this goroutine
		errc <- err
	}()
	return <-errc
}

// windowOf is the window of a packet at Unix ns t (-1: before the origin).
func (r *Rates) windowOf(t int64) int {
	if t < r.origin {
		return -1
	}
	return int((t - r.origin) / r.width)
}

// vnetHdrLen is the length of struct virtio_net_hdr, which precedes each
// frame read (PACKET_VNET_HDR); its gso_size (little-endian, at 4) is the
// segment size of a GSO packet, 0 for others.
const vnetHdrLen = 10

// ipOf reads an IP header at the start of ip: its length (IPv4's IHL, 40
// for IPv6), the transport protocol and the packet's length (IPv4's total
// length; IPv6's payload length plus its header). ok is false for anything
// but IPv4 or IPv6 whose first header is TCP or UDP (IPv6 extension headers
// are not followed: the lab's flows send none).
func ipOf(ip []byte, etherType uint16) (ihl int, proto byte, n uint64, ok bool) {
	switch {
	case etherType == 0x0800 && len(ip) >= 20 && ip[0]>>4 == 4:
		ihl, proto, n = int(ip[0]&15)*4, ip[9], uint64(binary.BigEndian.Uint16(ip[2:4]))
		if ihl < 20 {
			return 0, 0, 0, false
		}
	case etherType == 0x86dd && len(ip) >= 40 && ip[0]>>4 == 6:
		ihl, proto, n = 40, ip[6], 40+uint64(binary.BigEndian.Uint16(ip[4:6]))
	default:
		return 0, 0, 0, false
	}
	return ihl, proto, n, proto == unix.IPPROTO_TCP || proto == unix.IPPROTO_UDP
}

// count adds one packet (an Ethernet frame's first bytes, as received at
// Unix ns t; gsoSize its GSO segment size, 0 if not GSO): TCP or UDP over
// IPv4 or IPv6 toward a counted port.
func (r *Rates) count(frame []byte, gsoSize int, t int64) bool {
	if len(frame) < 14+20+4 {
		return false
	}
	ip := frame[14:]
	ihl, proto, n, ok := ipOf(ip, binary.BigEndian.Uint16(frame[12:14]))
	if !ok || len(ip) < ihl+4 {
		return false
	}
	port := binary.BigEndian.Uint16(ip[ihl+2 : ihl+4])
	bins, ok := r.ports[port]
	if !ok {
		return false
	}
	segs := uint64(1)
	if gsoSize > 0 {
		hdr := ihl + 8 // UDP
		if proto == unix.IPPROTO_TCP {
			hdr = 0
			if len(ip) > ihl+12 {
				hdr = ihl + int(ip[ihl+12]>>4)*4
			}
		}
		if hdr > 0 && n > uint64(hdr) {
			if k := (n - uint64(hdr) + uint64(gsoSize) - 1) / uint64(gsoSize); k > 1 {
				segs = k
				n += (segs - 1) * uint64(hdr)
			}
		}
	}
	n += segs * rate.LinkHdrBytes
	if _, seen := r.first[port]; !seen && n > 1000 {
		r.first[port] = t
	}
	w := r.windowOf(t)
	if w < 0 || w >= maxWindows {
		return false
	}
	for len(bins) <= w {
		bins = append(bins, 0)
	}
	bins[w] += n
	r.ports[port] = bins
	return true
}

func (r *Rates) loop() {
	buf := make([]byte, vnetHdrLen+96)
	oob := make([]byte, 256)
	for {
		if r.stopping.Load() {
			r.done <- nil
			return
		}
		n, oobn, _, from, err := unix.Recvmsg(r.fd, buf, oob, 0)
		if err != nil {
			if errors.Is(err, unix.EINVAL) {
				// A GSO type struct virtio_net_hdr cannot carry: the
				// kernel dropped the packet uncounted.
				r.unsized.Add(1)
				continue
			}
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				if r.stopping.Load() {
					r.done <- nil
					return
				}
				continue
			}
			r.done <- fmt.Errorf("AF_PACKET recvmsg: %w", err)
			return
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		ts := time.Now().UnixNano()
		if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, m := range msgs {
				if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SO_TIMESTAMPNS && len(m.Data) >= 16 {
					ts = int64(binary.NativeEndian.Uint64(m.Data))*1e9 + int64(binary.NativeEndian.Uint64(m.Data[8:]))
				}
			}
		}
		if n < vnetHdrLen {
			continue
		}
		r.count(buf[vnetHdrLen:min(n, len(buf))], int(binary.LittleEndian.Uint16(buf[4:6])), ts)
	}
}

// Stop ends the count (within 50 ms) and returns, per port, the bytes of each window (up to the last with a
// packet) and the time of its first packet of over 1000 bytes (its first
// data; zero time if none).
func (r *Rates) Stop() (bytes map[uint16][]uint64, first map[uint16]time.Time, st RatesStats, err error) {
	r.stopping.Store(true)
	err = <-r.done
	if s, serr := unix.GetsockoptTpacketStats(r.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS); serr == nil {
		st.Dropped = int64(s.Drops)
		st.Packets = int64(s.Packets) - int64(s.Drops)
	}
	st.Dropped += r.unsized.Load()
	st.Packets -= r.unsized.Load()
	unix.Close(r.fd)
	first = map[uint16]time.Time{}
	for p, t := range r.first {
		first[p] = time.Unix(0, t)
	}
	return r.ports, first, st, err
}
