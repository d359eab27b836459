package main

import (
	"errors"
	"os"

	"github.com/spf13/cobra"

	"github.com/hbm-dev/hbm/internal/eval"
)

func init() { commands = append(commands, newDemoCmd) }

// The demo is a quick built-in eval: one comparison small enough to watch.
var (
	demoScenario = "egress-200m"
	demoLimiters = []string{"hbm", "htb", "tbf", "none"}
)

func newDemoCmd() *cobra.Command {
	var cc, out string
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "A quick comparison: hbm vs tc htb vs tc tbf vs no limit at 200 Mbit/s",
		Long: `What "make demo" runs: "hbm eval egress-200m --quick --limiter hbm,htb,tbf,none
--cc cubic-ecn". Two network namespaces, one cgroup limited to 200 Mbit/s by
each limiter in turn, with back-to-back 10 KB and 1 MB RPCs and a bulk stream
(3 s each after 1 s of warm-up). Prints progress and the summary table, and
writes the full report (results.json, report.md, report.html) to --out.
Everything it creates is removed at the end (also on Ctrl-C). Needs root.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if os.Geteuid() != 0 {
				return errors.New("demo needs root (namespaces, cgroups, BPF)")
			}
			scens, err := eval.Load([]string{demoScenario})
			if err != nil {
				return err
			}
			self, err := os.Executable()
			if err != nil {
				return err
			}
			if out == "" {
				if out, err = eval.NewOutDir("", "hbm-demo"); err != nil {
					return err
				}
			}
			ctx, cancel := signalContext()
			defer cancel()
			return evalAndReport(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), scens, eval.Options{
				Bin: self, Quick: true, CCs: []string{cc}, Limiters: demoLimiters,
				Log: cmd.ErrOrStderr(), Command: os.Args, Version: version,
			}, out)
		},
	}
	cmd.Flags().StringVar(&cc, "cc", "cubic-ecn", "congestion control (cubic, cubic-ecn, dctcp, bbr)")
	cmd.Flags().StringVar(&out, "out", "", "report directory (default: a new $TMPDIR/hbm-demo-YYYYMMDD-HHMMSS-RANDOM)")
	return cmd
}
