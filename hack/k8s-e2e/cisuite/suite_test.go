// Package cisuite builds upstream's e2e harness with only the specs CI's
// default tier runs into a small test binary: the [DRA] specs
// (k8s.io/kubernetes/test/e2e/dra) and test/e2e/common (common/node,
// common/storage, common/network: every [NodeConformance] spec). hack/e2e
// --suite ci uses it, so the default tier runs those specs without
// compiling every other suite of e2e.test. The harness itself (suite
// setup, flags, reports) is upstream's, from k8s.io/kubernetes/test/e2e.
package cisuite

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"k8s.io/kubernetes/test/e2e"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	"k8s.io/kubernetes/test/e2e/framework/testfiles"
	e2etestingmanifests "k8s.io/kubernetes/test/e2e/testing-manifests"
	testfixtures "k8s.io/kubernetes/test/fixtures"

	_ "k8s.io/kubernetes/test/e2e/common"
	_ "k8s.io/kubernetes/test/e2e/dra"
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/metrics/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
)

func TestMain(m *testing.M) {
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "unexpected arguments: %v\n", flag.Args())
		os.Exit(1)
	}
	testfiles.AddFileSource(e2etestingmanifests.GetE2ETestingManifestsFS())
	testfiles.AddFileSource(testfixtures.GetTestFixturesFS())
	framework.AfterReadingAllFlags(&framework.TestContext)
	os.Exit(m.Run())
}

func TestCI(t *testing.T) {
	e2e.RunE2ETests(t)
}
