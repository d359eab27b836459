// Package analyze is `hbm analyze`: it reads a pcap or pcapng capture,
// splits it into TCP connections and each connection into round trips, and
// reports per connection and per round what the data sender sent, what was
// acknowledged, its window, its retransmissions and the ECN marks it saw.
//
// Round trips come from the data/ACK exchange itself: a round starts when a
// data segment is sent while none is open and ends when the cumulative ACK
// covering that segment arrives; the next round starts with the next segment
// sent. The analysis is one pass and allocates nothing per packet (beyond
// the amortised growth of per-connection arrays).
package analyze

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"

	"github.com/hbm-dev/hbm/internal/analyze/schema"
)

// File analyses the capture at path.
func File(path string) (*schema.Report, error) {
	f, err := openFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rep, err := Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rep, nil
}

// openFile opens the capture file at path (not a directory).
func openFile(path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err == nil && st.IsDir() {
		err = fmt.Errorf("%s is a directory, not a capture file", path)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// ErrNoTCP is returned for a capture that holds no TCP segment.
var ErrNoTCP = errors.New("no TCP segments in the capture")

// Read analyses a capture read from r.
func Read(r io.Reader) (*schema.Report, error) {
	a := analyzer{conns: map[connKey]*conn{}}
	warn, err := scan(r, func(p *packet) { a.add(p) })
	if err != nil {
		return nil, err
	}
	rep := a.report()
	if warn != "" {
		rep.Warnings = append(rep.Warnings, warn)
	}
	return rep, nil
}

// scan decodes every TCP segment of the capture read from r and hands it to
// each (the packet is reused: each must not keep it). It returns a warning
// for a capture whose last record is cut short (the packets before it are
// scanned), and an error for one it cannot read or that holds no TCP.
func scan(r io.Reader, each func(*packet)) (warn string, err error) {
	src, err := openCapture(r)
	if err != nil {
		return "", err
	}
	dec, err := newDecoder(src.LinkType())
	if err != nil {
		return "", err
	}
	var (
		p       packet
		n, ntcp int64
	)
	for {
		data, ci, err := src.ZeroCopyReadPacketData()
		if err != nil {
			if errors.Is(err, io.EOF) && ci.CaptureLength == 0 {
				break // the clean end: no packet header started
			}
			if !cut(err) {
				return "", fmt.Errorf("capture malformed after %d packets: %w", n, err)
			}
			// The last record is cut short (tcpdump killed mid-write):
			// analyse the whole packets before it, as Wireshark does.
			if n == 0 {
				return "", fmt.Errorf("capture cut in its first record: %w", describe(err))
			}
			warn = fmt.Sprintf("the last record is cut short (the capture was stopped mid-write?): analysed the %d whole packets before it", n)
			break
		}
		n++
		if !dec.decode(data, ci.Length, &p) {
			continue
		}
		ntcp++
		p.ts = ci.Timestamp.UnixNano()
		each(&p)
	}
	if ntcp == 0 {
		if warn != "" {
			return "", fmt.Errorf("%w (%d packets of link type %s read, then a cut record)", ErrNoTCP, n, src.LinkType())
		}
		return "", fmt.Errorf("%w (%d packets of link type %s read)", ErrNoTCP, n, src.LinkType())
	}
	return warn, nil
}

// cut reports whether a read error means the file ends inside a record.
func cut(err error) bool {
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

type analyzer struct {
	conns map[connKey]*conn
	all   []*conn // in order of first packet
}

// add accounts p to its connection and returns that connection and the
// side that sent p.
func (a *analyzer) add(p *packet) (*conn, int) {
	k, s := keyOf(p)
	c := a.conns[k]
	if c != nil && p.syn && !p.hasAck {
		// A new connection on the same ports: a SYN with another initial
		// sequence number than the one this connection began with.
		if f := &c.dir[s]; f.init && !(f.synSeen && f.isn == p.seq) {
			c = nil
		}
	}
	if c == nil {
		c = &conn{key: k, idx: len(a.all)}
		a.conns[k] = c
		a.all = append(a.all, c)
	}
	c.add(p, s)
	return c, s
}

func (a *analyzer) report() *schema.Report {
	rep := &schema.Report{Connections: make([]schema.Connection, 0, len(a.all))}
	for _, c := range a.all {
		rep.Connections = append(rep.Connections, c.summary())
	}
	rep.Requests = requests(a.all)
	return rep
}

func endpoint(ip [16]byte, v6 bool, port uint16) string {
	var addr netip.Addr
	if v6 {
		addr = netip.AddrFrom16(ip)
	} else {
		addr = netip.AddrFrom4([4]byte(ip[:4]))
	}
	return netip.AddrPortFrom(addr, port).String()
}

func us(ns int64) float64 { return float64(ns) / 1e3 }

// summary orients the connection from its data sender and summarises it.
func (c *conn) summary() schema.Connection {
	s := 0
	if b0, b1 := c.dir[0].bytes(), c.dir[1].bytes(); b1 > b0 || (b1 == b0 && c.clientKnown) {
		s = 1
		if b1 == b0 {
			s = c.client
		}
	}
	ends := [2]string{endpoint(c.key.a, c.key.v6, c.key.pa), endpoint(c.key.b, c.key.v6, c.key.pb)}
	f := &c.dir[s]
	out := schema.Connection{
		Src: ends[s], Dst: ends[1-s],
		Bytes:                   f.bytes(),
		Retransmissions:         f.retrans,
		SpuriousRetransmissions: f.spurious,
		RTT:                     rttStats(f.rtts),
		CE:                      f.ce,
		ECE:                     f.ece,
		StartUnixUS:             c.first / 1e3,
		DurationUS:              us(c.last - c.first),
		Packets:                 c.packets,
		Rounds:                  make([]schema.Round, 0, len(f.rounds)+1),
	}
	if c.ex.known {
		out.Exchanges = c.ex.summary(ends[c.ex.requester])
	}
	rounds := f.rounds
	if f.roundOpen {
		last := f.cur
		last.incomplete = true
		last.inflight = f.sndMax - f.una
		rounds = append(rounds, last)
	}
	for _, r := range rounds {
		out.Rounds = append(out.Rounds, schema.Round{
			TUS: us(r.t - c.first), RTT: us(r.rtt),
			SentBytes: r.sent, AckedBytes: r.acked, InflightBytes: r.inflight,
			CE: r.ce, ECE: r.ece, Retransmissions: r.retrans, Incomplete: r.incomplete,
		})
	}
	return out
}

// rttStats summarises RTT samples (ns) in µs. It sorts them in place.
func rttStats(ns []int64) schema.RTT {
	if len(ns) == 0 {
		return schema.RTT{}
	}
	slices.Sort(ns)
	return schema.RTT{
		Min:     us(ns[0]),
		P50:     us(percentile(ns, 50)),
		P99:     us(percentile(ns, 99)),
		Samples: int64(len(ns)),
	}
}

// percentile is the nearest-rank percentile of sorted samples.
func percentile(sorted []int64, p float64) int64 {
	rank := int(p/100*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}
