package netlab

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// UnsentBytes is the data the TCP sockets in host's namespace still hold to
// send or to have acknowledged (ss's Send-Q, summed over every socket that
// can still carry data: established, and closing ones, orphans included).
// A client killed at a run's end leaves its sockets' queues behind, and
// the kernel goes on sending them: 128 bbr streams under htb left 100 MB,
// which drained through the next run's limit (its group is the same
// cgroup) for seconds.
func (l *Lab) UnsentBytes(host string) (int64, error) {
	h := l.hosts[host]
	if h == nil {
		return 0, fmt.Errorf("netlab: no host %q", host)
	}
	out, err := exec.Command("ip", "netns", "exec", h.NS, "ss", "-tnH",
		"state", "established", "state", "fin-wait-1", "state", "close-wait",
		"state", "last-ack", "state", "closing").Output()
	if err != nil {
		return 0, fmt.Errorf("netlab: ss in %s: %w", host, err)
	}
	return sendQueued(string(out))
}

// sendQueued sums the Send-Q column of `ss -tnH` output, with or without
// the State column (ss prints it when the filter names several states).
func sendQueued(out string) (int64, error) {
	var sum int64
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		i := 1 // Recv-Q Send-Q Local Peer
		if _, err := strconv.ParseInt(f[0], 10, 64); err != nil {
			i = 2 // State Recv-Q Send-Q Local Peer
		}
		if len(f) <= i {
			return 0, fmt.Errorf("netlab: ss line %q: no Send-Q", line)
		}
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("netlab: ss line %q: Send-Q: %w", line, err)
		}
		sum += n
	}
	return sum, nil
}
