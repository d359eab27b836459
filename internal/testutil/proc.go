package testutil

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hbm-dev/hbm/internal/spawn"
)

// LockedBuffer collects a process' output for polling while it runs.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Proc is a background process in its own process group, killed (the whole
// group) at the test's cleanup, also on failure.
type Proc struct {
	Cmd  *exec.Cmd
	Out  *LockedBuffer // stdout and stderr
	done chan struct{}
	err  error
}

// StartProc starts name with args and the environment plus env, in its own
// process group (killed with the test process, too).
func StartProc(t testing.TB, env []string, name string, args ...string) *Proc {
	t.Helper()
	p := &Proc{Cmd: exec.Command(name, args...), Out: &LockedBuffer{}, done: make(chan struct{})}
	p.Cmd.Env = append(os.Environ(), env...)
	p.Cmd.Stdout, p.Cmd.Stderr = p.Out, p.Out
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p.Cmd.WaitDelay = 2 * time.Second
	if err := spawn.Start(p.Cmd); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.err = p.Cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.Kill(syscall.SIGKILL) })
	return p
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Kill sends sig to the process group and waits (at most 15 s, then
// SIGKILL) for the process; it returns what Wait returned.
func (p *Proc) Kill(sig syscall.Signal) error {
	select {
	case <-p.done:
		return p.err
	default:
	}
	syscall.Kill(-p.Cmd.Process.Pid, sig)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("%s: still running 15s after %v: killed", filepath.Base(p.Cmd.Path), sig)
	}
	return p.err
}

// WaitFor polls cond every 10 ms until it holds (true) or d passes (false).
func WaitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// LastLines returns the last n lines of s (for failure messages).
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// EnterCgroup moves this process into the cgroup directory dir (mount is the
// cgroup2 mount, as cgroup.Mount finds it) and returns the move back to the
// group it was in. Sockets made in between belong to dir (a socket keeps
// the cgroup it was created in), as does a BPF test run's socket.
func EnterCgroup(tb testing.TB, mount, dir string) (back func() error) {
	tb.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		tb.Fatal(err)
	}
	var own string
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			own = rest
		}
	}
	if own == "" {
		tb.Fatalf("this process's cgroup2 group: none in %q", b)
	}
	pid := []byte(fmt.Sprint(os.Getpid()))
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), pid, 0); err != nil {
		tb.Fatalf("enter %s: %v", dir, err)
	}
	return func() error {
		if err := os.WriteFile(filepath.Join(mount, own, "cgroup.procs"), pid, 0); err != nil {
			return fmt.Errorf("back to %s: %w", own, err)
		}
		return nil
	}
}
