package workload

import (
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// TCPInfo reads TCP_INFO of a connection.
func TCPInfo(c net.Conn) (*unix.TCPInfo, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, fmt.Errorf("workload: %T has no socket", c)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var info *unix.TCPInfo
	var serr error
	if err := rc.Control(func(fd uintptr) {
		info, serr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil {
		return nil, err
	}
	return info, serr
}

// congestionControl returns the socket's TCP congestion control.
func congestionControl(c net.Conn) string {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return ""
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return ""
	}
	var cc string
	rc.Control(func(fd uintptr) {
		cc, _ = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	})
	return strings.TrimRight(cc, "\x00")
}

// setCC is a net.Dialer Control function setting TCP_CONGESTION before connect.
func setCC(cc string) func(network, address string, c syscall.RawConn) error {
	return func(network, address string, c syscall.RawConn) error {
		if cc == "" {
			return nil
		}
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, cc)
		}); err != nil {
			return err
		}
		if serr != nil {
			avail, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
			return fmt.Errorf("congestion control %q: %w (available: %s)", cc, serr, strings.TrimSpace(string(avail)))
		}
		return nil
	}
}
