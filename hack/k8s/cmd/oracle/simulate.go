package main

// `oracle simulate`: the benchmark harness's bulk mode (hack/bench). Every
// pending pod of a cluster file is scheduled by upstream's own scheduler —
// scheduler.New + Scheduler.Run, i.e. the real ScheduleOne loop: queue pop,
// schedule, assume into the cache, PostFilter (preemption), async binding
// through DefaultBinder against the fake API. Only the harness is ours: a
// reactor that applies pods/binding to the fake API (so the informers confirm
// the assumed pods, as with an apiserver), ones that give every update and
// every strategic-merge or merge patch a new resourceVersion (as an
// apiserver does; upstream's assume caches for claims and volumes compare
// versions, its pod event handler drops an update whose version did not
// change — a nomination written by a patch — and the plain tracker keeps
// none), and
// wrappers around
// Scheduler.SchedulePod / FailureHandler that take times and count outcomes.
// Upstream code is unchanged.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"runtime/pprof"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// SimulateResult is printed as JSON; hack/bench reads it.
type SimulateResult struct {
	Scheduled     int       `json:"scheduled"`
	Unschedulable int       `json:"unschedulable"`
	Pending       int       `json:"pending"`
	Attempts      int       `json:"attempts"`
	Seconds       float64   `json:"seconds"`
	PodsPerSecond float64   `json:"podsPerSecond"`
	LatencyP50Ms  float64   `json:"latencyP50Ms"`
	LatencyP99Ms  float64   `json:"latencyP99Ms"`
	PeakRSSBytes  int64     `json:"peakRssBytes"`
	LatenciesMs   []float64 `json:"latenciesMs,omitempty"`
	// With --placements: every measured pod's first outcome in the order
	// they happened (node "" = failed without a nomination), and the pods
	// OpportunisticBatching placed on a hint (all profiles).
	Placements []placement `json:"placements,omitempty"`
	// With --placements: the pods deleted through the API (preemption's
	// victims), in the order of the calls.
	DeletedPods []string `json:"deletedPods,omitempty"`
	BatchedPods *int64   `json:"batchedPods,omitempty"`
	TimedOut    bool     `json:"timedOut,omitempty"`
}

type placement struct {
	Pod  string `json:"pod"`
	Node string `json:"node"`
	// The failed attempt's message (the PodScheduled condition's).
	Message string `json:"message,omitempty"`
}

type simulateOptions struct {
	clusterPath, configFile         string
	defaults, latencies, placements bool
	timeout                         time.Duration
	cpuProfile                      string // pprof of the timed loop only
}

// podState: a pending pod is done once bound, or once an attempt failed
// without nominating a node (a nominated preemptor is retried by upstream).
type podState int

const (
	statePending podState = iota
	stateBound
	stateFailed
)

type tracker struct {
	mu        sync.Mutex
	state     map[types.UID]podState
	remaining int
	attempts  int
	latencies []time.Duration
	end       time.Time
	done      chan struct{}
	// First outcome of each measured pod, in order.
	placed map[types.UID]bool
	order  []placement
	// Pods deleted through the API, in order.
	deleted []string
}

// record notes a measured pod's first outcome.
func (t *tracker) record(uid types.UID, key, node, message string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.state[uid]; !ok || t.placed[uid] {
		return
	}
	t.placed[uid] = true
	t.order = append(t.order, placement{Pod: key, Node: node, Message: message})
}

func (t *tracker) set(uid types.UID, s podState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old, ok := t.state[uid]
	if !ok {
		return // not a measured pod
	}
	// bound is final; failed may still turn into bound (a retry)
	if old == stateBound || (old == stateFailed && s == stateFailed) {
		return
	}
	t.state[uid] = s
	if old == statePending && s != statePending {
		t.remaining--
		if t.remaining == 0 {
			t.end = time.Now()
			close(t.done)
		}
	}
}

func simulate(ctx context.Context, o simulateOptions) (*SimulateResult, error) {
	// The fake clientset's watchers buffer 100 events and panic ("channel
	// full") beyond that; bindings of trivially placed pods (e.g.
	// scheduler_perf's SchedulingDaemonset) outrun the informers. The
	// harness's watchers get room for 65,536 (2 MiB each).
	watch.DefaultChanSize = 1 << 16
	cfg, err := loadConfig(o.configFile)
	if err != nil {
		return nil, err
	}
	all, err := loadCluster(o.clusterPath, loadOptions{defaults: o.defaults, warnings: os.Stderr})
	if err != nil {
		return nil, err
	}
	profiles := map[string]bool{}
	for _, p := range cfg.Profiles {
		profiles[p.SchedulerName] = true
	}
	tr := &tracker{state: map[types.UID]podState{}, done: make(chan struct{}), placed: map[types.UID]bool{}}
	var objs []runtime.Object
	nodeCount, assignedPods := 0, 0
	for _, obj := range all {
		switch t := obj.(type) {
		case *v1.Pod:
			if t.Status.Phase == v1.PodSucceeded || t.Status.Phase == v1.PodFailed {
				continue
			}
			if t.Spec.NodeName != "" {
				assignedPods++
			} else if profiles[t.Spec.SchedulerName] {
				tr.state[t.UID] = statePending
			}
		case *v1.Node:
			nodeCount++
		}
		objs = append(objs, obj)
	}
	tr.remaining = len(tr.state)
	for _, obj := range objs {
		if m, err := meta.Accessor(obj); err == nil && m.GetResourceVersion() == "" {
			m.SetResourceVersion("1")
		}
	}

	// The plain object tracker: NewClientset's field-managed tracker builds a
	// REST mapper on every update, which made the harness's binding (not the
	// scheduler) about half of the CPU time.
	e, err := newEnvWithClient(ctx, cfg, fake.NewSimpleClientset(objs...)) //nolint:staticcheck // see above
	if err != nil {
		return nil, err
	}
	var version atomic.Int64
	version.Store(1)
	e.client.PrependReactor("update", "*", func(action clienttesting.Action) (bool, runtime.Object, error) {
		if ua, ok := action.(clienttesting.UpdateAction); ok {
			if m, err := meta.Accessor(ua.GetObject()); err == nil {
				m.SetResourceVersion(strconv.FormatInt(version.Add(1), 10))
			}
		}
		return false, nil, nil
	})
	// Patches (the scheduler's pod status: condition and nomination): applied
	// as the plain tracker applies them, with a new resourceVersion.
	e.client.PrependReactor("patch", "*", func(action clienttesting.Action) (bool, runtime.Object, error) {
		pa, ok := action.(clienttesting.PatchActionImpl)
		if !ok || (pa.GetPatchType() != types.StrategicMergePatchType && pa.GetPatchType() != types.MergePatchType) {
			return false, nil, nil
		}
		obj, err := e.client.Tracker().Get(pa.GetResource(), pa.GetNamespace(), pa.GetName())
		if err != nil {
			return true, nil, err
		}
		old, err := json.Marshal(obj)
		if err != nil {
			return true, nil, err
		}
		var merged []byte
		if pa.GetPatchType() == types.StrategicMergePatchType {
			merged, err = strategicpatch.StrategicMergePatch(old, pa.GetPatch(), obj)
		} else {
			merged, err = jsonpatch.MergePatch(old, pa.GetPatch())
		}
		if err != nil {
			return true, nil, err
		}
		out := obj.DeepCopyObject()
		value := reflect.ValueOf(out)
		value.Elem().Set(reflect.New(value.Type().Elem()).Elem())
		if err := json.Unmarshal(merged, out); err != nil {
			return true, nil, err
		}
		if m, err := meta.Accessor(out); err == nil {
			m.SetResourceVersion(strconv.FormatInt(version.Add(1), 10))
		}
		if err := e.client.Tracker().Update(pa.GetResource(), out, pa.GetNamespace()); err != nil {
			return true, nil, err
		}
		return true, out, nil
	})
	// Pod deletions (preemption's victims): recorded when the call is made,
	// before any event of it can let a preemptor in.
	e.client.PrependReactor("delete", "pods", func(action clienttesting.Action) (bool, runtime.Object, error) {
		if da, ok := action.(clienttesting.DeleteAction); ok {
			tr.mu.Lock()
			tr.deleted = append(tr.deleted, da.GetNamespace()+"/"+da.GetName())
			tr.mu.Unlock()
		}
		return false, nil, nil
	})
	// pods/binding: what the apiserver does (set spec.nodeName), so that the
	// informer delivers the update and the cache confirms the assumed pod.
	podsGVR := v1.SchemeGroupVersion.WithResource("pods")
	e.client.PrependReactor("create", "pods", func(action clienttesting.Action) (bool, runtime.Object, error) {
		ca, ok := action.(clienttesting.CreateAction)
		if !ok || ca.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := ca.GetObject().(*v1.Binding)
		obj, err := e.client.Tracker().Get(podsGVR, b.Namespace, b.Name)
		if err != nil {
			return true, nil, err
		}
		pod := obj.(*v1.Pod).DeepCopy()
		if pod.Spec.NodeName != "" {
			return true, nil, fmt.Errorf("pod %s/%s is already assigned to node %q", pod.Namespace, pod.Name, pod.Spec.NodeName)
		}
		pod.Spec.NodeName = b.Target.Name
		if err := e.client.Tracker().Update(podsGVR, pod, pod.Namespace); err != nil {
			return true, nil, err
		}
		tr.record(pod.UID, pod.Namespace+"/"+pod.Name, b.Target.Name, "")
		tr.set(pod.UID, stateBound)
		return true, b, nil
	})
	schedulePod := e.sched.SchedulePod
	e.sched.SchedulePod = func(ctx context.Context, f framework.Framework, state fwk.CycleState, pi *framework.QueuedPodInfo) (scheduler.ScheduleResult, error) {
		start := time.Now()
		r, err := schedulePod(ctx, f, state, pi)
		d := time.Since(start)
		tr.mu.Lock()
		tr.attempts++
		tr.latencies = append(tr.latencies, d)
		tr.mu.Unlock()
		return r, err
	}
	failureHandler := e.sched.FailureHandler
	e.sched.FailureHandler = func(ctx context.Context, f framework.Framework, pi *framework.QueuedPodInfo, status *fwk.Status, ni *fwk.NominatingInfo, start time.Time) {
		failureHandler(ctx, f, pi, status, ni, start)
		if ni == nil || ni.NominatedNodeName == "" {
			tr.record(pi.Pod.UID, pi.Pod.Namespace+"/"+pi.Pod.Name, "", status.Message())
			tr.set(pi.Pod.UID, stateFailed)
		}
	}

	// Fill the cache and the queue (untimed), then run the scheduling loop.
	// The queue must hold every pending pod first: a pod group popped
	// before all its members arrived would be scheduled in two cycles.
	if err := e.start(ctx); err != nil {
		return nil, err
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		pc, _ := e.sched.Cache.PodCount()
		queued, _ := e.sched.SchedulingQueue.PendingPods()
		return e.sched.Cache.NodeCount() >= nodeCount && pc >= assignedPods && len(queued) >= len(tr.state), nil
	}); err != nil {
		return nil, fmt.Errorf("scheduler cache did not fill: %w", err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	if tr.remaining == 0 {
		tr.end = start
	} else {
		go e.sched.Run(runCtx)
	}
	timedOut := false
	if tr.remaining > 0 {
		select {
		case <-tr.done:
		case <-time.After(o.timeout):
			timedOut = true
		}
	}
	if o.cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	end := tr.end
	if timedOut {
		end = time.Now()
	}
	stop()

	res := &SimulateResult{Pending: len(tr.state), Attempts: tr.attempts, TimedOut: timedOut}
	for _, s := range tr.state {
		switch s {
		case stateBound:
			res.Scheduled++
		case stateFailed:
			res.Unschedulable++
		}
	}
	res.Seconds = end.Sub(start).Seconds()
	if res.Seconds > 0 {
		res.PodsPerSecond = float64(res.Scheduled) / res.Seconds
	}
	ms := make([]float64, len(tr.latencies))
	for i, d := range tr.latencies {
		ms[i] = float64(d.Nanoseconds()) / 1e6
	}
	sorted := append([]float64(nil), ms...)
	sort.Float64s(sorted)
	res.LatencyP50Ms = percentile(sorted, 50)
	res.LatencyP99Ms = percentile(sorted, 99)
	if o.latencies {
		res.LatenciesMs = ms
	}
	if o.placements {
		res.Placements = tr.order
		res.DeletedPods = tr.deleted
		var batched int64
		for _, f := range e.sched.Profiles {
			if b, ok := f.(interface{ TotalBatchedPods() int64 }); ok {
				batched += b.TotalBatchedPods()
			}
		}
		res.BatchedPods = &batched
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		res.PeakRSSBytes = ru.Maxrss * 1024 // Linux: KiB
	}
	if timedOut {
		warnf("timed out after %v with %d pod(s) still pending", o.timeout, len(tr.state)-res.Scheduled-res.Unschedulable)
	}
	return res, nil
}

// percentile of sorted values, nearest rank.
func percentile(sorted []float64, p int) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	if i < 1 {
		i = 1
	}
	return sorted[i-1]
}
