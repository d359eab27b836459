package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/hbm-dev/hbm/internal/daemon"
	"github.com/hbm-dev/hbm/internal/metrics"
)

// hbm daemon: flags and signals; the logic is internal/daemon.

func init() {
	commands = append(commands, newDaemonCmd)
}

func newDaemonCmd() *cobra.Command {
	var (
		config, addr string
		resync       time.Duration
		check        bool
	)
	cmd := &cobra.Command{
		Use:   "daemon --config FILE [--metrics ADDR]",
		Short: "Keep the limits a configuration file declares in force, and export metrics",
		Long: `Run as an agent: apply the limits FILE declares, remove the ones it applied
that are no longer declared (never a limit set by hand with hbm set), follow
cgroups as they appear and disappear (inotify, not polling), reload on SIGHUP
and when FILE changes, and serve Prometheus metrics at ADDR/metrics.

A file that does not parse or validate is refused with file:line and the
reason; at start the daemon exits 1, on reload the running configuration
stays. The limits stay in force when the daemon stops or is killed (they are
pinned); the next daemon adopts them without a gap. Under systemd
(Type=notify) it reports readiness after its first pass.

FILE (YAML):

  limits:
    - cgroup: /batch            # a cgroup path relative to the cgroup2 mount
      egress: 300mbit
    - unit: nginx.service       # a systemd unit, resolved to its cgroup
      egress: 2gbit
      ingress: 1gbit
    - glob: /workloads/*/job-*  # every matching cgroup, as they come and go
      egress: 100mbit
    - cgroup: /
      ingress: 9gbit
      no_drop: true

Each entry has one of cgroup, unit, glob; egress and/or ingress; and the
options of hbm set: loopback, no_drop, no_pace (true/false), burst, pace,
mark, drop_large, drop_small (durations), min_inflight. When two entries
name the same group and direction, the first wins.`,
		Example: `  hbm daemon --config /etc/hbm/hbm.yaml
  hbm daemon --config hbm.yaml --metrics 127.0.0.1:9640
  hbm daemon --config hbm.yaml --check     # validate the file and exit`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if config == "" {
				return usagef("daemon: --config FILE is required")
			}
			if check {
				cfg, err := daemon.Load(config)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %d rules, valid\n", config, len(cfg.Rules))
				return nil
			}
			if err := requireRoot(); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			return daemon.Run(ctx, daemon.Options{
				ConfigPath: config, PinDir: pinDir, MetricsAddr: addr, Version: version,
				Resync: resync, Reload: hup,
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&config, "config", "", "the configuration `FILE` (YAML)")
	f.StringVar(&addr, "metrics", metrics.DefaultAddr, "serve Prometheus metrics on `ADDR` (host:port; \"\" for none)")
	f.DurationVar(&resync, "resync", 5*time.Minute, "full pass at least this often (a backstop: groups are followed by notifications)")
	f.BoolVar(&check, "check", false, "validate the file and exit")
	return cmd
}
