package integration

// hbm run with exactly the capabilities its systemd unit and DaemonSet ship,
// as a pod sees the host: no /run/netns of the host's (the DaemonSet mounts
// none), the limited group's processes in another network namespace.

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gopkg.in/yaml.v3"

	"github.com/hbm-dev/hbm/internal/spawn"
	"github.com/hbm-dev/hbm/internal/testutil"
)

// shippedCaps returns the capabilities (lower case, without CAP_) of
// deploy/systemd/hbm.service's CapabilityBoundingSet, and checks that the
// DaemonSet adds the same ones.
func shippedCaps(t *testing.T) []string {
	t.Helper()
	unit, err := os.ReadFile("../../deploy/systemd/hbm.service")
	if err != nil {
		t.Fatal(err)
	}
	var fromUnit []string
	for _, line := range strings.Split(string(unit), "\n") {
		if v, ok := strings.CutPrefix(line, "CapabilityBoundingSet="); ok {
			for _, c := range strings.Fields(v) {
				fromUnit = append(fromUnit, strings.ToLower(strings.TrimPrefix(c, "CAP_")))
			}
		}
	}
	ds, err := os.ReadFile("../../deploy/kubernetes/daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Name            string
						SecurityContext struct {
							Capabilities struct{ Add, Drop []string }
						} `yaml:"securityContext"`
					}
				}
			}
		}
	}
	if err := yaml.Unmarshal(ds, &d); err != nil {
		t.Fatalf("daemonset.yaml: %v", err)
	}
	var fromDS []string
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == "hbm" {
			if !slices.Equal(c.SecurityContext.Capabilities.Drop, []string{"ALL"}) {
				t.Fatalf("daemonset.yaml drops %v, want [ALL]", c.SecurityContext.Capabilities.Drop)
			}
			for _, a := range c.SecurityContext.Capabilities.Add {
				fromDS = append(fromDS, strings.ToLower(a))
			}
		}
	}
	slices.Sort(fromUnit)
	slices.Sort(fromDS)
	if len(fromUnit) == 0 || !slices.Equal(fromUnit, fromDS) {
		t.Fatalf("the unit ships capabilities %v, the DaemonSet %v: want the same, non-empty", fromUnit, fromDS)
	}
	return fromUnit
}

// capRun is one hbm run with a capability set.
type capRun struct {
	code           int
	stdout, stderr string
}

// runWithCaps runs hbm args with exactly caps (bounding, inheritable and
// ambient sets, no new privileges, as the unit's CapabilityBoundingSet and
// NoNewPrivileges do), in a mount namespace of its own where /run/netns is
// empty: a pod sees none of the host's named network namespaces. With
// pidns, also in a PID namespace of its own with its own /proc: a pod
// without hostPID.
func runWithCaps(t *testing.T, l *egLab, caps []string, pidns bool, args ...string) capRun {
	t.Helper()
	set := "-all"
	for _, c := range caps {
		set += ",+" + c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	script := `mount --make-rprivate / && mount -t tmpfs -o size=64k hbm-test-no-netns /run/netns && `
	flags := uintptr(unix.CLONE_NEWNS)
	if pidns {
		script += `mount -t proc proc /proc && `
		flags |= unix.CLONE_NEWPID
	}
	script +=
		`exec setpriv --no-new-privs --inh-caps=` + set + ` --ambient-caps=` + set + ` --bounding-set=` + set + ` -- "$0" "$@"`
	cmd := exec.CommandContext(ctx, "sh", append([]string{"-c", script, l.bin}, append(args, "--pin-dir", l.hbm.PinDir)...)...)
	cmd.SysProcAttr = &unix.SysProcAttr{Cloneflags: flags, Pdeathsig: unix.SIGKILL}
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	cmd.WaitDelay = time.Second
	err := spawn.Run(cmd)
	r := capRun{stdout: so.String(), stderr: se.String()}
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("hbm %v with capabilities %v: %v", args, caps, err)
		}
		r.code = ee.ExitCode()
	}
	t.Logf("hbm %s with %v (own PID namespace: %v): exit %d, stderr %q", strings.Join(args, " "), caps, pidns, r.code, r.stderr)
	return r
}

// pacingCaps returns the pacing caps (bits/s; 0: none) of the sender's
// established connections to the receiver, as ss reports them.
func pacingCaps(t *testing.T, l *egLab) []float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", l.tb.SenderNS, "ss", "-tinH", "state", "established",
		"dst", l.tb.ReceiverIP4.String()).CombinedOutput()
	if err != nil {
		t.Fatalf("ss: %v: %s", err, out)
	}
	var cs []float64
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.Contains(line, "bytes_acked") {
			continue // the address line of a socket, not its info line
		}
		cap := 0.0
		if m := pacingCapRE.FindStringSubmatch(line); m != nil {
			cap, _ = strconv.ParseFloat(m[1], 64)
		}
		cs = append(cs, cap)
	}
	return cs
}

// notWalkedRE finds the walker's warning that it could not enter some
// network namespace.
var notWalkedRE = regexp.MustCompile(`network namespaces not walked.*CAP_SYS_PTRACE`)

// TestWalkerShippedCaps: hbm with exactly the capabilities the unit and the
// DaemonSet ship, and no view of the host's named network namespaces,
// reaches the connections a limited group opened before its limit in
// another network namespace (as root with every capability: a container's
// processes hold capabilities hbm does not) — `set` caps their pacing and
// `unset` lifts the caps, without a warning. With one capability fewer
// (CAP_SYS_PTRACE), or in a PID namespace of its own (a DaemonSet without
// hostPID), both say that they did not reach them.
func TestWalkerShippedCaps(t *testing.T) {
	l := egSetup(t, "shipcaps")
	l.hbm.PinDir = "/sys/fs/bpf/hbm-test-shipcaps"
	os.RemoveAll(l.hbm.PinDir)
	t.Cleanup(func() { os.RemoveAll(l.hbm.PinDir) }) // before removeGroups (LIFO): unpinning detaches
	for _, c := range []string{"ss", "setpriv", "mount"} {
		testutil.RequireCommand(t, c)
	}
	caps := shippedCaps(t)
	group, dir := l.cgroup(t, "w")
	const rate, rateBps = "200mbit", 200e6
	capped := func(cs []float64) int {
		n := 0
		for _, c := range cs {
			if c > 0 && c <= 1.5*rateBps {
				n++
			}
		}
		return n
	}

	// Streams from processes of the group in the sender's namespace,
	// connected before the limit: only the walker can reach them.
	startLoad(t, l, dir, "cubic", egStreams, 0)
	time.Sleep(time.Second)
	if before := pacingCaps(t, l); len(before) < egStreams || capped(before) != 0 {
		t.Fatalf("before any limit: sender connections with pacing caps %v, want >= %d uncapped", before, egStreams)
	}

	if r := runWithCaps(t, l, caps, false, "set", group, "--egress", rate); r.code != 0 || strings.Contains(r.stderr, "warning") {
		t.Fatalf("hbm set %s --egress %s with the shipped capabilities %v: exit %d, stderr %q; want 0 without warnings",
			group, rate, caps, r.code, r.stderr)
	}
	var after []float64
	for i := 0; i < 30; i++ { // bounded: 3 s
		time.Sleep(100 * time.Millisecond)
		if after = pacingCaps(t, l); capped(after) >= egStreams {
			break
		}
	}
	t.Logf("pacing caps (bit/s) after hbm set with %v: %v", caps, after)
	if capped(after) < egStreams {
		t.Fatalf("%d of the group's %d streams capped at <= 1.5x %s after hbm set with the shipped capabilities %v (caps %v): the walker did not reach them",
			capped(after), egStreams, rate, caps, after)
	}

	if r := runWithCaps(t, l, caps, false, "unset", group); r.code != 0 || strings.Contains(r.stderr, "warning") {
		t.Fatalf("hbm unset %s with the shipped capabilities %v: exit %d, stderr %q; want 0 without warnings", group, caps, r.code, r.stderr)
	}
	// The unset walk lifts them at once: no program is attached any more to
	// do it later.
	if left := pacingCaps(t, l); capped(left) != 0 {
		t.Errorf("pacing caps (bit/s) after hbm unset with the shipped capabilities %v: %v, want none: the walker did not release them", caps, left)
	}

	// One capability fewer, or no view of the host's processes: the walk
	// cannot enter the sender's namespace, and set and unset say so.
	fewer := slices.DeleteFunc(slices.Clone(caps), func(c string) bool { return c == "sys_ptrace" })
	for _, tc := range []struct {
		caps  []string
		pidns bool
		want  *regexp.Regexp
	}{
		{fewer, false, notWalkedRE},
		{caps, true, regexp.MustCompile(`network namespaces not walked: a process of .* outside hbm's PID namespace.*hostPID`)},
	} {
		if len(tc.caps) == len(caps) && !tc.pidns {
			continue // nothing shipped for it: the case above covered it
		}
		for _, args := range [][]string{{"set", group, "--egress", rate}, {"unset", group}} {
			r := runWithCaps(t, l, tc.caps, tc.pidns, args...)
			if r.code != 0 || !tc.want.MatchString(r.stderr) {
				t.Errorf("hbm %s with capabilities %v (own PID namespace: %v): exit %d, stderr %q; want 0 with a warning matching %q",
					strings.Join(args, " "), tc.caps, tc.pidns, r.code, r.stderr, tc.want)
			}
		}
	}
}
