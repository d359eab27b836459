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
