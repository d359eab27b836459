// Package testutil holds the rules shared by HBM's privileged tests.
package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// InCI reports whether the tests run under CI (CI=true), where a missing
// capability is a failure rather than a reason to skip.
func InCI() bool { return os.Getenv("CI") == "true" }

// RequireRoot skips a test that needs root (BPF, cgroups, namespaces) when
// run unprivileged outside CI, and fails it under CI.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if InCI() {
		t.Fatalf("test needs root (BPF, cgroups, namespaces) and CI=true: failing instead of skipping")
	}
	t.Skip("skipping: needs root (BPF, cgroups, namespaces); run as root or under CI")
}

// Missing reports a missing capability: a skip outside CI, a failure in CI.
func Missing(t testing.TB, what string, err error) {
	t.Helper()
	if InCI() {
		t.Fatalf("%s unavailable under CI=true: %v", what, err)
	}
	t.Skipf("skipping: %s unavailable: %v", what, err)
}

// HBMBinary returns the path of the built hbm binary that integration tests
// drive: $HBM_BIN (set by `make test`), else bin/hbm at the module root.
func HBMBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("HBM_BIN"); p != "" {
		return p
	}
	_, file, _, _ := runtime.Caller(0)
	p := filepath.Join(filepath.Dir(file), "..", "..", "bin", "hbm")
	if _, err := os.Stat(p); err != nil {
		Missing(t, "hbm binary (run `make build` or set HBM_BIN)", err)
	}
	return p
}

// RequireCommand checks that an external command exists.
func RequireCommand(t testing.TB, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		Missing(t, name, err)
	}
}
