package probe

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// probedElsewhere are helpers of the policers that checkHelpers leaves to
// another check.
var probedElsewhere = map[asm.BuiltinFunc]string{
	asm.FnSpinLock:   "spin_lock",
	asm.FnSpinUnlock: "spin_lock",
}

// TestHelpersCoverPolicers: every helper HBM's cgroup_skb programs (the
// embedded object the data plane loads) call is probed by hbm check.
func TestHelpersCoverPolicers(t *testing.T) {
	spec, err := ebpf.LoadCollectionSpec("../dataplane/hbm_bpfel.o")
	if err != nil {
		t.Fatal(err)
	}
	probed := map[asm.BuiltinFunc]bool{}
	for _, h := range helpers {
		probed[h.fn] = true
	}
	policers := 0
	for name, p := range spec.Programs {
		if p.Type != ebpf.CGroupSKB {
			continue
		}
		policers++
		reported := map[asm.BuiltinFunc]bool{}
		for _, ins := range p.Instructions {
			if !ins.IsBuiltinCall() {
				continue
			}
			fn := asm.BuiltinFunc(ins.Constant)
			if !probed[fn] && probedElsewhere[fn] == "" && !reported[fn] {
				reported[fn] = true
				t.Errorf("program %s calls %v, which hbm check does not probe (add it to helpers)", name, fn)
			}
		}
	}
	if policers != 2 {
		t.Errorf("%d cgroup_skb programs in the data plane's object, want 2 (egress, ingress)", policers)
	}
}

// TestCheckHelpersMissing: a kernel whose cgroup_skb programs lack
// bpf_skb_ancestor_cgroup_id fails the check, naming the helper and why the
// policers need it.
func TestCheckHelpersMissing(t *testing.T) {
	old := haveHelper
	t.Cleanup(func() { haveHelper = old })
	haveHelper = func(pt ebpf.ProgramType, fn asm.BuiltinFunc) error {
		if pt != ebpf.CGroupSKB {
			return fmt.Errorf("probed for program type %v", pt)
		}
		if fn == asm.FnSkbAncestorCgroupId {
			return fmt.Errorf("%v: %w", fn, ebpf.ErrNotSupported)
		}
		return nil
	}
	detail, hint, err := checkHelpers()
	if err == nil {
		t.Fatalf("checkHelpers without bpf_skb_ancestor_cgroup_id: no error (detail %q)", detail)
	}
	if !errors.Is(err, ebpf.ErrNotSupported) || !strings.Contains(err.Error(), "missing bpf_skb_ancestor_cgroup_id") ||
		strings.Contains(err.Error(), "bpf_tcp_sock") {
		t.Errorf("error %q: want it to name bpf_skb_ancestor_cgroup_id alone, wrapping ErrNotSupported", err)
	}
	for _, want := range []string{"bpf_skb_ancestor_cgroup_id", "cgroup path", "Linux 5.8"} {
		if !strings.Contains(hint, want) {
			t.Errorf("hint %q does not say %q", hint, want)
		}
	}
	r := runOne(Check{"helpers", "cgroup_skb helpers", Required, checkHelpers})
	if r.OK || !r.Missing() || Err([]Result{r}) == nil {
		t.Errorf("result %+v: want a missing required feature", r)
	}

	haveHelper = func(ebpf.ProgramType, asm.BuiltinFunc) error { return nil }
	if detail, _, err := checkHelpers(); err != nil || !strings.Contains(detail, "bpf_skb_ancestor_cgroup_id") {
		t.Errorf("every helper present: %q, %v; want a detail naming bpf_skb_ancestor_cgroup_id", detail, err)
	}
}
