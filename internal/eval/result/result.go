// Package result holds what `hbm eval` measures: the schema of results.json,
// shared by the runner (internal/eval), which fills it, and the report
// writers (internal/eval/report), which render it. Units are in the field
// names and JSON keys so that the file reads without this source.
package result

import "time"

// Version is the results.json schema version; bump it on incompatible changes.
//
// 2: runs[].variant, runs[].repetitions and runs[].spread (hbm eval --runs:
// a run's figures are the medians of its repetitions), groups[].tx_bps and
// share, classes[] of kind udp (offered_bps, sent_bps, send_errors,
// send_error, datagrams).
const Version = 2

// Results is one `hbm eval` invocation: the machine it ran on and every run.
type Results struct {
	Version int   `json:"version"`
	Meta    Meta  `json:"meta"`
	Runs    []Run `json:"runs"`
}

// Meta describes the machine and the invocation, so a result can be
// reproduced or its differences explained.
type Meta struct {
	Started     time.Time         `json:"started"`
	ElapsedSec  float64           `json:"elapsed_s"`
	Command     []string          `json:"command"`
	Quick       bool              `json:"quick"`
	Hostname    string            `json:"hostname"`
	Kernel      string            `json:"kernel"` // uname -r
	CPUs        int               `json:"cpus"`
	HBMVersion  string            `json:"hbm_version"`
	GoVersion   string            `json:"go_version"`
	Sysctls     map[string]string `json:"sysctls"`      // net.ipv4.tcp_*, net.core.*mem*, kernel.bpf_stats_enabled...
	CCAvailable []string          `json:"cc_available"` // net.ipv4.tcp_available_congestion_control
}

// Run is one scenario under one congestion control and one limiter.
type Run struct {
	Scenario string `json:"scenario"`
	CC       string `json:"cc"`      // cubic, cubic-ecn, dctcp, bbr
	Limiter  string `json:"limiter"` // hbm, htb, tbf, none
	// Variant is the value of the scenario's counts dimension, e.g.
	// "stream=16" (a flow's counts: one run per count); "" without one.
	Variant string `json:"variant,omitempty"`
	// IPv6: the run's flows went over IPv6 (the scenario's ipv6, hbm
	// eval --ipv6); else IPv4.
	IPv6 bool `json:"ipv6,omitempty"`
	// Skipped says why the run did not happen (e.g. "dctcp not installable");
	// Error says why it failed. A skipped or failed run has no figures.
	Skipped     string  `json:"skipped,omitempty"`
	Error       string  `json:"error,omitempty"`
	DurationSec float64 `json:"duration_s"` // measured interval, warm-up excluded

	Groups  []Group  `json:"groups"`  // one per cgroup (or receiver) with traffic
	Classes []Class  `json:"classes"` // one per flow class
	Links   []Link   `json:"links,omitempty"`
	CPU     CPU      `json:"cpu"`
	BPF     *BPFCost `json:"bpf,omitempty"` // nil when no HBM program ran

	// Diagnoses are findings worth a reader's attention, such as a tail
	// latency sitting on a kernel timer ("P99 40.2ms of rpc-10KB is near the
	// 40 ms delayed-ACK timer").
	Diagnoses []string `json:"diagnoses,omitempty"`
	// Notes are the runner's remarks: how an "auto" limit was chosen,
	// warnings of the workload clients, missing statistics.
	Notes []string `json:"notes,omitempty"`

	// Repetitions are the runs of hbm eval --runs N (N > 1), each as
	// measured. The run's own figures are then the medians over the
	// completed repetitions (see Aggregate), and Spread gives the median,
	// minimum and maximum of the headline figures.
	Repetitions []Run  `json:"repetitions,omitempty"`
	Spread      []Stat `json:"spread,omitempty"`

	Capture *Capture `json:"capture,omitempty"` // hbm eval --capture

	// Timeline is each source group's rate over the window, for scenarios
	// with a timeline (borrowing); a run of repetitions keeps the first
	// completed one's rates, and the medians of their phase figures.
	Timeline *Timeline `json:"timeline,omitempty"`
}

// ScenarioLabel is the run's scenario as reports name it: its name, and
// "(IPv6)" after it for a run over IPv6.
func (r *Run) ScenarioLabel() string {
	if r.IPv6 {
		return r.Scenario + " (IPv6)"
	}
	return r.Scenario
}

// Timeline is the rate of each source group over a run's window, in short
// windows, counted on the wire at the receivers, and the figures of its
// phases (the spans between the starts and stops of flows).
type Timeline struct {
	WindowSec float64 `json:"window_s"`
	// Source says where the bytes were counted, e.g. "IP bytes of TCP and
	// UDP packets received by rcv on wire, per group's server port".
	Source string          `json:"source"`
	Groups []TimelineGroup `json:"groups"`
	Phases []Phase         `json:"phases"`
	Fair   *Fair           `json:"fair,omitempty"`
	// Dropped are packets the counting sockets lost (their rates are low
	// by that much).
	Dropped int64 `json:"dropped,omitempty"`
}

// TimelineGroup is one group's limits and its rate in each window.
type TimelineGroup struct {
	Name         string `json:"name"`
	GuaranteeBps uint64 `json:"guarantee_bps,omitempty"` // its egress rate
	CeilBps      uint64 `json:"ceil_bps,omitempty"`      // it borrows up to this
	Priority     string `json:"priority,omitempty"`
	Lender       string `json:"lender,omitempty"`
	LenderBps    uint64 `json:"lender_bps,omitempty"`
	// RatesBps are the IP bits per second of each window from the
	// window's start.
	RatesBps []float64 `json:"rates_bps"`
}

// Phase is a span of the window with one set of active groups.
type Phase struct {
	StartSec float64  `json:"start_s"`
	EndSec   float64  `json:"end_s"`
	Active   []string `json:"active"`
	// MeasuredFrom and MeasuredTo are the span of the groups' figures (the
	// timeline's settle after the start, to 200 ms before the end); no
	// figures if it is shorter than a window.
	MeasuredFromSec float64      `json:"measured_from_s"`
	MeasuredToSec   float64      `json:"measured_to_s"`
	Groups          []PhaseGroup `json:"groups,omitempty"`
}

// PhaseGroup is an active group's rate over a phase, against what it is
// due: its weighted max-min share (the guarantees, then what the lender
// has left to the groups that want more, higher priority first, in
// proportion to their guarantees, up to their ceilings), its guarantee and
// its lender's rate.
type PhaseGroup struct {
	Name        string  `json:"name"`
	RateBps     float64 `json:"rate_bps"`
	ShareBps    float64 `json:"share_bps,omitempty"`
	OfShare     float64 `json:"of_share,omitempty"`
	OfGuarantee float64 `json:"of_guarantee,omitempty"`
	OfLender    float64 `json:"of_lender,omitempty"`
	// Joined: the group starts in this phase. WakeMs is then how long
	// after its first data it holds 0.9 of its guarantee for three windows
	// in a row; nil if it never did within the phase.
	Joined bool     `json:"joined,omitempty"`
	WakeMs *float64 `json:"wake_ms,omitempty"`
}

// Fair compares each active group's rate with its weighted max-min share
// in windows of WindowSec (from the settle after each phase's start).
type Fair struct {
	WindowSec float64 `json:"window_s"`
	Samples   int     `json:"samples"` // group-windows compared
	// Within5 is the fraction of them within 5% of the share; MedianDev
	// and P90Dev the median and 90th percentile of |rate / share - 1|.
	Within5   float64 `json:"within_5pct"`
	MedianDev float64 `json:"median_dev"`
	P90Dev    float64 `json:"p90_dev"`
	// LinkUse is the lenders' mean use (their borrowers' rates over the
	// lender's) over the LinkWindows windows in which the borrowers'
	// demand (their ceilings) exceeded the lender; LinkUseMin the least.
	LinkUse     float64 `json:"link_use"`
	LinkUseMin  float64 `json:"link_use_min"`
	LinkWindows int     `json:"link_windows"`
}

// Stat is one figure over a run's completed repetitions. Names are paths:
// "goodput_bps", "groups/work/share", "classes/work/rpc-10KB/p99_us".
type Stat struct {
	Name   string  `json:"name"`
	N      int     `json:"n"`
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// Capture is a run's packet capture (hbm eval --capture): the measurement
// window on one interface, headers only, bounded in size.
type Capture struct {
	File      string `json:"file"` // pcap, relative to the results' directory
	Host      string `json:"host"`
	Interface string `json:"interface"`
	Packets   int64  `json:"packets"`
	Dropped   int64  `json:"dropped,omitempty"` // lost by the capture socket
	Full      bool   `json:"full,omitempty"`    // the size bound ended it early
	Error     string `json:"error,omitempty"`
}

// Group is the traffic of one cgroup (egress scenarios) or one receiver
// (incast) and its limit.
type Group struct {
	Name       string  `json:"name"`
	Dir        string  `json:"dir"`                 // egress or ingress
	LimitBps   uint64  `json:"limit_bps,omitempty"` // 0: unlimited
	GoodputBps float64 `json:"goodput_bps"`         // application bytes, all classes
	WireBps    float64 `json:"wire_bps,omitempty"`  // HBM's byte counter, headers included
	// TxBps is what the sender's interface transmitted (its tx_bytes,
	// Ethernet headers included), when the group is the only one sending
	// through it; Share is TxBps / LimitBps (a limit held exactly on IP
	// bytes reads about 1.01 with full-size frames).
	TxBps float64 `json:"tx_bps,omitempty"`
	// TxPacketBytes is the mean size of the packets that interface
	// transmitted (a veth counts a TSO packet once): the sender's stack
	// does its work per packet, so its CPU per byte goes as 1 / this.
	TxPacketBytes float64 `json:"tx_packet_bytes,omitempty"`
	Share         float64 `json:"share,omitempty"`
	Marked        uint64  `json:"marked"`  // HBM CE marks
	CWR           uint64  `json:"cwr"`     // HBM congestion return codes
	Dropped       uint64  `json:"dropped"` // HBM drops
}

// Class is one kind of flow in one group: an RPC size or a stream.
type Class struct {
	Name       string  `json:"name"` // e.g. "rpc-10KB", "rpc-1MB", "stream"
	Group      string  `json:"group"`
	Kind       string  `json:"kind"` // rpc, stream, udp or http
	SizeBytes  int     `json:"size_bytes,omitempty"`
	Flows      int     `json:"flows"`
	GoodputBps float64 `json:"goodput_bps"`
	RPCs       int64   `json:"rpcs,omitempty"` // completed requests
	// Latency of each request, send of the first byte to the last byte of
	// the reply; nil for streams.
	Latency     *Latency `json:"latency,omitempty"`
	Retransmits uint64   `json:"retransmits"`  // tcpi_total_retrans delta
	RTTUs       float64  `json:"rtt_us"`       // mean smoothed RTT
	RTTMaxUs    float64  `json:"rtt_max_us"`   // largest smoothed RTT sampled
	DeliveredCE uint64   `json:"delivered_ce"` // tcpi_delivered_ce delta: CE echoes the senders saw
	// InFlightMaxUs is the age of the oldest request still unanswered when
	// the window closed: a stalled RPC shows here, not in Latency.
	InFlightMaxUs float64 `json:"inflight_max_us,omitempty"`

	// UDP classes: GoodputBps is what the receivers counted; OfferedBps what
	// the senders tried to send, SentBps what sendmsg accepted (payload
	// bits/s), SendErrors the failed sends and SendError the first one's text
	// (e.g. "operation not permitted"); Datagrams those received.
	OfferedBps float64 `json:"offered_bps,omitempty"`
	SentBps    float64 `json:"sent_bps,omitempty"`
	SendErrors uint64  `json:"send_errors,omitempty"`
	SendError  string  `json:"send_error,omitempty"`
	Datagrams  uint64  `json:"datagrams,omitempty"`

	// HTTP classes (a web server in the group, a load generator on the
	// other host): RPCs are the completed requests, ReqPerSec their rate as
	// the client reports it, HTTPErrors the failed requests and responses
	// other than 2xx (wrk: 2xx or 3xx), HTTPClient the load generator and
	// its connections ("wrk keep-alive"; "wrk close": a new connection per
	// request, its latency from the request's send, the connect excluded;
	// "ab": a new connection per request, its latency including the
	// connect, in whole milliseconds). GoodputBps is what the client read,
	// headers included; Latency has no P99.9 (0).
	ReqPerSec  float64 `json:"requests_per_s,omitempty"`
	HTTPErrors uint64  `json:"http_errors,omitempty"`
	HTTPClient string  `json:"http_client,omitempty"`
}

// Latency is an HDR histogram's summary, in microseconds.
type Latency struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50_us"`
	P90   float64 `json:"p90_us"`
	P99   float64 `json:"p99_us"`
	P999  float64 `json:"p999_us"`
	Max   float64 `json:"max_us"`
}

// Link is a shaped or bottleneck link: the qdisc's view.
type Link struct {
	Name       string `json:"name"` // e.g. "bottleneck", "htb@sender"
	Qdisc      string `json:"qdisc"`
	RateBps    uint64 `json:"rate_bps,omitempty"`
	Drops      uint64 `json:"drops"`
	Overlimits uint64 `json:"overlimits"`
	BacklogMax uint64 `json:"backlog_max_bytes,omitempty"`
}

// CPU is the machine's CPU use over the run, from /proc/stat.
type CPU struct {
	BusyCores    float64 `json:"busy_cores"` // (user+nice+system+irq+softirq) / wall time
	SoftirqCores float64 `json:"softirq_cores"`
}

// BPFCost is the HBM programs' own cost, from kernel.bpf_stats_enabled
// (run_time_ns and run_cnt per program), turned into CPU per Gbit/s as in
// seed 004.
type BPFCost struct {
	Packets    uint64  `json:"packets"` // program runs
	NsPerPkt   float64 `json:"ns_per_packet"`
	CoresTotal float64 `json:"cores"` // run time / wall time
	// CoresPerGbps is the CPU the programs need per Gbit/s of traffic they
	// saw; CoresAt is that scaled to named rates (e.g. "10gbit", "100gbit").
	CoresPerGbps float64            `json:"cores_per_gbps"`
	CoresAt      map[string]float64 `json:"cores_at,omitempty"`
}
