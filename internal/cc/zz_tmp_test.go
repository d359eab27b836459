package cc

import (
	"os"
	"strings"
	"os/exec"
	"fmt"
	"io"
	"net"
	"testing"
	"time"
)

func TestTmpGarbage(t *testing.T) {
	isolate(t)
	if _, err := Install(DCTCP); err != nil {
		t.Fatal(err)
	}
	inNetns(t, func() error {
		for _, kv := range strings.Fields(os.Getenv("HBMDBG_SYSCTL")) {
			k, v, _ := strings.Cut(kv, "=")
			if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
				return err
			}
		}
		lo, _ := net.InterfaceByName("lo")
		mk, err := newMarker(lo.Index)
		if err != nil {
			return err
		}
		defer mk.Close()
		mk.set(30)
		var pairs []*pair
		for i := 0; i < 16; i++ {
			p, err := newPair(DCTCP, DCTCP)
			if err != nil {
				return err
			}
			defer p.Close()
			pairs = append(pairs, p)
		}
		stop := time.Now().Add(6 * time.Second)
		for _, p := range pairs {
			p := p
			p.client.SetDeadline(stop.Add(2 * time.Second))
			p.server.SetDeadline(stop.Add(2 * time.Second))
			go func() {
				buf := make([]byte, 128<<10)
				for time.Now().Before(stop) {
					if _, err := p.client.Write(buf); err != nil {
						return
					}
				}
			}()
			go func() { io.Copy(io.Discard, p.server) }()
		}
		bad := 0
		for time.Now().Before(stop) {
			time.Sleep(300 * time.Millisecond)
			socks, err := Sockets()
			if err != nil {
				return err
			}
			for _, s := range socks {
				if s.Cwnd > 1e6 || (s.Ssthresh > 1e7 && s.Ssthresh != 0x7fffffff) {
					bad++
					t.Logf("garbage: %+v", s)
				}
			}
		}
		out, _ := exec.Command("sh", "-c", "bpftool -j prog show | python3 -c \"import json,sys; [print(p['id'], p['name'], p.get('recursion_misses'), p.get('run_cnt')) for p in json.load(sys.stdin) if p.get('type')=='struct_ops']\"").CombinedOutput()
		t.Logf("progs:\n%s", out)
		if bad > 0 {
			return fmt.Errorf("%d garbage observations", bad)
		}
		socks, _ := Sockets()
		for _, s := range socks {
			t.Logf("%s alpha %.3f cwnd %d ssthresh %d delivered %d ce %d", s.State, s.Alpha, s.Cwnd, s.Ssthresh, s.Delivered, s.DeliveredCE)
		}
		return nil
	})
}
