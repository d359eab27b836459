package netlab

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hbm-dev/hbm/internal/jsonout"
	"github.com/hbm-dev/hbm/internal/rate"
	"github.com/hbm-dev/hbm/internal/spawn"
)

// HBM drives an hbm binary through its CLI (set, unset, show --json).
type HBM struct {
	Bin string
	// PinDir, if set, is passed as --pin-dir: the state of this HBM is kept
	// apart from the machine's (used by hbm eval).
	PinDir string
}

func (h HBM) run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if h.PinDir != "" {
		args = append(args, "--pin-dir", h.PinDir)
	}
	cmd := exec.CommandContext(ctx, h.Bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlives its caller
	var stdout, stderr Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second
	if err := spawn.Run(cmd); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", h.Bin, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// Run runs hbm with args (bounded to 30s) and returns its standard output.
func (h HBM) Run(args ...string) (string, error) { return h.run(args...) }

// Set limits cgroup's egress to rate (tc units, e.g. "200mbit"), with extra
// `hbm set` flags (e.g. "--no-pace").
func (h HBM) Set(cgroup, rate string, extra ...string) error {
	_, err := h.run(append([]string{"set", cgroup, "--egress", rate}, extra...)...)
	return err
}

// Unset removes cgroup's limits.
func (h HBM) Unset(cgroup string) error {
	_, err := h.run("unset", cgroup)
	return err
}

// Show returns `hbm show --json`.
func (h HBM) Show() ([]jsonout.Group, error) {
	out, err := h.run("show", "--json")
	if err != nil {
		return nil, err
	}
	var st []jsonout.Group
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return nil, fmt.Errorf("hbm show --json: %w (output %q)", err, out)
	}
	return st, nil
}

// Rates returns every limit in `hbm show --json` as "CGROUP egress" or
// "CGROUP ingress" -> rate in bits/s.
func (h HBM) Rates() (map[string]uint64, error) {
	st, err := h.Show()
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, g := range st {
		if g.Egress != nil {
			out[g.Cgroup+" egress"] = g.Egress.RateBps
		}
		if g.Ingress != nil {
			out[g.Cgroup+" ingress"] = g.Ingress.RateBps
		}
	}
	return out, nil
}

// Egress returns cgroup's egress counters from `hbm show --json` (nil, nil
// when cgroup has no egress limit).
func (h HBM) Egress(cgroup string) (*jsonout.Direction, error) {
	g, err := h.group(cgroup)
	if g == nil {
		return nil, err
	}
	return g.Egress, nil
}

// group returns cgroup's entry in `hbm show --json` (nil, nil when it has no
// limit).
func (h HBM) group(cgroup string) (*jsonout.Group, error) {
	st, err := h.Show()
	if err != nil {
		return nil, err
	}
	want := filepath.Clean("/" + cgroup)
	for i := range st {
		if filepath.Clean("/"+st[i].Cgroup) == want {
			return &st[i], nil
		}
	}
	return nil, nil
}

// SetIngress limits cgroup's ingress to rate, with extra `hbm set` flags
// (e.g. "--no-drop").
func (h HBM) SetIngress(cgroup, rate string, extra ...string) error {
	_, err := h.run(append([]string{"set", cgroup, "--ingress", rate}, extra...)...)
	return err
}

// UnsetDir removes one direction ("egress" or "ingress") of cgroup's limits.
func (h HBM) UnsetDir(cgroup, dir string) error {
	_, err := h.run("unset", cgroup, "--"+dir)
	return err
}

// Ingress returns cgroup's ingress counters from `hbm show --json` (nil,
// nil when cgroup has no ingress limit).
func (h HBM) Ingress(cgroup string) (*jsonout.Direction, error) {
	g, err := h.group(cgroup)
	if g == nil {
		return nil, err
	}
	return g.Ingress, nil
}

// ParseRate parses a rate in tc units (internal/rate) into bits/s.
func ParseRate(s string) (uint64, error) {
	r, err := rate.Parse(s)
	return uint64(r), err
}
