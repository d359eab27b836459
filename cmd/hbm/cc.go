package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/hbm-dev/hbm/internal/cc"
	"github.com/spf13/cobra"
)

func init() { commands = append(commands, newCCCmd) }

func newCCCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cc",
		Short: "Manage HBM's BPF TCP congestion controls (DCTCP)",
		Long: `HBM ships DCTCP (RFC 8257) written in BPF, for kernels without tcp_dctcp.
Once installed it is registered as "dctcp" like any congestion control:
select it with setsockopt(TCP_CONGESTION, "dctcp"), the sysctl
net.ipv4.tcp_congestion_control or iperf3 -C dctcp. DCTCP needs ECN: both
ends should use it, and the network (HBM) must mark CE.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newCCInstallCmd(), newCCRemoveCmd(), newCCListCmd(), newCCShowCmd())
	return cmd
}

// ccName validates the single NAME argument.
func ccName(args []string) (string, error) {
	if len(args) != 1 {
		return "", usagef("expected one congestion control name (%s)", strings.Join(cc.Names(), ", "))
	}
	for _, n := range cc.Names() {
		if args[0] == n {
			return n, nil
		}
	}
	return "", usagef("unknown congestion control %q: HBM ships %s", args[0], strings.Join(cc.Names(), ", "))
}

func newCCInstallCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "install NAME",
		Short: "Register HBM's BPF congestion control NAME (dctcp); idempotent",
		Long: `Register HBM's BPF congestion control NAME (only dctcp) and pin it under
/sys/fs/bpf/hbm/cc so it stays registered after hbm exits. Nothing changes if
it is installed already, or if the kernel has a native one (reported).`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := ccName(args)
			if err != nil {
				return err
			}
			res, err := cc.Install(name)
			if err != nil {
				return ccError("install "+name, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s: %s\n", name, res.Outcome, res.Detail)
			return nil
		},
	}
}

func newCCRemoveCmd() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "remove NAME",
		Short: "Unregister HBM's BPF congestion control NAME",
		Long: `Unregister HBM's BPF congestion control NAME and remove its pin. Sockets using
it keep it until they close; new sockets can no longer select it. A native or
foreign congestion control of that name is left alone (an error). Removing
the default congestion control (net.ipv4.tcp_congestion_control) needs
--force: the default keeps the removed copy alive for new sockets.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := ccName(args)
			if err != nil {
				return err
			}
			res, err := cc.Remove(name, force)
			if err != nil {
				return ccError("remove "+name, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", name, res.Detail)
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "remove even if it is the default congestion control")
	return cmd
}

func newCCListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the kernel's congestion controls and those HBM installed",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := cc.List()
			if err != nil {
				return ccError("list", err)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), l)
			}
			printListing(cmd.OutOrStdout(), l)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printListing(w io.Writer, l *cc.Listing) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSOURCE\tREGISTERED\tNOTES")
	for _, e := range l.Entries {
		var notes []string
		if e.Default {
			notes = append(notes, "default")
		}
		if e.Allowed {
			notes = append(notes, "allowed")
		}
		if e.LinkID != 0 {
			notes = append(notes, fmt.Sprintf("link %d", e.LinkID))
		}
		if e.MapID != 0 {
			notes = append(notes, fmt.Sprintf("map %d", e.MapID))
		}
		if e.Pin != "" {
			notes = append(notes, "pinned "+e.Pin)
		}
		if e.Problem != "" {
			notes = append(notes, "STALE: "+e.Problem+" (hbm cc install repairs it)")
		}
		reg := "no"
		if e.Registered {
			reg = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.Name, e.Source, reg, strings.Join(notes, ", "))
	}
	tw.Flush()
	if len(l.Installable) > 0 {
		fmt.Fprintf(w, "installable with hbm cc install: %s\n", strings.Join(l.Installable, ", "))
	}
	if l.Partial != "" {
		fmt.Fprintf(w, "note: %s\n", l.Partial)
	}
}

func newCCShowCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show",
		Short: "Show the sockets using dctcp with their DCTCP alpha",
		Long: `Show the TCP sockets of hbm's network namespace whose congestion control is
dctcp, with DCTCP's alpha (the estimated fraction of CE-marked data, 0..1),
the receiver's CE state, cwnd, ssthresh and delivered/CE-echoed packet counts.
For another namespace run it there (ip netns exec NS hbm cc show).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			socks, err := cc.Sockets()
			if err != nil {
				return ccError("show", err)
			}
			if asJSON {
				if socks == nil {
					socks = []cc.Socket{}
				}
				return writeJSON(cmd.OutOrStdout(), socks)
			}
			printSockets(cmd.OutOrStdout(), socks)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printSockets(w io.Writer, socks []cc.Socket) {
	if len(socks) == 0 {
		fmt.Fprintln(w, "no sockets use dctcp")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LOCAL\tREMOTE\tSTATE\tCA\tECN\tALPHA\tCE\tCWND\tSSTHRESH\tSRTT\tDELIVERED\tCE_ECHOED\tRETRANS\tREPAIRS")
	for _, s := range socks {
		alpha := "-"
		if s.Alpha >= 0 {
			alpha = fmt.Sprintf("%.3f", s.Alpha)
		}
		ecn := "no"
		if s.ECN {
			ecn = "yes"
		}
		if s.RenoFallback {
			ecn = "no (reno)"
		}
		ce := "0"
		if s.CEState {
			ce = "1"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%d\t%d\t%d\t%d\n",
			s.Local, s.Remote, s.State, s.CA, ecn, alpha, ce, s.Cwnd, s.Ssthresh, s.SRTT, s.Delivered, s.DeliveredCE, s.Retrans, s.Repairs)
	}
	tw.Flush()
}

// ccError adds a hint for the errors a user can act on.
func ccError(op string, err error) error {
	switch {
	case errors.Is(err, cc.ErrNotRoot):
		return fmt.Errorf("cc %s: %w: run as root", op, err)
	case errors.Is(err, cc.ErrNoStructOps):
		return fmt.Errorf("cc %s: %w", op, err)
	}
	return fmt.Errorf("cc %s: %w", op, err)
}
