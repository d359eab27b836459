package daemon

import (
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// notify sends state to systemd's notification socket ($NOTIFY_SOCKET, set
// for Type=notify services), the few lines of sd_notify(3): one datagram on
// a unix socket, abstract when the name starts with '@'. Without the
// variable it does nothing.
func notify(state string) error {
	name := os.Getenv("NOTIFY_SOCKET")
	if name == "" {
		return nil
	}
	if name[0] == '@' {
		name = "\x00" + name[1:]
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Write([]byte(state))
	return err
}

// monotonicUsec is CLOCK_MONOTONIC in microseconds (RELOADING=1 wants it).
func monotonicUsec() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano() / 1000
}
