package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

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
			Limit: dataplane.Limit{Rate: 200e6, Ceil: 1e9}, Stats: dataplane.Stats{Bytes: 1000, Packets: 2, CWR: 1, InForce: 700e6}},
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
			Egress:  &jsonout.Direction{RateBps: 200e6, CeilBps: 1e9, InForceBps: 700e6, Enforced: true, Bytes: 1000, Packets: 2, CWR: 1},
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

// Hostile cgroup names: the owner of a delegated subtree chooses them.
var hostile = []dataplane.Entry{
	{CgroupID: 1, Cgroup: "/plain/batch", Dir: dataplane.Egress, Enforced: true, Limit: dataplane.Limit{Rate: 1e9}},
	{CgroupID: 2, Cgroup: "/d/\x1b[2J\x1b[Hroot", Dir: dataplane.Egress, Enforced: true, Limit: dataplane.Limit{Rate: 1e9}},
	{CgroupID: 3, Cgroup: "/d/a\rb", Dir: dataplane.Ingress, Enforced: true, Limit: dataplane.Limit{Rate: 1e9}},
	{CgroupID: 4, Cgroup: "/d/\xff\xfe", Dir: dataplane.Egress, Enforced: true, Limit: dataplane.Limit{Rate: 1e9}},
	{CgroupID: 5, Cgroup: "/d/tab\there", Dir: dataplane.Egress, Enforced: true, Limit: dataplane.Limit{Rate: 1e9}},
}

// TestShowTableHostileNames: hbm show's table prints no control byte and no
// invalid UTF-8 a cgroup name carries: such a name is printed Go-quoted
// (strconv.Quote), an ordinary one as it is.
func TestShowTableHostileNames(t *testing.T) {
	var buf bytes.Buffer
	if err := writeTable(&buf, hostile); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !utf8.ValidString(out) {
		t.Errorf("invalid UTF-8 in the table:\n%q", out)
	}
	if i := strings.IndexFunc(out, func(r rune) bool { return r < 0x20 && r != '\n' || r == 0x7f }); i >= 0 {
		t.Errorf("control byte %q in the table:\n%q", out[i], out)
	}
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		names = append(names, strings.Fields(line)[0])
	}
	want := []string{"/plain/batch", `"/d/\x1b[2J\x1b[Hroot"`, `"/d/a\rb"`, `"/d/\xff\xfe"`, `"/d/tab\there"`}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("names %q, want %q:\n%s", names, want, out)
	}
}

// TestShowJSONHostileNames: --json keeps the names exact. JSON escapes
// control characters itself; a name that is not valid UTF-8 cannot be a
// JSON string (encoding/json puts U+FFFD for each bad byte), so its exact
// bytes are also given, base64, in cgroup_bytes.
func TestShowJSONHostileNames(t *testing.T) {
	var buf bytes.Buffer
	if err := writeJSON(&buf, groupEntries(hostile)); err != nil {
		t.Fatal(err)
	}
	if bytes.ContainsAny(buf.Bytes(), "\x1b\r\t") || !utf8.Valid(buf.Bytes()) {
		t.Errorf("raw control bytes or invalid UTF-8 in the JSON: %q", buf.Bytes())
	}
	var got []map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, buf.Bytes())
	}
	if len(got) != len(hostile) {
		t.Fatalf("%d groups, want %d: %s", len(got), len(hostile), buf.Bytes())
	}
	for i, e := range hostile {
		name, _ := got[i]["cgroup"].(string)
		raw, hasRaw := got[i]["cgroup_bytes"]
		if utf8.ValidString(e.Cgroup) {
			if name != e.Cgroup || hasRaw {
				t.Errorf("group %d: cgroup %q, cgroup_bytes %v; want %q and none", e.CgroupID, name, raw, e.Cgroup)
			}
			continue
		}
		b64, _ := raw.(string)
		exact, err := base64.StdEncoding.DecodeString(b64)
		if name != "/d/\uFFFD\uFFFD" || err != nil || string(exact) != e.Cgroup {
			t.Errorf("group %d: cgroup %q, cgroup_bytes %v (%q, %v); want U+FFFD per bad byte and the exact bytes %q",
				e.CgroupID, name, raw, exact, err, e.Cgroup)
		}
	}
}

// TestSetCeilFlags: a ceiling without its direction's rate, or below it, is
// a usage error found before anything is touched (no root needed).
func TestSetCeilFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"/g", "--egress-ceil", "1gbit"}, "--egress-ceil needs --egress"},
		{[]string{"/g", "--egress", "100mbit", "--ingress-ceil", "1gbit"}, "--ingress-ceil needs --ingress"},
		{[]string{"/g", "--egress", "100mbit", "--egress-ceil", "50mbit"}, "below --egress"},
	} {
		cmd := newSetCmd()
		cmd.SetArgs(tc.args)
		cmd.SetOut(new(bytes.Buffer))
		cmd.SetErr(new(bytes.Buffer))
		err := cmd.Execute()
		var ue usageError
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &ue) {
			t.Errorf("hbm set %s: %v, want a usage error saying %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}

// TestShowTableCeil: a group that may borrow shows its ceiling and the rate
// in force; a hard limit shows neither; each its priority, last.
func TestShowTableCeil(t *testing.T) {
	var buf bytes.Buffer
	err := writeTable(&buf, []dataplane.Entry{
		{CgroupID: 1, Cgroup: "/p/a", Dir: dataplane.Egress, Enforced: true,
			Limit: dataplane.Limit{Rate: 120e6, Ceil: 400e6, Priority: dataplane.PriorityLatency}, Stats: dataplane.Stats{InForce: 380e6}},
		{CgroupID: 2, Cgroup: "/q", Dir: dataplane.Egress, Enforced: true,
			Limit: dataplane.Limit{Rate: 1e9}, Stats: dataplane.Stats{InForce: 1e9}},
	})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(buf.String(), "\n")
	if len(lines) < 3 || !strings.Contains(lines[0], "CEIL") || !strings.Contains(lines[0], "NOW") {
		t.Fatalf("table:\n%s", buf.String())
	}
	if f := strings.Fields(lines[1]); len(f) != 14 || f[2] != "120mbit" || f[3] != "400mbit" || f[4] != "380mbit" || f[13] != "latency" {
		t.Errorf("borrowing row %q, want RATE 120mbit CEIL 400mbit NOW 380mbit ... PRIO latency", lines[1])
	}
	if f := strings.Fields(lines[2]); len(f) != 14 || f[3] != "-" || f[4] != "-" || f[13] != "normal" {
		t.Errorf("hard limit row %q, want CEIL and NOW - ... PRIO normal", lines[2])
	}
	if f := strings.Fields(lines[0]); len(f) != 14 || f[13] != "PRIO" {
		t.Errorf("header %q, want PRIO last", lines[0])
	}
}
