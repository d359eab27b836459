package cc

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// MaxAlpha is alpha's fixed-point scale: DCTCP_MAX_ALPHA in bpf/include/dctcp.h.
const MaxAlpha = 1024

// sockRecord mirrors struct dctcp_sock_info of bpf/include/dctcp.h.
type sockRecord struct {
	Cookie       uint64
	Saddr        [16]byte
	Daddr        [16]byte
	Family       uint16
	Sport        uint16
	Dport        uint16
	State        uint8
	CAState      uint8
	UID          uint32
	Alpha        uint32
	CEState      uint32
	ECNFlags     uint32
	DctcpFlags   uint32
	SndCwnd      uint32
	SndSsthresh  uint32
	SrttUs       uint32
	MSS          uint32
	Delivered    uint32
	DeliveredCE  uint32
	TotalRetrans uint32
	Repairs      uint32
	_            uint32
}

const sockRecordSize = 104

// Socket is the DCTCP state of one TCP socket using dctcp.
type Socket struct {
	Cookie uint64         `json:"cookie"` // socket cookie (ss -e: sk:<hex>)
	Local  netip.AddrPort `json:"local"`
	Remote netip.AddrPort `json:"remote"`
	State  string         `json:"state"`    // TCP state: ESTAB, LISTEN...
	CA     string         `json:"ca_state"` // open, disorder, cwr, recovery, loss
	UID    uint32         `json:"uid"`
	// Alpha is DCTCP's estimate of the fraction of marked data, 0..1; -1
	// before the socket initialised its congestion control (listening,
	// not yet connected).
	Alpha    float64 `json:"alpha"`
	AlphaRaw uint32  `json:"alpha_raw"` // 0..MaxAlpha
	// CEState is the receiver's CE state: true if the last data segment
	// that arrived was CE-marked.
	CEState bool `json:"ce_state"`
	// ECN is true when ECN was negotiated (RFC 3168 or AccECN).
	ECN bool `json:"ecn"`
	// RenoFallback: no ECN and the switch to reno failed, so the socket
	// stays on dctcp behaving as Reno.
	RenoFallback bool          `json:"reno_fallback"`
	Cwnd         uint32        `json:"cwnd"`
	Ssthresh     uint32        `json:"ssthresh"`
	SRTT         time.Duration `json:"srtt_ns"`
	MSS          uint32        `json:"mss"`
	Delivered    uint32        `json:"delivered"`    // packets, cumulative
	DeliveredCE  uint32        `json:"delivered_ce"` // of which echoed CE, cumulative
	Retrans      uint32        `json:"retrans"`      // total retransmitted segments
	// Repairs counts impossible windows (an ssthresh no callback returned,
	// a cwnd derived from it) found and repaired on this socket; see
	// docs/dctcp.md. Nonzero means the kernel anomaly struck.
	Repairs uint32 `json:"repairs"`
}

var tcpStates = map[uint8]string{
	1: "ESTAB", 2: "SYN-SENT", 3: "SYN-RECV", 4: "FIN-WAIT-1", 5: "FIN-WAIT-2",
	6: "TIME-WAIT", 7: "CLOSE", 8: "CLOSE-WAIT", 9: "LAST-ACK", 10: "LISTEN", 11: "CLOSING",
}

var caStates = []string{"open", "disorder", "cwr", "recovery", "loss"}

const (
	ecnModeAny = 1<<0 | 1<<4 // TCP_ECN_MODE_RFC3168 | TCP_ECN_MODE_ACCECN
	afInet     = 2
)

func (r *sockRecord) socket() Socket {
	s := Socket{
		Cookie:       r.Cookie,
		UID:          r.UID,
		AlphaRaw:     r.Alpha,
		Alpha:        -1,
		CEState:      r.CEState != 0,
		ECN:          r.ECNFlags&ecnModeAny != 0,
		RenoFallback: r.DctcpFlags&1 != 0,
		Cwnd:         r.SndCwnd,
		Ssthresh:     r.SndSsthresh,
		SRTT:         time.Duration(r.SrttUs) * time.Microsecond,
		MSS:          r.MSS,
		Delivered:    r.Delivered,
		DeliveredCE:  r.DeliveredCE,
		Retrans:      r.TotalRetrans,
		Repairs:      r.Repairs,
	}
	if r.Alpha <= MaxAlpha {
		s.Alpha = float64(r.Alpha) / MaxAlpha
	} else {
		s.AlphaRaw = 0
	}
	s.State = tcpStates[r.State]
	if s.State == "" {
		s.State = fmt.Sprint(r.State)
	}
	if int(r.CAState) < len(caStates) {
		s.CA = caStates[r.CAState]
	} else {
		s.CA = fmt.Sprint(r.CAState)
	}
	if r.Family == afInet {
		s.Local = netip.AddrPortFrom(netip.AddrFrom4([4]byte(r.Saddr[:4])), r.Sport)
		s.Remote = netip.AddrPortFrom(netip.AddrFrom4([4]byte(r.Daddr[:4])), r.Dport)
	} else {
		s.Local = netip.AddrPortFrom(netip.AddrFrom16(r.Saddr).Unmap(), r.Sport)
		s.Remote = netip.AddrPortFrom(netip.AddrFrom16(r.Daddr).Unmap(), r.Dport)
	}
	return s
}

// decodeSockets parses the iterator's output.
func decodeSockets(b []byte) ([]Socket, error) {
	if len(b)%sockRecordSize != 0 {
		return nil, fmt.Errorf("socket iterator: %d bytes is not a whole number of %d-byte records", len(b), sockRecordSize)
	}
	out := make([]Socket, 0, len(b)/sockRecordSize)
	r := bytes.NewReader(b)
	for r.Len() > 0 {
		var rec sockRecord
		if err := binary.Read(r, binary.NativeEndian, &rec); err != nil {
			return nil, fmt.Errorf("socket iterator: %w", err)
		}
		out = append(out, rec.socket())
	}
	return out, nil
}

// Sockets returns the TCP sockets of the caller's network namespace whose
// congestion control is dctcp, with their DCTCP state, read by a BPF
// socket iterator (iter/tcp) from the congestion control's private area.
// Needs root. Sockets of another namespace: run in it (ip netns exec).
func Sockets() ([]Socket, error) {
	if err := requireRoot(); err != nil {
		return nil, err
	}
	spec, err := loadDctcp()
	if err != nil {
		return nil, err
	}
	var objs struct {
		Prog *ebpf.Program `ebpf:"dctcp_sockets"`
	}
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return nil, fmt.Errorf("socket iterator: %w", loadError(err))
	}
	defer objs.Prog.Close()
	it, err := link.AttachIter(link.IterOptions{Program: objs.Prog})
	if err != nil {
		return nil, fmt.Errorf("socket iterator: attach: %w", err)
	}
	defer it.Close()
	rd, err := it.Open()
	if err != nil {
		return nil, fmt.Errorf("socket iterator: open: %w", err)
	}
	defer rd.Close()
	b, err := io.ReadAll(rd)
	if err != nil {
		return nil, fmt.Errorf("socket iterator: read: %w", err)
	}
	return decodeSockets(b)
}
