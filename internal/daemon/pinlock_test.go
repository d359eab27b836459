package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hbm-dev/hbm/internal/bpffs"
	"github.com/hbm-dev/hbm/internal/testutil"
)

// A pin directory not on a bpffs is refused, and nothing is mounted.
func TestCheckPinDirRefusesNonBPFFS(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pins")
	err := checkPinDir(dir)
	if err == nil || !strings.Contains(err.Error(), "is not on a bpffs, and the daemon does not mount one") {
		t.Fatalf("checkPinDir(%s): %v", dir, err)
	}
	if bpffs.Mounted(filepath.Dir(dir)) {
		t.Errorf("mounted something")
	}
	if err := checkPinDir("relative"); err == nil {
		t.Errorf("relative pin directory accepted")
	}
}

// A second daemon on the same pin directory is refused while the first
// holds it; after the first is gone, it gets it.
func TestLockPinDir(t *testing.T) {
	testutil.RequireRoot(t)
	if !bpffs.Mounted(bpffs.Root) {
		testutil.Missing(t, "bpffs at "+bpffs.Root, nil)
	}
	dir := filepath.Join(bpffs.Root, "hbm-test-pinlock")
	os.RemoveAll(dir)
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := checkPinDir(dir); err != nil {
		t.Fatal(err)
	}
	first, err := lockPinDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockPinDir(dir); err == nil || !strings.Contains(err.Error(), "another hbm daemon runs on pin directory") {
		t.Errorf("second lock: %v", err)
	}
	first.Close()
	again, err := lockPinDir(dir)
	if err != nil {
		t.Fatalf("after the first released it: %v", err)
	}
	again.Close()
}
