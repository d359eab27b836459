package testbed

import (
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Proc is a command run inside one of the testbed's namespaces and,
// optionally, inside a cgroup from its first instruction.
type Proc struct {
	// Cmd is the command; set Stdin, Stdout, Stderr and Env before Start.
	// Stdout and Stderr should be plain writers (a bytes.Buffer, a
	// LineWatcher): Wait runs in the background.
	Cmd *exec.Cmd

	tb        *Testbed
	cgroupDir string
	done      chan struct{}
	waitErr   error
}

// Command prepares name args to run inside network namespace ns (through
// `ip netns exec`, which execs it in place, so the pid is the command's) and,
// if cgroupDir is not empty, inside the cgroup v2 group at that directory:
// the child is cloned straight into the group (clone3 CLONE_INTO_CGROUP), so
// every socket it ever creates belongs to that group.
func (tb *Testbed) Command(ns, cgroupDir, name string, args ...string) *Proc {
	full := append([]string{"netns", "exec", ns, name}, args...)
	cmd := exec.Command("ip", full...)
	return &Proc{Cmd: cmd, tb: tb, cgroupDir: cgroupDir, done: make(chan struct{})}
}

// Start starts the command. The process is killed when the caller's process
// dies (Pdeathsig) and by the testbed's Close.
func (p *Proc) Start() error {
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if p.cgroupDir != "" {
		fd, err := unix.Open(p.cgroupDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("testbed: open cgroup %s: %w", p.cgroupDir, err)
		}
		defer unix.Close(fd)
		attr.UseCgroupFD = true
		attr.CgroupFD = fd
	}
	p.Cmd.SysProcAttr = attr
	p.Cmd.WaitDelay = 2 * time.Second
	p.tb.mu.Lock()
	if p.tb.closed {
		p.tb.mu.Unlock()
		return errors.New("testbed: closed")
	}
	if err := p.Cmd.Start(); err != nil {
		p.tb.mu.Unlock()
		return fmt.Errorf("testbed: start %v: %w", p.Cmd.Args, err)
	}
	p.tb.procs[p] = struct{}{}
	p.tb.mu.Unlock()
	go func() {
		p.waitErr = p.Cmd.Wait()
		p.tb.mu.Lock()
		delete(p.tb.procs, p)
		p.tb.mu.Unlock()
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

// WaitTimeout waits at most d, then kills the process and reports that it
// had to.
func (p *Proc) WaitTimeout(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return p.waitErr
	case <-t.C:
		p.Kill()
		return fmt.Errorf("testbed: %v still running after %v: killed", p.Cmd.Args, d)
	}
}

// Signal sends sig to the process.
func (p *Proc) Signal(sig syscall.Signal) error {
	if p.Cmd.Process == nil {
		return errors.New("testbed: not started")
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

// Kill kills the process (and its process group) and waits, bounded, for it.
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
