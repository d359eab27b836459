package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/hbm-dev/hbm/internal/dataplane"
	"github.com/hbm-dev/hbm/internal/rate"
)

// limitFlags are the options of a limit, shared by hbm set and hbm exec.
type limitFlags struct {
	egress, ingress rate.Rate
	egressCeil      rate.Rate
	ingressCeil     rate.Rate
	priority        string
	th              rate.Thresholds
	loopback        bool
	noDrop          bool
	noPace          bool
	minInflight     uint32
}

// register adds the flags to cmd.
func (lf *limitFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.Var(&lf.egress, "egress", "egress `RATE` (e.g. 200mbit, 1gbit)")
	f.Var(&lf.ingress, "ingress", "ingress `RATE` (e.g. 500mbit, 9gbit)")
	f.Var(&lf.egressCeil, "egress-ceil", "most the group may send, borrowing what its siblings under the nearest limited group above leave unused (`RATE`; default: --egress, no borrowing)")
	f.StringVar(&lf.priority, "priority", "normal", "who borrows first, with a ceiling: latency, normal or batch (`CLASS`; each keeps its rate)")
	f.Var(&lf.ingressCeil, "ingress-ceil", "most the group may receive, borrowing as --egress-ceil (`RATE`; default: --ingress)")
	f.BoolVar(&lf.loopback, "loopback", false, "police loopback traffic too (exempt by default)")
	f.BoolVar(&lf.noDrop, "no-drop", false, "mark only, never drop (ingress: incast protection; --mark and --burst then default to 200us)")
	f.BoolVar(&lf.noPace, "no-pace", false, "no pacing assist (egress): police with marks and drops only")
	f.DurationVar(&lf.th.Burst, "burst", rate.DefaultBurst, "credit an idle group keeps, in time at RATE")
	f.DurationVar(&lf.th.Pace, "pace", rate.DefaultPace, "virtual queue the pacing assist steers each group to")
	f.DurationVar(&lf.th.Mark, "mark", rate.DefaultMark, "virtual queue above which packets are marked (CE; egress: cwr for non-ECN TCP; ingress --no-drop: 200us)")
	f.DurationVar(&lf.th.DropLarge, "drop-large", rate.DefaultDropLarge, "virtual queue above which large packets are dropped")
	f.DurationVar(&lf.th.DropSmall, "drop-small", rate.DefaultDropSmall, "virtual queue above which all packets are dropped")
	f.Uint32Var(&lf.minInflight, "min-inflight", 0, "never drop egress TCP flows with fewer packets out (experiments)")
	f.MarkHidden("min-inflight")
}

// limits returns the limit of each direction named on cmd's command line
// (nil: not named), validated: a usage error names the flag at fault.
func (lf *limitFlags) limits(cmd *cobra.Command) (egress, ingress *dataplane.Limit, err error) {
	prio, err := dataplane.ParsePriority(lf.priority)
	if err != nil {
		return nil, nil, usageError{fmt.Errorf("--priority: %w", err)}
	}
	mk := func(flag string, r, ceil rate.Rate) (*dataplane.Limit, error) {
		if !cmd.Flags().Changed(flag) {
			if cmd.Flags().Changed(flag + "-ceil") {
				return nil, usagef("--%s-ceil needs --%s (the rate it guarantees)", flag, flag)
			}
			return nil, nil
		}
		if ceil != 0 && ceil < r {
			return nil, usagef("--%s-ceil %v is below --%s %v: the ceiling is the most the group may take", flag, ceil, flag, r)
		}
		t := lf.th
		if flag == "ingress" && lf.noDrop { // incast protection: its own defaults
			t = t.Incast(cmd.Flags().Changed("mark"), cmd.Flags().Changed("burst"))
		}
		t = t.Fit(r)
		if err := t.Validate(); err != nil {
			return nil, usageError{fmt.Errorf("--%s %v: %w", flag, r, err)}
		}
		return &dataplane.Limit{Rate: r, Ceil: ceil, Priority: prio, Thresholds: t, Loopback: lf.loopback, NoDrop: lf.noDrop,
			MinInflight: lf.minInflight, NoPace: lf.noPace}, nil
	}
	if egress, err = mk("egress", lf.egress, lf.egressCeil); err != nil {
		return nil, nil, err
	}
	if ingress, err = mk("ingress", lf.ingress, lf.ingressCeil); err != nil {
		return nil, nil, err
	}
	return egress, ingress, nil
}
