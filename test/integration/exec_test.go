package integration

// hbm exec: exit status, signals passed through, the group and its limits
// removed after a normal end, and, after hbm is SIGKILLed, the command
// killed with it and the next hbm command cleaning up.

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hbm-dev/hbm/internal/cgroup"
	"github.com/hbm-dev/hbm/internal/execcg"
	"github.com/hbm-dev/hbm/internal/testutil"
)

type execLab struct {
	t      *testing.T
	bin    string
	pinDir string
	mnt    string
	groups map[string]bool // the run groups this test saw, removed at cleanup
}

func newExecLab(t *testing.T) *execLab {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: integration test (root, BPF, cgroups)")
	}
	testutil.RequireRoot(t)
	mnt, err := cgroup.Mount()
	if err != nil {
		testutil.Missing(t, "cgroup2", err)
	}
	l := &execLab{t: t, bin: testutil.HBMBinary(t), pinDir: "/sys/fs/bpf/hbm-test-exec", mnt: mnt, groups: map[string]bool{}}
	os.RemoveAll(l.pinDir)
	t.Cleanup(func() {
		for g := range l.groups {
			os.WriteFile(filepath.Join(mnt, g, "cgroup.kill"), []byte("1"), 0)
			cgroup.RemoveWait(g, 50, 50*time.Millisecond)
		}
		os.RemoveAll(l.pinDir)
		syscall.Rmdir(filepath.Join(mnt, execcg.Parent)) // only if empty: other runs' groups stay
	})
	return l
}

// start starts hbm exec ARGS in its own process group; its stdout is read
// line by line.
func (l *execLab) start(args ...string) (*exec.Cmd, *bufio.Reader) {
	l.t.Helper()
	cmd := exec.Command(l.bin, append([]string{"exec"}, args...)...)
	cmd.Env = append(os.Environ(), "HBM_PIN_DIR="+l.pinDir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		l.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		l.t.Fatal(err)
	}
	l.t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
	})
	return cmd, bufio.NewReader(out)
}

// line reads one line, bounded to 10 s.
func (l *execLab) line(r *bufio.Reader) string {
	l.t.Helper()
	ch := make(chan string, 1)
	go func() {
		s, _ := r.ReadString('\n')
		ch <- strings.TrimSpace(s)
	}()
	select {
	case s := <-ch:
		return s
	case <-time.After(10 * time.Second):
		l.t.Fatal("hbm exec: no output line within 10s")
		return ""
	}
}

// wait waits (bounded) and returns the exit status, or the signal.
func (l *execLab) wait(cmd *exec.Cmd) (int, syscall.Signal) {
	l.t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		l.t.Fatal("hbm exec still running after 20s")
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		ws := ee.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			return -1, ws.Signal()
		}
		return ws.ExitStatus(), 0
	}
	if err != nil {
		l.t.Fatal(err)
	}
	return 0, 0
}

// hbm runs another hbm command (30 s bound).
func (l *execLab) hbm(args ...string) string {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, l.bin, args...)
	cmd.Env = append(os.Environ(), "HBM_PIN_DIR="+l.pinDir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		l.t.Fatalf("hbm %v: %v: %s", args, err, out)
	}
	return string(out)
}

// groupOf reads the run group the command announced ("group PATH").
func (l *execLab) groupOf(r *bufio.Reader) string {
	l.t.Helper()
	s := l.line(r)
	g, ok := strings.CutPrefix(s, "0::")
	if !ok || !strings.HasPrefix(g, execcg.Parent+"/") {
		l.t.Fatalf("command runs in cgroup %q, want one under %s", s, execcg.Parent)
	}
	l.groups[g] = true
	return g
}

func (l *execLab) gone(g string) bool {
	_, err := os.Stat(filepath.Join(l.mnt, g))
	return errors.Is(err, os.ErrNotExist)
}

// The command prints its cgroup (the unified hierarchy's line), its pid,
// then runs the rest of the script. The tests signal the command as soon as
// they have read its pid: whatever the command must have done before it
// is signalled (a trap) goes before the prelude.
const execPrelude = `grep '^0::' /proc/self/cgroup; echo $$; `

func TestExecStatusAndCleanup(t *testing.T) {
	l := newExecLab(t)
	cmd, r := l.start("--egress", "100mbit", "--ingress", "200mbit", "--", "sh", "-c", execPrelude+`while :; do sleep 0.05; done`)
	g := l.groupOf(r)
	l.line(r)
	show := l.hbm("show")
	if !strings.Contains(show, g) || !strings.Contains(show, "100mbit") || !strings.Contains(show, "200mbit") {
		t.Errorf("while running, hbm show lacks %s's limits:\n%s", g, show)
	}
	syscall.Kill(cmd.Process.Pid, syscall.SIGUSR1) // passed on: sh's default action ends it
	code, sig := l.wait(cmd)
	if code != 128+int(syscall.SIGUSR1) || sig != 0 {
		t.Errorf("command killed by SIGUSR1: hbm exec ended with status %d signal %v, want status %d", code, sig, 128+int(syscall.SIGUSR1))
	}
	if !l.gone(g) {
		t.Errorf("group %s left after the command ended", g)
	}
	if show := l.hbm("show"); strings.Contains(show, g) || !strings.Contains(show, "no limits set") {
		t.Errorf("limits left after the command ended:\n%s", show)
	}

	// Exit statuses pass through; hbm's own failures are 125-127.
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"--", "sh", "-c", "exit 0"}, 0},
		{[]string{"--egress", "10mbit", "--", "sh", "-c", "exit 7"}, 7},
		{[]string{"--", "/nonexistent/command"}, execcg.ExitNotFound},
		{[]string{"--", "/proc/self/stat"}, execcg.ExitCannotRun},
	} {
		cmd, _ := l.start(c.args...)
		if code, sig := l.wait(cmd); code != c.want || sig != 0 {
			t.Errorf("hbm exec %v: status %d signal %v, want %d", c.args, code, sig, c.want)
		}
	}
	cmd = exec.Command(l.bin, "exec", "--egress", "1gbit", "sh") // no --: usage error, nothing run
	if err := cmd.Run(); err == nil || cmd.ProcessState.ExitCode() != 2 {
		t.Errorf("hbm exec without --: %v, want exit 2", err)
	}
}

func TestExecSignals(t *testing.T) {
	l := newExecLab(t)
	// A command that handles SIGTERM: hbm passes it on and exits with the
	// command's status. The trap is set before the prelude announces the
	// command: the signal is sent once the pid is read, and a SIGTERM that
	// came before the trap would kill sh instead.
	cmd, r := l.start("--egress", "100mbit", "--", "sh", "-c", `trap 'exit 42' TERM; `+execPrelude+`while :; do sleep 0.05; done`)
	g := l.groupOf(r)
	l.line(r)
	syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
	if code, sig := l.wait(cmd); code != 42 || sig != 0 {
		t.Errorf("SIGTERM to hbm, trapped by the command: status %d signal %v, want 42", code, sig)
	}
	if !l.gone(g) {
		t.Errorf("group %s left", g)
	}
	// One that does not: hbm ends killed by the same signal.
	for _, s := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		cmd, r := l.start("--", "sh", "-c", execPrelude+`exec sleep 30`)
		g := l.groupOf(r)
		l.line(r)
		syscall.Kill(cmd.Process.Pid, s)
		code, sig := l.wait(cmd)
		switch {
		case signal.Ignored(s):
			// Started with s ignored (nohup for SIGHUP): hbm inherits
			// that, cannot die by it, and exits 128+N as a shell does.
			if code != 128+int(s) {
				t.Errorf("%v to hbm (ignored when started): status %d signal %v, want status %d", s, code, sig, 128+int(s))
			}
		case sig != s:
			t.Errorf("%v to hbm: status %d signal %v, want killed by %v", s, code, sig, s)
		}
		if !l.gone(g) {
			t.Errorf("group %s left", g)
		}
	}
}

// TestExecKilled: hbm SIGKILLed takes its command with it; its group and
// limits stay until the next hbm command, which removes them.
func TestExecKilled(t *testing.T) {
	l := newExecLab(t)
	cmd, r := l.start("--egress", "100mbit", "--", "sh", "-c", execPrelude+`exec sleep 30`)
	g := l.groupOf(r)
	pid, err := strconv.Atoi(l.line(r))
	if err != nil {
		t.Fatal(err)
	}
	syscall.Kill(cmd.Process.Pid, syscall.SIGKILL) // hbm only, not its group
	if _, sig := l.wait(cmd); sig != syscall.SIGKILL {
		t.Fatalf("hbm not killed: %v", sig)
	}
	if !testutil.WaitFor(5*time.Second, func() bool { return syscall.Kill(pid, 0) != nil }) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Errorf("command (pid %d) still running 5s after hbm was killed", pid)
	}
	if l.gone(g) {
		t.Fatalf("group %s gone before any hbm cleaned up: the test proves nothing", g)
	}
	// show only reads: it must leave the group (the run could be alive in
	// another PID namespace for all show knows).
	l.hbm("show")
	if l.gone(g) {
		t.Fatalf("hbm show removed group %s: a read-only command cleaned up", g)
	}
	out := l.hbm("prune")
	if !strings.Contains(out, "removed "+g) {
		t.Errorf("hbm prune did not clean up after the killed hbm exec:\n%s", out)
	}
	if out := l.hbm("show"); !strings.Contains(out, "no limits set") {
		t.Errorf("limits left after the clean-up:\n%s", out)
	}
	if !l.gone(g) {
		t.Errorf("group %s left after the next hbm command", g)
	}
}
