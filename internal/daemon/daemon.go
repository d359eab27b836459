package daemon

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hbm-dev/hbm/internal/cgroup"
	"github.com/hbm-dev/hbm/internal/dataplane"
	"github.com/hbm-dev/hbm/internal/metrics"
	"github.com/hbm-dev/hbm/internal/safetext"
)

// Options configure the daemon.
type Options struct {
	ConfigPath  string // "": no file (the limits come from Pods only)
	PinDir      string
	MetricsAddr string // "" serves no metrics
	Version     string
	// Resync is the period of a full pass whatever the notifications say:
	// a backstop (a hand-set limit removed, an event lost), not how groups
	// are followed. 0: 5 minutes.
	Resync time.Duration
	Log    *log.Logger
	// Reload delivers reload requests (SIGHUP).
	Reload <-chan os.Signal
	// Pods, if set, declares the limits of this node's Kubernetes pods
	// beside the file's (hbm daemon --kubernetes).
	Pods PodSource
}

// Daemon keeps the declared limits in force.
type Daemon struct {
	opts    Options
	mnt     string
	cfg     *Config
	watcher *Watcher
	health  *metrics.Health
	log     *log.Logger

	mu     sync.Mutex
	labels map[uint64]metrics.GroupLabels // group id -> unit, namespace, pod, for the metrics

	capped string // the glob rules over their max_groups, as last logged
}

// debounce lets a burst of cgroup events (a unit restarting) make one pass.
const debounce = 10 * time.Millisecond

// Run loads the configuration (failing if it is invalid), serves metrics,
// makes the first pass, reports readiness (sd_notify READY=1) and then
// follows the cgroups, the file and reload requests until ctx ends. The
// limits stay when it returns: they are pinned, and the next daemon adopts
// them.
func Run(ctx context.Context, opts Options) error {
	if opts.Log == nil {
		opts.Log = log.New(os.Stderr, "", 0)
	}
	if opts.Resync == 0 {
		opts.Resync = 5 * time.Minute
	}
	d := &Daemon{opts: opts, log: opts.Log, labels: map[uint64]metrics.GroupLabels{}}
	d.cfg = &Config{Pods: DefaultPodPolicy()}
	if opts.ConfigPath != "" {
		cfg, err := Load(opts.ConfigPath)
		if err != nil {
			return err
		}
		d.cfg = cfg
	}
	if err := checkPinDir(opts.PinDir); err != nil {
		return err
	}
	lock, err := lockPinDir(opts.PinDir)
	if err != nil {
		return err
	}
	defer lock.Close()
	if d.mnt, err = cgroup.Mount(); err != nil {
		return err
	}
	groups := metrics.NewGroupCollector(d.list, d.labelMap)
	reg, health := metrics.NewRegistry(opts.Version, groups)
	d.health = health
	health.ConfigReloadOK.Set(1)
	health.LastConfigReload.Set(float64(time.Now().UnixNano()) / 1e9)

	if d.watcher, err = NewWatcher(opts.ConfigPath); err != nil {
		return err
	}
	defer d.watcher.Close()

	if opts.MetricsAddr != "" {
		ln, err := net.Listen("tcp", opts.MetricsAddr)
		if err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		srv := metrics.NewServer(reg, metrics.DefaultServerOptions())
		go srv.Serve(ln)
		defer srv.Close()
		d.log.Printf("serving metrics on http://%s/metrics", ln.Addr())
	}

	var podsChanged <-chan struct{}
	if opts.Pods != nil {
		opts.Pods.SetPolicy(d.cfg.Pods)
		start := time.Now()
		if err := opts.Pods.Start(ctx); err != nil {
			return err
		}
		podsChanged = opts.Pods.Changed()
		pods, _ := opts.Pods.Pods()
		d.log.Printf("kubernetes: %d pods on this node, listed in %v", len(pods), time.Since(start).Round(time.Millisecond))
	}

	start := time.Now()
	perr := d.pass("start")
	d.log.Printf("first pass in %v", time.Since(start).Round(time.Microsecond))
	notify("READY=1\nSTATUS=limits in force")

	resync := time.NewTicker(opts.Resync)
	defer resync.Stop()
	var retry <-chan time.Time
	backoff := time.Second
	scheduleRetry := func(err error) {
		if err == nil {
			retry, backoff = nil, time.Second
			return
		}
		retry = time.After(backoff)
		backoff = min(2*backoff, 30*time.Second)
	}
	scheduleRetry(perr)
	for {
		why := ""
		select {
		case <-ctx.Done():
			notify("STOPPING=1")
			d.log.Printf("stopping; the limits stay in force (pinned) for the next daemon to adopt")
			return nil
		case <-d.watcher.Cgroups:
			time.Sleep(debounce)
			why = "cgroups changed"
		case <-podsChanged:
			time.Sleep(debounce)
			why = "pods changed"
		case <-d.watcher.Config:
			time.Sleep(debounce)
			select { // a write may raise several events
			case <-d.watcher.Config:
			default:
			}
			if !d.reload("file changed") {
				continue
			}
			why = "config changed"
		case <-opts.Reload:
			notify(fmt.Sprintf("RELOADING=1\nMONOTONIC_USEC=%d", monotonicUsec()))
			ok := d.reload("SIGHUP")
			notify("READY=1")
			if !ok {
				continue
			}
			why = "reload"
		case <-resync.C:
			why = "resync"
		case <-retry:
			why = "retry"
		}
		scheduleRetry(d.pass(why))
	}
}

// reload reads the file again; an invalid one is refused and the running
// configuration kept.
func (d *Daemon) reload(why string) bool {
	if d.opts.ConfigPath == "" {
		d.log.Printf("reload (%s): no configuration file, a full pass", why)
		return true
	}
	cfg, err := Load(d.opts.ConfigPath)
	if err != nil {
		d.health.ConfigReloadOK.Set(0)
		d.log.Printf("reload (%s) refused, keeping the running configuration: %v", why, err)
		return false
	}
	d.cfg = cfg
	if d.opts.Pods != nil {
		d.opts.Pods.SetPolicy(cfg.Pods)
	}
	d.health.ConfigReloadOK.Set(1)
	d.health.LastConfigReload.Set(float64(time.Now().UnixNano()) / 1e9)
	d.log.Printf("reloaded %s (%s): %d rules", d.opts.ConfigPath, why, len(cfg.Rules))
	return true
}

// resolve matches the rules against the tree and watches what they depend
// on; it repeats (bounded) while new directories get watched, so a group
// made in a directory just before its watch was added is not missed.
func (d *Daemon) resolve() Resolution {
	var res Resolution
	for i := 0; i < 8; i++ {
		res = Resolve(d.mnt, d.cfg)
		if d.opts.Pods != nil {
			pods, watch := d.opts.Pods.Pods()
			ResolvePods(d.mnt, pods, watch, &res)
		}
		added, err := d.watcher.Set(res.Watch)
		if err != nil {
			d.log.Printf("warning: %v", err)
		}
		if added == 0 {
			break
		}
	}
	return res
}

// pass reconciles once: it returns an error if some change failed (the
// caller retries with a back-off).
func (d *Daemon) pass(why string) error {
	start := time.Now()
	defer func() {
		d.health.Reconciles.Inc()
		d.health.LastReconcile.Set(float64(time.Now().UnixNano()) / 1e9)
		d.health.LastReconcileDuration.Set(time.Since(start).Seconds())
	}()
	res := d.resolve()
	for _, w := range res.Warnings {
		d.log.Printf("warning: %s", w)
	}
	// Logged when it changes (a glob over a busy subtree passes often).
	if c := strings.Join(res.Capped, "\n"); c != d.capped {
		d.capped = c
		for _, l := range res.Capped {
			d.log.Printf("warning: %s", safetext.Quote(l))
		}
		if c == "" {
			d.log.Printf("every glob rule within its max_groups again")
		}
	}
	d.health.GlobGroupsOverCap.Set(float64(res.OverCap))
	st, err := d.apply(res)
	if err != nil {
		d.health.ReconcileErrors.Inc()
		d.log.Printf("pass (%s): %v", why, err)
	}
	if st.changed > 0 || st.removed > 0 || why == "start" {
		d.log.Printf("pass (%s): %d limits declared on existing groups, %d applied or changed, %d removed, %d kept as they were, in %v",
			why, len(res.Targets), st.changed, st.removed, st.adopted, time.Since(start).Round(time.Microsecond))
	}
	return err
}

type passStats struct{ changed, removed, adopted int }

func (d *Daemon) apply(res Resolution) (passStats, error) {
	var st passStats
	m, err := dataplane.Open(d.opts.PinDir)
	if err != nil {
		return st, err
	}
	defer m.Close()
	own, err := OpenOwned(d.opts.PinDir)
	if err != nil {
		return st, err
	}
	defer own.Close()
	owned, err := own.All()
	if err != nil {
		return st, err
	}
	es, err := m.List()
	if err != nil {
		return st, err
	}
	plan := Reconcile(d.mnt, res.Targets, ObservedOf(es), owned)
	st.adopted = plan.Kept
	var errs []error
	for _, k := range plan.Forget {
		if err := own.Remove(k); err != nil {
			errs = append(errs, err)
		}
	}
	for _, c := range plan.TakenOver {
		d.log.Printf("taken over by hand: %s", safetext.Quote(c))
	}
	for _, c := range plan.Conflicts {
		d.log.Printf("conflict: %s", safetext.Quote(c))
	}
	for _, op := range plan.Ops {
		if err := d.applyOp(m, own, op); err != nil {
			errs = append(errs, err)
			continue
		}
		for _, c := range op.Changes {
			if c.Limit != nil {
				st.changed++
				d.log.Printf("%s: %v limited to %v", safetext.Quote(op.Group.Rel), c.Dir, c.Limit.Rate)
			} else {
				st.removed++
				d.log.Printf("%s: %v limit removed", safetext.Quote(op.Group.Rel), c.Dir)
			}
		}
	}
	for _, w := range m.Warnings {
		d.log.Printf("warning: %s", safetext.Quote(w))
		d.health.Warnings.Inc()
	}
	labels := map[uint64]metrics.GroupLabels{}
	for k, t := range res.Targets {
		if t.Unit != "" || t.Pod != "" {
			labels[k.ID] = metrics.GroupLabels{Unit: t.Unit, Namespace: t.Namespace, Pod: t.Pod}
		}
	}
	d.mu.Lock()
	d.labels = labels
	d.mu.Unlock()
	if now, err := own.All(); err == nil {
		d.health.OwnedLimits.Set(float64(len(now)))
	}
	d.health.Conflicts.Set(float64(len(plan.Conflicts)))
	return st, errors.Join(errs...)
}

// applyOp records, applies, unrecords: a kill between any two steps leaves
// a state the next pass finishes (see owned.go).
func (d *Daemon) applyOp(m *dataplane.Manager, own *Owned, op Op) error {
	for _, o := range op.Own {
		if err := own.Add(o.Key, o.Record); err != nil {
			return err
		}
	}
	err := m.Apply(op.Group, op.Changes)
	if err != nil && !(len(op.Own) == 0 && errors.Is(err, dataplane.ErrNotFound)) {
		return fmt.Errorf("%s: %w", op.Group.Rel, err)
	}
	for _, k := range op.Disown {
		if err := own.Remove(k); err != nil {
			return err
		}
	}
	return nil
}

// list is the metrics' view of the data plane. It takes no lock: a scrape
// reads every limit (about a second for 10,000), and under the shared lock
// it would hold back every writer (hbm set, the daemon's passes) that long.
func (d *Daemon) list() ([]dataplane.Entry, error) {
	m, err := dataplane.OpenUnlocked(d.opts.PinDir)
	if err != nil || m == nil {
		return nil, err
	}
	defer m.Close()
	return m.ListCounters()
}

func (d *Daemon) labelMap() map[uint64]metrics.GroupLabels {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.labels
}
