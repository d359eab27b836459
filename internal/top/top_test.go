package top

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/hbm-dev/hbm/internal/dataplane"
	"github.com/hbm-dev/hbm/internal/rate"
)

func entry(id uint64, name string, bytes, marked, cwr, dropped uint64) dataplane.Entry {
	return dataplane.Entry{CgroupID: id, Cgroup: name, Dir: dataplane.Egress,
		Stats: dataplane.Stats{Bytes: bytes, Marked: marked, CWR: cwr, Dropped: dropped}}
}

func TestRows(t *testing.T) {
	t0 := time.Unix(1000, 0)
	mk := func(id uint64, name string, limit float64, bytes, marked, cwr, dropped uint64) dataplane.Entry {
		e := entry(id, name, bytes, marked, cwr, dropped)
		e.Limit.Rate = rateOf(limit)
		return e
	}
	prev := Sample{At: t0, Entries: []dataplane.Entry{
		mk(1, "/a", 100e6, 0, 0, 0, 0),
		mk(2, "/b", 1e9, 1000, 0, 0, 0),
		mk(3, "/gone", 1e9, 0, 0, 0, 0),
		mk(5, "/recreated", 1e9, 1e9, 0, 0, 0),
	}}
	cur := Sample{At: t0.Add(2 * time.Second), Entries: []dataplane.Entry{
		mk(1, "/a", 100e6, 25e6, 10, 4, 2), // 100 Mbit/s over 2 s: 100%
		mk(2, "/b", 1e9, 1000+25e6, 0, 0, 0),
		mk(4, "/new", 1e9, 5, 0, 0, 0),
		mk(5, "/recreated", 1e9, 10, 0, 0, 0),
		{CgroupID: 6, Gone: true},
	}}
	rows := Rows(prev, cur)
	var names []string
	for _, r := range rows {
		names = append(names, r.Group)
	}
	if got := strings.Join(names, " "); got != "/a /b /new /recreated" {
		t.Fatalf("order %q, want /a /b /new /recreated (closest to the limit first)", got)
	}
	a := rows[0]
	if a.Bps != 100e6 || a.Use != 1 || a.MarksPS != 7 || a.DropsPS != 1 || a.New {
		t.Errorf("/a: %+v, want 100 Mbit/s, use 1, 7 marks/s, 1 drop/s", a)
	}
	if b := rows[1]; b.Bps != 100e6 || b.Use != 0.1 {
		t.Errorf("/b: %+v, want 100 Mbit/s, use 0.1", b)
	}
	if !rows[2].New || !rows[3].New {
		t.Errorf("new and re-created limits not shown as new: %+v %+v", rows[2], rows[3])
	}
	var buf bytes.Buffer
	Render(&buf, rows, cur.At, time.Second)
	out := buf.String()
	for _, want := range []string{"100.0mbit", "100%", "[####################]", "/new"} {
		if !strings.Contains(out, want) {
			t.Errorf("render lacks %q:\n%s", want, out)
		}
	}
}

func rateOf(f float64) rate.Rate { return rate.Rate(f) }

// TestRenderHostileNames: hbm top prints no control byte and no invalid
// UTF-8 a cgroup name carries (the owner of a delegated subtree chooses
// it); such a name is printed Go-quoted, an ordinary one as it is.
func TestRenderHostileNames(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var prev, cur Sample
	prev.At, cur.At = t0, t0.Add(time.Second)
	names := []string{"/plain", "/d/\x1b[2J\x1b[Hroot", "/d/a\rb", "/d/\xff\xfe"}
	for i, n := range names {
		e := entry(uint64(i+1), n, 0, 0, 0, 0)
		e.Limit.Rate = 1e9
		prev.Entries = append(prev.Entries, e)
		e.Stats.Bytes = uint64(i+1) * 1e6
		cur.Entries = append(cur.Entries, e)
	}
	var buf bytes.Buffer
	if err := Render(&buf, Rows(prev, cur), cur.At, time.Second); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !utf8.ValidString(out) {
		t.Errorf("invalid UTF-8 in the frame:\n%q", out)
	}
	if i := strings.IndexFunc(out, func(r rune) bool { return r < 0x20 && r != '\n' || r == 0x7f }); i >= 0 {
		t.Errorf("control byte %q in the frame:\n%q", out[i], out)
	}
	for _, want := range []string{"/plain", `"/d/\x1b[2J\x1b[Hroot"`, `"/d/a\rb"`, `"/d/\xff\xfe"`} {
		if !strings.Contains(out, want) {
			t.Errorf("frame lacks %s:\n%s", want, out)
		}
	}
}

// TestRowsBorrowing: a group that borrows is measured against its rate in
// force, not its guarantee.
func TestRowsBorrowing(t *testing.T) {
	t0 := time.Unix(1000, 0)
	e0 := entry(1, "/p/a", 0, 0, 0, 0)
	e0.Limit = dataplane.Limit{Rate: 100e6, Ceil: 1e9, Priority: dataplane.PriorityBatch}
	e1 := e0
	e1.Stats.Bytes = 100e6 // 400 Mbit/s over 2 s
	e1.Stats.InForce = 800e6
	h0 := entry(2, "/q", 0, 0, 0, 0)
	h0.Limit.Rate = 1e9
	rows := Rows(Sample{At: t0, Entries: []dataplane.Entry{e0, h0}}, Sample{At: t0.Add(2 * time.Second), Entries: []dataplane.Entry{e1, h0}})
	if len(rows) != 2 || rows[0].Limit != 800e6 || rows[0].Use != 0.5 || rows[0].Guarantee != 100e6 || rows[0].Ceil != 1e9 ||
		rows[0].Priority != dataplane.PriorityBatch {
		t.Fatalf("rows %+v, want limit 800mbit (in force), use 0.5, guarantee 100mbit, ceiling 1gbit, batch", rows)
	}
	// The frame: the first columns as before (hbm top's readers parse
	// them), then GUARANTEE, CEIL and PRIO ("-" for a hard cap).
	var buf bytes.Buffer
	Render(&buf, rows, t0, time.Second)
	var got [][]string
	for _, line := range strings.Split(buf.String(), "\n") {
		if f := strings.Fields(line); len(f) > 0 && (f[0] == "CGROUP" || strings.HasPrefix(f[0], "/")) {
			got = append(got, f)
		}
	}
	if len(got) != 3 || !slices.Equal(got[0][len(got[0])-3:], []string{"GUARANTEE", "CEIL", "PRIO"}) ||
		!slices.Equal(got[1][:5], []string{"/p/a", "egress", "800mbit", "400.0mbit", "50%"}) ||
		!slices.Equal(got[1][len(got[1])-3:], []string{"100mbit", "1gbit", "batch"}) ||
		!slices.Equal(got[2][len(got[2])-3:], []string{"-", "-", "normal"}) {
		t.Errorf("frame:\n%s", buf.String())
	}
}
