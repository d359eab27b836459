package k8s

import (
	"context"
	"io"
	"log"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/hbm-dev/hbm/internal/daemon"
	"github.com/hbm-dev/hbm/internal/dataplane"
	"github.com/hbm-dev/hbm/internal/rate"
)

// The source against a fake clientset (the end-to-end test, test/k8s, uses
// a real API server).

// noWatchList is the fake core/v1 client, saying (as the fake clientset
// does) that it cannot stream the initial list.
type noWatchList struct{ typedcorev1.CoreV1Interface }

func (noWatchList) IsWatchListSemanticsUnSupported() bool { return true }

func testPod(name, node string, uid types.UID, ann map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: uid, Annotations: ann},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "pause"}}},
		Status:     corev1.PodStatus{QOSClass: corev1.PodQOSBurstable},
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSource(t *testing.T) {
	mnt := t.TempDir()
	os.MkdirAll(filepath.Join(mnt, "kubepods.slice", "kubepods-burstable.slice"), 0o755)
	cs := fake.NewClientset(
		testPod("a", "n1", "u-a", map[string]string{EgressAnnotation: "100M"}),
		testPod("b", "n1", "u-b", map[string]string{IngressAnnotation: "1G", "hbm.io/ingress-no-drop": "true"}),
		testPod("c", "n1", "u-c", nil),
		testPod("bad", "n1", "u-bad", map[string]string{EgressAnnotation: "10mbit"}),
	)
	src, err := NewWithClient(noWatchList{cs.CoreV1()}, Config{NodeName: "n1"}, mnt, log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	pol := daemon.DefaultPodPolicy()
	pol.Allowed["no-drop"] = true // b's
	src.SetPolicy(pol)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	byName := func() map[string]daemon.PodDecl {
		pods, _ := src.Pods()
		m := map[string]daemon.PodDecl{}
		for _, p := range pods {
			m[p.Name] = p
		}
		return m
	}
	m := byName()
	if len(m) != 3 {
		t.Fatalf("pods %+v, want a, b and bad", m)
	}
	if a := m["a"]; a.Cgroup != "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podu_a.slice" || a.Egress == nil || a.Egress.Rate != 100e6 || a.Ingress != nil {
		t.Errorf("a: %+v", a)
	}
	if b := m["b"]; b.Ingress == nil || !b.Ingress.NoDrop || b.Egress != nil {
		t.Errorf("b: %+v", b)
	}
	// Invalid: the node's default limit (none configured: hbm's minimum),
	// never unlimited.
	if bad := m["bad"]; bad.KeepEgress || bad.Egress == nil || bad.Egress.Rate != rate.Min || bad.Ingress != nil {
		t.Errorf("bad: %+v, want egress at the default limit", bad)
	}
	// The invalid value is an Event on the pod, once.
	events := func() []corev1.Event {
		l, _ := cs.CoreV1().Events("ns").List(ctx, metav1.ListOptions{})
		return l.Items
	}
	waitUntil(t, "event", func() bool { return len(events()) > 0 })
	ev := events()[0]
	if ev.InvolvedObject.Name != "bad" || ev.Reason != EventReason || ev.Type != corev1.EventTypeWarning ||
		!strings.Contains(ev.Message, "quantities must match the regular expression") {
		t.Errorf("event %+v", ev)
	}

	// An annotation edit signals a pass and is seen.
	drain := func() {
		select {
		case <-src.Changed():
		default:
		}
	}
	drain()
	a, _ := cs.CoreV1().Pods("ns").Get(ctx, "a", metav1.GetOptions{})
	a.Annotations[EgressAnnotation] = "300M"
	cs.CoreV1().Pods("ns").Update(ctx, a, metav1.UpdateOptions{})
	select {
	case <-src.Changed():
	case <-time.After(10 * time.Second):
		t.Fatal("no signal after an annotation edit")
	}
	waitUntil(t, "300M", func() bool { p := byName()["a"]; return p.Egress != nil && p.Egress.Rate == 300e6 })

	// (Pods of other nodes: the fake clientset ignores field selectors;
	// test/k8s checks them against a real API server.)
	// Deletion signals and the pod goes.
	drain()
	cs.CoreV1().Pods("ns").Delete(ctx, "b", metav1.DeleteOptions{})
	select {
	case <-src.Changed():
	case <-time.After(10 * time.Second):
		t.Fatal("no signal after a deletion")
	}
	waitUntil(t, "b gone", func() bool { _, ok := byName()["b"]; return !ok })

	// A status-only update of a pod signals nothing.
	drain()
	c, _ := cs.CoreV1().Pods("ns").Get(ctx, "c", metav1.GetOptions{})
	c.Status.Phase = corev1.PodRunning
	cs.CoreV1().Pods("ns").UpdateStatus(ctx, c, metav1.UpdateOptions{})
	select {
	case <-src.Changed():
		t.Error("a status update of a pod without annotations signalled a pass")
	case <-time.After(300 * time.Millisecond):
	}

	// A policy with class defaults (SetPolicy, as on a reload): a's
	// class (Burstable, from its status) gives it a guarantee and a
	// priority, and a pass is signalled.
	drain()
	cp := pol
	cp.Classes = map[string]daemon.ClassDefault{"Burstable": {Priority: dataplane.PriorityBatch, HasPriority: true, EgressGuarantee: 25}}
	src.SetPolicy(cp)
	select {
	case <-src.Changed():
	case <-time.After(10 * time.Second):
		t.Fatal("no signal after a new policy")
	}
	if p := byName()["a"]; p.Egress == nil || p.Egress.Rate != 75e6 || p.Egress.Ceil != 300e6 || p.Egress.Priority != dataplane.PriorityBatch {
		t.Errorf("a under Burstable's defaults: %+v, want 75M guaranteed up to 300M, batch", p.Egress)
	}

	// No kubepods group yet: nothing declared, the root watched.
	src.mnt = t.TempDir()
	if pods, watch := src.Pods(); len(pods) != 0 || len(watch) == 0 || watch[0] != src.mnt {
		t.Errorf("no kubepods: %v, watching %v", pods, watch)
	}
}

func TestSourceNeedsNode(t *testing.T) {
	if _, err := NewWithClient(fake.NewClientset().CoreV1(), Config{}, t.TempDir(), log.New(io.Discard, "", 0)); err == nil || !strings.Contains(err.Error(), "NODE_NAME") {
		t.Errorf("no node name: %v", err)
	}
}

// A static pod's mirror is limited on the group kubelet made for the static
// pod, named after the config hash. A claim is refused (the pod's own UID
// used) without kubelet's owner reference to the node, with a hash that is
// not one, with another pod's UID, or when an older pod claims it.
func TestSourceMirrorPod(t *testing.T) {
	mnt := t.TempDir()
	os.MkdirAll(filepath.Join(mnt, "kubepods.slice"), 0o755)
	const hash = "6f1e0a9b4c2d8e7f6f1e0a9b4c2d8e7f"
	t0 := metav1.NewTime(time.Now().Add(-time.Hour))
	mirrorPod := func(name string, uid types.UID, h string, owned bool, created metav1.Time) *corev1.Pod {
		p := testPod(name, "n1", uid, map[string]string{EgressAnnotation: "100M", MirrorAnnotation: h, HashAnnotation: h, "kubernetes.io/config.source": "file"})
		p.CreationTimestamp = created
		if owned {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "n1", UID: "node-uid"}}
		}
		return p
	}
	const victimUID = "0a1b2c3d-0000-4000-8000-000000000001"
	victim := testPod("victim", "n1", victimUID, nil)
	cs := fake.NewClientset(
		mirrorPod("etcd-n1", "api-uid-1", hash, true, t0),
		mirrorPod("late-claim", "api-uid-2", hash, true, metav1.Now()),
		mirrorPod("unowned", "api-uid-3", "aaaa", false, t0),
		mirrorPod("bad-hash", "api-uid-4", "../../../system.slice", true, t0),
		mirrorPod("other-pods-uid", "api-uid-5", victimUID, true, t0),
		victim,
	)
	src, err := NewWithClient(noWatchList{cs.CoreV1()}, Config{NodeName: "n1"}, mnt, log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	pods, _ := src.Pods()
	got := map[string]string{}
	for _, p := range pods {
		got[p.Name] = strings.TrimPrefix(p.Cgroup, "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-")
	}
	want := map[string]string{
		"etcd-n1":        "pod" + hash + ".slice", // the static pod's group
		"late-claim":     "podapi_uid_2.slice",
		"unowned":        "podapi_uid_3.slice",
		"bad-hash":       "podapi_uid_4.slice",
		"other-pods-uid": "podapi_uid_5.slice",
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: group %q, want %q", name, got[name], w)
		}
	}
}
