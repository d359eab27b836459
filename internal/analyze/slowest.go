package analyze

import (
	"cmp"
	"fmt"
	"io"
	"slices"

	"github.com/hbm-dev/hbm/internal/analyze/schema"
)

// SlowestFile is Slowest on the capture at path.
func SlowestFile(path string, n int) ([]schema.SlowExchange, int64, error) {
	f, err := openFile(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	out, total, err := Slowest(f, n)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", path, err)
	}
	return out, total, nil
}

// Slowest returns the capture's n slowest request/response exchanges by
// response time (the request's first byte to the response's first: as in
// schema.Exchanges), slowest first, each with its packets, and how many
// exchanges the capture holds. Two passes: the first times every exchange,
// the second collects the packets of the chosen ones' connections within
// their spans.
func Slowest(r io.ReadSeeker, n int) ([]schema.SlowExchange, int64, error) {
	if n <= 0 {
		return nil, 0, fmt.Errorf("the number of exchanges must be at least 1, not %d", n)
	}
	a := analyzer{conns: map[connKey]*conn{}}
	if _, err := scan(r, func(p *packet) { a.add(p) }); err != nil {
		return nil, 0, err
	}
	type pick struct {
		c   *conn
		ans answer
	}
	var all []pick
	for _, c := range a.all {
		for _, x := range c.ex.answers {
			all = append(all, pick{c, x})
		}
	}
	total := int64(len(all))
	// Slowest first; ties by connection (in order of first packet), then
	// by time.
	slices.SortStableFunc(all, func(x, y pick) int { return cmp.Compare(y.ans.response, x.ans.response) })
	all = all[:min(n, len(all))]
	if len(all) == 0 {
		return nil, total, nil
	}
	out := make([]schema.SlowExchange, len(all))
	byConn := map[int][]int{} // connection index -> its picks
	for i, pk := range all {
		c := pk.c
		req := c.ex.requester
		out[i] = schema.SlowExchange{
			Requester:   side(c, req),
			Responder:   side(c, 1-req),
			StartUnixUS: pk.ans.start / 1e3,
			ResponseUS:  us(pk.ans.response),
			NetworkUS:   us(pk.ans.network),
			PeerUS:      us(pk.ans.peer),
			Packets:     []schema.SlowPacket{},
		}
		byConn[c.idx] = append(byConn[c.idx], i)
	}
	// The second pass replays the same connection tracking, so that a
	// connection is the same one (ports reused by a later connection are
	// another), and notes the packets in the chosen spans.
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return nil, 0, err
	}
	b := analyzer{conns: map[connKey]*conn{}}
	_, err := scan(r, func(p *packet) {
		c, s := b.add(p)
		for _, i := range byConn[c.idx] {
			pk := all[i]
			if p.ts < pk.ans.start || p.ts > pk.ans.start+pk.ans.response {
				continue
			}
			x := &out[i]
			if len(x.Packets) >= schema.MaxSlowPackets {
				x.PacketsLeftOut++
				continue
			}
			x.Packets = append(x.Packets, slowPacket(c, s, p, pk.ans.start))
		}
	})
	if err != nil {
		return nil, 0, err
	}
	return out, total, nil
}

// side is the endpoint "IP:port" of side s of c.
func side(c *conn, s int) string {
	if s == 0 {
		return endpoint(c.key.a, c.key.v6, c.key.pa)
	}
	return endpoint(c.key.b, c.key.v6, c.key.pb)
}

// slowPacket describes p, sent by side s of c, at its time since start (ns),
// its sequence numbers relative to each direction's first data byte as c
// has seen it so far (the span's packets come after it).
func slowPacket(c *conn, s int, p *packet, start int64) schema.SlowPacket {
	rel := func(side int, v uint32) uint32 {
		if f := &c.dir[side]; f.init {
			return v - uint32(f.start)
		}
		return v
	}
	flags := ""
	for _, f := range []struct {
		on bool
		c  string
	}{{p.syn, "S"}, {p.fin, "F"}, {p.rst, "R"}, {p.psh, "P"}, {p.hasAck, "A"}, {p.ece, "E"}, {p.cwr, "W"}} {
		if f.on {
			flags += f.c
		}
	}
	sp := schema.SlowPacket{
		AtUS:          us(p.ts - start),
		FromRequester: s == c.ex.requester,
		Flags:         flags,
		CE:            p.ecn == 3,
		Seq:           rel(s, p.seq),
		Len:           p.payload,
	}
	if p.hasAck {
		sp.Ack = rel(1-s, p.ack)
	}
	for i := 0; i < p.nsack && i < len(p.sack); i++ {
		sp.SACK = append(sp.SACK, [2]uint32{rel(1-s, p.sack[i][0]), rel(1-s, p.sack[i][1])})
	}
	return sp
}
