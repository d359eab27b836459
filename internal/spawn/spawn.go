// Package spawn starts child processes from one OS thread that lives as
// long as the process.
//
// Linux sends a child its parent-death signal (SysProcAttr.Pdeathsig) when
// the *thread* that cloned it ends, not the process (prctl(2); Go issue
// 27505). A Go program's threads end when a goroutine that locked its
// thread (to enter a network namespace, say) returns without unlocking it,
// and any thread may earlier have run a goroutine that started a child: the
// child is then killed at random while its parent lives on (a test's
// workload server died that way, its client refused). Start clones every
// child on one locked thread that never ends, so Pdeathsig means what it
// says: the child dies with this process.
package spawn

import (
	"os/exec"
	"runtime"
	"sync"
)

type request struct {
	cmd *exec.Cmd
	err chan<- error
}

var (
	once     sync.Once
	requests chan request
)

// Start is cmd.Start() on the process's spawning thread.
func Start(cmd *exec.Cmd) error {
	once.Do(func() {
		requests = make(chan request)
		go func() {
			// Never unlocked: the thread must not end, nor run anything else.
			runtime.LockOSThread()
			for r := range requests {
				r.err <- r.cmd.Start()
			}
		}()
	})
	errc := make(chan error, 1)
	requests <- request{cmd, errc}
	return <-errc
}

// Run is cmd.Run() with the start on the spawning thread.
func Run(cmd *exec.Cmd) error {
	if err := Start(cmd); err != nil {
		return err
	}
	return cmd.Wait()
}
