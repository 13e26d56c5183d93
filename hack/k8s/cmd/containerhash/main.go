// Command containerhash prints upstream's container hash
// (k8s.io/kubernetes/pkg/kubelet/container.HashContainer, the
// io.kubernetes.container.hash annotation in hex) of each container spec
// read from stdin, one JSON object a line, as `{"container": ..., "hash":
// "..."}` lines; hack/gen-container-hashes turns them into rkube's test
// table.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strconv"

	v1 "k8s.io/api/core/v1"
	kubecontainer "k8s.io/kubernetes/pkg/kubelet/container"
)

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var raw json.RawMessage = append([]byte(nil), in.Bytes()...)
		var c v1.Container
		if err := json.Unmarshal(raw, &c); err != nil {
			fmt.Fprintln(os.Stderr, "containerhash:", err)
			os.Exit(1)
		}
		hash := strconv.FormatUint(kubecontainer.HashContainer(&c), 16)
		if err := out.Encode(map[string]any{"container": raw, "hash": hash}); err != nil {
			fmt.Fprintln(os.Stderr, "containerhash:", err)
			os.Exit(1)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "containerhash:", err)
		os.Exit(1)
	}
}
