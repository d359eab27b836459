package integration

import (
	"os/exec"
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hbm-dev/hbm/internal/testbed"
	"github.com/hbm-dev/hbm/internal/workload"
)

var ccUnderTest = "dctcp"
var withShow = false

func TestTmpCwndTrace(t *testing.T) {
	l := dctcpLab(t, "dctrace")
	group, dir := l.cgroup(t, "w")
	l.set(t, group, "200mbit")
	_ = exec.Command
	defer l.hbm.Unset(group)
	cfg := workload.Config{Addr: l.tb.ReceiverAddr(testbed.ServerPort, false), Streams: 3, Warmup: time.Second, Duration: 5 * time.Second, CC: ccUnderTest}
	done := make(chan *workload.Result, 1)
	go func() { r, err := l.tb.RunClient(context.Background(), l.bin, dir, cfg); if err != nil { t.Log(err) }; done <- r }()
	run := func(name string, args ...string) string {
		p := l.tb.Command(l.tb.SenderNS, "", name, args...)
		var out bytes.Buffer
		p.Cmd.Stdout = &out
		p.Cmd.Stderr = &out
		p.Start(); p.WaitTimeout(10 * time.Second)
		return out.String()
	}
	for i := 0; i < 12; i++ {
		time.Sleep(400 * time.Millisecond)
		show := ""
		if withShow { show = run(l.bin, "cc", "show") }
		ss := run("ss", "-tin", "dst", ":5201")
		var keep []string
		for _, line := range strings.Split(ss, "\n") {
			for _, f := range strings.Fields(line) {
				if strings.HasPrefix(f, "cwnd:") || strings.HasPrefix(f, "ssthresh:") || strings.HasPrefix(f, "retrans:") || strings.HasPrefix(f, "delivered:") || strings.HasPrefix(f, "unacked:") || strings.HasPrefix(f, "rto:") || strings.HasPrefix(f, "backoff:") {
					keep = append(keep, f)
				}
			}
			if strings.Contains(line, "cwnd") { keep = append(keep, "|") }
		}
		t.Logf("%d\n%s\nss: %s", i, show, strings.Join(keep, " "))
	}
	r := <-done
	if r != nil { t.Logf("goodput %.1f retrans %d streams %v", r.Goodput/1e6, r.Retransmits, r.StreamGoodput) }
}
