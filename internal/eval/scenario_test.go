package eval

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

const goodScenario = `
name: two-hosts
description: a test
duration: 4s
warmup: 500ms
ccs: [cubic, bbr-ecn]
limiters: [hbm, none]
hosts: [a, b]
links:
  - name: l
    hosts: [a, b]
cgroups:
  - name: w
    host: a
    egress: 100mbit
    hbm_args: [--no-pace]
flows:
  - kind: rpc
    size: 10KB
    reply: 1KB
    count: 2
    from: w
    to: b
  - {kind: stream, from: w, to: b, cc: reno}
`

func TestParseGood(t *testing.T) {
	s, err := Parse("good.yaml", strings.NewReader(goodScenario))
	if err != nil {
		t.Fatal(err)
	}
	if s.DurationD != 4*time.Second || s.WarmupD != 500*time.Millisecond {
		t.Errorf("durations %v %v", s.DurationD, s.WarmupD)
	}
	if s.Quick.DurationD != 3*time.Second || s.Quick.WarmupD != time.Second {
		t.Errorf("quick defaults %v %v", s.Quick.DurationD, s.Quick.WarmupD)
	}
	if c := s.Cgroup("w"); c == nil || c.EgressBps != 100e6 || c.Host != "a" {
		t.Errorf("cgroup w: %+v", c)
	}
	f := s.Flows[0]
	if f.SizeBytes != 10240 || f.ReplyBytes != 1024 || f.Count != 2 || f.Name != "rpc-10KB" {
		t.Errorf("flow 0: %+v", f)
	}
	if s.Flows[1].Name != "stream" || s.Flows[1].Count != 1 || s.Flows[1].CC != "reno" {
		t.Errorf("flow 1: %+v", s.Flows[1])
	}
	if g := s.ClassGroup(&s.Flows[0]); g != "w" {
		t.Errorf("class group %q, want w", g)
	}
	if f.PerSecond != 0 {
		t.Errorf("flow 0 per_second %v, want 0 (back to back)", f.PerSecond)
	}
	s, err = Parse("good.yaml", strings.NewReader(strings.Replace(goodScenario, "count: 2", "count: 2\n    per_second: 250", 1)))
	if err != nil {
		t.Fatalf("per_second: 250: %v", err)
	}
	if got := s.Flows[0].PerSecond; got != 250 {
		t.Errorf("per_second: 250 parsed as %v", got)
	}
	if s.IPv6 || labConfig(s).IPv6 {
		t.Error("IPv6 without ipv6: true")
	}
	s, err = Parse("good.yaml", strings.NewReader(strings.Replace(goodScenario, "hosts: [a, b]\nlinks", "hosts: [a, b]\nipv6: true\nlinks", 1)))
	if err != nil {
		t.Fatalf("ipv6: true: %v", err)
	}
	if !s.IPv6 || !labConfig(s).IPv6 {
		t.Errorf("ipv6: true parsed as %v, the lab's IPv6 %v", s.IPv6, labConfig(s).IPv6)
	}
}

func TestParseUDPAndCounts(t *testing.T) {
	doc := strings.Replace(goodScenario, "count: 2", "counts: [1, 16, 128]", 1)
	doc = strings.Replace(doc, "{kind: stream, from: w, to: b, cc: reno}", "{kind: udp, rate: 2gbit, count: 4, from: w, to: b}", 1)
	s, err := Parse("u.yaml", strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	u := s.Flows[1]
	if u.Name != "udp" || u.RateBps != 2e9 || u.SizeBytes != 1472 || u.Count != 4 {
		t.Errorf("udp flow %+v", u)
	}
	vs := s.Variants()
	if len(vs) != 3 || vs[0] != (Variant{Label: "rpc-10KB=1", Flow: 0, Count: 1}) || vs[2].Label != "rpc-10KB=128" || vs[2].Count != 128 {
		t.Errorf("variants %+v", vs)
	}
	if s.Flows[0].Count != 1 {
		t.Errorf("count of a counts flow %d, want the first value", s.Flows[0].Count)
	}
	g, err := Parse("good.yaml", strings.NewReader(goodScenario))
	if err != nil {
		t.Fatal(err)
	}
	if vs := g.Variants(); len(vs) != 1 || vs[0].Flow != -1 || vs[0].Label != "" {
		t.Errorf("variants without counts %+v", vs)
	}
}

func TestBuiltins(t *testing.T) {
	bs, err := Builtins()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, b := range bs {
		names = append(names, b.Name)
	}
	want := "egress-200m egress-1g egress-high egress-two-cgroups incast many-flows-200m many-flows-1g udp-flood two-ccs borrow-1g borrow-latency borrow-latency-idle borrow-prio borrow-ten cpu-4g incast-streams incast-streams-prio incast-streams-shared pps-64 rpc-alone-200m rpc-sep-200m rpc-sparse-100m web-keepalive-1g web-keepalive-200m web-new-1g web-new-200m"
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("built-ins %q, want %q", got, want)
	}
	inc := bs[4]
	if len(inc.Bottlenecks) != 1 || inc.Bottlenecks[0].RateBps != 2e9 || inc.Bottlenecks[0].BufferBytes != 128<<10 {
		t.Errorf("incast bottleneck %+v", inc.Bottlenecks)
	}
	if c := inc.Cgroup("server"); c == nil || c.IngressBps != 1.8e9 || !c.MarkOnly {
		t.Errorf("incast server cgroup %+v", c)
	}
	if g := inc.ClassGroup(&inc.Flows[2]); g != "server" || len(inc.Flows[2].From) != 4 || inc.Flows[2].SizeBytes != 8<<20 {
		t.Errorf("incast 8MB flow: group %q %+v", g, inc.Flows[2])
	}
	if c := bs[2].Cgroup("work"); !c.EgressAuto {
		t.Errorf("egress-high not auto: %+v", c)
	}
	two := bs[3]
	if two.Cgroup("small").EgressBps*9 != two.Cgroup("large").EgressBps {
		t.Errorf("two-cgroups not 1:9")
	}
	for i, rate := range map[int]uint64{5: 200e6, 6: 1e9} {
		mf := bs[i]
		var labels []string
		for _, v := range mf.Variants() {
			labels = append(labels, v.Label)
		}
		if got := strings.Join(labels, " "); got != "stream=1 stream=4 stream=16 stream=64 stream=128" || mf.Cgroup("work").EgressBps != rate {
			t.Errorf("%s: variants %q, limit %d", mf.Name, got, mf.Cgroup("work").EgressBps)
		}
		if len(mf.VariantsWith(mf.Quick.Counts, nil)) != 3 || strings.Join(mf.Limiters, ",") != "hbm,htb,none" || len(mf.CCs) != 4 {
			t.Errorf("%s: quick counts %v, limiters %v, ccs %v", mf.Name, mf.Quick.Counts, mf.Limiters, mf.CCs)
		}
	}
	udp := bs[7].Flows[0]
	if udp.Kind != "udp" || udp.RateBps != 10*bs[7].Cgroup("work").EgressBps || udp.SizeBytes != 1472 {
		t.Errorf("udp-flood: %+v", udp)
	}
	// Full-size datagrams over either family: one 1500-byte packet each
	// (1472 over IPv6 would be fragmented in two).
	if v4, v6 := udp.udpSize(false), udp.udpSize(true); v4 != 1472 || v6 != 1452 {
		t.Errorf("udp-flood datagrams %d B over IPv4, %d over IPv6; want 1472 and 1452", v4, v6)
	}
	sized := Flow{Kind: "udp", Size: "1000", SizeBytes: 1000}
	if v4, v6 := sized.udpSize(false), sized.udpSize(true); v4 != 1000 || v6 != 1000 {
		t.Errorf("a 1000-byte datagram: %d over IPv4, %d over IPv6; want its size over both", v4, v6)
	}
	tc := bs[8]
	if tc.Flows[0].CC != "cubic" || tc.Flows[2].CC != "bbr" || tc.Cgroup("gcubic").EgressBps != 500e6 || tc.Cgroup("gbbr").EgressBps != 500e6 {
		t.Errorf("two-ccs: %+v", tc.Flows)
	}
	is := bs[slices.Index(names, "incast-streams")]
	if is.Flows[0].Kind != "stream" || is.Flows[0].Count != 2 || len(is.Flows[0].From) != 4 || is.Flows[1].SizeBytes != 10<<10 ||
		is.Cgroup("server").IngressBps != 1.8e9 || !is.Cgroup("server").MarkOnly {
		t.Errorf("incast-streams: %+v %+v", is.Flows, is.Cgroup("server"))
	}
	// The same with the latency-critical processes above the rest.
	ip := bs[slices.Index(names, "incast-streams-prio")]
	if ip.Cgroup("server").Nice != -20 || ip.Flows[1].Nice != -20 || ip.Flows[0].Nice != 0 || is.Cgroup("server").Nice != 0 || is.Flows[1].Nice != 0 ||
		ip.Cgroup("server").IngressBps != 1.8e9 || !ip.Cgroup("server").MarkOnly || ip.Flows[1].SizeBytes != 10<<10 {
		t.Errorf("incast-streams-prio: %+v %+v", ip.Flows, ip.Cgroup("server"))
	}
	// The incast receivers on a CPU of their own, the rest on another; the
	// shared variants on every CPU.
	split := map[string][]int{"rcv": {1}, "s1": {0}, "s2": {0}, "s3": {0}, "s4": {0}, "fabric": {0}}
	for _, name := range []string{"incast", "incast-streams"} {
		if got := bs[slices.Index(names, name)].CPUs; !reflect.DeepEqual(got, split) {
			t.Errorf("%s: cpus %v, want %v", name, got, split)
		}
	}
	sh := bs[slices.Index(names, "incast-streams-shared")]
	if sh.CPUs != nil || ip.CPUs != nil || !reflect.DeepEqual(sh.Flows, is.Flows) || !reflect.DeepEqual(sh.Cgroups, is.Cgroups) {
		t.Errorf("incast-streams-shared: cpus %v (prio %v), flows %+v, cgroups %+v", sh.CPUs, ip.CPUs, sh.Flows, sh.Cgroups)
	}
}

// TestParseBad: every class of bad file gets its own error, naming the file,
// the line and the field.
func TestParseBad(t *testing.T) {
	edit := func(old, new string) string {
		if !strings.Contains(goodScenario, old) {
			t.Fatalf("test bug: %q not in the good scenario", old)
		}
		return strings.Replace(goodScenario, old, new, 1)
	}
	cases := []struct {
		name, doc, want string
	}{
		{"empty", "", "bad.yaml: empty file"},
		{"not yaml", "name: [unclosed", "bad.yaml:1: "},
		{"unknown key", edit("warmup: 500ms", "warmup: 500ms\nwarmpu: 1s"), `bad.yaml:6: unknown key "warmpu" in scenario`},
		{"unknown nested key", edit("    egress: 100mbit", "    egres: 100mbit"), `bad.yaml:15: unknown key "egres" in cgroup`},
		{"wrong type", edit("count: 2", "count: two"), "bad.yaml:21: cannot unmarshal !!str `two` into int"},
		{"missing name", edit("name: two-hosts", ""), "name: missing"},
		{"bad name", edit("name: two-hosts", "name: Two Hosts"), `bad.yaml:2: name: "Two Hosts"`},
		{"bad duration", edit("duration: 4s", "duration: 4"), `bad.yaml:4: duration: bad duration "4"`},
		{"short duration", edit("duration: 4s", "duration: 1ms"), `bad.yaml:4: duration: 1ms out of range`},
		{"bad cc", edit("ccs: [cubic, bbr-ecn]", "ccs: [cubic, BBR]"), `bad.yaml:6: ccs[1]: bad congestion control "BBR"`},
		{"bad limiter", edit("limiters: [hbm, none]", "limiters: [hbm, cake]"), `bad.yaml:7: limiters[1]: unknown limiter "cake"`},
		{"one host", edit("hosts: [a, b]", "hosts: [a]"), "bad.yaml:8: hosts: at least two hosts needed"},
		{"dup host", edit("hosts: [a, b]", "hosts: [a, a]"), `bad.yaml:8: hosts[1]: host "a" listed twice`},
		{"link unknown host", edit("    hosts: [a, b]", "    hosts: [a, c]"), `bad.yaml:11: links[0].hosts[1]: unknown host "c"`},
		{"cgroup unknown host", edit("    host: a", "    host: z"), `bad.yaml:14: cgroups[0].host: unknown host "z"`},
		{"cgroup name clash", edit("  - name: w", "  - name: a"), `cgroups[0].name: "a" is already a host name`},
		{"bad rate", edit("egress: 100mbit", "egress: 100mb"), `bad.yaml:15: cgroups[0].egress: invalid rate "100mb"`},
		{"rate out of range", edit("egress: 100mbit", "egress: 1kbit"), `cgroups[0].egress: rate "1kbit" out of range`},
		{"cgroup nice", edit("hbm_args: [--no-pace]", "hbm_args: [--no-pace]\n    nice: -21"), `cgroups[0].nice: -21: want -20 (highest priority) to 19`},
		{"flow nice", edit("count: 2", "count: 2\n    nice: 20"), `flows[0].nice: 20: want -20 (highest priority) to 19`},
		{"bad hbm arg", edit("hbm_args: [--no-pace]", "hbm_args: [--egress]"), `cgroups[0].hbm_args[0]`},
		{"bad kind", edit("kind: rpc", "kind: quic"), `bad.yaml:18: flows[0].kind: unknown kind "quic" (rpc, stream, udp or http)`},
		{"rpc without size", edit("    size: 10KB\n", ""), `flows[0].size: an rpc flow needs a request size`},
		{"bad size", edit("size: 10KB", "size: 10QB"), `bad.yaml:19: flows[0].size: bad size "10QB"`},
		{"stream with size", edit("{kind: stream,", "{kind: stream, size: 1MB,"), `flows[1].size: a stream has no size`},
		{"unknown to", edit("    to: b", "    to: nowhere"), `bad.yaml:23: flows[0].to: unknown host or cgroup "nowhere"`},
		{"unknown from", edit("    from: w", "    from: x"), `bad.yaml:22: flows[0].from: unknown cgroup or host "x"`},
		{"same host", edit("    to: b", "    to: a"), `flows[0].from: "w" and "a" are on the same host "a"`},
		{"count", edit("count: 2", "count: 2000"), `bad.yaml:21: flows[0].count: 2000 out of range 1..1024`},
		{"counts and count", edit("count: 2", "count: 2\n    counts: [1, 4]"), `bad.yaml:22: flows[0].counts: count and counts both set`},
		{"counts out of range", edit("count: 2", "counts: [1, 0, 4]"), `bad.yaml:21: flows[0].counts[1]: 0 out of range 1..1024`},
		{"counts twice", edit("count: 2", "counts: [1, 4, 1]"), `bad.yaml:21: flows[0].counts[2]: 1 listed twice`},
		{"counts not ints", edit("count: 2", "counts: [1, many]"), "bad.yaml:21: cannot unmarshal !!str `many` into int"},
		{"two counts", strings.Replace(edit("count: 2", "counts: [1, 2]"), "cc: reno}", "cc: reno, counts: [3]}", 1), `bad.yaml:24: flows[1].counts: flows[0] has counts already`},
		{"rate on tcp", edit("count: 2", "rate: 1gbit"), `bad.yaml:21: flows[0].rate: only a udp flow has a rate`},
		{"per_second on a stream", edit("cc: reno}", "cc: reno, per_second: 10}"), `flows[1].per_second: only an rpc flow has requests per second`},
		{"per_second negative", edit("count: 2", "per_second: -5"), `bad.yaml:21: flows[0].per_second: -5: want 0 (back to back) to 1000000`},
		{"per_second too high", edit("count: 2", "per_second: 2e6"), `flows[0].per_second: 2e+06: want 0`},
		{"udp without rate", edit("{kind: stream,", "{kind: udp,"), `bad.yaml:24: flows[1].rate: a udp flow needs an offered rate`},
		{"udp bad rate", edit("{kind: stream,", "{kind: udp, rate: 2gbps2,"), `bad.yaml:24: flows[1].rate: invalid rate "2gbps2"`},
		{"udp bad size", edit("{kind: stream,", "{kind: udp, rate: 1gbit, size: 8,"), `bad.yaml:24: flows[1].size: bad datagram size "8": 12 to 65507 bytes`},
		{"quick counts without counts", edit("limiters: [hbm, none]", "limiters: [hbm, none]\nquick: {counts: [4]}"), `bad.yaml:8: quick.counts: no flow has counts`},
		{"quick counts range", edit("limiters: [hbm, none]", "limiters: [hbm, none]\nquick:\n  counts: [4, 5000]"), `bad.yaml:9: quick.counts[1]: 5000 out of range`},
		{"udp reply", edit("{kind: stream,", "{kind: udp, rate: 1gbit, reply: 1KB,"), `bad.yaml:24: flows[1].reply: a udp flow has no reply`},
		{"duplicate class", edit("cc: reno}", "cc: reno, name: rpc-10KB}"), `flows[1].name: class "rpc-10KB" of group "w" already defined by flows[0]`},
		{"cpus unknown", edit("hosts: [a, b]\n", "hosts: [a, b]\ncpus: {z: [0]}\n"), `bad.yaml:9: cpus.z: unknown host or link "z"`},
		{"cpus of a pair", edit("hosts: [a, b]\n", "hosts: [a, b]\ncpus: {l: [0]}\n"), `cpus.l: link "l" is a veth pair, not a switch`},
		{"cpus empty", edit("hosts: [a, b]\n", "hosts: [a, b]\ncpus: {a: []}\n"), `cpus.a: no CPUs listed`},
		{"cpus negative", edit("hosts: [a, b]\n", "hosts: [a, b]\ncpus:\n  a: [0, -1]\n"), `bad.yaml:10: cpus.a[1]: CPU -1 out of range 0..1023`},
		{"two documents", goodScenario + "---\nname: x\n", "more than one YAML document"},
	}
	for _, c := range cases {
		_, err := Parse("bad.yaml", strings.NewReader(c.doc))
		if err == nil {
			t.Errorf("%s: parsed", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %q, want it to contain %q", c.name, err, c.want)
		}
	}
}

func TestParseBottleneck(t *testing.T) {
	doc := `
name: bn
hosts: [a, b, c]
links: [{name: sw, hosts: [a, b, c]}]
bottlenecks: [{link: sw, to: d, rate: 1gbit}]
flows: [{kind: stream, from: [a, b], to: c}]
`
	if _, err := Parse("bn.yaml", strings.NewReader(doc)); err == nil || !strings.Contains(err.Error(), `bn.yaml:5: bottlenecks[0].to: host "d" is not on link "sw"`) {
		t.Errorf("error %v", err)
	}
	s, err := Parse("bn.yaml", strings.NewReader(strings.Replace(doc, "to: d", "to: c", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if b := s.Bottlenecks[0]; b.BufferBytes != 1e9/8/100 {
		t.Errorf("default buffer %d", b.BufferBytes)
	}
	if g := s.ClassGroup(&s.Flows[0]); g != "c" {
		t.Errorf("multi-source class group %q, want c", g)
	}
	// A switch (a link of three hosts) and a host pinned to CPUs, passed to
	// the lab as they are.
	pinned := strings.Replace(doc, "to: d", "to: c", 1) + "cpus: {sw: [0], c: [1, 2]}\n"
	if s, err = Parse("bn.yaml", strings.NewReader(pinned)); err != nil {
		t.Fatal(err)
	}
	if cfg := labConfig(s); !reflect.DeepEqual(cfg.CPUs, map[string][]int{"sw": {0}, "c": {1, 2}}) {
		t.Errorf("lab CPUs %v", cfg.CPUs)
	}
	noLink := strings.Replace(doc, "links: [{name: sw, hosts: [a, b, c]}]", "links: [{name: sw, hosts: [a, b]}]", 1)
	noLink = strings.Replace(noLink, "bottlenecks: [{link: sw, to: d, rate: 1gbit}]\n", "", 1)
	if _, err := Parse("bn.yaml", strings.NewReader(noLink)); err == nil || !strings.Contains(err.Error(), `no link joins hosts "a" and "c"`) {
		t.Errorf("error %v", err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "mine.yaml")
	os.WriteFile(p, []byte(goodScenario), 0o644)
	ss, err := Load([]string{"incast", p})
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 2 || ss[0].Name != "incast" || ss[1].Name != "two-hosts" || ss[1].Source != p {
		t.Errorf("loaded %v", ss)
	}
	if _, err := Load([]string{"nosuch"}); err == nil || !strings.Contains(err.Error(), `unknown scenario "nosuch"`) {
		t.Errorf("error %v", err)
	}
	if _, err := Load([]string{"incast", "incast"}); err == nil {
		t.Error("duplicate accepted")
	}
	all, err := Load(nil)
	if err != nil || len(all) != 26 {
		t.Errorf("Load(nil) = %d scenarios, %v", len(all), err)
	}
}

// "cubic+ecn" (the old benchmark scripts' spelling) is an alias of
// "cubic-ecn", in a scenario's lists and its flows.
func TestCCAlias(t *testing.T) {
	src := strings.Replace(strings.Replace(goodScenario, "ccs: [cubic, bbr-ecn]", "ccs: [cubic+ecn, bbr]", 1),
		"cc: reno}", "cc: reno+ecn}", 1)
	s, err := Parse("alias.yaml", strings.NewReader(src))
	if err != nil {
		t.Fatal(err)
	}
	if s.CCs[0] != "cubic-ecn" || s.CCs[1] != "bbr" || s.Flows[1].CC != "reno-ecn" {
		t.Errorf("ccs %v, flow cc %q: want cubic-ecn, bbr and reno-ecn", s.CCs, s.Flows[1].CC)
	}
	if CanonicalCC("dctcp") != "dctcp" || CanonicalCC("cubic-ecn") != "cubic-ecn" {
		t.Error("CanonicalCC changed a canonical name")
	}
}

// A timeline counts either family (analyze.Rates reads IPv4 and IPv6): a
// scenario with one parses over IPv6 and keeps the family.
func TestIPv6Timeline(t *testing.T) {
	const doc = `
name: tl6
ipv6: true
hosts: [a, b]
links: [{name: l, hosts: [a, b]}]
cgroups: [{name: w, host: a, egress: 100mbit}]
flows: [{kind: stream, from: w, to: b}]
timeline: {window: 10ms}
`
	s, err := Parse("tl6.yaml", strings.NewReader(doc))
	if err != nil {
		t.Fatalf("ipv6: true with a timeline: %v", err)
	}
	if !s.IPv6 || s.Timeline == nil || s.Timeline.WindowD != 10*time.Millisecond {
		t.Errorf("parsed: ipv6 %v, timeline %+v; want ipv6 and a 10ms window", s.IPv6, s.Timeline)
	}
}
