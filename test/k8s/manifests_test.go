package k8s

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/hbm-dev/hbm/internal/daemon"
)

// manifests reads every object in deploy/kubernetes/*.yaml.
func manifests(t *testing.T) []*unstructured.Unstructured {
	return manifestsIn(t, filepath.Join(repoRoot(), "deploy", "kubernetes"))
}

// manifestsIn reads every object in dir/*.yaml.
func manifestsIn(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	sort.Strings(files)
	if len(files) == 0 {
		t.Fatal("no manifests in deploy/kubernetes")
	}
	var out []*unstructured.Unstructured
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			var u unstructured.Unstructured
			if err := dec.Decode(&u.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				t.Fatalf("%s: %v", f, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			out = append(out, &u)
		}
	}
	return out
}

// apply creates each manifest object on the API server: with dryRun, as
// `kubectl apply --dry-run=server` does (the server validates and admits
// it, and stores nothing).
func (c *cluster) apply(objs []*unstructured.Unstructured, dryRun bool, kinds ...string) {
	c.t.Helper()
	dyn, err := dynamic.NewForConfig(c.adminREST)
	if err != nil {
		c.t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.admin.Discovery()))
	opts := metav1.CreateOptions{FieldValidation: "Strict"}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	for _, u := range objs {
		if len(kinds) > 0 && !contains(kinds, u.GetKind()) {
			continue
		}
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			c.t.Errorf("%s %s: %v", gvk.Kind, u.GetName(), err)
			continue
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if u.GetNamespace() != "" {
			ri = dyn.Resource(m.Resource).Namespace(u.GetNamespace())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30_000_000_000)
		_, err = ri.Create(ctx, u, opts)
		cancel()
		if err != nil {
			c.t.Errorf("create %s %s/%s (dry run %v): %v", gvk.Kind, u.GetNamespace(), u.GetName(), dryRun, err)
		}
	}
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// TestManifests: the API server accepts every object in deploy/kubernetes
// in a server-side dry run (strict field validation: a misspelt field is
// an error), and the DaemonSet asks for what the issue says and no more.
func TestManifests(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a real etcd and kube-apiserver")
	}
	objs := manifests(t)
	kinds := map[string]*unstructured.Unstructured{}
	for _, u := range objs {
		kinds[u.GetKind()] = u
	}
	for _, k := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet"} {
		if kinds[k] == nil {
			t.Errorf("deploy/kubernetes has no %s", k)
		}
	}
	if ds := kinds["DaemonSet"]; ds != nil {
		spec, _, _ := unstructured.NestedMap(ds.Object, "spec", "template", "spec")
		if spec["hostPID"] != true || spec["hostNetwork"] == true {
			t.Errorf("DaemonSet: hostPID %v hostNetwork %v, want hostPID only", spec["hostPID"], spec["hostNetwork"])
		}
		cs, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
		ctr := cs[0].(map[string]any)
		add, _, _ := unstructured.NestedStringSlice(ctr, "securityContext", "capabilities", "add")
		drop, _, _ := unstructured.NestedStringSlice(ctr, "securityContext", "capabilities", "drop")
		// SYS_PTRACE: the socket walker's way into other pods' network
		// namespaces (/proc/PID/ns/net; docs/design.md).
		if strings.Join(add, ",") != "BPF,NET_ADMIN,SYS_ADMIN,SYS_PTRACE" || strings.Join(drop, ",") != "ALL" {
			t.Errorf("DaemonSet capabilities add %v drop %v", add, drop)
		}
		if p, _, _ := unstructured.NestedBool(ctr, "securityContext", "privileged"); p {
			t.Errorf("DaemonSet container is privileged")
		}
		env, _, _ := unstructured.NestedSlice(ctr, "env")
		found := false
		for _, e := range env {
			if path, _, _ := unstructured.NestedString(e.(map[string]any), "valueFrom", "fieldRef", "fieldPath"); path == "spec.nodeName" {
				found = e.(map[string]any)["name"] == "NODE_NAME"
			}
		}
		if !found {
			t.Errorf("DaemonSet: no NODE_NAME from spec.nodeName")
		}
	}
	// The examples (NetworkPolicy for the metrics, the policy ConfigMap):
	// accepted too, and the ConfigMap's file is a valid configuration.
	examples := manifestsIn(t, filepath.Join(repoRoot(), "deploy", "kubernetes", "examples"))
	for _, u := range examples {
		if u.GetKind() != "ConfigMap" {
			continue
		}
		body, _, _ := unstructured.NestedString(u.Object, "data", "hbm.yaml")
		cfg, err := daemon.Parse("hbm.yaml", []byte(body))
		if err != nil {
			t.Errorf("example ConfigMap %s: %v", u.GetName(), err)
		} else if cfg.Pods.Allowed["no-drop"] || cfg.Pods.DefaultEgress == 0 {
			t.Errorf("example ConfigMap %s: policy %+v", u.GetName(), cfg.Pods)
		}
	}
	c := startCluster(t)
	c.apply(objs, true)
	c.apply(examples, true)
}
