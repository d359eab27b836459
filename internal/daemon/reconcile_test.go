package daemon

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hbm-dev/hbm/internal/cgroup"
	"github.com/hbm-dev/hbm/internal/dataplane"
	"github.com/hbm-dev/hbm/internal/rate"
)

func lim(r rate.Rate) dataplane.Limit {
	return dataplane.Limit{Rate: r, Thresholds: rate.Default(r), MinInflight: dataplane.DefaultMinInflight}
}

func tgt(id uint64, rel string, d dataplane.Direction, r rate.Rate) (Key, Target) {
	return Key{id, d}, Target{Group: cgroup.Group{Dir: "/mnt" + rel, Rel: rel, ID: id}, Dir: d, Limit: lim(r), Line: int(id)}
}

func obs(id uint64, rel string, d dataplane.Direction, r rate.Rate) Observed {
	return Observed{Key: Key{id, d}, Rel: rel, Limit: lim(r)}
}

// TestReconcile covers each case of the table in Reconcile's comment.
func TestReconcile(t *testing.T) {
	E, I := dataplane.Egress, dataplane.Ingress
	desired := map[Key]Target{}
	add := func(k Key, t Target) { desired[k] = t }
	add(tgt(10, "/new", E, 100e6))     // absent: create and own
	add(tgt(11, "/same", E, 200e6))    // owned, equal: kept (adopted)
	add(tgt(12, "/changed", E, 300e6)) // owned, different: changed
	add(tgt(12, "/changed", I, 1e9))   // same group, other direction absent: created in the same op
	add(tgt(13, "/hand", E, 400e6))    // held by a hand-set limit: conflict
	add(tgt(14, "/lost", E, 500e6))    // owned but removed by hand: created again
	actual := []Observed{
		obs(11, "/same", E, 200e6),
		obs(12, "/changed", E, 999e6),
		obs(13, "/hand", E, 1e9),
		obs(20, "/manual", E, 1e9),      // hand-set, not declared: untouched
		obs(21, "/undeclared", I, 1e9),  // owned, no longer declared: removed
		{Key: Key{22, E}, Gone: true},   // owned, group removed: removed
		{Key: Key{23, E}},               // owned, unresolved: kept
		{Key: Key{24, E}, Gone: true},   // not owned, gone: left to hbm prune
		obs(25, "/undeclared2", E, 1e6), // owned, both directions removed in one op
		obs(25, "/undeclared2", I, 1e6),
	}
	owned := map[Key]bool{
		{11, E}: true, {12, E}: true, {14, E}: true, {21, I}: true, {22, E}: true, {23, E}: true,
		{25, E}: true, {25, I}: true,
		{30, E}: true, // owned, no limit (killed between record and apply): forgotten
	}
	p := Reconcile("/mnt", desired, actual, owned)

	type opSum struct {
		rel    string
		dir    string
		dirs   string
		own    int
		disown int
	}
	var got []opSum
	for _, op := range p.Ops {
		var ds []string
		for _, c := range op.Changes {
			s := c.Dir.String()
			if c.Limit == nil {
				s = "-" + s
			} else {
				s += "=" + c.Limit.Rate.String()
			}
			ds = append(ds, s)
		}
		got = append(got, opSum{op.Group.Rel, op.Group.Dir, strings.Join(ds, ","), len(op.Own), len(op.Disown)})
	}
	want := []opSum{
		{"/changed", "/mnt/changed", "egress=300mbit,ingress=1gbit", 1, 0},
		{"/lost", "/mnt/lost", "egress=500mbit", 0, 0},
		{"/new", "/mnt/new", "egress=100mbit", 1, 0},
		{"(removed, id 22)", "", "-egress", 0, 1},
		{"/undeclared", "/mnt/undeclared", "-ingress", 0, 1},
		{"/undeclared2", "/mnt/undeclared2", "-egress,-ingress", 0, 2},
	}
	if !slices.Equal(got, want) {
		t.Errorf("ops:\n got %+v\nwant %+v", got, want)
	}
	if p.Kept != 1 {
		t.Errorf("kept %d, want 1", p.Kept)
	}
	if !slices.Equal(p.Forget, []Key{{30, E}}) {
		t.Errorf("forget %v, want [{30 egress}]", p.Forget)
	}
	if len(p.Conflicts) != 1 || !strings.Contains(p.Conflicts[0], "/hand egress") {
		t.Errorf("conflicts %q, want one for /hand egress", p.Conflicts)
	}
}

// TestReconcileAdopt: after a restart, what is owned and declared is kept as
// it is: no op, so no gap and no fresh burst.
func TestReconcileAdopt(t *testing.T) {
	desired := map[Key]Target{}
	var actual []Observed
	owned := map[Key]bool{}
	for i := uint64(1); i <= 1000; i++ {
		k, tg := tgt(i, "/g", dataplane.Egress, rate.Rate(i*1e6))
		desired[k] = tg
		actual = append(actual, obs(i, "/g", dataplane.Egress, rate.Rate(i*1e6)))
		owned[k] = true
	}
	p := Reconcile("/mnt", desired, actual, owned)
	if len(p.Ops) != 0 || len(p.Forget) != 0 || len(p.Conflicts) != 0 || p.Kept != 1000 {
		t.Errorf("adopt: %d ops, %d forget, %d conflicts, %d kept; want only 1000 kept", len(p.Ops), len(p.Forget), len(p.Conflicts), p.Kept)
	}
	// Nothing declared any more: every owned limit goes, no other.
	p = Reconcile("/mnt", nil, append(actual, obs(5000, "/hand", dataplane.Egress, 1e9)), owned)
	if len(p.Ops) != 1000 {
		t.Errorf("undeclare all: %d ops, want 1000", len(p.Ops))
	}
	for _, op := range p.Ops {
		if op.Group.ID == 5000 {
			t.Errorf("removes the hand-set limit")
		}
	}
}

// TestResolve runs the selectors against a directory tree standing in for
// the cgroup2 mount (resolution only reads directories).
func TestResolve(t *testing.T) {
	mnt := t.TempDir()
	for _, d := range []string{
		"batch", "workloads/a/job-1", "workloads/a/job-2", "workloads/a/other", "workloads/b/job-3",
		"system.slice/nginx.service", "user.slice/user-1000.slice/user@1000.service/app.slice/nginx.service",
		"system.slice/other.service/nginx.service",
	} {
		if err := os.MkdirAll(filepath.Join(mnt, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := Parse("f", []byte(issueExample+`
  - cgroup: /missing/deep
    egress: 1gbit
  - glob: /workloads/a/*
    egress: 1gbit
`))
	if err != nil {
		t.Fatal(err)
	}
	res := Resolve(mnt, cfg)
	var got []string
	for _, tg := range res.Targets {
		s := tg.Group.Rel + " " + tg.Dir.String() + " " + tg.Limit.Rate.String()
		if tg.Unit != "" {
			s += " unit=" + tg.Unit
		}
		got = append(got, s)
		if tg.Group.Dir != filepath.Join(mnt, tg.Group.Rel) || tg.Group.ID == 0 {
			t.Errorf("%s: dir %s id %d", tg.Group.Rel, tg.Group.Dir, tg.Group.ID)
		}
	}
	slices.Sort(got)
	want := []string{
		"/ ingress 9gbit",
		"/batch egress 300mbit",
		"/system.slice/nginx.service egress 2gbit unit=nginx.service",
		"/system.slice/nginx.service ingress 1gbit unit=nginx.service",
		"/workloads/a/job-1 egress 100mbit",
		"/workloads/a/job-2 egress 100mbit",
		"/workloads/a/other egress 1gbit",
		"/workloads/b/job-3 egress 100mbit",
	}
	if !slices.Equal(got, want) {
		t.Errorf("targets:\n got %q\nwant %q", got, want)
	}
	// The first rule wins an overlap, with a warning.
	if len(res.Warnings) != 2 || !strings.Contains(res.Warnings[0], "already declared by line 7") {
		t.Errorf("warnings %q, want two overlaps with line 7", res.Warnings)
	}
	var watch []string
	for _, w := range res.Watch {
		watch = append(watch, strings.TrimPrefix(w, mnt))
	}
	wantWatch := []string{"", "/system.slice", "/user.slice", "/user.slice/user-1000.slice", "/workloads", "/workloads/a", "/workloads/b"}
	if !slices.Equal(watch, wantWatch) {
		t.Errorf("watch %q, want %q", watch, wantWatch)
	}
}
