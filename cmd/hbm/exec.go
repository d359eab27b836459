package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/hbm-dev/hbm/internal/execcg"
)

// hbm exec: flags and exit status; the logic is internal/execcg.

func init() {
	commands = append(commands, newExecCmd)
}

func newExecCmd() *cobra.Command {
	var lf limitFlags
	cmd := &cobra.Command{
		Use:   "exec [--egress RATE] [--ingress RATE] -- CMD [ARGS...]",
		Short: "Run a command in a fresh cgroup with its own limits",
		Long: `Run CMD in a fresh cgroup (` + execcg.Parent + `/<pid>-<start>[-<n>]) limited as the flags say,
and remove the cgroup and its limits when CMD ends. hbm exits with CMD's exit
status, or is killed by the signal that killed it (128+N for signals hbm
cannot re-raise). Signals hbm receives are passed to CMD (SIGINT and SIGQUIT
are left to the terminal when there is one: it sends them to CMD itself).
If hbm is killed, CMD is killed with it, and the next hbm command that
changes limits (exec, set, unset, prune, daemon) removes the group and its
limits. A run is judged dead by a lock its hbm holds (released by the kernel
when it dies), so runs in other PID namespaces are safe; show and top never
clean up.

hbm exec's own failures exit 125 (setup), 126 (CMD cannot run) or 127 (CMD
not found). The options are hbm set's.`,
		Example: `  hbm exec --egress 200mbit -- curl -O https://example.com/big.iso
  hbm exec --egress 1gbit --ingress 500mbit -- ./backup.sh /data`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 0 {
				return usagef("exec: put the command after --: hbm exec [flags] -- CMD [ARGS...]")
			}
			eg, in, err := lf.limits(cmd)
			if err != nil {
				return err
			}
			if err := requireRoot(); err != nil {
				return err
			}
			res, err := execcg.Run(execcg.Options{
				PinDir: pinDir, Egress: eg, Ingress: in, Argv: args,
				Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
				Warn: func(format string, a ...any) { fmt.Fprintf(os.Stderr, "hbm: warning: "+format+"\n", a...) },
			})
			if err != nil {
				fmt.Fprintf(os.Stderr, "hbm: exec: %v\n", err)
				os.Exit(res.Code)
			}
			if res.Signal != 0 {
				execcg.Reraise(res.Signal)
			}
			os.Exit(res.Code)
			return nil
		},
	}
	lf.register(cmd)
	return cmd
}
