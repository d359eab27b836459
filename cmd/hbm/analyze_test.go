package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hbm-dev/hbm/internal/analyze/pcaptest"
	"github.com/hbm-dev/hbm/internal/analyze/schema"
)

// writeCapture writes a small capture (pcaptest.WriteTransfer).
func writeCapture(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "flow.pcap")
	pcaptest.WriteTransfer(t, path, net.IPv4(198, 18, 9, 1), net.IPv4(198, 18, 9, 2), 65536)
	return path
}

func TestAnalyzeJSON(t *testing.T) {
	out, err := runCLI("analyze", "--json", writeCapture(t))
	if err != nil {
		t.Fatal(err)
	}
	var rep schema.Report
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if len(rep.Connections) != 1 {
		t.Fatalf("%d connections:\n%s", len(rep.Connections), out)
	}
	c := rep.Connections[0]
	if c.Src != "198.18.9.1:40000" || c.Dst != "198.18.9.2:5201" || c.Bytes != 3000 || c.RTT.Min != 200 || len(c.Rounds) != 1 || c.Rounds[0].RTT != 201 {
		t.Errorf("got %+v", c)
	}
	// The documented field names, spelled as the issue does.
	for _, k := range []string{`"connections"`, `"src"`, `"dst"`, `"bytes"`, `"retransmissions"`, `"rtt_us"`, `"min"`, `"p50"`, `"p99"`, `"ce"`, `"ece"`, `"rounds"`, `"t_us"`, `"sent_bytes"`, `"acked_bytes"`, `"inflight_bytes"`} {
		if !strings.Contains(out, k) {
			t.Errorf("JSON lacks %s", k)
		}
	}
}

func TestAnalyzeTableAndOut(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "report")
	out, err := runCLI("analyze", "--out", dir, writeCapture(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"198.18.9.1:40000 -> 198.18.9.2:5201", "bytes 3000", "RTT min 200µs", "retransmissions 0 (spurious 0)", "in flight", "wrote "} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	js, err := os.ReadFile(filepath.Join(dir, "analysis.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep schema.Report
	if err := json.Unmarshal(js, &rep); err != nil || len(rep.Connections) != 1 || rep.Connections[0].Bytes != 3000 {
		t.Errorf("analysis.json: %v %+v", err, rep)
	}
	page, err := os.ReadFile(filepath.Join(dir, "analysis.html"))
	if err != nil {
		t.Fatal(err)
	}
	// Self-contained, well-formed, with the three charts.
	d := xml.NewDecoder(bytes.NewReader(page))
	d.Strict, d.Entity = true, xml.HTMLEntity
	for {
		if _, err := d.Token(); err != nil {
			if err.Error() != "EOF" {
				t.Errorf("analysis.html is not well-formed: %v", err)
			}
			break
		}
	}
	s := string(page)
	if n := strings.Count(s, "<svg"); n != 3 {
		t.Errorf("%d charts, want 3", n)
	}
	for _, bad := range []string{"<script", "http://", "https://", "src="} {
		if strings.Contains(s, bad) {
			t.Errorf("analysis.html refers outside itself (%q)", bad)
		}
	}
}

func TestAnalyzeErrors(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.pcap")
	os.WriteFile(junk, []byte("not a capture"), 0o644)
	for _, c := range []struct {
		args  []string
		want  string
		usage bool
	}{
		{[]string{"analyze"}, "accepts 1 arg", true},
		{[]string{"analyze", "--rounds", "-1", junk}, "--rounds -1", true},
		{[]string{"analyze", filepath.Join(dir, "missing.pcap")}, "no such file", false},
		{[]string{"analyze", junk}, "junk.pcap: not a pcap or pcapng capture", false},
	} {
		_, err := runCLI(c.args...)
		var ue usageError
		if err == nil || !strings.Contains(err.Error(), c.want) || (errors.As(err, &ue) || isCobraUsage(err)) != c.usage {
			t.Errorf("%v: error %v, want one containing %q (usage error: %v)", c.args, err, c.want, c.usage)
		}
	}
}

// An RPC connection's exchanges: the text line and the JSON fields.
func TestAnalyzeExchanges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rpc.pcap")
	pcaptest.WriteRPC(t, path, net.IPv4(198, 18, 9, 1), net.IPv4(198, 18, 9, 2), 128, 5)
	out, err := runCLI("analyze", path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "5 request/response exchanges, requests from 198.18.9.1:40000: response p50 500µs, p99 500µs; network p50 100µs, p99 100µs; peer p50 400µs, p99 400µs"; !strings.Contains(out, want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
	out, err = runCLI("analyze", "--json", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"exchanges"`, `"requester"`, `"response_us"`, `"network_us"`, `"peer_us"`, `"p90"`, `"max"`,
		`"complete_us"`, `"requests"`, `"setup_us"`, `"total_us"`, `"timeline"`} {
		if !strings.Contains(out, k) {
			t.Errorf("JSON lacks %s", k)
		}
	}
	// The requests summary alone: the four exchanges the next request
	// ends (the fifth's end is not in the capture), each 500 µs to its
	// response's last byte; the SYN 1 ms before the first request.
	out, err = runCLI("analyze", "--requests", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"requests: 4 completed, request to the response's last byte p50 500µs, p90 500µs, p99 500µs, max 500µs",
		"on the 1 connection whose SYN the capture holds: SYN to the first request p50 1.00ms",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("--requests output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "request/response exchanges") {
		t.Errorf("--requests printed the connections too:\n%s", out)
	}
	if _, err := runCLI("analyze", "--requests", "--json", path); err == nil || !strings.Contains(err.Error(), "none of the others can be") {
		t.Errorf("--requests --json: error %v, want the flags refused together", err)
	}
	// The slowest exchanges with their packets: every one 500 µs, the
	// first (ties in capture order) at 1 ms: its request, the ACK 100 µs
	// later, the response at 500 µs.
	out, err = runCLI("analyze", "--slowest", "2", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"slowest 2 of 5 exchanges",
		"1. 198.18.9.1:40000 -> 198.18.9.2:5201, request at ",
		": response 500µs (network 100µs, peer 400µs)",
		"0.000ms  >  ",
		"0.100ms  <  ",
		"0.500ms  <  ",
		"2. 198.18.9.1:40000",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("--slowest output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "request/response exchanges") || strings.Contains(out, "3. ") {
		t.Errorf("--slowest 2 printed more than the two exchanges:\n%s", out)
	}
	out, err = runCLI("analyze", "--slowest", "1", "--json", path)
	if err != nil {
		t.Fatal(err)
	}
	var sj struct {
		Exchanges int64                 `json:"exchanges"`
		Slowest   []schema.SlowExchange `json:"slowest"`
	}
	if err := json.Unmarshal([]byte(out), &sj); err != nil {
		t.Fatalf("--slowest --json: %v:\n%s", err, out)
	}
	if sj.Exchanges != 5 || len(sj.Slowest) != 1 || len(sj.Slowest[0].Packets) != 3 || sj.Slowest[0].Packets[2].Len != 64 || sj.Slowest[0].Packets[0].Len != 1000 {
		t.Errorf("--slowest 1 --json: %+v", sj)
	}
	for _, bad := range [][]string{{"--slowest", "0"}, {"--slowest", "-1"}, {"--slowest", "1", "--requests"}, {"--slowest", "1", "--out", t.TempDir()}} {
		if _, err := runCLI(append(append([]string{"analyze"}, bad...), path)...); err == nil {
			t.Errorf("analyze %v: no error", bad)
		}
	}
	if _, err := runCLI("analyze", "--slowest", "1", t.TempDir()); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("--slowest on a directory: error %v, want it named a directory", err)
	}
	dir := filepath.Join(t.TempDir(), "report")
	if _, err := runCLI("analyze", "--out", dir, path); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(dir, "analysis.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"5 requests from 198.18.9.1:40000. Response p50 500", "4 requests completed, every connection&#39;s pooled: request to the response&#39;s last byte p50 500 µs"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("analysis.html lacks %q", want)
		}
	}
}

// TestAnalyzeTruncated: a capture whose last record is cut (tcpdump killed
// mid-write) is analysed up to it, exit 0, with a warning on stderr only
// (--json's stdout stays one JSON document, which also carries it).
func TestAnalyzeTruncated(t *testing.T) {
	path := writeCapture(t)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b[:len(b)-5], 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"analyze", path}, {"analyze", "--json", path}} {
		root := newRoot()
		var stdout, stderr bytes.Buffer
		root.SetOut(&stdout)
		root.SetErr(&stderr)
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Errorf("%v: %v, want the whole packets analysed", args, err)
			continue
		}
		if w := stderr.String(); !strings.Contains(w, "hbm: warning: "+path+": the last record is cut short") {
			t.Errorf("%v: stderr %q, want the warning", args, w)
		}
		if strings.Contains(stdout.String(), "warning") != (args[1] == "--json") {
			t.Errorf("%v: stdout:\n%s", args, stdout.String())
		}
		if args[1] == "--json" {
			var rep schema.Report
			if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil || len(rep.Connections) != 1 || len(rep.Warnings) != 1 {
				t.Errorf("--json: %v: %+v", err, rep)
			}
		}
	}
}

// TestAnalyzeOutNoFollow: --out never writes through a symbolic link someone
// placed at an output file (it is replaced) or at the directory (refused),
// as eval's output does not.
func TestAnalyzeOutNoFollow(t *testing.T) {
	capture := writeCapture(t)
	base := t.TempDir()
	victim := filepath.Join(base, "victim")
	if err := os.WriteFile(victim, []byte("keep me\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "report")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"analysis.json", "analysis.html"} {
		if err := os.Symlink(victim, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := runCLI("analyze", "--out", dir, capture); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep me\n" {
		t.Errorf("written through a symbolic link: the link's target now holds %.60q", b)
	}
	for _, name := range []string{"analysis.json", "analysis.html"} {
		if st, err := os.Lstat(filepath.Join(dir, name)); err != nil || !st.Mode().IsRegular() {
			t.Errorf("%s: %v, %v; want a regular file", name, st, err)
		}
	}
	// The directory itself a link: refused, nothing written through it.
	target := filepath.Join(base, "elsewhere")
	os.Mkdir(target, 0o755)
	link := filepath.Join(base, "linked")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if _, err := runCLI("analyze", "--out", link, capture); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("--out through a linked directory: %v, want a refusal", err)
	}
	if ents, _ := os.ReadDir(target); len(ents) != 0 {
		t.Errorf("written through a linked directory: %v", ents)
	}
}
