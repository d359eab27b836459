package k8s

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/hbm-dev/hbm/internal/dataplane"
	"github.com/hbm-dev/hbm/internal/testutil"
)

// TestKubernetesBench is the benchmark (HBM_K8S_BENCH=1; not part
// of make test): time from pod creation in the API to the limit in force,
// P50/P99 over 100 pods (each pod's group made right after the API call,
// as kubelet would); time from an annotation edit to the new rate (20
// edits); the daemon's CPU and memory with 250 pods on the node.
//
//	HBM_K8S_BENCH=1 make test-k8s     # or: go test -run Bench -v ./test/k8s
func TestKubernetesBench(t *testing.T) {
	if os.Getenv("HBM_K8S_BENCH") == "" {
		t.Skip("set HBM_K8S_BENCH=1 to run the benchmark")
	}
	l := newLab(t)
	d := l.startDaemon(sdRoot, freePort(t))
	pid := d.Cmd.Process.Pid

	// rateOf reads the data plane (pins, shared lock) for group id.
	rateOf := func(id uint64) uint64 {
		m, err := dataplane.OpenReadOnly(l.pinDir)
		if err != nil || m == nil {
			return 0
		}
		defer m.Close()
		es, _ := m.List()
		for _, e := range es {
			if e.CgroupID == id && e.Dir == dataplane.Egress && e.Enforced {
				return uint64(e.Limit.Rate)
			}
		}
		return 0
	}
	wait := func(id, want uint64) bool {
		return testutil.WaitFor(20*time.Second, func() bool { return rateOf(id) == want })
	}
	cpu0, rss0 := procCPU(t, pid), procRSS(t, pid)
	var create []time.Duration
	var ids []uint64
	for i := range 250 {
		start := time.Now()
		p := l.createPod(podSpec{name: fmt.Sprintf("p%03d", i), qos: corev1.PodQOSBurstable,
			ann: map[string]string{"kubernetes.io/egress-bandwidth": "100M"}})
		g := l.mkCgroup(podCgroup(sdRoot, true, corev1.PodQOSBurstable, p.UID))
		if !wait(g.ID, 100e6) {
			t.Fatalf("pod %d: no limit within 20s", i)
		}
		if i < 100 {
			create = append(create, time.Since(start))
		}
		ids = append(ids, g.ID)
	}
	cpuCreate := procCPU(t, pid) - cpu0
	var edit []time.Duration
	for i := range 20 {
		want := uint64(200e6)
		v := "200M"
		if i%2 == 1 {
			want, v = 100e6, "100M"
		}
		start := time.Now()
		l.annotate("p000", map[string]string{"kubernetes.io/egress-bandwidth": v})
		if !wait(ids[0], want) {
			t.Fatalf("edit %d: no new rate within 20s", i)
		}
		edit = append(edit, time.Since(start))
	}
	cpu1 := procCPU(t, pid)
	time.Sleep(30 * time.Second)
	idle := procCPU(t, pid) - cpu1
	t.Logf("pod created (API) to limit enforced, 100 pods: P50 %v, P99 %v, max %v", pct(create, 50), pct(create, 99), pct(create, 100))
	t.Logf("annotation edit to new rate, 20 edits: P50 %v, P99 %v", pct(edit, 50), pct(edit, 99))
	t.Logf("daemon with 250 pods: CPU %v to apply the 250 (%.1f ms per pod), %v idle over 30 s; RSS %d MB before the pods, %d MB with them",
		cpuCreate, float64(cpuCreate.Microseconds())/1000/250, idle, rss0>>20, procRSS(t, pid)>>20)
	d.Kill(syscall.SIGTERM)
}

func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))].Round(100 * time.Microsecond)
}

// procCPU is the process' user+system CPU time (/proc/PID/stat, clock ticks of 10 ms).
func procCPU(t *testing.T, pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	u, _ := strconv.ParseUint(f[11], 10, 64)
	s, _ := strconv.ParseUint(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond
}

// procRSS is the process' resident memory in bytes.
func procRSS(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
