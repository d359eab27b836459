// Package execcg is `hbm exec`: a command run in a fresh cgroup with its own
// limits, the cgroup and limits removed when it ends. Each run's group is
// /hbm-exec/<pid>-<start time>[-<n>] (the hbm process' pid and start time in
// clock ticks as it sees them, n when that name is taken: a pid seen from
// another PID namespace names another process), and the running hbm holds
// an exclusive flock on the group's directory for as long as the run lasts.
// A later hbm tells the groups of dead runs (hbm SIGKILLed) from live ones
// by that lock, which the kernel releases when the holder dies, whatever
// namespace either runs in, and cleans them up (Cleanup). The parent
// directory's lock (shared while a run creates and locks its group,
// exclusive while Cleanup judges) closes the gap between mkdir and flock.
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
	"github.com/hbm-dev/hbm/internal/spawn"
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

// parseName reads a run group's name, <pid>-<start>[-<n>]; ok false: not
// one of ours.
func parseName(name string) (pid int, start uint64, ok bool) {
	f := strings.Split(name, "-")
	if len(f) != 2 && len(f) != 3 {
		return 0, 0, false
	}
	pid, err1 := strconv.Atoi(f[0])
	start, err2 := strconv.ParseUint(f[1], 10, 64)
	if len(f) == 3 {
		if _, err := strconv.ParseUint(f[2], 10, 32); err != nil {
			return 0, 0, false
		}
	}
	return pid, start, err1 == nil && err2 == nil && pid > 0
}

// lockedXattr marks a run whose hbm holds its group's flock: its lock alone
// tells whether it is alive (not its pid, which may be another namespace's).
const lockedXattr = "trusted.hbm.alive_by"

// pidMatches reports whether the process the name names, as this process
// sees pids, runs with that start time. An hbm before the flock (which
// does not hold one) is alive only by this test; on its own it proves
// nothing across PID namespaces (a pid there names another process here).
func pidMatches(pid int, start uint64) bool {
	cur, err := startTime(pid)
	return err == nil && cur == start
}

// lockTimeout bounds the wait for the parent directory's lock.
const lockTimeout = 10 * time.Second

// flockWait takes lock how on fd, waiting at most lockTimeout.
func flockWait(fd int, how int, what string) error {
	deadline := time.Now().Add(lockTimeout)
	for {
		err := unix.Flock(fd, how|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("lock %s: %w", what, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("lock %s: held by another hbm for %v", what, lockTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// openDir opens a directory for a flock (close on exec: the command does
// not inherit it, so the lock dies with hbm itself).
func openDir(dir string) (int, error) {
	return unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
}

// createLocked makes the run's group, named after this process, and
// returns it with the fd that holds its lock: the group exists only
// locked, for Cleanup (which judges under the parent's exclusive lock).
func createLocked() (cgroup.Group, int, error) {
	base, err := groupName(os.Getpid())
	if err != nil {
		return cgroup.Group{}, -1, err
	}
	if _, err := cgroup.Create(Parent); err != nil {
		return cgroup.Group{}, -1, err
	}
	mnt, err := cgroup.Mount()
	if err != nil {
		return cgroup.Group{}, -1, err
	}
	pfd, err := openDir(filepath.Join(mnt, Parent))
	if err != nil {
		return cgroup.Group{}, -1, fmt.Errorf("open %s: %w", Parent, err)
	}
	defer unix.Close(pfd) // releases the shared lock
	if err := flockWait(pfd, unix.LOCK_SH, Parent); err != nil {
		return cgroup.Group{}, -1, err
	}
	for n := 0; n < 1000; n++ {
		name := base
		if n > 0 {
			name = fmt.Sprintf("%s-%d", base, n)
		}
		dir := filepath.Join(mnt, Parent, name)
		if err := unix.Mkdir(dir, 0o755); errors.Is(err, unix.EEXIST) {
			continue // another namespace's process of the same pid and start
		} else if err != nil {
			return cgroup.Group{}, -1, fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		fd, err := openDir(dir)
		if err == nil {
			if err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
				unix.Close(fd)
			}
		}
		if err != nil {
			unix.Rmdir(dir)
			return cgroup.Group{}, -1, fmt.Errorf("lock cgroup %s: %w", dir, err)
		}
		g, err := cgroup.Resolve(filepath.Join(Parent, name))
		if err == nil {
			err = unix.Setxattr(dir, lockedXattr, []byte("flock"), 0)
		}
		if err != nil {
			unix.Close(fd)
			unix.Rmdir(dir)
			return cgroup.Group{}, -1, err
		}
		return g, fd, nil
	}
	return cgroup.Group{}, -1, fmt.Errorf("create a cgroup under %s: %s-1..999 all taken", Parent, base)
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
	g, lockFD, err := createLocked()
	if err != nil {
		return Result{Code: ExitFailure}, err
	}
	// Held until the group is gone: the proof, for other hbm commands in
	// any namespace, that this run is alive.
	defer unix.Close(lockFD)
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
	err = spawn.Start(cmd)
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
// returns the groups removed. A run is gone only when its group's lock is
// free (its hbm died: the kernel released it) and, for the groups of an
// hbm before the lock, its pid no longer runs with its start time; a group
// that cannot be locked or read is left alone. Only commands that change
// limits call it: a command that reads (show, top) never kills anything.
func Cleanup(pinDir string) ([]string, error) {
	mnt, err := cgroup.Mount()
	if err != nil {
		return nil, err
	}
	parent := filepath.Join(mnt, Parent)
	pfd, err := openDir(parent)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, nil
		}
		return nil, fmt.Errorf("open %s: %w", parent, err)
	}
	// Exclusive: no run is between its mkdir and its flock while we judge.
	if err := flockWait(pfd, unix.LOCK_EX, Parent); err != nil {
		unix.Close(pfd)
		return nil, err
	}
	es, err := os.ReadDir(parent)
	if err != nil {
		unix.Close(pfd)
		return nil, err
	}
	type dead struct {
		name string
		fd   int // holds the dead run's lock while it is removed
	}
	var gone []dead
	for _, e := range es {
		pid, start, ok := parseName(e.Name())
		if !e.IsDir() || !ok {
			continue // not one of ours: leave it
		}
		fd, err := openDir(filepath.Join(parent, e.Name()))
		if err != nil {
			continue // removed meanwhile, or not ours to judge
		}
		// An hbm that marked its group holds its lock; an older one
		// does not, and is alive while its pid runs.
		byLock := false
		if n, err := unix.Getxattr(filepath.Join(parent, e.Name()), lockedXattr, make([]byte, 16)); err == nil && n > 0 {
			byLock = true
		}
		if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil || !byLock && pidMatches(pid, start) {
			unix.Close(fd) // its hbm holds the lock, or is alive by its pid
			continue
		}
		gone = append(gone, dead{e.Name(), fd})
	}
	unix.Close(pfd)
	var done []string
	var errs []error
	for _, d := range gone {
		defer unix.Close(d.fd)
		g, err := cgroup.Resolve(filepath.Join(Parent, d.name))
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
