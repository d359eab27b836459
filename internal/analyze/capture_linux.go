package analyze

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"golang.org/x/sys/unix"
)

// Capture records what an AF_PACKET socket on one interface sees (both
// directions) into a pcap file: headers only, with the kernel's receive
// timestamps, as `tcpdump -s SNAP -w FILE` would, in pure Go. Its receive
// buffer is large (64 MB) so that a test's or an eval's transfer does not
// overflow it; Stop reports the packets it dropped if one did.
type Capture struct {
	fd       int
	f        *os.File
	bw       *bufio.Writer
	w        *pcapgo.Writer
	snap     int
	max      int64 // stop writing past this many bytes of file (0: no bound)
	written  int64
	packets  int64
	full     bool
	done     chan error
	stopping atomic.Bool
}

// CaptureStats is what a capture saw.
type CaptureStats struct {
	Packets int64 // written to the file
	Dropped int64 // lost by the socket (receive buffer full)
	Full    bool  // the size bound was reached: later packets were not written
}

// StartCapture starts capturing on interface dev of network namespace ns
// ("" for the caller's) into path, each packet cut to snap bytes, the file
// bounded to about maxBytes (0: unbounded).
func StartCapture(ns, dev, path string, snap int, maxBytes int64) (*Capture, error) {
	if snap <= 0 {
		snap = 128
	}
	fd, err := packetSocketIn(ns, dev)
	if err != nil {
		return nil, fmt.Errorf("capture on %s: %w", dev, err)
	}
	c := &Capture{fd: fd, snap: snap, max: maxBytes, done: make(chan error, 1)}
	// O_NOFOLLOW: a symbolic link placed at path is not written through.
	if c.f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW, 0o644); err != nil {
		unix.Close(fd)
		return nil, err
	}
	c.bw = bufio.NewWriterSize(c.f, 1<<20)
	c.w = pcapgo.NewWriterNanos(c.bw)
	if err := c.w.WriteFileHeader(uint32(snap), layers.LinkTypeEthernet); err != nil {
		unix.Close(fd)
		c.f.Close()
		return nil, err
	}
	c.written = 24
	go c.loop()
	return c, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// packetSocketIn opens packetSocket on interface dev of network namespace ns
// ("" for the caller's); the socket stays bound there once the thread is
// back in its own namespace.
func packetSocketIn(ns, dev string) (int, error) {
	var fd int
	err := inNetnsRestore(ns, func() error {
		ifc, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		fd, err = packetSocket(ifc.Index)
		return err
	})
	return fd, err
}

// packetSocket opens an AF_PACKET socket bound to interface ifindex of the
// calling thread's network namespace.
func packetSocket(ifindex int) (int, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		return -1, fmt.Errorf("AF_PACKET socket: %w", err)
	}
	for _, o := range []struct{ opt, v int }{{unix.SO_RCVBUFFORCE, 64 << 20}, {unix.SO_TIMESTAMPNS, 1}} {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, o.opt, o.v); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("AF_PACKET setsockopt %d: %w", o.opt, err)
		}
	}
	// A receive timeout lets the reader notice Stop.
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 50000}); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifindex}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("AF_PACKET bind: %w", err)
	}
	return fd, nil
}

func (c *Capture) loop() {
	buf := make([]byte, c.snap)
	oob := make([]byte, 256)
	for {
		n, oobn, _, _, err := unix.Recvmsg(c.fd, buf, oob, unix.MSG_TRUNC)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				if c.stopping.Load() {
					c.done <- nil
					return
				}
				continue
			}
			c.done <- fmt.Errorf("AF_PACKET recvmsg: %w", err)
			return
		}
		if c.full {
			continue
		}
		ts := time.Now()
		if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, m := range msgs {
				if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SO_TIMESTAMPNS && len(m.Data) >= 16 {
					ts = time.Unix(int64(binary.NativeEndian.Uint64(m.Data)), int64(binary.NativeEndian.Uint64(m.Data[8:])))
				}
			}
		}
		capLen := min(n, c.snap) // with MSG_TRUNC, n is the packet's whole length
		if c.max > 0 && c.written+16+int64(capLen) > c.max {
			c.full = true
			continue
		}
		if err := c.w.WritePacket(gopacket.CaptureInfo{Timestamp: ts, CaptureLength: capLen, Length: n}, buf[:capLen]); err != nil {
			c.done <- err
			return
		}
		c.written += 16 + int64(capLen)
		c.packets++
	}
}

// Stop ends the capture once the socket has had nothing to read for 50 ms,
// and closes the file.
func (c *Capture) Stop() (CaptureStats, error) {
	c.stopping.Store(true)
	err := <-c.done
	st, serr := unix.GetsockoptTpacketStats(c.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
	unix.Close(c.fd)
	if ferr := c.bw.Flush(); err == nil {
		err = ferr
	}
	if cerr := c.f.Close(); err == nil {
		err = cerr
	}
	if err == nil && serr != nil {
		err = serr
	}
	out := CaptureStats{Packets: c.packets, Full: c.full}
	if st != nil {
		out.Dropped = int64(st.Drops)
	}
	return out, err
}
