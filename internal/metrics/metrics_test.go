package metrics

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/hbm-dev/hbm/internal/dataplane"
	"github.com/hbm-dev/hbm/internal/rate"
	hbmtest "github.com/hbm-dev/hbm/internal/testutil"
)

func entries() []dataplane.Entry {
	return []dataplane.Entry{
		{CgroupID: 1, Cgroup: "/batch", Dir: dataplane.Egress, Enforced: true, Limit: dataplane.Limit{Rate: 300 * rate.Rate(1e6)},
			Stats: dataplane.Stats{Bytes: 1000, Packets: 10, Marked: 3, CWR: 2, Dropped: 1, DroppedBytes: 1500}},
		{CgroupID: 2, Cgroup: "/system.slice/nginx.service", Dir: dataplane.Ingress, Enforced: true, Limit: dataplane.Limit{Rate: 1e9}},
		{CgroupID: 3, Gone: true, Dir: dataplane.Egress, Limit: dataplane.Limit{Rate: 1e9}}, // removed: no series
		{CgroupID: 4, Dir: dataplane.Egress, Limit: dataplane.Limit{Rate: 1e9}},             // unresolved: no series
		{CgroupID: 5, Cgroup: "/kubepods.slice/kubepods-pod1.slice", Dir: dataplane.Egress, Enforced: true, Limit: dataplane.Limit{Rate: 200e6}},
		{CgroupID: 6, Cgroup: "/tenants/a", Dir: dataplane.Egress, Enforced: true, Limit: dataplane.Limit{Rate: 100e6, Ceil: 1e9, Priority: dataplane.PriorityLatency},
			Stats: dataplane.Stats{InForce: 400e6}},
	}
}

func scrape(t *testing.T, list Lister) string {
	t.Helper()
	reg, _ := NewRegistry("test", NewGroupCollector(list, func() map[uint64]GroupLabels {
		return map[uint64]GroupLabels{2: {Unit: "nginx.service"}, 5: {Namespace: "shop", Pod: "web-0"}}
	}))
	srv := httptest.NewServer(Handler(reg))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %s: %s", resp.Status, b.String())
	}
	return b.String()
}

func TestGroupMetrics(t *testing.T) {
	es := entries()
	out := scrape(t, func() ([]dataplane.Entry, error) { return es, nil })
	for _, want := range []string{
		`hbm_group_bytes_total{direction="egress",group="/batch",namespace="",pod="",unit=""} 1000`,
		`hbm_group_packets_total{direction="egress",group="/batch",namespace="",pod="",unit=""} 10`,
		`hbm_group_ce_marked_packets_total{direction="egress",group="/batch",namespace="",pod="",unit=""} 3`,
		`hbm_group_cwr_packets_total{direction="egress",group="/batch",namespace="",pod="",unit=""} 2`,
		`hbm_group_dropped_packets_total{direction="egress",group="/batch",namespace="",pod="",unit=""} 1`,
		`hbm_group_dropped_bytes_total{direction="egress",group="/batch",namespace="",pod="",unit=""} 1500`,
		`hbm_group_limit_bytes_per_second{direction="egress",group="/batch",namespace="",pod="",unit=""} 3.75e+07`,
		`hbm_group_ceil_bytes_per_second{direction="egress",group="/batch",namespace="",pod="",unit=""} 3.75e+07`,
		`hbm_group_rate_in_force_bytes_per_second{direction="egress",group="/batch",namespace="",pod="",unit=""} 3.75e+07`,
		`hbm_group_limit_bytes_per_second{direction="egress",group="/tenants/a",namespace="",pod="",unit=""} 1.25e+07`,
		`hbm_group_ceil_bytes_per_second{direction="egress",group="/tenants/a",namespace="",pod="",unit=""} 1.25e+08`,
		`hbm_group_rate_in_force_bytes_per_second{direction="egress",group="/tenants/a",namespace="",pod="",unit=""} 5e+07`,
		`hbm_group_priority_info{direction="egress",group="/tenants/a",namespace="",pod="",priority="latency",unit=""} 1`,
		`hbm_group_priority_info{direction="egress",group="/batch",namespace="",pod="",priority="normal",unit=""} 1`,
		`hbm_group_bytes_total{direction="ingress",group="/system.slice/nginx.service",namespace="",pod="",unit="nginx.service"} 0`,
		`hbm_group_limit_bytes_per_second{direction="egress",group="/kubepods.slice/kubepods-pod1.slice",namespace="shop",pod="web-0",unit=""} 2.5e+07`,
		`hbm_build_info{goversion=`,
		`hbm_daemon_reconcile_errors_total 0`,
		`hbm_daemon_last_reconcile_timestamp_seconds`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %s in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "removed") || strings.Count(out, "hbm_group_bytes_total{") != 4 {
		t.Errorf("series for removed or unresolved groups:\n%s", out)
	}
	// A group that goes away loses its series at the next scrape.
	es = es[1:]
	if out := scrape(t, func() ([]dataplane.Entry, error) { return es, nil }); strings.Contains(out, `group="/batch"`) {
		t.Errorf("series of a removed limit still exported")
	}
}

// TestLint: client_golang's linter (the one promtool uses) finds nothing,
// and promtool itself passes when it is installed (make test installs it).
func TestLint(t *testing.T) {
	reg, _ := NewRegistry("test", NewGroupCollector(func() ([]dataplane.Entry, error) { return entries(), nil }, nil))
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	if _, err := exec.LookPath("promtool"); err != nil {
		if hbmtest.InCI() {
			t.Fatalf("promtool not installed under CI=true (scripts/deps.sh installs prometheus): %v", err)
		}
		t.Skip("promtool not installed")
	}
	out := scrape(t, func() ([]dataplane.Entry, error) { return entries(), nil })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "promtool", "check", "metrics")
	cmd.Stdin = strings.NewReader(out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v: %s", err, b)
	}
}

func TestReadOnly(t *testing.T) {
	reg, _ := NewRegistry("test", nil)
	srv := httptest.NewServer(Handler(reg))
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/metrics", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics: %s, want 405", resp.Status)
	}
	if resp, err := http.Get(srv.URL + "/"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Errorf("GET /: %s, want 404", resp.Status)
		}
	}
}

// TestHostileGroupNames: a cgroup name with control bytes or invalid UTF-8
// (the owner of a delegated subtree chooses it) neither breaks the scrape
// nor hides other groups' series: its group label is the name Go-quoted
// (as hbm show prints it), every series is there, the exposition is valid
// UTF-8 and passes the linter (and promtool when installed).
func TestHostileGroupNames(t *testing.T) {
	es := []dataplane.Entry{
		{CgroupID: 11, Cgroup: "/d/\xff\xfe", Dir: dataplane.Egress, Enforced: true, Limit: dataplane.Limit{Rate: 1e9}},
		{CgroupID: 12, Cgroup: "/d/\x1b[2J\x1b[Hroot", Dir: dataplane.Egress, Enforced: true, Limit: dataplane.Limit{Rate: 1e9}},
		{CgroupID: 13, Cgroup: "/d/a\rb\nc", Dir: dataplane.Ingress, Enforced: true, Limit: dataplane.Limit{Rate: 1e9}},
		{CgroupID: 14, Cgroup: "/plain", Dir: dataplane.Egress, Enforced: true, Limit: dataplane.Limit{Rate: 1e9}, Stats: dataplane.Stats{Bytes: 42}},
	}
	// (scrape labels ids 2 and 5; these have none.)
	list := func() ([]dataplane.Entry, error) { return es, nil }
	var out string
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("scrape panicked: %v", r)
			}
		}()
		out = scrape(t, list)
	}()
	if !utf8.ValidString(out) {
		t.Errorf("invalid UTF-8 in the exposition:\n%q", out)
	}
	if strings.ContainsAny(out, "\x1b\r") {
		t.Errorf("raw control bytes in the exposition:\n%q", out)
	}
	for _, want := range []string{
		`hbm_group_bytes_total{direction="egress",group="\"/d/\\xff\\xfe\"",namespace="",pod="",unit=""} 0`,
		`hbm_group_bytes_total{direction="egress",group="\"/d/\\x1b[2J\\x1b[Hroot\"",namespace="",pod="",unit=""} 0`,
		`hbm_group_bytes_total{direction="ingress",group="\"/d/a\\rb\\nc\"",namespace="",pod="",unit=""} 0`,
		`hbm_group_bytes_total{direction="egress",group="/plain",namespace="",pod="",unit=""} 42`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %s in:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "hbm_group_bytes_total{"); n != 4 {
		t.Errorf("%d hbm_group_bytes_total series, want 4:\n%s", n, out)
	}
	reg, _ := NewRegistry("test", NewGroupCollector(list, nil))
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	if _, err := exec.LookPath("promtool"); err != nil {
		t.Skip("promtool not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "promtool", "check", "metrics")
	cmd.Stdin = strings.NewReader(out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v: %s", err, b)
	}
}

// TestServerBounds: a client that never finishes its headers, or idles on
// a keep-alive connection, is cut off; scrapes beyond MaxInFlight get 503
// at once instead of queueing.
func TestServerBounds(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) })
	blocking := func() ([]dataplane.Entry, error) { <-release; return entries(), nil }
	reg, _ := NewRegistry("test", NewGroupCollector(blocking, nil))
	o := ServerOptions{ReadHeaderTimeout: 200 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: 5 * time.Second,
		IdleTimeout: 300 * time.Millisecond, MaxInFlight: 2}
	srv := NewServer(reg, o)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	addr := ln.Addr().String()

	// Half a request line, then nothing: closed within the header timeout.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\n"))
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	start := time.Now()
	if _, err := io.ReadAll(c); err != nil {
		t.Errorf("slow client: %v after %v, want the server to close it", err, time.Since(start))
	} else if d := time.Since(start); d > 2*time.Second {
		t.Errorf("slow client cut off after %v", d)
	}

	// Two scrapes in flight (blocked in the collector); a third is refused.
	url := "http://" + addr + "/metrics"
	var wg sync.WaitGroup
	codes := make(chan int, 2)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(url)
			if err != nil {
				codes <- 0
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	time.Sleep(300 * time.Millisecond)
	start = time.Now()
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get(url)
	if err != nil {
		t.Fatalf("third scrape: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || time.Since(start) > time.Second {
		t.Errorf("third scrape: %s after %v, want 503 at once", resp.Status, time.Since(start))
	}
	once.Do(func() { close(release) })
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != http.StatusOK {
			t.Errorf("scrape in flight: %d", c)
		}
	}

	// A keep-alive connection left idle is closed.
	c2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.Write([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"))
	c2.SetReadDeadline(time.Now().Add(3 * time.Second))
	start = time.Now()
	if _, err := io.ReadAll(c2); err != nil {
		t.Errorf("idle keep-alive: %v, want closed by the server", err)
	} else if d := time.Since(start); d > 2*time.Second {
		t.Errorf("idle keep-alive closed after %v", d)
	}
}
