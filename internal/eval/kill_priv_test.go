package eval

import (
	"bufio"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hbm-dev/hbm/internal/cc"
	"github.com/hbm-dev/hbm/internal/netlab"
	"github.com/hbm-dev/hbm/internal/spawn"
)

func dctcpAvailable() bool {
	b, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	return slices.Contains(strings.Fields(string(b)), "dctcp")
}

// TestKilledEvalLeftovers: an eval SIGKILLed in the middle of a run leaves
// its namespaces, cgroups, processes, pin directory (and HBM's BPF dctcp,
// when it installed it); the next eval's clean-up removes all of it.
func TestKilledEvalLeftovers(t *testing.T) {
	bin := evalPrereqs(t)
	before := netlab.Objects()
	hadDCTCP := dctcpAvailable()
	t.Cleanup(func() { // whatever happened, the next tests get the machine as it was
		if !hadDCTCP && dctcpAvailable() {
			cc.Remove("dctcp", false)
		}
	})
	cmd := exec.Command(bin, "eval", "egress-200m", "--quick", "--cc", "dctcp", "--limiter", "hbm", "--duration", "60s", "--out", t.TempDir())
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := spawn.Start(cmd); err != nil {
		t.Fatal(err)
	}
	// Killed once its run's traffic flows: after the limit is set, the
	// clients are up (the progress line of a run comes only at its end, so
	// wait for the building line and give the run a few seconds).
	building := make(chan struct{})
	var log strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		once := false
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if !once && strings.Contains(sc.Text(), "building") {
				once = true
				close(building)
			}
		}
	}()
	select {
	case <-building:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("eval did not start building within 60s:\n%s", log.String())
	}
	time.Sleep(6 * time.Second)
	cmd.Process.Kill()
	cmd.Wait()

	var left []string
	for _, o := range netlab.Objects() {
		if !slices.Contains(before, o) {
			left = append(left, o)
		}
	}
	t.Logf("left by the killed eval: %v (dctcp registered: %v, before: %v)", left, dctcpAvailable(), hadDCTCP)
	// Namespaces of its hosts, its cgroup and its pin directory at least.
	if len(left) < 4 {
		t.Fatalf("the killed eval left only %v: the test did not kill it mid-run\n%s", left, log.String())
	}
	CleanupLeftovers(t.Logf)
	for _, o := range netlab.Objects() {
		if !slices.Contains(before, o) {
			t.Errorf("%s left after the next eval's clean-up", o)
		}
	}
	if !hadDCTCP && dctcpAvailable() {
		t.Error("HBM's BPF dctcp the killed eval installed is still registered")
	}
}
