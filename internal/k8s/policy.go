package k8s

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hbm-dev/hbm/internal/daemon"
	"github.com/hbm-dev/hbm/internal/dataplane"
	"github.com/hbm-dev/hbm/internal/rate"
)

// Judged is a pod's annotations judged under the operator's policy
// (daemon.PodPolicy): the limits to declare, and what was wrong.
type Judged struct {
	Egress, Ingress         *dataplane.Limit
	KeepEgress, KeepIngress bool
	// Problems: one line per annotation the daemon could not honour as
	// written, with what the direction gets instead (for the Event).
	Problems []string
}

// Judge turns the annotations of a pod of QoS class qos into limits under
// pol. Each direction is judged on its own: its bandwidth annotation and its
// hbm.io/ options (hbm.io/priority counts for both). Where the pod's
// annotations give no guarantee or no priority, its class's defaults in
// pol.Classes (if any) give them; a pod's own annotation, allowed by pol,
// replaces the class's. A
// rate outside what hbm enforces (kubelet accepts 1k to 1P, hbm 8k to 400G)
// is clamped to the nearest it enforces. A direction whose bandwidth
// annotation does not parse, or whose options are unknown, malformed, not
// in pol.Allowed or longer than pol.MaxDuration, gets pol's answer to an
// invalid annotation: the node's default limit, or (keep) the limit it had,
// else the default. Never unlimited. Options of a direction without a
// bandwidth annotation have no effect (a problem is still reported).
func Judge(ann map[string]string, qos corev1.PodQOSClass, pol daemon.PodPolicy) Judged {
	var j Judged
	class := pol.Classes[string(qos)]
	type dirState struct {
		name     string
		dir      dataplane.Direction
		bwKey    string
		opts     dirOptions
		invalid  []string
		notes    []string
		rate     rate.Rate
		asked    bool
		out      **dataplane.Limit
		keep     *bool
		prefixed string
	}
	dirs := []*dirState{
		{name: "egress", dir: dataplane.Egress, bwKey: EgressAnnotation, opts: defaultOptions(), out: &j.Egress, keep: &j.KeepEgress},
		{name: "ingress", dir: dataplane.Ingress, bwKey: IngressAnnotation, opts: defaultOptions(), out: &j.Ingress, keep: &j.KeepIngress},
	}
	dirs[1].opts.ingress = true
	for _, d := range dirs {
		d.prefixed = OptionPrefix + d.name + "-"
		s, ok := ann[d.bwKey]
		if !ok {
			continue
		}
		d.asked = true
		q, err := resource.ParseQuantity(s)
		if err == nil {
			err = validateBandwidthIsReasonable(&q)
		}
		if err != nil {
			d.invalid = append(d.invalid, fmt.Sprintf("%s: %q: %v", d.bwKey, s, err))
			continue
		}
		switch v := q.Value(); {
		case v < int64(rate.Min):
			d.rate = rate.Min
			d.notes = append(d.notes, fmt.Sprintf("%s: %s is below the lowest rate hbm enforces: %v instead", d.bwKey, q.String(), rate.Min))
		case v > int64(rate.Max):
			d.rate = rate.Max
			d.notes = append(d.notes, fmt.Sprintf("%s: %s is above the highest rate hbm enforces: %v instead", d.bwKey, q.String(), rate.Max))
		default:
			d.rate = rate.Rate(v)
		}
	}
	keys := make([]string, 0, len(ann))
	for k := range ann {
		if strings.HasPrefix(k, OptionPrefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := ann[k]
		if k == PriorityAnnotation { // the pod's: both directions
			var problem string
			pr, err := dataplane.ParsePriority(v)
			switch {
			case !pol.Allowed["priority"]:
				problem = fmt.Sprintf("%s: not allowed on this node (the operator allows: %s)", k, allowedList(pol))
			case err != nil:
				problem = fmt.Sprintf("%s: %v", k, err)
			}
			for _, c := range dirs {
				if problem != "" {
					c.invalid = append(c.invalid, problem)
					continue
				}
				c.opts.limit.Priority, c.opts.prioritySet = pr, true
			}
			continue
		}
		var d *dirState
		for _, c := range dirs {
			if strings.HasPrefix(k, c.prefixed) {
				d = c
			}
		}
		if d == nil { // names no direction: both are in doubt
			for _, c := range dirs {
				c.invalid = append(c.invalid, fmt.Sprintf("%s: unknown annotation (want %segress-OPTION or %singress-OPTION)", k, OptionPrefix, OptionPrefix))
			}
			continue
		}
		name := strings.TrimPrefix(k, d.prefixed)
		kind, ok := options[name]
		switch {
		case name == "priority":
			d.invalid = append(d.invalid, directionless(k))
			continue
		case !ok:
			d.invalid = append(d.invalid, fmt.Sprintf("%s: unknown option %q (options: %s; and %s)", k, name, dirOptionNames, PriorityAnnotation))
			continue
		case !pol.Allowed[name]:
			d.invalid = append(d.invalid, fmt.Sprintf("%s: not allowed on this node (the operator allows: %s)", k, allowedList(pol)))
			continue
		}
		switch kind {
		case boolOption:
			b, err := strconv.ParseBool(v)
			if err != nil {
				d.invalid = append(d.invalid, fmt.Sprintf("%s: want \"true\" or \"false\", not %q", k, v))
				continue
			}
			*map[string]*bool{"no-drop": &d.opts.limit.NoDrop, "no-pace": &d.opts.limit.NoPace, "loopback": &d.opts.limit.Loopback}[name] = b
		case durationOption:
			dur, err := time.ParseDuration(v)
			if err != nil || dur < 0 {
				d.invalid = append(d.invalid, fmt.Sprintf("%s: want a duration such as 4ms or 500us, not %q", k, v))
				continue
			}
			if pol.MaxDuration > 0 && dur > pol.MaxDuration {
				d.invalid = append(d.invalid, fmt.Sprintf("%s: %v is above the %v this node allows", k, dur, pol.MaxDuration))
				continue
			}
			*map[string]*time.Duration{"burst": &d.opts.th.Burst, "pace": &d.opts.th.Pace, "mark": &d.opts.th.Mark,
				"drop-large": &d.opts.th.DropLarge, "drop-small": &d.opts.th.DropSmall}[name] = dur
			if d.opts.given == nil {
				d.opts.given = map[string]bool{}
			}
			d.opts.given[name] = true
		case rateOption:
			r, err := parseGuarantee(v)
			if err != nil {
				d.invalid = append(d.invalid, fmt.Sprintf("%s: %v", k, err))
				continue
			}
			d.opts.guarantee, d.opts.guaranteed = r, true
		}
	}
	for _, d := range dirs {
		// The class's defaults, where the pod's annotations are silent.
		if !d.opts.guaranteed {
			d.opts.guarantee = class.Guarantee(d.dir, d.rate)
		}
		if !d.opts.prioritySet && class.HasPriority {
			d.opts.limit.Priority = class.Priority
		}
	}
	for _, d := range dirs {
		j.Problems = append(j.Problems, d.notes...)
		if !d.asked {
			for _, p := range d.invalid {
				j.Problems = append(j.Problems, p+" (no "+d.bwKey+": no effect)")
			}
			*d.keep = !pol.FollowEdits
			continue
		}
		if len(d.invalid) == 0 {
			l, err := d.opts.build(d.rate)
			if err == nil {
				*d.out = &l
				*d.keep = !pol.FollowEdits
				continue
			}
			d.invalid = append(d.invalid, fmt.Sprintf("%s %v with its options: %v", d.name, d.rate, err))
		}
		def := pol.DefaultLimit(d.dir)
		*d.out = &def
		what := fmt.Sprintf("the node's default %s limit, %v", d.name, def.Rate)
		if pol.OnInvalid == daemon.InvalidKeep || !pol.FollowEdits {
			*d.keep = true
			what = fmt.Sprintf("the %s limit it had (if none, the node's default, %v)", d.name, def.Rate)
		}
		for _, p := range d.invalid {
			j.Problems = append(j.Problems, p+": "+what)
		}
	}
	return j
}

func allowedList(pol daemon.PodPolicy) string {
	var out []string
	for _, o := range daemon.PodOptions {
		if pol.Allowed[o] {
			out = append(out, o)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// The annotations kubelet puts on the mirror pod of a static pod: its
// group is named after the config hash (the static pod's UID on the
// node), not after the mirror pod's UID in the API.
const (
	MirrorAnnotation = "kubernetes.io/config.mirror"
	HashAnnotation   = "kubernetes.io/config.hash"
)

// hashName is what kubelet's config hash looks like (hex; a UID's form is
// accepted too): nothing that could leave the kubepods tree.
var hashName = regexp.MustCompile(`^[0-9a-fA-F][0-9a-fA-F-]{0,63}$`)

// mirrorHash is the config hash a pod claims as a static pod's mirror
// ("" if it claims none, or not in kubelet's form): the mirror annotation,
// kubelet's owner reference to the node (every mirror pod has one), and a
// hash that could be one.
func mirrorHash(p *corev1.Pod) types.UID {
	if _, mirror := p.Annotations[MirrorAnnotation]; !mirror {
		return ""
	}
	owned := false
	for _, o := range p.OwnerReferences {
		owned = owned || (o.Kind == "Node" && o.Name == p.Spec.NodeName)
	}
	if !owned {
		return ""
	}
	for _, k := range []string{HashAnnotation, MirrorAnnotation} {
		if h := p.Annotations[k]; hashName.MatchString(h) {
			return types.UID(h)
		}
	}
	return ""
}

// podUIDs maps each pod to the UID kubelet names its group after: the
// config hash for a static pod's mirror, the pod's UID otherwise. The API
// server does not reserve the mirror annotations to kubelet, so a claim is
// refused (the pod's own UID used) when the hash is the UID of a pod in the
// API (a regular pod's group: someone else's), or when an older pod
// already claims it (the real mirror is made when kubelet starts the static
// pod).
func podUIDs(pods []*corev1.Pod) map[*corev1.Pod]types.UID {
	out := make(map[*corev1.Pod]types.UID, len(pods))
	uids := map[types.UID]bool{}
	for _, p := range pods {
		uids[p.UID] = true
	}
	claims := map[types.UID]*corev1.Pod{}
	for _, p := range pods {
		out[p] = p.UID
		h := mirrorHash(p)
		if h == "" || uids[h] {
			continue
		}
		if prev, ok := claims[h]; ok && !p.CreationTimestamp.Before(&prev.CreationTimestamp) {
			continue
		} else if ok {
			out[prev] = prev.UID
		}
		claims[h] = p
		out[p] = h
	}
	return out
}
