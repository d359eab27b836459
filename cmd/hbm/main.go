// Command hbm is the Host Bandwidth Manager CLI: it divides a host's network
// bandwidth among cgroup v2 groups with BPF programs on the cgroup skb hooks.
//
// Each subcommand lives in a file of its own; this file holds the root command
// and the exit-code convention (0 ok, 1 failure, 2 usage error).
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hbm-dev/hbm/internal/execcg"
)

// version is set at link time (-ldflags "-X main.version=...").
var version = "dev"

// usageError marks an error caused by how hbm was invoked; it exits 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef returns a usage error (exit status 2).
func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "hbm",
		Short: "Host Bandwidth Manager: per-cgroup network bandwidth limits in BPF",
		Long: `hbm limits the network bandwidth of cgroup v2 groups with BPF programs on the
cgroup skb hooks. Over its rate a group's TCP senders are told to slow down
(ECN CE marks, the congestion return code) before packets are dropped.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
	}
	// Flag parsing errors are usage errors.
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.PersistentFlags().StringVar(&pinDir, "pin-dir", pinDir, "bpffs directory for HBM's state")
	root.PersistentFlags().MarkHidden("pin-dir")
	for _, add := range commands {
		root.AddCommand(add())
	}
	root.PersistentPreRun = cleanupExec
	return root
}

// cleansExec lists the commands that first clean up after killed hbm execs
// (their cgroups and limits): the ones that change limits. A command that
// only reads (show, top, check...) never cleans up: clean-up kills what is
// left in a dead run's group, and a read must never kill anything.
var cleansExec = map[string]bool{"set": true, "unset": true, "prune": true, "exec": true, "daemon": true}

func cleanupExec(cmd *cobra.Command, _ []string) {
	if !cleansExec[cmd.Name()] || cmd.Parent() != cmd.Root() || os.Geteuid() != 0 {
		return
	}
	done, err := execcg.Cleanup(pinDir)
	for _, g := range done {
		fmt.Fprintf(os.Stderr, "hbm: removed %s and its limits, left by a killed hbm exec\n", g)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "hbm: warning: cleaning up after a killed hbm exec: %v\n", err)
	}
}

// commands is filled by the init functions of the subcommand files.
var commands []func() *cobra.Command

func main() {
	root := newRoot()
	err := root.Execute()
	if err == nil {
		return
	}
	fmt.Fprintf(os.Stderr, "hbm: %v\n", err)
	var ue usageError
	if errors.As(err, &ue) || isCobraUsage(err) {
		os.Exit(2)
	}
	os.Exit(1)
}

// isCobraUsage recognises the errors cobra itself returns for bad invocations
// (unknown command, wrong argument count), which carry no type of their own.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand", "accepts ", "requires at least", "requires at most", "flag needs an argument", "invalid argument"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}
