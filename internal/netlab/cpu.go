package netlab

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// CPUTimes is the machine's CPU time so far (the first line of /proc/stat),
// in clock ticks, and when it was read.
type CPUTimes struct {
	Busy, Softirq uint64
	At            time.Time
}

// CPUUse is the CPU the machine used between two CPUTimes, in cores.
type CPUUse struct {
	BusyCores    float64 // (user+nice+system+irq+softirq) / wall time
	SoftirqCores float64
}

// clkTck is USER_HZ, 100 on every Linux architecture Go supports.
const clkTck = 100

// ReadCPU reads the machine's CPU times; zero counts if /proc/stat is
// unreadable.
func ReadCPU() CPUTimes {
	c := CPUTimes{At: time.Now()}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return c
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return c
	}
	v := func(i int) uint64 { n, _ := strconv.ParseUint(f[i], 10, 64); return n }
	// user nice system idle iowait irq softirq steal
	c.Busy = v(1) + v(2) + v(3) + v(6) + v(7)
	c.Softirq = v(7)
	return c
}

// Since returns the CPU used from a to c.
func (c CPUTimes) Since(a CPUTimes) CPUUse {
	wall := c.At.Sub(a.At).Seconds()
	if wall <= 0 || c.Busy < a.Busy || c.Softirq < a.Softirq {
		return CPUUse{}
	}
	return CPUUse{
		BusyCores:    float64(c.Busy-a.Busy) / clkTck / wall,
		SoftirqCores: float64(c.Softirq-a.Softirq) / clkTck / wall,
	}
}

// Softnet is the per-CPU receive backlog's counters, summed over CPUs
// (/proc/net/softnet_stat): packets dropped because a CPU's backlog was full
// (netdev_max_backlog), and the times the receive softirq ran out of budget
// with work left (time_squeeze). Both say the receiving CPUs, not the
// network, were the bottleneck.
type Softnet struct {
	Dropped, Squeezed uint64
}

// ReadSoftnet reads the softnet counters; zero if unreadable.
func ReadSoftnet() Softnet {
	var s Softnet
	b, err := os.ReadFile("/proc/net/softnet_stat")
	if err != nil {
		return s
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		d, _ := strconv.ParseUint(f[1], 16, 32)
		q, _ := strconv.ParseUint(f[2], 16, 32)
		s.Dropped += d
		s.Squeezed += q
	}
	return s
}

// Since returns the counts from a to s (the counters are 32-bit and wrap).
func (s Softnet) Since(a Softnet) Softnet {
	return Softnet{Dropped: uint64(uint32(s.Dropped - a.Dropped)), Squeezed: uint64(uint32(s.Squeezed - a.Squeezed))}
}

// ReadKsoftirqd reads the CPU time the ksoftirqd threads have used so far:
// the receive softirq's work the kernel deferred to a
// thread that waits its turn with every other task (a busy CPU's network
// latency). Zero if /proc is unreadable.
func ReadKsoftirqd() time.Duration {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	var ticks uint64
	for _, d := range dirs {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		if n, ok := statCPU(string(b), "ksoftirqd/"); ok {
			ticks += n
		}
	}
	return time.Duration(ticks) * time.Second / clkTck
}

// statCPU returns utime + stime (clock ticks) from a /proc/PID/stat line
// whose command name starts with prefix. Fields 14 and 15, counted after
// the name's closing parenthesis: a name may hold spaces and parentheses.
func statCPU(stat, prefix string) (uint64, bool) {
	open, end := strings.IndexByte(stat, '('), strings.LastIndexByte(stat, ')')
	if open < 0 || end < open || !strings.HasPrefix(stat[open+1:end], prefix) {
		return 0, false
	}
	f := strings.Fields(stat[end+1:])
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return u + st, true
}
