package netlab

import "testing"

func TestParseNetstat(t *testing.T) {
	n := parseNetstat(`TcpExt: SyncookiesSent TCPLossProbes
TcpExt: 3 17
IpExt: InNoRoutes
IpExt: 2
Tcp: RtoAlgorithm RetransSegs MaxConn
Tcp: 1 42 -1
`)
	for k, want := range map[string]uint64{"TcpExt:TCPLossProbes": 17, "TcpExt:SyncookiesSent": 3, "IpExt:InNoRoutes": 2, "Tcp:RetransSegs": 42} {
		if n[k] != want {
			t.Errorf("%s = %d, want %d (%v)", k, n[k], want, n)
		}
	}
	if d := n.Sub(Netstat{"Tcp:RetransSegs": 40}); d["Tcp:RetransSegs"] != 2 {
		t.Errorf("Sub: %v", d)
	}
}
