// Package eval is `hbm eval`: it reruns the seed evaluations (back-to-back
// RPCs and streams under a limit, two groups in a ratio, incast through a
// shallow buffer) on one machine, every host a network namespace, for every
// congestion control and limiter a scenario names, and collects the figures
// into a result.Results.
//
// A scenario is a YAML file (see docs/eval.md): hosts, links and
// bottlenecks, cgroups and their limits, flows, duration, congestion
// controls and limiters. The built-in ones are embedded from scenarios/.
package eval

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/hbm-dev/hbm/internal/netlab"
	"github.com/hbm-dev/hbm/internal/rate"
	"github.com/hbm-dev/hbm/internal/workload"
)

//go:embed scenarios/*.yaml
var builtinFS embed.FS

// DefaultCCs are the congestion controls a scenario runs when it names none.
var DefaultCCs = []string{"cubic", "cubic-ecn", "dctcp", "bbr"}

// Scenario is one scenario file, as written (the yaml fields) and resolved
// (the parsed fields, filled by Validate).
type Scenario struct {
	Name        string       `yaml:"name"`
	Description string       `yaml:"description"`
	Duration    string       `yaml:"duration"` // measurement window per run
	Warmup      string       `yaml:"warmup"`   // traffic before the window
	CCs         []string     `yaml:"ccs"`
	Limiters    []string     `yaml:"limiters"`
	Quick       *Quick       `yaml:"quick"`
	Hosts       []string     `yaml:"hosts"`
	Links       []Link       `yaml:"links"`
	Bottlenecks []Bottleneck `yaml:"bottlenecks"`
	// CPUs pins hosts and switches (by link name) to CPUs, so that one
	// machine models several: a host's processes run on its CPUs and the
	// packets it receives are processed there; a switch forwards on its
	// link's. What is not listed runs on any CPU (netlab.Config.CPUs).
	CPUs    map[string][]int `yaml:"cpus"`
	Cgroups []Cgroup         `yaml:"cgroups"`
	Flows   []Flow           `yaml:"flows"`
	// Timeline records each source group's rate over the run in short
	// windows, from a capture on the receivers, and figures of the phases
	// that flows' active intervals make (borrowing: who gets what when a
	// group starts or stops).
	Timeline *Timeline `yaml:"timeline"`
	// IPv6 runs every flow over IPv6 (the hosts' fd00::/8 addresses)
	// instead of IPv4; hbm eval --ipv6 sets it for every scenario.
	IPv6 bool `yaml:"ipv6"`

	// Source is the file the scenario came from ("builtin:NAME" for the
	// embedded ones).
	Source string `yaml:"-"`

	DurationD, WarmupD time.Duration `yaml:"-"`
}

// Quick is what --quick runs instead of the full matrix.
type Quick struct {
	Duration string   `yaml:"duration"`
	Warmup   string   `yaml:"warmup"`
	CCs      []string `yaml:"ccs"`
	Limiters []string `yaml:"limiters"`
	Counts   []int    `yaml:"counts"` // replaces the counts flow's list
	Sizes    []string `yaml:"sizes"`  // replaces the sizes flow's list (http)

	SizesBytes []int `yaml:"-"`

	DurationD, WarmupD time.Duration `yaml:"-"`
}

// Link is an L2 segment joining hosts: a veth pair for two hosts, a bridge in
// a switch namespace for more (or when a bottleneck sits on it).
type Link struct {
	Name  string   `yaml:"name"`
	Hosts []string `yaml:"hosts"`
}

// Bottleneck is a tbf on the link's port toward one host: rate and buffer
// (the switch's queue).
type Bottleneck struct {
	Link   string `yaml:"link"`
	To     string `yaml:"to"`
	Rate   string `yaml:"rate"`
	Buffer string `yaml:"buffer"`

	RateBps     uint64 `yaml:"-"`
	BufferBytes int    `yaml:"-"`
}

// Cgroup is a group of processes on one host and its limits.
type Cgroup struct {
	Name    string `yaml:"name"`
	Host    string `yaml:"host"`
	Egress  string `yaml:"egress"`  // rate, or "auto": the highest this machine sustains
	Ingress string `yaml:"ingress"` // rate
	// MarkOnly makes the hbm limit mark and never drop (hbm set --no-drop).
	MarkOnly bool `yaml:"mark_only"`
	// HBMArgs are extra `hbm set` options (e.g. ["--no-pace"]).
	HBMArgs []string `yaml:"hbm_args"`
	// Nice is the CPU priority (nice(1), -20 to 19) of the workload servers
	// in this group: a latency-critical service an operator runs above
	// its host's batch work.
	Nice int `yaml:"nice"`

	// Parent nests the group in another group of the scenario (on the
	// same host, listed before it): hbm's limits nest, htb's classes too.
	Parent string `yaml:"parent"`
	// EgressCeil makes Egress a guarantee: the group borrows what its
	// siblings leave of its parent's egress limit (its lender) up to this
	// rate (hbm set --egress-ceil; htb's class ceil).
	EgressCeil string `yaml:"egress_ceil"`
	// Priority orders borrowing (hbm set --priority latency|normal|batch;
	// htb's class prio 0, 3, 7); only with egress_ceil.
	Priority string `yaml:"priority"`

	EgressBps, IngressBps uint64 `yaml:"-"`
	EgressCeilBps         uint64 `yaml:"-"`
	EgressAuto            bool   `yaml:"-"`
}

// Timeline is a scenario's per-group rate over time (see Scenario.Timeline).
type Timeline struct {
	// Window is the width of the rate windows (default 10ms).
	Window string `yaml:"window"`
	// Settle is how long after a phase starts its figures begin (default
	// 1s): the phase's rates are measured from then to 200 ms before it
	// ends.
	Settle string `yaml:"settle"`
	// FairWindow, when set (a multiple of window), compares each active
	// group's rate in windows this long with its weighted max-min share
	// (from settle after each phase's start to its end) and measures the
	// lenders' use while their borrowers' demand exceeds them.
	FairWindow string `yaml:"fair_window"`

	WindowD, SettleD, FairWindowD time.Duration `yaml:"-"`
}

// Interval is a span of the measurement window, from its start.
type Interval struct{ Start, End time.Duration }

// Priorities are the borrowing classes (hbm set --priority), highest first.
var Priorities = []string{"latency", "normal", "batch"}

// Flow is a class of traffic: count connections of one kind and size from a
// cgroup (or a host) to a host (or a cgroup).
//
// An http flow turns the roles around: From is the one group whose web
// server (nginx) answers, To the host (or cgroup) whose load generator (wrk
// or ab) asks with Count concurrent clients; the data, the responses, flow
// from From to To as in the other kinds.
type Flow struct {
	Name  string `yaml:"name"`
	Kind  string `yaml:"kind"`  // rpc, stream, udp or http
	Size  string `yaml:"size"`  // rpc request size; udp datagram payload (default 1472, over IPv6 1452); http response body
	Reply string `yaml:"reply"` // rpc reply size (default 64)
	Rate  string `yaml:"rate"`  // udp: offered payload rate per source, all its sockets
	// PerSecond is an rpc flow's requests per second per connection, on
	// schedule (0: back to back; workload.Config.RPCRate).
	PerSecond float64 `yaml:"per_second"`
	Count     int     `yaml:"count"` // connections (udp: sockets) per source (default 1)
	// Counts makes the flow's count a dimension of the run matrix: the
	// scenario runs once per value (at most one flow has counts).
	Counts []int `yaml:"counts"`
	// Sizes makes an http flow's response size a dimension of the run
	// matrix, outside its counts: one run per size (and count).
	Sizes []string `yaml:"sizes"`
	// Keepalive: an http flow's clients keep their connections; false, a
	// new connection per request.
	Keepalive bool `yaml:"keepalive"`
	// Client is an http flow's load generator: wrk (default) or ab (a new
	// connection per request only; its latency includes the connect).
	Client string    `yaml:"client"`
	CC     string    `yaml:"cc"`   // overrides the run's congestion control
	Nice   int       `yaml:"nice"` // the client processes' CPU priority (nice(1), -20 to 19)
	From   StringSet `yaml:"from"` // cgroup or host names
	To     string    `yaml:"to"`   // host or cgroup name
	// Active limits a stream flow to intervals of the measurement window
	// ("START-END" from the window's start, e.g. "3s-6s"): its clients
	// start at each interval's start and stop at its end (default: the
	// whole run, warm-up included).
	Active []string `yaml:"active"`

	SizeBytes, ReplyBytes int        `yaml:"-"`
	RateBps               uint64     `yaml:"-"`
	SizesBytes            []int      `yaml:"-"`
	ActiveD               []Interval `yaml:"-"`
}

// MaxCount bounds a flow's connections per source (one client process holds
// them all).
const MaxCount = 1024

// MaxHTTPSize bounds an http flow's response size (the file nginx serves is
// written to a temporary directory).
const MaxHTTPSize = 64 << 20

// Variant is one value of a scenario's counts (and, for an http flow,
// sizes) dimension: flow Flow runs Count connections per source, and Size
// bytes per response if Size > 0. A scenario without either has one
// variant, Flow -1 and an empty label.
type Variant struct {
	Label string // "NAME=COUNT", e.g. "stream=16"; with sizes "NAME-SIZE=COUNT", e.g. "http-100KB=32"
	Flow  int
	Count int
	Size  int // 0: the flow's own
}

// Variants lists the scenario's variants: its sizes (outermost), then its
// counts, in their order.
func (s *Scenario) Variants() []Variant { return s.VariantsWith(nil, nil) }

// VariantsWith lists the variants with counts and sizes (bytes) instead of
// the scenario's lists (nil: the scenario's). counts replaces the list of
// the flow with counts or sizes (its count alone when it has only sizes);
// sizes that of the flow with sizes. A scenario without such a flow has
// its one variant whatever they say.
func (s *Scenario) VariantsWith(counts, sizes []int) []Variant {
	for i, fl := range s.Flows {
		if len(fl.Counts) == 0 && len(fl.SizesBytes) == 0 {
			continue
		}
		if counts == nil {
			counts = fl.Counts
			if len(counts) == 0 {
				counts = []int{fl.Count}
			}
		}
		if len(fl.SizesBytes) == 0 {
			var out []Variant
			for _, n := range counts {
				out = append(out, Variant{Label: fmt.Sprintf("%s=%d", fl.Name, n), Flow: i, Count: n})
			}
			return out
		}
		if sizes == nil {
			sizes = fl.SizesBytes
		}
		var out []Variant
		for _, sz := range sizes {
			for _, n := range counts {
				out = append(out, Variant{Label: fmt.Sprintf("%s-%s=%d", fl.Name, sizeName(sz), n), Flow: i, Count: n, Size: sz})
			}
		}
		return out
	}
	return []Variant{{Flow: -1}}
}

// StringSet is a YAML scalar or a sequence of scalars.
type StringSet []string

// UnmarshalYAML accepts "a" and ["a", "b"].
func (s *StringSet) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*s = []string{n.Value}
		return nil
	case yaml.SequenceNode:
		out := make([]string, 0, len(n.Content))
		for _, c := range n.Content {
			if c.Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: want a name", c.Line)
			}
			out = append(out, c.Value)
		}
		*s = out
		return nil
	}
	return fmt.Errorf("line %d: want a name or a list of names", n.Line)
}

// Error is a scenario error: the file, the line (0 if unknown), the field
// path and what is wrong.
type Error struct {
	File  string
	Line  int
	Field string
	Msg   string
}

func (e *Error) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc += ":" + strconv.Itoa(e.Line)
	}
	if e.Field != "" {
		return fmt.Sprintf("%s: %s: %s", loc, e.Field, e.Msg)
	}
	return fmt.Sprintf("%s: %s", loc, e.Msg)
}

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,11}$`)
var ccRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,14}$`)

// Parse reads a scenario from r (file names it in errors) and validates it.
// Unknown keys are errors.
func Parse(file string, r io.Reader) (*Scenario, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, &Error{File: file, Msg: err.Error()}
	}
	var s Scenario
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: file, Msg: "empty file"}
		}
		return nil, yamlError(file, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &Error{File: file, Line: extra.Line, Msg: "more than one YAML document"}
	}
	var root yaml.Node
	yaml.Unmarshal(data, &root)
	s.Source = file
	if err := s.validate(); err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.File = file
			if e.Line == 0 {
				e.Line = lineOf(&root, e.Field)
			}
		}
		return nil, err
	}
	return &s, nil
}

// yamlError turns yaml.v3's messages ("yaml: unmarshal errors:\n  line 3:
// field foo not found in type eval.Scenario") into ours.
func yamlError(file string, err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg := te.Errors[0]
		line := 0
		if m := regexp.MustCompile(`^line (\d+): (.*)$`).FindStringSubmatch(msg); m != nil {
			line, _ = strconv.Atoi(m[1])
			msg = m[2]
		}
		if m := regexp.MustCompile(`^field (\S+) not found in type eval\.(\w+)$`).FindStringSubmatch(msg); m != nil {
			msg = fmt.Sprintf("unknown key %q in %s", m[1], strings.ToLower(m[2]))
		}
		msg = strings.ReplaceAll(msg, "eval.StringSet", "name list")
		if len(te.Errors) > 1 {
			msg += fmt.Sprintf(" (and %d more errors)", len(te.Errors)-1)
		}
		return &Error{File: file, Line: line, Msg: msg}
	}
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := regexp.MustCompile(`^line (\d+): (.*)$`).FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	return &Error{File: file, Line: line, Msg: msg}
}

// lineOf finds the line of a field path such as "flows[2].size" in the
// document (0 when it is not there).
func lineOf(root *yaml.Node, path string) int {
	if root == nil || path == "" {
		return 0
	}
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := n.Line
	for _, part := range strings.Split(path, ".") {
		key, idx := part, -1
		if i := strings.IndexByte(part, '['); i >= 0 && strings.HasSuffix(part, "]") {
			key = part[:i]
			idx, _ = strconv.Atoi(part[i+1 : len(part)-1])
		}
		if n.Kind != yaml.MappingNode {
			return line
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				line = n.Content[i].Line
				next = n.Content[i+1]
			}
		}
		if next == nil {
			return line
		}
		n = next
		if idx >= 0 {
			if n.Kind != yaml.SequenceNode || idx >= len(n.Content) {
				return line
			}
			n = n.Content[idx]
			line = n.Line
		}
	}
	return line
}

func ferr(field, format string, args ...any) error {
	return &Error{Field: field, Msg: fmt.Sprintf(format, args...)}
}

func parseDuration(field, s string, def time.Duration) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, ferr(field, "bad duration %q (e.g. 10s, 500ms)", s)
	}
	return d, nil
}

// ValidCC reports whether name is a congestion control an eval can ask for:
// a kernel name, optionally with "-ecn" (ECN on in every host).
func ValidCC(name string) bool { return validCC(name) }

// CanonicalCC returns a congestion control's eval spelling: "cubic+ecn"
// (the old benchmark scripts' spelling) is accepted as an alias of
// "cubic-ecn"; every other name is returned as it is.
func CanonicalCC(name string) string {
	if base, ok := strings.CutSuffix(name, "+ecn"); ok {
		return base + "-ecn"
	}
	return name
}

func canonicalCCs(ccs []string) {
	for i := range ccs {
		ccs[i] = CanonicalCC(ccs[i])
	}
}

func validCC(name string) bool {
	base, _ := strings.CutSuffix(name, "-ecn")
	return ccRE.MatchString(base)
}

// udpSize is a udp flow's datagram payload over IPv6 (ipv6) or IPv4: its
// size, or by default one full 1500-byte packet's (1452 or 1472 bytes).
func (fl *Flow) udpSize(ipv6 bool) int {
	if ipv6 && fl.Size == "" {
		return workload.DefaultUDPSize6
	}
	return fl.SizeBytes
}

func (s *Scenario) validate() error {
	if s.Name == "" {
		return ferr("name", "missing")
	}
	if !regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,39}$`).MatchString(s.Name) {
		return ferr("name", "%q: use lower-case letters, digits and '-' (at most 40)", s.Name)
	}
	var err error
	if s.DurationD, err = parseDuration("duration", s.Duration, 10*time.Second); err != nil {
		return err
	}
	if s.WarmupD, err = parseDuration("warmup", s.Warmup, 2*time.Second); err != nil {
		return err
	}
	if s.DurationD < 500*time.Millisecond || s.DurationD > time.Hour {
		return ferr("duration", "%v out of range 500ms..1h", s.DurationD)
	}
	if s.WarmupD < 0 || s.WarmupD > 10*time.Minute {
		return ferr("warmup", "%v out of range 0..10m", s.WarmupD)
	}
	if len(s.CCs) == 0 {
		s.CCs = slices.Clone(DefaultCCs)
	}
	if len(s.Limiters) == 0 {
		s.Limiters = slices.Clone(Limiters)
	}
	canonicalCCs(s.CCs)
	if err := checkLists("", s.CCs, s.Limiters); err != nil {
		return err
	}
	if s.Quick == nil {
		s.Quick = &Quick{}
	}
	q := s.Quick
	if q.DurationD, err = parseDuration("quick.duration", q.Duration, 3*time.Second); err != nil {
		return err
	}
	if q.WarmupD, err = parseDuration("quick.warmup", q.Warmup, time.Second); err != nil {
		return err
	}
	if q.DurationD < 500*time.Millisecond || q.WarmupD < 0 {
		return ferr("quick.duration", "too short (at least 500ms)")
	}
	canonicalCCs(q.CCs)
	if err := checkLists("quick.", q.CCs, q.Limiters); err != nil {
		return err
	}
	for j, n := range q.Counts {
		if n < 1 || n > MaxCount {
			return ferr(fmt.Sprintf("quick.counts[%d]", j), "%d out of range 1..%d", n, MaxCount)
		}
	}
	if q.SizesBytes, err = parseHTTPSizes("quick.sizes", q.Sizes); err != nil {
		return err
	}

	// Hosts, cgroups: one namespace of names.
	if len(s.Hosts) == 0 {
		return ferr("hosts", "at least two hosts needed")
	}
	names := map[string]string{} // name -> "host" or "cgroup"
	for i, h := range s.Hosts {
		f := fmt.Sprintf("hosts[%d]", i)
		if !nameRE.MatchString(h) {
			return ferr(f, "bad host name %q: a lower-case letter, then letters or digits, at most 12", h)
		}
		if names[h] != "" {
			return ferr(f, "host %q listed twice", h)
		}
		names[h] = "host"
	}
	if len(s.Hosts) < 2 {
		return ferr("hosts", "at least two hosts needed")
	}
	if len(s.Links) == 0 {
		return ferr("links", "at least one link needed")
	}
	if len(s.Links) > 250 {
		return ferr("links", "at most 250 links")
	}
	linkNames := map[string]*Link{}
	for i := range s.Links {
		l := &s.Links[i]
		f := fmt.Sprintf("links[%d]", i)
		if !nameRE.MatchString(l.Name) {
			return ferr(f+".name", "bad link name %q", l.Name)
		}
		if linkNames[l.Name] != nil {
			return ferr(f+".name", "link %q defined twice", l.Name)
		}
		linkNames[l.Name] = l
		if len(l.Hosts) < 2 || len(l.Hosts) > 200 {
			return ferr(f+".hosts", "a link joins 2 to 200 hosts")
		}
		seen := map[string]bool{}
		for j, h := range l.Hosts {
			if names[h] != "host" {
				return ferr(fmt.Sprintf("%s.hosts[%d]", f, j), "unknown host %q (hosts: %s)", h, strings.Join(s.Hosts, ", "))
			}
			if seen[h] {
				return ferr(fmt.Sprintf("%s.hosts[%d]", f, j), "host %q twice on one link", h)
			}
			seen[h] = true
		}
	}
	for i := range s.Bottlenecks {
		b := &s.Bottlenecks[i]
		f := fmt.Sprintf("bottlenecks[%d]", i)
		l := linkNames[b.Link]
		if l == nil {
			return ferr(f+".link", "unknown link %q", b.Link)
		}
		if !slices.Contains(l.Hosts, b.To) {
			return ferr(f+".to", "host %q is not on link %q", b.To, b.Link)
		}
		for _, o := range s.Bottlenecks[:i] {
			if o.Link == b.Link && o.To == b.To {
				return ferr(f, "two bottlenecks on link %q toward %q", b.Link, b.To)
			}
		}
		r, err := parseRate(b.Rate)
		if err != nil {
			return ferr(f+".rate", "%v", err)
		}
		b.RateBps = r
		if b.Buffer == "" {
			b.BufferBytes = max(int(r/8/100), 64<<10) // 10 ms
		} else if b.BufferBytes, err = workload.ParseSize(b.Buffer); err != nil || b.BufferBytes < 1500 {
			return ferr(f+".buffer", "bad buffer %q: a size of at least 1500 bytes, e.g. 128KB", b.Buffer)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(s.CPUs)) {
		f := "cpus." + name
		l := linkNames[name]
		switch {
		case names[name] == "host" && l != nil:
			return ferr(f, "%q is both a host and a link", name)
		case l != nil && !netlab.Switched(len(l.Hosts), slices.ContainsFunc(s.Bottlenecks, func(b Bottleneck) bool { return b.Link == name })):
			return ferr(f, "link %q is a veth pair, not a switch: pin its hosts instead", name)
		case l == nil && names[name] != "host":
			return ferr(f, "unknown host or link %q", name)
		}
		if len(s.CPUs[name]) == 0 {
			return ferr(f, "no CPUs listed")
		}
		for j, cpu := range s.CPUs[name] {
			if cpu < 0 || cpu > 1023 {
				return ferr(fmt.Sprintf("%s[%d]", f, j), "CPU %d out of range 0..1023", cpu)
			}
		}
	}
	hostOf := map[string]string{}
	cgByName := map[string]*Cgroup{}
	for i := range s.Cgroups {
		c := &s.Cgroups[i]
		f := fmt.Sprintf("cgroups[%d]", i)
		if !nameRE.MatchString(c.Name) {
			return ferr(f+".name", "bad cgroup name %q: a lower-case letter, then letters or digits, at most 12", c.Name)
		}
		if k := names[c.Name]; k != "" {
			return ferr(f+".name", "%q is already a %s name (hosts and cgroups share one set of names)", c.Name, k)
		}
		names[c.Name] = "cgroup"
		cgByName[c.Name] = c
		if names[c.Host] != "host" {
			return ferr(f+".host", "unknown host %q (hosts: %s)", c.Host, strings.Join(s.Hosts, ", "))
		}
		hostOf[c.Name] = c.Host
		if c.Egress == "auto" {
			c.EgressAuto = true
		} else if c.Egress != "" {
			r, err := parseRate(c.Egress)
			if err != nil {
				return ferr(f+".egress", "%v", err)
			}
			c.EgressBps = r
		}
		if c.Ingress != "" {
			r, err := parseRate(c.Ingress)
			if err != nil {
				return ferr(f+".ingress", "%v", err)
			}
			c.IngressBps = r
		}
		if c.MarkOnly && c.Egress == "" && c.Ingress == "" {
			return ferr(f+".mark_only", "set without a limit")
		}
		if c.Nice < -20 || c.Nice > 19 {
			return ferr(f+".nice", "%d: want -20 (highest priority) to 19", c.Nice)
		}
		if err := s.validateNesting(i, cgByName); err != nil {
			return err
		}
		for j, a := range c.HBMArgs {
			if !strings.HasPrefix(a, "--") || a == "--egress" || a == "--ingress" || strings.HasPrefix(a, "--egress-ceil") || strings.HasPrefix(a, "--priority") {
				return ferr(fmt.Sprintf("%s.hbm_args[%d]", f, j), "%q: want hbm set options such as --no-pace or --mark=200us (the rate comes from egress/ingress)", a)
			}
		}
	}
	for _, h := range s.Hosts {
		hostOf[h] = h
	}
	if err := s.validateTimeline(); err != nil {
		return err
	}
	if len(s.Flows) == 0 {
		return ferr("flows", "at least one flow needed")
	}
	for i := range s.Flows {
		fl := &s.Flows[i]
		f := fmt.Sprintf("flows[%d]", i)
		if fl.Nice < -20 || fl.Nice > 19 {
			return ferr(f+".nice", "%d: want -20 (highest priority) to 19", fl.Nice)
		}
		if fl.Rate != "" && fl.Kind != "udp" {
			return ferr(f+".rate", "only a udp flow has a rate (a TCP flow's rate is its congestion control's)")
		}
		if fl.PerSecond != 0 && fl.Kind != "rpc" {
			return ferr(f+".per_second", "only an rpc flow has requests per second")
		}
		if !(fl.PerSecond >= 0 && fl.PerSecond <= workload.MaxRPCRate) {
			return ferr(f+".per_second", "%v: want 0 (back to back) to %d requests a second per connection", fl.PerSecond, workload.MaxRPCRate)
		}
		if fl.Kind != "http" {
			if fl.Keepalive {
				return ferr(f+".keepalive", "only an http flow has keepalive")
			}
			if len(fl.Sizes) > 0 {
				return ferr(f+".sizes", "only an http flow has sizes (one run per response size)")
			}
			if fl.Client != "" {
				return ferr(f+".client", "only an http flow has a client (wrk or ab)")
			}
		}
		switch fl.Kind {
		case "udp":
			if fl.Reply != "" {
				return ferr(f+".reply", "a udp flow has no reply")
			}
			if fl.Rate == "" {
				return ferr(f+".rate", "a udp flow needs an offered rate (e.g. 2gbit)")
			}
			r, err := parseRate(fl.Rate)
			if err != nil {
				return ferr(f+".rate", "%v", err)
			}
			fl.RateBps = r
			fl.SizeBytes = workload.DefaultUDPSize
			if fl.Size != "" {
				n, err := workload.ParseSize(fl.Size)
				if err != nil || n < workload.MinUDPSize || n > workload.MaxUDPSize {
					return ferr(f+".size", "bad datagram size %q: %d to %d bytes (1472 fills a 1500-byte packet)", fl.Size, workload.MinUDPSize, workload.MaxUDPSize)
				}
				fl.SizeBytes = n
			}
		case "rpc":
			if fl.Size == "" {
				return ferr(f+".size", "an rpc flow needs a request size (e.g. 10KB)")
			}
			n, err := workload.ParseSize(fl.Size)
			if err != nil || n < 8 || n > workload.MaxRPCSize {
				return ferr(f+".size", "bad size %q: 8 bytes to 64MB, e.g. 10KB or 1MB", fl.Size)
			}
			fl.SizeBytes = n
			fl.ReplyBytes = 64
			if fl.Reply != "" {
				n, err := workload.ParseSize(fl.Reply)
				if err != nil || n < 1 || n > workload.MaxRPCSize {
					return ferr(f+".reply", "bad size %q: 1 byte to 64MB", fl.Reply)
				}
				fl.ReplyBytes = n
			}
		case "stream":
			if fl.Size != "" || fl.Reply != "" {
				return ferr(f+".size", "a stream has no size")
			}
		case "http":
			if fl.Reply != "" {
				return ferr(f+".reply", "an http flow has no reply size: its size is the response's body (the request is a GET)")
			}
			switch fl.Client {
			case "", "wrk":
			case "ab":
				if fl.Keepalive {
					return ferr(f+".client", "ab runs here with a new connection per request: keep-alive connections take wrk")
				}
			default:
				return ferr(f+".client", "unknown load generator %q (wrk or ab)", fl.Client)
			}
			if fl.CC != "" {
				return ferr(f+".cc", "an http flow's server sends with the run's congestion control (its namespace's default): no cc of its own")
			}
			switch {
			case fl.Size != "" && len(fl.Sizes) > 0:
				return ferr(f+".sizes", "size and sizes both set: sizes runs the scenario once per value")
			case fl.Size != "":
				sz, err := parseHTTPSizes(f+".size", []string{fl.Size})
				if err != nil {
					return err
				}
				fl.SizeBytes = sz[0]
			case len(fl.Sizes) > 0:
				if fl.SizesBytes, err = parseHTTPSizes(f+".sizes", fl.Sizes); err != nil {
					return err
				}
				fl.SizeBytes = fl.SizesBytes[0]
			default:
				return ferr(f+".size", "an http flow needs a response size (e.g. size: 100KB) or a list of them (sizes: [10KB, 1MB])")
			}
		case "":
			return ferr(f+".kind", "missing (rpc, stream, udp or http)")
		default:
			return ferr(f+".kind", "unknown kind %q (rpc, stream, udp or http)", fl.Kind)
		}
		if len(fl.Counts) > 0 || len(fl.SizesBytes) > 0 {
			dim := "counts"
			if len(fl.Counts) == 0 {
				dim = "sizes"
			}
			for j := 0; j < i; j++ {
				if len(s.Flows[j].Counts) > 0 {
					return ferr(f+"."+dim, "flows[%d] has counts already: at most one flow's count (and size) is a dimension", j)
				}
				if len(s.Flows[j].SizesBytes) > 0 {
					return ferr(f+"."+dim, "flows[%d] has sizes already: at most one flow's size (and count) is a dimension", j)
				}
			}
		}
		if len(fl.Counts) > 0 {
			if fl.Count != 0 {
				return ferr(f+".counts", "count and counts both set: counts runs the scenario once per value")
			}
			for j, n := range fl.Counts {
				if n < 1 || n > MaxCount {
					return ferr(fmt.Sprintf("%s.counts[%d]", f, j), "%d out of range 1..%d", n, MaxCount)
				}
				if slices.Contains(fl.Counts[:j], n) {
					return ferr(fmt.Sprintf("%s.counts[%d]", f, j), "%d listed twice", n)
				}
			}
			fl.Count = fl.Counts[0]
		}
		if fl.Count == 0 {
			fl.Count = 1
		}
		if fl.Count < 0 || fl.Count > MaxCount {
			return ferr(f+".count", "%d out of range 1..%d", fl.Count, MaxCount)
		}
		fl.CC = CanonicalCC(fl.CC)
		if fl.CC != "" && !validCC(fl.CC) {
			return ferr(f+".cc", "bad congestion control %q", fl.CC)
		}
		if len(fl.From) == 0 {
			return ferr(f+".from", "missing (a cgroup or host name, or a list of them)")
		}
		if err := s.validateActive(f, fl); err != nil {
			return err
		}
		for j, src := range fl.From {
			if c := cgByName[src]; c != nil && s.hasChildren(c.Name) {
				return ferr(fmt.Sprintf("%s.from[%d]", f, j), "group %q has groups nested in it: flows come from those (an htb class with children carries no traffic of its own)", src)
			}
		}
		if fl.Kind == "http" && len(fl.From) > 1 {
			return ferr(f+".from", "an http flow has one server group (nginx runs in it), not a list")
		}
		if fl.To == "" {
			return ferr(f+".to", "missing (a host or cgroup name)")
		}
		if names[fl.To] == "" {
			return ferr(f+".to", "unknown host or cgroup %q", fl.To)
		}
		for j, src := range fl.From {
			ff := f + ".from"
			if len(fl.From) > 1 {
				ff = fmt.Sprintf("%s[%d]", ff, j)
			}
			if names[src] == "" {
				return ferr(ff, "unknown cgroup or host %q", src)
			}
			if hostOf[src] == hostOf[fl.To] {
				return ferr(ff, "%q and %q are on the same host %q: flows cross a link", src, fl.To, hostOf[src])
			}
			if s.linkBetween(hostOf[src], hostOf[fl.To]) == nil {
				return ferr(ff, "no link joins hosts %q and %q", hostOf[src], hostOf[fl.To])
			}
		}
		if fl.Kind == "http" {
			if c := cgByName[fl.From[0]]; c != nil && c.EgressAuto {
				return ferr(f+".from", "group %q serves http and has egress auto (measured with workload streams): give it a rate", c.Name)
			}
		}
		if fl.Name == "" {
			switch {
			case fl.Kind == "http" && len(fl.SizesBytes) > 0:
				fl.Name = "http"
			case fl.Kind == "http":
				fl.Name = "http-" + sizeName(fl.SizeBytes)
			case fl.Kind == "rpc":
				fl.Name = "rpc-" + sizeName(fl.SizeBytes)
			default:
				fl.Name = fl.Kind // stream, udp
			}
		}
	}
	if len(s.Quick.Counts) > 0 && len(s.Variants()) == 1 && s.Variants()[0].Flow < 0 {
		return ferr("quick.counts", "no flow has counts")
	}
	if len(s.Quick.SizesBytes) > 0 && !slices.ContainsFunc(s.Flows, func(fl Flow) bool { return len(fl.SizesBytes) > 0 }) {
		return ferr("quick.sizes", "no flow has sizes")
	}
	// A web server's group is the only source on its host: the tc limiters
	// put a group alone on its interface at the root, but classify groups
	// sharing one by their servers' destination ports, which the responses
	// of a web server (its source port) do not carry.
	for i, fl := range s.Flows {
		if fl.Kind != "http" {
			continue
		}
		srv := fl.From[0]
		for j, o := range s.Flows {
			for _, src := range o.From {
				if src != srv && hostOf[src] == hostOf[srv] {
					return ferr(fmt.Sprintf("flows[%d].from", i), "the web server's group %q shares host %q with %q, the source of flows[%d]: an http server's group must be the only source on its host", srv, hostOf[srv], src, j)
				}
				if hostOf[src] == hostOf[srv] && o.CC != "" {
					return ferr(fmt.Sprintf("flows[%d].cc", j), "host %q serves http: its routes carry the run's congestion control, which would override this flow's", hostOf[srv])
				}
			}
		}
	}
	// Class names must be unique per group.
	seen := map[string]int{}
	for i, fl := range s.Flows {
		k := s.ClassGroup(&fl) + "/" + fl.Name
		if j, ok := seen[k]; ok {
			return ferr(fmt.Sprintf("flows[%d].name", i), "class %q of group %q already defined by flows[%d]: give one a name", fl.Name, s.ClassGroup(&fl), j)
		}
		seen[k] = i
	}
	_ = cgByName
	return nil
}

// parseHTTPSizes parses response sizes (1 byte to MaxHTTPSize, each once).
func parseHTTPSizes(field string, sizes []string) ([]int, error) {
	var out []int
	for j, v := range sizes {
		ff := field
		if len(sizes) > 1 || strings.HasSuffix(field, "sizes") {
			ff = fmt.Sprintf("%s[%d]", field, j)
		}
		n, err := workload.ParseSize(v)
		if err != nil || n < 1 || n > MaxHTTPSize {
			return nil, ferr(ff, "bad size %q: 1 byte to 64MB, e.g. 100KB or 10MB", v)
		}
		if slices.Contains(out, n) {
			return nil, ferr(ff, "%s listed twice", v)
		}
		out = append(out, n)
	}
	return out, nil
}

func checkLists(prefix string, ccs, limiters []string) error {
	for i, c := range ccs {
		if !validCC(c) {
			return ferr(fmt.Sprintf("%sccs[%d]", prefix, i), "bad congestion control %q (e.g. cubic, cubic-ecn, dctcp, bbr)", c)
		}
	}
	for i, l := range limiters {
		if !slices.Contains(Limiters, l) {
			return ferr(fmt.Sprintf("%slimiters[%d]", prefix, i), "unknown limiter %q (%s)", l, strings.Join(Limiters, ", "))
		}
	}
	return nil
}

func parseRate(s string) (uint64, error) {
	if s == "" {
		return 0, errors.New("missing rate (e.g. 200mbit)")
	}
	r, err := rate.Parse(s)
	if err != nil {
		return 0, err
	}
	return uint64(r), nil
}

// sizeName prints a byte count as scenarios write it (10240 -> "10KB").
func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + "MB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + "KB"
	}
	return strconv.Itoa(n) + "B"
}

// HostOf returns the host of a cgroup or host name.
func (s *Scenario) HostOf(name string) string {
	for _, c := range s.Cgroups {
		if c.Name == name {
			return c.Host
		}
	}
	return name
}

// Cgroup returns the cgroup named name, or nil for a host name.
func (s *Scenario) Cgroup(name string) *Cgroup {
	for i := range s.Cgroups {
		if s.Cgroups[i].Name == name {
			return &s.Cgroups[i]
		}
	}
	return nil
}

// ClassGroup is the group a flow's class belongs to in the results: the
// destination when the flow has several sources or the destination has an
// ingress limit (incast), the source otherwise.
func (s *Scenario) ClassGroup(fl *Flow) string {
	if c := s.Cgroup(fl.To); len(fl.From) > 1 || (c != nil && c.Ingress != "") {
		return fl.To
	}
	return fl.From[0]
}

// linkBetween returns the first link joining hosts a and b.
func (s *Scenario) linkBetween(a, b string) *Link {
	for i := range s.Links {
		if slices.Contains(s.Links[i].Hosts, a) && slices.Contains(s.Links[i].Hosts, b) {
			return &s.Links[i]
		}
	}
	return nil
}

// Builtins returns the embedded scenarios, sorted by name.
func Builtins() ([]*Scenario, error) {
	entries, err := builtinFS.ReadDir("scenarios")
	if err != nil {
		return nil, err
	}
	var out []*Scenario
	for _, e := range entries {
		f, err := builtinFS.Open("scenarios/" + e.Name())
		if err != nil {
			return nil, err
		}
		s, err := Parse("builtin:"+e.Name(), f)
		f.Close()
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return builtinOrder(out[i].Name) < builtinOrder(out[j].Name) })
	return out, nil
}

// builtinOrder runs the built-ins in the seed's order.
func builtinOrder(name string) string {
	for i, n := range []string{"egress-200m", "egress-1g", "egress-high", "egress-two-cgroups", "incast",
		"many-flows-200m", "many-flows-1g", "udp-flood", "two-ccs"} {
		if n == name {
			return strconv.Itoa(i)
		}
	}
	return "9" + name
}

// Load resolves command-line arguments: a built-in scenario's name or a
// YAML file's path. No argument means every built-in.
func Load(args []string) ([]*Scenario, error) {
	builtins, err := Builtins()
	if err != nil {
		return nil, fmt.Errorf("built-in scenarios: %w", err)
	}
	if len(args) == 0 {
		return builtins, nil
	}
	var out []*Scenario
	for _, a := range args {
		var found *Scenario
		for _, b := range builtins {
			if b.Name == a {
				found = b
			}
		}
		if found == nil {
			if _, err := os.Stat(a); err != nil {
				if strings.ContainsAny(a, "/.") {
					return nil, fmt.Errorf("scenario %s: %w", a, err)
				}
				var names []string
				for _, b := range builtins {
					names = append(names, b.Name)
				}
				return nil, fmt.Errorf("unknown scenario %q: not a built-in (%s) nor a file", a, strings.Join(names, ", "))
			}
			f, err := os.Open(a)
			if err != nil {
				return nil, err
			}
			found, err = Parse(filepath.Clean(a), f)
			f.Close()
			if err != nil {
				return nil, err
			}
		}
		for _, o := range out {
			if o.Name == found.Name {
				return nil, fmt.Errorf("scenario %q given twice", found.Name)
			}
		}
		out = append(out, found)
	}
	return out, nil
}
