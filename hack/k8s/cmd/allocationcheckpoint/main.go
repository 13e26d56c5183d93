// Command allocationcheckpoint prints upstream's allocation checkpoint
// (the allocated_pods_state and actuated_pods_state files of
// k8s.io/kubernetes/pkg/kubelet/allocation/state, with what
// allocation.ResourceInfoForPod records of each pod) for each list of pods
// read from stdin, one JSON array a line, as `{"pods": ..., "checkpoint":
// "..."}` lines; hack/gen-allocation-checkpoints turns them into rkube's
// test table.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/kubelet/allocation"
	"k8s.io/kubernetes/pkg/kubelet/allocation/state"
)

func fail(err error) {
	fmt.Fprintln(os.Stderr, "allocationcheckpoint:", err)
	os.Exit(1)
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var raw json.RawMessage = append([]byte(nil), in.Bytes()...)
		var pods []v1.Pod
		if err := json.Unmarshal(raw, &pods); err != nil {
			fail(err)
		}
		entries := state.PodResourceInfoMap{}
		for i := range pods {
			entries[pods[i].UID] = allocation.ResourceInfoForPod(&pods[i])
		}
		cp, err := state.NewCheckpoint(&state.PodResourceCheckpointInfo{Entries: entries})
		if err != nil {
			fail(err)
		}
		blob, err := cp.MarshalCheckpoint()
		if err != nil {
			fail(err)
		}
		if err := out.Encode(map[string]any{"pods": raw, "checkpoint": string(blob)}); err != nil {
			fail(err)
		}
	}
	if err := in.Err(); err != nil {
		fail(err)
	}
}
