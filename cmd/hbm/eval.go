package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hbm-dev/hbm/internal/eval"
	"github.com/hbm-dev/hbm/internal/eval/report"
	"github.com/hbm-dev/hbm/internal/workload"
)

func init() { commands = append(commands, newEvalCmd) }

type evalFlags struct {
	out              string
	quick, list      bool
	capture, ipv6    bool
	ccs, limiters    []string
	duration, warmup time.Duration
	runs             int
	counts           []int
	sizes            []string
}

func newEvalCmd() *cobra.Command {
	var f evalFlags
	cmd := &cobra.Command{
		Use:   "eval [SCENARIO...]",
		Short: "Run the seed evaluations (or your scenario files) on namespace testbeds",
		Long: `Runs evaluation scenarios, every host a network namespace on this machine, once
per congestion control and limiter (hbm, tc htb, tc tbf, none), and writes
DIR/results.json (every figure and the machine's metadata), DIR/report.md and
DIR/report.html. Prints progress while it runs and a summary table at the end.

SCENARIO is a built-in scenario's name (see --list) or a YAML file's path
(format: docs/eval.md); none means every built-in. HBM's state for the eval
is kept in a private pin directory: limits set on this machine are not
touched. Everything created is removed at the end, on failure and on Ctrl-C;
what a killed eval left (and HBM's BPF dctcp, if it installed it) is removed
by the next one. Without --out, DIR is a new ./hbm-eval-DATE-TIME-RANDOM.
The benchmarks are these scenarios (make bench). Needs root.`,
		Example: `  hbm eval --list
  hbm eval egress-200m --quick
  hbm eval egress-1g incast --cc cubic,dctcp --limiter hbm,none --out /tmp/ev
  hbm eval many-flows-200m --runs 3 --limiter hbm,htb,none
  hbm eval web-new-200m --sizes 100KB --counts 32 --limiter hbm,htb
  hbm eval web-keepalive-200m --ipv6 --limiter hbm,htb
  hbm eval ./my-scenario.yaml`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.list {
				return listScenarios(cmd.OutOrStdout())
			}
			return runEval(cmd, args, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.out, "out", "", "output directory (default: a new ./hbm-eval-YYYYMMDD-HHMMSS-RANDOM)")
	fl.BoolVar(&f.quick, "quick", false, "short runs (3s + 1s warm-up) of a reduced matrix (each scenario's quick: section)")
	fl.StringSliceVar(&f.ccs, "cc", nil, "congestion controls to run instead of the scenarios' (cubic, cubic-ecn, dctcp, bbr, ...)")
	fl.StringSliceVar(&f.limiters, "limiter", nil, "limiters to run instead of the scenarios' (hbm, htb, tbf, none)")
	fl.DurationVar(&f.duration, "duration", 0, "measurement window per run instead of the scenarios'")
	fl.DurationVar(&f.warmup, "warmup", 0, "warm-up per run instead of the scenarios'")
	fl.IntSliceVar(&f.counts, "counts", nil, "flow counts to run instead of the scenarios' counts lists (e.g. 16 or 1,64)")
	fl.StringSliceVar(&f.sizes, "sizes", nil, "response sizes to run instead of the http scenarios' sizes lists (e.g. 100KB or 10KB,1MB)")
	fl.IntVar(&f.runs, "runs", 1, "repeat every run N times and report medians with min-max (benchmarks: at least 3)")
	fl.BoolVar(&f.ipv6, "ipv6", false, "run every flow over IPv6 (the hosts' fd00::/8 addresses) instead of IPv4; reports name such runs \"SCENARIO (IPv6)\"")
	fl.BoolVar(&f.list, "list", false, "list the built-in scenarios and exit")
	fl.BoolVar(&f.capture, "capture", false, "keep a capture of each run's window (on the first flow's sender, headers only, at most 64 MB) in DIR/captures and chart it per round trip in report.html (see hbm analyze)")
	return cmd
}

func listScenarios(w io.Writer) error {
	ss, err := eval.Builtins()
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tRUNS\tDESCRIPTION")
	for _, s := range ss {
		runs := fmt.Sprintf("%d x %d", len(s.CCs), len(s.Limiters))
		if vs := s.Variants(); len(vs) > 1 {
			runs = fmt.Sprintf("%d x %d x %d", len(vs), len(s.CCs), len(s.Limiters))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Name, runs, s.Description)
	}
	return tw.Flush()
}

func runEval(cmd *cobra.Command, args []string, f evalFlags) error {
	for _, l := range f.limiters {
		if !contains(eval.Limiters, l) {
			return usagef("--limiter: unknown limiter %q (%s)", l, strings.Join(eval.Limiters, ", "))
		}
	}
	for i, c := range f.ccs {
		if cc := eval.CanonicalCC(c); cc != c {
			fmt.Fprintf(cmd.ErrOrStderr(), "eval: --cc %s is spelt %s (ECN on in every host); running %s\n", c, cc, cc)
			f.ccs[i], c = cc, cc
		}
		if !eval.ValidCC(c) {
			return usagef("--cc: bad congestion control %q (e.g. cubic, cubic-ecn, dctcp, bbr)", c)
		}
	}
	if f.duration < 0 || f.warmup < 0 {
		return usagef("--duration and --warmup must not be negative")
	}
	if f.runs < 1 || f.runs > 100 {
		return usagef("--runs: %d out of range 1..100", f.runs)
	}
	for _, n := range f.counts {
		if n < 1 || n > eval.MaxCount {
			return usagef("--counts: %d out of range 1..%d", n, eval.MaxCount)
		}
	}
	var sizes []int
	for _, v := range f.sizes {
		n, err := workload.ParseSize(v)
		if err != nil || n < 1 || n > eval.MaxHTTPSize {
			return usagef("--sizes: bad size %q: 1 byte to 64MB, e.g. 100KB or 10MB", v)
		}
		sizes = append(sizes, n)
	}
	scens, err := eval.Load(args)
	if err != nil {
		return usageError{err}
	}
	if os.Geteuid() != 0 {
		return errors.New("eval needs root (network namespaces, cgroups, BPF)")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	out := f.out
	if out == "" {
		if out, err = eval.NewOutDir(".", "hbm-eval"); err != nil {
			return err
		}
	}
	// Made now, so a --out that cannot be written fails before the runs,
	// not after them.
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	captureDir := ""
	if f.capture {
		captureDir = filepath.Join(out, "captures")
	}
	ctx, cancel := signalContext()
	defer cancel()
	return evalAndReport(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), scens, eval.Options{
		Bin: self, Quick: f.quick, CCs: f.ccs, Limiters: f.limiters, Duration: f.duration, Warmup: f.warmup, Runs: f.runs, Counts: f.counts, Sizes: sizes, IPv6: f.ipv6,
		Log: cmd.ErrOrStderr(), Command: os.Args, Version: version, CaptureDir: captureDir,
	}, out)
}

// evalAndReport runs, writes the files (also after a failure or Ctrl-C,
// with what was measured) and prints the summary.
func evalAndReport(ctx context.Context, stdout, stderr io.Writer, scens []*eval.Scenario, o eval.Options, out string) error {
	// A closed output pipe (hbm eval | head) must not kill the eval before
	// it cleans up: with SIGPIPE notified, writes fail with EPIPE instead.
	sigpipe := make(chan os.Signal, 1)
	signal.Notify(sigpipe, syscall.SIGPIPE)
	defer signal.Stop(sigpipe)
	res, err := eval.Run(ctx, scens, o)
	if res == nil {
		return err
	}
	if werr := eval.WriteFiles(out, res); werr != nil {
		return errors.Join(err, werr)
	}
	fmt.Fprintf(stderr, "eval: %d runs in %.0fs; wrote %s/results.json, report.md, report.html\n", len(res.Runs), res.Meta.ElapsedSec, out)
	if serr := report.WriteSummary(stdout, res); serr != nil {
		return errors.Join(err, serr)
	}
	return err
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
