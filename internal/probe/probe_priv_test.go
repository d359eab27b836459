package probe

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/hbm-dev/hbm/internal/cgroup"
	"github.com/hbm-dev/hbm/internal/testutil"
)

// TestRunOnThisKernel runs every probe for real: this machine kind has all
// HBM needs, so every required check must pass, and the probes must leave
// nothing behind (no test cgroup).
func TestRunOnThisKernel(t *testing.T) {
	testutil.RequireRoot(t)
	results := Run()
	if len(results) != len(Checks()) {
		t.Fatalf("%d results for %d checks", len(results), len(Checks()))
	}
	for _, r := range results {
		t.Logf("%s %-26s %-8s %s", Mark(r), r.Name, r.Level, r.Detail)
		if r.Level == Required && !r.OK {
			t.Errorf("required check %q failed: %s (hint: %s)", r.Name, r.Detail, r.Hint)
		}
	}
	if err := Err(results); err != nil {
		t.Errorf("Err = %v", err)
	}

	if mnt, err := cgroup.Mount(); err == nil {
		leftover := filepath.Join(mnt, fmt.Sprintf("hbm-check-%d", os.Getpid()))
		if _, err := os.Stat(leftover); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("probe cgroup %s left behind (stat: %v)", leftover, err)
		}
	}
}

// TestReturnCodeProbeDiscriminates shows the egress probe means something:
// the verifier does check cgroup_skb return values, rejecting 3 on ingress
// (which may only pass or drop) while accepting it on egress.
func TestReturnCodeProbeDiscriminates(t *testing.T) {
	testutil.RequireRoot(t)
	if err := loadAndClose(retProgram(ebpf.AttachCGroupInetEgress, 3)); err != nil {
		t.Fatalf("egress returning 3: %v", err)
	}
	if err := loadAndClose(retProgram(ebpf.AttachCGroupInetIngress, 3)); err == nil {
		t.Fatal("ingress program returning 3 loaded: the verifier does not check return values, so the egress probe proves nothing")
	}
	if err := loadAndClose(retProgram(ebpf.AttachCGroupInetEgress, 4)); err == nil {
		t.Fatal("egress program returning 4 loaded")
	}
}

// TestTryMountBPFFS exercises the path taken when /sys/fs/bpf is not mounted
// (whether it is depends on what else ran on the machine): the test mount
// works and stays invisible to the process's own mount namespace.
func TestTryMountBPFFS(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	if err := tryMountBPFFS(dir); err != nil {
		t.Fatalf("tryMountBPFFS(%s): %v", dir, err)
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if m, ok, err := findMount(f, dir); err != nil || ok {
		t.Errorf("test mount visible outside its namespace: %+v %v %v", m, ok, err)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("%s after the test mount: %v %v", dir, entries, err)
	}
	if err := tryMountBPFFS(filepath.Join(dir, "missing")); err == nil {
		t.Error("mount on a missing directory: want an error")
	}
}

// TestHelperProbe: on this kernel cgroup_skb programs may call
// bpf_skb_ancestor_cgroup_id, and the same probe refuses a helper they may
// not call (bpf_redirect, tc's), so its yes means something.
func TestHelperProbe(t *testing.T) {
	testutil.RequireRoot(t)
	if err := haveHelper(ebpf.CGroupSKB, asm.FnSkbAncestorCgroupId); err != nil {
		t.Errorf("bpf_skb_ancestor_cgroup_id in cgroup_skb: %v", err)
	}
	if err := haveHelper(ebpf.CGroupSKB, asm.FnRedirect); !errors.Is(err, ebpf.ErrNotSupported) {
		t.Errorf("bpf_redirect in cgroup_skb: %v, want ErrNotSupported", err)
	}
	detail, hint, err := checkHelpers()
	if err != nil || !strings.Contains(detail, "bpf_skb_ancestor_cgroup_id") {
		t.Errorf("checkHelpers = %q, %q, %v", detail, hint, err)
	}
}
