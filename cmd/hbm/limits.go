package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/hbm-dev/hbm/internal/cgroup"
	"github.com/hbm-dev/hbm/internal/dataplane"
	"github.com/hbm-dev/hbm/internal/jsonout"
	"github.com/hbm-dev/hbm/internal/safetext"
)

// The limit commands: set, unset, show, prune.

func init() {
	commands = append(commands, newSetCmd, newUnsetCmd, newShowCmd, newPruneCmd, newRepairCmd, newDowngradeCmd)
}

// pinDir is where state is pinned. The environment variable HBM_PIN_DIR or
// the hidden root flag --pin-dir give tests and experiments their own, so they
// cannot disturb the host's limits or one another.
var pinDir = pinDirDefault()

func pinDirDefault() string {
	if d := os.Getenv("HBM_PIN_DIR"); d != "" {
		return d
	}
	return dataplane.DefaultPinDir
}

func requireRoot() error {
	if os.Geteuid() != 0 {
		return errors.New("must run as root: attaching BPF programs to cgroups needs CAP_BPF, CAP_NET_ADMIN and CAP_SYS_ADMIN")
	}
	return nil
}

// resolveGroup turns the CGROUP argument into a group, as a usage error.
func resolveGroup(arg string) (cgroup.Group, error) {
	g, err := cgroup.Resolve(arg)
	if err != nil {
		if errors.Is(err, cgroup.ErrNoCgroup2) {
			return g, err
		}
		return g, usageError{err}
	}
	return g, nil
}

func newSetCmd() *cobra.Command {
	var lf limitFlags
	cmd := &cobra.Command{
		Use:   "set CGROUP [--egress RATE] [--ingress RATE]",
		Short: "Limit a cgroup's egress and/or ingress bandwidth (again: change it live)",
		Long: `Limit what every socket in CGROUP and its descendants sends (--egress) and/or
receives (--ingress) to RATE. Give at least one; the two directions are
independent limits, and a direction not named is left as it is.

CGROUP is a cgroup v2 path, absolute (under the cgroup2 mount) or relative to
the mount ("/" is the root group). RATE uses tc's units: bit, kbit, mbit, gbit,
tbit for bits per second; bps, kbps, mbps, gbps for bytes per second; from
8kbit to 400gbit. Setting a limited group again changes its limit in place:
no detach, no unlimited burst, counters kept.

Ingress can only signal the senders: a receive-window clamp at each flow's
share, CE marks on ECN-capable packets past --mark, drops past the drop
thresholds (never pure ACKs, a burst's last segment, or more than one loss
per flow at a time). With --no-drop it never drops: the incast-protection
mode, e.g. on the root group just below the link rate, so ECN senders back
off before the switch buffer in front of the host overflows. It holds ECN TCP
flows with the window clamp, marks those the window can still slow and other
ECN traffic, and leaves senders without ECN as they are.

A rate is a hard cap unless a ceiling is given (--egress-ceil, --ingress-ceil):
then the rate is what the group is guaranteed, and it may take up to the
ceiling by borrowing what the other groups under the nearest limited group
above it leave unused, shared in proportion to their rates. Limit the parent
(the root group at the link's rate, for the whole host) to lend: a group with
no limited group above it keeps its rate. A group that wants its rate back
gets it within a few milliseconds.

The options apply to every direction named in the same call; set the
directions in two calls to give them different options. Thresholds are times
of virtual queue at RATE; each is raised to hold a few full-size packets at
low rates.`,
		Example: `  hbm set /workload/batch --egress 200mbit
  hbm set /sys/fs/cgroup/unified/workload/batch --egress 1.5gbit
  hbm set /workload/batch --egress 200mbit --ingress 500mbit
  hbm set /tenants --egress 1gbit
  hbm set /tenants/a --egress 300mbit --egress-ceil 1gbit
  hbm set / --ingress 9gbit --no-drop
  hbm set / --egress 9gbit --mark 500us`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			eg, in, err := lf.limits(cmd)
			if err != nil {
				return err
			}
			var changes []dataplane.Change
			if eg != nil {
				changes = append(changes, dataplane.Change{Dir: dataplane.Egress, Limit: eg})
			}
			if in != nil {
				changes = append(changes, dataplane.Change{Dir: dataplane.Ingress, Limit: in})
			}
			if len(changes) == 0 {
				return usagef("set: give a rate with --egress RATE and/or --ingress RATE")
			}
			g, err := resolveGroup(args[0])
			if err != nil {
				return err
			}
			if err := dataplane.CheckDepth(g); err != nil {
				return usageError{err}
			}
			if err := requireRoot(); err != nil {
				return err
			}
			m, err := dataplane.Open(pinDir)
			if err != nil {
				return err
			}
			defer m.Close()
			err = m.Apply(g, changes)
			warn(m)
			if errors.Is(err, dataplane.ErrTooDeep) {
				return usageError{err} // deeper from the real root than the path says
			}
			if err != nil {
				return err
			}
			for _, c := range changes {
				mode := ""
				if c.Limit.NoDrop {
					mode = " (mark only)"
				}
				if c.Limit.Ceil > c.Limit.Rate {
					mode = fmt.Sprintf(", borrowing up to %v%s", c.Limit.Ceil, mode)
					if c.Limit.Priority != dataplane.PriorityNormal {
						mode += fmt.Sprintf(" (%v priority)", c.Limit.Priority)
					}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %v limited to %v%s\n", safetext.Quote(g.Rel), c.Dir, c.Limit.Rate, mode)
			}
			return nil
		},
	}
	lf.register(cmd)
	return cmd
}

// warn prints what the manager could not do without failing.
func warn(m *dataplane.Manager) {
	for _, w := range m.Warnings {
		fmt.Fprintf(os.Stderr, "hbm: warning: %s\n", safetext.Quote(w))
	}
}

func newUnsetCmd() *cobra.Command {
	var egress, ingress bool
	cmd := &cobra.Command{
		Use:   "unset CGROUP [--egress] [--ingress]",
		Short: "Remove a cgroup's limits (both directions, or the one named)",
		Long: `Remove the limits of CGROUP and everything they pinned: both directions by
default, only egress with --egress, only ingress with --ingress. Pacing caps
the egress limit put on sockets are lifted. It fails, changing nothing, when
no limit named is set.`,
		Example: `  hbm unset /workload/batch
  hbm unset /workload/batch --ingress`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			g, err := resolveGroup(args[0])
			if err != nil {
				return err
			}
			dirs := []dataplane.Direction{}
			if egress {
				dirs = append(dirs, dataplane.Egress)
			}
			if ingress {
				dirs = append(dirs, dataplane.Ingress)
			}
			named := len(dirs) > 0
			if !named {
				dirs = []dataplane.Direction{dataplane.Egress, dataplane.Ingress}
			}
			if err := requireRoot(); err != nil {
				return err
			}
			if !dataplane.Pinned(pinDir) {
				return fmt.Errorf("%s: %w", g.Rel, dataplane.ErrNotFound)
			}
			m, err := dataplane.Open(pinDir)
			if err != nil {
				return err
			}
			defer m.Close()
			var changes []dataplane.Change
			for _, d := range dirs {
				if named || m.Limited(g, d) {
					changes = append(changes, dataplane.Change{Dir: d})
				}
			}
			if len(changes) == 0 {
				return fmt.Errorf("%s: %w", g.Rel, dataplane.ErrNotFound)
			}
			err = m.Apply(g, changes)
			warn(m)
			if errors.Is(err, dataplane.ErrTooDeep) {
				return usageError{err} // deeper from the real root than the path says
			}
			if err != nil {
				return err
			}
			for _, c := range changes {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %v limit removed\n", safetext.Quote(g.Rel), c.Dir)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&egress, "egress", false, "remove only the egress limit")
	cmd.Flags().BoolVar(&ingress, "ingress", false, "remove only the ingress limit")
	return cmd
}

// groupEntries turns the manager's entries (one per group and direction)
// into hbm show --json's groups.
func groupEntries(es []dataplane.Entry) []jsonout.Group {
	out := []jsonout.Group{} // "[]", not "null", when nothing is limited
	idx := map[uint64]int{}
	for _, e := range es {
		i, ok := idx[e.CgroupID]
		if !ok {
			i = len(out)
			idx[e.CgroupID] = i
			out = append(out, jsonout.NewGroup(e.Cgroup, e.CgroupID))
			out[i].Removed, out[i].Unresolved = e.Gone, e.Cgroup == "" && !e.Gone
		}
		d := &jsonout.Direction{RateBps: uint64(e.Limit.Rate), CeilBps: uint64(e.Limit.Ceil), Priority: priorityName(e.Limit.Priority),
			InForceBps: uint64(e.Stats.InForce), NoDrop: e.Limit.NoDrop, Enforced: e.Enforced,
			Bytes: e.Stats.Bytes, Packets: e.Stats.Packets, Marked: e.Stats.Marked, CWR: e.Stats.CWR,
			Dropped: e.Stats.Dropped, DroppedBytes: e.Stats.DroppedBytes, Gated: e.Stats.Gated}
		if e.Dir == dataplane.Ingress {
			out[i].Ingress = d
		} else {
			out[i].Egress = d
		}
	}
	return out
}

func newShowCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show",
		Short: "List limited cgroups with their rates and counters",
		Long: `List every limited cgroup with its rate and counters per direction: wire bytes
and packets passed (a GSO packet counts as its segments), packets CE-marked,
congestion codes returned to TCP (cwr), packets and bytes dropped. For a group
that may borrow, CEIL is its ceiling and NOW the rate in force (its rate plus
what it borrows). PRIO is its borrowing priority (latency, normal, batch:
who gets what its lender leaves first).`,
		Example: `  hbm show
  hbm show --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireRoot(); err != nil {
				return err
			}
			var entries []dataplane.Entry
			m, err := dataplane.OpenReadOnly(pinDir)
			if err != nil {
				return err
			}
			if m != nil {
				defer m.Close()
				warn(m)
				if entries, err = m.List(); err != nil {
					return err
				}
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), groupEntries(entries))
			}
			return writeTable(cmd.OutOrStdout(), entries)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// priorityName is a limit's priority in the JSON ("": normal).
func priorityName(p dataplane.Priority) string {
	if p == dataplane.PriorityNormal {
		return ""
	}
	return p.String()
}

func writeTable(w io.Writer, es []dataplane.Entry) error {
	if len(es) == 0 {
		fmt.Fprintln(w, "no limits set")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "CGROUP\tDIR\tRATE\tCEIL\tNOW\tENFORCED\tBYTES\tPACKETS\tMARKED\tCWR\tDROPPED\tDROPPED_BYTES\tGATED\tPRIO\t")
	for _, e := range es {
		name := safetext.Quote(e.Cgroup)
		switch {
		case e.Gone:
			name = fmt.Sprintf("(removed, id %d)", e.CgroupID)
		case name == "":
			name = fmt.Sprintf("(unresolved, id %d)", e.CgroupID)
		}
		enf := "yes"
		if !e.Enforced {
			enf = "NO"
		}
		ceil, now := "-", "-"
		if e.Limit.Ceil > e.Limit.Rate {
			ceil, now = e.Limit.Ceil.String(), e.Stats.InForce.String()
		}
		fmt.Fprintf(tw, "%s\t%v\t%v\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%v\t\n", name, e.Dir, e.Limit.Rate, ceil, now, enf,
			e.Stats.Bytes, e.Stats.Packets, e.Stats.Marked, e.Stats.CWR, e.Stats.Dropped, e.Stats.DroppedBytes, e.Stats.Gated, e.Limit.Priority)
	}
	return tw.Flush()
}

func newPruneCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "prune",
		Short: "Remove the limits of cgroups that no longer exist",
		Long: `A limited cgroup that is removed leaves its pinned state behind (shown as
"(removed, id N)" by hbm show). set and unset clean such state as they go;
prune does it on demand.`,
		Example: `  hbm prune`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireRoot(); err != nil {
				return err
			}
			m, err := dataplane.Open(pinDir)
			if err != nil {
				return err
			}
			defer m.Close()
			gone, err := m.Prune()
			warn(m)
			for _, e := range gone {
				fmt.Fprintf(cmd.OutOrStdout(), "removed %v limit of removed cgroup id %d\n", e.Dir, e.CgroupID)
			}
			return err
		},
	}
	return cmd
}

func newRepairCmd() *cobra.Command {
	var abandon bool
	cmd := &cobra.Command{
		Use:   "repair [--abandon]",
		Short: "Finish, or give up, the change a killed hbm left half done",
		Long: `A killed set or unset leaves its change journaled; the next command that
changes limits finishes it (or undoes it) first. repair does only that, and
says what it did.

A journaled change that cannot be finished (its group is not visible from
where hbm runs: another cgroup namespace; or a step keeps failing) blocks
every command that changes limits, prune included. Run hbm where the group
is visible, or give the change up with --abandon: the journal is cleared and
the state left as it is; hbm show then tells what is not enforced, and set or
unset on the group (where it is visible) makes it whole.`,
		Example: `  hbm repair
  hbm repair --abandon`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireRoot(); err != nil {
				return err
			}
			if abandon {
				what, err := dataplane.Abandon(pinDir)
				if err != nil {
					return err
				}
				if what == "" {
					fmt.Fprintln(cmd.OutOrStdout(), "nothing to abandon: no change under way")
					return nil
				}
				fmt.Fprintf(cmd.OutOrStdout(), "abandoned the %s; the state is left as it was (see hbm show; set or unset the group to make it whole)\n", safetext.Quote(what))
				return nil
			}
			did, err := dataplane.Repair(pinDir)
			for _, w := range did {
				fmt.Fprintln(cmd.OutOrStdout(), safetext.Quote(w))
			}
			if err != nil {
				return err
			}
			if len(did) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "nothing to repair")
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&abandon, "abandon", false, "give up the journaled change: clear the journal, leave the state as it is")
	return cmd
}

func newDowngradeCmd() *cobra.Command {
	var to string
	cmd := &cobra.Command{
		Use:   "downgrade --to HBM-BINARY",
		Short: "Carry the pinned state to an earlier hbm build's map layout, before a rollback",
		Long: `A build whose maps have another layout than the pinned ones upgrades the
pinned state the first time it changes limits, and hbm builds from the one
that brought upgrades on carry it back the same way when rolled back to. An
earlier build refuses state of a newer layout ("is from an incompatible hbm
version"). downgrade carries the state to the layout of the hbm binary
HBM-BINARY (the BPF object it embeds): its programs are loaded and pinned
where it looks for its own, and every attachment switched to them
atomically, so every limit stays enforced; that build then runs on the state
as if it had set it. Run it with the newer build, then roll back.`,
		Example: `  hbm downgrade --to /usr/local/bin/hbm.previous`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if to == "" {
				return usagef("downgrade: name the earlier build's binary with --to")
			}
			if err := requireRoot(); err != nil {
				return err
			}
			obj, err := dataplane.ObjectIn(to)
			if err != nil {
				return err
			}
			did, err := dataplane.Downgrade(pinDir, obj)
			for _, w := range did {
				fmt.Fprintln(cmd.OutOrStdout(), safetext.Quote(w))
			}
			return err
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "the earlier build's hbm binary")
	return cmd
}
