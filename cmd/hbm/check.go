package main

import (
	"github.com/spf13/cobra"

	"github.com/hbm-dev/hbm/internal/probe"
)

func init() { commands = append(commands, newCheckCmd) }

// newCheckCmd is `hbm check`: probe the kernel for what hbm needs. It exits 1
// when a required feature is missing, 0 otherwise.
func newCheckCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check that the kernel has what hbm needs",
		Long: `check probes the running kernel for the features hbm uses: privileges,
cgroup v2, bpffs, BTF, cgroup_skb programs that may return the egress
congestion codes, the helpers and maps of the dataplane (bpf_spin_lock, the
cgroup iterator), cgroup BPF links, HBM's own programs as the verifier sees
them (loaded with private maps, nothing pinned or attached; the share of the
verifier's instruction limit each takes), and, optionally, CAP_SYS_PTRACE
(the socket walker's way into other processes' network namespaces),
struct_ops for the BPF congestion control of 'hbm cc' and
kernel.bpf_stats_enabled.

Each line is marked ✓ present, ✗ missing and required, or - missing and
optional. The exit status is 1 if a required feature is missing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			results := probe.Run()
			var err error
			if asJSON {
				err = probe.WriteJSON(cmd.OutOrStdout(), results)
			} else {
				err = probe.WriteTable(cmd.OutOrStdout(), results)
			}
			if err != nil {
				return err
			}
			return probe.Err(results)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the results as JSON")
	return cmd
}
