package eval

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hbm-dev/hbm/internal/eval/result"
	"github.com/hbm-dev/hbm/internal/netlab"
)

// The http flows: a real web server (nginx, from the distribution) in the
// limited group, started by the eval like the workload servers, and a real
// load generator on the other host: wrk, with keep-alive connections or a
// new connection per request (Connection: close; its latency then excludes
// the connect), or ab (client: ab; a new connection per request, connect
// included, but CPU-bound below 1 Gbit/s of 10 KB responses on 2 cores).

// httpTools are the programs an http flow needs: nginx, and wrk or ab.
func httpTools(s *Scenario) []string {
	var out []string
	for _, fl := range s.Flows {
		if fl.Kind != "http" {
			continue
		}
		for _, tool := range []string{"nginx", httpClientTool(&fl)} {
			if !slices.Contains(out, tool) {
				out = append(out, tool)
			}
		}
	}
	return out
}

func httpClientTool(fl *Flow) string {
	if fl.Client == "ab" {
		return "ab"
	}
	return "wrk"
}

// httpClientName names the load generator and its connections in results.
func httpClientName(fl *Flow) string {
	switch {
	case fl.Client == "ab":
		return "ab"
	case fl.Keepalive:
		return "wrk keep-alive"
	}
	return "wrk close"
}

// missingHTTPTools says which of s's http programs are not installed ("" if
// none is missing).
func missingHTTPTools(s *Scenario) string {
	var missing []string
	for _, tool := range httpTools(s) {
		if _, err := execLookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) == 0 {
		return ""
	}
	return fmt.Sprintf("%s not installed (Debian: apt-get install nginx-light wrk apache2-utils)", strings.Join(missing, ", "))
}

// webServer is one http flow's nginx: master and workers in the flow's
// server group and host, serving files of the flow's sizes from a private
// temporary directory.
type webServer struct {
	fl   *Flow
	ep   *endpoint
	host string // the server's host
	addr string // "IP:PORT", the server's address toward the client
	dir  string
	proc *netlab.Proc
}

// httpPath is the URL path of the file of n bytes.
func httpPath(n int) string { return "/" + strconv.Itoa(n) + ".bin" }

// nginxConfig is the server's configuration: every path in dir, no access
// log, files sent with sendfile, keep-alive connections kept (for wrk).
func nginxConfig(dir, listen string) string {
	p := func(name string) string { return filepath.Join(dir, name) }
	return fmt.Sprintf(`# written by hbm eval
daemon off;
master_process on;
worker_processes 2;
pid %s;
error_log %s warn;
events {
    worker_connections 4096;
}
http {
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 100000;
    keepalive_timeout 60s;
    client_body_temp_path %s;
    proxy_temp_path %s;
    fastcgi_temp_path %s;
    uwsgi_temp_path %s;
    scgi_temp_path %s;
    types { }
    default_type application/octet-stream;
    server {
        listen %s;
        root %s;
        location / { }
    }
}
`, p("nginx.pid"), p("error.log"), p("body"), p("proxy"), p("fastcgi"), p("uwsgi"), p("scgi"), listen, dir)
}

// startWeb starts nginx for http flow fl on endpoint ep, with one file of
// each of sizes bytes, and waits (at most 10s) until the client's host
// reaches it. On error nothing is left.
func (t *topology) startWeb(fl *Flow, ep *endpoint, sizes []int) (_ *webServer, err error) {
	nginx, err := execLookPath("nginx")
	if err != nil {
		return nil, fmt.Errorf("nginx: %w", err)
	}
	s := t.s
	srv := fl.From[0]
	host, cli := s.HostOf(srv), s.HostOf(fl.To)
	w := &webServer{fl: fl, ep: ep, host: host, addr: net.JoinHostPort(t.addr(cli, host).String(), strconv.Itoa(ep.port))}
	if w.dir, err = os.MkdirTemp("", "hbm-eval-nginx-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	// The workers run as nginx's unprivileged user: they read the files.
	if err := os.Chmod(w.dir, 0o755); err != nil {
		return nil, err
	}
	rng := rand.NewChaCha8([32]byte{byte(ep.port), byte(ep.port >> 8)})
	for _, n := range sizes {
		b := make([]byte, n)
		rng.Read(b)
		if err := os.WriteFile(filepath.Join(w.dir, httpPath(n)), b, 0o644); err != nil {
			return nil, err
		}
	}
	conf := filepath.Join(w.dir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(nginxConfig(w.dir, w.addr)), 0o644); err != nil {
		return nil, err
	}
	nice := 0
	if c := s.Cgroup(srv); c != nil {
		nice = c.Nice
	}
	w.proc = t.lab.Command(host, t.cgroup(srv), nginx, "-e", filepath.Join(w.dir, "error.log"), "-p", w.dir+"/", "-c", conf).Nice(nice)
	var out netlab.Buffer
	w.proc.Cmd.Stdout, w.proc.Cmd.Stderr = &out, &out
	if err := w.proc.Start(); err != nil {
		return nil, err
	}
	errLog := func() string {
		b, _ := os.ReadFile(filepath.Join(w.dir, "error.log"))
		return strings.TrimSpace(out.String() + " " + lastLines(string(b), 3))
	}
	cliNS := t.lab.Host(cli).NS
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-w.proc.Done():
			return nil, fmt.Errorf("nginx in %s exited: %v: %s", host, w.proc.Wait(), errLog())
		default:
		}
		derr := netlab.InNetns(cliNS, func() error {
			c, err := net.DialTimeout("tcp", w.addr, 200*time.Millisecond)
			if err == nil {
				c.Close()
			}
			return err
		})
		if derr == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("nginx in %s not answering on %s after 10s (%v): %s", host, w.addr, derr, errLog())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Every process of the server is in the group: the workers are forked
	// by the master, which was cloned into it.
	if err := inGroup(w.proc.Cmd.Process.Pid, t.cgroupPath(srv)); err != nil {
		return nil, fmt.Errorf("nginx in %s: %w", host, err)
	}
	return w, nil
}

// inGroup checks that the process group pgid has more than one process and
// that each is in cgroup path (relative to the cgroup2 mount).
func inGroup(pgid int, path string) error {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if g, err := unix.Getpgid(pid); err != nil || g != pgid {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil {
			continue // exited
		}
		// The unified hierarchy's line (a hybrid host lists v1's too).
		got := "none"
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "0::"); ok {
				got = v
			}
		}
		if got != path {
			return fmt.Errorf("process %d in cgroup %q, not %q", pid, got, path)
		}
		n++
	}
	if n < 2 {
		return fmt.Errorf("%d processes in process group %d, want a master and its workers", n, pgid)
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], " | ")
}

// close kills the server's process group and removes its directory.
func (w *webServer) close() {
	if w.proc != nil {
		w.proc.Kill()
	}
	if w.dir != "" {
		os.RemoveAll(w.dir)
	}
}

// httpSizes are the response sizes flow i needs over variants: its own
// and its variants'.
func httpSizes(s *Scenario, i int, variants []Variant) []int {
	out := []int{s.Flows[i].SizeBytes}
	for _, v := range variants {
		if v.Flow == i && v.Size > 0 && !slices.Contains(out, v.Size) {
			out = append(out, v.Size)
		}
	}
	return out
}

// httpSeconds is d in the whole seconds wrk and ab take, at least 1.
func httpSeconds(d time.Duration) int {
	return max(int(math.Ceil(d.Seconds()-1e-9)), 1)
}

// httpClient is one run of wrk or ab against a web server.
type httpClient struct {
	w        *webServer
	tool     string
	p        *netlab.Proc
	out, err netlab.Buffer
	limit    time.Duration
}

// httpArgs is the command of a load generator run of secs seconds.
func httpArgs(fl *Flow, url string, secs int) []string {
	n := strconv.Itoa(fl.Count)
	if fl.Client != "ab" {
		// --timeout: a response slower than this would be counted as a
		// timeout and left out of the latencies.
		a := []string{"wrk", "-t", strconv.Itoa(min(2, fl.Count)), "-c", n, "-d", strconv.Itoa(secs) + "s",
			"--timeout", strconv.Itoa(secs+30) + "s", "--latency"}
		if !fl.Keepalive {
			a = append(a, "-H", "Connection: close")
		}
		return append(a, url)
	}
	// -n above what ab reaches in secs (about 20k/s here): -t ends it. -r:
	// a receive error is counted, not fatal. -s: an idle socket's timeout,
	// fatal to ab, above a slow response's gaps.
	return []string{"ab", "-c", n, "-t", strconv.Itoa(secs), "-n", strconv.Itoa(min(100000*secs, 10000000)),
		"-s", "30", "-r", "-q", url}
}

// startHTTPClient starts the load generator of w's flow for secs seconds in
// the client's host and group.
func (t *topology) startHTTPClient(w *webServer, secs int) (*httpClient, error) {
	fl := w.fl
	args := httpArgs(fl, "http://"+w.addr+httpPath(fl.SizeBytes), secs)
	bin, err := execLookPath(args[0])
	if err != nil {
		return nil, err
	}
	c := &httpClient{w: w, tool: args[0], limit: time.Duration(secs)*time.Second + 30*time.Second}
	c.p = t.lab.Command(t.s.HostOf(fl.To), t.cgroup(fl.To), bin, args[1:]...).Nice(fl.Nice)
	c.p.Cmd.Stdout, c.p.Cmd.Stderr = &c.out, &c.err
	if err := c.p.Start(); err != nil {
		return nil, err
	}
	return c, nil
}

// wait waits for the client (bounded: its duration and 30s; killed on
// cancel) and parses its report.
func (c *httpClient) wait(ctx context.Context) (*httpResult, error) {
	t := time.NewTimer(c.limit)
	defer t.Stop()
	select {
	case <-c.p.Done():
	case <-ctx.Done():
		c.p.Kill()
		return nil, ctx.Err()
	case <-t.C:
		c.p.Kill()
		return nil, fmt.Errorf("%s: still running after %v: killed", c.tool, c.limit)
	}
	if err := c.p.Wait(); err != nil {
		return nil, fmt.Errorf("%s: %v: %s", c.tool, err, lastLines(c.err.String()+"\n"+c.out.String(), 3))
	}
	var r *httpResult
	var err error
	if c.tool == "wrk" {
		r, err = parseWrk(c.out.String())
	} else {
		r, err = parseAB(c.out.String())
	}
	if err != nil {
		return nil, fmt.Errorf("%s output: %w", c.tool, err)
	}
	return r, nil
}

// stopHTTP kills clients still running (after an error).
func stopHTTP(cs []*httpClient) {
	for _, c := range cs {
		c.p.Kill()
	}
}

// httpResult is what a load generator reports. Latencies in microseconds;
// a figure the tool does not give is 0.
type httpResult struct {
	Requests  int64   // completed
	Seconds   float64 // the tool's run time
	Bytes     float64 // read: headers and bodies, partial responses included
	ReqPerSec float64
	P50, P90  float64
	P99, Max  float64
	Errors    uint64 // failed requests (wrk: socket errors incl. timeouts; ab: failed requests)
	Non2xx    uint64 // responses other than 2xx (wrk: other than 2xx or 3xx)
}

// setPercentile records a percentile row of wrk's or ab's report ("50",
// "90", "99", "100": the longest); other rows are not kept.
func (r *httpResult) setPercentile(pct string, us float64) {
	switch pct {
	case "50":
		r.P50 = us
	case "90":
		r.P90 = us
	case "99":
		r.P99 = us
	case "100":
		r.Max = us
	}
}

var (
	wrkDoneRE    = regexp.MustCompile(`(?m)^\s*(\d+) requests in ([\d.]+)(us|ms|s|m|h), ([\d.]+)(B|KB|MB|GB|TB|PB) read\s*$`)
	wrkRateRE    = regexp.MustCompile(`(?m)^Requests/sec:\s+([\d.]+)\s*$`)
	wrkLatRE     = regexp.MustCompile(`(?m)^\s*Latency\s+([\d.]+)(us|ms|s|m|h)\s+([\d.]+)(us|ms|s|m|h|%)\s+([\d.]+)(us|ms|s|m|h)\s`)
	wrkPctRE     = regexp.MustCompile(`(?m)^\s*(50|75|90|99)%\s+([\d.]+)(us|ms|s|m|h)\s*$`)
	wrkSockErrRE = regexp.MustCompile(`(?m)^\s*Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)\s*$`)
	wrkNon2xxRE  = regexp.MustCompile(`(?m)^\s*Non-2xx or 3xx responses: (\d+)\s*$`)
)

func wrkTime(v, unit string) float64 {
	f, _ := strconv.ParseFloat(v, 64)
	return f * map[string]float64{"us": 1, "ms": 1e3, "s": 1e6, "m": 60e6, "h": 3600e6}[unit]
}

// parseWrk reads `wrk --latency`'s report.
func parseWrk(out string) (*httpResult, error) {
	m := wrkDoneRE.FindStringSubmatch(out)
	if m == nil {
		return nil, fmt.Errorf("no \"N requests in T, B read\" line: %.300q", out)
	}
	r := &httpResult{}
	r.Requests, _ = strconv.ParseInt(m[1], 10, 64)
	r.Seconds = wrkTime(m[2], m[3]) / 1e6
	b, _ := strconv.ParseFloat(m[4], 64)
	r.Bytes = b * math.Pow(1024, float64(slices.Index([]string{"B", "KB", "MB", "GB", "TB", "PB"}, m[5])))
	if m := wrkRateRE.FindStringSubmatch(out); m != nil {
		r.ReqPerSec, _ = strconv.ParseFloat(m[1], 64)
	} else if r.Seconds > 0 {
		r.ReqPerSec = float64(r.Requests) / r.Seconds
	}
	if m := wrkLatRE.FindStringSubmatch(out); m != nil {
		r.Max = wrkTime(m[5], m[6])
	}
	pct := wrkPctRE.FindAllStringSubmatch(out, -1)
	if r.Requests > 0 && len(pct) != 4 {
		return nil, fmt.Errorf("no latency distribution (wrk --latency): %.300q", out)
	}
	for _, p := range pct {
		r.setPercentile(p[1], wrkTime(p[2], p[3]))
	}
	if m := wrkSockErrRE.FindStringSubmatch(out); m != nil {
		for _, s := range m[1:] {
			n, _ := strconv.ParseUint(s, 10, 64)
			r.Errors += n
		}
	}
	if m := wrkNon2xxRE.FindStringSubmatch(out); m != nil {
		r.Non2xx, _ = strconv.ParseUint(m[1], 10, 64)
	}
	return r, nil
}

var (
	abFieldRE = regexp.MustCompile(`(?m)^([A-Za-z][A-Za-z -]*[a-z]):\s+([\d.]+)`)
	abPctRE   = regexp.MustCompile(`(?m)^\s*(\d+)%\s+(\d+)`)
	abTotalRE = regexp.MustCompile(`(?m)^Total:\s+\d+\s+\d+\s+[\d.]+\s+\d+\s+(\d+)\s*$`)
)

// parseAB reads ab's report. Its percentiles are of the whole request,
// connect included, in whole milliseconds.
func parseAB(out string) (*httpResult, error) {
	fields := map[string]float64{}
	for _, m := range abFieldRE.FindAllStringSubmatch(out, -1) {
		if _, ok := fields[m[1]]; !ok {
			fields[m[1]], _ = strconv.ParseFloat(m[2], 64)
		}
	}
	need := []string{"Time taken for tests", "Complete requests", "Failed requests", "Total transferred"}
	for _, k := range need {
		if _, ok := fields[k]; !ok {
			return nil, fmt.Errorf("no %q: %.300q", k, out)
		}
	}
	r := &httpResult{
		Requests: int64(fields["Complete requests"]), Seconds: fields["Time taken for tests"],
		Bytes: fields["Total transferred"], Errors: uint64(fields["Failed requests"]), Non2xx: uint64(fields["Non-2xx responses"]),
		ReqPerSec: fields["Requests per second"],
	}
	if r.ReqPerSec == 0 && r.Seconds > 0 {
		r.ReqPerSec = float64(r.Requests) / r.Seconds
	}
	_, table, ok := strings.Cut(out, "Percentage of the requests served within a certain time (ms)")
	if !ok {
		switch {
		case r.Requests == 1:
			// ab prints percentiles only for two requests or more; one
			// request's time is its "Total:" connection time (min mean
			// [+/-sd] median max), as a 10 MB response to each of 8
			// clients in a 2 s warm-up leaves it.
			m := abTotalRE.FindStringSubmatch(out)
			if m == nil {
				return nil, errors.New("one request and no connection times: " + fmt.Sprintf("%.300q", out))
			}
			v, _ := strconv.ParseFloat(m[1], 64)
			r.P50, r.P90, r.P99, r.Max = v*1e3, v*1e3, v*1e3, v*1e3
		case r.Requests > 1:
			return nil, errors.New("no percentile table: " + fmt.Sprintf("%.300q", out))
		}
		return r, nil
	}
	for _, m := range abPctRE.FindAllStringSubmatch(table, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		r.setPercentile(m[1], v*1e3)
	}
	if r.Requests > 0 && r.P50 == 0 && r.P99 == 0 && r.Max == 0 {
		return nil, errors.New("percentile table unreadable: " + fmt.Sprintf("%.300q", table))
	}
	return r, nil
}

// httpClass is flow fl's class from its client's report over a window of
// wire seconds (the retransmissions: those of the server's namespace).
func httpClass(s *Scenario, fl *Flow, hr *httpResult, retrans uint64) result.Class {
	cl := result.Class{Name: fl.Name, Group: s.ClassGroup(fl), Kind: "http", SizeBytes: fl.SizeBytes, Flows: fl.Count,
		RPCs: hr.Requests, ReqPerSec: hr.ReqPerSec, HTTPErrors: hr.Errors + hr.Non2xx, Retransmits: retrans,
		HTTPClient: httpClientName(fl)}
	if hr.Seconds > 0 {
		cl.GoodputBps = hr.Bytes * 8 / hr.Seconds
	}
	if hr.Requests > 0 {
		cl.Latency = &result.Latency{Count: hr.Requests, P50: hr.P50, P90: hr.P90, P99: hr.P99, Max: hr.Max}
	}
	return cl
}

// retransSegs reads TCP's RetransSegs in namespace ns (/proc/net/snmp as
// seen from inside it).
func retransSegs(ns string) (uint64, error) {
	var n uint64
	err := netlab.InNetns(ns, func() error {
		b, err := os.ReadFile("/proc/thread-self/net/snmp")
		if err != nil {
			return err
		}
		n, err = snmpField(string(b), "Tcp", "RetransSegs")
		return err
	})
	return n, err
}

// snmpField finds field in /proc/net/snmp's pair of proto lines (names,
// then values).
func snmpField(snmp, proto, field string) (uint64, error) {
	var names []string
	for _, line := range strings.Split(snmp, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != proto+":" {
			continue
		}
		if names == nil {
			names = f[1:]
			continue
		}
		if i := slices.Index(names, field); i >= 0 && i+1 < len(f) {
			return strconv.ParseUint(f[i+1], 10, 64)
		}
		break
	}
	return 0, fmt.Errorf("no %s %s in /proc/net/snmp", proto, field)
}
