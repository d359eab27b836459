// Package labtest builds netlab labs for tests, as cilium/ebpf's testutils
// do namespaces: one call that checks what the lab needs (skipped with
// -short; root and ip required: skipped outside CI, failed under CI=true),
// builds it, fails the test if it cannot, and closes it at the test's end
// (t.Cleanup), reporting a failed close.
package labtest

import (
	"testing"

	"github.com/hbm-dev/hbm/internal/netlab"
	"github.com/hbm-dev/hbm/internal/testutil"
)

func require(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: needs root and network namespaces")
	}
	testutil.RequireRoot(t)
	testutil.RequireCommand(t, "ip")
}

func closeAtEnd(t testing.TB, close func() error) {
	t.Cleanup(func() {
		if err := close(); err != nil {
			t.Errorf("lab close: %v", err)
		}
	})
}

// New builds cfg for the test.
func New(t testing.TB, cfg netlab.Config) *netlab.Lab {
	t.Helper()
	require(t)
	l, err := netlab.New(cfg)
	if err != nil {
		t.Fatalf("lab: %v", err)
	}
	closeAtEnd(t, l.Close)
	return l
}

// Pair builds a netlab.Pair for the test.
func Pair(t testing.TB) *netlab.Pair {
	t.Helper()
	require(t)
	p, err := netlab.NewPair()
	if err != nil {
		t.Fatalf("lab: %v", err)
	}
	closeAtEnd(t, p.Close)
	return p
}

// Incast builds a netlab.Incast for the test.
func Incast(t testing.TB, o netlab.IncastOptions) *netlab.Incast {
	t.Helper()
	require(t)
	in, err := netlab.NewIncast(o)
	if err != nil {
		t.Fatalf("incast lab: %v", err)
	}
	closeAtEnd(t, in.Close)
	return in
}
