// Package k8s is hbm daemon --kubernetes end to end, with real parts: a
// real etcd and kube-apiserver (built from their Go modules, see
// scripts/k8s-bins.sh), the RBAC of deploy/kubernetes as the daemon's only
// rights, pods' cgroups made as kubelet makes them (systemd and cgroupfs
// drivers), real TCP between two namespaces from a process in a pod's
// cgroup, and hbm show / the pinned data plane as the judge.
//
// `make test-k8s` runs it alone.
package k8s

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hbm-dev/hbm/internal/cgroup"
	"github.com/hbm-dev/hbm/internal/netlab"
	"github.com/hbm-dev/hbm/internal/netlab/labtest"
	"github.com/hbm-dev/hbm/internal/testutil"
	"github.com/hbm-dev/hbm/internal/workload"
)

const (
	e2eName  = "k8s"
	nodeName = "hbm-e2e-node"
	ns       = "hbm-e2e"
	// The kubelet's --cgroup-root for each driver: the test's own tree, so
	// the machine's is left alone.
	sdRoot = "/hbmk8se2e.slice"
	fsRoot = "/hbmk8se2efs"
)

// lab is the cluster, the data plane's pins and the test's cgroup trees.
type lab struct {
	t      *testing.T
	c      *cluster
	bin    string
	pinDir string
	hbm    netlab.HBM
	kc     string // the daemon's kubeconfig (the hbm service account's token)
}

func newLab(t *testing.T) *lab {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: end-to-end test (root, cgroups, BPF, a real kube-apiserver and etcd)")
	}
	testutil.RequireRoot(t)
	if _, err := cgroup.Mount(); err != nil {
		testutil.Missing(t, "cgroup2", err)
	}
	l := &lab{t: t, bin: testutil.HBMBinary(t), pinDir: "/sys/fs/bpf/hbm-test-" + e2eName}
	l.hbm = netlab.HBM{Bin: l.bin, PinDir: l.pinDir}
	l.reset()
	t.Cleanup(l.reset) // registered before the processes: runs after they are killed
	l.c = startCluster(t)
	// The daemon's rights are deploy/kubernetes' RBAC, nothing else.
	objs := manifests(t)
	l.c.apply(objs, false, "ServiceAccount", "ClusterRole", "ClusterRoleBinding")
	l.kc = l.c.kubeconfig("hbm", hbmToken)
	ctx := context.Background()
	if _, err := l.c.admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.c.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return l
}

func (l *lab) reset() {
	if err := os.RemoveAll(l.pinDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		l.t.Errorf("remove %s: %v", l.pinDir, err)
	}
	for _, root := range []string{sdRoot, fsRoot} {
		if err := cgroup.RemoveWait(root, 50, 100*time.Millisecond); err != nil {
			l.t.Errorf("remove cgroup %s: %v", root, err)
		}
	}
}

// startDaemon runs hbm daemon --kubernetes (host network namespace: the
// API server and the metrics are on 127.0.0.1) and waits for its first pass.
func (l *lab) startDaemon(root string, metricsPort int, extra ...string) *testutil.Proc {
	l.t.Helper()
	p := testutil.StartProc(l.t, []string{"HBM_PIN_DIR=" + l.pinDir}, l.bin, append([]string{"daemon", "--kubernetes",
		"--kubeconfig", l.kc, "--node-name", nodeName, "--kube-cgroup-root", root,
		"--metrics", fmt.Sprintf("127.0.0.1:%d", metricsPort)}, extra...)...)
	if !testutil.WaitFor(60*time.Second, func() bool { return strings.Contains(p.Out.String(), "first pass") || p.Exited() }) || p.Exited() {
		p.Kill(syscall.SIGKILL)
		l.t.Fatalf("daemon: no first pass within 60s:\n%s", testutil.LastLines(p.Out.String(), 30))
	}
	return p
}

type podSpec struct {
	name, node string
	qos        corev1.PodQOSClass
	ann        map[string]string
	mirrorOf   types.UID // a mirror pod: owned by the node with this UID, as kubelet makes them
}

// createPod creates the pod in the API (as a user would; no scheduler: its
// node is set).
func (l *lab) createPod(s podSpec) *corev1.Pod {
	l.t.Helper()
	ctr := corev1.Container{Name: "c", Image: "registry.k8s.io/pause:3.10"}
	switch s.qos {
	case corev1.PodQOSGuaranteed:
		ctr.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	case corev1.PodQOSBurstable:
		ctr.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
	}
	if s.node == "" {
		s.node = nodeName
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: ns, Annotations: s.ann},
		Spec:       corev1.PodSpec{NodeName: s.node, Containers: []corev1.Container{ctr}},
	}
	if s.mirrorOf != "" {
		ctrl := true
		pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: s.node, UID: s.mirrorOf, Controller: &ctrl}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := l.c.admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		l.t.Fatalf("create pod %s: %v", s.name, err)
	}
	if p.Status.QOSClass != s.qos {
		l.t.Fatalf("pod %s: QoS %s, want %s", s.name, p.Status.QOSClass, s.qos)
	}
	return p
}

// podCgroup is the pod's group as kubelet names it, written out here by
// hand (not with internal/k8s, which is under test).
func podCgroup(root string, systemd bool, qos corev1.PodQOSClass, uid types.UID) string {
	if !systemd {
		switch qos {
		case corev1.PodQOSGuaranteed:
			return fmt.Sprintf("%s/kubepods/pod%s", root, uid)
		default:
			return fmt.Sprintf("%s/kubepods/%s/pod%s", root, strings.ToLower(string(qos)), uid)
		}
	}
	r := strings.TrimSuffix(strings.TrimPrefix(root, "/"), ".slice")
	u := strings.ReplaceAll(string(uid), "-", "_")
	kp := fmt.Sprintf("%s/%s-kubepods.slice", root, r)
	if qos == corev1.PodQOSGuaranteed {
		return fmt.Sprintf("%s/%s-kubepods-pod%s.slice", kp, r, u)
	}
	q := strings.ToLower(string(qos))
	return fmt.Sprintf("%s/%s-kubepods-%s.slice/%s-kubepods-%s-pod%s.slice", kp, r, q, r, q, u)
}

// mkCgroup makes the pod's group (and its parents) as kubelet does before
// the pod's containers start.
func (l *lab) mkCgroup(rel string) cgroup.Group {
	l.t.Helper()
	g, err := cgroup.Create(rel)
	if err != nil {
		l.t.Fatal(err)
	}
	return g
}

// rates returns "group dir" -> rate_bps from hbm show --json.
func (l *lab) rates() map[string]uint64 {
	l.t.Helper()
	out, err := l.hbm.Rates()
	if err != nil {
		l.t.Fatalf("hbm show: %v", err)
	}
	return out
}

func (l *lab) expectRates(what string, want map[string]uint64, within time.Duration) time.Duration {
	l.t.Helper()
	start := time.Now()
	var got map[string]uint64
	ok := testutil.WaitFor(within, func() bool {
		got = l.rates()
		if len(got) != len(want) {
			return false
		}
		for k, v := range want {
			if got[k] != v {
				return false
			}
		}
		return true
	})
	if !ok {
		l.t.Fatalf("%s: limits %v, want %v (within %v)", what, got, want, within)
	}
	return time.Since(start)
}

// enforced reads hbm show --json's "enforced" for the group and direction.
func (l *lab) enforced(group, dir string) bool {
	l.t.Helper()
	st, err := l.hbm.Show()
	if err != nil {
		l.t.Fatalf("hbm show: %v", err)
	}
	for _, g := range st {
		if g.Cgroup != group {
			continue
		}
		d := g.Egress
		if dir == "ingress" {
			d = g.Ingress
		}
		return d != nil && d.Enforced
	}
	return false
}

func (l *lab) annotate(name string, ann map[string]string) {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 5 { // a conflict with a concurrent update: read again (bounded)
		p, err := l.c.admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			l.t.Fatal(err)
		}
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		for k, v := range ann {
			if v == "" {
				delete(p.Annotations, k)
			} else {
				p.Annotations[k] = v
			}
		}
		if _, err = l.c.admin.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{}); err == nil {
			return
		}
		l.t.Logf("update pod %s: %v (again)", name, err)
	}
	l.t.Fatalf("update pod %s: gave up after 5 conflicts", name)
}

// events returns the messages of the InvalidBandwidth Events on the pod.
func (l *lab) events(pod string) []string {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	evs, err := l.c.admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
	if err != nil {
		l.t.Fatal(err)
	}
	var out []string
	for _, e := range evs.Items {
		if e.Reason == "InvalidBandwidth" && e.Type == corev1.EventTypeWarning && e.Source.Component == "hbm" {
			out = append(out, e.Message)
		}
	}
	return out
}

func (l *lab) expectEvent(pod, substr string) {
	l.t.Helper()
	var got []string
	if !testutil.WaitFor(15*time.Second, func() bool {
		got = l.events(pod)
		for _, m := range got {
			if strings.Contains(m, substr) {
				return true
			}
		}
		return false
	}) {
		l.t.Errorf("pod %s: no InvalidBandwidth Event containing %q within 15s (events: %q)", pod, substr, got)
	}
}

// writeFile writes body to name in a temporary directory and returns its
// path.
func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func scrape(port int) (string, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

const egLow, egHigh = 0.85, 0.99

// window measures the client's goodput for 2 s and checks it lies within
// [0.85, 0.99] of rate (the integration tests' bounds for 3 cubic streams).
func window(t *testing.T, c *netlab.ScriptClient, name string, rate float64) {
	t.Helper()
	r, err := c.Window(context.Background(), name, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ratio := r.Goodput / rate
	if ratio < egLow || ratio > egHigh {
		t.Errorf("%s: goodput %.1f Mbit/s is %.3f of the %.0f Mbit/s limit, want [%.2f, %.2f]", name, r.Goodput/1e6, ratio, rate/1e6, egLow, egHigh)
	} else {
		t.Logf("%s: goodput %.1f Mbit/s, %.3f of the limit", name, r.Goodput/1e6, ratio)
	}
}

// TestKubernetes walks hbm daemon --kubernetes through a pod's life; each
// step depends on the one before.
func TestKubernetes(t *testing.T) {
	l := newLab(t)
	tb := labtest.Pair(t)
	if _, err := tb.StartServer(l.bin, netlab.ServerPort); err != nil {
		t.Fatal(err)
	}
	cg := func(qos corev1.PodQOSClass, p *corev1.Pod) string { return podCgroup(sdRoot, true, qos, p.UID) }

	// Pods before the daemon: a burstable one with both annotations, a
	// guaranteed one, one on another node (never this daemon's), one
	// without annotations, one with an invalid value.
	web := l.createPod(podSpec{name: "web", qos: corev1.PodQOSBurstable, ann: map[string]string{
		"kubernetes.io/egress-bandwidth": "200M", "kubernetes.io/ingress-bandwidth": "1G"}})
	db := l.createPod(podSpec{name: "db", qos: corev1.PodQOSGuaranteed, ann: map[string]string{
		"kubernetes.io/egress-bandwidth": "100M", "hbm.io/egress-no-drop": "true"}})
	far := l.createPod(podSpec{name: "far", node: "another-node", qos: corev1.PodQOSBurstable, ann: map[string]string{
		"kubernetes.io/egress-bandwidth": "50M"}})
	plain := l.createPod(podSpec{name: "plain", qos: corev1.PodQOSBestEffort})
	bad := l.createPod(podSpec{name: "bad", qos: corev1.PodQOSBestEffort, ann: map[string]string{
		"kubernetes.io/egress-bandwidth": "10mbit"}})
	// A guarantee under its bandwidth annotation, the ceiling.
	lend := l.createPod(podSpec{name: "lend", qos: corev1.PodQOSBestEffort, ann: map[string]string{
		"kubernetes.io/egress-bandwidth": "400M", "hbm.io/egress-guarantee": "100M"}})
	// Borrowing from annotations and from the operator's QoS class
	// defaults (the policy below: Guaranteed latency; BestEffort batch with
	// 20% of its bandwidth guaranteed): prio sets its own priority and
	// guarantee; classy (BestEffort) has only a bandwidth and gets its
	// class's; badprio names no priority hbm knows.
	prio := l.createPod(podSpec{name: "prio", qos: corev1.PodQOSBurstable, ann: map[string]string{
		"kubernetes.io/egress-bandwidth": "200M", "hbm.io/egress-guarantee": "50M", "hbm.io/priority": "latency"}})
	classy := l.createPod(podSpec{name: "classy", qos: corev1.PodQOSBestEffort, ann: map[string]string{
		"kubernetes.io/egress-bandwidth": "400M"}})
	badprio := l.createPod(podSpec{name: "badprio", qos: corev1.PodQOSBurstable, ann: map[string]string{
		"kubernetes.io/egress-bandwidth": "100M", "hbm.io/priority": "urgent"}})
	prioCg, classyCg, badprioCg := cg(corev1.PodQOSBurstable, prio), cg(corev1.PodQOSBestEffort, classy), cg(corev1.PodQOSBurstable, badprio)
	for _, c := range []string{prioCg, classyCg, badprioCg} {
		l.mkCgroup(c)
	}
	webG := l.mkCgroup(cg(corev1.PodQOSBurstable, web))
	dbCg := cg(corev1.PodQOSGuaranteed, db)
	l.mkCgroup(dbCg)
	l.mkCgroup(cg(corev1.PodQOSBurstable, far)) // as if: its group on this node must stay unlimited
	l.mkCgroup(cg(corev1.PodQOSBestEffort, plain))
	badCg := cg(corev1.PodQOSBestEffort, bad)
	l.mkCgroup(badCg)
	lendCg := cg(corev1.PodQOSBestEffort, lend)
	l.mkCgroup(lendCg)

	// The operator's policy: no-drop allowed (db and late use it); an
	// invalid annotation keeps the pod's previous limit, else the node's
	// default (10 Mbit/s): bad gets the default, never unlimited.
	policy := writeFile(t, "hbm.yaml", `kubernetes:
  allowed_options: [no-drop, no-pace, loopback, burst, pace, mark, drop-large, drop-small, guarantee, priority]
  invalid: keep
  default_egress: 10mbit
  default_ingress: 10mbit
  qos_classes:
    Guaranteed: {priority: latency}
    BestEffort: {priority: batch, egress_guarantee: 20%}
`)
	metricsPort := freePort(t)
	d := l.startDaemon(sdRoot, metricsPort, "--config", policy)
	want := map[string]uint64{webG.Rel + " egress": 200e6, webG.Rel + " ingress": 1e9, dbCg + " egress": 100e6, badCg + " egress": 10e6,
		lendCg + " egress": 100e6, prioCg + " egress": 50e6, classyCg + " egress": 80e6, badprioCg + " egress": 10e6}
	l.expectRates("first pass", want, 10*time.Second)
	if !l.enforced(dbCg, "egress") {
		t.Errorf("db: egress limit not enforced (hbm show --json)")
	}
	l.expectEvent("bad", "quantities must match the regular expression")
	l.expectEvent("badprio", `hbm.io/priority: priority "urgent": want latency, normal or batch`)
	// Guarantee, ceiling and priority as hbm show --json reports them: the
	// pod's own annotations (prio; lend's guarantee over its class's 20%),
	// its class's (classy; db, Guaranteed), neither (web: Burstable has no
	// defaults: as without a policy), the node's default (badprio).
	st, err := l.hbm.Show()
	if err != nil {
		t.Fatal(err)
	}
	type borrow struct {
		rate, ceil uint64
		prio       string
	}
	gotB := map[string]borrow{}
	for _, g := range st {
		if g.Egress != nil {
			gotB[g.Cgroup] = borrow{g.Egress.RateBps, g.Egress.CeilBps, g.Egress.Priority}
		}
	}
	for cgp, w := range map[string]borrow{
		prioCg: {50e6, 200e6, "latency"}, classyCg: {80e6, 400e6, "batch"}, lendCg: {100e6, 400e6, "batch"},
		dbCg: {100e6, 0, "latency"}, webG.Rel: {200e6, 0, ""}, badprioCg: {10e6, 0, ""},
	} {
		if gotB[cgp] != w {
			t.Errorf("%s egress: rate, ceiling, priority %+v, want %+v", cgp, gotB[cgp], w)
		}
	}

	// Enforced on real traffic from a process in the pod's cgroup.
	cfg := workload.Config{Addr: tb.ReceiverAddr(netlab.ServerPort, false), Streams: 3, Duration: 120 * time.Second, CC: "cubic"}
	client, err := tb.StartScriptClient(l.bin, webG.Dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	time.Sleep(time.Second)
	window(t, client, "200M", 200e6)

	// Metrics carry the pod's namespace and name.
	m, err := scrape(metricsPort)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	for _, s := range []string{
		fmt.Sprintf(`hbm_group_limit_bytes_per_second{direction="egress",group=%q,namespace=%q,pod="web",unit=""} 2.5e+07`, webG.Rel, ns),
		fmt.Sprintf(`hbm_group_bytes_total{direction="egress",group=%q,namespace=%q,pod="db",unit=""}`, dbCg, ns),
		// The guarantee is the limit, the bandwidth annotation its ceiling.
		fmt.Sprintf(`hbm_group_limit_bytes_per_second{direction="egress",group=%q,namespace=%q,pod="lend",unit=""} 1.25e+07`, lendCg, ns),
		fmt.Sprintf(`hbm_group_ceil_bytes_per_second{direction="egress",group=%q,namespace=%q,pod="lend",unit=""} 5e+07`, lendCg, ns),
		// Priorities: the pod's own, its class's.
		fmt.Sprintf(`hbm_group_priority_info{direction="egress",group=%q,namespace=%q,pod="prio",priority="latency",unit=""} 1`, prioCg, ns),
		fmt.Sprintf(`hbm_group_priority_info{direction="egress",group=%q,namespace=%q,pod="classy",priority="batch",unit=""} 1`, classyCg, ns),
		fmt.Sprintf(`hbm_group_ceil_bytes_per_second{direction="egress",group=%q,namespace=%q,pod="classy",unit=""} 5e+07`, classyCg, ns),
	} {
		if !strings.Contains(m, s) {
			t.Errorf("metrics lack %s", s)
		}
	}
	if strings.Contains(m, string(web.UID)) {
		t.Errorf("metrics contain a pod UID")
	}

	// An annotation edit changes the limit in place, and the traffic
	// follows.
	start := time.Now()
	l.annotate("web", map[string]string{"kubernetes.io/egress-bandwidth": "400M"})
	want[webG.Rel+" egress"] = 400e6
	l.expectRates("egress edited to 400M", want, 10*time.Second)
	t.Logf("annotation edit to new limit: %v", time.Since(start).Round(time.Millisecond))
	time.Sleep(500 * time.Millisecond)
	window(t, client, "400M", 400e6)

	// An invalid edit: an Event, a log line, and the pod keeps its limits.
	l.annotate("web", map[string]string{"kubernetes.io/egress-bandwidth": "lots"})
	l.expectEvent("web", "quantities must match the regular expression")
	if !testutil.WaitFor(10*time.Second, func() bool { return strings.Contains(d.Out.String(), "pod hbm-e2e/web: invalid bandwidth annotations") }) {
		t.Errorf("daemon did not log the invalid annotation:\n%s", testutil.LastLines(d.Out.String(), 10))
	}
	time.Sleep(300 * time.Millisecond) // a pass would have run
	l.expectRates("invalid edit", want, 0)
	window(t, client, "400M, invalid edit", 400e6)

	// Killed and restarted, the daemon keeps the pod's limits (invalid
	// annotation included) without a change.
	if err := d.Kill(syscall.SIGKILL); err == nil {
		t.Errorf("daemon after SIGKILL: exited cleanly?")
	}
	d = l.startDaemon(sdRoot, metricsPort, "--config", policy)
	l.expectRates("restarted", want, 0)
	if out := d.Out.String(); !strings.Contains(out, "0 applied or changed, 0 removed, 8 kept") {
		t.Errorf("restarted daemon did not adopt the 8 limits as they were (guarantees, ceilings and priorities included):\n%s", testutil.LastLines(out, 10))
	}

	// Fixed, then the ingress annotation removed: that limit goes.
	l.annotate("web", map[string]string{"kubernetes.io/egress-bandwidth": "200M", "kubernetes.io/ingress-bandwidth": ""})
	want[webG.Rel+" egress"] = 200e6
	delete(want, webG.Rel+" ingress")
	l.expectRates("ingress annotation removed", want, 10*time.Second)

	// A pod created while the daemon runs, its group made after it (the
	// kubelet's order): limited as soon as the group appears.
	start = time.Now()
	late := l.createPod(podSpec{name: "late", qos: corev1.PodQOSBestEffort, ann: map[string]string{"kubernetes.io/ingress-bandwidth": "300M", "hbm.io/ingress-no-drop": "true"}})
	lateCg := cg(corev1.PodQOSBestEffort, late)
	l.mkCgroup(lateCg)
	want[lateCg+" ingress"] = 300e6
	l.expectRates("pod created", want, 10*time.Second)
	t.Logf("pod created to limit in force: %v", time.Since(start).Round(time.Millisecond))

	// Deleted: its limits go (before kubelet removes the group).
	ctx := context.Background()
	if err := l.c.admin.CoreV1().Pods(ns).Delete(ctx, "web", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	delete(want, webG.Rel+" egress")
	l.expectRates("pod deleted", want, 10*time.Second)
	r, err := client.Window(ctx, "deleted", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r.Goodput < 1.5*400e6 {
		t.Errorf("after the pod's deletion: goodput %.1f Mbit/s, want it unlimited (> 600)", r.Goodput/1e6)
	}
	client.Close()

	// The group removed (kubelet, after the pod): its limit goes too.
	if err := cgroup.RemoveWait(lateCg, 50, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	delete(want, lateCg+" ingress")
	l.expectRates("late's group removed", want, 10*time.Second)

	if err := d.Kill(syscall.SIGTERM); err != nil {
		t.Errorf("daemon after SIGTERM: %v\n%s", err, testutil.LastLines(d.Out.String(), 10))
	}
	if out := d.Out.String(); strings.Contains(out, "panic") || strings.Contains(out, "forbidden") {
		t.Errorf("daemon log:\n%s", out)
	}

	// The cgroupfs driver, detected: a daemon on that tree takes its
	// pods, and gives up the systemd tree's (no longer its node's layout).
	fsPod := l.createPod(podSpec{name: "fs", qos: corev1.PodQOSGuaranteed, ann: map[string]string{"kubernetes.io/egress-bandwidth": "150M"}})
	fsCg := podCgroup(fsRoot, false, corev1.PodQOSGuaranteed, fsPod.UID)
	l.mkCgroup(fsRoot + "/kubepods/burstable")
	l.mkCgroup(fsCg)
	d = l.startDaemon(fsRoot, metricsPort, "--config", policy)
	l.expectRates("cgroupfs driver", map[string]uint64{fsCg + " egress": 150e6}, 10*time.Second)
	if !strings.HasPrefix(fsCg, fsRoot+"/kubepods/pod") {
		t.Errorf("cgroupfs group %s", fsCg)
	}
	d.Kill(syscall.SIGTERM)
}
