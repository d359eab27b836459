package k8s

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/hbm-dev/hbm/internal/dataplane"
	"github.com/hbm-dev/hbm/internal/rate"
)

// OptionPrefix starts the HBM-specific pod annotations. Each is
// hbm.io/<direction>-<option> and carries an option of `hbm set` for that
// direction's limit (the limit itself comes from the standard annotation):
//
//	hbm.io/ingress-no-drop: "true"    # mark only, never drop (incast protection)
//	hbm.io/egress-no-pace: "true"     # police only: no pacing assist
//	hbm.io/egress-loopback: "true"    # police loopback traffic too
//	hbm.io/ingress-mark: "200us"      # thresholds, in time of queue at the rate
//	hbm.io/egress-burst: "8ms"
//	hbm.io/egress-guarantee: "300M"   # guaranteed; the bandwidth annotation is then the ceiling
//	hbm.io/priority: "latency"        # the pod's, both directions: who borrows first
//
// Options: no-drop, no-pace, loopback (true/false); burst, pace, mark,
// drop-large, drop-small (durations); guarantee (a quantity, as the
// bandwidth annotation: the pod is guaranteed it and borrows up to its
// bandwidth annotation what the other groups under the nearest limited
// group above it leave). An option for a direction without a bandwidth
// annotation has no effect. One annotation names no direction,
// hbm.io/priority (latency, normal or batch: `hbm set --priority`, the
// daemon file's priority:), since a group has one priority: it applies to
// both directions' limits.
const OptionPrefix = "hbm.io/"

// PriorityAnnotation is the pod's borrowing priority (option "priority").
const PriorityAnnotation = OptionPrefix + "priority"

type optionKind int

const (
	boolOption optionKind = iota
	durationOption
	rateOption
)

// options are the option names after hbm.io/<direction>-.
var options = map[string]optionKind{
	"no-drop": boolOption, "no-pace": boolOption, "loopback": boolOption,
	"burst": durationOption, "pace": durationOption, "mark": durationOption,
	"drop-large": durationOption, "drop-small": durationOption,
	"guarantee": rateOption,
}

// dirOptionNames lists the options of hbm.io/<direction>-, for messages.
const dirOptionNames = "burst, drop-large, drop-small, guarantee, loopback, mark, no-drop, no-pace, pace"

// directionless is the message for a priority written per direction.
func directionless(k string) string {
	return fmt.Sprintf("%s: a pod's priority applies to both directions: write %s", k, PriorityAnnotation)
}

// dirOptions are the options given for one direction.
type dirOptions struct {
	limit       dataplane.Limit // Loopback, NoDrop, NoPace
	guarantee   rate.Rate       // 0: none (the bandwidth is a hard cap)
	guaranteed  bool            // guarantee given by an annotation
	prioritySet bool            // limit.Priority given by an annotation
	th          rate.Thresholds // the defaults, with the ones given replaced
	given       map[string]bool // the threshold options given
	ingress     bool            // the ingress direction's options
}

func defaultOptions() dirOptions {
	return dirOptions{th: rate.Thresholds{Burst: rate.DefaultBurst, Pace: rate.DefaultPace, Mark: rate.DefaultMark,
		DropLarge: rate.DefaultDropLarge, DropSmall: rate.DefaultDropSmall}}
}

// parseOptions reads every hbm.io/ annotation; any unknown name or bad value
// is an error (a misspelt option must not pass silently).
func parseOptions(annotations map[string]string) (egress, ingress dirOptions, err error) {
	egress, ingress = defaultOptions(), defaultOptions()
	ingress.ingress = true
	keys := make([]string, 0, len(annotations))
	for k := range annotations {
		if strings.HasPrefix(k, OptionPrefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys) // the first error is the same every time
	for _, k := range keys {
		v := annotations[k]
		name := strings.TrimPrefix(k, OptionPrefix)
		var o *dirOptions
		switch {
		case k == PriorityAnnotation:
			pr, err := dataplane.ParsePriority(v)
			if err != nil {
				return egress, ingress, fmt.Errorf("%s: %w", k, err)
			}
			egress.limit.Priority, ingress.limit.Priority = pr, pr
			egress.prioritySet, ingress.prioritySet = true, true
			continue
		case strings.HasPrefix(name, "egress-"):
			o, name = &egress, strings.TrimPrefix(name, "egress-")
		case strings.HasPrefix(name, "ingress-"):
			o, name = &ingress, strings.TrimPrefix(name, "ingress-")
		default:
			return egress, ingress, fmt.Errorf("%s: unknown annotation: want %segress-OPTION or %singress-OPTION", k, OptionPrefix, OptionPrefix)
		}
		kind, ok := options[name]
		if name == "priority" {
			return egress, ingress, errors.New(directionless(k))
		}
		if !ok {
			return egress, ingress, fmt.Errorf("%s: unknown option %q (options: %s)", k, name, dirOptionNames)
		}
		switch kind {
		case boolOption:
			b, err := strconv.ParseBool(v)
			if err != nil {
				return egress, ingress, fmt.Errorf("%s: want \"true\" or \"false\", not %q", k, v)
			}
			*map[string]*bool{"no-drop": &o.limit.NoDrop, "no-pace": &o.limit.NoPace, "loopback": &o.limit.Loopback}[name] = b
		case durationOption:
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return egress, ingress, fmt.Errorf("%s: want a duration such as 4ms or 500us, not %q", k, v)
			}
			*map[string]*time.Duration{"burst": &o.th.Burst, "pace": &o.th.Pace, "mark": &o.th.Mark,
				"drop-large": &o.th.DropLarge, "drop-small": &o.th.DropSmall}[name] = d
			if o.given == nil {
				o.given = map[string]bool{}
			}
			o.given[name] = true
		case rateOption:
			r, err := parseGuarantee(v)
			if err != nil {
				return egress, ingress, fmt.Errorf("%s: %w", k, err)
			}
			o.guarantee, o.guaranteed = r, true
		}
	}
	return egress, ingress, nil
}

// parseGuarantee reads a guarantee as the bandwidth annotations are read (a
// Kubernetes quantity, bits per second: "300M"), within hbm's range.
func parseGuarantee(v string) (rate.Rate, error) {
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return 0, fmt.Errorf("want a quantity such as 300M, not %q", v)
	}
	n := q.Value()
	if n < int64(rate.Min) || n > int64(rate.Max) {
		return 0, fmt.Errorf("%s is outside the rates hbm enforces (%v to %v)", q.String(), rate.Min, rate.Max)
	}
	return rate.Rate(n), nil
}

// build makes the data plane limit for rate r (the bandwidth annotation's)
// with these options, as `hbm set` and the configuration file do
// (thresholds fitted to the rate). With a guarantee, the limit's rate is the
// guarantee and r its ceiling.
func (o dirOptions) build(r rate.Rate) (dataplane.Limit, error) {
	l := o.limit
	l.Rate = r
	if o.guarantee != 0 {
		if o.guarantee > r {
			return l, fmt.Errorf("guarantee %v above the bandwidth %v (its ceiling)", o.guarantee, r)
		}
		if o.guarantee < r { // equal: a hard cap, as the data plane reads it back (Ceil 0)
			l.Rate, l.Ceil = o.guarantee, r
			r = o.guarantee
		}
	}
	t := o.th
	if o.ingress && l.NoDrop { // incast protection: its own defaults
		t = t.Incast(o.given["mark"], o.given["burst"])
	}
	l.Thresholds = t.Fit(r)
	l.MinInflight = dataplane.DefaultMinInflight
	if err := l.Thresholds.Validate(); err != nil {
		return l, err
	}
	if err := l.Validate(); err != nil {
		return l, err
	}
	return l, nil
}
