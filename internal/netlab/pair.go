package netlab

import (
	"context"
	"net"
	"strconv"

	"github.com/hbm-dev/hbm/internal/workload"
)

// The two hosts of a Pair.
const (
	Sender   = "snd"
	Receiver = "rcv"
	pairLink = "veth"
)

// Pair is the two-host lab most tests use: a sender and a receiver joined
// by a veth pair, with IPv4 and IPv6 addresses.
type Pair struct {
	*Lab
	SenderNS, ReceiverNS   string // named network namespaces
	SenderDev, ReceiverDev string // the veth ends, inside their namespace
	SenderIP4, ReceiverIP4 net.IP
	SenderIP6, ReceiverIP6 net.IP
}

// NewPair builds a Pair. On error nothing is left behind.
func NewPair() (*Pair, error) {
	l, err := New(Config{
		Hosts: []string{Sender, Receiver},
		Links: []Link{{Name: pairLink, Hosts: []string{Sender, Receiver}}},
		IPv6:  true,
	})
	if err != nil {
		return nil, err
	}
	s, r := l.Host(Sender), l.Host(Receiver)
	return &Pair{
		Lab:      l,
		SenderNS: s.NS, ReceiverNS: r.NS,
		SenderDev: s.Dev[pairLink], ReceiverDev: r.Dev[pairLink],
		SenderIP4: s.IP4[pairLink], ReceiverIP4: r.IP4[pairLink],
		SenderIP6: s.IP6[pairLink], ReceiverIP6: r.IP6[pairLink],
	}, nil
}

// ReceiverAddr returns the receiver's address and port as host:port, IPv6
// when v6 is set.
func (p *Pair) ReceiverAddr(port int, v6 bool) string {
	ip := p.ReceiverIP4
	if v6 {
		ip = p.ReceiverIP6
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(port))
}

// StartServer starts `bin workload serve` in the receiver, listening on
// port on every address (IPv4 and IPv6).
func (p *Pair) StartServer(bin string, port int) (*Proc, error) {
	return p.Lab.StartServer(bin, Receiver, "", "[::]:"+strconv.Itoa(port))
}

// RunClient runs a workload client with cfg in the sender, inside the
// cgroup at cgroupDir.
func (p *Pair) RunClient(ctx context.Context, bin, cgroupDir string, cfg workload.Config) (*workload.Result, error) {
	return p.Lab.RunClient(ctx, bin, Sender, cgroupDir, cfg)
}

// StartScriptClient starts a `workload run --script` client with cfg in
// the sender, inside the cgroup at cgroupDir, and waits until it is
// connected.
func (p *Pair) StartScriptClient(bin, cgroupDir string, cfg workload.Config) (*ScriptClient, error) {
	return p.Lab.StartScriptClient(context.Background(), bin, Sender, cgroupDir, ClientArgs(cfg), false)
}

// SenderTxBytes is the sender veth's tx_bytes: whole frames (Ethernet
// header included), everything the sender transmitted.
func (p *Pair) SenderTxBytes() (uint64, error) { return p.TxBytes(Sender, pairLink) }

// QdiscStats returns the root qdisc of the sender's veth.
func (p *Pair) QdiscStats() (QdiscStats, error) { return ReadQdisc(p.SenderNS, p.SenderDev) }

// SetSenderQdisc replaces the root qdisc of the sender's veth.
func (p *Pair) SetSenderQdisc(q Qdisc) error { return p.SetQdisc(Sender, pairLink, q) }
