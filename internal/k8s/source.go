package k8s

import (
	"context"
	"fmt"
	"log"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"

	"github.com/hbm-dev/hbm/internal/daemon"
)

// Config says how to reach the API server and which pods are this node's.
type Config struct {
	// Kubeconfig is a kubeconfig file; "" uses the in-cluster config (the
	// pod's service account), as a DaemonSet does.
	Kubeconfig string
	// NodeName is this node's name (the DaemonSet passes NODE_NAME from
	// the downward API): only pods with spec.nodeName equal to it are
	// watched.
	NodeName string
	// CgroupRoot is kubelet's --cgroup-root, relative to the cgroup2
	// mount ("" or "/": the default).
	CgroupRoot string
	// SyncTimeout bounds the wait for the first list of pods (0: 2 minutes).
	SyncTimeout time.Duration
}

// EventReason is the reason of the Warning Event an invalid annotation
// raises on its pod.
const EventReason = "InvalidBandwidth"

// Source follows the node's pods with an informer and tells the daemon
// what they declare (daemon.PodSource).
type Source struct {
	cfg      Config
	mnt      string
	log      *log.Logger
	client   typedcorev1.CoreV1Interface
	informer cache.SharedIndexInformer
	pods     listerscorev1.PodLister
	synced   cache.InformerSynced
	events   record.EventBroadcaster
	rec      record.EventRecorder
	changed  chan struct{}

	mu       sync.Mutex
	reported map[types.UID]string // the invalid annotations last reported per pod
	policy   daemon.PodPolicy
}

// RESTConfig is the client configuration cfg names.
func RESTConfig(cfg Config) (*rest.Config, error) {
	if cfg.Kubeconfig != "" {
		rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubernetes: kubeconfig %s: %w", cfg.Kubeconfig, err)
		}
		return rc, nil
	}
	rc, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes: not in a cluster (give --kubeconfig FILE): %w", err)
	}
	return rc, nil
}

// New connects to the API server cfg names.
func New(cfg Config, mnt string, lg *log.Logger) (*Source, error) {
	rc, err := RESTConfig(cfg)
	if err != nil {
		return nil, err
	}
	rc.UserAgent = "hbm-daemon"
	// Only the core/v1 client (pods, events): the full clientset and
	// its scheme would add every API group to the binary.
	cs, err := typedcorev1.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	return NewWithClient(cs, cfg, mnt, lg)
}

// NewWithClient uses an existing core/v1 client (the tests' fake one, too).
func NewWithClient(cs typedcorev1.CoreV1Interface, cfg Config, mnt string, lg *log.Logger) (*Source, error) {
	if cfg.NodeName == "" {
		return nil, fmt.Errorf("kubernetes: no node name: set NODE_NAME (the DaemonSet passes spec.nodeName) or give --node-name")
	}
	if cfg.SyncTimeout == 0 {
		cfg.SyncTimeout = 2 * time.Minute
	}
	if cfg.CgroupRoot == "" {
		cfg.CgroupRoot = "/"
	}
	s := &Source{cfg: cfg, mnt: mnt, log: lg, client: cs, changed: make(chan struct{}, 1), reported: map[types.UID]string{},
		policy: daemon.DefaultPodPolicy()}
	sel := fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return cs.Pods(metav1.NamespaceAll).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return cs.Pods(metav1.NamespaceAll).Watch(ctx, o)
		},
	}
	// The client says whether it can stream the initial list (WatchList);
	// the tests' fake cannot.
	informer := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, cs), &corev1.Pod{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	s.informer = informer
	// Only metadata, the spec's resources and status.qosClass are read:
	// managed fields are dropped from the cache.
	if err := informer.SetTransform(func(obj any) (any, error) {
		if p, ok := obj.(*corev1.Pod); ok {
			p.ManagedFields = nil
		}
		return obj, nil
	}); err != nil {
		return nil, err
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.observe(nil, obj) },
		UpdateFunc: s.observe,
		DeleteFunc: s.deleted,
	}); err != nil {
		return nil, err
	}
	s.pods, s.synced = listerscorev1.NewPodLister(informer.GetIndexer()), informer.HasSynced
	sch := runtime.NewScheme()
	if err := corev1.AddToScheme(sch); err != nil {
		return nil, err
	}
	s.events = record.NewBroadcaster()
	s.rec = s.events.NewRecorder(sch, corev1.EventSource{Component: "hbm", Host: cfg.NodeName})
	return s, nil
}

// Start implements daemon.PodSource: it starts the informer and the Event
// sink and waits (bounded) for the first list of pods.
func (s *Source) Start(ctx context.Context) error {
	s.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: s.client.Events("")})
	go func() { <-ctx.Done(); s.events.Shutdown() }()
	go s.informer.RunWithContext(ctx)
	wctx, cancel := context.WithTimeout(ctx, s.cfg.SyncTimeout)
	defer cancel()
	if !cache.WaitForCacheSync(wctx.Done(), s.synced) {
		return fmt.Errorf("kubernetes: could not list the pods of node %s within %v", s.cfg.NodeName, s.cfg.SyncTimeout)
	}
	return nil
}

// SetPolicy implements daemon.PodSource: the pods are judged again (and
// their Events raised again) under the new policy.
func (s *Source) SetPolicy(p daemon.PodPolicy) {
	s.mu.Lock()
	s.policy = p
	s.reported = map[types.UID]string{}
	s.mu.Unlock()
	if s.pods == nil {
		return
	}
	if pods, err := s.pods.List(labels.Everything()); err == nil {
		for _, p := range pods {
			if key := annotationKey(p); key != "" {
				s.report(p, key)
			}
		}
	}
	s.signal()
}

func (s *Source) currentPolicy() daemon.PodPolicy {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.policy
}

// Changed implements daemon.PodSource.
func (s *Source) Changed() <-chan struct{} { return s.changed }

// Pods implements daemon.PodSource: each pod with bandwidth annotations,
// on its cgroup as kubelet names it (the driver read from the tree now),
// and the directories pods' groups appear in.
func (s *Source) Pods() ([]daemon.PodDecl, []string) {
	layout := DetectLayout(s.mnt, s.cfg.CgroupRoot)
	var watch []string
	for _, p := range layout.Parents() {
		watch = append(watch, filepath.Join(s.mnt, p))
	}
	pods, err := s.pods.List(labels.Everything())
	if err != nil || layout.Driver == DriverUnknown {
		return nil, watch
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].UID < pods[j].UID })
	pol := s.currentPolicy()
	uids := podUIDs(pods)
	var out []daemon.PodDecl
	for _, p := range pods {
		// Edits not followed: every pod of the node keeps what it was
		// given, also once its annotations are gone.
		if !relevant(p) && pol.FollowEdits {
			continue
		}
		j := Judge(p.Annotations, QOSClass(p), pol)
		if j.Egress == nil && j.Ingress == nil && !j.KeepEgress && !j.KeepIngress {
			continue
		}
		out = append(out, daemon.PodDecl{Namespace: p.Namespace, Name: p.Name, Cgroup: layout.PodCgroup(QOSClass(p), uids[p]),
			Egress: j.Egress, Ingress: j.Ingress, KeepEgress: j.KeepEgress, KeepIngress: j.KeepIngress})
	}
	return out, watch
}

// relevant: the pod has an annotation this source reads.
func relevant(p *corev1.Pod) bool {
	return annotationKey(p) != ""
}

// annotationKey is the pod's annotations that matter, as one string ("" if
// none): an update that leaves it alone changes nothing here.
func annotationKey(p *corev1.Pod) string {
	var keys []string
	for k, v := range p.Annotations {
		if k == IngressAnnotation || k == EgressAnnotation || strings.HasPrefix(k, OptionPrefix) {
			keys = append(keys, k+"="+v)
		}
	}
	sort.Strings(keys)
	return strings.Join(keys, "\n")
}

func (s *Source) signal() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// observe handles a pod added or updated: a pass if what it declares may
// have changed, an Event if its annotations are invalid (once per value).
func (s *Source) observe(oldObj, obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	key := annotationKey(p)
	if old, ok := oldObj.(*corev1.Pod); ok && annotationKey(old) == key && old.UID == p.UID &&
		old.Status.QOSClass == p.Status.QOSClass {
		return
	}
	if key != "" {
		s.report(p, key)
	} else {
		s.mu.Lock()
		delete(s.reported, p.UID)
		s.mu.Unlock()
	}
	if key != "" || oldObj != nil {
		s.signal()
	}
}

// report raises the Event and the log line for annotations the daemon
// cannot honour as written (invalid, not allowed, out of range), once for
// each set of values, saying what the pod gets instead.
func (s *Source) report(p *corev1.Pod, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := Judge(p.Annotations, QOSClass(p), s.policy)
	if len(j.Problems) == 0 {
		delete(s.reported, p.UID)
		return
	}
	if s.reported[p.UID] == key {
		return
	}
	s.reported[p.UID] = key
	msg := "invalid bandwidth annotations: " + strings.Join(j.Problems, "; ")
	s.log.Printf("pod %s/%s: %s", p.Namespace, p.Name, msg)
	s.rec.Event(p, corev1.EventTypeWarning, EventReason, msg)
}

func (s *Source) deleted(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		s.signal()
		return
	}
	s.mu.Lock()
	delete(s.reported, p.UID)
	s.mu.Unlock()
	if relevant(p) {
		s.signal()
	}
}
