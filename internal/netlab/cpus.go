package netlab

// Pinning hosts and switches to CPUs (Config.CPUs): taskset(1) for a host's
// processes, RPS (receive packet steering) for the packets a host or a
// switch receives. A veth delivers a packet by queueing it to the backlog
// of the CPU that sent it, unless its receiving end has RPS CPUs: then to
// theirs. So a packet from a sender on CPU 0 to a receiver pinned to CPU 1
// is sent and switched on CPU 0 and received (TCP, the receiver's BPF
// programs, the wake-up of its reader) on CPU 1, as between two machines.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// maxCPU bounds the CPU numbers a configuration may name (unix.CPUSet's
// size).
const maxCPU = 1024

// cpuList formats cpus as taskset -c does: "0,2-3".
func cpuList(cpus []int) string {
	c := slices.Clone(cpus)
	slices.Sort(c)
	c = slices.Compact(c)
	var parts []string
	for i := 0; i < len(c); {
		j := i
		for j+1 < len(c) && c[j+1] == c[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(c[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", c[i], c[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// cpusOf lists the CPUs in set.
func cpusOf(set *unix.CPUSet) []int {
	var cpus []int
	for cpu := 0; cpu < maxCPU; cpu++ {
		if set.IsSet(cpu) {
			cpus = append(cpus, cpu)
		}
	}
	return cpus
}

// cpuMask formats cpus as a sysfs CPU bitmap (rps_cpus): hex, 32 CPUs per
// comma-separated word, the highest word first.
func cpuMask(cpus []int) string {
	top := slices.Max(cpus)
	words := make([]uint32, top/32+1)
	for _, c := range cpus {
		words[c/32] |= 1 << (c % 32)
	}
	var parts []string
	for i := len(words) - 1; i >= 0; i-- {
		if i == len(words)-1 {
			parts = append(parts, strconv.FormatUint(uint64(words[i]), 16))
		} else {
			parts = append(parts, fmt.Sprintf("%08x", words[i]))
		}
	}
	return strings.Join(parts, ",")
}

// setRPS makes the packets dev (in ns) receives be processed on cpus: every
// receive queue's rps_cpus. Through `ip netns exec`, which mounts the
// namespace's /sys.
func (l *Lab) setRPS(ns, dev string, cpus []int) error {
	p := l.commandNS(ns, "", "sh", "-c", `set -e; for f in /sys/class/net/"$2"/queues/rx-*/rps_cpus; do printf '%s\n' "$1" > "$f"; done`, "sh", cpuMask(cpus), dev)
	var out Buffer
	p.Cmd.Stdout, p.Cmd.Stderr = &out, &out
	if err := p.Start(); err != nil {
		return err
	}
	if err := p.WaitTimeout(10 * time.Second); err != nil {
		return fmt.Errorf("netlab: RPS of %s in %s to CPUs %s: %v: %s", dev, ns, cpuList(cpus), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// pinCPUs applies Config.CPUs to the built hosts' interfaces and the
// switches' ports.
func (l *Lab) pinCPUs() error {
	for name, cpus := range l.cfg.CPUs {
		if h := l.hosts[name]; h != nil {
			for _, dev := range h.Dev {
				if err := l.setRPS(h.NS, dev, cpus); err != nil {
					return err
				}
			}
			continue
		}
		bl := l.links[name]
		for _, port := range bl.Ports {
			if err := l.setRPS(bl.Switch, port, cpus); err != nil {
				return err
			}
		}
	}
	return nil
}

// Pin makes the command run on cpus (taskset(1); nil leaves it as is).
// Every thread of the process inherits them. Call before Start.
func (p *Proc) Pin(cpus []int) *Proc {
	if len(cpus) == 0 {
		return p
	}
	a := p.Cmd.Args
	p.Cmd.Args = append(append(append([]string{}, a[:p.prog]...), "taskset", "-c", cpuList(cpus)), a[p.prog:]...)
	return p
}

// SplitCPUs returns, for IncastOptions, the receiver's CPU (the last this
// process may use) and the others' (the first), or ok false if it may use
// only one.
func SplitCPUs() (receiver, others []int, ok bool) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, nil, false
	}
	cpus := cpusOf(&set)
	if len(cpus) < 2 {
		return nil, nil, false
	}
	return cpus[len(cpus)-1:], cpus[:1], true
}
