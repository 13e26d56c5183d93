package main

// Loading a "cluster file": YAML (multi-document) or JSON, single objects or
// `kind: List`, a file or a directory of *.yaml/*.yml/*.json files. Objects
// are decoded with upstream's scheme, defaulted with upstream's API defaulting
// functions (as the apiserver would on create) and, for pods, run through an
// emulation of the two default-on admission plugins that change scheduling
// inputs (Priority, DefaultTolerationSeconds).

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/uuid"
	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	schedulingapiv1 "k8s.io/kubernetes/pkg/apis/scheduling/v1"
	"k8s.io/kubernetes/pkg/features"
	"sigs.k8s.io/yaml"

	// Register the API groups (types + defaulting funcs) in legacyscheme.
	_ "k8s.io/kubernetes/pkg/apis/apps/install"
	_ "k8s.io/kubernetes/pkg/apis/batch/install"
	_ "k8s.io/kubernetes/pkg/apis/core/install"
	_ "k8s.io/kubernetes/pkg/apis/policy/install"
	_ "k8s.io/kubernetes/pkg/apis/resource/install"
	_ "k8s.io/kubernetes/pkg/apis/scheduling/install"
	_ "k8s.io/kubernetes/pkg/apis/storage/install"
)

// Kinds that are cluster-scoped (everything else gets namespace "default"
// when it has none).
var clusterScoped = map[string]bool{
	"Node": true, "Namespace": true, "PersistentVolume": true, "StorageClass": true,
	"CSINode": true, "CSIDriver": true, "PriorityClass": true, "VolumeAttachment": true,
	"DeviceClass": true, "ResourceSlice": true, "DeviceTaintRule": true, "VolumeAttributesClass": true,
}

type loadOptions struct {
	defaults bool // API defaulting + admission emulation
	warnings io.Writer
}

// loadCluster returns all objects found under path.
func loadCluster(path string, opts loadOptions) ([]runtime.Object, error) {
	files, err := clusterFiles(path)
	if err != nil {
		return nil, err
	}
	var objs []runtime.Object
	for _, f := range files {
		o, err := loadFile(f, opts)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		objs = append(objs, o...)
	}
	if err := finishObjects(&objs, opts); err != nil {
		return nil, err
	}
	return objs, nil
}

func clusterFiles(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return []string{path}, nil
	}
	var files []string
	err = filepath.WalkDir(path, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		switch strings.ToLower(filepath.Ext(p)) {
		case ".yaml", ".yml", ".json":
			files = append(files, p)
		}
		return nil
	})
	sort.Strings(files)
	return files, err
}

func loadFile(file string, opts loadOptions) ([]runtime.Object, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	// apimachinery's YAMLReader drops a last line that has no newline and
	// ends exactly at its 4096-byte buffer's boundary (the line comes back
	// with io.EOF and is discarded): a one-line JSON file of 20480 bytes
	// read as empty. Terminate the last line.
	if len(data) > 0 && data[len(data)-1] != '\n' {
		data = append(data, '\n')
	}
	var objs []runtime.Object
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for doc := 1; ; doc++ {
		raw, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		jsonData, err := yaml.YAMLToJSON(raw)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		if t := bytes.TrimSpace(jsonData); len(t) == 0 || bytes.Equal(t, []byte("null")) {
			continue // empty document
		}
		o, err := decodeObject(jsonData, opts)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		objs = append(objs, o...)
	}
	return objs, nil
}

func decodeObject(data []byte, opts loadOptions) ([]runtime.Object, error) {
	obj, gvk, err := legacyscheme.Codecs.UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		if runtime.IsNotRegisteredError(err) {
			fmt.Fprintf(opts.warnings, "oracle: warning: skipping object of unknown kind: %v\n", err)
			return nil, nil
		}
		return nil, err
	}
	if meta.IsListType(obj) {
		items, err := meta.ExtractList(obj)
		if err != nil {
			return nil, err
		}
		var out []runtime.Object
		for i, it := range items {
			var raw []byte
			if u, ok := it.(*runtime.Unknown); ok {
				raw = u.Raw
			} else {
				// already decoded (typed list)
				out = append(out, it)
				continue
			}
			o, err := decodeObject(raw, opts)
			if err != nil {
				return nil, fmt.Errorf("%s item %d: %w", gvk.Kind, i, err)
			}
			out = append(out, o...)
		}
		return out, nil
	}
	// keep TypeMeta so that kinds can be told apart later
	obj.GetObjectKind().SetGroupVersionKind(*gvk)
	return []runtime.Object{obj}, nil
}

func kindOf(o runtime.Object) string { return o.GetObjectKind().GroupVersionKind().Kind }

func deterministicUID(kind, ns, name string) types.UID {
	return types.UID(uuid.NewHash(sha1.New(), uuid.NameSpaceOID, []byte(kind+"/"+ns+"/"+name), 5).String())
}

// finishObjects fills in namespaces and UIDs, defaults every object, adds
// missing namespaces and the system priority classes (which an apiserver
// always has), and emulates pod admission.
func finishObjects(objs *[]runtime.Object, opts loadOptions) error {
	namespaces := map[string]bool{}
	priorityClasses := map[string]*schedulingv1.PriorityClass{}
	for _, o := range *objs {
		m, err := meta.Accessor(o)
		if err != nil {
			return err
		}
		kind := kindOf(o)
		if clusterScoped[kind] {
			m.SetNamespace("")
		} else if m.GetNamespace() == "" {
			m.SetNamespace(metav1.NamespaceDefault)
		}
		if m.GetName() == "" {
			return fmt.Errorf("a %s has no metadata.name", kind)
		}
		if m.GetUID() == "" {
			m.SetUID(deterministicUID(kind, m.GetNamespace(), m.GetName()))
		}
		if opts.defaults {
			gvk := o.GetObjectKind().GroupVersionKind()
			legacyscheme.Scheme.Default(o)
			o.GetObjectKind().SetGroupVersionKind(gvk)
		}
		switch t := o.(type) {
		case *v1.Namespace:
			namespaces[t.Name] = true
		case *schedulingv1.PriorityClass:
			priorityClasses[t.Name] = t
		}
	}
	if !opts.defaults {
		return nil
	}
	// The apiserver bootstraps these.
	for _, pc := range schedulingapiv1.SystemPriorityClasses() {
		if _, ok := priorityClasses[pc.Name]; !ok {
			pc.SetGroupVersionKind(schedulingv1.SchemeGroupVersion.WithKind("PriorityClass"))
			pc.UID = deterministicUID("PriorityClass", "", pc.Name)
			legacyscheme.Scheme.Default(pc)
			priorityClasses[pc.Name] = pc
			*objs = append(*objs, pc)
		}
	}
	nsNames := map[string]bool{metav1.NamespaceDefault: true, metav1.NamespaceSystem: true, metav1.NamespacePublic: true, v1.NamespaceNodeLease: true}
	for _, o := range *objs {
		if m, _ := meta.Accessor(o); m.GetNamespace() != "" {
			nsNames[m.GetNamespace()] = true
		}
	}
	var missing []string
	for ns := range nsNames {
		if !namespaces[ns] {
			missing = append(missing, ns)
		}
	}
	sort.Strings(missing)
	for _, ns := range missing {
		n := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, UID: deterministicUID("Namespace", "", ns)}}
		n.SetGroupVersionKind(v1.SchemeGroupVersion.WithKind("Namespace"))
		legacyscheme.Scheme.Default(n)
		n.SetGroupVersionKind(v1.SchemeGroupVersion.WithKind("Namespace"))
		*objs = append(*objs, n)
	}
	for _, o := range *objs {
		switch t := o.(type) {
		case *v1.Pod:
			if err := admitPod(t, priorityClasses); err != nil {
				return fmt.Errorf("pod %s/%s: %w", t.Namespace, t.Name, err)
			}
		case *schedulingv1beta1.PodGroup:
			if err := admitPodGroup(t, priorityClasses); err != nil {
				return fmt.Errorf("podgroup %s/%s: %w", t.Namespace, t.Name, err)
			}
		}
	}
	return nil
}

// admitPod emulates the Priority and DefaultTolerationSeconds admission
// plugins (both on by default) for pod creation.
func admitPod(pod *v1.Pod, pcs map[string]*schedulingv1.PriorityClass) error {
	// Priority (plugin/pkg/admission/priority).
	pcName, priority, policy, err := establishPriority(pod.Spec.PriorityClassName, pcs)
	if err != nil {
		return err
	}
	if pod.Spec.Priority != nil && *pod.Spec.Priority != priority {
		return fmt.Errorf("the integer value of priority (%d) must not be provided in pod spec; priority admission controller computed %d from the given PriorityClass name", *pod.Spec.Priority, priority)
	}
	pod.Spec.PriorityClassName = pcName
	pod.Spec.Priority = &priority
	if policy != nil {
		if pod.Spec.PreemptionPolicy != nil && *pod.Spec.PreemptionPolicy != *policy {
			return fmt.Errorf("the string value of PreemptionPolicy (%s) must not be provided in pod spec; priority admission controller computed %s from the given PriorityClass name", *pod.Spec.PreemptionPolicy, *policy)
		}
		p := *policy
		pod.Spec.PreemptionPolicy = &p
	}

	// DefaultTolerationSeconds (plugin/pkg/admission/defaulttolerationseconds).
	notReady, unreachable := false, false
	for _, t := range pod.Spec.Tolerations {
		if (t.Key == v1.TaintNodeNotReady || t.Key == "") && (t.Effect == v1.TaintEffectNoExecute || t.Effect == "") {
			notReady = true
		}
		if (t.Key == v1.TaintNodeUnreachable || t.Key == "") && (t.Effect == v1.TaintEffectNoExecute || t.Effect == "") {
			unreachable = true
		}
	}
	secs := int64(300)
	if !notReady {
		s := secs
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, v1.Toleration{Key: v1.TaintNodeNotReady, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: &s})
	}
	if !unreachable {
		s := secs
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, v1.Toleration{Key: v1.TaintNodeUnreachable, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: &s})
	}
	return nil
}

// establishPriority resolves a priority class name as the Priority
// admission plugin does: the named class, else the global default with the
// lowest value, else priority 0 and PreemptLowerPriority.
func establishPriority(className string, pcs map[string]*schedulingv1.PriorityClass) (string, int32, *v1.PreemptionPolicy, error) {
	var pcName string
	var priority int32
	var policy *v1.PreemptionPolicy
	if className == "" {
		var def *schedulingv1.PriorityClass
		names := make([]string, 0, len(pcs))
		for n := range pcs {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			if pc := pcs[n]; pc.GlobalDefault && (def == nil || def.Value > pc.Value) {
				def = pc
			}
		}
		if def != nil {
			pcName, priority, policy = def.Name, def.Value, def.PreemptionPolicy
		} else {
			lower := v1.PreemptLowerPriority
			policy = &lower
		}
	} else {
		pc, ok := pcs[className]
		if !ok {
			return "", 0, nil, fmt.Errorf("no PriorityClass with name %s was found", className)
		}
		pcName, priority, policy = pc.Name, pc.Value, pc.PreemptionPolicy
	}
	return pcName, priority, policy, nil
}

// admitPodGroup emulates the Priority admission plugin for a PodGroup
// (GenericWorkload on): spec.priority from its class. PodGroupPreemptionPolicy
// is alpha and off, so spec.preemptionPolicy is left as it is.
func admitPodGroup(pg *schedulingv1beta1.PodGroup, pcs map[string]*schedulingv1.PriorityClass) error {
	if !utilfeature.DefaultFeatureGate.Enabled(features.GenericWorkload) {
		return nil
	}
	pcName, priority, _, err := establishPriority(pg.Spec.PriorityClassName, pcs)
	if err != nil {
		return err
	}
	if pg.Spec.Priority != nil && *pg.Spec.Priority != priority {
		return fmt.Errorf("priority set in the pod group (%d) must match the priority computed (%d) based on the priority class set in the spec", *pg.Spec.Priority, priority)
	}
	pg.Spec.Priority = &priority
	pg.Spec.PriorityClassName = pcName
	return nil
}
