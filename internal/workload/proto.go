// Package workload is HBM's built-in traffic generator: a server that sinks
// bulk streams and answers request/response (RPC) loops on one TCP port, and
// a client that drives bulk streams and back-to-back RPCs for a fixed time
// and reports goodput, retransmissions, RTT and RPC latency percentiles.
//
// Wire protocol (all integers big endian). Every connection starts with a
// 16-byte hello: "HBMW", version 1, kind ('B' bulk, 'R' rpc, 'C' control),
// two reserved bytes and the client's 64-bit session id. Then:
//
//   - bulk: the client writes; the server reads and discards, counting bytes.
//   - rpc: each request is an 8-byte header (request length N including the
//     header, reply length M) followed by N-8 bytes; the server answers with
//     M bytes once it has read the whole request.
//   - control: the client sends 'S' and the server answers 32 bytes: its
//     monotonic clock in ns and the session's bulk bytes read, RPC request
//     bytes read and RPC reply bytes written; 'X' is answered with those 32
//     bytes and 16 more: the session's UDP bytes and datagrams received; 'Q'
//     ends the session.
//
// UDP (kind 'udp' flows): datagrams to the same port number, each starting
// with "HBMU" and the session id (12 bytes), the rest filler. The server
// counts them per session (bytes include the 12-byte header); datagrams of
// an unknown session are ignored.
package workload

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

const (
	helloLen     = 16
	rpcHeaderLen = 8
	snapLen      = 32
	snapLenX     = 48
	udpHeaderLen = 12
	version      = 1

	kindBulk    = 'B'
	kindRPC     = 'R'
	kindControl = 'C'

	ctrlSnapshot = 'S'
	ctrlSnapX    = 'X'
	ctrlQuit     = 'Q'

	// MaxRPCSize bounds request and reply sizes.
	MaxRPCSize = 64 << 20
	// MaxRPCRate bounds an RPC loop's requests per second.
	MaxRPCRate = 1_000_000

	// DefaultUDPSize is a UDP datagram's payload by default: one 1500-byte
	// IPv4 packet (1500 - 20 - 8).
	DefaultUDPSize = 1472
	// DefaultUDPSize6 is the same over IPv6 (1500 - 40 - 8).
	DefaultUDPSize6 = 1452
	// MinUDPSize and MaxUDPSize bound the payload (header included; above
	// 1472 IPv4 fragments on a 1500-byte MTU).
	MinUDPSize = udpHeaderLen
	MaxUDPSize = 65507
)

var magic = [4]byte{'H', 'B', 'M', 'W'}
var udpMagic = [4]byte{'H', 'B', 'M', 'U'}

func encodeHello(kind byte, session uint64) []byte {
	b := make([]byte, helloLen)
	copy(b, magic[:])
	b[4] = version
	b[5] = kind
	binary.BigEndian.PutUint64(b[8:], session)
	return b
}

func readHello(r io.Reader) (kind byte, session uint64, err error) {
	var b [helloLen]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, 0, err
	}
	if [4]byte(b[:4]) != magic {
		return 0, 0, errors.New("workload: bad hello magic")
	}
	if b[4] != version {
		return 0, 0, fmt.Errorf("workload: protocol version %d, want %d", b[4], version)
	}
	switch b[5] {
	case kindBulk, kindRPC, kindControl:
	default:
		return 0, 0, fmt.Errorf("workload: unknown connection kind %q", b[5])
	}
	return b[5], binary.BigEndian.Uint64(b[8:]), nil
}

// ParseSize parses a byte count: a bare number is bytes; K/KB/KiB, M/MB/MiB
// and G/GB/GiB are powers of 1024 (so "10KB" is 10240 bytes and "128K"
// 131072).
func ParseSize(s string) (int, error) {
	in := strings.TrimSpace(s)
	i := 0
	for i < len(in) && in[i] >= '0' && in[i] <= '9' {
		i++
	}
	n, err := strconv.Atoi(in[:i])
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	mult := 1
	switch strings.ToUpper(strings.TrimSpace(in[i:])) {
	case "", "B":
	case "K", "KB", "KIB":
		mult = 1 << 10
	case "M", "MB", "MIB":
		mult = 1 << 20
	case "G", "GB", "GIB":
		mult = 1 << 30
	default:
		return 0, fmt.Errorf("bad size unit in %q (want B, K/KB, M/MB, G/GB)", s)
	}
	if n > (1<<31-1)/mult {
		return 0, fmt.Errorf("size %q too large", s)
	}
	return n * mult, nil
}
