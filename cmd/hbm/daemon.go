package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/hbm-dev/hbm/internal/cgroup"
	"github.com/hbm-dev/hbm/internal/daemon"
	"github.com/hbm-dev/hbm/internal/k8s"
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
		kube         bool
		kcfg         k8s.Config
	)
	cmd := &cobra.Command{
		Use:   "daemon [--config FILE] [--kubernetes] [--metrics ADDR]",
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
name the same group and direction, the first wins.

With --kubernetes the daemon also follows the pods of its node (NODE_NAME,
or --node-name) and keeps each pod's kubernetes.io/egress-bandwidth and
kubernetes.io/ingress-bandwidth annotations in force on the pod's cgroup,
parsed as kubelet parses them (e.g. "10M", "1G": bits per second, 1k to
1P), with the options of hbm set per direction as hbm.io/<dir>-<option>
annotations (hbm.io/ingress-no-drop: "true", hbm.io/egress-mark: "2ms").
kubelet's cgroup driver (systemd or cgroupfs) is read from the cgroup tree;
a static pod's mirror is limited on the group named after its config hash.
--config is then optional; when both declare a limit on the same group and
direction, the file wins. The file's kubernetes: section is the operator's
policy (defaults shown):

  kubernetes:
    allowed_options: [burst, drop-large, drop-small, guarantee, loopback, mark, no-pace, pace]
    max_option_duration: 50ms
    invalid: default        # or keep: the pod's previous limit, else the default
    default_egress: 8kbit   # the node's default limits (hbm's minimum if unset)
    default_ingress: 8kbit
    follow_edits: true      # false: the first limits stay until the pod goes

A direction whose annotation is invalid, not allowed or out of range gets the
node's default limit (never unlimited) and a Warning Event on the pod (reason
InvalidBandwidth); a rate kubelet accepts but hbm cannot enforce (below 8k)
is clamped to the nearest one hbm enforces.

A glob entry limits at most max_groups groups (default 1000; the oldest
first). One daemon per pin directory (a second exits 1); the pin directory
must already be on a bpffs (the daemon never mounts one). The file is
reloaded on SIGHUP, when saved, and when a ConfigMap volume's ..data link is
swapped. Metrics: unauthenticated, at most 2 scrapes at once, server
timeouts; scrapes take no lock.`,
		Example: `  hbm daemon --config /etc/hbm/hbm.yaml
  hbm daemon --config hbm.yaml --metrics 127.0.0.1:9640
  hbm daemon --config hbm.yaml --check     # validate the file and exit
  hbm daemon --kubernetes                  # in a DaemonSet (deploy/kubernetes)
  hbm daemon --kubernetes --kubeconfig ~/.kube/config --node-name node-1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if config == "" && !kube {
				return usagef("daemon: give --config FILE, --kubernetes, or both")
			}
			if !kube && (cmd.Flags().Changed("kubeconfig") || cmd.Flags().Changed("node-name") || cmd.Flags().Changed("kube-cgroup-root")) {
				return usagef("daemon: --kubeconfig, --node-name and --kube-cgroup-root go with --kubernetes")
			}
			if check {
				if config == "" {
					return usagef("daemon: --check validates --config FILE")
				}
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
			opts := daemon.Options{
				ConfigPath: config, PinDir: pinDir, MetricsAddr: addr, Version: version,
				Resync: resync, Reload: hup,
			}
			if kube {
				mnt, err := cgroup.Mount()
				if err != nil {
					return err
				}
				src, err := k8s.New(kcfg, mnt, log.New(os.Stderr, "", 0))
				if err != nil {
					return err
				}
				opts.Pods = src
			}
			return daemon.Run(ctx, opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&config, "config", "", "the configuration `FILE` (YAML)")
	f.StringVar(&addr, "metrics", metrics.DefaultAddr, "serve Prometheus metrics on `ADDR` (host:port; \"\" for none)")
	f.DurationVar(&resync, "resync", 5*time.Minute, "full pass at least this often (a backstop: groups are followed by notifications)")
	f.BoolVar(&check, "check", false, "validate the file and exit")
	f.BoolVar(&kube, "kubernetes", false, "also enforce the bandwidth annotations of this node's Kubernetes pods")
	f.StringVar(&kcfg.Kubeconfig, "kubeconfig", "", "with --kubernetes: reach the API server with this kubeconfig `FILE` (default: the in-cluster service account)")
	f.StringVar(&kcfg.NodeName, "node-name", os.Getenv("NODE_NAME"), "with --kubernetes: this node's `NAME` (default $NODE_NAME)")
	f.StringVar(&kcfg.CgroupRoot, "kube-cgroup-root", "/", "with --kubernetes: kubelet's --cgroup-root, relative to the cgroup2 mount")
	return cmd
}
