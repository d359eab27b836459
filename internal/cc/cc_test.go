package cc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The Go mirror of struct dctcp_sock_info must keep the C layout.
func TestSockRecordLayout(t *testing.T) {
	if n := binary.Size(sockRecord{}); n != sockRecordSize {
		t.Fatalf("sockRecord is %d bytes, struct dctcp_sock_info is %d", n, sockRecordSize)
	}
}

func TestDecodeSockets(t *testing.T) {
	v4 := sockRecord{
		Cookie: 42, Family: 2, Sport: 5201, Dport: 40000, State: 1, CAState: 2,
		UID: 1000, Alpha: 512, CEState: 1, ECNFlags: 1 | 4, SndCwnd: 20, SndSsthresh: 15,
		SrttUs: 250, MSS: 1448, Delivered: 100, DeliveredCE: 30, TotalRetrans: 2, Repairs: 1,
	}
	copy(v4.Saddr[:], []byte{10, 0, 0, 1})
	copy(v4.Daddr[:], []byte{10, 0, 0, 2})
	v6 := sockRecord{Family: 10, Sport: 1, Dport: 2, State: 10, Alpha: 0xffffffff, ECNFlags: 1 << 4}
	v6.Saddr = netip.MustParseAddr("fd00::1").As16()
	v6.Daddr = netip.MustParseAddr("fd00::2").As16()
	reno := sockRecord{Family: 2, State: 1, Alpha: MaxAlpha, DctcpFlags: 1}

	var buf bytes.Buffer
	for _, r := range []sockRecord{v4, v6, reno} {
		if err := binary.Write(&buf, binary.NativeEndian, r); err != nil {
			t.Fatal(err)
		}
	}
	socks, err := decodeSockets(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(socks) != 3 {
		t.Fatalf("got %d sockets, want 3", len(socks))
	}
	s := socks[0]
	if s.Local.String() != "10.0.0.1:5201" || s.Remote.String() != "10.0.0.2:40000" {
		t.Errorf("v4 addresses %s %s", s.Local, s.Remote)
	}
	if s.State != "ESTAB" || s.CA != "cwr" || s.Alpha != 0.5 || !s.CEState || !s.ECN || s.RenoFallback {
		t.Errorf("v4 socket decoded as %+v", s)
	}
	if s.SRTT != 250*time.Microsecond || s.Cookie != 42 || s.DeliveredCE != 30 || s.Retrans != 2 || s.Repairs != 1 {
		t.Errorf("v4 counters decoded as %+v", s)
	}
	s = socks[1]
	if s.Local.String() != "[fd00::1]:1" || s.State != "LISTEN" || s.Alpha != -1 || !s.ECN {
		t.Errorf("v6 listener decoded as %+v", s)
	}
	if s = socks[2]; !s.RenoFallback || s.ECN || s.Alpha != 1 {
		t.Errorf("reno fallback decoded as %+v", s)
	}

	if _, err := decodeSockets(make([]byte, sockRecordSize+1)); err == nil {
		t.Error("a partial record decoded without error")
	}
	if socks, err := decodeSockets(nil); err != nil || len(socks) != 0 {
		t.Errorf("empty iterator output: %v, %v", socks, err)
	}
}

func TestCheckName(t *testing.T) {
	if err := checkName("dctcp"); err != nil {
		t.Errorf("dctcp: %v", err)
	}
	for _, n := range []string{"", "cubic", "DCTCP", "dctcp-reno"} {
		if err := checkName(n); !errors.Is(err, ErrUnknown) {
			t.Errorf("%q: %v, want ErrUnknown", n, err)
		}
	}
}

func TestNativeModule(t *testing.T) {
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rel := filepath.Join(dir, unix.ByteSliceToString(uts.Release[:]))
	if err := os.MkdirAll(rel, 0o755); err != nil {
		t.Fatal(err)
	}
	old := modulesDir
	modulesDir = dir
	t.Cleanup(func() { modulesDir = old })

	if m := nativeModule("dctcp"); m != "" {
		t.Errorf("no module files, got %q", m)
	}
	dep := "kernel/net/ipv4/tcp_bbr.ko.zst:\nkernel/net/ipv4/tcp_dctcp_x.ko:\nkernel/net/ipv4/tcp_dctcp.ko.xz: kernel/foo.ko\n"
	if err := os.WriteFile(filepath.Join(rel, "modules.dep"), []byte(dep), 0o644); err != nil {
		t.Fatal(err)
	}
	if m := nativeModule("dctcp"); m != "kernel/net/ipv4/tcp_dctcp.ko.xz" {
		t.Errorf("modules.dep lists tcp_dctcp.ko.xz, got %q", m)
	}
	if m := nativeModule("cdg"); m != "" {
		t.Errorf("cdg: got %q", m)
	}
	if err := os.WriteFile(filepath.Join(rel, "modules.builtin"), []byte("kernel/net/ipv4/tcp_cdg.ko\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if m := nativeModule("cdg"); m != "kernel/net/ipv4/tcp_cdg.ko" {
		t.Errorf("modules.builtin lists tcp_cdg.ko, got %q", m)
	}
}

func TestReadWords(t *testing.T) {
	p := filepath.Join(t.TempDir(), "avail")
	if err := os.WriteFile(p, []byte("reno bbr cubic\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := procAvailable
	procAvailable = p
	t.Cleanup(func() { procAvailable = old })
	for name, want := range map[string]bool{"reno": true, "cubic": true, "dctcp": false, "cub": false} {
		if got, err := registered(name); err != nil || got != want {
			t.Errorf("registered(%q) = %v, %v; want %v", name, got, err, want)
		}
	}
}
