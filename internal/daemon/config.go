// Package daemon is `hbm daemon`: it keeps the limits a configuration file
// declares in force as cgroups come and go. The pieces are kept apart so
// that most can be tested without root:
//
//   - config.go: the file, parsed and validated, every error with file:line;
//   - resolve.go: the declared selectors (cgroup, unit, glob) turned into
//     the groups that exist now, and the directories to watch for changes;
//   - reconcile.go: declared against actual against owned, as a plan (pure);
//   - owned.go: which limits the daemon applied, pinned next to them;
//   - watch.go: inotify on the cgroup directories and the config file;
//   - daemon.go: the loop (passes, SIGHUP, reload, sd_notify, metrics).
package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/hbm-dev/hbm/internal/dataplane"
	"github.com/hbm-dev/hbm/internal/rate"
)

// Kind is how a rule names its groups.
type Kind int

const (
	KindCgroup Kind = iota // one cgroup path, relative to the cgroup2 mount
	KindUnit               // a systemd unit, resolved to its cgroup
	KindGlob               // every cgroup whose path matches a pattern
)

func (k Kind) String() string { return [...]string{"cgroup", "unit", "glob"}[k] }

// Rule is one entry of the file's limits list.
type Rule struct {
	Line    int    // where the entry starts in the file
	Kind    Kind   // which selector the entry uses
	Value   string // the cgroup path (cleaned), unit name or glob pattern
	Egress  *dataplane.Limit
	Ingress *dataplane.Limit
	// MaxGroups bounds how many groups a glob rule limits (the ones created
	// first, by cgroup id, win): a glob over a subtree others may write
	// must not turn each mkdir into a limit until the data plane is full.
	MaxGroups int
}

// MaxGroupsLimit is the data plane's capacity (HBM_MAX_LIMITS).
const MaxGroupsLimit = 65536

// Config is a parsed and validated configuration file.
type Config struct {
	Path  string
	Rules []Rule
	// Pods is the operator's policy for what Kubernetes pods may ask for
	// with their annotations (the file's kubernetes: section; defaults
	// when absent).
	Pods PodPolicy
}

// DefaultMaxGroups bounds how many groups one glob rule limits (max_groups).
const DefaultMaxGroups = 1000

// InvalidAction is what a pod's direction gets when its annotations are
// invalid, not allowed by the policy, or out of range.
type InvalidAction int

const (
	// InvalidDefault: the node's default limit (default_egress,
	// default_ingress; hbm's minimum rate where none is set).
	InvalidDefault InvalidAction = iota
	// InvalidKeep: the limit the daemon applied to the pod before stays
	// as it was; a pod that had none gets the node's default limit.
	InvalidKeep
)

func (a InvalidAction) String() string { return [...]string{"default", "keep"}[a] }

// PodPolicy is the operator's word on pods' annotations. A pod never gets
// "unlimited" for an annotation the daemon cannot honour.
type PodPolicy struct {
	// Allowed are the hbm.io/<direction>-<option> options pods may set
	// (no-drop, no-pace, loopback, burst, pace, mark, drop-large,
	// drop-small, guarantee), and priority (hbm.io/priority, both
	// directions). An option not allowed makes the direction invalid.
	Allowed map[string]bool
	// MaxDuration bounds every duration option (burst, pace, mark,
	// drop-large, drop-small): a larger value makes the direction invalid.
	MaxDuration time.Duration
	// OnInvalid: what an invalid direction gets.
	OnInvalid InvalidAction
	// DefaultEgress, DefaultIngress: the node's default limits, for
	// invalid annotations (0: hbm's minimum rate, 8 kbit/s).
	DefaultEgress, DefaultIngress rate.Rate
	// FollowEdits: annotation edits after the daemon first limited a pod's
	// group are honoured. When false, the limits it applied first stay
	// (also when the annotations are removed) until the pod goes.
	FollowEdits bool
	// Classes: the operator's defaults per QoS class (the file's
	// qos_classes:, keyed by QOSClasses' names), for the pods of that class
	// whose annotations do not say otherwise. None by default.
	Classes map[string]ClassDefault
}

// QOSClasses are Kubernetes' QoS classes, spelt as status.qosClass spells
// them (and the file's qos_classes: keys).
var QOSClasses = []string{"Guaranteed", "Burstable", "BestEffort"}

// ClassDefault is what the pods of one QoS class get where their own
// annotations are silent: a priority (hbm.io/priority), and a guarantee per
// direction (hbm.io/<direction>-guarantee) as a share of the pod's bandwidth
// annotation, which stays its ceiling. A pod's own annotation, where the
// policy allows it (allowed_options), replaces the class's.
type ClassDefault struct {
	Priority    dataplane.Priority
	HasPriority bool // Priority given (normal is a value)
	// EgressGuarantee, IngressGuarantee: percent (0 < p <= 100) of the
	// pod's bandwidth annotation; 0: none (the annotation is a hard cap).
	EgressGuarantee, IngressGuarantee float64
}

// Guarantee is the class's guarantee for a pod whose bandwidth annotation
// in direction d is r: its share of r, rounded down, at least hbm's
// minimum rate; 0 when the class gives none.
func (c ClassDefault) Guarantee(d dataplane.Direction, r rate.Rate) rate.Rate {
	pct := c.EgressGuarantee
	if d == dataplane.Ingress {
		pct = c.IngressGuarantee
	}
	if pct <= 0 {
		return 0
	}
	if pct >= 100 {
		return r
	}
	g := rate.Rate(math.Floor(float64(r) * pct / 100))
	return min(max(g, rate.Min), r)
}

// PodOptions are the hbm.io/ option names, and SafePodOptions the ones
// pods may set by default: every option but no-drop, which lifts the limit
// for UDP and other traffic that cannot be marked, and priority (the pod's
// place in the order in which borrowers get what lenders leave: the
// operator's to hand out, and a pod on a node that does not say keeps
// today's behaviour).
var (
	PodOptions     = []string{"burst", "drop-large", "drop-small", "guarantee", "loopback", "mark", "no-drop", "no-pace", "pace", "priority"}
	SafePodOptions = []string{"burst", "drop-large", "drop-small", "guarantee", "loopback", "mark", "no-pace", "pace"}
)

// DefaultMaxPodDuration bounds pods' duration options by default: 50 ms of
// queue at the rate, twice the largest default threshold (drop-small 24 ms).
const DefaultMaxPodDuration = 50 * time.Millisecond

// DefaultPodPolicy is the policy when the file says nothing.
func DefaultPodPolicy() PodPolicy {
	p := PodPolicy{Allowed: map[string]bool{}, MaxDuration: DefaultMaxPodDuration, FollowEdits: true}
	for _, o := range SafePodOptions {
		p.Allowed[o] = true
	}
	return p
}

// DefaultLimit is the node's default limit in direction d (for invalid
// annotations): never unlimited.
func (p PodPolicy) DefaultLimit(d dataplane.Direction) dataplane.Limit {
	r := p.DefaultEgress
	if d == dataplane.Ingress {
		r = p.DefaultIngress
	}
	if r == 0 {
		r = rate.Min
	}
	return dataplane.Limit{Rate: r, Thresholds: rate.Default(r).Fit(r), MinInflight: dataplane.DefaultMinInflight}
}

// Error is a configuration error at a place in the file.
type Error struct {
	File string
	Line int // 0: the file as a whole
	Msg  string
}

func (e *Error) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("%s: %s", e.File, e.Msg)
	}
	return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
}

// maxConfigBytes bounds the file (1,000 rules take about 50 KB).
const maxConfigBytes = 16 << 20

// Load reads and parses the configuration file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &Error{File: path, Msg: err.Error()}
	}
	return Parse(path, data)
}

// ruleKeys are the fields of a rule: one selector, the rates, and one field
// per option of `hbm set`.
var ruleKeys = map[string]string{
	"cgroup": "selector", "unit": "selector", "glob": "selector",
	"egress": "rate", "ingress": "rate", "egress_ceil": "rate", "ingress_ceil": "rate", "priority": "priority",
	"loopback": "bool", "no_drop": "bool", "no_pace": "bool",
	"burst": "duration", "pace": "duration", "mark": "duration", "drop_large": "duration", "drop_small": "duration",
	"min_inflight": "uint", "max_groups": "uint",
}

// yamlLine finds the line in a yaml.v3 error message ("yaml: line 3: ...").
var yamlLine = regexp.MustCompile(`^yaml: (?:line (\d+): )?(.*)$`)

// Parse parses and validates a configuration. name is used in errors.
func Parse(name string, data []byte) (*Config, error) {
	if len(data) > maxConfigBytes {
		return nil, &Error{File: name, Msg: fmt.Sprintf("larger than %d bytes", maxConfigBytes)}
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: name, Msg: "empty file: want a limits: list"}
		}
		msg := err.Error()
		line := 0
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			line, _ = strconv.Atoi(m[1])
			msg = m[2]
		}
		return nil, &Error{File: name, Line: line, Msg: msg}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		line := extra.Line
		if len(extra.Content) > 0 {
			line = extra.Content[0].Line
		}
		return nil, &Error{File: name, Line: line, Msg: "a second YAML document: want one"}
	}
	cfg := &Config{Path: name, Pods: DefaultPodPolicy()}
	p := parser{file: name}
	if len(doc.Content) == 0 {
		return nil, &Error{File: name, Msg: "empty file: want a limits: list"}
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, p.errf(root, "want a mapping with a limits: list at the top")
	}
	var limits, kube *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch k.Value {
		case "limits":
			if limits != nil {
				return nil, p.errf(k, "limits: given twice")
			}
			limits = v
		case "kubernetes":
			if kube != nil {
				return nil, p.errf(k, "kubernetes: given twice")
			}
			kube = v
		default:
			return nil, p.errf(k, "unknown key %q (the top level has limits: and kubernetes:)", k.Value)
		}
	}
	if kube != nil {
		if err := p.podPolicy(&cfg.Pods, kube); err != nil {
			return nil, err
		}
	}
	if limits == nil {
		if kube != nil {
			return cfg, nil // a policy for pods alone
		}
		return nil, p.errf(root, "no limits: list")
	}
	if limits.Kind == yaml.ScalarNode && limits.Tag == "!!null" {
		return cfg, nil // "limits:" with nothing: no limits declared
	}
	if limits.Kind != yaml.SequenceNode {
		return nil, p.errf(limits, "limits: want a list of entries (- cgroup: ...)")
	}
	seen := map[string]int{}
	for _, n := range limits.Content {
		r, err := p.rule(n)
		if err != nil {
			return nil, err
		}
		id := r.Kind.String() + " " + r.Value
		if prev, ok := seen[id]; ok {
			return nil, p.errf(n, "%s %s already declared at line %d", r.Kind, r.Value, prev)
		}
		seen[id] = r.Line
		cfg.Rules = append(cfg.Rules, r)
	}
	return cfg, nil
}

type parser struct{ file string }

func (p parser) errf(n *yaml.Node, format string, args ...any) error {
	return &Error{File: p.file, Line: n.Line, Msg: fmt.Sprintf(format, args...)}
}

// rule parses one entry of the limits list.
func (p parser) rule(n *yaml.Node) (Rule, error) {
	r := Rule{Line: n.Line}
	if n.Kind != yaml.MappingNode {
		return r, p.errf(n, "a limit entry must be a mapping (cgroup:/unit:/glob: and egress:/ingress:)")
	}
	var (
		egress, ingress         rate.Rate
		egressCeil, ingressCeil rate.Rate
		th                      = rate.Thresholds{Burst: rate.DefaultBurst, Pace: rate.DefaultPace, Mark: rate.DefaultMark,
			DropLarge: rate.DefaultDropLarge, DropSmall: rate.DefaultDropSmall}
		opts     dataplane.Limit
		selector *yaml.Node
		seen     = map[string]bool{}
	)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		typ, ok := ruleKeys[k.Value]
		if !ok {
			return r, p.errf(k, "unknown field %q (fields: cgroup, unit, glob, egress, ingress, egress_ceil, ingress_ceil, priority, loopback, no_drop, no_pace, burst, pace, mark, drop_large, drop_small, min_inflight, max_groups)", k.Value)
		}
		if seen[k.Value] {
			return r, p.errf(k, "%s given twice", k.Value)
		}
		seen[k.Value] = true
		if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
			return r, p.errf(v, "%s: want a value", k.Value)
		}
		switch typ {
		case "selector":
			if selector != nil {
				return r, p.errf(k, "%s: an entry names its groups once (%s already given)", k.Value, selector.Value)
			}
			selector = k
			if err := p.selector(&r, k.Value, v); err != nil {
				return r, err
			}
		case "rate":
			rt, err := rate.Parse(v.Value)
			if err != nil {
				return r, p.errf(v, "%s: %v", k.Value, err)
			}
			*map[string]*rate.Rate{"egress": &egress, "ingress": &ingress,
				"egress_ceil": &egressCeil, "ingress_ceil": &ingressCeil}[k.Value] = rt
		case "priority":
			pr, err := dataplane.ParsePriority(v.Value)
			if err != nil {
				return r, p.errf(v, "%v", err)
			}
			opts.Priority = pr
		case "bool":
			b, err := strconv.ParseBool(v.Value)
			if err != nil || v.Tag != "!!bool" {
				return r, p.errf(v, "%s: want true or false, not %q", k.Value, v.Value)
			}
			switch k.Value {
			case "loopback":
				opts.Loopback = b
			case "no_drop":
				opts.NoDrop = b
			case "no_pace":
				opts.NoPace = b
			}
		case "duration":
			d, err := time.ParseDuration(v.Value)
			if err != nil || d < 0 {
				return r, p.errf(v, "%s: want a duration such as 4ms or 500us, not %q", k.Value, v.Value)
			}
			*map[string]*time.Duration{"burst": &th.Burst, "pace": &th.Pace, "mark": &th.Mark,
				"drop_large": &th.DropLarge, "drop_small": &th.DropSmall}[k.Value] = d
		case "uint":
			u, err := strconv.ParseUint(v.Value, 10, 32)
			if err != nil {
				return r, p.errf(v, "%s: want a whole number, not %q", k.Value, v.Value)
			}
			if k.Value == "max_groups" {
				if u == 0 || u > MaxGroupsLimit {
					return r, p.errf(v, "max_groups: want 1 to %d, not %d", MaxGroupsLimit, u)
				}
				r.MaxGroups = int(u)
				continue
			}
			opts.MinInflight = uint32(u)
		}
	}
	if selector == nil {
		return r, p.errf(n, "the entry names no groups: give cgroup:, unit: or glob:")
	}
	if r.MaxGroups != 0 && r.Kind != KindGlob {
		return r, p.errf(n, "max_groups: only for glob: entries (cgroup: and unit: name one group)")
	}
	if r.Kind == KindGlob && r.MaxGroups == 0 {
		r.MaxGroups = DefaultMaxGroups
	}
	if egress == 0 && ingress == 0 {
		return r, p.errf(n, "%s %s: give a rate with egress: and/or ingress:", r.Kind, r.Value)
	}
	for _, d := range []struct {
		name     string
		rt, ceil rate.Rate
		dst      **dataplane.Limit
	}{{"egress", egress, egressCeil, &r.Egress}, {"ingress", ingress, ingressCeil, &r.Ingress}} {
		if d.rt == 0 {
			if d.ceil != 0 {
				return r, p.errf(n, "%s_ceil: give the rate it is the ceiling of (%s:)", d.name, d.name)
			}
			continue
		}
		l := opts
		l.Rate, l.Ceil = d.rt, d.ceil
		if l.Ceil == l.Rate {
			l.Ceil = 0 // a hard cap, as the data plane reads it back (else each pass would see it changed by hand)
		}
		t := th
		if d.name == "ingress" && l.NoDrop { // incast protection: its own defaults
			t = t.Incast(seen["mark"], seen["burst"])
		}
		l.Thresholds = t.Fit(d.rt)
		if l.MinInflight == 0 {
			l.MinInflight = dataplane.DefaultMinInflight
		}
		if err := l.Thresholds.Validate(); err != nil {
			return r, p.errf(n, "%s %v: %v", d.name, d.rt, err)
		}
		if err := l.Validate(); err != nil {
			return r, p.errf(n, "%s %v: %v", d.name, d.rt, err)
		}
		*d.dst = &l
	}
	return r, nil
}

// unitName is what systemd accepts as a unit name with a type suffix.
var unitName = regexp.MustCompile(`^[A-Za-z0-9:_.\\@-]+\.(service|scope|slice|socket|mount|swap|timer|path|target|device|automount)$`)

func (p parser) selector(r *Rule, key string, v *yaml.Node) error {
	val := v.Value
	switch key {
	case "unit":
		r.Kind = KindUnit
		if !unitName.MatchString(val) || len(val) > 255 {
			return p.errf(v, "unit: %q is not a systemd unit name (e.g. nginx.service)", val)
		}
		r.Value = val
		return nil
	case "cgroup":
		r.Kind = KindCgroup
	case "glob":
		r.Kind = KindGlob
	}
	if !strings.HasPrefix(val, "/") {
		return p.errf(v, "%s: %q must start with / (a path relative to the cgroup2 mount)", key, val)
	}
	if strings.ContainsRune(val, 0) {
		return p.errf(v, "%s: contains a NUL byte", key)
	}
	for _, seg := range strings.Split(strings.Trim(val, "/"), "/") {
		if seg == "." || seg == ".." {
			return p.errf(v, "%s: %q: no . or .. segments", key, val)
		}
	}
	clean := path.Clean(val)
	if depth := strings.Count(clean, "/"); clean != "/" && depth > dataplane.MaxLevel {
		return p.errf(v, "%s: %q is %d levels deep: hbm limits groups at most %d levels deep", key, val, depth, dataplane.MaxLevel)
	}
	if key == "glob" {
		if clean == "/" {
			return p.errf(v, "glob: / matches only the root group: write cgroup: /")
		}
		for _, seg := range strings.Split(strings.Trim(clean, "/"), "/") {
			if seg == "**" {
				return p.errf(v, "glob: ** is not supported: a * matches one path segment")
			}
			if _, err := path.Match(seg, ""); err != nil {
				return p.errf(v, "glob: %q: bad pattern in segment %q", val, seg)
			}
		}
	} else if strings.ContainsAny(clean, "*?[") {
		return p.errf(v, "cgroup: %q contains a pattern character: use glob: for patterns", val)
	}
	r.Value = clean
	return nil
}

// podPolicy parses the kubernetes: section.
func (p parser) podPolicy(pol *PodPolicy, n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return p.errf(n, "kubernetes: want a mapping (allowed_options:, max_option_duration:, invalid:, default_egress:, default_ingress:, follow_edits:, qos_classes:)")
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if seen[k.Value] {
			return p.errf(k, "kubernetes: %s given twice", k.Value)
		}
		seen[k.Value] = true
		if k.Value != "allowed_options" && k.Value != "qos_classes" && (v.Kind != yaml.ScalarNode || v.Tag == "!!null") {
			return p.errf(v, "kubernetes: %s: want a value", k.Value)
		}
		switch k.Value {
		case "allowed_options":
			if v.Kind != yaml.SequenceNode {
				return p.errf(v, "kubernetes: allowed_options: want a list of option names (%s), [] for none", strings.Join(PodOptions, ", "))
			}
			pol.Allowed = map[string]bool{}
			for _, o := range v.Content {
				if o.Kind != yaml.ScalarNode || !slices.Contains(PodOptions, o.Value) {
					return p.errf(o, "kubernetes: allowed_options: %q is not an option (options: %s)", o.Value, strings.Join(PodOptions, ", "))
				}
				pol.Allowed[o.Value] = true
			}
		case "max_option_duration":
			d, err := time.ParseDuration(v.Value)
			if err != nil || d <= 0 || d > time.Hour {
				return p.errf(v, "kubernetes: max_option_duration: want a duration such as 50ms (at most 1h), not %q", v.Value)
			}
			pol.MaxDuration = d
		case "invalid":
			switch v.Value {
			case "default":
				pol.OnInvalid = InvalidDefault
			case "keep":
				pol.OnInvalid = InvalidKeep
			default:
				return p.errf(v, "kubernetes: invalid: want default (the node's default limit) or keep (the pod's previous limit, else the default), not %q", v.Value)
			}
		case "default_egress", "default_ingress":
			rt, err := rate.Parse(v.Value)
			if err != nil {
				return p.errf(v, "kubernetes: %s: %v", k.Value, err)
			}
			if k.Value == "default_egress" {
				pol.DefaultEgress = rt
			} else {
				pol.DefaultIngress = rt
			}
		case "follow_edits":
			b, err := strconv.ParseBool(v.Value)
			if err != nil || v.Tag != "!!bool" {
				return p.errf(v, "kubernetes: follow_edits: want true or false, not %q", v.Value)
			}
			pol.FollowEdits = b
		case "qos_classes":
			classes, err := p.qosClasses(v)
			if err != nil {
				return err
			}
			pol.Classes = classes
		default:
			return p.errf(k, "kubernetes: unknown field %q (fields: allowed_options, max_option_duration, invalid, default_egress, default_ingress, follow_edits, qos_classes)", k.Value)
		}
	}
	return nil
}

// qosClasses parses kubernetes: qos_classes:, a mapping from QoS class to
// its defaults:
//
//	qos_classes:
//	  Guaranteed: {priority: latency}
//	  BestEffort: {priority: batch, egress_guarantee: 10%}
func (p parser) qosClasses(n *yaml.Node) (map[string]ClassDefault, error) {
	classes := strings.Join(QOSClasses, ", ")
	if n.Kind != yaml.MappingNode {
		return nil, p.errf(n, "kubernetes: qos_classes: want a mapping from QoS class (%s) to its defaults", classes)
	}
	out := map[string]ClassDefault{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !slices.Contains(QOSClasses, k.Value) {
			return nil, p.errf(k, "kubernetes: qos_classes: %q is not a QoS class (classes: %s, as status.qosClass spells them)", k.Value, classes)
		}
		if _, dup := out[k.Value]; dup {
			return nil, p.errf(k, "kubernetes: qos_classes: %s given twice", k.Value)
		}
		what := "kubernetes: qos_classes: " + k.Value
		if v.Kind != yaml.MappingNode || len(v.Content) == 0 {
			return nil, p.errf(v, "%s: want a mapping with priority:, egress_guarantee: and/or ingress_guarantee:", what)
		}
		var c ClassDefault
		seen := map[string]bool{}
		for j := 0; j+1 < len(v.Content); j += 2 {
			fk, fv := v.Content[j], v.Content[j+1]
			if seen[fk.Value] {
				return nil, p.errf(fk, "%s: %s given twice", what, fk.Value)
			}
			seen[fk.Value] = true
			if fv.Kind != yaml.ScalarNode || fv.Tag == "!!null" {
				return nil, p.errf(fv, "%s: %s: want a value", what, fk.Value)
			}
			switch fk.Value {
			case "priority":
				pr, err := dataplane.ParsePriority(fv.Value)
				if err != nil {
					return nil, p.errf(fv, "%s: %v", what, err)
				}
				c.Priority, c.HasPriority = pr, true
			case "egress_guarantee", "ingress_guarantee":
				pct, err := parsePercent(fv.Value)
				if err != nil {
					return nil, p.errf(fv, "%s: %s: %v", what, fk.Value, err)
				}
				if fk.Value == "egress_guarantee" {
					c.EgressGuarantee = pct
				} else {
					c.IngressGuarantee = pct
				}
			default:
				return nil, p.errf(fk, "%s: unknown field %q (fields: priority, egress_guarantee, ingress_guarantee)", what, fk.Value)
			}
		}
		out[k.Value] = c
	}
	return out, nil
}

// parsePercent reads a class's guarantee: a share of the pod's bandwidth
// annotation, "50%" (above 0, at most 100).
func parsePercent(s string) (float64, error) {
	num, ok := strings.CutSuffix(s, "%")
	v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if !ok || err != nil || math.IsNaN(v) || v <= 0 || v > 100 {
		return 0, fmt.Errorf("want a share of the pod's bandwidth annotation such as 50%% (above 0%%, at most 100%%), not %q", s)
	}
	return v, nil
}
