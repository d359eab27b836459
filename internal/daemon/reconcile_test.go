package daemon

import (
	"cmp"
	"fmt"
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
	L := LegacyRecord
	owned := map[Key]Record{
		{11, E}: L, {12, E}: L, {14, E}: L, {21, I}: L, {22, E}: L, {23, E}: L,
		{25, E}: L, {25, I}: L,
		{30, E}: L, // owned, no limit (killed between record and apply): forgotten
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
		{"/changed", "/mnt/changed", "egress=300mbit,ingress=1gbit", 2, 0},
		{"/lost", "/mnt/lost", "egress=500mbit", 1, 0},
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
	owned := map[Key]Record{}
	for i := uint64(1); i <= 1000; i++ {
		k, tg := tgt(i, "/g", dataplane.Egress, rate.Rate(i*1e6))
		desired[k] = tg
		actual = append(actual, obs(i, "/g", dataplane.Egress, rate.Rate(i*1e6)))
		owned[k] = RecordOf(nil, tg.Limit)
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

// TestReconcileHandSet: a limit the daemon applied and an operator then
// changed by hand (hbm set) is the operator's: the daemon neither reverts it
// nor removes it when it is no longer declared. A change the daemon recorded
// but was killed before applying is still its own.
func TestReconcileHandSet(t *testing.T) {
	E := dataplane.Egress
	desired := map[Key]Target{}
	k1, t1 := tgt(1, "/declared", E, 100e6)
	desired[k1] = t1
	k3, t3 := tgt(3, "/killed", E, 200e6)
	desired[k3] = t3
	l100 := lim(100e6)
	owned := map[Key]Record{
		k1:     RecordOf(nil, lim(100e6)),   // applied 100M; set by hand to 50M
		{2, E}: RecordOf(nil, lim(100e6)),   // applied 100M, no longer declared; set by hand to 70M
		k3:     RecordOf(&l100, lim(200e6)), // recorded 100M -> 200M, killed before applying
		{4, E}: RecordOf(nil, lim(100e6)),   // applied, as it was, no longer declared: removed
	}
	actual := []Observed{obs(1, "/declared", E, 50e6), obs(2, "/undeclared", E, 70e6), obs(3, "/killed", E, 100e6), obs(4, "/gone", E, 100e6)}
	p := Reconcile("/mnt", desired, actual, owned)
	var ops []string
	for _, op := range p.Ops {
		ops = append(ops, op.Group.Rel)
		if op.Group.Rel == "/killed" && (len(op.Own) != 1 || !op.Own[0].Record.Matches(lim(100e6)) || !op.Own[0].Record.Matches(lim(200e6))) {
			t.Errorf("/killed: records %+v, want one matching 100M and 200M", op.Own)
		}
	}
	if !slices.Equal(ops, []string{"/killed", "/gone"}) {
		t.Errorf("ops on %q, want /killed (changed) and /gone (removed) only", ops)
	}
	if !slices.Equal(p.Forget, []Key{k1, {2, E}}) {
		t.Errorf("forget %v, want the two hand-changed limits", p.Forget)
	}
	if len(p.TakenOver) != 2 || len(p.Conflicts) != 1 || !strings.Contains(p.Conflicts[0], "/declared egress") {
		t.Errorf("taken over %q, conflicts %q", p.TakenOver, p.Conflicts)
	}
	if LegacyRecord.Matches(lim(1e6)) != true || RecordOf(nil, lim(1e6)).Matches(lim(2e6)) {
		t.Errorf("Record.Matches")
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

// TestResolveGlobCap: a glob over a subtree others can write limits at most
// max_groups groups, the oldest (lowest cgroup id) first, and says so.
func TestResolveGlobCap(t *testing.T) {
	mnt := t.TempDir()
	for i := range 8 {
		if err := os.MkdirAll(filepath.Join(mnt, "users", fmt.Sprintf("d%d", 7-i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := Parse("f", []byte("limits:\n  - glob: /users/*\n    egress: 1mbit\n    max_groups: 3\n  - cgroup: /users\n    egress: 5mbit\n"))
	if err != nil {
		t.Fatal(err)
	}
	res := Resolve(mnt, cfg)
	var got []string
	for _, tg := range res.Targets {
		got = append(got, tg.Group.Rel)
	}
	slices.Sort(got)
	// The three lowest ids (on cgroup2 the ones created first).
	type idName struct {
		id   uint64
		name string
	}
	var all []idName
	for i := range 8 {
		g, _ := group(mnt, filepath.Join(mnt, "users", fmt.Sprintf("d%d", i)))
		all = append(all, idName{g.ID, g.Rel})
	}
	slices.SortFunc(all, func(a, b idName) int { return cmp.Compare(a.id, b.id) })
	want := []string{"/users", all[0].name, all[1].name, all[2].name}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("targets %q, want %q", got, want)
	}
	if res.OverCap != 5 || len(res.Capped) != 1 || !strings.Contains(res.Capped[0], "line 2: glob /users/* matches 8 groups, more than its max_groups 3") {
		t.Errorf("capped %q over %d", res.Capped, res.OverCap)
	}
}

// TestReconcileBorrowing: a limit's guarantee, ceiling and priority are part
// of it: a pod's class default or priority annotation that changes only the
// priority (or only the ceiling) changes the limit in place; one that
// matches is kept; a priority changed by hand is the operator's.
func TestReconcileBorrowing(t *testing.T) {
	E := dataplane.Egress
	borrow := func(r, ceil rate.Rate, p dataplane.Priority) dataplane.Limit {
		l := lim(r)
		l.Ceil, l.Priority = ceil, p
		return l
	}
	latency := borrow(100e6, 1e9, dataplane.PriorityLatency)
	desired := map[Key]Target{}
	for i, l := range []dataplane.Limit{
		latency, // 1: was normal: changed
		latency, // 2: as it is: kept
		latency, // 3: was hard-capped at the ceiling (no class yet): changed
		latency, // 4: owned, its priority changed by hand: the operator's
	} {
		k, tg := tgt(uint64(i+1), fmt.Sprintf("/p%d", i+1), E, l.Rate)
		tg.Limit = l
		desired[k] = tg
	}
	normal := borrow(100e6, 1e9, dataplane.PriorityNormal)
	actual := []Observed{
		{Key: Key{1, E}, Rel: "/p1", Limit: normal},
		{Key: Key{2, E}, Rel: "/p2", Limit: latency},
		{Key: Key{3, E}, Rel: "/p3", Limit: lim(1e9)},
		{Key: Key{4, E}, Rel: "/p4", Limit: borrow(100e6, 1e9, dataplane.PriorityBatch)},
	}
	owned := map[Key]Record{{1, E}: RecordOf(nil, normal), {2, E}: RecordOf(nil, latency), {3, E}: RecordOf(nil, lim(1e9)), {4, E}: RecordOf(nil, latency)}
	p := Reconcile("/mnt", desired, actual, owned)
	var ops []string
	for _, op := range p.Ops {
		ops = append(ops, op.Group.Rel)
		if len(op.Changes) != 1 || *op.Changes[0].Limit != latency || len(op.Own) != 1 || !op.Own[0].Record.Matches(latency) {
			t.Errorf("%s: changes %+v, records %+v, want the latency limit", op.Group.Rel, op.Changes, op.Own)
		}
	}
	if !slices.Equal(ops, []string{"/p1", "/p3"}) || p.Kept != 1 || len(p.TakenOver) != 1 || len(p.Conflicts) != 1 ||
		!strings.Contains(p.Conflicts[0], "/p4") {
		t.Errorf("ops on %q, kept %d, taken over %q, conflicts %q; want /p1 and /p3 changed, /p2 kept, /p4 the operator's", ops, p.Kept, p.TakenOver, p.Conflicts)
	}
}
