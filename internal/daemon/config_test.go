package daemon

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hbm-dev/hbm/internal/dataplane"
	"github.com/hbm-dev/hbm/internal/rate"
)

const issueExample = `limits:
  - cgroup: /batch            # a cgroup path relative to the cgroup2 mount
    egress: 300mbit
  - unit: nginx.service       # a systemd unit, resolved to its cgroup
    egress: 2gbit
    ingress: 1gbit
  - glob: /workloads/*/job-*  # every matching cgroup, as they come and go
    egress: 100mbit
  - cgroup: /
    ingress: 9gbit
    no_drop: true
`

func TestParseIssueExample(t *testing.T) {
	cfg, err := Parse("hbm.yaml", []byte(issueExample))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Rules) != 4 {
		t.Fatalf("%d rules, want 4", len(cfg.Rules))
	}
	want := []struct {
		kind            Kind
		value           string
		line            int
		egress, ingress rate.Rate
	}{
		{KindCgroup, "/batch", 2, 300e6, 0},
		{KindUnit, "nginx.service", 4, 2e9, 1e9},
		{KindGlob, "/workloads/*/job-*", 7, 100e6, 0},
		{KindCgroup, "/", 9, 0, 9e9},
	}
	for i, w := range want {
		r := cfg.Rules[i]
		if r.Kind != w.kind || r.Value != w.value || r.Line != w.line {
			t.Errorf("rule %d: %v %q line %d, want %v %q line %d", i, r.Kind, r.Value, r.Line, w.kind, w.value, w.line)
		}
		for _, d := range []struct {
			l *dataplane.Limit
			r rate.Rate
		}{{r.Egress, w.egress}, {r.Ingress, w.ingress}} {
			switch {
			case d.r == 0 && d.l != nil:
				t.Errorf("rule %d: unexpected limit %+v", i, d.l)
			case d.r != 0 && (d.l == nil || d.l.Rate != d.r):
				t.Errorf("rule %d: limit %+v, want rate %v", i, d.l, d.r)
			}
		}
	}
	if !cfg.Rules[3].Ingress.NoDrop {
		t.Errorf("no_drop not set on the root rule")
	}
	// Defaults are exactly what `hbm set` applies (so an adopted limit
	// compares equal with what it declares).
	l := cfg.Rules[0].Egress
	if l.Thresholds != rate.Default(300e6) || l.MinInflight != dataplane.DefaultMinInflight || l.NoPace || l.Loopback {
		t.Errorf("defaults: %+v, want thresholds %+v", l, rate.Default(300e6))
	}
}

func TestParseOptions(t *testing.T) {
	cfg, err := Parse("f", []byte(`limits:
  - cgroup: /a/b
    egress: 1gbit
    ingress: 500mbit
    loopback: true
    no_pace: true
    no_drop: false
    burst: 200us
    pace: 100us
    mark: 500us
    drop_large: 20ms
    drop_small: 40ms
    min_inflight: 4
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []*dataplane.Limit{cfg.Rules[0].Egress, cfg.Rules[0].Ingress} {
		th := rate.Thresholds{Burst: 200 * time.Microsecond, Pace: 100 * time.Microsecond, Mark: 500 * time.Microsecond,
			DropLarge: 20 * time.Millisecond, DropSmall: 40 * time.Millisecond}.Fit(l.Rate)
		if !l.Loopback || !l.NoPace || l.NoDrop || l.MinInflight != 4 || l.Thresholds != th {
			t.Errorf("%+v, want loopback, no_pace, min_inflight 4, thresholds %+v", l, th)
		}
	}
}

// TestParseCeil: egress_ceil and ingress_ceil reach their directions'
// limits; a ceiling without its rate, or below it, is refused.
func TestParseCeil(t *testing.T) {
	cfg, err := Parse("f", []byte(`limits:
  - cgroup: /tenants/a
    egress: 300mbit
    egress_ceil: 1gbit
    ingress: 500mbit
    priority: latency
`))
	if err != nil {
		t.Fatal(err)
	}
	if e, i := cfg.Rules[0].Egress, cfg.Rules[0].Ingress; e.Ceil != 1e9 || i.Ceil != 0 || e.Priority != dataplane.PriorityLatency {
		t.Errorf("egress ceiling %v priority %v, ingress %v; want 1gbit latency and none", e.Ceil, e.Priority, i.Ceil)
	}
	// A ceiling equal to the rate is a hard cap, declared as the data plane
	// reads it back (no ceiling): the limit compares equal when adopted.
	cfg, err = Parse("f", []byte("limits:\n  - cgroup: /a\n    egress: 1gbit\n    egress_ceil: 1gbit\n"))
	if err != nil || cfg.Rules[0].Egress.Ceil != 0 {
		t.Errorf("egress_ceil equal to egress: %v %+v, want no ceiling", err, cfg)
	}
	for in, want := range map[string]string{
		"limits:\n  - cgroup: /a\n    egress: 1gbit\n    ingress_ceil: 2gbit\n":  "ingress_ceil: give the rate",
		"limits:\n  - cgroup: /a\n    egress: 1gbit\n    egress_ceil: 100mbit\n": "below the rate",
		"limits:\n  - cgroup: /a\n    egress: 1gbit\n    priority: urgent\n":     "want latency, normal or batch",
	} {
		if _, err := Parse("f", []byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error saying %q", in, err, want)
		}
	}
}

func TestParseEmptyLimits(t *testing.T) {
	for _, in := range []string{"limits:\n", "limits: []\n", "# nothing\nlimits: []\n"} {
		cfg, err := Parse("f", []byte(in))
		if err != nil || len(cfg.Rules) != 0 {
			t.Errorf("%q: %v, %v; want no rules", in, cfg, err)
		}
	}
}

// TestParseErrors: every refusal names the file, the line and the reason.
func TestParseErrors(t *testing.T) {
	for _, c := range []struct {
		in   string
		line int
		want string
	}{
		{"", 0, "empty file"},
		{"limits: [\n", 1, ""},
		{"limits:\n  - cgroup: /a\n    egress: 3furlongs\n", 3, "unknown unit"},
		{"limits:\n  - cgroup: /a\n    egress: 1kbit\n", 3, "out of range"},
		{"limits:\n  - cgroup: /a\n", 2, "give a rate"},
		{"limits:\n  - egress: 1gbit\n", 2, "names no groups"},
		{"limits:\n  - cgroup: /a\n    unit: a.service\n    egress: 1gbit\n", 3, "names its groups once"},
		{"limits:\n  - cgroup: a\n    egress: 1gbit\n", 2, "must start with /"},
		{"limits:\n  - cgroup: /a/../b\n    egress: 1gbit\n", 2, "no . or .."},
		{"limits:\n  - cgroup: /a/*\n    egress: 1gbit\n", 2, "use glob:"},
		{"limits:\n  - glob: /a/[\n    egress: 1gbit\n", 2, "bad pattern"},
		{"limits:\n  - glob: /a/**\n    egress: 1gbit\n", 2, "not supported"},
		{"limits:\n  - unit: nginx\n    egress: 1gbit\n", 2, "not a systemd unit"},
		{"limits:\n  - cgroup: /a\n    egress: 1gbit\n    colour: red\n", 4, `unknown field "colour"`},
		{"limits:\n  - cgroup: /a\n    egress: 1gbit\n    no_drop: yes please\n", 4, "true or false"},
		{"limits:\n  - cgroup: /a\n    egress: 1gbit\n    mark: soon\n", 4, "duration"},
		{"limits:\n  - cgroup: /a\n    egress: 1gbit\n    mark: 2h\n", 2, "out of range"},
		{"limits:\n  - cgroup: /a\n    egress: 1gbit\n    min_inflight: -1\n", 4, "whole number"},
		{"limits:\n  - cgroup: /a\n    egress: 1gbit\n    egress: 2gbit\n", 4, "given twice"},
		{"limits:\n  - cgroup: /a\n    egress: 1gbit\n  - cgroup: /a/\n    ingress: 1gbit\n", 4, "already declared at line 2"},
		{"limits:\n  - cgroup: /a\n    egress:\n", 3, "want a value"},
		{"limits: /a\n", 1, "want a list"},
		{"limits:\n  - /a\n", 2, "must be a mapping"},
		{"limit:\n  - cgroup: /a\n", 1, `unknown key "limit"`},
		{"- cgroup: /a\n", 1, "want a mapping"},
		{"limits: []\n---\nlimits: []\n", 3, "second YAML document"},
		{"limits:\n  - cgroup: /" + strings.Repeat("a/", 40) + "b\n    egress: 1gbit\n", 2, "levels deep"},
	} {
		_, err := Parse("hbm.yaml", []byte(c.in))
		var ce *Error
		if !errors.As(err, &ce) {
			t.Errorf("%q: error %v, want a *daemon.Error", c.in, err)
			continue
		}
		if ce.File != "hbm.yaml" || ce.Line != c.line || !strings.Contains(ce.Msg, c.want) {
			t.Errorf("%q: %v; want hbm.yaml:%d: ...%s...", c.in, err, c.line, c.want)
		}
		if c.line > 0 && !strings.HasPrefix(err.Error(), "hbm.yaml:") {
			t.Errorf("%q: %q does not start with file:line", c.in, err)
		}
	}
}

// FuzzParse: the parser never panics, and what it accepts is valid: every
// rule has a selector, a rate, and limits the data plane accepts.
func FuzzParse(f *testing.F) {
	f.Add(issueExample)
	f.Add("limits:\n  - cgroup: /a\n    egress: 1gbit\n    mark: 1ms\n")
	f.Add("limits: [{glob: '/a/*', ingress: 10mbit, no_drop: true}]")
	f.Add("limits:\n  - unit: a.service\n    egress: 8kbit\n    drop_small: 1h\n")
	f.Fuzz(func(t *testing.T, in string) {
		cfg, err := Parse("f", []byte(in))
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v is not a *daemon.Error", err)
			}
			return
		}
		for _, r := range cfg.Rules {
			if r.Value == "" || r.Egress == nil && r.Ingress == nil || r.Line <= 0 {
				t.Fatalf("accepted an invalid rule %+v", r)
			}
			for _, l := range []*dataplane.Limit{r.Egress, r.Ingress} {
				if l != nil {
					if err := l.Validate(); err != nil {
						t.Fatalf("accepted a limit the data plane refuses: %+v: %v", l, err)
					}
				}
			}
		}
	})
}

func TestParsePodPolicy(t *testing.T) {
	cfg, err := Parse("f", []byte(`kubernetes:
  allowed_options: [no-pace, no-drop]
  max_option_duration: 10ms
  invalid: keep
  default_egress: 100mbit
  default_ingress: 1gbit
  follow_edits: false
`))
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Pods
	if !p.Allowed["no-drop"] || !p.Allowed["no-pace"] || p.Allowed["burst"] || p.MaxDuration != 10*time.Millisecond ||
		p.OnInvalid != InvalidKeep || p.DefaultEgress != 100e6 || p.DefaultIngress != 1e9 || p.FollowEdits || len(cfg.Rules) != 0 {
		t.Errorf("policy %+v", p)
	}
	// Absent: the safe defaults (no no-drop), edits followed, never unlimited.
	cfg, err = Parse("f", []byte("limits:\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p := cfg.Pods; p.Allowed["no-drop"] || !p.Allowed["burst"] || !p.FollowEdits || p.OnInvalid != InvalidDefault ||
		p.DefaultLimit(dataplane.Egress).Rate != rate.Min {
		t.Errorf("default policy %+v", p)
	}
	for _, c := range []struct{ body, want string }{
		{"kubernetes:\n  allowed_options: [turbo]\n", "f:2: kubernetes: allowed_options: \"turbo\" is not an option"},
		{"kubernetes:\n  invalid: unlimited\n", "f:2: kubernetes: invalid: want default"},
		{"kubernetes:\n  default_egress: 1k\n", "f:2: kubernetes: default_egress:"},
		{"kubernetes:\n  follow_edits: yes please\n", "f:2: kubernetes: follow_edits:"},
		{"kubernetes:\n  colour: red\n", "f:2: kubernetes: unknown field \"colour\""},
		{"kubernetes:\n  qos_classes: [Burstable]\n", "f:2: kubernetes: qos_classes: want a mapping"},
		{"kubernetes:\n  qos_classes:\n    burstable: {priority: batch}\n", "f:3: kubernetes: qos_classes: \"burstable\" is not a QoS class"},
		{"kubernetes:\n  qos_classes:\n    Burstable: {priority: urgent}\n", "f:3: kubernetes: qos_classes: Burstable: priority \"urgent\": want latency, normal or batch"},
		{"kubernetes:\n  qos_classes:\n    Burstable: {egress_guarantee: 150%}\n", "f:3: kubernetes: qos_classes: Burstable: egress_guarantee: want a share"},
		{"kubernetes:\n  qos_classes:\n    Burstable: {egress_guarantee: 0%}\n", "egress_guarantee: want a share"},
		{"kubernetes:\n  qos_classes:\n    Burstable: {ingress_guarantee: 300M}\n", "ingress_guarantee: want a share"},
		{"kubernetes:\n  qos_classes:\n    Burstable: {ingress_guarantee: NaN%}\n", "ingress_guarantee: want a share"},
		{"kubernetes:\n  qos_classes:\n    Burstable: {ceiling: 1G}\n", "f:3: kubernetes: qos_classes: Burstable: unknown field \"ceiling\""},
		{"kubernetes:\n  qos_classes:\n    Burstable: {}\n", "f:3: kubernetes: qos_classes: Burstable: want a mapping"},
		{"kubernetes:\n  qos_classes:\n    Burstable: {priority: batch}\n    Burstable: {priority: latency}\n", "Burstable given twice"},
		{"kubernetes:\n  qos_classes:\n    Burstable: {priority: batch, priority: latency}\n", "priority given twice"},
		{"limits:\n  - cgroup: /a\n    egress: 1mbit\n    max_groups: 3\n", "max_groups: only for glob:"},
		{"limits:\n  - glob: /a/*\n    egress: 1mbit\n    max_groups: 0\n", "max_groups: want 1 to 65536"},
	} {
		if _, err := Parse("f", []byte(c.body)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.body, err, c.want)
		}
	}
	// Defaults per QoS class.
	cfg, err = Parse("f", []byte(`kubernetes:
  allowed_options: [guarantee, priority]
  qos_classes:
    Guaranteed: {priority: latency}
    Burstable:
      egress_guarantee: 50%
      ingress_guarantee: 12.5%
    BestEffort: {priority: batch, egress_guarantee: 10%}
`))
	if err != nil {
		t.Fatal(err)
	}
	cl := cfg.Pods.Classes
	if len(cl) != 3 || cl["Guaranteed"] != (ClassDefault{Priority: dataplane.PriorityLatency, HasPriority: true}) ||
		cl["Burstable"] != (ClassDefault{EgressGuarantee: 50, IngressGuarantee: 12.5}) ||
		cl["BestEffort"] != (ClassDefault{Priority: dataplane.PriorityBatch, HasPriority: true, EgressGuarantee: 10}) ||
		!cfg.Pods.Allowed["priority"] || cfg.Pods.Allowed["burst"] {
		t.Errorf("qos_classes: %+v", cfg.Pods)
	}
	if g := cl["Burstable"].Guarantee(dataplane.Ingress, 1e9); g != 125e6 {
		t.Errorf("12.5%% of 1gbit: %v", g)
	}
	if g := cl["Burstable"].Guarantee(dataplane.Egress, rate.Min); g != rate.Min {
		t.Errorf("50%% of the minimum rate: %v, want the minimum", g)
	}
	if g := cl["Guaranteed"].Guarantee(dataplane.Egress, 1e9); g != 0 {
		t.Errorf("no class guarantee: %v", g)
	}
	if DefaultPodPolicy().Classes != nil || DefaultPodPolicy().Allowed["priority"] {
		t.Errorf("default policy: class defaults or priority allowed")
	}
	cfg, err = Parse("f", []byte("limits:\n  - glob: /a/*\n    egress: 1mbit\n  - glob: /b/*\n    egress: 1mbit\n    max_groups: 5\n"))
	if err != nil || cfg.Rules[0].MaxGroups != DefaultMaxGroups || cfg.Rules[1].MaxGroups != 5 {
		t.Errorf("max_groups: %v %+v", err, cfg)
	}
}
