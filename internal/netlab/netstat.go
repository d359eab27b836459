package netlab

import (
	"fmt"
	"strconv"
	"strings"
)

// Netstat is a host's TCP counters (/proc/net/netstat and /proc/net/snmp in
// its network namespace), by name: "TcpExt:TCPLossProbes", "Tcp:RetransSegs".
type Netstat map[string]uint64

// ReadNetstat reads host's counters.
func (l *Lab) ReadNetstat(host string) (Netstat, error) {
	p := l.Command(host, "", "cat", "/proc/net/netstat", "/proc/net/snmp")
	var out Buffer
	p.Cmd.Stdout = &out
	if err := p.Start(); err != nil {
		return nil, err
	}
	if err := p.WaitTimeout(10e9); err != nil {
		return nil, fmt.Errorf("netlab: read counters of %s: %w", host, err)
	}
	return parseNetstat(out.String()), nil
}

// parseNetstat parses the header/value line pairs of /proc/net/netstat and
// /proc/net/snmp.
func parseNetstat(s string) Netstat {
	n := Netstat{}
	lines := strings.Split(s, "\n")
	for i := 0; i+1 < len(lines); i++ {
		h, v := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(h) < 2 || len(h) != len(v) || h[0] != v[0] || !strings.HasSuffix(h[0], ":") {
			continue
		}
		if _, err := strconv.ParseInt(v[1], 10, 64); err != nil {
			continue // two header lines
		}
		for j := 1; j < len(h); j++ {
			x, _ := strconv.ParseInt(v[j], 10, 64)
			n[h[0]+h[j]] = uint64(x)
		}
		i++
	}
	return n
}

// Sub returns n - a, counter by counter.
func (n Netstat) Sub(a Netstat) Netstat {
	d := Netstat{}
	for k, v := range n {
		d[k] = v - a[k]
	}
	return d
}

// Add adds a to n.
func (n Netstat) Add(a Netstat) {
	for k, v := range a {
		n[k] += v
	}
}
