// Command oracle runs upstream kube-scheduler's own framework, plugins and
// configuration code (unchanged, linked from k8s.io/kubernetes) over a
// cluster described in a file, and explains the decision for one pod as
// JSON. It is the reference that rkube's scheduler is compared against.
// The exact semantics are documented in hack/README.md.
//
//	oracle explain --cluster PATH --pod NS/NAME [--config FILE] [--compact] [--raw] [--feature-gates K=V,...] [--v N]
//	oracle plugins [--config FILE] [--feature-gates ...]   # expanded plugin lists per profile
//	oracle simulate --cluster PATH [--config FILE] [--latencies] [--placements] [--timeout D]   # benchmark harness (hack/bench), sequences (hack/conformance --sequence)
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"
)

func usage(w io.Writer) {
	fmt.Fprint(w, `usage:
  oracle explain --cluster PATH --pod NS/NAME [--config FILE] [--compact] [--raw]
                 [--feature-gates K=V,...] [--v N]
  oracle plugins [--config FILE] [--feature-gates K=V,...]
  oracle simulate --cluster PATH [--config FILE] [--latencies] [--placements] [--timeout D]
                  [--cpuprofile FILE] [--feature-gates K=V,...]

explain   prints the scheduling explanation of one pod as JSON (see hack/README.md)
plugins   prints, per profile, the plugins of each extension point (after
          upstream's defaulting and multiPoint expansion) and their args
simulate  schedules every pending pod with upstream's own ScheduleOne loop and
          prints {"scheduled","unschedulable","seconds","podsPerSecond",
          "latencyP50Ms","latencyP99Ms","peakRssBytes",...} (hack/bench)
--raw     do not apply API defaulting / admission emulation to the objects
`)
}

func main() {
	if len(os.Args) < 2 {
		usage(os.Stderr)
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	fs := flag.NewFlagSet("oracle "+cmd, flag.ExitOnError)
	fs.SetOutput(os.Stderr)
	fs.Usage = func() { usage(os.Stderr) }
	cluster := fs.String("cluster", "", "cluster file or directory")
	podRef := fs.String("pod", "", "pod to explain, NS/NAME (or NAME in namespace default)")
	configFile := fs.String("config", "", "KubeSchedulerConfiguration file (default: upstream's default configuration)")
	compact := fs.Bool("compact", false, "print JSON on one line")
	raw := fs.Bool("raw", false, "no API defaulting / admission emulation")
	gates := fs.String("feature-gates", "", "feature gates, as for kube-scheduler")
	latencies := fs.Bool("latencies", false, "simulate: include every attempt's latency (ms)")
	timeout := fs.Duration("timeout", 10*time.Minute, "simulate: give up after this long")
	cpuProfile := fs.String("cpuprofile", "", "simulate: write a Go CPU profile of the timed loop to this file")
	placements := fs.Bool("placements", false, "simulate: list every pending pod's first outcome (node, or \"\" when it failed) in order, and how many pods OpportunisticBatching placed")
	klogFlags := flag.NewFlagSet("klog", flag.ExitOnError)
	klog.InitFlags(klogFlags)
	fs.Func("v", "log verbosity (stderr)", func(s string) error { return klogFlags.Set("v", s) })
	_ = klogFlags.Set("logtostderr", "true")

	switch cmd {
	case "explain", "plugins", "simulate":
	case "-h", "--help", "help":
		usage(os.Stdout)
		return
	default:
		fmt.Fprintf(os.Stderr, "oracle: unknown command %q\n", cmd)
		usage(os.Stderr)
		os.Exit(2)
	}
	if err := fs.Parse(args); err != nil {
		os.Exit(2)
	}
	if fs.NArg() > 0 {
		fail("unexpected arguments: %v", fs.Args())
	}
	if *gates != "" {
		if err := utilfeature.DefaultMutableFeatureGate.Set(*gates); err != nil {
			fail("--feature-gates: %v", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var out any
	var err error
	switch cmd {
	case "explain":
		if *cluster == "" || *podRef == "" {
			fail("explain needs --cluster and --pod")
		}
		ns, name := "default", *podRef
		if i := strings.Index(*podRef, "/"); i >= 0 {
			ns, name = (*podRef)[:i], (*podRef)[i+1:]
		}
		out, err = explain(ctx, explainOptions{
			clusterPath: *cluster, namespace: ns, name: name,
			configFile: *configFile, defaults: !*raw,
		})
	case "plugins":
		out, err = listPlugins(ctx, *configFile)
	case "simulate":
		if *cluster == "" {
			fail("simulate needs --cluster")
		}
		*compact = true
		out, err = simulate(ctx, simulateOptions{
			clusterPath: *cluster, configFile: *configFile, defaults: !*raw,
			latencies: *latencies, timeout: *timeout, cpuProfile: *cpuProfile,
			placements: *placements,
		})
	}
	if err != nil {
		fail("%v", err)
	}
	var b []byte
	if *compact {
		b, err = json.Marshal(out)
	} else {
		b, err = json.MarshalIndent(out, "", "  ")
	}
	if err != nil {
		fail("%v", err)
	}
	os.Stdout.Write(append(b, '\n'))
	cancel()
	klog.Flush()
}

func fail(format string, args ...any) {
	klog.Flush()
	fmt.Fprintf(os.Stderr, "oracle: error: "+format+"\n", args...)
	os.Exit(1)
}
