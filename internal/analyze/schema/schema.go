// Package schema holds the JSON form of `hbm analyze`'s report: what
// `hbm analyze --json` prints and --out writes to analysis.json. The CLI, the
// HTML page and the tests all use these types, so the format has one
// definition.
package schema

// Report is the whole analysis of one capture.
type Report struct {
	Connections []Connection `json:"connections"`
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
