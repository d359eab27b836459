package k8s

// The control plane for the end-to-end test is test/kcluster's (shared with
// test/node): etcd and kube-apiserver on 127.0.0.1.

import (
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/hbm-dev/hbm/internal/testutil"
	"github.com/hbm-dev/hbm/test/kcluster"
)

// cluster is a running etcd and kube-apiserver.
type cluster struct {
	*kcluster.Cluster
	t         *testing.T
	dir       string
	url       string
	caPEM     []byte
	admin     *kubernetes.Clientset
	adminREST *rest.Config
	apiserver *testutil.Proc
}

const (
	adminToken = kcluster.AdminToken
	hbmToken   = kcluster.HBMToken
)

func startCluster(t *testing.T) *cluster {
	t.Helper()
	k := kcluster.Start(t, kcluster.Options{})
	return &cluster{Cluster: k, t: t, dir: k.Dir, url: k.URL, caPEM: k.CAPEM,
		admin: k.Admin, adminREST: k.AdminREST, apiserver: k.APIServer}
}

func (c *cluster) kubeconfig(name, token string) string { return c.Kubeconfig(name, token) }

func freePort(t *testing.T) int { return kcluster.FreePort(t) }

func repoRoot() string { return kcluster.RepoRoot() }
