package netlab

import (
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hbm-dev/hbm/internal/spawn"
)

// Proc is a command run inside a host's namespace and, optionally, a
// cgroup from its first instruction, in a process group of its own.
type Proc struct {
	// Cmd is the command; set Stdin, Stdout, Stderr and Env before Start.
	// Stdout and Stderr should be plain writers (a Buffer): Wait runs in the
	// background.
	Cmd *exec.Cmd

	set       *procSet
	cgroupDir string
	prog      int // index in Cmd.Args of the program the namespace runs
	done      chan struct{}
	waitErr   error
}

// procSet is the lab's running processes: one lifecycle for all of them.
type procSet struct {
	mu     sync.Mutex
	procs  map[*Proc]struct{}
	closed bool
}

func (s *procSet) add(p *Proc) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("netlab: lab closed")
	}
	if s.procs == nil {
		s.procs = map[*Proc]struct{}{}
	}
	s.procs[p] = struct{}{}
	return nil
}

func (s *procSet) remove(p *Proc) {
	s.mu.Lock()
	delete(s.procs, p)
	s.mu.Unlock()
}

// killAll kills every process and refuses new ones.
func (s *procSet) killAll() {
	s.mu.Lock()
	s.closed = true
	ps := make([]*Proc, 0, len(s.procs))
	for p := range s.procs {
		ps = append(ps, p)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Add(1)
		go func() { defer wg.Done(); p.Kill() }()
	}
	wg.Wait()
}

// Command prepares name args to run inside host's namespace (through `ip
// netns exec`, which execs it in place, so the pid is the command's, and
// shows the namespace's /sys) and, if cgroupDir is not "", inside the cgroup
// v2 group at that directory: the child is cloned straight into the group
// (clone3 CLONE_INTO_CGROUP), so every socket it ever creates belongs to it.
//
// A host pinned to CPUs (Config.CPUs) runs it on them.
func (l *Lab) Command(host, cgroupDir, name string, args ...string) *Proc {
	ns := host
	if h := l.hosts[host]; h != nil {
		ns = h.NS
	}
	return l.commandNS(ns, cgroupDir, name, args...).Pin(l.cfg.CPUs[host])
}

// commandNS is Command for a namespace (a switch's, say).
func (l *Lab) commandNS(ns, cgroupDir, name string, args ...string) *Proc {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...)
	return &Proc{Cmd: cmd, set: &l.procs, cgroupDir: cgroupDir, prog: 4, done: make(chan struct{})}
}

// Nice makes the command run at CPU priority n (nice(1): -20 highest, 19
// lowest; 0 leaves it as is). Every thread of the process inherits it. Call
// before Start.
func (p *Proc) Nice(n int) *Proc {
	if n == 0 {
		return p
	}
	// ... nice -n N NAME ARGS: nice runs the program, in the namespace.
	a := p.Cmd.Args
	p.Cmd.Args = append(append(append([]string{}, a[:p.prog]...), "nice", "-n", strconv.Itoa(n)), a[p.prog:]...)
	return p
}

// Start starts the command in a process group of its own. It is killed
// when the caller's process dies (Pdeathsig) and by the lab's Close.
func (p *Proc) Start() error {
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if p.cgroupDir != "" {
		fd, err := unix.Open(p.cgroupDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("netlab: open cgroup %s: %w", p.cgroupDir, err)
		}
		defer unix.Close(fd)
		attr.UseCgroupFD = true
		attr.CgroupFD = fd
	}
	p.Cmd.SysProcAttr = attr
	p.Cmd.WaitDelay = 2 * time.Second
	if err := p.set.add(p); err != nil {
		return err
	}
	if err := spawn.Start(p.Cmd); err != nil {
		p.set.remove(p)
		return fmt.Errorf("netlab: start %v: %w", p.Cmd.Args, err)
	}
	go func() {
		p.waitErr = p.Cmd.Wait()
		p.set.remove(p)
		close(p.done)
	}()
	return nil
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Wait waits for the process to exit and returns its exit error.
func (p *Proc) Wait() error {
	<-p.done
	return p.waitErr
}

// WaitTimeout waits at most d, then kills the process and says it had to.
func (p *Proc) WaitTimeout(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return p.waitErr
	case <-t.C:
		p.Kill()
		return fmt.Errorf("netlab: %v still running after %v: killed", p.Cmd.Args, d)
	}
}

// Signal sends sig to the process.
func (p *Proc) Signal(sig syscall.Signal) error {
	if p.Cmd.Process == nil {
		return errors.New("netlab: not started")
	}
	return p.Cmd.Process.Signal(sig)
}

// Stop asks the process to end (SIGTERM), waits up to grace, then kills it.
func (p *Proc) Stop(grace time.Duration) error {
	if p.Cmd.Process == nil {
		return nil
	}
	select {
	case <-p.done:
		return p.waitErr
	default:
	}
	p.Cmd.Process.Signal(syscall.SIGTERM)
	return p.WaitTimeout(grace)
}

// Kill kills the process's group and waits, bounded, for it.
func (p *Proc) Kill() {
	if p.Cmd.Process == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
	p.Cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
	}
}
