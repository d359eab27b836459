package main

// `hbm workload incast` (hidden, with the other workload tools): the incast
// benchmark bench/incast.sh runs. N sender namespaces run bulk streams and an
// RPC loop each into one receiver through a bridge whose port to the
// receiver is the bottleneck (internal/testbed/incast.go), without HBM and
// with an ingress limit on the receiver's cgroup.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hbm-dev/hbm/internal/cgroup"
	"github.com/hbm-dev/hbm/internal/testbed"
	"github.com/hbm-dev/hbm/internal/workload"
)

type incastOptions struct {
	name, group      string
	senders          int
	streams, rpcs    int
	rpcSize          string
	rate, ingress    string
	buffer, burst    int
	hbmArgs          string
	ccs, modes       []string
	warmup, duration time.Duration
	asJSON           bool
}

type incastRow struct {
	CC          string             `json:"cc"`
	Mode        string             `json:"mode"` // none | hbm
	Goodput     float64            `json:"goodput_bps"`
	Ratio       float64            `json:"goodput_ratio"` // of the bottleneck
	Retransmits uint64             `json:"retransmits"`
	Drops       uint64             `json:"bottleneck_drops"`     // in the measurement window
	DropsRun    uint64             `json:"bottleneck_drops_run"` // set-up and warm-up included
	DeliveredCE uint64             `json:"delivered_ce"`
	RPCCount    int64              `json:"rpc_count"`
	RPCP50      float64            `json:"rpc_p50_us"` // median of the senders' P50
	RPCP99      float64            `json:"rpc_p99_us"` // worst sender's P99
	HBM         *testbed.Counters  `json:"hbm,omitempty"`
	Senders     []*workload.Result `json:"senders,omitempty"`
	Error       string             `json:"error,omitempty"`
}

func init() {
	workloadSubcommands = append(workloadSubcommands, newWorkloadIncastCmd)
}

func newWorkloadIncastCmd() *cobra.Command {
	var o incastOptions
	cmd := &cobra.Command{
		Use:   "incast",
		Short: "Incast benchmark: N senders into one receiver through a bottleneck, with and without an HBM ingress limit",
		Long: `Builds the incast testbed (N sender namespaces, a bridge namespace whose port
to the receiver is a tbf bottleneck, a receiver namespace) and, for every
congestion control and mode, runs bulk streams and an RPC loop from every
sender at once into a server in the receiver's cgroup. Mode "none" runs
without HBM, "hbm" with "hbm set CGROUP --ingress RATE HBM-ARGS". Prints
goodput, retransmissions, bottleneck drops, HBM marks and RPC latency.
What bench/incast.sh runs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			return runIncast(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.name, "name", "incast", "testbed name (namespaces hbm-NAME-*)")
	f.StringVar(&o.group, "cgroup", "/hbm-incast/r", "cgroup the receiver's server runs in (created and removed)")
	f.IntVar(&o.senders, "senders", 4, "sender hosts")
	f.IntVar(&o.streams, "streams", 2, "bulk streams per sender")
	f.IntVar(&o.rpcs, "rpc", 1, "RPC loops per sender")
	f.StringVar(&o.rpcSize, "rpc-size", "10KB", "RPC request size")
	f.StringVar(&o.rate, "rate", "2gbit", "bottleneck rate")
	f.IntVar(&o.buffer, "buffer", 128<<10, "bottleneck queue, bytes")
	f.IntVar(&o.burst, "burst", 32<<10, "bottleneck tbf bucket, bytes")
	f.StringVar(&o.ingress, "ingress", "", "HBM ingress limit (default 90% of --rate)")
	f.StringVar(&o.hbmArgs, "hbm-args", "--no-drop", "extra hbm set flags for mode hbm")
	f.StringSliceVar(&o.ccs, "ccs", []string{"cubic", "cubic+ecn", "bbr", "dctcp"}, "congestion controls (+ecn: tcp_ecn=1; dctcp: ECN, receiver too; skipped when not registered)")
	f.StringSliceVar(&o.modes, "modes", []string{"none", "hbm"}, "none, hbm")
	f.DurationVar(&o.duration, "duration", 8*time.Second, "measurement window per cell")
	f.DurationVar(&o.warmup, "warmup", 2*time.Second, "warm-up per cell")
	f.BoolVar(&o.asJSON, "json", false, "print JSON instead of the table")
	return cmd
}

func ccRegistered(name string) bool {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	if err != nil {
		return false
	}
	for _, f := range strings.Fields(string(b)) {
		if f == name {
			return true
		}
	}
	return false
}

func runIncast(ctx context.Context, stdout, stderr io.Writer, o incastOptions) error {
	rpcSize, err := workload.ParseSize(o.rpcSize)
	if err != nil {
		return usagef("--rpc-size: %v", err)
	}
	rate, err := testbed.ParseRate(o.rate)
	if err != nil {
		return usagef("--rate: %v", err)
	}
	ingress := o.ingress
	if ingress == "" {
		ingress = testbed.FormatRate(rate / 10 * 9)
	}
	if _, err := testbed.ParseRate(ingress); err != nil {
		return usagef("--ingress: %v", err)
	}
	for _, m := range o.modes {
		if m != "none" && m != "hbm" {
			return usagef("--modes: unknown mode %q (none, hbm)", m)
		}
	}
	if o.group == "" || o.group == "/" {
		return usagef("--cgroup: need a group below the root")
	}
	if err := requireRoot(); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	h := testbed.HBM{Bin: self}
	in, err := testbed.NewIncast(o.name, testbed.IncastOptions{Senders: o.senders, Rate: rate, Buffer: o.buffer, Burst: o.burst})
	if err != nil {
		return err
	}
	defer in.Close()
	top := "/" + strings.Split(strings.TrimPrefix(o.group, "/"), "/")[0]
	h.Unset(o.group) // leftovers of an interrupted run
	if err := cgroup.Remove(top); err != nil {
		return fmt.Errorf("remove leftover cgroup %s: %w", top, err)
	}
	g, err := cgroup.Create(o.group)
	if err != nil {
		return err
	}
	defer func() {
		h.Unset(o.group)
		in.Close() // the server leaves the group
		if err := cgroup.RemoveWait(top, 50, 100*time.Millisecond); err != nil {
			fmt.Fprintf(stderr, "hbm: cleanup: %v\n", err)
		}
	}()
	if _, err := in.StartServer(self, g.Dir, testbed.ServerPort); err != nil {
		return err
	}

	var rows []*incastRow
	for _, ccName := range o.ccs {
		cc, ecn := strings.CutSuffix(ccName, "+ecn")
		if cc == "dctcp" {
			ecn = true
			if !ccRegistered("dctcp") {
				fmt.Fprintln(stderr, "incast: dctcp not registered (hbm cc install dctcp): skipped")
				continue
			}
		}
		if err := in.SetECN(ecn); err != nil {
			return err
		}
		rcc := ""
		if cc == "dctcp" {
			rcc = "dctcp"
		}
		if err := in.SetReceiverCC(rcc); err != nil {
			return err
		}
		for _, mode := range o.modes {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			row := &incastRow{CC: ccName, Mode: mode}
			cfg := workload.Config{Streams: o.streams, RPCs: o.rpcs, RPCSize: rpcSize, Warmup: o.warmup, Duration: o.duration, CC: cc}
			incastCell(ctx, in, h, self, o.group, ingress, strings.Fields(o.hbmArgs), row, cfg, rate)
			rows = append(rows, row)
			fmt.Fprintf(stderr, "incast: %-10s %-4s %s\n", row.CC, row.Mode, incastSummary(row))
		}
	}
	if o.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	printIncastTable(stdout, rows, o, ingress)
	return nil
}

func incastCell(ctx context.Context, in *testbed.Incast, h testbed.HBM, self, group, ingress string, extra []string, row *incastRow, cfg workload.Config, rate uint64) {
	var before *testbed.Counters
	if row.Mode == "hbm" {
		if err := h.SetIngress(group, ingress, extra...); err != nil {
			row.Error = err.Error()
			return
		}
		defer h.Unset(group)
		before, _ = h.Ingress(group)
	}
	r, err := in.Run(ctx, self, cfg, testbed.ServerPort)
	if err != nil {
		row.Error = err.Error()
		return
	}
	row.Goodput, row.Retransmits, row.Drops, row.DropsRun, row.DeliveredCE = r.Goodput, r.Retransmits, r.Drops, r.DropsRun, r.DeliveredCE
	row.RPCCount, row.RPCP50, row.RPCP99, row.Senders = r.RPCCount, r.RPCP50, r.RPCP99, r.Senders
	row.Ratio = r.Goodput / float64(rate)
	if row.Mode == "hbm" {
		after, err := h.Ingress(group)
		if err != nil || after == nil || before == nil {
			row.Error = fmt.Sprintf("hbm show: no ingress counters for %s (%v)", group, err)
			return
		}
		d := after.Sub(*before)
		row.HBM = &d
	}
}

func incastSummary(r *incastRow) string {
	if r.Error != "" {
		return "error: " + r.Error
	}
	s := fmt.Sprintf("goodput %.1f Mbit/s (%.3f of bottleneck), retrans %d, drops %d (run %d), rpc p50 %s p99 %s",
		r.Goodput/1e6, r.Ratio, r.Retransmits, r.Drops, r.DropsRun, fmtUs(r.RPCP50), fmtUs(r.RPCP99))
	if r.HBM != nil {
		s += fmt.Sprintf(", hbm marked %d dropped %d", r.HBM.Marked, r.HBM.Dropped)
	}
	return s
}

func printIncastTable(w io.Writer, rows []*incastRow, o incastOptions, ingress string) {
	fmt.Fprintf(w, "HBM incast benchmark: %d senders x (%d bulk streams + %d x %s RPC loop) into one receiver\n",
		o.senders, o.streams, o.rpcs, o.rpcSize)
	fmt.Fprintf(w, "bottleneck: tbf %s, %d-byte queue, %d-byte bucket; %v per cell (+%v warm-up)\n", o.rate, o.buffer, o.burst, o.duration, o.warmup)
	fmt.Fprintf(w, "hbm: hbm set RECEIVER-CGROUP --ingress %s %s\n", ingress, o.hbmArgs)
	fmt.Fprintln(w, "retrans, drops (the bottleneck queue's): measurement window; run drops: set-up and warm-up too; marks, hbm drops: HBM's; RPC p50: median of the senders', p99: worst sender's")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "cc\thbm\tgoodput Mbit/s\t/bottleneck\tretrans\tdrops\trun drops\tmarks\thbm drops\tCE echo\tRPC n\tRPC p50\tRPC p99\t")
	var errs []string
	for _, r := range rows {
		if r.Error != "" {
			errs = append(errs, fmt.Sprintf("[%d] %s %s: %s", len(errs)+1, r.CC, r.Mode, firstLine(r.Error, 300)))
			fmt.Fprintf(tw, "%s\t%s\terror [%d]\t\t\t\t\t\t\t\t\t\t\t\n", r.CC, r.Mode, len(errs))
			continue
		}
		marks, hdrops := "-", "-"
		if r.HBM != nil {
			marks, hdrops = strconv.FormatUint(r.HBM.Marked, 10), strconv.FormatUint(r.HBM.Dropped, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.3f\t%d\t%d\t%d\t%s\t%s\t%d\t%d\t%s\t%s\t\n", r.CC, r.Mode, r.Goodput/1e6, r.Ratio,
			r.Retransmits, r.Drops, r.DropsRun, marks, hdrops, r.DeliveredCE, r.RPCCount, fmtUs(r.RPCP50), fmtUs(r.RPCP99))
	}
	tw.Flush()
	for _, e := range errs {
		fmt.Fprintln(w, e)
	}
}
