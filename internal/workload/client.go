package workload

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"golang.org/x/sys/unix"
)

// Config describes a client run.
type Config struct {
	Addr      string // server host:port (IPv4 or [IPv6])
	Streams   int    // bulk streams
	RPCs      int    // request/response loops
	RPCSize   int    // request bytes, header included (default 10 KB)
	ReplySize int    // reply bytes (default 64)
	// RPCRate is the requests each RPC loop starts per second (0: back to
	// back, the next when the reply is in). A loop behind its schedule
	// (a reply slower than the interval) starts the next at once and does
	// not catch up: an open loop without bursts, as sockperf --mps.
	RPCRate   float64
	ChunkSize int           // bulk write size (default 128 KB)
	Warmup    time.Duration // before the measurement window
	Duration  time.Duration // measurement window (the whole run in script mode)
	CC        string        // TCP congestion control for every socket ("" = default)
	// UDP is the number of UDP sockets, sending UDPSize-byte datagrams
	// (payload, default 1472) at UDPRate bits/s of payload in all, paced in
	// user space and split evenly over the sockets. Failed sends are counted
	// (Result.UDPSendErrors), never fatal.
	UDP     int
	UDPRate float64
	UDPSize int
	// Hist adds the RPC latency histogram itself to each Result, so results
	// of several clients can be merged (MergeLatency).
	Hist bool

	ConnectTimeout time.Duration // whole connect phase (default 5s)
	ControlTimeout time.Duration // each server snapshot (default 2s)
	RTTInterval    time.Duration // srtt sampling period (default 100ms)

	// Deadline, if set, is when every socket operation fails at the latest.
	// Run sets it to the end of the run plus slack.
	Deadline time.Time
}

func (cfg *Config) defaults() error {
	if cfg.RPCSize == 0 {
		cfg.RPCSize = 10 << 10
	}
	if cfg.ReplySize == 0 {
		cfg.ReplySize = 64
	}
	if cfg.ChunkSize == 0 {
		cfg.ChunkSize = 128 << 10
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 5 * time.Second
	}
	if cfg.ControlTimeout == 0 {
		cfg.ControlTimeout = 2 * time.Second
	}
	if cfg.RTTInterval == 0 {
		cfg.RTTInterval = 100 * time.Millisecond
	}
	if cfg.UDPSize == 0 {
		cfg.UDPSize = DefaultUDPSize
	}
	switch {
	case cfg.Addr == "":
		return errors.New("workload: no server address")
	case cfg.Streams < 0 || cfg.RPCs < 0 || cfg.UDP < 0 || cfg.Streams+cfg.RPCs+cfg.UDP == 0:
		return errors.New("workload: need at least one bulk stream, RPC loop or UDP socket")
	case cfg.Streams > 1024 || cfg.RPCs > 1024 || cfg.UDP > 1024:
		return errors.New("workload: at most 1024 streams, 1024 RPC loops and 1024 UDP sockets")
	case cfg.UDP > 0 && (cfg.UDPRate < 8e3 || cfg.UDPRate > 400e9):
		return errors.New("workload: UDP sockets need a rate of 8 kbit/s to 400 Gbit/s")
	case cfg.UDPSize < MinUDPSize || cfg.UDPSize > MaxUDPSize:
		return fmt.Errorf("workload: UDP datagram size must be %d..%d bytes", MinUDPSize, MaxUDPSize)
	case cfg.RPCSize < rpcHeaderLen || cfg.RPCSize > MaxRPCSize:
		return fmt.Errorf("workload: RPC size must be %d..%d bytes", rpcHeaderLen, MaxRPCSize)
	case cfg.ReplySize < 1 || cfg.ReplySize > MaxRPCSize:
		return fmt.Errorf("workload: reply size must be 1..%d bytes", MaxRPCSize)
	case !(cfg.RPCRate >= 0 && cfg.RPCRate <= MaxRPCRate): // NaN too
		return fmt.Errorf("workload: RPC rate must be 0 (back to back) to %d a second", MaxRPCRate)
	case cfg.ChunkSize < 1 || cfg.ChunkSize > 64<<20:
		return errors.New("workload: bad chunk size")
	case cfg.Warmup < 0 || cfg.Duration <= 0:
		return errors.New("workload: need a positive duration")
	}
	return nil
}

// Latency summarises RPC latencies, in microseconds.
type Latency struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean_us"`
	P50   float64 `json:"p50_us"`
	P90   float64 `json:"p90_us"`
	P99   float64 `json:"p99_us"`
	P999  float64 `json:"p999_us"`
	Max   float64 `json:"max_us"`
	// InFlightMax is the age of the oldest request still unanswered when the
	// window closed (0 if none): a stalled RPC shows here, not in Max.
	InFlightMax float64 `json:"inflight_max_us"`
}

// Result is what one measurement window measured.
type Result struct {
	Name      string `json:"name,omitempty"`
	Addr      string `json:"addr"`
	CC        string `json:"cc"`
	Streams   int    `json:"streams"`
	RPCs      int    `json:"rpcs"`
	RPCSize   int    `json:"rpc_size"`
	ReplySize int    `json:"reply_size"`

	// Start is the window's start (Unix ns); Duration its length on the
	// client, ServerDuration the server's clock between its two snapshots.
	Start          int64   `json:"start_unix_ns"`
	Duration       float64 `json:"duration_s"`
	ServerDuration float64 `json:"server_duration_s,omitempty"`

	// Goodput is bulk payload per second over the window, from the bytes the
	// server read (Source "server") or, when the server could not be asked,
	// from the senders' TCP_INFO bytes_acked (Source "sender").
	Goodput      float64 `json:"goodput_bps"`
	TotalGoodput float64 `json:"total_goodput_bps"` // bulk + RPC request + UDP bytes
	Source       string  `json:"source"`
	BulkBytes    uint64  `json:"bulk_bytes"`
	RPCBytes     uint64  `json:"rpc_bytes"` // request bytes, headers included

	// SenderGoodput is the bulk streams' bytes_acked delta over the window.
	SenderGoodput float64   `json:"sender_goodput_bps"`
	StreamGoodput []float64 `json:"stream_goodput_bps,omitempty"`

	Retransmits uint64  `json:"retransmits"`               // tcpi_total_retrans delta, all data sockets
	RPCRetrans  uint64  `json:"rpc_retransmits,omitempty"` // ... of the RPC sockets alone
	DeliveredCE uint64  `json:"delivered_ce"`              // tcpi_delivered_ce delta (ECN echoes seen)
	RTT         float64 `json:"rtt_us"`                    // mean tcpi_rtt (srtt) of the bulk sockets
	RTTMax      float64 `json:"rtt_max_us"`
	Cwnd        float64 `json:"cwnd"` // mean tcpi_snd_cwnd (segments) of the bulk sockets

	RPC      Latency  `json:"rpc"`
	Warnings []string `json:"warnings,omitempty"`

	// UDP: the sockets, what the client tried to send (UDPOffered, payload
	// bits/s, failed sends included), what sendmsg accepted (UDPSent), the
	// failed sends and the first error's text, and what the server received
	// (UDPBytes, UDPDatagrams, UDPGoodput; 0 when Source is "sender").
	UDP           int     `json:"udp,omitempty"`
	UDPSize       int     `json:"udp_size,omitempty"`
	UDPOffered    float64 `json:"udp_offered_bps,omitempty"`
	UDPSent       float64 `json:"udp_sent_bps,omitempty"`
	UDPSentBytes  uint64  `json:"udp_sent_bytes,omitempty"`
	UDPSendErrors uint64  `json:"udp_send_errors,omitempty"`
	UDPSendError  string  `json:"udp_send_error,omitempty"`
	UDPBytes      uint64  `json:"udp_bytes,omitempty"`
	UDPDatagrams  uint64  `json:"udp_datagrams,omitempty"`
	UDPGoodput    float64 `json:"udp_goodput_bps,omitempty"`

	// Hist is the RPC latency histogram (microseconds), when Config.Hist.
	Hist *hdrhistogram.Snapshot `json:"hist,omitempty"`
}

// NewHistogram returns an empty latency histogram as the client keeps them:
// 1 us to 600 s, 3 significant figures.
func NewHistogram() *hdrhistogram.Histogram { return hdrhistogram.New(1, 600_000_000, 3) }

// Summarize turns a histogram of microseconds into a Latency.
func Summarize(h *hdrhistogram.Histogram) Latency {
	l := Latency{Count: h.TotalCount()}
	if l.Count > 0 {
		l.Mean = h.Mean()
		l.P50 = float64(h.ValueAtQuantile(50))
		l.P90 = float64(h.ValueAtQuantile(90))
		l.P99 = float64(h.ValueAtQuantile(99))
		l.P999 = float64(h.ValueAtQuantile(99.9))
		l.Max = float64(h.Max())
	}
	return l
}

// MergeLatency merges the histograms of several results (all with Hist) and
// summarizes them; the in-flight maximum is the largest of theirs. ok is
// false when a result has no histogram.
func MergeLatency(rs []*Result) (l Latency, ok bool) {
	h := NewHistogram()
	for _, r := range rs {
		if r.Hist == nil {
			return Latency{}, false
		}
		h.Merge(hdrhistogram.Import(r.Hist))
	}
	l = Summarize(h)
	for _, r := range rs {
		l.InFlightMax = max(l.InFlightMax, r.RPC.InFlightMax)
	}
	return l, true
}

type counters struct {
	acked, retrans, ce uint64
}

type serverSnap struct {
	t                    time.Duration
	bulk, rpcReq, rpcRep uint64
	udpBytes, udpDgrams  uint64
	err                  error
}

// udpCounters are the client's UDP totals since Dial (bytes are payload).
type udpCounters struct {
	attempted, sent, sentDgrams, errors uint64
}

type segment struct {
	name    string
	gen     uint64
	start   time.Time
	info0   []counters
	srv0    chan serverSnap
	hist    *hdrhistogram.Histogram
	rttSum  float64
	rttN    int
	rttMax  uint32
	cwndSum float64
	udp0    udpCounters
	warn    []string
}

// Client holds a session's connections. Dial, then Begin and End any number of
// measurement windows, then Close.
type Client struct {
	cfg     Config
	session uint64

	ctrlMu     sync.Mutex
	ctrl       net.Conn
	ctrlBroken error

	bulk, rpc []net.Conn
	all       []net.Conn // bulk and rpc (TCP)
	udp       []net.Conn

	udpAttempted, udpSent, udpSentDgrams, udpErrors atomic.Uint64
	udpErrOnce                                      sync.Once
	udpFirstErr                                     atomic.Value   // string
	inflight                                        []atomic.Int64 // start (Unix ns) of each loop's outstanding RPC
	cc                                              string

	stop      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup

	gen    atomic.Uint64
	mu     sync.Mutex
	seg    *segment
	loopMu sync.Mutex
	loopEr []string
}

// Dial connects the control, bulk and RPC connections and starts traffic.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if cfg.Deadline.IsZero() {
		cfg.Deadline = time.Now().Add(cfg.ConnectTimeout + cfg.Warmup + cfg.Duration + 2*cfg.ControlTimeout + time.Second)
	}
	var sid [8]byte
	rand.Read(sid[:])
	c := &Client{cfg: cfg, session: binary.BigEndian.Uint64(sid[:]), stop: make(chan struct{})}
	cctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	d := net.Dialer{Control: setCC(cfg.CC), KeepAlive: -1}
	connect := func(kind byte) (net.Conn, error) {
		conn, err := d.DialContext(cctx, "tcp", cfg.Addr)
		if err != nil {
			return nil, fmt.Errorf("workload: connect %s: %w", cfg.Addr, err)
		}
		dl, _ := cctx.Deadline()
		conn.SetWriteDeadline(dl)
		if _, err := conn.Write(encodeHello(kind, c.session)); err != nil {
			conn.Close()
			return nil, fmt.Errorf("workload: hello to %s: %w", cfg.Addr, err)
		}
		conn.SetWriteDeadline(cfg.Deadline)
		conn.SetReadDeadline(cfg.Deadline)
		return conn, nil
	}
	var err error
	if c.ctrl, err = connect(kindControl); err != nil {
		return nil, err
	}
	for i := 0; i < cfg.Streams && err == nil; i++ {
		var conn net.Conn
		if conn, err = connect(kindBulk); err == nil {
			c.bulk = append(c.bulk, conn)
		}
	}
	for i := 0; i < cfg.RPCs && err == nil; i++ {
		var conn net.Conn
		if conn, err = connect(kindRPC); err == nil {
			c.rpc = append(c.rpc, conn)
		}
	}
	c.all = append(append([]net.Conn{}, c.bulk...), c.rpc...)
	for i := 0; i < cfg.UDP && err == nil; i++ {
		var conn net.Conn
		if conn, err = (&net.Dialer{}).DialContext(cctx, "udp", cfg.Addr); err != nil {
			err = fmt.Errorf("workload: udp socket to %s: %w", cfg.Addr, err)
		} else {
			c.udp = append(c.udp, conn)
		}
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	if len(c.all) > 0 {
		c.cc = congestionControl(c.all[0])
	}
	c.inflight = make([]atomic.Int64, len(c.rpc))
	for _, conn := range c.bulk {
		c.wg.Add(1)
		go c.bulkLoop(conn)
	}
	for i, conn := range c.rpc {
		c.wg.Add(1)
		go c.rpcLoop(i, conn)
	}
	for _, conn := range c.udp {
		c.wg.Add(1)
		go c.udpLoop(conn, cfg.UDPRate/float64(len(c.udp)))
	}
	c.wg.Add(1)
	go c.rttLoop()
	return c, nil
}

func (c *Client) stopped() bool {
	select {
	case <-c.stop:
		return true
	default:
		return false
	}
}

func (c *Client) loopError(what string, err error) {
	if c.stopped() {
		return
	}
	c.loopMu.Lock()
	if len(c.loopEr) < 16 {
		c.loopEr = append(c.loopEr, fmt.Sprintf("%s: %v", what, err))
	}
	c.loopMu.Unlock()
}

func (c *Client) bulkLoop(conn net.Conn) {
	defer c.wg.Done()
	buf := make([]byte, c.cfg.ChunkSize)
	for !c.stopped() {
		if _, err := conn.Write(buf); err != nil {
			c.loopError("bulk stream", err)
			return
		}
	}
}

func (c *Client) rpcLoop(i int, conn net.Conn) {
	defer c.wg.Done()
	req := make([]byte, c.cfg.RPCSize)
	binary.BigEndian.PutUint32(req[0:], uint32(c.cfg.RPCSize))
	binary.BigEndian.PutUint32(req[4:], uint32(c.cfg.ReplySize))
	rep := make([]byte, c.cfg.ReplySize)
	var every time.Duration
	if c.cfg.RPCRate > 0 {
		every = time.Duration(float64(time.Second) / c.cfg.RPCRate)
	}
	next := time.Now()
	for !c.stopped() {
		if every > 0 && !c.waitUntil(next) {
			return
		}
		gen := c.gen.Load()
		t0 := time.Now()
		if every > 0 {
			next = next.Add(every)
			if next.Before(t0) {
				next = t0 // behind: the next at once, no catching up
			}
		}
		c.inflight[i].Store(t0.UnixNano())
		if _, err := conn.Write(req); err != nil {
			c.loopError("rpc request", err)
			return
		}
		if _, err := io.ReadFull(conn, rep); err != nil {
			c.loopError("rpc reply", err)
			return
		}
		lat := time.Since(t0)
		c.inflight[i].Store(0)
		c.mu.Lock()
		if c.seg != nil && c.seg.gen == gen {
			c.seg.hist.RecordValue(max(1, lat.Microseconds()))
		}
		c.mu.Unlock()
	}
}

// waitUntil sleeps until t, or until the client stops (false).
func (c *Client) waitUntil(t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return !c.stopped()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-c.stop:
		return false
	case <-timer.C:
		return true
	}
}

// udpLoop sends datagrams at bps (payload bits/s) until stopped. It sleeps
// while ahead of the rate and never catches up more than 5 ms behind (a
// blocked send lowers the offered rate instead of bursting after it). A
// failed send is counted, its first error kept, and the loop goes on.
func (c *Client) udpLoop(conn net.Conn, bps float64) {
	defer c.wg.Done()
	size := c.cfg.UDPSize
	buf := make([]byte, size)
	copy(buf, udpMagic[:])
	binary.BigEndian.PutUint64(buf[4:], c.session)
	perNs := bps / 8 / 1e9 // bytes per ns
	slack := max(perNs*float64(5*time.Millisecond), float64(2*size))
	start := time.Now()
	var credit float64 // bytes sent (tried) since start, in rate terms
	for !c.stopped() {
		allowed := float64(time.Since(start)) * perNs
		if allowed-credit > slack {
			credit = allowed - slack
		}
		if allowed-credit < float64(size) {
			wait := time.Duration((float64(size) - (allowed - credit)) / perNs)
			time.Sleep(max(wait, 50*time.Microsecond))
			continue
		}
		credit += float64(size)
		c.udpAttempted.Add(uint64(size))
		conn.SetWriteDeadline(time.Now().Add(time.Second))
		if _, err := conn.Write(buf); err != nil {
			if c.stopped() {
				return
			}
			c.udpErrors.Add(1)
			c.udpErrOnce.Do(func() { c.udpFirstErr.Store(err.Error()) })
			continue
		}
		c.udpSent.Add(uint64(size))
		c.udpSentDgrams.Add(1)
	}
}

func (c *Client) udpSnap() udpCounters {
	return udpCounters{
		attempted: c.udpAttempted.Load(), sent: c.udpSent.Load(),
		sentDgrams: c.udpSentDgrams.Load(), errors: c.udpErrors.Load(),
	}
}

// rttLoop samples the srtt of the bulk sockets (or the RPC sockets when there
// are no bulk ones) while a window is open.
func (c *Client) rttLoop() {
	defer c.wg.Done()
	conns := c.bulk
	if len(conns) == 0 {
		conns = c.rpc
	}
	t := time.NewTicker(c.cfg.RTTInterval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		gen := c.gen.Load()
		c.mu.Lock()
		open := c.seg != nil
		c.mu.Unlock()
		if !open {
			continue
		}
		var infos []*unix.TCPInfo
		for _, conn := range conns {
			if info, err := TCPInfo(conn); err == nil {
				infos = append(infos, info)
			}
		}
		c.mu.Lock()
		if s := c.seg; s != nil && s.gen == gen {
			for _, info := range infos {
				s.rttSum += float64(info.Rtt)
				s.cwndSum += float64(info.Snd_cwnd)
				s.rttN++
				s.rttMax = max(s.rttMax, info.Rtt)
			}
		}
		c.mu.Unlock()
	}
}

func (c *Client) snapCounters() ([]counters, error) {
	out := make([]counters, len(c.all))
	for i, conn := range c.all {
		info, err := TCPInfo(conn)
		if err != nil {
			return nil, fmt.Errorf("workload: TCP_INFO: %w", err)
		}
		out[i] = counters{acked: info.Bytes_acked, retrans: uint64(info.Total_retrans), ce: uint64(info.Delivered_ce)}
	}
	return out, nil
}

// serverSnapshot asks the server for the session's counters, bounded by
// ControlTimeout. After one failure the control connection is not used again
// (a late answer would be misread).
func (c *Client) serverSnapshot() serverSnap {
	c.ctrlMu.Lock()
	defer c.ctrlMu.Unlock()
	if c.ctrlBroken != nil {
		return serverSnap{err: c.ctrlBroken}
	}
	dl := time.Now().Add(c.cfg.ControlTimeout)
	c.ctrl.SetDeadline(dl)
	// 'S' unless there are UDP sockets: then 'X', which servers from
	// before UDP do not know.
	var buf [snapLenX]byte
	cmd, n := byte(ctrlSnapshot), snapLen
	if len(c.udp) > 0 {
		cmd, n = ctrlSnapX, snapLenX
	}
	_, err := c.ctrl.Write([]byte{cmd})
	if err == nil {
		_, err = io.ReadFull(c.ctrl, buf[:n])
	}
	if err != nil {
		c.ctrlBroken = fmt.Errorf("server snapshot: %w", err)
		return serverSnap{err: c.ctrlBroken}
	}
	return serverSnap{
		t:      time.Duration(binary.BigEndian.Uint64(buf[0:])),
		bulk:   binary.BigEndian.Uint64(buf[8:]),
		rpcReq: binary.BigEndian.Uint64(buf[16:]),
		rpcRep: binary.BigEndian.Uint64(buf[24:]),
		// Zero for 'S'.
		udpBytes:  binary.BigEndian.Uint64(buf[32:]),
		udpDgrams: binary.BigEndian.Uint64(buf[40:]),
	}
}

// Begin opens a measurement window named name. The server's counters are
// read in the background, so Begin does not wait on the server.
func (c *Client) Begin(name string) error {
	info0, err := c.snapCounters()
	if err != nil {
		return err
	}
	h := NewHistogram()
	s := &segment{name: name, start: time.Now(), info0: info0, srv0: make(chan serverSnap, 1), hist: h, udp0: c.udpSnap()}
	c.mu.Lock()
	if c.seg != nil {
		c.mu.Unlock()
		return errors.New("workload: a window is already open")
	}
	s.gen = c.gen.Add(1)
	c.seg = s
	c.mu.Unlock()
	go func() { s.srv0 <- c.serverSnapshot() }()
	return nil
}

// End closes the open window and reports it. It waits on the server at most
// about twice ControlTimeout.
func (c *Client) End() (*Result, error) {
	c.mu.Lock()
	s := c.seg
	if s == nil {
		c.mu.Unlock()
		return nil, errors.New("workload: no window open")
	}
	c.seg = nil
	c.gen.Add(1)
	c.mu.Unlock()
	end := time.Now()
	udp1 := c.udpSnap()

	r := &Result{
		Name: s.name, Addr: c.cfg.Addr, CC: c.cc, Streams: len(c.bulk), RPCs: len(c.rpc),
		RPCSize: c.cfg.RPCSize, ReplySize: c.cfg.ReplySize,
		Start: s.start.UnixNano(), Duration: end.Sub(s.start).Seconds(),
	}
	if len(c.rpc) == 0 {
		r.RPCSize, r.ReplySize = 0, 0
	}
	if len(c.udp) > 0 {
		r.UDP, r.UDPSize = len(c.udp), c.cfg.UDPSize
		r.UDPOffered = float64(udp1.attempted-s.udp0.attempted) * 8 / r.Duration
		r.UDPSentBytes = udp1.sent - s.udp0.sent
		r.UDPSent = float64(r.UDPSentBytes) * 8 / r.Duration
		r.UDPSendErrors = udp1.errors - s.udp0.errors
		if e, ok := c.udpFirstErr.Load().(string); ok {
			r.UDPSendError = e
		}
	}
	info1, err := c.snapCounters()
	if err != nil {
		return nil, err
	}
	var srv0, srv1 serverSnap
	select {
	case srv0 = <-s.srv0:
	case <-time.After(c.cfg.ControlTimeout + 500*time.Millisecond):
		srv0 = serverSnap{err: errors.New("server snapshot at window start timed out")}
	}
	if srv0.err == nil {
		srv1 = c.serverSnapshot()
	}

	var senderBulk, senderRPC uint64
	for i := range c.all {
		d := counters{
			acked:   info1[i].acked - s.info0[i].acked,
			retrans: info1[i].retrans - s.info0[i].retrans,
			ce:      info1[i].ce - s.info0[i].ce,
		}
		r.Retransmits += d.retrans
		r.DeliveredCE += d.ce
		if i < len(c.bulk) {
			senderBulk += d.acked
			r.StreamGoodput = append(r.StreamGoodput, float64(d.acked)*8/r.Duration)
		} else {
			senderRPC += d.acked
			r.RPCRetrans += d.retrans
		}
	}
	r.SenderGoodput = float64(senderBulk) * 8 / r.Duration

	switch {
	case srv0.err != nil || srv1.err != nil:
		e := srv0.err
		if e == nil {
			e = srv1.err
		}
		s.warn = append(s.warn, fmt.Sprintf("server counters unavailable (%v): goodput from sender bytes_acked", e))
		r.Source = "sender"
		r.BulkBytes, r.RPCBytes = senderBulk, senderRPC
		r.Goodput = r.SenderGoodput
		r.TotalGoodput = float64(senderBulk+senderRPC) * 8 / r.Duration
		if len(c.udp) > 0 {
			s.warn = append(s.warn, "UDP received unknown without the server's counters: goodput counts UDP bytes sent")
			r.TotalGoodput += r.UDPSent
		}
	default:
		r.Source = "server"
		r.ServerDuration = (srv1.t - srv0.t).Seconds()
		r.BulkBytes = srv1.bulk - srv0.bulk
		r.RPCBytes = srv1.rpcReq - srv0.rpcReq
		r.UDPBytes = srv1.udpBytes - srv0.udpBytes
		r.UDPDatagrams = srv1.udpDgrams - srv0.udpDgrams
		if r.ServerDuration > 0 {
			r.Goodput = float64(r.BulkBytes) * 8 / r.ServerDuration
			r.UDPGoodput = float64(r.UDPBytes) * 8 / r.ServerDuration
			r.TotalGoodput = float64(r.BulkBytes+r.RPCBytes+r.UDPBytes) * 8 / r.ServerDuration
		}
	}

	c.mu.Lock()
	if s.rttN > 0 {
		r.RTT = s.rttSum / float64(s.rttN)
		r.RTTMax = float64(s.rttMax)
		r.Cwnd = s.cwndSum / float64(s.rttN)
	}
	c.mu.Unlock()
	r.RPC = Summarize(s.hist)
	if c.cfg.Hist && len(c.rpc) > 0 {
		r.Hist = s.hist.Export()
	}
	for i := range c.inflight {
		if t0 := c.inflight[i].Load(); t0 != 0 {
			r.RPC.InFlightMax = max(r.RPC.InFlightMax, float64(end.UnixNano()-t0)/1e3)
		}
	}
	c.loopMu.Lock()
	s.warn = append(s.warn, c.loopEr...)
	c.loopMu.Unlock()
	r.Warnings = s.warn
	return r, nil
}

// Close stops the traffic, ends the session and closes every connection. It
// returns once the traffic goroutines have ended (bounded: their sockets are
// closed under them).
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		close(c.stop)
		for _, conn := range c.all {
			conn.Close()
		}
		for _, conn := range c.udp {
			conn.Close()
		}
		if c.ctrl != nil {
			c.ctrlMu.Lock()
			if c.ctrlBroken == nil {
				c.ctrl.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
				c.ctrl.Write([]byte{ctrlQuit})
			}
			c.ctrl.Close()
			c.ctrlMu.Unlock()
		}
		c.wg.Wait()
	})
	return nil
}

// Run connects, runs Warmup then one window of Duration, and reports it. The
// run ends at Warmup+Duration (plus at most the connect time and two control
// timeouts) whatever the server does.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if cfg.Deadline.IsZero() {
		cfg.Deadline = time.Now().Add(cfg.ConnectTimeout + cfg.Warmup + cfg.Duration + 2*cfg.ControlTimeout + time.Second)
	}
	c, err := Dial(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := SleepCtx(ctx, cfg.Warmup); err != nil {
		return nil, err
	}
	if err := c.Begin(""); err != nil {
		return nil, err
	}
	// Cancellation ends the window early but still reports it.
	SleepCtx(ctx, cfg.Duration)
	return c.End()
}

// RunScript connects and then follows commands read line by line from cmds:
// "begin NAME" opens a window, "end" closes it and writes its Result as one
// JSON line to emit, "stop" (or end of input, or cfg.Duration since the
// start, or ctx) ends the run, closing an open window first. It writes
// "ready" to emit once connected.
func RunScript(ctx context.Context, cfg Config, cmds io.Reader, emit func(line string, r *Result) error) error {
	if err := cfg.defaults(); err != nil {
		return err
	}
	start := time.Now()
	if cfg.Deadline.IsZero() {
		cfg.Deadline = start.Add(cfg.Duration + 2*cfg.ControlTimeout + time.Second)
	}
	c, err := Dial(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(cmds)
		for sc.Scan() {
			select {
			case lines <- strings.TrimSpace(sc.Text()):
			case <-c.stop:
				return
			}
		}
	}()
	if err := emit("ready", nil); err != nil {
		return err
	}
	timer := time.NewTimer(time.Until(start.Add(cfg.Duration)))
	defer timer.Stop()
	open := false
	finish := func() error {
		if !open {
			return nil
		}
		open = false
		r, err := c.End()
		if err != nil {
			return err
		}
		return emit("", r)
	}
	for {
		var line string
		var ok bool
		select {
		case <-ctx.Done():
			return errors.Join(finish(), ctx.Err())
		case <-timer.C:
			return finish()
		case line, ok = <-lines:
			if !ok {
				return finish()
			}
		}
		cmd, arg, _ := strings.Cut(line, " ")
		switch cmd {
		case "":
		case "begin":
			if err := finish(); err != nil {
				return err
			}
			if err := c.Begin(strings.TrimSpace(arg)); err != nil {
				return err
			}
			open = true
		case "end":
			if err := finish(); err != nil {
				return err
			}
		case "stop":
			return finish()
		default:
			return fmt.Errorf("workload: unknown script command %q (want begin NAME, end, stop)", line)
		}
	}
}

// SleepCtx waits d or until ctx is done, whichever comes first, and
// returns ctx's error in the second case.
func SleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
