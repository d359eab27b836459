package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hbm-dev/hbm/internal/testbed"
	"github.com/hbm-dev/hbm/internal/workload"
)

func init() { commands = append(commands, newDemoCmd) }

func newDemoCmd() *cobra.Command {
	var phase, settle time.Duration
	var cc string
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Show a limit working on a throw-away namespace testbed",
		Long: `Builds two network namespaces joined by a veth pair and a cgroup, and runs
3 bulk TCP streams plus a 10 KB request/response loop from the cgroup without
interruption while hbm limits it live: unlimited, "hbm set" to 200mbit, the
rate changed to 500mbit, then "hbm unset". Prints goodput and the 10 KB P99
of each phase, then removes everything (also on Ctrl-C). Needs root.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if os.Geteuid() != 0 {
				return errors.New("demo needs root (namespaces, cgroups, BPF)")
			}
			ctx, cancel := signalContext()
			defer cancel()
			return runDemo(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), cc, phase, settle)
		},
	}
	cmd.Flags().DurationVar(&phase, "phase", 5*time.Second, "measurement time per phase")
	cmd.Flags().DurationVar(&settle, "settle", time.Second, "time after each change before measuring")
	cmd.Flags().StringVar(&cc, "cc", "cubic", "TCP congestion control of the workload")
	return cmd
}

type demoPhase struct {
	name  string
	limit string // "" = none
	apply func(l *lab) error
}

func runDemo(ctx context.Context, stdout, stderr io.Writer, cc string, phase, settle time.Duration) error {
	if phase <= 0 || settle < 0 {
		return usagef("--phase must be positive and --settle not negative")
	}
	say := func(format string, args ...any) { fmt.Fprintf(stderr, "demo: "+format+"\n", args...) }
	say("building the testbed (namespaces hbm-demo-snd/rcv, cgroup /hbm-demo/w)")
	l, err := newLab("demo", "/hbm-demo/w", stderr)
	if err != nil {
		return err
	}
	defer func() {
		say("cleaning up")
		l.close()
	}()

	phases := []demoPhase{
		{"unlimited", "", nil},
		{"hbm set", "200mbit", func(l *lab) error { return l.hbm.Set(l.group, "200mbit") }},
		{"rate changed live", "500mbit", func(l *lab) error { return l.hbm.Set(l.group, "500mbit") }},
		{"hbm unset", "", func(l *lab) error { return l.hbm.Unset(l.group) }},
	}
	total := time.Duration(len(phases))*(phase+settle) + 20*time.Second
	cfg := workload.Config{Addr: l.tb.ReceiverAddr(testbed.ServerPort, false), Streams: 3, RPCs: 1, Duration: total, CC: cc}
	client, err := l.tb.StartScriptClient(l.self, l.dir, cfg)
	if err != nil {
		return err
	}
	defer client.Close()
	say("traffic running: 3 bulk streams + a 10 KB RPC loop, %s, from cgroup /hbm-demo/w", cc)

	var results []*workload.Result
	for i, p := range phases {
		if p.apply != nil {
			say("%s", strings.TrimSpace(p.name+" "+p.limit))
			if err := p.apply(l); err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
		}
		if err := sleepCtx(ctx, settle); err != nil {
			return err
		}
		hbm0, _ := l.hbm.Egress(l.group)
		r, err := client.Window(ctx, fmt.Sprint(i), phase)
		if err != nil {
			return err
		}
		if hbm1, _ := l.hbm.Egress(l.group); hbm0 != nil && hbm1 != nil {
			d := hbm1.Sub(*hbm0)
			say("  hbm counters: %s passed, %d packets, %d marked, %d cwr, %d dropped",
				fmtRate(float64(d.Bytes)*8/phase.Seconds()), d.Packets, d.Marked, d.CWR, d.Dropped)
		}
		results = append(results, r)
		say("  %s: goodput %s (bulk %s), 10 KB P99 %s", p.name, fmtRate(r.TotalGoodput), fmtRate(r.Goodput), fmtUs(r.RPC.P99))
	}
	client.Close()

	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PHASE\tLIMIT\tGOODPUT (BULK+RPC)\tOF LIMIT\t10 KB P50\t10 KB P99\tRETRANS")
	for i, p := range phases {
		r := results[i]
		of := "-"
		if p.limit != "" {
			rate, _ := testbed.ParseRate(p.limit)
			of = fmt.Sprintf("%.2f", r.TotalGoodput/float64(rate))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\n", p.name, orDash(p.limit), fmtRate(r.TotalGoodput), of,
			fmtUs(r.RPC.P50), fmtUs(r.RPC.P99), r.Retransmits)
	}
	return tw.Flush()
}

func fmtRate(bps float64) string {
	if bps >= 1e9 {
		return fmt.Sprintf("%.2f Gbit/s", bps/1e9)
	}
	return fmt.Sprintf("%.1f Mbit/s", bps/1e6)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
