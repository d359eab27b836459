package integration

// A kill at the Nth bpf() call of a process, counted over all its threads
// (strace's syscall injection counts per thread, and Go spreads a command's
// calls over several): the process runs under ptrace, and on entry to that
// call it is sent SIGKILL, so the call is not made (the kernel skips a
// syscall whose tracee has a fatal signal pending when its entry stop ends).

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ptraceSyscallInfo is struct ptrace_syscall_info (linux/ptrace.h) as far as
// a syscall entry needs, with room for the union's larger members.
type ptraceSyscallInfo struct {
	Op   uint8
	_    [3]uint8
	Arch uint32
	IP   uint64
	SP   uint64
	Nr   uint64 // entry: the syscall number
	Args [6]uint64
	_    [16]byte
}

// bpfCallNr reads, at a syscall stop of tid, the number of the syscall it
// enters; ok is false at an exit stop.
func bpfCallNr(tid int) (nr uint64, ok bool, err error) {
	var info ptraceSyscallInfo
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_GET_SYSCALL_INFO, uintptr(tid),
		unsafe.Sizeof(info), uintptr(unsafe.Pointer(&info)), 0, 0)
	if e != 0 {
		return 0, false, fmt.Errorf("PTRACE_GET_SYSCALL_INFO: %w", e)
	}
	return info.Nr, info.Op == unix.PTRACE_SYSCALL_INFO_ENTRY, nil
}

// runKilledAtBPFCall runs argv with env and SIGKILLs it on entry to its nth
// bpf() call, counted over all its threads; it returns how the process
// ended (not killed: it made fewer than n calls), bounded to 30 s. It waits
// for any child (wait4(-1)): the test may have no other child running.
func runKilledAtBPFCall(argv, env []string, n int) (hbmResult, error) {
	// Every ptrace request must come from the thread that started the tracee.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var outs [2]*os.File
	for i := range outs {
		f, err := os.CreateTemp("", "hbm-ptrace-*")
		if err != nil {
			return hbmResult{}, err
		}
		defer os.Remove(f.Name())
		defer f.Close()
		outs[i] = f
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = outs[0], outs[1]
	cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
	if err := cmd.Start(); err != nil {
		return hbmResult{}, err
	}
	pid := cmd.Process.Pid
	defer cmd.Process.Release() // reaped here, with wait4, not cmd.Wait
	var timedOut atomic.Bool
	timer := time.AfterFunc(30*time.Second, func() {
		timedOut.Store(true)
		unix.Kill(pid, unix.SIGKILL)
	})
	defer timer.Stop()

	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil || !ws.Stopped() {
		unix.Kill(pid, unix.SIGKILL)
		return hbmResult{}, fmt.Errorf("tracee's first stop: %v (status %#x)", err, ws)
	}
	// EXITKILL: a dead tracer leaves no tracee behind.
	opts := unix.PTRACE_O_TRACESYSGOOD | unix.PTRACE_O_TRACECLONE | unix.PTRACE_O_EXITKILL
	if err := unix.PtraceSetOptions(pid, opts); err != nil {
		unix.Kill(pid, unix.SIGKILL)
		return hbmResult{}, fmt.Errorf("PTRACE_SETOPTIONS: %w", err)
	}
	if err := unix.PtraceSyscall(pid, 0); err != nil {
		unix.Kill(pid, unix.SIGKILL)
		return hbmResult{}, fmt.Errorf("PTRACE_SYSCALL: %w", err)
	}
	var (
		r        hbmResult
		calls    int
		traceErr error
		ended    bool
	)
	for {
		tid, err := unix.Wait4(-1, &ws, unix.WALL, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			if !errors.Is(err, unix.ECHILD) {
				traceErr = fmt.Errorf("wait4: %w", err)
			}
			break
		}
		switch {
		case ws.Exited() || ws.Signaled():
			if tid == pid {
				r.code, r.killed, ended = ws.ExitStatus(), ws.Signaled() && ws.Signal() == unix.SIGKILL, true
				if ws.Signaled() {
					r.code = -1
				}
			}
			continue
		case !ws.Stopped():
			continue
		}
		sig := 0
		switch stop := ws.StopSignal(); {
		case stop == unix.SIGTRAP|0x80: // syscall stop
			nr, entry, err := bpfCallNr(tid)
			if errors.Is(err, unix.ESRCH) {
				// The thread went between its stop and this
				// request: killed, by us or by its process's
				// exit_group (a tracee that made fewer than n
				// calls ends so). Nothing to resume; the
				// leader's end comes from wait4.
				continue
			}
			if err != nil && traceErr == nil {
				traceErr = err
			}
			if entry && nr == unix.SYS_BPF {
				if calls++; calls == n {
					unix.Kill(pid, unix.SIGKILL)
				}
			}
		case stop == unix.SIGTRAP: // a ptrace event (clone)
		case stop == unix.SIGSTOP:
			// A new thread's first stop, or a real SIGSTOP: hbm gets
			// none, so both are swallowed.
		default:
			sig = int(stop) // deliver it (Go preempts with SIGURG)
		}
		unix.PtraceSyscall(tid, sig) // ESRCH: killed meanwhile
	}
	switch {
	case traceErr != nil:
	case timedOut.Load():
		traceErr = fmt.Errorf("%v: timed out", argv)
	case !ended:
		traceErr = errors.New("tracee's end not seen")
	}
	for i, dst := range []*string{&r.out, &r.errOut} {
		b, err := os.ReadFile(outs[i].Name())
		if err != nil && traceErr == nil {
			traceErr = err
		}
		*dst = string(b)
	}
	return r, traceErr
}
