package daemon

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWatchConfigMapSwap: kubelet updates a ConfigMap volume by writing a
// new timestamped directory, pointing a ..data_tmp link at it and renaming
// that over ..data; the file itself (hbm.yaml -> ..data/hbm.yaml) is never
// touched. The watcher must report it.
func TestWatchConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	write := func(ts, body string) {
		if err := os.MkdirAll(filepath.Join(dir, ts), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ts, "hbm.yaml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("..2026_11_24_23_00_00.1", "limits:\n")
	if err := os.Symlink("..2026_11_24_23_00_00.1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/hbm.yaml", filepath.Join(dir, "hbm.yaml")); err != nil {
		t.Fatal(err)
	}
	w, err := NewWatcher(filepath.Join(dir, "hbm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// Kubelet's atomic writer: new directory, ..data_tmp, rename, old removed.
	write("..2026_11_24_23_05_00.2", "limits:\n  - cgroup: /x\n    egress: 1mbit\n")
	if err := os.Symlink("..2026_11_24_23_05_00.2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "..2026_11_24_23_00_00.1")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Config:
	case <-time.After(2 * time.Second):
		t.Fatal("the ..data swap of a ConfigMap volume was not reported within 2s")
	}
	cfg, err := Load(filepath.Join(dir, "hbm.yaml"))
	if err != nil || len(cfg.Rules) != 1 {
		t.Fatalf("after the swap: %v %+v", err, cfg)
	}
	// Another file of the volume changing alone says nothing.
	if err := os.WriteFile(filepath.Join(dir, "other"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Config:
		t.Error("a change of another file was reported")
	case <-time.After(200 * time.Millisecond):
	}
}
