package eval

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The outputs in testdata are real: wrk 4.1 and ab 2.3 (Debian 12) against
// nginx-light 1.22 on this machine's loopback.
func TestParseWrk(t *testing.T) {
	for _, tc := range []struct {
		file                string
		requests            int64
		secs, gb, rps       float64
		p50, p90, p99, maxv float64
		errors              uint64
	}{
		{"wrk-keepalive-100KB.txt", 48709, 2.01, 4.66, 24286.45, 1050, 1650, 3030, 8330, 0},
		{"wrk-close-100KB.txt", 29531, 2.00, 2.82, 14729.57, 880, 2770, 5340, 11530, 0},
		{"wrk-keepalive-10MB.txt", 648, 3.10, 6.47, 208.98, 173450, 323000, 515220, 747350, 0},
		{"wrk-timeouts-10MB.txt", 421, 2.29, 4.74, 184.24, 660230, 902880, 987310, 995840, 204},
	} {
		r, err := parseWrk(readTestdata(t, tc.file))
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		near := func(what string, got, want float64) {
			if d := got - want; d > want*1e-6 || d < -want*1e-6 {
				t.Errorf("%s: %s %v, want %v", tc.file, what, got, want)
			}
		}
		if r.Requests != tc.requests || r.Errors != tc.errors || r.Non2xx != 0 {
			t.Errorf("%s: requests %d errors %d non-2xx %d", tc.file, r.Requests, r.Errors, r.Non2xx)
		}
		near("seconds", r.Seconds, tc.secs)
		near("bytes", r.Bytes, tc.gb*(1<<30))
		near("req/s", r.ReqPerSec, tc.rps)
		near("P50", r.P50, tc.p50)
		near("P90", r.P90, tc.p90)
		near("P99", r.P99, tc.p99)
		near("max", r.Max, tc.maxv)
	}
}

func TestParseWrkEdges(t *testing.T) {
	// No request completed (a 10 MB response to each of 64 clients at
	// 200 Mbit/s takes longer than the window): bytes, no latency.
	none := `Running 3s test @ http://198.18.0.1:5201/10485760.bin
  2 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     0.00us    0.00us   0.00us    -nan%
    Req/Sec     0.00      0.00     0.00      -nan%
  Latency Distribution
     50%    0.00us
     75%    0.00us
     90%    0.00us
     99%    0.00us
  0 requests in 3.01s, 68.12MB read
  Non-2xx or 3xx responses: 2
Requests/sec:      0.00
Transfer/sec:     22.63MB
`
	r, err := parseWrk(none)
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests != 0 || r.Bytes != 68.12*(1<<20) || r.P99 != 0 || r.Non2xx != 2 {
		t.Errorf("%+v", r)
	}
	for _, bad := range []string{"", "wrk: unable to connect to 198.18.0.1:5201 Connection refused\n",
		strings.Replace(readTestdata(t, "wrk-keepalive-100KB.txt"), "Latency Distribution", "", 1)[:300]} {
		if _, err := parseWrk(bad); err == nil {
			t.Errorf("parseWrk(%.60q) took it", bad)
		}
	}
	// A report without the distribution (no --latency) is refused.
	noDist := readTestdata(t, "wrk-keepalive-100KB.txt")
	i, j := strings.Index(noDist, "  Latency Distribution"), strings.Index(noDist, "  48709 requests")
	if _, err := parseWrk(noDist[:i] + noDist[j:]); err == nil || !strings.Contains(err.Error(), "--latency") {
		t.Errorf("without the distribution: %v", err)
	}
}

func TestParseAB(t *testing.T) {
	r, err := parseAB(readTestdata(t, "ab-100KB.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests != 23824 || r.Seconds != 2.0 || r.Bytes != 2447194826 || r.ReqPerSec != 11911.90 || r.Errors != 0 ||
		r.P50 != 3000 || r.P90 != 3000 || r.P99 != 7000 || r.Max != 14000 {
		t.Errorf("ab-100KB: %+v", r)
	}
	r, err = parseAB(readTestdata(t, "ab-10MB.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests != 449 || r.P50 != 51000 || r.P99 != 73000 || r.Max != 73000 || r.ReqPerSec != 147.76 {
		t.Errorf("ab-10MB: %+v", r)
	}
	// One request: ab prints no percentiles, its time is the Total line's.
	ab10 := readTestdata(t, "ab-10MB.txt")
	one := strings.Replace(ab10[:strings.Index(ab10, "Percentage of the requests")], "Complete requests:      449", "Complete requests:      1", 1)
	one = strings.Replace(one, "Total:         46   53   6.7     51      73", "Total:        269  269   0.0    269     269", 1)
	if r, err := parseAB(one); err != nil || r.Requests != 1 || r.P50 != 269000 || r.P99 != 269000 || r.Max != 269000 {
		t.Errorf("one request: %+v %v", r, err)
	}
	if _, err := parseAB(strings.Replace(one, "Total:        269", "Totally:      269", 1)); err == nil {
		t.Errorf("one request without its Total line taken")
	}
	// Failures counted; a report cut before its figures refused.
	failed := strings.Replace(readTestdata(t, "ab-100KB.txt"), "Failed requests:        0", "Failed requests:        7\n   (Connect: 0, Receive: 0, Length: 7, Exceptions: 0)", 1)
	if r, err := parseAB(failed); err != nil || r.Errors != 7 {
		t.Errorf("failed requests: %+v %v", r, err)
	}
	ab := readTestdata(t, "ab-100KB.txt")
	for _, bad := range []string{"", "apr_socket_connect(): Connection refused (111)\n", ab[:strings.Index(ab, "Complete requests")],
		ab[:strings.Index(ab, "Percentage of the requests")]} {
		if _, err := parseAB(bad); err == nil {
			t.Errorf("parseAB(%.60q) took it", bad)
		}
	}
}

func TestHTTPArgs(t *testing.T) {
	fl := Flow{Kind: "http", Count: 32, Keepalive: true}
	got := strings.Join(httpArgs(&fl, "http://a/1.bin", 10), " ")
	if want := "wrk -t 2 -c 32 -d 10s --timeout 40s --latency http://a/1.bin"; got != want {
		t.Errorf("keep-alive: %q, want %q", got, want)
	}
	fl = Flow{Kind: "http", Count: 1}
	got = strings.Join(httpArgs(&fl, "http://a/1.bin", 3), " ")
	if want := "wrk -t 1 -c 1 -d 3s --timeout 33s --latency -H Connection: close http://a/1.bin"; got != want {
		t.Errorf("close: %q, want %q", got, want)
	}
	fl = Flow{Kind: "http", Count: 8, Client: "ab"}
	got = strings.Join(httpArgs(&fl, "http://a/1.bin", 10), " ")
	if want := "ab -c 8 -t 10 -n 1000000 -s 30 -r -q http://a/1.bin"; got != want {
		t.Errorf("ab: %q, want %q", got, want)
	}
	if httpSeconds(0) != 1 || httpSeconds(1500e6) != 2 || httpSeconds(10e9) != 10 {
		t.Error("httpSeconds")
	}
}

func TestSnmpField(t *testing.T) {
	snmp := "Ip: Forwarding DefaultTTL\nIp: 2 64\nTcp: RtoAlgorithm RtoMin RetransSegs InErrs\nTcp: 1 200 4242 0\nUdp: InDatagrams\nUdp: 5\n"
	if n, err := snmpField(snmp, "Tcp", "RetransSegs"); err != nil || n != 4242 {
		t.Errorf("%d %v", n, err)
	}
	if _, err := snmpField(snmp, "Tcp", "Nope"); err == nil {
		t.Error("unknown field taken")
	}
}

func TestNginxConfig(t *testing.T) {
	c := nginxConfig("/tmp/x", "198.18.0.1:5201")
	for _, want := range []string{"daemon off;", "worker_processes 2;", "pid /tmp/x/nginx.pid;", "error_log /tmp/x/error.log",
		"access_log off;", "sendfile on;", "tcp_nopush on;", "keepalive_requests 100000;", "keepalive_timeout 60s;",
		"listen 198.18.0.1:5201;", "root /tmp/x;"} {
		if !strings.Contains(c, want) {
			t.Errorf("config lacks %q", want)
		}
	}
}

const httpScenario = `
name: web
hosts: [srv, cli]
links:
  - name: wire
    hosts: [srv, cli]
cgroups:
  - name: web
    host: srv
    egress: 200mbit
flows:
  - kind: http
    size: 100KB
    count: 32
    from: web
    to: cli
`

func TestParseHTTP(t *testing.T) {
	s, err := Parse("web.yaml", strings.NewReader(httpScenario))
	if err != nil {
		t.Fatal(err)
	}
	fl := s.Flows[0]
	if fl.Name != "http-100KB" || fl.SizeBytes != 100<<10 || fl.Count != 32 || fl.Keepalive || s.ClassGroup(&fl) != "web" {
		t.Errorf("flow %+v", fl)
	}
	if vs := s.Variants(); len(vs) != 1 || vs[0].Flow != -1 {
		t.Errorf("variants %+v", vs)
	}

	// sizes x counts: sizes outermost, labelled NAME-SIZE=COUNT.
	dims := strings.Replace(httpScenario, "    size: 100KB\n    count: 32\n", "    sizes: [10KB, 1MB]\n    counts: [8, 64]\n    keepalive: true\n", 1)
	dims = strings.Replace(dims, "name: web\n", "name: web\nquick:\n  sizes: [100KB]\n  counts: [32]\n", 1)
	s, err = Parse("web.yaml", strings.NewReader(dims))
	if err != nil {
		t.Fatal(err)
	}
	fl = s.Flows[0]
	if fl.Name != "http" || fl.SizeBytes != 10<<10 || fl.Count != 8 || !fl.Keepalive || !slices.Equal(fl.SizesBytes, []int{10 << 10, 1 << 20}) {
		t.Errorf("flow %+v", fl)
	}
	var labels []string
	for _, v := range s.Variants() {
		labels = append(labels, v.Label)
	}
	if got := strings.Join(labels, " "); got != "http-10KB=8 http-10KB=64 http-1MB=8 http-1MB=64" {
		t.Errorf("variants %q", got)
	}
	if vs := s.VariantsWith(s.Quick.Counts, s.Quick.SizesBytes); len(vs) != 1 || vs[0].Label != "http-100KB=32" || vs[0].Size != 100<<10 || vs[0].Count != 32 {
		t.Errorf("quick variants %+v", vs)
	}
	if got := httpSizes(s, 0, s.VariantsWith(nil, []int{100 << 10, 10 << 10})); !slices.Equal(got, []int{10 << 10, 100 << 10}) {
		t.Errorf("files %v", got)
	}
	// sizes alone: the flow's count in every label.
	s, err = Parse("web.yaml", strings.NewReader(strings.Replace(httpScenario, "size: 100KB", "sizes: [1MB, 10MB]", 1)))
	if err != nil {
		t.Fatal(err)
	}
	labels = nil
	for _, v := range s.Variants() {
		labels = append(labels, v.Label)
	}
	if got := strings.Join(labels, " "); got != "http-1MB=32 http-10MB=32" {
		t.Errorf("variants %q", got)
	}
}

func TestParseHTTPBad(t *testing.T) {
	edit := func(old, new string) string {
		if !strings.Contains(httpScenario, old) {
			t.Fatalf("%q not in the scenario", old)
		}
		return strings.Replace(httpScenario, old, new, 1)
	}
	for _, tc := range []struct{ name, doc, want string }{
		{"no size", edit("    size: 100KB\n", ""), `web.yaml:12: flows[0].size: an http flow needs a response size`},
		{"bad size", edit("size: 100KB", "size: 100QB"), `web.yaml:13: flows[0].size: bad size "100QB": 1 byte to 64MB`},
		{"huge size", edit("size: 100KB", "size: 1GB"), `flows[0].size: bad size "1GB"`},
		{"size and sizes", edit("size: 100KB", "size: 100KB\n    sizes: [1MB]"), `web.yaml:14: flows[0].sizes: size and sizes both set`},
		{"sizes twice", edit("size: 100KB", "sizes: [1MB, 1024KB]"), `flows[0].sizes[1]: 1024KB listed twice`},
		{"reply", edit("size: 100KB", "size: 100KB\n    reply: 1KB"), `flows[0].reply: an http flow has no reply size`},
		{"cc", edit("size: 100KB", "size: 100KB\n    cc: bbr"), `flows[0].cc: an http flow's server sends with the run's congestion control`},
		{"client", edit("size: 100KB", "size: 100KB\n    client: curl"), `flows[0].client: unknown load generator "curl" (wrk or ab)`},
		{"ab keepalive", edit("size: 100KB", "size: 100KB\n    client: ab\n    keepalive: true"), `flows[0].client: ab runs here with a new connection per request`},
		{"two servers", edit("    from: web", "    from: [web, srv]"), `flows[0].from: an http flow has one server group`},
		{"same host", edit("    to: cli", "    to: srv"), `flows[0].from: "web" and "srv" are on the same host`},
		{"count", edit("count: 32", "count: 2000"), `flows[0].count: 2000 out of range 1..1024`},
		{"auto", edit("egress: 200mbit", "egress: auto"), `flows[0].from: group "web" serves http and has egress auto`},
		{"keepalive on rpc", httpScenario + "  - {kind: rpc, size: 10KB, from: cli, to: srv, keepalive: true}\n", `flows[1].keepalive: only an http flow has keepalive`},
		{"sizes on rpc", httpScenario + "  - {kind: rpc, size: 10KB, from: cli, to: srv, sizes: [1KB]}\n", `flows[1].sizes: only an http flow has sizes`},
		{"client on stream", httpScenario + "  - {kind: stream, from: cli, to: srv, client: ab}\n", `flows[1].client: only an http flow has a client`},
		{"shared host", httpScenario + "  - {kind: stream, from: srv, to: cli}\n", `flows[0].from: the web server's group "web" shares host "srv" with "srv", the source of flows[1]`},
		{"cc beside", httpScenario + "  - {kind: stream, from: web, to: cli, cc: bbr}\n", `flows[1].cc: host "srv" serves http`},
		{"two dimensions", edit("count: 32", "counts: [8]") + "  - {kind: stream, from: cli, to: srv, counts: [1, 2]}\n", `flows[1].counts: flows[0] has counts already`},
		{"sizes then counts", edit("size: 100KB", "sizes: [1MB]") + "  - {kind: stream, from: cli, to: srv, counts: [1, 2]}\n", `flows[1].counts: flows[0] has sizes already`},
		{"quick sizes without", strings.Replace(httpScenario, "name: web\n", "name: web\nquick:\n  sizes: [1MB]\n", 1), `quick.sizes: no flow has sizes`},
		{"quick sizes bad", strings.Replace(edit("size: 100KB", "sizes: [1MB]"), "name: web\n", "name: web\nquick:\n  sizes: [0]\n", 1), `quick.sizes[0]: bad size "0"`},
	} {
		_, err := Parse("web.yaml", strings.NewReader(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
}
