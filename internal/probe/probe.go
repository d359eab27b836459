// Package probe finds out whether the running kernel has what HBM needs:
// privileges, cgroup v2, bpffs, BTF, cgroup_skb programs with the egress
// congestion return codes, the helpers and map features the dataplane uses,
// and (optionally) struct_ops for the BPF congestion control.
//
// Run returns one Result per check; rendering them (WriteTable, WriteJSON)
// and turning them into an exit status (Err) are separate so that both can be
// tested without a kernel.
package probe

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// Level says how much a check matters.
type Level string

const (
	// Required: hbm cannot limit bandwidth without it.
	Required Level = "required"
	// Optional: a feature some subcommand needs (e.g. `hbm cc`).
	Optional Level = "optional"
	// Info: reported for context; never a failure.
	Info Level = "info"
)

// Result is the outcome of one check.
type Result struct {
	ID     string `json:"id"`             // stable key for scripts, e.g. "spin_lock"
	Name   string `json:"name"`           // what the table shows
	Level  Level  `json:"level"`          // required, optional or info
	OK     bool   `json:"ok"`             // present / usable
	Detail string `json:"detail"`         // what was found, or why it is missing
	Hint   string `json:"hint,omitempty"` // what to do about a missing feature
}

// Missing reports whether r is a failed required or optional check.
// Informational results are never missing.
func (r Result) Missing() bool { return !r.OK && r.Level != Info }

// Check is one probe.
type Check struct {
	ID    string
	Name  string
	Level Level
	// Run returns what was found (ok) or an error saying what is missing,
	// and optionally a hint for the user.
	Run func() (detail, hint string, err error)
}

// Checks is the list Run goes through, in display order.
func Checks() []Check {
	return []Check{
		{"kernel", "kernel", Info, checkKernel},
		{"privileges", "privileges", Required, checkPrivileges},
		{"sys_ptrace", "other namespaces' sockets", Optional, checkSysPtrace},
		{"cgroup2", "cgroup v2", Required, checkCgroup2},
		{"bpffs", "bpffs", Required, checkBPFFS},
		{"btf", "kernel BTF", Required, checkBTF},
		{"cgroup_skb", "cgroup_skb programs", Required, checkCgroupSKB},
		{"egress_cn", "egress congestion return", Required, checkEgressCongestion},
		{"helpers", "cgroup_skb helpers", Required, checkHelpers},
		{"spin_lock", "bpf_spin_lock in hash map", Required, checkSpinLock},
		{"cgroup_level", "cgroup iterator (levels)", Required, checkCgroupLevel},
		{"cgroup_link", "cgroup BPF links", Required, checkCgroupLink},
		{"programs", "HBM's programs verified", Required, checkPrograms},
		{"struct_ops", "struct_ops TCP CC", Optional, checkStructOps},
		{"bpf_stats", "bpf_stats_enabled", Optional, checkBPFStats},
		{"tcp_cc", "TCP congestion control", Info, checkTCPCC},
		{"tcp_ecn", "TCP ECN", Info, checkTCPECN},
	}
}

// Run probes the running kernel with every check.
func Run() []Result {
	// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK; newer ones
	// (memcg accounting) make this a no-op. A failure shows up in the checks.
	_ = rlimit.RemoveMemlock()
	return RunChecks(Checks())
}

// RunChecks runs the given checks in order. A check that panics is reported
// as failed rather than taking the caller down.
func RunChecks(checks []Check) []Result {
	out := make([]Result, 0, len(checks))
	for _, c := range checks {
		out = append(out, runOne(c))
	}
	return out
}

func runOne(c Check) (r Result) {
	r = Result{ID: c.ID, Name: c.Name, Level: c.Level}
	defer func() {
		if p := recover(); p != nil {
			r.OK = false
			r.Detail = fmt.Sprintf("probe panicked: %v", p)
		}
	}()
	detail, hint, err := c.Run()
	if err != nil {
		r.Detail = err.Error()
		if detail != "" {
			r.Detail = detail + ": " + r.Detail
		}
		r.Hint = hint
		if c.ID != "privileges" && permissionDenied(err) {
			// Not evidence that the kernel lacks the feature.
			r.Detail = "cannot probe without privileges: " + r.Detail
			r.Hint = "run hbm check as root"
		}
		return r
	}
	r.OK = true
	r.Detail = detail
	r.Hint = hint
	return r
}

func permissionDenied(err error) bool {
	return errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES)
}

// Err turns results into the exit status of `hbm check`: an error naming the
// missing required features, or nil when all are present (missing optional
// features do not fail the check).
func Err(results []Result) error {
	var names []string
	for _, r := range results {
		if r.Level == Required && !r.OK {
			names = append(names, r.Name)
		}
	}
	switch len(names) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("1 required feature missing (%s)", names[0])
	default:
		return fmt.Errorf("%d required features missing (%s)", len(names), strings.Join(names, ", "))
	}
}

// Counts returns how many required and optional checks failed.
func Counts(results []Result) (required, optional int) {
	for _, r := range results {
		if r.OK {
			continue
		}
		switch r.Level {
		case Required:
			required++
		case Optional:
			optional++
		}
	}
	return required, optional
}
