package report

import (
	"fmt"
	"slices"
	"strings"

	"github.com/hbm-dev/hbm/internal/eval/result"
)

// Kernel timers a tail latency can sit on (Linux, HZ=1000), in microseconds.
//
//   - Delayed ACK: TCP_DELACK_MIN (HZ/25) is 40 ms, the usual delayed-ACK
//     timeout on a low-RTT path; TCP_DELACK_MAX (HZ/5) bounds it at 200 ms.
//     Seed 001 found 10 KB RPC tails pinned at ~40 ms: delayed ACKs with CE.
//   - Retransmission timeout: TCP_RTO_MIN is 200 ms (the RTO on a LAN is
//     200 ms plus a little), doubling with each backoff: 400, 800, 1600 ms.
//     200 ms is also TCP_DELACK_MAX, so the message names both.
//   - Tail-loss probe: tcp_schedule_loss_probe (Linux >= 4.x, 6.x today) arms
//     it at 2*SRTT + TCP_TIMEOUT_MIN (2 jiffies, 2 ms), or 2*SRTT + 200 ms
//     with a single packet out (which then lands in the RTO band). Older
//     kernels and RFC 8985 used max(2*SRTT, 10 ms); we pick the 6.x formula
//     since these machines run 6.18, and use the class's mean SRTT.
//
// A tail "sits near" a timer T when T*(1-below) <= tail <= T*(1+above)+P50:
// waiting for a timer adds T to an RPC's usual latency (about its P50), and
// rarely less. A timer is blamed only when the class's P50 is at most T/4,
// so that a tail that is merely a slow median (a 1 MB RPC that takes 40 ms
// at 200 Mbit/s) is not. RTO and probe stalls retransmit, so the probe is
// blamed only when the class counted retransmits, and the RTO is worded as
// a possibility without them (the other end may have retransmitted).
const (
	delackMinUs = 40e3
	rtoMinUs    = 200e3
	tlpExtraUs  = 2e3
	below       = 0.05
	above       = 0.15
)

type timer struct {
	us    float64
	name  string // "the 40 ms delayed-ACK timer"
	cause string // "a delayed ACK"
	retx  bool   // the stall retransmits
	probe bool   // blamed only with retransmits
}

func timers(c *result.Class) []timer {
	ts := []timer{{us: delackMinUs, name: "the 40 ms delayed-ACK timer (TCP_DELACK_MIN)", cause: "a delayed ACK (seed 001)"}}
	for i, us := range []float64{rtoMinUs, 2 * rtoMinUs, 4 * rtoMinUs, 8 * rtoMinUs} {
		t := timer{us: us, retx: true, cause: "a retransmission timeout (seed 001)"}
		switch i {
		case 0:
			t.name = "the 200 ms minimum RTO (TCP_RTO_MIN, also TCP_DELACK_MAX)"
			t.cause = "a retransmission timeout or a 200 ms delayed ACK (seed 001)"
		default:
			t.name = fmt.Sprintf("the %s RTO (200 ms backed off %d times)", fmtDur(us), i)
			t.cause = fmt.Sprintf("%d consecutive retransmission timeouts", i+1)
		}
		ts = append(ts, t)
	}
	if c.RTTUs > 0 {
		us := 2*c.RTTUs + tlpExtraUs
		ts = append(ts, timer{us: us, retx: true, probe: true, cause: "a tail-loss probe",
			name: fmt.Sprintf("the %s tail-loss probe timer (2×SRTT %s + 2 ms)", fmtDur(us), fmtDur(c.RTTUs))})
	}
	return ts
}

// Diagnose appends to run.Diagnoses what a reader should not miss: RPC
// tails on kernel timers, goodput above a limit, RPC classes that completed
// nothing. It leaves skipped and failed runs alone and never adds a
// diagnosis the run already has, so calling it again changes nothing.
func Diagnose(run *result.Run) {
	if !done(run) {
		return
	}
	add := func(format string, args ...any) {
		d := fmt.Sprintf(format, args...)
		if !slices.Contains(run.Diagnoses, d) {
			run.Diagnoses = append(run.Diagnoses, d)
		}
	}
	multi := len(run.Groups) > 1
	for i := range run.Classes {
		c := &run.Classes[i]
		name := c.Name
		if multi && c.Group != "" {
			name = c.Group + "/" + c.Name
		}
		if c.Kind != "rpc" {
			continue
		}
		if c.RPCs == 0 && (c.Latency == nil || c.Latency.Count == 0) {
			add("%s completed no RPCs in %s", name, fmtDur(run.DurationSec*1e6))
			continue
		}
		if c.Latency == nil {
			continue
		}
		l := c.Latency
		tails := []struct {
			name string
			us   float64
		}{{"P99", l.P99}, {"P99.9", l.P999}, {"max", l.Max}}
		for _, t := range timers(c) {
			if l.P50 > t.us/4 || (t.probe && c.Retransmits == 0) {
				continue
			}
			var hits []string
			for _, tail := range tails {
				if tail.us >= t.us*(1-below) && tail.us <= t.us*(1+above)+l.P50 {
					hits = append(hits, tail.name+" "+fmtDur(tail.us))
				}
			}
			if len(hits) == 0 {
				continue
			}
			verb := "sits"
			if len(hits) > 1 {
				verb = "sit"
			}
			likely := "likely " + t.cause
			if t.retx && c.Retransmits == 0 {
				likely = "possibly " + t.cause + ", though this side counted no retransmits"
			}
			add("%s %s %s near %s: %s", name, strings.Join(hits, ", "), verb, t.name, likely)
		}
	}
	switch run.Limiter {
	case "hbm", "htb", "tbf":
		for _, g := range run.Groups {
			if g.LimitBps > 0 && g.GoodputBps > 1.05*float64(g.LimitBps) {
				add("%s goodput %s is %s of its %s limit: the %s limit does not hold", g.Name,
					fmtRate(g.GoodputBps), fmtPct(g.GoodputBps/float64(g.LimitBps)), fmtRate(float64(g.LimitBps)), run.Limiter)
			}
		}
	}
}

// DiagnoseAll runs Diagnose on every run; the runner calls it before it
// writes results.json, so that the file and the reports agree.
func DiagnoseAll(r *result.Results) {
	for i := range r.Runs {
		Diagnose(&r.Runs[i])
	}
}
