package result

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func rep(goodput, share, p50, p99 float64, drops uint64, note string) Run {
	return Run{
		Scenario: "many-flows-200m", Variant: "stream=16", CC: "cubic", Limiter: "htb", DurationSec: 2,
		Groups: []Group{{Name: "work", Dir: "egress", LimitBps: 200e6, GoodputBps: goodput, TxBps: share * 200e6, Share: share}},
		Classes: []Class{
			{Name: "stream", Group: "work", Kind: "stream", Flows: 16, GoodputBps: goodput - 1e6},
			{Name: "rpc-10KB", Group: "work", Kind: "rpc", SizeBytes: 10240, Flows: 1, GoodputBps: 1e6,
				Latency: &Latency{Count: 100, P50: p50, P90: p50 * 2, P99: p99, P999: p99 * 2, Max: p99 * 3}},
		},
		Links: []Link{{Name: "htb@snd", Qdisc: "htb", Drops: drops}},
		Notes: []string{"same in all", note},
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}, {[]float64{7}, 7}} {
		if got := Median(c.in); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	if !math.IsNaN(Median(nil)) {
		t.Error("Median(nil) is not NaN")
	}
}

func TestAggregate(t *testing.T) {
	reps := []Run{
		rep(190e6, 1.01, 400, 9000, 10, "a"),
		rep(180e6, 0.95, 300, 30000, 30, "b"),
		rep(195e6, 1.02, 900, 12000, 20, "c"),
	}
	in0 := reps[0].Classes[1].Latency.P50
	got := Aggregate(reps)
	if reps[0].Classes[1].Latency.P50 != in0 {
		t.Fatal("Aggregate changed a repetition")
	}
	if got.Variant != "stream=16" || got.Limiter != "htb" || len(got.Repetitions) != 3 {
		t.Fatalf("run %+v", got)
	}
	g := got.Groups[0]
	if g.GoodputBps != 190e6 || g.Share != 1.01 || g.TxBps != 1.01*200e6 {
		t.Errorf("group medians %+v", g)
	}
	l := got.Classes[1].Latency
	if l.P50 != 400 || l.P99 != 12000 || l.P999 != 24000 || l.Count != 100 {
		t.Errorf("latency medians %+v", l)
	}
	if got.Links[0].Drops != 20 {
		t.Errorf("drops median %d, want 20", got.Links[0].Drops)
	}
	for name, want := range map[string][3]float64{
		"groups/work/share":               {1.01, 0.95, 1.02},
		"groups/work/goodput_bps":         {190e6, 180e6, 195e6},
		"classes/work/rpc-10KB/p99_us":    {12000, 9000, 30000},
		"classes/work/rpc-10KB/p50_us":    {400, 300, 900},
		"links/htb@snd/drops":             {20, 10, 30},
		"goodput_bps":                     {190e6, 180e6, 195e6},
		"classes/work/stream/retransmits": {0, 0, 0},
	} {
		s := got.Stat(name)
		if s == nil {
			t.Errorf("no spread of %s", name)
			continue
		}
		if s.N != 3 || s.Median != want[0] || s.Min != want[1] || s.Max != want[2] {
			t.Errorf("%s: %+v, want median/min/max %v", name, *s, want)
		}
	}
	if strings.Join(got.Notes, "|") != "same in all|repetition 1: a|repetition 2: b|repetition 3: c" {
		t.Errorf("notes %q", got.Notes)
	}
	// The repetitions survive a JSON round trip with the schema's keys.
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"variant":"stream=16"`, `"repetitions":[`, `"spread":[`, `"share":1.01`, `"tx_bps":`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("JSON lacks %s", k)
		}
	}
	var back Run
	if err := json.Unmarshal(b, &back); err != nil || len(back.Repetitions) != 3 || back.Repetitions[1].Groups[0].Share != 0.95 {
		t.Errorf("round trip: %v %+v", err, back.Repetitions)
	}
}

func TestAggregateFailures(t *testing.T) {
	one := rep(1, 1, 1, 1, 1, "x")
	if got := Aggregate([]Run{one}); got.Repetitions != nil || got.Spread != nil || got.Groups[0].GoodputBps != 1 {
		t.Errorf("one repetition changed: %+v", got)
	}
	failed := Run{Scenario: "s", CC: "bbr", Limiter: "hbm", Error: "boom"}
	got := Aggregate([]Run{failed, rep(100, 1.0, 5, 50, 0, ""), rep(300, 1.2, 7, 70, 0, "")})
	if got.Error != "" || got.Groups[0].GoodputBps != 200 || got.Classes[1].Latency.P99 != 60 {
		t.Errorf("median of the two completed: %+v", got)
	}
	if s := got.Stat("groups/work/goodput_bps"); s == nil || s.N != 2 {
		t.Errorf("spread %+v", s)
	}
	if !strings.Contains(strings.Join(got.Notes, "|"), "repetition 1 failed: boom") {
		t.Errorf("notes %q", got.Notes)
	}
	got = Aggregate([]Run{failed, {Skipped: "no bbr"}})
	if got.Error != "boom" || len(got.Repetitions) != 2 || got.Groups != nil {
		t.Errorf("all failed: %+v", got)
	}
}
