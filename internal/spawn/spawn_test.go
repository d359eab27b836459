package spawn

import (
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// sleeper is a child that outlives the test unless a signal ends it.
func sleeper(t *testing.T) *exec.Cmd {
	t.Helper()
	path, err := exec.LookPath("sleep")
	if err != nil {
		t.Skipf("no sleep: %v", err)
	}
	cmd := exec.Command(path, "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// startOnDyingThread starts cmd with start on a thread that then ends, as
// a goroutine that entered a network namespace and never left does, and
// reports whether the child was still running a second later.
func startOnDyingThread(t *testing.T, start func(*exec.Cmd) error) (alive bool) {
	t.Helper()
	cmd := sleeper(t)
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		errc <- start(cmd)
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case <-waited:
		return false
	case <-time.After(time.Second):
		cmd.Process.Kill()
		<-waited
		return true
	}
}

// A child started here outlives the thread its caller ran on. The control
// shows the hazard: started by that thread itself, the child dies with it.
// (If the dying goroutine happened to be locked to the main thread, Go
// parks that thread instead of ending it, so the control is retried.)
func TestStartOutlivesTheCallersThread(t *testing.T) {
	killed := false
	for i := 0; i < 5 && !killed; i++ {
		killed = !startOnDyingThread(t, (*exec.Cmd).Start)
	}
	if !killed {
		t.Fatalf("control: a child started with Pdeathsig by a thread that then ended was never killed in 5 tries: the test cannot show the hazard")
	}
	for i := 0; i < 3; i++ {
		if !startOnDyingThread(t, Start) {
			t.Fatalf("try %d: a child started with spawn.Start died when its caller's thread ended", i+1)
		}
	}
}

func TestRun(t *testing.T) {
	if err := Run(exec.Command("true")); err != nil {
		t.Fatal(err)
	}
	err := Run(exec.Command("false"))
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("Run(false) = %v, want exit status 1", err)
	}
	if err := Run(exec.Command("/nonexistent/command")); err == nil {
		t.Fatal("Run of a missing program: no error")
	}
}
