// Package jsonout holds the schemas of hbm's JSON output, apart from the
// code that produces them, so that the CLI and its readers (the tests, hbm
// eval, scripts) share one definition. Changing a field here changes the
// documented output: keep it compatible.
package jsonout

import "unicode/utf8"

// Group is one limited cgroup in `hbm show --json` (a list of them; "[]"
// when nothing is limited).
//
// Cgroup is the path exactly as the kernel names it when it is valid UTF-8
// (control characters are JSON escapes: "\u001b"). A path that is not
// valid UTF-8 cannot be a JSON string: Cgroup then holds it with each
// invalid byte replaced by U+FFFD (as encoding/json does), and CgroupBytes
// holds its exact bytes (base64 in the JSON); Path gives the exact path in
// both cases.
type Group struct {
	Cgroup      string     `json:"cgroup"`
	CgroupBytes []byte     `json:"cgroup_bytes,omitempty"` // the exact path, only when it is not valid UTF-8
	CgroupID    uint64     `json:"cgroup_id"`
	Removed     bool       `json:"removed,omitempty"`    // the group is gone: hbm prune removes the limit
	Unresolved  bool       `json:"unresolved,omitempty"` // hbm could not find the group's path
	Egress      *Direction `json:"egress"`               // null: no egress limit
	Ingress     *Direction `json:"ingress"`              // null: no ingress limit
}

// NewGroup returns the Group of the cgroup at path (no direction yet).
func NewGroup(path string, id uint64) Group {
	g := Group{Cgroup: path, CgroupID: id}
	if !utf8.ValidString(path) {
		g.CgroupBytes = []byte(path)
		b := make([]byte, 0, len(path)+8)
		for i := 0; i < len(path); {
			r, n := utf8.DecodeRuneInString(path[i:])
			b = utf8.AppendRune(b, r) // RuneError (U+FFFD) for each invalid byte
			i += n
		}
		g.Cgroup = string(b)
	}
	return g
}

// Path is the group's exact path: CgroupBytes when given, else Cgroup.
func (g Group) Path() string {
	if g.CgroupBytes != nil {
		return string(g.CgroupBytes)
	}
	return g.Cgroup
}

// Direction is one direction's limit of a Group and its counters since the
// limit was first set.
type Direction struct {
	RateBps      uint64 `json:"rate_bps"`
	CeilBps      uint64 `json:"ceil_bps,omitempty"`          // most it may take borrowing (absent: rate_bps, no borrowing)
	InForceBps   uint64 `json:"rate_in_force_bps,omitempty"` // the rate in force now: rate_bps, or more borrowed
	Priority     string `json:"priority,omitempty"`          // borrowing class: latency or batch (absent: normal)
	NoDrop       bool   `json:"no_drop,omitempty"`
	Enforced     bool   `json:"enforced"`      // false: a program the limit needs (policing; its assist unless no-pace) is not attached (see hbm show)
	Bytes        uint64 `json:"bytes"`         // wire bytes passed (a GSO packet counts as its segments)
	Packets      uint64 `json:"packets"`       // wire packets passed
	Marked       uint64 `json:"marked"`        // packets given CE
	CWR          uint64 `json:"cwr"`           // packets returned to TCP with the congestion code
	Dropped      uint64 `json:"dropped"`       // packets dropped
	DroppedBytes uint64 `json:"dropped_bytes"` // wire bytes dropped
	Gated        uint64 `json:"gated"`         // new connections whose handshake waited out the backlog
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
	d.Gated -= o.Gated
	return d
}
