package k8s

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hbm-dev/hbm/internal/testutil"
)

// TestKubernetesPolicy: the operator's policy against a real API server.
// What the pod owner did to stay unlimited (a rate below hbm's
// range, an unknown hbm.io/ key, a disallowed option, a later 1 h burst)
// gets the node's default limit or the nearest rate, each with a Warning
// Event; a static pod's mirror is limited on its config-hash group; with
// follow_edits false (a reload of the file, mounted as kubelet mounts a
// ConfigMap), later edits change nothing.
func TestKubernetesPolicy(t *testing.T) {
	l := newLab(t)
	node, err := l.c.admin.CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodeUID := node.UID
	cg := func(p *corev1.Pod) string { return podCgroup(sdRoot, true, corev1.PodQOSBestEffort, p.UID) }
	const base = "kubernetes:\n  default_egress: 20mbit\n  default_ingress: 30mbit\n"
	// The file as kubelet lays out a ConfigMap volume: hbm.yaml ->
	// ..data/hbm.yaml, ..data -> a timestamped directory; an update writes
	// a new directory and renames a new link over ..data.
	cfgDir := t.TempDir()
	cfg := filepath.Join(cfgDir, "hbm.yaml")
	version := 0
	writeConfig := func(body string) {
		version++
		ts := fmt.Sprintf("..2026_11_25_00_00_%02d.%d", version, version)
		if err := os.Mkdir(filepath.Join(cfgDir, ts), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cfgDir, ts, "hbm.yaml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(ts, filepath.Join(cfgDir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(cfgDir, "..data_tmp"), filepath.Join(cfgDir, "..data")); err != nil {
			t.Fatal(err)
		}
		if version == 1 {
			if err := os.Symlink("..data/hbm.yaml", cfg); err != nil {
				t.Fatal(err)
			}
		}
	}
	writeConfig(base)

	be := corev1.PodQOSBestEffort
	tiny := l.createPod(podSpec{name: "tiny", qos: be, ann: map[string]string{"kubernetes.io/egress-bandwidth": "4k"}})
	unknown := l.createPod(podSpec{name: "unknown", qos: be, ann: map[string]string{"kubernetes.io/egress-bandwidth": "200M",
		"kubernetes.io/ingress-bandwidth": "300M", "hbm.io/unlimited": "please"}})
	nodrop := l.createPod(podSpec{name: "nodrop", qos: be, ann: map[string]string{"kubernetes.io/egress-bandwidth": "200M", "hbm.io/egress-no-drop": "true"}})
	ok := l.createPod(podSpec{name: "ok", qos: be, ann: map[string]string{"kubernetes.io/egress-bandwidth": "100M"}})
	const hash = "0123456789abcdef0123456789abcdef"
	mirror := l.createPod(podSpec{name: "static-web", qos: be, mirrorOf: nodeUID, ann: map[string]string{"kubernetes.io/egress-bandwidth": "50M",
		"kubernetes.io/config.mirror": hash, "kubernetes.io/config.hash": hash, "kubernetes.io/config.source": "file"}})
	for _, p := range []*corev1.Pod{tiny, unknown, nodrop, ok} {
		l.mkCgroup(cg(p))
	}
	// kubelet names a static pod's group after its config hash (its UID
	// on the node), not after the mirror pod's UID in the API.
	mirrorCg := podCgroup(sdRoot, true, be, "0123456789abcdef0123456789abcdef")
	l.mkCgroup(mirrorCg)
	if strings.Contains(mirrorCg, string(mirror.UID)) {
		t.Fatalf("mirror pod's UID %s is its hash?", mirror.UID)
	}

	d := l.startDaemon(sdRoot, freePort(t), "--config", cfg)
	defer d.Kill(9)
	want := map[string]uint64{
		cg(tiny) + " egress":     8e3,   // 4k: below hbm's range, the nearest it enforces
		cg(unknown) + " egress":  20e6,  // an unknown hbm.io key: the default, both directions
		cg(unknown) + " ingress": 30e6,  //
		cg(nodrop) + " egress":   20e6,  // no-drop is not allowed by default
		cg(ok) + " egress":       100e6, // valid
		mirrorCg + " egress":     50e6,  // the static pod's group
	}
	l.expectRates("first pass under the default policy", want, 10*time.Second)
	l.expectEvent("tiny", "below the lowest rate hbm enforces")
	l.expectEvent("unknown", "hbm.io/unlimited: unknown annotation")
	l.expectEvent("nodrop", "hbm.io/egress-no-drop: not allowed on this node")

	// A later edit asking for a 1 h burst: the default, not a lifted limit.
	l.annotate("ok", map[string]string{"hbm.io/egress-burst": "1h"})
	want[cg(ok)+" egress"] = 20e6
	l.expectRates("1h burst", want, 10*time.Second)
	l.expectEvent("ok", "hbm.io/egress-burst: 1h0m0s is above the 50ms this node allows")

	// Fixed: the pod's own limit again.
	l.annotate("ok", map[string]string{"hbm.io/egress-burst": ""})
	want[cg(ok)+" egress"] = 100e6
	l.expectRates("burst removed", want, 10*time.Second)

	// Edits no longer followed (the ConfigMap updated: reloaded without a
	// restart): a new rate, or the annotation removed, changes nothing.
	writeConfig(base + "  follow_edits: false\n")
	if !testutil.WaitFor(10*time.Second, func() bool { return strings.Contains(d.Out.String(), "reloaded "+cfg) }) {
		t.Fatalf("no reload:\n%s", testutil.LastLines(d.Out.String(), 10))
	}
	l.annotate("ok", map[string]string{"kubernetes.io/egress-bandwidth": "900M"})
	l.annotate("tiny", map[string]string{"kubernetes.io/egress-bandwidth": ""})
	time.Sleep(time.Second) // a pass would have run
	l.expectRates("edits not followed", want, 0)

	// Followed again: the edits apply.
	writeConfig(base)
	want[cg(ok)+" egress"] = 900e6
	delete(want, cg(tiny)+" egress")
	l.expectRates("edits followed again", want, 10*time.Second)

	// QoS class defaults added by a reload: the pods that say nothing get
	// their class's guarantee (half their bandwidth, which stays the
	// ceiling) and priority, in place; an invalid direction keeps the
	// node's default.
	writeConfig(base + "  qos_classes:\n    BestEffort: {priority: batch, egress_guarantee: 50%}\n")
	want[cg(ok)+" egress"] = 450e6
	want[mirrorCg+" egress"] = 25e6
	l.expectRates("qos_classes reloaded", want, 10*time.Second)
	st, err := l.hbm.Show()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range st {
		if g.Cgroup == cg(ok) && (g.Egress == nil || g.Egress.CeilBps != 900e6 || g.Egress.Priority != "batch") {
			t.Errorf("ok after the reload: %+v, want ceiling 900M, batch", g.Egress)
		}
		if g.Cgroup == cg(unknown) && (g.Egress == nil || g.Egress.CeilBps != 0 || g.Egress.Priority != "") {
			t.Errorf("unknown (invalid) after the reload: %+v, want the default, no class", g.Egress)
		}
	}
	if out := d.Out.String(); strings.Contains(out, "panic") || strings.Contains(out, "forbidden") {
		t.Errorf("daemon log:\n%s", out)
	}
}
