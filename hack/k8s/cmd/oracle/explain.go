package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"time"
	"unsafe"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	configv1 "k8s.io/kube-scheduler/config/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// ---------------------------------------------------------------- output

type FilterResult struct {
	Plugin  string   `json:"plugin"`
	Code    string   `json:"code"`
	Reasons []string `json:"reasons"`
}

type ScoreResult struct {
	Plugin     string `json:"plugin"`
	Raw        int64  `json:"raw"`
	Normalized int64  `json:"normalized"`
	Weight     int64  `json:"weight"`
	Weighted   int64  `json:"weighted"`
}

type NodeResult struct {
	Name     string         `json:"name"`
	Feasible bool           `json:"feasible"`
	Filters  []FilterResult `json:"filters"`
	Scores   []ScoreResult  `json:"scores"`
	Total    int64          `json:"total"`
}

type Explanation struct {
	Pod          string       `json:"pod"`
	Profile      string       `json:"profile"`
	Nodes        []NodeResult `json:"nodes"`
	SelectedNode *string      `json:"selectedNode"`
	TopNodes     []string     `json:"topNodes"`
	Message      string       `json:"message"`
	// Error is upstream's scheduling error when a plugin failed internally
	// (the pod is retried, not marked unschedulable).
	Error string `json:"error,omitempty"`
}

// ---------------------------------------------------------------- config

func loadConfig(file string) (*config.KubeSchedulerConfiguration, error) {
	var cfg *config.KubeSchedulerConfiguration
	var err error
	if file == "" {
		cfg, err = latest.Default()
	} else {
		// upstream kube-scheduler's own loader: decode + default
		cfg, err = options.LoadConfigFromFile(klog.Background(), file)
	}
	if err != nil {
		return nil, fmt.Errorf("scheduler config: %w", err)
	}
	if err := validation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
		return nil, fmt.Errorf("scheduler config: %w", err)
	}
	if len(cfg.Extenders) > 0 {
		return nil, errors.New("scheduler config: extenders are not supported by the oracle")
	}
	return cfg, nil
}

// ---------------------------------------------------------------- environment

type env struct {
	cfg      *config.KubeSchedulerConfiguration
	client   *fake.Clientset
	sched    *scheduler.Scheduler
	snapshot *internalcache.Snapshot
	start    func(ctx context.Context) error
}

// newEnv builds a real *scheduler.Scheduler (exactly as kube-scheduler's
// app.Setup does, minus the network) over a fake clientset holding objs.
func newEnv(ctx context.Context, cfg *config.KubeSchedulerConfiguration, objs []runtime.Object) (*env, error) {
	return newEnvWithClient(ctx, cfg, fake.NewClientset(objs...))
}

func newEnvWithClient(ctx context.Context, cfg *config.KubeSchedulerConfiguration, client *fake.Clientset) (*env, error) {
	informerFactory := scheduler.NewInformerFactory(client, 0, nil)
	snapshot := internalcache.NewEmptySnapshot()
	recorderFactory := func(string) events.EventRecorderLogger { return &events.FakeRecorder{} }
	sched, err := scheduler.New(ctx, client, informerFactory, nil, recorderFactory,
		scheduler.WithComponentConfigVersion(cfg.TypeMeta.APIVersion),
		scheduler.WithProfiles(cfg.Profiles...),
		scheduler.WithPercentageOfNodesToScore(cfg.PercentageOfNodesToScore),
		scheduler.WithPodMaxBackoffSeconds(cfg.PodMaxBackoffSeconds),
		scheduler.WithPodInitialBackoffSeconds(cfg.PodInitialBackoffSeconds),
		scheduler.WithParallelism(cfg.Parallelism),
		scheduler.WithNodeInfoSnapshot(snapshot),
	)
	if err != nil {
		return nil, fmt.Errorf("creating scheduler: %w", err)
	}
	e := &env{cfg: cfg, client: client, sched: sched, snapshot: snapshot}
	e.start = func(ctx context.Context) error {
		informerFactory.Start(ctx.Done())
		for t, ok := range informerFactory.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return fmt.Errorf("informer for %v did not sync", t)
			}
		}
		return sched.WaitForHandlersSync(ctx)
	}
	return e, nil
}

func profileConfig(cfg *config.KubeSchedulerConfiguration, name string) *config.KubeSchedulerProfile {
	for i := range cfg.Profiles {
		if cfg.Profiles[i].SchedulerName == name {
			return &cfg.Profiles[i]
		}
	}
	return nil
}

func pluginNames(ps config.PluginSet) []string {
	var out []string
	for _, p := range ps.Enabled {
		out = append(out, p.Name)
	}
	return out
}

// ---------------------------------------------------------------- explain

type explainOptions struct {
	clusterPath, namespace, name, configFile string
	defaults                                 bool
}

func explain(ctx context.Context, o explainOptions) (*Explanation, error) {
	logger := klog.FromContext(ctx)
	cfg, err := loadConfig(o.configFile)
	if err != nil {
		return nil, err
	}
	all, err := loadCluster(o.clusterPath, loadOptions{defaults: o.defaults, warnings: os.Stderr})
	if err != nil {
		return nil, err
	}

	// Terminal pods are invisible to kube-scheduler (its pod informer has a
	// field selector status.phase!=Succeeded,status.phase!=Failed).
	var objs []runtime.Object
	var pod *v1.Pod
	nodeCount, assignedPods := 0, 0
	for _, obj := range all {
		switch t := obj.(type) {
		case *v1.Pod:
			if t.Namespace == o.namespace && t.Name == o.name {
				pod = t.DeepCopy()
			}
			if t.Status.Phase == v1.PodSucceeded || t.Status.Phase == v1.PodFailed {
				continue
			}
			if t.Spec.NodeName != "" {
				assignedPods++
			}
		case *v1.Node:
			nodeCount++
		}
		objs = append(objs, obj)
	}
	if pod == nil {
		return nil, fmt.Errorf("pod %s/%s not found in %s", o.namespace, o.name, o.clusterPath)
	}
	if pod.Spec.NodeName != "" {
		return nil, fmt.Errorf("pod %s/%s is already bound to node %q", pod.Namespace, pod.Name, pod.Spec.NodeName)
	}
	if pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
		return nil, fmt.Errorf("pod %s/%s is terminal (%s)", pod.Namespace, pod.Name, pod.Status.Phase)
	}

	e, err := newEnv(ctx, cfg, objs)
	if err != nil {
		return nil, err
	}
	profile, ok := e.sched.Profiles[pod.Spec.SchedulerName]
	if !ok {
		return nil, fmt.Errorf("pod %s/%s has schedulerName %q, which is not a profile of the configuration", pod.Namespace, pod.Name, pod.Spec.SchedulerName)
	}
	plugins := profile.ListPlugins()
	preFilterNames := pluginNames(plugins.PreFilter)
	filterNames := pluginNames(plugins.Filter)
	weights := map[string]int64{}
	for _, p := range plugins.Score.Enabled {
		weights[p.Name] = int64(p.Weight)
	}

	// The profile's own plugin instances, so that every plugin can be run on
	// its own (the framework only runs them as a chain that stops early).
	inst, err := frameworkPluginInstances(profile)
	if err != nil {
		return nil, err
	}
	for _, n := range append(append([]string{}, preFilterNames...), filterNames...) {
		if _, ok := inst[n]; !ok {
			return nil, fmt.Errorf("internal: plugin %q of profile %q has no instance", n, profile.ProfileName())
		}
	}

	// Start informers, wait until the scheduler cache has every node and
	// assigned pod, then take the snapshot exactly as a scheduling cycle does.
	if err := e.start(ctx); err != nil {
		return nil, err
	}
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		pc, _ := e.sched.Cache.PodCount()
		return e.sched.Cache.NodeCount() >= nodeCount && pc >= assignedPods, nil
	}); err != nil {
		return nil, fmt.Errorf("scheduler cache did not fill: %w", err)
	}
	if err := e.sched.Cache.UpdateSnapshot(logger, e.snapshot); err != nil {
		return nil, err
	}
	nodeInfos, err := e.snapshot.NodeInfos().List()
	if err != nil {
		return nil, err
	}
	nodes := append([]fwk.NodeInfo(nil), nodeInfos...)
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Node().Name < nodes[j].Node().Name })

	res := &Explanation{
		Pod:      pod.Namespace + "/" + pod.Name,
		Profile:  profile.ProfileName(),
		Nodes:    []NodeResult{},
		TopNodes: []string{},
	}

	// ---- PreFilter: every plugin, in profile order, on one CycleState.
	state := framework.NewCycleState()
	type preFilterOutcome struct {
		result *fwk.PreFilterResult
		status *fwk.Status
	}
	preFilter := map[string]preFilterOutcome{}
	for _, n := range preFilterNames {
		r, s := inst[n].(fwk.PreFilterPlugin).PreFilter(ctx, state, pod, nodeInfos)
		if s.Code() == fwk.Error {
			return nil, fmt.Errorf("PreFilter plugin %q: %w", n, s.AsError())
		}
		preFilter[n] = preFilterOutcome{r, s}
	}

	// ---- Filter: every plugin on every node, never stopping early.
	isFilter := sets.New(filterNames...)
	var feasible []fwk.NodeInfo
	for _, ni := range nodes {
		nodeName := ni.Node().Name
		nr := NodeResult{Name: nodeName, Filters: []FilterResult{}, Scores: []ScoreResult{}}
		ok := true
		add := func(plugin string, s *fwk.Status) {
			code := s.Code()
			var reasons []string
			if s != nil {
				reasons = s.Reasons()
			}
			if reasons == nil {
				reasons = []string{}
			}
			nr.Filters = append(nr.Filters, FilterResult{Plugin: plugin, Code: code.String(), Reasons: reasons})
			if code != fwk.Success && code != fwk.Skip {
				ok = false
			}
		}
		for _, n := range filterNames {
			pf, hasPF := preFilter[n]
			switch {
			case hasPF && pf.status.IsSkip():
				add(n, fwk.NewStatus(fwk.Skip))
			case hasPF && !pf.status.IsSuccess():
				// rejected in PreFilter: that status stands for every node
				add(n, pf.status)
			default:
				s := inst[n].(fwk.FilterPlugin).Filter(ctx, state, pod, ni)
				if s.IsSuccess() && hasPF && !pf.result.AllNodes() && !pf.result.NodeNames.Has(nodeName) {
					s = fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("node(s) didn't satisfy plugin(s) %v", []string{n}))
				}
				add(n, s)
			}
		}
		// PreFilter-only plugins that rejected the pod
		for _, n := range preFilterNames {
			if pf := preFilter[n]; !isFilter.Has(n) && !pf.status.IsSuccess() && !pf.status.IsSkip() {
				add(n, pf.status)
			}
		}
		nr.Feasible = ok
		if ok {
			feasible = append(feasible, ni)
		}
		res.Nodes = append(res.Nodes, nr)
	}

	// ---- Scoring on all feasible nodes (even one), via the real framework.
	if len(feasible) > 0 {
		if s := profile.RunPreScorePlugins(ctx, state, pod, feasible); !s.IsSuccess() {
			return nil, fmt.Errorf("PreScore: %w", s.AsError())
		}
		scores := make([]fwk.NodePluginScores, len(feasible))
		for i, ni := range feasible {
			raw, s := profile.RunRawScorePlugins(ctx, state, pod, ni)
			if !s.IsSuccess() {
				return nil, fmt.Errorf("Score on %s: %w", ni.Node().Name, s.AsError())
			}
			scores[i] = fwk.NodePluginScores{Name: ni.Node().Name, RawScores: raw}
		}
		if s := profile.NormalizeScores(ctx, state, pod, scores); !s.IsSuccess() {
			return nil, fmt.Errorf("NormalizeScore: %w", s.AsError())
		}
		byName := map[string]*NodeResult{}
		for i := range res.Nodes {
			byName[res.Nodes[i].Name] = &res.Nodes[i]
		}
		var best int64 = -1
		for _, sc := range scores {
			nr := byName[sc.Name]
			for i, r := range sc.RawScores {
				w := weights[r.Name]
				weighted := sc.Scores[i].Score
				if sc.Scores[i].Name != r.Name {
					return nil, fmt.Errorf("internal: score order mismatch %s/%s", sc.Scores[i].Name, r.Name)
				}
				normalized := weighted
				if w != 0 {
					normalized = weighted / w
				}
				nr.Scores = append(nr.Scores, ScoreResult{Plugin: r.Name, Raw: r.Score, Normalized: normalized, Weight: w, Weighted: weighted})
			}
			nr.Total = sc.TotalScore
			if sc.TotalScore > best {
				best = sc.TotalScore
			}
		}
		for _, nr := range res.Nodes { // already sorted by name
			if nr.Feasible && nr.Total == best {
				res.TopNodes = append(res.TopNodes, nr.Name)
			}
		}
		sel := res.TopNodes[0]
		res.SelectedNode = &sel
	}

	// ---- Upstream's own scheduling algorithm for the message (and as a
	// cross-check): Scheduler.SchedulePod, then PostFilter as
	// schedulingAlgorithm() in schedule_one.go does.
	ustate := framework.NewCycleState()
	pi, err := framework.NewPodInfo(pod)
	if err != nil {
		return nil, err
	}
	qpi := &framework.QueuedPodInfo{PodInfo: pi, PodSignature: profile.SignPod(ctx, pod)}
	result, serr := e.sched.SchedulePod(ctx, profile, ustate, qpi)
	var fitErr *framework.FitError
	switch {
	case serr == nil:
		if len(feasible) == 0 {
			warnf("upstream found node %q feasible, the per-plugin run found none", result.SuggestedHost)
		}
	case errors.Is(serr, scheduler.ErrNoNodesAvailable):
		res.Message = serr.Error()
	case errors.As(serr, &fitErr):
		if profile.HasPostFilterPlugins() {
			_, s := profile.RunPostFilterPlugins(ctx, ustate, pod, fitErr.Diagnosis.NodeToStatus)
			fitErr.Diagnosis.PostFilterMsg = s.Message()
		}
		res.Message = fitErr.Error()
		if len(feasible) > 0 {
			warnf("the per-plugin run found %d feasible node(s), upstream found none: %s", len(feasible), res.Message)
		}
		// cross-check: upstream's first failing plugin per node
		for _, nr := range res.Nodes {
			s := fitErr.Diagnosis.NodeToStatus.Get(nr.Name)
			first := ""
			for _, f := range nr.Filters {
				if f.Code != fwk.Success.String() && f.Code != fwk.Skip.String() {
					first = f.Plugin
					break
				}
			}
			if s.Plugin() != "" && first != "" && s.Plugin() != first && fitErr.Diagnosis.PreFilterMsg == "" {
				warnf("node %s: upstream stopped at %s, the per-plugin run's first failure is %s", nr.Name, s.Plugin(), first)
			}
		}
	default:
		// An internal plugin error ends upstream's cycle: no node, no
		// FailedScheduling message; the error is reported instead.
		res.Error = serr.Error()
		res.SelectedNode = nil
		res.TopNodes = []string{}
	}
	if res.Message != "" && len(feasible) > 0 {
		// keep the documented invariant: message only when nothing is feasible
		res.Message = ""
	}
	return res, nil
}

// frameworkPluginInstances returns the plugin instances of a framework made
// by upstream's frameworkruntime.NewFramework. There is no exported accessor,
// so the unexported field pluginsMap (name -> fwk.Plugin) is read by
// reflection; upstream code is unchanged. Fails loudly if upstream renames it.
func frameworkPluginInstances(f framework.Framework) (map[string]fwk.Plugin, error) {
	v := reflect.ValueOf(f)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("internal: unexpected framework type %T", f)
	}
	fv := v.Elem().FieldByName("pluginsMap")
	if !fv.IsValid() {
		return nil, fmt.Errorf("internal: %T has no field pluginsMap (upstream changed; update hack/k8s/cmd/oracle)", f)
	}
	fv = reflect.NewAt(fv.Type(), unsafe.Pointer(fv.UnsafeAddr())).Elem()
	m, ok := fv.Interface().(map[string]fwk.Plugin)
	if !ok {
		return nil, fmt.Errorf("internal: %T.pluginsMap has type %v", f, fv.Type())
	}
	return m, nil
}

func warnf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "oracle: warning: "+format+"\n", args...)
}

// ---------------------------------------------------------------- plugins

type PluginRef struct {
	Name   string `json:"name"`
	Weight int32  `json:"weight,omitempty"`
}

type ProfilePlugins struct {
	Profile      string                     `json:"profile"`
	Plugins      map[string][]PluginRef     `json:"plugins"`
	PluginConfig map[string]json.RawMessage `json:"pluginConfig"`
}

func listPlugins(ctx context.Context, configFile string) ([]ProfilePlugins, error) {
	cfg, err := loadConfig(configFile)
	if err != nil {
		return nil, err
	}
	e, err := newEnv(ctx, cfg, nil)
	if err != nil {
		return nil, err
	}
	var v1cfg configv1.KubeSchedulerConfiguration
	if err := scheme.Scheme.Convert(cfg, &v1cfg, nil); err != nil {
		return nil, err
	}
	var out []ProfilePlugins
	for i, prof := range cfg.Profiles {
		f := e.sched.Profiles[prof.SchedulerName]
		pp := ProfilePlugins{Profile: prof.SchedulerName, Plugins: map[string][]PluginRef{}, PluginConfig: map[string]json.RawMessage{}}
		lp := reflect.ValueOf(*f.ListPlugins())
		for j := 0; j < lp.NumField(); j++ {
			set := lp.Field(j).Interface().(config.PluginSet)
			if len(set.Enabled) == 0 {
				continue
			}
			refs := []PluginRef{}
			for _, p := range set.Enabled {
				refs = append(refs, PluginRef{Name: p.Name, Weight: p.Weight})
			}
			pp.Plugins[lp.Type().Field(j).Name] = refs
		}
		for _, pc := range v1cfg.Profiles[i].PluginConfig {
			var b []byte
			if pc.Args.Raw != nil {
				b = pc.Args.Raw
			} else if pc.Args.Object != nil {
				if b, err = json.Marshal(pc.Args.Object); err != nil {
					return nil, err
				}
			}
			pp.PluginConfig[pc.Name] = b
		}
		out = append(out, pp)
	}
	return out, nil
}
