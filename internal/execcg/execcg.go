// Package execcg is `hbm exec`: a command run in a fresh cgroup with its own
// limits, the cgroup and limits removed when it ends. Each run's group is
// /hbm-exec/<pid>-<start time> (the hbm process' pid and its start time in
// clock ticks, which together name one process for the machine's uptime),
// so a later hbm can tell the groups of dead runs (hbm SIGKILLed) from live
// ones and clean them up (Cleanup).
package execcg

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hbm-dev/hbm/internal/cgroup"
	"github.com/hbm-dev/hbm/internal/dataplane"
)

// Parent is the group (relative to the cgroup2 mount) the runs' groups are
// made in.
const Parent = "/hbm-exec"

// Exit statuses of hbm exec's own failures, as env(1) and nice(1) use them.
const (
	ExitFailure     = 125 // hbm could not set the command up
	ExitCannotRun   = 126 // the command was found but could not be run
	ExitNotFound    = 127 // the command was not found
	exitSignalShift = 128 // a command killed by signal N: 128+N if re-raising fails
)

// Options of a run.
type Options struct {
	PinDir  string
	Egress  *dataplane.Limit
	Ingress *dataplane.Limit
	Argv    []string
	Stdin   *os.File
	Stdout  *os.File
	Stderr  *os.File
	// Warn reports what went wrong without failing the run.
	Warn func(format string, args ...any)
}

// Result is how the command ended.
type Result struct {
	Code   int            // exit status (valid when Signal is 0)
	Signal syscall.Signal // the signal that killed it, or 0
}

// startTime returns a process' start time in clock ticks (field 22 of
// /proc/PID/stat).
func startTime(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command (field 2) may hold spaces and parentheses: fields count
	// from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("malformed stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, errors.New("malformed stat")
	}
	return strconv.ParseUint(f[19], 10, 64) // field 22: 3 + 19
}

// groupName names the group of process pid.
func groupName(pid int) (string, error) {
	st, err := startTime(pid)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d-%d", pid, st), nil
}

// ownerAlive reports whether the hbm that made group name still runs.
func ownerAlive(name string) bool {
	pidS, stS, ok := strings.Cut(name, "-")
	pid, err1 := strconv.Atoi(pidS)
	st, err2 := strconv.ParseUint(stS, 10, 64)
	if !ok || err1 != nil || err2 != nil || pid <= 0 {
		return true // not one of ours: leave it
	}
	cur, err := startTime(pid)
	return err == nil && cur == st
}

// Run runs the command as opts says and returns how it ended. Signals hbm
// receives are passed to the command (SIGINT and SIGQUIT only when hbm has
// no terminal: a terminal sends them to the command as well).
func Run(opts Options) (Result, error) {
	warn := opts.Warn
	if warn == nil {
		warn = func(string, ...any) {}
	}
	if len(opts.Argv) == 0 {
		return Result{}, errors.New("no command")
	}
	path, err := exec.LookPath(opts.Argv[0])
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			return Result{Code: ExitCannotRun}, err
		}
		return Result{Code: ExitNotFound}, err
	}
	name, err := groupName(os.Getpid())
	if err != nil {
		return Result{Code: ExitFailure}, err
	}
	g, err := cgroup.Create(filepath.Join(Parent, name))
	if err != nil {
		return Result{Code: ExitFailure}, err
	}
	// The pin directory goes with the group, so that whichever hbm cleans
	// up removes the limits where they were set.
	if err := unix.Setxattr(g.Dir, pinDirXattr, []byte(opts.PinDir), 0); err != nil {
		warn("record the pin directory on %s: %v", g.Rel, err)
	}
	var changes []dataplane.Change
	for _, c := range []dataplane.Change{{Dir: dataplane.Egress, Limit: opts.Egress}, {Dir: dataplane.Ingress, Limit: opts.Ingress}} {
		if c.Limit != nil {
			changes = append(changes, c)
		}
	}
	cleanup := func() {
		if err := remove(opts.PinDir, g); err != nil {
			warn("%v", err)
		}
	}
	if len(changes) > 0 {
		err := withManager(opts.PinDir, func(m *dataplane.Manager) error { return m.Apply(g, changes) })
		if err != nil {
			cleanup()
			return Result{Code: ExitFailure}, err
		}
	}
	fd, err := unix.Open(g.Dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		cleanup()
		return Result{Code: ExitFailure}, fmt.Errorf("open cgroup %s: %w", g.Dir, err)
	}
	// Catch before the start: a signal between start and wait is passed on.
	sigs := make(chan os.Signal, 16)
	pass := []os.Signal{syscall.SIGTERM, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH, syscall.SIGALRM, syscall.SIGCONT}
	tty := isTerminal(opts.Stdin)
	if tty {
		signal.Ignore(syscall.SIGINT, syscall.SIGQUIT) // the terminal tells the command itself
	} else {
		pass = append(pass, syscall.SIGINT, syscall.SIGQUIT)
	}
	signal.Notify(sigs, pass...)
	defer signal.Stop(sigs)

	cmd := exec.Command(path, opts.Argv[1:]...)
	cmd.Args[0] = opts.Argv[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = opts.Stdin, opts.Stdout, opts.Stderr
	// Cloned straight into the group; killed if hbm dies (SIGKILL
	// included): the next hbm finds the group's owner gone and cleans up.
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	unix.Close(fd)
	if err != nil {
		cleanup()
		code := ExitCannotRun
		if errors.Is(err, os.ErrNotExist) {
			code = ExitNotFound
		}
		return Result{Code: code}, err
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	err = cmd.Wait()
	close(done)
	res := Result{}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		ws := ee.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			res.Signal = ws.Signal()
		} else {
			res.Code = ws.ExitStatus()
		}
	default:
		cleanup()
		return Result{Code: ExitFailure}, err
	}
	cleanup()
	return res, nil
}

func isTerminal(f *os.File) bool {
	if f == nil {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func withManager(pinDir string, fn func(*dataplane.Manager) error) error {
	m, err := dataplane.Open(pinDir)
	if err != nil {
		return err
	}
	defer m.Close()
	return fn(m)
}

// remove ends a run's group: what is left in it is killed (cgroup.kill),
// its limits removed, the group removed.
func remove(pinDir string, g cgroup.Group) error {
	var errs []error
	if err := os.WriteFile(filepath.Join(g.Dir, "cgroup.kill"), []byte("1"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("kill what is left in %s: %w", g.Rel, err))
	}
	if dataplane.Pinned(pinDir) {
		err := withManager(pinDir, func(m *dataplane.Manager) error {
			var changes []dataplane.Change
			for _, d := range dataplane.Directions {
				if m.Limited(g, d) {
					changes = append(changes, dataplane.Change{Dir: d})
				}
			}
			if len(changes) == 0 {
				return nil
			}
			return m.Apply(g, changes)
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("remove the limits of %s: %w", g.Rel, err))
		}
	}
	// The killed processes leave the group asynchronously: wait, bounded.
	var err error
	for i := 0; i < 100; i++ {
		if err = unix.Rmdir(g.Dir); err == nil || errors.Is(err, unix.ENOENT) {
			err = nil
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("remove cgroup %s: %w", g.Dir, err))
	}
	return errors.Join(errs...)
}

// pinDirXattr holds, on a run's group, the pin directory of its limits.
const pinDirXattr = "trusted.hbm.pin_dir"

// Cleanup removes the groups (and limits) of runs whose hbm is gone. It
// returns the groups removed.
func Cleanup(pinDir string) ([]string, error) {
	mnt, err := cgroup.Mount()
	if err != nil {
		return nil, err
	}
	parent := filepath.Join(mnt, Parent)
	es, err := os.ReadDir(parent)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var done []string
	var errs []error
	for _, e := range es {
		if !e.IsDir() || ownerAlive(e.Name()) {
			continue
		}
		g, err := cgroup.Resolve(filepath.Join(Parent, e.Name()))
		if err != nil {
			continue // removed meanwhile
		}
		dir := pinDir
		buf := make([]byte, 4096)
		if n, err := unix.Getxattr(g.Dir, pinDirXattr, buf); err == nil && n > 0 {
			dir = string(buf[:n])
		}
		if err := remove(dir, g); err != nil {
			errs = append(errs, err)
			continue
		}
		done = append(done, g.Rel)
	}
	return done, errors.Join(errs...)
}

// Reraise ends hbm the way the command ended: killed by the same signal
// for SIGHUP, SIGINT, SIGTERM and SIGKILL (the signals whose default action
// the Go runtime gives back: a parent sees "killed by signal"), else exit
// 128+N, as a shell reports it.
func Reraise(sig syscall.Signal) {
	switch sig {
	case syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM, syscall.SIGKILL:
		signal.Reset(sig)
		syscall.Kill(os.Getpid(), sig)
		time.Sleep(time.Second)
	}
	os.Exit(exitSignalShift + int(sig))
}
