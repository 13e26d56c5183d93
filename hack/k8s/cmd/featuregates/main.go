// featuregates prints the feature gates a v1.37 kubelet knows, as it
// registers them (Kubernetes', the API server library's, client-go's and
// the logging ones), each with its default, stage and whether it is locked
// to its default, at the binary's own version: one line per gate,
// "Name<TAB>default<TAB>stage<TAB>locked", sorted. hack/gen-feature-gates
// turns it into crates/util/src/feature_gates/generated.rs.
package main

import (
	"fmt"
	"os"
	"sort"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/featuregate"
	_ "k8s.io/kubernetes/pkg/features"
)

func featureName(s string) featuregate.Feature { return featuregate.Feature(s) }

func main() {
	gate := utilfeature.DefaultMutableFeatureGate
	if err := logsapi.AddFeatureGates(gate); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	all := gate.GetAll()
	names := make([]string, 0, len(all))
	for name := range all {
		names = append(names, string(name))
	}
	sort.Strings(names)
	for _, name := range names {
		spec := all[featureName(name)]
		stage := string(spec.PreRelease)
		if stage == "" {
			stage = "GA"
		}
		fmt.Printf("%s\t%t\t%s\t%t\n", name, spec.Default, stage, spec.LockToDefault)
	}
}
