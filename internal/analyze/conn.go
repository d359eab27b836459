package analyze

// Connection tracking and round splitting. Each connection has two flows,
// one per direction; a flow is one side's data and the other side's ACKs of
// it. Sequence numbers are unwrapped to int64 ("absolute") around the flow's
// highest sequence sent, so transfers past 4 GiB and wrap-around need nothing
// special.

// connKey identifies a connection whichever way a packet goes: the lower
// endpoint first.
type connKey struct {
	a, b   [16]byte
	pa, pb uint16
	v6     bool
}

// keyOf returns the key of p and the side p was sent from (0: a, 1: b).
func keyOf(p *packet) (connKey, int) {
	k := connKey{a: p.src, b: p.dst, pa: p.sport, pb: p.dport, v6: p.v6}
	if less(p.dst, p.dport, p.src, p.sport) {
		k.a, k.b, k.pa, k.pb = p.dst, p.src, p.dport, p.sport
		return k, 1
	}
	return k, 0
}

func less(a [16]byte, pa uint16, b [16]byte, pb uint16) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return pa < pb
}

type conn struct {
	key         connKey
	idx         int   // its place among the capture's connections, in order of first packet
	first, last int64 // ns
	packets     int64
	client      int // the side that sent the first SYN, when seen
	clientKnown bool
	synT        int64   // ns: when that SYN was sent
	dir         [2]flow // dir[s]: data sent by side s
	ex          exchanges
}

// segRec is a new-data segment waiting for its ACK: an RTT sample to be.
type segRec struct {
	end     int64
	t       int64
	retrans bool // some of its bytes were sent again: no sample (Karn)
	// skip, once retrans is set: an index in flow.q past this one below
	// which every segment is marked too, so that marking a range again
	// skips what is marked (path-compressed, as in union-find).
	skip int
}

// maxPendingRx bounds the retransmissions kept waiting for their ACK to be
// judged spurious or not, so that each ACK's and DSACK's work is bounded
// whatever the capture (a crafted one would otherwise cost O(n^2)). Past
// it, the oldest is counted as needed (never spurious) without waiting.
const maxPendingRx = 1024

// rxRec is a retransmission, kept to judge whether it was spurious.
type rxRec struct {
	start, end int64
	t          int64
	segs       int64
	acked      bool
	spurious   bool
}

// round is a round trip being collected (times in ns).
type round struct {
	t, rtt                int64
	marker                int64 // the round ends when the cumulative ACK reaches it
	sent, acked, inflight int64
	ce, ece, retrans      int64
	incomplete            bool
}

type flow struct {
	init      bool // the sequence space is known (a SYN or data seen)
	synSeen   bool // this side's SYN was seen
	isn       uint32
	synTS     bool  // this side's SYN had the timestamp option
	peerMSS   int   // the MSS option the other side announced
	start     int64 // absolute sequence of the first data byte
	sndMax    int64 // absolute end of the highest data sent
	una       int64 // the highest cumulative ACK (absolute)
	maxSeg    int   // the largest payload sent
	finSeen   bool
	finSeq    int64 // absolute sequence number the FIN was sent at
	retrans   int64
	spurious  int64
	ce, ece   int64
	minRTT    int64
	rtts      []int64
	q         []segRec
	qh        int
	rx        []rxRec
	rxPending int // records in rx not yet acknowledged
	roundOpen bool
	cur       round
	rounds    []round
}

// abs unwraps a sequence (or acknowledgement) number of this flow's data.
func (f *flow) abs(seq uint32) int64 {
	return f.sndMax + int64(int32(seq-uint32(f.sndMax)))
}

func (f *flow) bytes() int64 {
	if !f.init {
		return 0
	}
	return f.sndMax - f.start
}

// smss is the sender's segment size: the MSS the peer announced less the
// timestamp option both SYNs agreed on, or (no handshake in the capture) the
// largest segment that looks like one segment rather than a TSO burst.
func (c *conn) smss(s int) int64 {
	f, peer := &c.dir[s], &c.dir[1-s]
	if f.peerMSS > 0 {
		m := f.peerMSS
		if f.synTS && peer.synTS {
			m -= 12
		}
		if m > 0 {
			return int64(m)
		}
	}
	if f.maxSeg > 0 && f.maxSeg <= 9000 {
		return int64(f.maxSeg)
	}
	return 1448
}

// add accounts one packet sent by side s.
func (c *conn) add(p *packet, s int) {
	if c.packets == 0 {
		c.first = p.ts
	}
	c.packets++
	if p.ts > c.last {
		c.last = p.ts
	}
	f := &c.dir[s]
	if p.syn {
		if f.synSeen && f.isn == p.seq {
			f.ctlRetrans() // the SYN (or SYN-ACK) again
		}
		if !f.synSeen || !f.init {
			f.synSeen, f.init = true, true
			f.isn = p.seq
			f.sndMax = int64(p.seq) + 1
			f.start, f.una = f.sndMax, f.sndMax
			f.synTS = p.tsOpt
		}
		if p.mss > 0 {
			c.dir[1-s].peerMSS = int(p.mss)
		}
		if !p.hasAck && !c.clientKnown {
			c.client, c.clientKnown, c.synT = s, true, p.ts
		}
	}
	if p.payload > 0 {
		c.data(p, s)
	}
	if p.fin && f.init {
		end := f.abs(p.seq) + int64(p.payload)
		if p.syn {
			end++
		}
		if f.finSeen && end == f.finSeq && p.payload == 0 {
			f.ctlRetrans() // a bare FIN again (one with data counted as data)
		}
		f.finSeen, f.finSeq = true, end
		c.ex.onFin()
	}
	if p.hasAck {
		c.ackOf(p, 1-s)
		if peer := &c.dir[1-s]; peer.init {
			c.ex.onAck(1-s, peer.una, p.ts)
		}
	}
}

// ctlRetrans counts a retransmitted SYN or bare FIN: one segment, as the
// kernel's total_retrans counts it.
func (f *flow) ctlRetrans() {
	f.retrans++
	if f.roundOpen {
		f.cur.retrans++
	}
}

// data accounts a data segment of flow s.
func (c *conn) data(p *packet, s int) {
	f := &c.dir[s]
	if !f.init {
		f.init = true
		f.sndMax = int64(p.seq)
		f.start, f.una = f.sndMax, f.sndMax
	}
	start := f.abs(p.seq)
	if p.syn {
		start++ // data on a SYN (TCP Fast Open) follows the SYN's sequence number
	}
	n := int64(p.payload)
	end := start + n
	f.maxSeg = max(f.maxSeg, p.payload)
	if !f.roundOpen {
		f.roundOpen = true
		f.cur = round{t: p.ts, marker: end}
	}
	r := &f.cur
	r.sent += n
	if p.ecn == 3 {
		r.ce++
		f.ce++
	}
	if start < f.sndMax { // sent before: a retransmission
		re := min(end, f.sndMax)
		mss := c.smss(s)
		segs := max((re-start+mss-1)/mss, 1)
		f.retrans += segs
		r.retrans += segs
		f.markRetrans(start, re)
		if f.rxPending >= maxPendingRx {
			f.retireOldestRx()
		}
		f.rx = append(f.rx, rxRec{start: start, end: re, t: p.ts, segs: segs})
		f.rxPending++
		f.compactRx()
	}
	if end > f.sndMax {
		f.q = append(f.q, segRec{end: end, t: p.ts, retrans: start < f.sndMax, skip: len(f.q) + 1})
		f.sndMax = end
		c.ex.onData(s, end, p.ts, c.requester())
	}
}

// markRetrans marks the queued segments overlapping [start, end) as
// retransmitted: their ACKs give no RTT sample. Segments already marked are
// skipped over, so each is marked once however often ranges are sent again.
func (f *flow) markRetrans(start, end int64) {
	q := f.q
	// The first segment ending after start (segments are in sequence order,
	// their ends increasing).
	lo, hi := f.qh, len(q)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if q[m].end <= start {
			lo = m + 1
		} else {
			hi = m
		}
	}
	for i := lo; i < len(q); {
		if i > lo && q[i-1].end >= end {
			break
		}
		if q[i].retrans {
			i = f.unmarked(i)
			continue
		}
		q[i].retrans, q[i].skip = true, i+1
		i++
	}
	if lo < len(q) {
		f.unmarked(lo) // compress the run just marked
	}
}

// unmarked returns the first index from i whose segment is not marked
// (len(f.q) if none), and points the runs it crossed there.
func (f *flow) unmarked(i int) int {
	q := f.q
	r := i
	for r < len(q) && q[r].retrans {
		r = q[r].skip
	}
	for j := i; j < r && q[j].retrans; {
		next := q[j].skip
		q[j].skip = r
		j = next
	}
	return r
}

// ackOf accounts the acknowledgement p carries of flow s's data.
func (c *conn) ackOf(p *packet, s int) {
	f := &c.dir[s]
	if !f.init {
		return
	}
	a := f.abs(p.ack)
	if a > f.sndMax {
		a = f.sndMax // the ACK of a SYN or FIN, or of data the capture missed
	}
	if p.ece && !p.syn {
		f.ece++
		if f.roundOpen {
			f.cur.ece++
		} else if len(f.rounds) > 0 {
			f.rounds[len(f.rounds)-1].ece++
		}
	}
	if p.nsack > 0 {
		// A DSACK: the first block lies below the cumulative ACK, or inside
		// the second block (RFC 2883).
		l, r := f.abs(p.sack[0][0]), f.abs(p.sack[0][1])
		raw := f.abs(p.ack)
		if l < r && (r <= raw || (p.nsack > 1 && l >= f.abs(p.sack[1][0]) && r <= f.abs(p.sack[1][1]))) {
			f.dsack(l, r)
		}
	}
	inflight := f.sndMax - f.una
	if a > f.una {
		if f.roundOpen {
			f.cur.acked += a - f.una
		} else if len(f.rounds) > 0 { // between rounds: the one that just ended
			f.rounds[len(f.rounds)-1].acked += a - f.una
		}
		f.una = a
		// One sample per ACK, from the newest segment it covers (the
		// oldest may have waited for a delayed ACK), and none if it covers
		// any retransmitted byte: its ACK is ambiguous (Karn).
		var newest *segRec
		karn := false
		for f.qh < len(f.q) && f.q[f.qh].end <= a {
			newest = &f.q[f.qh]
			karn = karn || newest.retrans
			f.qh++
		}
		if newest != nil && !karn {
			if d := p.ts - newest.t; d >= 0 {
				f.rtts = append(f.rtts, d)
				if f.minRTT == 0 || d < f.minRTT {
					f.minRTT = d
				}
			}
		}
		if f.qh > 1024 && f.qh*2 > len(f.q) { // reuse the queue's memory
			f.q = f.q[:copy(f.q, f.q[f.qh:])]
			for i := range f.q {
				f.q[i].skip -= f.qh
			}
			f.qh = 0
		}
		f.ackRetrans(a, p.ts)
	}
	if f.roundOpen && a >= f.cur.marker {
		f.cur.rtt = max(p.ts-f.cur.t, 0) // capture times can go backwards
		f.cur.inflight = inflight
		f.rounds = append(f.rounds, f.cur)
		f.roundOpen = false
	}
}

// ackRetrans judges the retransmissions the cumulative ACK a (at time t) now
// covers: acknowledged sooner after they were sent than any round trip takes,
// the ACK was for the original, and they were spurious.
func (f *flow) ackRetrans(a, t int64) {
	if f.rxPending == 0 {
		return
	}
	for i := range f.rx {
		x := &f.rx[i]
		if x.acked || x.end > a {
			continue
		}
		x.acked = true
		f.rxPending--
		if !x.spurious && f.minRTT > 0 && t-x.t < f.minRTT {
			x.spurious = true
			f.spurious += x.segs
		}
	}
	f.compactRx()
}

// compactRx keeps the unacknowledged retransmissions (at most maxPendingRx)
// and the 64 latest for DSACKs once there are more than 256 records.
func (f *flow) compactRx() {
	if len(f.rx) <= 256 || len(f.rx) <= f.rxPending+64 {
		return
	}
	keep := f.rx[:0]
	for i, x := range f.rx {
		if !x.acked || i >= len(f.rx)-64 {
			keep = append(keep, x)
		}
	}
	f.rx = keep
}

// retireOldestRx stops waiting for the oldest pending retransmission's ACK:
// it stays counted, as needed.
func (f *flow) retireOldestRx() {
	for i := range f.rx {
		if !f.rx[i].acked {
			f.rx[i].acked = true
			f.rxPending--
			return
		}
	}
}

// dsack marks the retransmissions a DSACK of [l, r) reports as duplicates.
func (f *flow) dsack(l, r int64) {
	for i := range f.rx {
		x := &f.rx[i]
		if !x.spurious && x.start < r && l < x.end {
			x.spurious = true
			f.spurious += x.segs
		}
	}
}
