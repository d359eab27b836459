package dataplane

import (
	"strings"
	"testing"

	"github.com/hbm-dev/hbm/internal/rate"
)

// TestLimitCeil: a ceiling below the rate or above the largest rate is
// refused; one above the rate reaches the configuration and comes back from
// it; one equal to the rate (or none) is no borrowing.
func TestLimitCeil(t *testing.T) {
	for _, tc := range []struct {
		l       Limit
		err     string
		ceilBps uint64
	}{
		{l: Limit{Rate: 100e6, Ceil: 50e6}, err: "below the rate"},
		{l: Limit{Rate: 100e6, Ceil: rate.Max + 1}, err: "above"},
		{l: Limit{Rate: 100e6, Ceil: 1e9}, ceilBps: 1e9},
		{l: Limit{Rate: 100e6, Ceil: 100e6}},
		{l: Limit{Rate: 100e6}},
	} {
		c, err := config(tc.l)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%+v: error %v, want one saying %q", tc.l, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%+v: %v", tc.l, err)
			continue
		}
		if c.CeilBps != tc.ceilBps {
			t.Errorf("%+v: ceil_bps %d, want %d", tc.l, c.CeilBps, tc.ceilBps)
		}
		if got := limitOf(c).Ceil; uint64(got) != tc.ceilBps {
			t.Errorf("%+v: read back ceiling %v, want %d", tc.l, got, tc.ceilBps)
		}
	}
}

// TestPriority: the names round-trip, an unknown one is refused, and a
// limit's priority reaches the configuration and comes back.
func TestPriority(t *testing.T) {
	for name, p := range Priorities {
		if got, err := ParsePriority(name); err != nil || got != p || p.String() != name {
			t.Errorf("%s: %v %v (String %q)", name, got, err, p.String())
		}
	}
	if _, err := ParsePriority("urgent"); err == nil {
		t.Errorf("priority urgent accepted")
	}
	if _, err := config(Limit{Rate: 100e6, Priority: 7}); err == nil {
		t.Errorf("priority 7 accepted")
	}
	c, err := config(Limit{Rate: 100e6, Ceil: 1e9, Priority: PriorityBatch})
	if err != nil || limitOf(c).Priority != PriorityBatch {
		t.Errorf("batch: %+v %v", limitOf(c), err)
	}
}
