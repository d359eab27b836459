package analyze

import (
	"slices"

	"github.com/hbm-dev/hbm/internal/analyze/schema"
)

// Request/response turns (schema.Exchanges). A turn opens with the
// requester's first new data while none is open, grows with its further new
// data, notes the first ACK of its last byte, and closes with the peer's
// first new data. Data the peer sends while no turn is open (the rest of a
// response, or data pushed unasked) belongs to no turn.
type exchanges struct {
	requester int
	known     bool
	open      bool
	start     int64 // ns: the request's first byte
	reqEnd    int64 // absolute end of the request's data
	acked     int64 // ns: the first ACK covering reqEnd (0: none yet)
	// The last answered turn, until the capture shows its end (the next
	// request, or a FIN): its start, and the responder's last new data.
	pending       bool
	pStart, pLast int64
	first         int64 // ns: the first turn's start (0: none opened)
	// The turns whose end the capture shows, in order.
	done []turn
	// Every answered request, in order.
	answers []answer
}

// answer is an answered request: when it began and its three times, ns.
type answer struct{ start, response, network, peer int64 }

// turn is an exchange whose end the capture shows: when its request began
// and how long from there to the response's last byte, ns.
type turn struct{ start, complete int64 }

// finish ends the pending turn: nothing more of its response follows.
func (e *exchanges) finish() {
	if e.pending {
		e.done = append(e.done, turn{e.pStart, e.pLast - e.pStart})
		e.pending = false
	}
}

// onFin notes a FIN from either side: the pending response is whole.
func (e *exchanges) onFin() { e.finish() }

// onData notes new data of side s ending at absolute sequence end, sent at
// t. requester is the side that is the requester, as c.requester() says.
func (e *exchanges) onData(s int, end, t int64, requester int) {
	if !e.known {
		e.requester, e.known = requester, true
	}
	switch {
	case s == e.requester && !e.open:
		e.finish()
		e.open, e.start, e.reqEnd, e.acked = true, t, end, 0
		if e.first == 0 {
			e.first = t
		}
	case s == e.requester:
		if end > e.reqEnd {
			e.reqEnd, e.acked = end, 0
		}
	case e.open: // the response
		acked := e.acked
		if acked == 0 {
			acked = t // the response carries the ACK
		}
		e.answers = append(e.answers, answer{e.start, max(t-e.start, 0), max(acked-e.start, 0), max(t-acked, 0)})
		e.open = false
		e.pending, e.pStart, e.pLast = true, e.start, t
	case e.pending: // more of the response
		e.pLast = t
	}
}

// onAck notes the peer's cumulative ACK of side s's data reaching absolute
// sequence una at t.
func (e *exchanges) onAck(s int, una, t int64) {
	if e.open && s == e.requester && e.acked == 0 && una >= e.reqEnd {
		e.acked = t
	}
}

// requester is the side that sent the SYN, or without the handshake in the
// capture the side with the higher port (a client's ephemeral port is
// usually above the server's). Not the first side seen sending: a capture
// that begins mid-connection may begin with a response.
func (c *conn) requester() int {
	if c.clientKnown {
		return c.client
	}
	if c.key.pb > c.key.pa {
		return 1
	}
	return 0
}

func (e *exchanges) summary(requester string) *schema.Exchanges {
	if len(e.answers) == 0 {
		return nil
	}
	response, network, peer := make([]int64, len(e.answers)), make([]int64, len(e.answers)), make([]int64, len(e.answers))
	for i, a := range e.answers {
		response[i], network[i], peer[i] = a.response, a.network, a.peer
	}
	return &schema.Exchanges{
		Requester: requester,
		Count:     int64(len(e.answers)),
		Response:  latency(response),
		Network:   latency(network),
		Peer:      latency(peer),
		Complete:  e.completeLatency(),
	}
}

// completeLatency summarises the completed turns' times (nil: none).
func (e *exchanges) completeLatency() *schema.Latency {
	if len(e.done) == 0 {
		return nil
	}
	ns := make([]int64, len(e.done))
	for i, d := range e.done {
		ns[i] = d.complete
	}
	l := latency(ns)
	return &l
}

// latency summarises durations (ns) in µs. It sorts them in place.
func latency(ns []int64) schema.Latency {
	slices.Sort(ns)
	return schema.Latency{
		P50: us(percentile(ns, 50)),
		P90: us(percentile(ns, 90)),
		P99: us(percentile(ns, 99)),
		Max: us(ns[len(ns)-1]),
	}
}
