// Package schema holds the JSON form of `hbm analyze`'s report: what
// `hbm analyze --json` prints and --out writes to analysis.json. The CLI, the
// HTML page and the tests all use these types, so the format has one
// definition.
package schema

// Report is the whole analysis of one capture.
type Report struct {
	Connections []Connection `json:"connections"`
	// Requests pools the request/response exchanges of every connection:
	// what a server's clients waited for, whichever connection carried
	// them; absent when no exchange completed.
	Requests *Requests `json:"requests,omitempty"`
	// Warnings says what of the capture was not analysed (a last record
	// cut short: the packets before it are); absent when none.
	Warnings []string `json:"warnings,omitempty"`
}

// Connection is one TCP connection, seen from its data sender: src is the
// side that sent more payload, and every count is about src's data and dst's
// acknowledgements of it.
type Connection struct {
	Src string `json:"src"` // "IP:port" ("[IPv6]:port")
	Dst string `json:"dst"`
	// Bytes is the payload src delivered: the sequence space its data
	// covered, each byte once (retransmissions excluded).
	Bytes int64 `json:"bytes"`
	// Retransmissions counts retransmitted segments, in MSS-sized segments as
	// the kernel's tcpi_total_retrans does (one TSO/GSO packet of three MSS
	// that is sent again counts three).
	Retransmissions int64 `json:"retransmissions"`
	// SpuriousRetransmissions is the part of Retransmissions that was not
	// needed: reported by a DSACK, or acknowledged sooner after it was sent
	// than the connection's minimum RTT (the original's ACK).
	SpuriousRetransmissions int64 `json:"spurious_retransmissions"`
	RTT                     RTT   `json:"rtt_us"`
	CE                      int64 `json:"ce"`  // src's data segments that arrived with CE
	ECE                     int64 `json:"ece"` // dst's ACKs with the ECE flag
	// StartUnixUS is the time of the connection's first packet (µs since
	// the Unix epoch); a round's TUS counts from it.
	StartUnixUS int64   `json:"start_unix_us"`
	DurationUS  float64 `json:"duration_us"` // first to last packet
	Packets     int64   `json:"packets"`     // both directions
	Rounds      []Round `json:"rounds"`
	// Exchanges: request/response turns; nil unless both sides sent data.
	Exchanges *Exchanges `json:"exchanges,omitempty"`
}

// RTT summarises the connection's RTT samples in microseconds: one per ACK
// that newly covered a segment never retransmitted (Karn's rule), from the
// newest segment it covered. Samples is their number; with none, all are 0.
type RTT struct {
	Min     float64 `json:"min"`
	P50     float64 `json:"p50"`
	P99     float64 `json:"p99"`
	Samples int64   `json:"samples"`
}

// Round is one round trip: it starts when src sends a data segment while no
// round is open, and ends when dst's cumulative ACK covers that segment; the
// next starts with src's next segment.
type Round struct {
	TUS float64 `json:"t_us"`   // start, µs after the connection's first packet
	RTT float64 `json:"rtt_us"` // start to the covering ACK; 0 if the capture ended first
	// SentBytes is the payload src sent in the round (retransmissions
	// included); AckedBytes how far dst's cumulative ACK advanced from the
	// round's start to the next round's (ACKs and ECEs that arrive between
	// rounds, while src sends nothing, count with the round before).
	SentBytes  int64 `json:"sent_bytes"`
	AckedBytes int64 `json:"acked_bytes"`
	// InflightBytes is what src had sent and dst not yet acknowledged just
	// before the ACK that ended the round: the window estimate.
	InflightBytes   int64 `json:"inflight_bytes"`
	CE              int64 `json:"ce"`
	ECE             int64 `json:"ece"`
	Retransmissions int64 `json:"retransmissions"`
	// Incomplete marks a last round the capture ended in before its ACK.
	Incomplete bool `json:"incomplete,omitempty"`
}

// Exchanges are a connection's request/response turns, present when both
// sides sent data. A request is the requester's new data from the first
// byte it sends after the previous response began up to the peer's next new
// data, its response. The requester is the side that opened the connection
// (its SYN is in the capture), else the side with the higher port (a
// client's ephemeral port).
// Times are at the capture point: on the requester's host they split a
// request's latency into the path (Network) and the peer's application
// (Peer).
type Exchanges struct {
	Requester string `json:"requester"` // "IP:port"
	Count     int64  `json:"count"`     // requests answered in the capture
	// Response is the request's first byte to the response's first byte.
	Response Latency `json:"response_us"`
	// Network is the request's first byte to the peer's first ACK of its
	// last byte: the path both ways and the peer's kernel. A peer that
	// delays that ACK until its response carries it puts its application's
	// time here too, so Network is an upper bound of the path's share.
	Network Latency `json:"network_us"`
	// Peer is that ACK to the response's first byte: the time the peer's
	// application took to answer a request its kernel had received (0 for a
	// response that carried the ACK).
	Peer Latency `json:"peer_us"`
	// Complete is the request's first byte to the response's last: for
	// the exchanges whose end the capture shows (the next request, or the
	// responder's FIN); absent when none did.
	Complete *Latency `json:"complete_us,omitempty"`
}

// Requests pools the exchanges of all connections (Exchanges.Complete), and
// for the connections whose SYN the capture holds, their setup: the time
// from the SYN to the first request, which is where a server whose
// handshakes wait (a SYN-ACK queued behind a shaper's backlog, or held by
// HBM's handshake gate) makes its clients wait, unseen by clients that time
// a request from its write.
type Requests struct {
	Count    int64   `json:"count"`       // exchanges completed in the capture
	Complete Latency `json:"complete_us"` // request's first byte to the response's last
	// Opened is how many of those connections' SYNs the capture holds (and
	// their first exchange completed); Setup and Total are about them.
	Opened int64 `json:"opened"`
	// Setup is the SYN to the first request's first byte.
	Setup *Latency `json:"setup_us,omitempty"`
	// Total is the SYN to the first response's last byte.
	Total *Latency `json:"total_us,omitempty"`
	// Timeline holds the completed exchanges by when their request began,
	// in bins of TimelineBinUS from the first: a group-wide swing in
	// request times, or a slow start, shows as bins of other means. It
	// ends the longest exchange's time before the capture does: later
	// bins would hold only the exchanges short enough to end in it.
	TimelineBinUS float64      `json:"timeline_bin_us"`
	Timeline      []RequestBin `json:"timeline"`
}

// RequestBin is the exchanges whose request began in one bin of time.
type RequestBin struct {
	TUS   float64 `json:"t_us"`    // the bin's start, after the first request's
	Count int64   `json:"count"`   // exchanges
	Mean  float64 `json:"mean_us"` // their mean Complete
	Max   float64 `json:"max_us"`  // and the longest
}

// Latency summarises durations in microseconds (nearest-rank percentiles).
type Latency struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// SlowExchange is one of a capture's slowest request/response exchanges
// (`hbm analyze --slowest`), with the packets of both directions from the
// request's first byte to the response's first: where its time went (a
// request lost whole and sent again by the loss probe, a window that
// stopped it, a peer that answered late).
type SlowExchange struct {
	Requester   string `json:"requester"` // "IP:port"
	Responder   string `json:"responder"`
	StartUnixUS int64  `json:"start_unix_us"` // the request's first byte
	// As in Exchanges: to the response's first byte, to the first ACK of
	// the request's last byte, and from that ACK to the response.
	ResponseUS float64 `json:"response_us"`
	NetworkUS  float64 `json:"network_us"`
	PeerUS     float64 `json:"peer_us"`
	// Packets in capture order, at most MaxSlowPackets; PacketsLeftOut the
	// rest of the span.
	Packets        []SlowPacket `json:"packets"`
	PacketsLeftOut int          `json:"packets_left_out,omitempty"`
}

// MaxSlowPackets bounds the packets listed per slow exchange.
const MaxSlowPackets = 200

// SlowPacket is one packet of a slow exchange. Sequence and ACK numbers are
// relative to the first data byte of the direction they count (0: the
// first byte), as the capture shows it.
type SlowPacket struct {
	AtUS          float64 `json:"at_us"` // since the request's first byte
	FromRequester bool    `json:"from_requester"`
	// Flags: S(YN) F(IN) R(ST) P(SH) A(CK) E(CE) W (CWR).
	Flags string      `json:"flags"`
	CE    bool        `json:"ce,omitempty"` // the IP header says Congestion Experienced
	Seq   uint32      `json:"seq"`
	Len   int         `json:"len"`
	Ack   uint32      `json:"ack"`
	SACK  [][2]uint32 `json:"sack,omitempty"` // relative, as Ack
}
