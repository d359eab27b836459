package node

// The node: containerd (test-owned config, root, state and socket) with
// Debian's runc and CNI plugins, the images built here and imported with
// ctr, and a real kubelet registered with the test's kube-apiserver.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hbm-dev/hbm/internal/testutil"
	"github.com/hbm-dev/hbm/test/kcluster"
)

const (
	nodeName = "hbm-node-test"
	svcCIDR  = "198.19.255.0/24"
	svcIP    = "198.19.255.1" // the "kubernetes" Service's ClusterIP: the API server listens there itself
	podCIDR  = "198.19.200.0/24"
	// gatewayCIDR is the bridge's address in podCIDR (host-local's default gateway).
	gatewayCIDR = "198.19.200.1/24"
	cniBinDir   = "/usr/lib/cni" // Debian's containernetworking-plugins
	pauseImage  = "hbm.local/pause:1"
	// hbmImage is what daemonset.yaml's "hbm:latest" means to containerd.
	hbmImage = "docker.io/library/hbm:latest"
)

var (
	ctrdSock   = filepath.Join(runDir, "containerd.sock")
	bpffsDir   = filepath.Join(varDir, "bpffs")   // the test's bpffs instance: the DaemonSet's /sys/fs/bpf
	kubeletDir = filepath.Join(varDir, "kubelet") // --root-dir
	podLogsDir = filepath.Join(varDir, "pod-logs")
)

// containerdConfig is containerd 2's config (version 3): everything it
// writes is under varDir and runDir; CRI with cgroupfs (no systemd here),
// runc from Debian, the CNI plugins from Debian with the test's conf dir,
// the local pause image, and restrict_oom_score_adj (the sandbox's -998
// needs CAP_SYS_RESOURCE, which root lacks in some sandboxes; it only
// clamps the score to containerd's own).
func containerdConfig() string {
	return fmt.Sprintf(`version = 4
root = %[1]q
state = %[2]q
imports = []
# opt makes /opt/containerd; NRI listens on /var/run/nri; neither is used.
disabled_plugins = ['io.containerd.internal.v1.opt', 'io.containerd.nri.v1.nri']

[plugins]
  [plugins.'io.containerd.server.v1.grpc']
    address = %[3]q
  [plugins.'io.containerd.server.v1.ttrpc']
    address = %[4]q
  [plugins.'io.containerd.cri.v1.images']
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = %[5]q
  [plugins.'io.containerd.cri.v1.runtime']
    enable_selinux = false
    restrict_oom_score_adj = true
    cdi_spec_dirs = []
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = %[6]q
          Root = %[7]q
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = [%[8]q]
      conf_dir = %[9]q
  [plugins.'io.containerd.grpc.v1.cri']
    disable_tcp_service = true
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'
`, filepath.Join(varDir, "containerd"), filepath.Join(runDir, "containerd"), ctrdSock, ctrdSock+".ttrpc",
		pauseImage, runcPath(), filepath.Join(runDir, "runc"), cniBinDir, filepath.Join(varDir, "cni"))
}

func runcPath() string {
	p, err := exec.LookPath("runc")
	if err != nil {
		return "runc"
	}
	return p
}

// cniConfig is a bridge network in the host's namespace: podCIDR, the
// bridge as the pods' gateway (so they reach svcIP on the host), no
// masquerading (no iptables).
func cniConfig() string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "hbmnode",
  "plugins": [
    {
      "type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false, "hairpinMode": false,
      "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": %q}
    }
  ]
}
`, bridgeName, podCIDR, filepath.Join(varDir, "cni-ipam"))
}

// kubeletConfig: cgroupfs; cgroup v1 tolerated (a hybrid host counts as
// v1 to the kubelet); no iptables chains; no webhook authn/z (nothing but
// the test reaches 127.0.0.1); no image GC or eviction thresholds that a
// CI disk could trip; every directory under varDir.
func kubeletConfig(port int) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://%s
failSwapOn: false
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
authorization:
  mode: AlwaysAllow
resolvConf: ""
evictionHard: {}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
makeIPTablesUtilChains: false
# The traffic pods pin their TCP congestion control (a new network namespace
# takes the host's default, which tests on a shared machine may change); the
# ingress test's sender asks for ECN.
allowedUnsafeSysctls: ["net.ipv4.tcp_congestion_control", "net.ipv4.tcp_ecn"]
volumePluginDir: %s
podLogsDir: %s
registerNode: true
syncFrequency: 10s
fileCheckFrequency: 60s
nodeStatusUpdateFrequency: 5s
`, ctrdSock, port, filepath.Join(varDir, "volume-plugins"), podLogsDir)
}

// node is the running containerd and kubelet.
type node struct {
	t          *testing.T
	c          *kcluster.Cluster
	cg2        string // the cgroup2 mount
	ctrdir     string // containerd, its shim, ctr
	hbm        string
	containerd *testutil.Proc
	kubelet    *testutil.Proc
}

func (n *node) ctr(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(n.ctrdir, "ctr"), append([]string{"--address", ctrdSock, "--namespace", "k8s.io"}, args...)...).CombinedOutput()
	return string(out), err
}

func (n *node) startContainerd() {
	t := n.t
	for _, d := range []string{runDir, filepath.Join(varDir, "cni"), bpffsDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(varDir, "containerd.toml")
	write(t, cfg, containerdConfig())
	write(t, filepath.Join(varDir, "cni", "10-hbmnode.conflist"), cniConfig())
	// The shim is found on PATH: the one built with this containerd first.
	env := []string{"PATH=" + n.ctrdir + ":" + os.Getenv("PATH")}
	start := time.Now()
	n.containerd = testutil.StartProc(t, env, filepath.Join(n.ctrdir, "containerd"), "--config", cfg, "--log-level", "warn")
	if !testutil.WaitFor(60*time.Second, func() bool {
		if n.containerd.Exited() {
			return true
		}
		_, err := n.ctr("version")
		return err == nil
	}) || n.containerd.Exited() {
		t.Fatalf("containerd not serving within 60s:\n%s", testutil.LastLines(n.containerd.Out.String(), 40))
	}
	t.Logf("containerd ready in %v", time.Since(start).Round(time.Millisecond))
}

// importImages builds the pause image (a static Go binary built here) and
// the hbm image (deploy/kubernetes/Dockerfile: bin/hbm as /hbm, its
// entrypoint) and imports them into containerd's k8s.io namespace. The
// test's traffic pods run the same image: `hbm workload serve|run`.
func (n *node) importImages() {
	t := n.t
	start := time.Now()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "go.mod"), "module hbm.local/pause\n\ngo 1.24\n")
	write(t, filepath.Join(dir, "main.go"), pauseSource)
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", "pause", ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		testutil.Missing(t, "go build of the pause binary", fmt.Errorf("%v: %s", err, out))
	}
	pause, err := os.ReadFile(filepath.Join(dir, "pause"))
	if err != nil {
		t.Fatal(err)
	}
	hbm, err := os.ReadFile(n.hbm)
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range []struct {
		name, file, bin string
		data            []byte
	}{{pauseImage, "pause.tar", "pause", pause}, {hbmImage, "hbm.tar", "hbm", hbm}} {
		p := filepath.Join(dir, img.file)
		if err := writeImage(p, img.name, map[string]imageFile{img.bin: {data: img.data, mode: 0o755}}, []string{"/" + img.bin}); err != nil {
			t.Fatal(err)
		}
		if out, err := n.ctr("images", "import", "--no-unpack=false", p); err != nil {
			t.Fatalf("ctr images import %s: %v\n%s", img.name, err, out)
		}
	}
	out, _ := n.ctr("images", "ls", "-q")
	for _, want := range []string{pauseImage, hbmImage} {
		if !strings.Contains(out, want) {
			t.Fatalf("image %s not in containerd after import:\n%s", want, out)
		}
	}
	t.Logf("images built and imported in %v", time.Since(start).Round(time.Millisecond))
}

func (n *node) startKubelet(kubeletBin string) {
	t := n.t
	kc := n.c.Kubeconfig("kubelet", kcluster.AdminToken)
	cfg := filepath.Join(varDir, "kubelet.yaml")
	write(t, cfg, kubeletConfig(kcluster.FreePort(t)))
	for _, d := range []string{kubeletDir, podLogsDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	n.kubelet = testutil.StartProc(t, nil, kubeletBin, "--config", cfg, "--kubeconfig", kc,
		"--root-dir", kubeletDir, "--cert-dir", filepath.Join(varDir, "kubelet-pki"),
		"--hostname-override", nodeName, "--node-ip", svcIP, "--v", "1")
	ctx := context.Background()
	var last string
	if !testutil.WaitFor(120*time.Second, func() bool {
		if n.kubelet.Exited() {
			return true
		}
		nd, err := n.c.Admin.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false
		}
		for _, c := range nd.Status.Conditions {
			if c.Type == corev1.NodeReady {
				last = string(c.Status) + ": " + c.Message
				return c.Status == corev1.ConditionTrue
			}
		}
		return false
	}) || n.kubelet.Exited() {
		t.Fatalf("node not Ready within 120s (%s):\n%s", last, testutil.LastLines(n.kubelet.Out.String(), 60))
	}
	t.Logf("kubelet: node %s Ready in %v", nodeName, time.Since(start).Round(time.Millisecond))
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}
