// Package jsonout holds the schemas of hbm's JSON output, apart from the
// code that produces them, so that the CLI and its readers (the tests, hbm
// eval, scripts) share one definition. Changing a field here changes the
// documented output: keep it compatible.
package jsonout

// Group is one limited cgroup in `hbm show --json` (a list of them; "[]"
// when nothing is limited).
type Group struct {
	Cgroup     string     `json:"cgroup"`
	CgroupID   uint64     `json:"cgroup_id"`
	Removed    bool       `json:"removed,omitempty"`    // the group is gone: hbm prune removes the limit
	Unresolved bool       `json:"unresolved,omitempty"` // hbm could not find the group's path
	Egress     *Direction `json:"egress"`               // null: no egress limit
	Ingress    *Direction `json:"ingress"`              // null: no ingress limit
}

// Direction is one direction's limit of a Group and its counters since the
// limit was first set.
type Direction struct {
	RateBps      uint64 `json:"rate_bps"`
	NoDrop       bool   `json:"no_drop,omitempty"`
	Enforced     bool   `json:"enforced"`      // false: a program the limit needs (policing; its assist unless no-pace) is not attached (see hbm show)
	Bytes        uint64 `json:"bytes"`         // wire bytes passed (a GSO packet counts as its segments)
	Packets      uint64 `json:"packets"`       // wire packets passed
	Marked       uint64 `json:"marked"`        // packets given CE
	CWR          uint64 `json:"cwr"`           // packets returned to TCP with the congestion code
	Dropped      uint64 `json:"dropped"`       // packets dropped
	DroppedBytes uint64 `json:"dropped_bytes"` // wire bytes dropped
}

// Sub returns d's counters less o's (the counters over an interval); the
// limit's fields are d's.
func (d Direction) Sub(o Direction) Direction {
	d.Bytes -= o.Bytes
	d.Packets -= o.Packets
	d.Marked -= o.Marked
	d.CWR -= o.CWR
	d.Dropped -= o.Dropped
	d.DroppedBytes -= o.DroppedBytes
	return d
}
