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

// build checks what a lab needs, builds it with mk (failing the test if it
// cannot) and closes it at the test's end, reporting a failed close.
func build[L interface{ Close() error }](t testing.TB, what string, mk func() (L, error)) L {
	t.Helper()
	require(t)
	l, err := mk()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("lab close: %v", err)
		}
	})
	return l
}

// New builds cfg for the test.
func New(t testing.TB, cfg netlab.Config) *netlab.Lab {
	t.Helper()
	return build(t, "lab", func() (*netlab.Lab, error) { return netlab.New(cfg) })
}

// Pair builds a netlab.Pair for the test.
func Pair(t testing.TB) *netlab.Pair {
	t.Helper()
	return build(t, "lab", netlab.NewPair)
}

// Incast builds a netlab.Incast for the test.
func Incast(t testing.TB, o netlab.IncastOptions) *netlab.Incast {
	t.Helper()
	return build(t, "incast lab", func() (*netlab.Incast, error) { return netlab.NewIncast(o) })
}
