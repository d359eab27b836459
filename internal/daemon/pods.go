package daemon

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/hbm-dev/hbm/internal/dataplane"
)

// PodDecl is one Kubernetes pod's declared limits, as a PodSource sees them
// (internal/k8s: the pod's annotations on the pod's cgroup).
type PodDecl struct {
	Namespace, Name string
	// Cgroup is the pod's group, relative to the cgroup2 mount.
	Cgroup          string
	Egress, Ingress *dataplane.Limit
	// KeepEgress, KeepIngress: the limit the daemon applied in that
	// direction before stays as it is (an invalid annotation under the
	// policy "keep", or edits not followed); where it applied none, Egress
	// or Ingress (if set) is created.
	KeepEgress, KeepIngress bool
}

// PodSource is a second source of declared limits beside the file: the
// pods of this node (internal/k8s implements it; the daemon does not depend
// on Kubernetes' client).
type PodSource interface {
	// Start begins following the pods and returns once it has seen them
	// all (a first pass before that would remove their limits).
	Start(ctx context.Context) error
	// Changed signals (coalesced) that Pods may return something new.
	Changed() <-chan struct{}
	// Pods returns every pod's declaration, and the directories (absolute)
	// in which pods' groups appear, to watch.
	Pods() (pods []PodDecl, watch []string)
	// SetPolicy gives the operator's policy (from the configuration file,
	// at start and on every reload) before the next Pods.
	SetPolicy(PodPolicy)
}

// ResolvePods adds the pods' limits to res (built from the file: a limit
// the file declares on the same group and direction wins, with a warning)
// and the directories to watch. A pod whose group does not exist yet gets
// no target: the directory it will appear in is watched.
func ResolvePods(mnt string, pods []PodDecl, watch []string, res *Resolution) {
	for _, p := range pods {
		g, ok := group(mnt, filepath.Join(mnt, p.Cgroup))
		if !ok {
			continue
		}
		for _, d := range []struct {
			dir  dataplane.Direction
			l    *dataplane.Limit
			keep bool
		}{{dataplane.Egress, p.Egress, p.KeepEgress}, {dataplane.Ingress, p.Ingress, p.KeepIngress}} {
			if d.l == nil && !d.keep {
				continue
			}
			k := Key{g.ID, d.dir}
			if prev, ok := res.Targets[k]; ok {
				res.Warnings = append(res.Warnings, fmt.Sprintf("pod %s/%s: %s %v already declared by %s, which wins",
					p.Namespace, p.Name, g.Rel, d.dir, prev.Origin()))
				continue
			}
			t := Target{Group: g, Dir: d.dir, Namespace: p.Namespace, Pod: p.Name, Keep: d.keep}
			if d.l != nil {
				t.Limit = *d.l
			}
			res.Targets[k] = t
		}
	}
	have := map[string]bool{}
	for _, w := range res.Watch {
		have[w] = true
	}
	for _, w := range watch {
		if !have[w] {
			have[w] = true
			res.Watch = append(res.Watch, w)
		}
	}
}
