package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hbm-dev/hbm/internal/dataplane"
)

// Pods' declarations join the file's: the file wins on the same group and
// direction; a pod whose group does not exist yet has no target; the
// source's directories are watched.
func TestResolvePods(t *testing.T) {
	mnt := t.TempDir()
	for _, d := range []string{"kp/a", "kp/b", "batch"} {
		if err := os.MkdirAll(filepath.Join(mnt, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := Parse("hbm.yaml", []byte("limits:\n  - cgroup: /kp/b\n    egress: 50mbit\n  - cgroup: /batch\n    egress: 1gbit\n"))
	if err != nil {
		t.Fatal(err)
	}
	res := Resolve(mnt, cfg)
	l100, l200 := lim(100e6), lim(200e6)
	ResolvePods(mnt, []PodDecl{
		{Namespace: "ns", Name: "a", Cgroup: "/kp/a", Egress: &l100, Ingress: &l200},
		{Namespace: "ns", Name: "b", Cgroup: "/kp/b", Egress: &l100},
		{Namespace: "ns", Name: "later", Cgroup: "/kp/later", Egress: &l100},
		{Namespace: "ns", Name: "bad", Cgroup: "/batch", KeepEgress: true, KeepIngress: true},
	}, []string{filepath.Join(mnt, "kp"), mnt}, &res)
	byRel := map[string]Target{}
	for k, tg := range res.Targets {
		byRel[tg.Group.Rel+" "+k.Dir.String()] = tg
	}
	if a := byRel["/kp/a egress"]; a.Pod != "a" || a.Namespace != "ns" || a.Limit.Rate != 100e6 || a.Keep {
		t.Errorf("a egress: %+v", a)
	}
	if a := byRel["/kp/a ingress"]; a.Limit.Rate != 200e6 {
		t.Errorf("a ingress: %+v", a)
	}
	if b := byRel["/kp/b egress"]; b.Pod != "" || b.Limit.Rate != 50e6 {
		t.Errorf("b egress: %+v, want the file's", b)
	}
	if bad := byRel["/batch ingress"]; !bad.Keep || bad.Pod != "bad" {
		t.Errorf("batch ingress: %+v, want Keep by pod bad", bad)
	}
	if len(res.Targets) != 5 {
		t.Errorf("%d targets, want 5: %v", len(res.Targets), byRel)
	}
	if !strings.Contains(strings.Join(res.Warnings, "\n"), "pod ns/b: /kp/b egress already declared by line 2, which wins") {
		t.Errorf("warnings %q", res.Warnings)
	}
	watched := strings.Join(res.Watch, " ")
	if !strings.Contains(watched, filepath.Join(mnt, "kp")) || strings.Count(" "+watched+" ", " "+mnt+" ") != 1 {
		t.Errorf("watch %v", res.Watch)
	}
}

// A Keep target leaves what is there, owned or not, and makes nothing.
func TestReconcileKeep(t *testing.T) {
	E, I := dataplane.Egress, dataplane.Ingress
	desired := map[Key]Target{}
	for _, k := range []Key{{1, E}, {1, I}, {2, E}, {3, E}} {
		_, tg := tgt(k.ID, "/g", k.Dir, 1e6)
		tg.Keep, tg.Limit, tg.Pod = true, dataplane.Limit{}, "p"
		desired[k] = tg
	}
	actual := []Observed{obs(1, "/g1", E, 100e6), obs(2, "/g2", E, 1e9)}
	owned := map[Key]Record{{1, E}: LegacyRecord}
	p := Reconcile("/mnt", desired, actual, owned)
	if len(p.Ops) != 0 || len(p.Conflicts) != 0 || len(p.Forget) != 0 || p.Kept != 1 {
		t.Errorf("plan %+v, want nothing done and 1 kept", p)
	}
}

// A Keep target with a fallback limit creates it where nothing is, and
// leaves what is there otherwise (never "unlimited" for an invalid pod).
func TestReconcileKeepFallback(t *testing.T) {
	E := dataplane.Egress
	desired := map[Key]Target{}
	for _, id := range []uint64{1, 2} {
		k, tg := tgt(id, "/g", E, 8e3)
		tg.Keep, tg.Pod = true, "p"
		desired[k] = tg
	}
	actual := []Observed{obs(1, "/g", E, 100e6)}
	p := Reconcile("/mnt", desired, actual, map[Key]Record{{1, E}: LegacyRecord})
	if len(p.Ops) != 1 || p.Ops[0].Group.ID != 2 || p.Ops[0].Changes[0].Limit.Rate != 8e3 || p.Kept != 1 {
		t.Errorf("plan %+v, want the fallback created on group 2 only, group 1 kept", p)
	}
}
