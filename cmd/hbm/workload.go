package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hbm-dev/hbm/internal/cc"
	"github.com/hbm-dev/hbm/internal/cgroup"
	"github.com/hbm-dev/hbm/internal/rate"
	"github.com/hbm-dev/hbm/internal/testbed"
	"github.com/hbm-dev/hbm/internal/workload"
)

func init() { commands = append(commands, newWorkloadCmd) }

func newWorkloadCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:    "workload",
		Short:  "Built-in traffic for tests and benchmarks (bulk streams and RPC loops)",
		Hidden: true,
		Args:   cobra.NoArgs,
	}
	cmd.AddCommand(newWorkloadServeCmd(), newWorkloadRunCmd(), newWorkloadBenchCmd())
	for _, add := range workloadSubcommands {
		cmd.AddCommand(add())
	}
	return cmd
}

// workloadSubcommands are further workload tools, registered by the init
// functions of their own files (incast.go).
var workloadSubcommands []func() *cobra.Command

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func newWorkloadServeCmd() *cobra.Command {
	var listen string
	var delay time.Duration
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Accept bulk, RPC and control connections until interrupted",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			// UDP flows count on the same port number.
			pc, err := net.ListenPacket("udp", ln.Addr().String())
			if err != nil {
				ln.Close()
				return fmt.Errorf("udp sink: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "listening %s\n", ln.Addr())
			s := &workload.Server{Delay: delay}
			udpDone := make(chan error, 1)
			go func() { udpDone <- s.ServeUDP(ctx, pc) }()
			err = s.Serve(ctx, ln)
			pc.Close()
			return errors.Join(err, <-udpDone)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "[::]:5201", "address:port to listen on ([::] is IPv4 and IPv6)")
	cmd.Flags().DurationVar(&delay, "delay", 0, "sleep this long before each RPC reply (testing)")
	return cmd
}

func newWorkloadRunCmd() *cobra.Command {
	var (
		cfg                workload.Config
		rpcSize, replySize string
		udpRate, udpSize   string
		asJSON, script     bool
	)
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run bulk streams and RPC loops against a workload server and report",
		Long: `Run bulk streams and back-to-back RPC loops against "hbm workload serve" for
--warmup, then measure for --duration.

With --script, the measurement windows come from stdin instead: "begin NAME"
opens one, "end" closes it and prints its result as a JSON line, "stop" ends
the run; --duration is then the longest the run may last. "ready" is printed
once connected.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.RPCSize, err = workload.ParseSize(rpcSize); err != nil {
				return usagef("--rpc-size: %v", err)
			}
			if cfg.ReplySize, err = workload.ParseSize(replySize); err != nil {
				return usagef("--reply-size: %v", err)
			}
			if cfg.Addr == "" {
				return usagef("--connect is required")
			}
			if cfg.UDP > 0 {
				r, err := rate.Parse(udpRate)
				if err != nil {
					return usagef("--udp-rate: %v", err)
				}
				cfg.UDPRate = float64(r)
				if cfg.UDPSize, err = workload.ParseSize(udpSize); err != nil {
					return usagef("--udp-size: %v", err)
				}
			}
			ctx, cancel := signalContext()
			defer cancel()
			out := cmd.OutOrStdout()
			if script {
				return workload.RunScript(ctx, cfg, os.Stdin, func(line string, r *workload.Result) error {
					if r != nil {
						b, err := json.Marshal(r)
						if err != nil {
							return err
						}
						line = string(b)
					}
					_, err := fmt.Fprintln(out, line)
					return err
				})
			}
			r, err := workload.Run(ctx, cfg)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			printResult(out, r)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Addr, "connect", "", "server address:port")
	f.IntVar(&cfg.Streams, "streams", 3, "bulk streams")
	f.IntVar(&cfg.RPCs, "rpc", 1, "request/response loops")
	f.StringVar(&rpcSize, "rpc-size", "10KB", "request size (K = 1024)")
	f.StringVar(&replySize, "reply-size", "64", "reply size")
	f.DurationVar(&cfg.Duration, "duration", 10*time.Second, "measurement window")
	f.DurationVar(&cfg.Warmup, "warmup", 2*time.Second, "traffic before the window")
	f.StringVar(&cfg.CC, "cc", "", "TCP congestion control of every socket (default: the system's)")
	f.IntVar(&cfg.UDP, "udp", 0, "UDP sockets sending paced datagrams (send errors are counted, not fatal)")
	f.StringVar(&udpRate, "udp-rate", "100mbit", "UDP payload rate offered, all UDP sockets together")
	f.StringVar(&udpSize, "udp-size", strconv.Itoa(workload.DefaultUDPSize), "UDP datagram payload size")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	f.BoolVar(&script, "script", false, "take measurement windows from stdin (see above)")
	f.BoolVar(&cfg.Hist, "hist", false, "include the RPC latency histogram in the JSON result (to merge clients)")
	return cmd
}

func printResult(w io.Writer, r *workload.Result) {
	fmt.Fprintf(w, "window %.2fs, cc %s, %d streams, %d rpc loops\n", r.Duration, r.CC, r.Streams, r.RPCs)
	fmt.Fprintf(w, "goodput %.1f Mbit/s (%s side; sender %.1f), total with RPC %.1f Mbit/s\n",
		r.Goodput/1e6, r.Source, r.SenderGoodput/1e6, r.TotalGoodput/1e6)
	fmt.Fprintf(w, "retransmits %d, CE echoed %d, srtt mean %.0f us max %.0f us, cwnd mean %.1f\n", r.Retransmits, r.DeliveredCE, r.RTT, r.RTTMax, r.Cwnd)
	if r.UDP > 0 {
		fmt.Fprintf(w, "udp %d sockets x %d B: offered %.1f Mbit/s, sent %.1f Mbit/s, %d send errors%s, received %.1f Mbit/s (%d datagrams)\n",
			r.UDP, r.UDPSize, r.UDPOffered/1e6, r.UDPSent/1e6, r.UDPSendErrors, ifErr(r.UDPSendError), r.UDPGoodput/1e6, r.UDPDatagrams)
	}
	if r.RPCs > 0 {
		l := r.RPC
		fmt.Fprintf(w, "rpc %d B: %d done, p50 %.0f p90 %.0f p99 %.0f p99.9 %.0f max %.0f us (stuck %.0f us)\n",
			r.RPCSize, l.Count, l.P50, l.P90, l.P99, l.P999, l.Max, l.InFlightMax)
	}
	for _, w2 := range r.Warnings {
		fmt.Fprintf(w, "warning: %s\n", w2)
	}
}

// ---- bench ----

type benchOptions struct {
	rates, ccs, limiters []string
	warmup, duration     time.Duration
	streams, rpcs        int
	rpcSize              string
	tbfBurst             int
	ipv6, asJSON         bool
	name, group          string
}

type benchRow struct {
	Limiter    string            `json:"limiter"`
	Rate       string            `json:"rate,omitempty"`
	RateBps    uint64            `json:"rate_bps,omitempty"`
	CC         string            `json:"cc"`
	ECN        bool              `json:"ecn"`
	Ratio      float64           `json:"goodput_ratio,omitempty"`       // bulk goodput / limit
	TotalRatio float64           `json:"total_goodput_ratio,omitempty"` // (bulk + RPC request bytes) / limit
	Result     *workload.Result  `json:"result,omitempty"`
	HBM        *testbed.Counters `json:"hbm,omitempty"` // counters over the run (warm-up included)
	QdiscDrops *uint64           `json:"qdisc_drops,omitempty"`
	Error      string            `json:"error,omitempty"`

	hbmBefore  *testbed.Counters
	dropsStart uint64
}

func newWorkloadBenchCmd() *cobra.Command {
	var o benchOptions
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Egress benchmark: hbm vs tc htb vs tc tbf on a namespace testbed",
		Long: `Builds a two-namespace testbed and, for every congestion control, limiter
and rate, runs bulk streams and an RPC loop from one cgroup in the sender
namespace, then prints goodput / limit, retransmissions, limiter drops, HBM
marks and cwr, RTT and RPC latency. "none" runs once per congestion control,
as the unlimited reference. What bench/egress.sh runs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			return runBench(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), o)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.rates, "rates", []string{"200mbit", "1gbit"}, "limits to test (tc units)")
	f.StringSliceVar(&o.ccs, "ccs", []string{"cubic", "cubic+ecn", "bbr"}, "congestion controls (+ecn: tcp_ecn=1 in both namespaces)")
	f.StringSliceVar(&o.limiters, "limiters", []string{"none", "hbm", "htb", "tbf"}, "limiters: none, hbm, htb, tbf")
	f.DurationVar(&o.duration, "duration", 10*time.Second, "measurement window per cell")
	f.DurationVar(&o.warmup, "warmup", 2*time.Second, "warm-up per cell")
	f.IntVar(&o.streams, "streams", 3, "bulk streams")
	f.IntVar(&o.rpcs, "rpc", 1, "RPC loops")
	f.StringVar(&o.rpcSize, "rpc-size", "10KB", "RPC request size")
	f.IntVar(&o.tbfBurst, "tbf-burst", 0, "tbf bucket in bytes (0: max(2 ms at the rate, 64 KB))")
	f.BoolVar(&o.ipv6, "ipv6", false, "run over IPv6")
	f.BoolVar(&o.asJSON, "json", false, "print every figure as JSON instead of the table")
	f.StringVar(&o.name, "name", "bench", "testbed name (namespaces hbm-NAME-snd/rcv)")
	f.StringVar(&o.group, "cgroup", "/hbm-bench/w", "cgroup the sender workload runs in (created and removed)")
	return cmd
}

var tcDropped = regexp.MustCompile(`dropped (\d+)`)

func qdiscDrops(tb *testbed.Testbed) uint64 {
	s, err := tb.QdiscStats()
	if err != nil {
		return 0
	}
	var n uint64
	for _, m := range tcDropped.FindAllStringSubmatch(s, -1) {
		v, _ := strconv.ParseUint(m[1], 10, 64)
		n += v
	}
	return n
}

// lab is a testbed with a workload server, a cgroup for the sender and the
// hbm binary (this executable) to drive: what bench and demo share.
type lab struct {
	tb     *testbed.Testbed
	hbm    testbed.HBM
	self   string
	group  string
	dir    string
	server *testbed.Proc
	log    io.Writer
}

func newLab(name, group string, log io.Writer) (*lab, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if group == "" || group == "/" {
		return nil, errors.New("need a cgroup below the root")
	}
	l := &lab{hbm: testbed.HBM{Bin: self}, self: self, group: group, log: log}
	// The testbed first: it locks the name against a concurrent run.
	if l.tb, err = testbed.New(name, testbed.Options{}); err != nil {
		return nil, err
	}
	l.hbm.Unset(group) // leftovers of an interrupted run
	top := "/" + strings.Split(strings.TrimPrefix(group, "/"), "/")[0]
	if err := cgroup.Remove(top); err != nil {
		l.tb.Close()
		return nil, fmt.Errorf("remove leftover cgroup %s: %w", top, err)
	}
	g, err := cgroup.Create(group)
	if err != nil {
		l.tb.Close()
		return nil, err
	}
	l.dir = g.Dir
	if l.server, err = l.tb.StartServer(self, testbed.ServerPort); err != nil {
		l.close()
		return nil, err
	}
	return l, nil
}

// close removes everything the lab made: limits, processes, namespaces and
// cgroups. Safe to call twice.
func (l *lab) close() {
	l.hbm.Unset(l.group)
	if l.tb != nil {
		l.tb.Close()
	}
	top := "/" + strings.Split(strings.TrimPrefix(l.group, "/"), "/")[0]
	if err := cgroup.RemoveWait(top, 50, 100*time.Millisecond); err != nil {
		fmt.Fprintf(l.log, "hbm: cleanup: %v\n", err)
	}
}

func runBench(ctx context.Context, stdout, stderr io.Writer, o benchOptions) error {
	rpcSize, err := workload.ParseSize(o.rpcSize)
	if err != nil {
		return usagef("--rpc-size: %v", err)
	}
	rates := make([]uint64, len(o.rates))
	for i, r := range o.rates {
		if rates[i], err = testbed.ParseRate(r); err != nil {
			return usagef("--rates: %v", err)
		}
	}
	for _, lim := range o.limiters {
		switch lim {
		case "none", "hbm", "htb", "tbf":
		default:
			return usagef("--limiters: unknown limiter %q (none, hbm, htb, tbf)", lim)
		}
	}
	l, err := newLab(o.name, o.group, stderr)
	if err != nil {
		return err
	}
	defer l.close()
	tb := l.tb

	var rows []*benchRow
	for _, ccName := range o.ccs {
		base, ecn := strings.CutSuffix(ccName, "+ecn")
		if err := tb.SetECN(ecn); err != nil {
			return err
		}
		installed, err := benchCC(tb, base, stderr)
		if installed {
			defer func() {
				if _, err := cc.Remove(cc.DCTCP, false); err != nil {
					fmt.Fprintf(stderr, "bench: remove dctcp: %v\n", err)
				}
			}()
		}
		if err != nil {
			return err
		}
		for _, lim := range o.limiters {
			cellRates := rates
			if lim == "none" {
				cellRates = []uint64{0}
			}
			for _, rate := range cellRates {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				row := &benchRow{Limiter: lim, RateBps: rate, CC: ccName, ECN: ecn}
				if rate > 0 {
					row.Rate = testbed.FormatRate(rate)
				}
				cfg := workload.Config{
					Addr: tb.ReceiverAddr(testbed.ServerPort, o.ipv6), Streams: o.streams, RPCs: o.rpcs,
					RPCSize: rpcSize, Warmup: o.warmup, Duration: o.duration, CC: base,
				}
				benchCell(ctx, l, row, cfg, o.tbfBurst)
				rows = append(rows, row)
				fmt.Fprintln(stderr, "bench:", rowSummary(row))
			}
		}
	}
	if o.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	printBenchTable(stdout, rows, o)
	return nil
}

// benchCC prepares congestion control cc: dctcp is installed (HBM's BPF one,
// if the kernel has none) and the receiver's routes use it too, so that its
// listener negotiates ECN and echoes CE as DCTCP does. Other congestion
// controls clear the route setting. It returns whether it installed dctcp,
// for the caller to remove it again when the benchmark ends.
func benchCC(tb *testbed.Testbed, name string, log io.Writer) (installed bool, err error) {
	if name != cc.DCTCP {
		return false, tb.RouteCC(tb.ReceiverNS, tb.ReceiverDev, "")
	}
	res, err := cc.Install(name)
	if err != nil {
		return false, fmt.Errorf("bench: dctcp: %w", err)
	}
	if res.Outcome == cc.Installed {
		fmt.Fprintf(log, "bench: dctcp: %s (removed again at the end)\n", res.Detail)
	}
	return res.Outcome == cc.Installed, tb.RouteCC(tb.ReceiverNS, tb.ReceiverDev, name)
}

// benchCell installs the limiter, runs the workload and removes the limiter.
func benchCell(ctx context.Context, l *lab, row *benchRow, cfg workload.Config, tbfBurst int) {
	tb := l.tb
	var err error
	switch row.Limiter {
	case "hbm":
		err = l.hbm.Set(l.group, row.Rate)
		if err == nil {
			row.hbmBefore, err = l.hbm.Egress(l.group)
		}
		defer l.hbm.Unset(l.group)
	case "htb":
		err = tb.SetHTB(row.RateBps)
		defer tb.ClearQdisc()
	case "tbf":
		err = tb.SetTBF(row.RateBps, tbfBurst)
		defer tb.ClearQdisc()
	}
	if err != nil {
		row.Error = err.Error()
		return
	}
	if row.Limiter == "htb" || row.Limiter == "tbf" {
		row.dropsStart = qdiscDrops(tb)
	}
	row.Result, err = tb.RunClient(ctx, l.self, l.dir, cfg)
	if err != nil {
		row.Error = err.Error()
		return
	}
	switch row.Limiter {
	case "hbm":
		after, err := l.hbm.Egress(l.group)
		if err != nil {
			row.Error = "hbm show: " + err.Error()
		} else if after != nil && row.hbmBefore != nil {
			d := after.Sub(*row.hbmBefore)
			row.HBM = &d
		} else {
			row.Error = "hbm show lists no egress limit for " + l.group
		}
	case "htb", "tbf":
		d := qdiscDrops(tb) - row.dropsStart
		row.QdiscDrops = &d
	}
	if row.RateBps > 0 {
		row.Ratio = row.Result.Goodput / float64(row.RateBps)
		row.TotalRatio = row.Result.TotalGoodput / float64(row.RateBps)
	}
}

func rowSummary(r *benchRow) string {
	head := fmt.Sprintf("%-5s %-8s %-10s", r.Limiter, orDash(r.Rate), r.CC)
	if r.Error != "" {
		return head + " error: " + r.Error
	}
	res := r.Result
	s := fmt.Sprintf("%s goodput %.1f Mbit/s", head, res.Goodput/1e6)
	if r.Ratio > 0 {
		s += fmt.Sprintf(" (%.3f of limit, %.3f with RPC)", r.Ratio, r.TotalRatio)
	}
	return s + fmt.Sprintf(", retrans %d, rpc p99 %s", res.Retransmits, fmtUs(res.RPC.P99))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func fmtUs(us float64) string {
	switch {
	case us <= 0:
		return "-"
	case us < 1000:
		return fmt.Sprintf("%.0fus", us)
	case us < 100000:
		return fmt.Sprintf("%.2fms", us/1000)
	default:
		return fmt.Sprintf("%.0fms", us/1000)
	}
}

func printBenchTable(w io.Writer, rows []*benchRow, o benchOptions) {
	fam := "IPv4"
	if o.ipv6 {
		fam = "IPv6"
	}
	fmt.Fprintf(w, "HBM egress benchmark: %d bulk streams + %d x %s RPC loop, %v per cell (+%v warm-up), %s\n",
		o.streams, o.rpcs, o.rpcSize, o.duration, o.warmup, fam)
	fmt.Fprintln(w, "goodput: bulk payload the receiver read; total/limit adds the RPC requests (same cgroup)")
	fmt.Fprintln(w, "drops: hbm's (hbm) or the qdisc's (htb/tbf), over the run; marks/cwr: hbm's; CE echo: ECE seen by the senders")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "limiter\trate\tcc\tgoodput Mbit/s\t/limit\ttotal/limit\tretrans\tdrops\tmarks\tcwr\tCE echo\tsrtt\tRPC n\tRPC p50\tRPC p99\t")
	var errs []string
	for _, r := range rows {
		if r.Error != "" {
			errs = append(errs, fmt.Sprintf("[%d] %s %s %s: %s", len(errs)+1, r.Limiter, orDash(r.Rate), r.CC, firstLine(r.Error, 300)))
			fmt.Fprintf(tw, "%s\t%s\t%s\terror [%d]\t\t\t\t\t\t\t\t\t\t\t\t\n", r.Limiter, orDash(r.Rate), r.CC, len(errs))
			continue
		}
		res := r.Result
		ratio, total, drops, marks, cwr := "-", "-", "-", "-", "-"
		if r.Ratio > 0 {
			ratio = fmt.Sprintf("%.3f", r.Ratio)
			total = fmt.Sprintf("%.3f", r.TotalRatio)
		}
		if r.HBM != nil {
			drops = strconv.FormatUint(r.HBM.Dropped, 10)
			marks = strconv.FormatUint(r.HBM.Marked, 10)
			cwr = strconv.FormatUint(r.HBM.CWR, 10)
		}
		if r.QdiscDrops != nil {
			drops = strconv.FormatUint(*r.QdiscDrops, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f\t%s\t%s\t%d\t%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\t\n",
			r.Limiter, orDash(r.Rate), r.CC, res.Goodput/1e6, ratio, total, res.Retransmits, drops, marks, cwr,
			res.DeliveredCE, fmtUs(res.RTT), res.RPC.Count, fmtUs(res.RPC.P50), fmtUs(res.RPC.P99))
	}
	tw.Flush()
	for _, e := range errs {
		fmt.Fprintln(w, e)
	}
}

func firstLine(s string, n int) string {
	sc := bufio.NewScanner(strings.NewReader(s))
	if sc.Scan() {
		s = sc.Text()
	}
	if len(s) > n {
		s = s[:n] + "..."
	}
	return s
}

func ifErr(s string) string {
	if s == "" {
		return ""
	}
	return " (first: " + s + ")"
}
