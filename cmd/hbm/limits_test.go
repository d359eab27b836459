package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/hbm-dev/hbm/internal/dataplane"
	"github.com/hbm-dev/hbm/internal/jsonout"
)

// TestShowJSON: hbm show --json groups a cgroup's two directions in one
// entry, flags removed and unresolved groups, prints [] when nothing is
// limited, and reads back into jsonout's schema unchanged.
func TestShowJSON(t *testing.T) {
	var buf bytes.Buffer
	if err := writeJSON(&buf, groupEntries(nil)); err != nil {
		t.Fatal(err)
	}
	if got := bytes.TrimSpace(buf.Bytes()); string(got) != "[]" {
		t.Errorf("nothing limited: %s, want []", got)
	}

	es := []dataplane.Entry{
		{CgroupID: 7, Cgroup: "/a", Enforced: true, Dir: dataplane.Egress,
			Limit: dataplane.Limit{Rate: 200e6}, Stats: dataplane.Stats{Bytes: 1000, Packets: 2, CWR: 1}},
		{CgroupID: 8, Gone: true, Dir: dataplane.Egress, Limit: dataplane.Limit{Rate: 1e9}},
		{CgroupID: 7, Cgroup: "/a", Enforced: true, Dir: dataplane.Ingress,
			Limit: dataplane.Limit{Rate: 500e6, NoDrop: true}, Stats: dataplane.Stats{Marked: 3, Dropped: 4, DroppedBytes: 6000}},
		{CgroupID: 9, Dir: dataplane.Ingress, Limit: dataplane.Limit{Rate: 1e6}},
	}
	buf.Reset()
	if err := writeJSON(&buf, groupEntries(es)); err != nil {
		t.Fatal(err)
	}
	var got []jsonout.Group
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, buf.Bytes())
	}
	want := []jsonout.Group{
		{Cgroup: "/a", CgroupID: 7,
			Egress:  &jsonout.Direction{RateBps: 200e6, Enforced: true, Bytes: 1000, Packets: 2, CWR: 1},
			Ingress: &jsonout.Direction{RateBps: 500e6, NoDrop: true, Enforced: true, Marked: 3, Dropped: 4, DroppedBytes: 6000}},
		{CgroupID: 8, Removed: true, Egress: &jsonout.Direction{RateBps: 1e9}},
		{CgroupID: 9, Unresolved: true, Ingress: &jsonout.Direction{RateBps: 1e6}},
	}
	if len(got) != len(want) {
		t.Fatalf("%d groups, want %d: %s", len(got), len(want), buf.Bytes())
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Cgroup != w.Cgroup || g.CgroupID != w.CgroupID || g.Removed != w.Removed || g.Unresolved != w.Unresolved ||
			!sameDir(g.Egress, w.Egress) || !sameDir(g.Ingress, w.Ingress) {
			t.Errorf("group %d: %+v (egress %+v ingress %+v), want %+v (egress %+v ingress %+v)",
				i, g, g.Egress, g.Ingress, w, w.Egress, w.Ingress)
		}
	}
}

func sameDir(a, b *jsonout.Direction) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
