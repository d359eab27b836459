// Package kcluster is a real control plane for the end-to-end tests
// (test/k8s, test/node): etcd and kube-apiserver, built from their Go modules
// by scripts/k8s-bins.sh (cached by version), started with a private data
// directory, and killed (their process groups) and removed at the end, also
// on failure.
package kcluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/hbm-dev/hbm/internal/testutil"
)

// FreePort returns a port on 127.0.0.1 that was free a moment ago.
func FreePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// RepoRoot is the repository's top directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// binaries returns kube-apiserver and etcd: $HBM_K8S_APISERVER and
// $HBM_K8S_ETCD (make test sets them), else what scripts/k8s-bins.sh
// prints (it builds them once, then answers from its cache).
func binaries(t *testing.T) (apiserver, etcd string) {
	t.Helper()
	apiserver, etcd = os.Getenv("HBM_K8S_APISERVER"), os.Getenv("HBM_K8S_ETCD")
	if apiserver != "" && etcd != "" {
		return apiserver, etcd
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(RepoRoot(), "scripts", "k8s-bins.sh"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	lines := strings.Fields(string(out))
	if err != nil || len(lines) != 2 {
		t.Fatalf("scripts/k8s-bins.sh: %v: %s", err, stderr.String())
	}
	return lines[0], lines[1]
}

// Cluster is a running etcd and kube-apiserver.
type Cluster struct {
	t         *testing.T
	Dir       string // private: data, keys, kubeconfigs; removed at the end
	URL       string // https://ADDR:PORT
	CAPEM     []byte // the CA of the API server's serving certificate
	Admin     *kubernetes.Clientset
	AdminREST *rest.Config
	APIServer *testutil.Proc
}

const (
	// AdminToken authenticates as system:masters.
	AdminToken = "hbm-e2e-admin-token"
	// HBMToken authenticates as the DaemonSet's service account
	// (system:serviceaccount:kube-system:hbm), so the RBAC in
	// deploy/kubernetes is what lets the daemon work.
	HBMToken = "hbm-e2e-daemon-token"
)

// Options change where the API server listens and what it admits; the zero
// value is test/k8s's cluster.
type Options struct {
	// Addr is the API server's bind and advertise address (default
	// 127.0.0.1); it is also in its serving certificate.
	Addr string
	// Port is its secure port (default: a free one).
	Port int
	// ServiceAccountAdmission keeps the ServiceAccount admission plugin on,
	// so pods get the projected token volume a real cluster gives them.
	// The caller then makes the service accounts (no controller manager
	// runs) and the kube-root-ca.crt ConfigMap of each namespace.
	ServiceAccountAdmission bool
	// ServiceCIDR is --service-cluster-ip-range (default 198.19.255.0/24:
	// allocated from, never routed to).
	ServiceCIDR string
}

// Start starts etcd and kube-apiserver and waits until the API server is
// ready; both are killed at the end of the test.
func Start(t *testing.T, o Options) *Cluster {
	t.Helper()
	if o.Addr == "" {
		o.Addr = "127.0.0.1"
	}
	if o.ServiceCIDR == "" {
		o.ServiceCIDR = "198.19.255.0/24"
	}
	apiserverBin, etcdBin := binaries(t)
	dir, err := os.MkdirTemp("", "hbm-k8s-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) }) // registered first: runs after the processes are killed
	c := &Cluster{t: t, Dir: dir}

	// etcd
	etcdPort, peerPort := FreePort(t), FreePort(t)
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	etcd := testutil.StartProc(t, nil, etcdBin, "--name", "e2e", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "e2e="+peerURL, "--unsafe-no-fsync", "--log-level", "warn")
	hc := &http.Client{Timeout: 2 * time.Second}
	if !testutil.WaitFor(60*time.Second, func() bool {
		resp, err := hc.Get(etcdURL + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200 && !etcd.Exited()
	}) {
		t.Fatalf("etcd not healthy within 60s:\n%s", testutil.LastLines(etcd.Out.String(), 30))
	}

	// Keys and certificates: a CA, the API server's serving certificate
	// for 127.0.0.1, the service-account signing key.
	caKey, caCert, caPEM := newCA(t)
	c.CAPEM = caPEM
	writeServing(t, dir, caKey, caCert, net.ParseIP(o.Addr))
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, "sa.key"), "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey))
	tokens := fmt.Sprintf("%s,admin,admin-uid,system:masters\n%s,system:serviceaccount:kube-system:hbm,hbm-uid,\"system:serviceaccounts,system:serviceaccounts:kube-system\"\n", AdminToken, HBMToken)
	if err := os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(tokens), 0o600); err != nil {
		t.Fatal(err)
	}

	port := o.Port
	if port == 0 {
		port = FreePort(t)
	}
	c.URL = "https://" + net.JoinHostPort(o.Addr, fmt.Sprint(port))
	admission := []string{"--disable-admission-plugins", "ServiceAccount"}
	if o.ServiceAccountAdmission {
		admission = nil
	}
	c.APIServer = testutil.StartProc(t, nil, apiserverBin, append(admission,
		"--etcd-servers", etcdURL,
		"--bind-address", o.Addr, "--advertise-address", o.Addr, "--endpoint-reconciler-type", "none", fmt.Sprintf("--secure-port=%d", port),
		"--tls-cert-file", filepath.Join(dir, "serving.crt"), "--tls-private-key-file", filepath.Join(dir, "serving.key"),
		"--token-auth-file", filepath.Join(dir, "tokens.csv"),
		"--authorization-mode", "RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", filepath.Join(dir, "sa.key"),
		"--service-account-signing-key-file", filepath.Join(dir, "sa.key"),
		"--service-cluster-ip-range", o.ServiceCIDR,
		// Without the ServiceAccount admission plugin (the default here), no
		// controller manager needs to make the namespaces' default service
		// accounts; test/k8s's pods need none.
		"--allow-privileged=true", "--profiling=false",
		"--cert-dir", filepath.Join(dir, "certs"))...)
	c.AdminREST = &rest.Config{Host: c.URL, BearerToken: AdminToken, TLSClientConfig: rest.TLSClientConfig{CAData: caPEM},
		QPS: 200, Burst: 400}
	if c.Admin, err = kubernetes.NewForConfig(c.AdminREST); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if !testutil.WaitFor(120*time.Second, func() bool {
		if c.APIServer.Exited() {
			return true
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		body, err := c.Admin.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok"
	}) || c.APIServer.Exited() {
		t.Fatalf("kube-apiserver not ready within 120s:\n%s", testutil.LastLines(c.APIServer.Out.String(), 40))
	}
	t.Logf("etcd and kube-apiserver (%s) ready in %v", c.URL, time.Since(start).Round(time.Millisecond))
	return c
}

// Kubeconfig writes a kubeconfig for token and returns its path.
func (c *Cluster) Kubeconfig(name, token string) string {
	c.t.Helper()
	p := filepath.Join(c.Dir, name+".kubeconfig")
	ca := filepath.Join(c.Dir, "ca.crt")
	if err := os.WriteFile(ca, c.CAPEM, 0o644); err != nil {
		c.t.Fatal(err)
	}
	body := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
  - name: e2e
    cluster:
      server: %s
      certificate-authority: %s
users:
  - name: %s
    user:
      token: %s
contexts:
  - name: e2e
    context: {cluster: e2e, user: %s}
current-context: e2e
`, c.URL, ca, name, token, name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		c.t.Fatal(err)
	}
	return p
}

func newCA(t *testing.T) (*rsa.PrivateKey, *x509.Certificate, []byte) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hbm-e2e-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return key, cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func writeServing(t *testing.T, dir string, caKey *rsa.PrivateKey, ca *x509.Certificate, addr net.IP) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), addr},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, "serving.crt"), "CERTIFICATE", der)
	writePEM(t, filepath.Join(dir, "serving.key"), "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key))
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
