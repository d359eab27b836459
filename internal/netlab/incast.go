package netlab

// The incast lab: N sender hosts and one receiver on a Linux bridge whose
// port toward the receiver is the bottleneck (tbf at Rate with a Buffer-byte
// queue: the switch buffer in front of the receiver that incast overflows).
//
//	s0 ─┐
//	s1 ─┤  switch: br0 ── p-rcv (tbf) ── rcv
//	... ─┤
//	sN ─┘

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hbm-dev/hbm/internal/workload"
)

const incastLink = "fabric"

// IncastOptions configure an incast lab.
type IncastOptions struct {
	Senders int    // sender hosts (default 4, at most 64)
	Rate    uint64 // bottleneck rate, bits/s (default 2 Gbit/s)
	Buffer  int    // bottleneck queue, bytes (default 128 KB)
	Burst   int    // tbf bucket, bytes (default 32 KB)
	// ReceiverCPUs pins the receiver (its processes and the packets it
	// receives) to these CPUs and OtherCPUs the senders and the switch:
	// two machines' worth of CPU instead of one shared by all (see
	// Config.CPUs). Both or neither.
	ReceiverCPUs, OtherCPUs []int
}

// Incast is a built incast lab.
type Incast struct {
	*Lab
	Senders    []string // sender host names
	SenderNS   []string
	ReceiverNS string
	BridgeNS   string
	Bottleneck string // the bridge port toward the receiver (in BridgeNS)
	SenderIP   []net.IP
	ReceiverIP net.IP
	Opts       IncastOptions
}

// NewIncast builds an incast lab. On error nothing is left behind.
func NewIncast(opts IncastOptions) (*Incast, error) {
	if opts.Senders == 0 {
		opts.Senders = 4
	}
	if opts.Senders < 1 || opts.Senders > 64 {
		return nil, fmt.Errorf("netlab: %d senders, want 1..64", opts.Senders)
	}
	if opts.Rate == 0 {
		opts.Rate = 2_000_000_000
	}
	if opts.Buffer == 0 {
		opts.Buffer = 128 << 10
	}
	if opts.Burst == 0 {
		opts.Burst = 32 << 10
	}
	var senders []string
	for i := 0; i < opts.Senders; i++ {
		senders = append(senders, fmt.Sprintf("s%d", i))
	}
	hosts := append(slices.Clone(senders), Receiver)
	if (len(opts.ReceiverCPUs) == 0) != (len(opts.OtherCPUs) == 0) {
		return nil, errors.New("netlab: incast: ReceiverCPUs and OtherCPUs go together")
	}
	var cpus map[string][]int
	if len(opts.ReceiverCPUs) > 0 {
		cpus = map[string][]int{Receiver: opts.ReceiverCPUs, incastLink: opts.OtherCPUs}
		for _, s := range senders {
			cpus[s] = opts.OtherCPUs
		}
	}
	l, err := New(Config{
		Hosts:       hosts,
		Links:       []Link{{Name: incastLink, Hosts: hosts}},
		Bottlenecks: []Bottleneck{{Link: incastLink, To: Receiver, Rate: opts.Rate, Buffer: opts.Buffer, Burst: opts.Burst}},
		CPUs:        cpus,
	})
	if err != nil {
		return nil, err
	}
	in := &Incast{Lab: l, Senders: senders, Opts: opts,
		ReceiverNS: l.Host(Receiver).NS, ReceiverIP: l.Host(Receiver).IP4[incastLink],
		BridgeNS: l.Link(incastLink).Switch, Bottleneck: l.Link(incastLink).Ports[Receiver]}
	for _, s := range senders {
		in.SenderNS = append(in.SenderNS, l.Host(s).NS)
		in.SenderIP = append(in.SenderIP, l.Host(s).IP4[incastLink])
	}
	return in, nil
}

// SetBottleneck (re)installs the bottleneck: tbf at rateBps with a queue of
// buffer bytes and a bucket of burst bytes.
func (in *Incast) SetBottleneck(rateBps uint64, buffer, burst int) error {
	return SetQdisc(in.BridgeNS, in.Bottleneck, TBF{Rate: rateBps, Limit: buffer, Burst: burst})
}

// BottleneckDrops returns the packets the bottleneck queue has dropped.
func (in *Incast) BottleneckDrops() (uint64, error) {
	st, err := ReadQdisc(in.BridgeNS, in.Bottleneck)
	return st.Drops, err
}

// SetReceiverCC makes the receiver's sockets use cc ("" for the namespace
// default) through a per-route congctl: DCTCP needs it at both ends, and
// the workload server sets none itself.
func (in *Incast) SetReceiverCC(cc string) error { return in.RouteCC(Receiver, cc) }

// ReceiverRx reads the receiver's rx_bytes and rx_packets (Lab.RxCounters).
func (in *Incast) ReceiverRx() (bytes, packets uint64, err error) {
	return in.RxCounters(Receiver, incastLink)
}

// ReceiverAddr returns the receiver's address and port as host:port.
func (in *Incast) ReceiverAddr(port int) string {
	return net.JoinHostPort(in.ReceiverIP.String(), strconv.Itoa(port))
}

// StartServer starts `bin workload serve` in the receiver inside the
// cgroup at cgroupDir ("" for none).
func (in *Incast) StartServer(bin, cgroupDir string, port int) (*Proc, error) {
	return in.Lab.StartServer(bin, Receiver, cgroupDir, in.ReceiverAddr(port))
}

// IncastResult is one run of every sender at once.
type IncastResult struct {
	Senders []*workload.Result
	// Sums and extremes over the senders.
	Goodput      float64 // bulk bits/s the receiver read, all senders
	TotalGoodput float64 // bulk + RPC request bits/s, all senders
	Retransmits  uint64
	RPCRetrans   uint64 // the RPC connections' part of Retransmits
	DeliveredCE  uint64
	RPCP50       float64 // median over senders of their RPC P50, us
	RPCP99       float64 // worst sender's RPC P99, us
	RPCCount     int64
	// Drops are the bottleneck queue's drops from the end of the warm-up to
	// the end of the run, the window the retransmissions are counted in;
	// DropsRun over the whole run, connection set-up and slow start
	// included.
	Drops    uint64
	DropsRun uint64
	// RxBps is what the receiver's interface received in the measurement
	// window (frames, Ethernet headers included: a limit held exactly on IP
	// bytes reads about 1.01 of it at MTU 1500), bits/s; RxPktBytes the
	// mean size of the packets it received (a TSO packet counts once).
	RxBps      float64
	RxPktBytes float64
	// CPU is the whole machine's use in the measurement window (senders,
	// bridge, bottleneck and receiver share its cores).
	CPU CPUUse
	// Softnet is what the receiving CPUs' backlogs dropped and how often
	// their softirq ran out of budget in the window (whole machine).
	Softnet Softnet
}

// IncastJob is one client configuration and the receiver's port it talks to.
type IncastJob struct {
	Cfg  workload.Config
	Port int
}

// Run runs `bin workload run` with cfg (Addr is filled in) in every sender
// at once and sums the results. Bounded by cfg's warm-up and duration plus
// 30s.
func (in *Incast) Run(ctx context.Context, bin string, cfg workload.Config, port int) (*IncastResult, error) {
	return in.RunJobs(ctx, bin, []IncastJob{{cfg, port}})
}

// RunJobs runs every job from every sender at once (one client process per
// sender and job: with the receiver's servers on separate ports, bulk and
// RPC traffic are served by separate processes, as netperf does in the
// seed), and sums the results. The jobs share the warm-up and duration of
// the first.
func (in *Incast) RunJobs(ctx context.Context, bin string, jobs []IncastJob) (*IncastResult, error) {
	if len(jobs) == 0 {
		return nil, errors.New("netlab: no incast job")
	}
	cfg := jobs[0].Cfg
	drops0, err := in.BottleneckDrops()
	if err != nil {
		return nil, err
	}
	n := len(in.Senders) * len(jobs)
	res := make([]*workload.Result, n)
	errs := make([]error, n)
	// The clients connect (~100 ms: exec, connect), warm up, then measure.
	dropsW := make(chan uint64, 1)
	type rxAt struct {
		b, pkts uint64
		cpu     CPUTimes
		softnet Softnet
	}
	readRx := func(into chan rxAt) {
		if b, p, err := in.ReceiverRx(); err == nil {
			into <- rxAt{b, p, ReadCPU(), ReadSoftnet()}
		}
	}
	rxW, rxE := make(chan rxAt, 1), make(chan rxAt, 1)
	warm := time.AfterFunc(cfg.Warmup+200*time.Millisecond, func() {
		readRx(rxW)
		n, err := in.BottleneckDrops()
		if err != nil {
			n = drops0
		}
		dropsW <- n
	})
	defer warm.Stop()
	// The window's end, a little before the clients stop (they connect
	// about 100 ms after the start).
	end := time.AfterFunc(cfg.Warmup+cfg.Duration, func() { readRx(rxE) })
	defer end.Stop()
	var wg sync.WaitGroup
	for j, job := range jobs {
		c := job.Cfg
		c.Addr = in.ReceiverAddr(job.Port)
		c.Warmup, c.Duration = cfg.Warmup, cfg.Duration
		for i, s := range in.Senders {
			k := j*len(in.Senders) + i
			wg.Add(1)
			go func() {
				defer wg.Done()
				res[k], errs[k] = in.RunClient(ctx, bin, s, "", c)
			}()
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	drops1, err := in.BottleneckDrops()
	if err != nil {
		return nil, err
	}
	r := &IncastResult{Senders: res, DropsRun: drops1 - drops0, Drops: drops1 - drops0}
	select {
	case w := <-dropsW:
		r.Drops = drops1 - w
	default: // the run ended before its warm-up did: count the whole run
	}
	select {
	case a := <-rxW:
		// The window's end is read by a timer about when the clients
		// stop: wait for it (bounded) rather than report no rate when
		// the clients ended a little earlier (a red CI: rx 0.000).
		endWait := time.NewTimer(5 * time.Second)
		defer endWait.Stop()
		select {
		case b := <-rxE:
			if secs := b.cpu.At.Sub(a.cpu.At).Seconds(); secs > 0 {
				r.RxBps = float64(b.b-a.b) * 8 / secs
			}
			if b.pkts > a.pkts {
				r.RxPktBytes = float64(b.b-a.b) / float64(b.pkts-a.pkts)
			}
			r.CPU = b.cpu.Since(a.cpu)
			r.Softnet = b.softnet.Since(a.softnet)
		case <-endWait.C:
		}
	default:
	}
	var p50s []float64
	for k, s := range res {
		r.Goodput += s.Goodput
		r.TotalGoodput += s.TotalGoodput
		r.Retransmits += s.Retransmits
		r.RPCRetrans += s.RPCRetrans
		r.DeliveredCE += s.DeliveredCE
		if jobs[k/len(in.Senders)].Cfg.RPCs == 0 {
			continue
		}
		r.RPCCount += s.RPC.Count
		r.RPCP99 = max(r.RPCP99, s.RPC.P99)
		p50s = append(p50s, s.RPC.P50)
	}
	if n := len(p50s); n > 0 {
		slices.Sort(p50s)
		r.RPCP50 = (p50s[(n-1)/2] + p50s[n/2]) / 2
	}
	return r, nil
}
