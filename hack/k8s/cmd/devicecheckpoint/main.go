// Command devicecheckpoint prints upstream's device manager checkpoint (the
// kubelet_internal_checkpoint file of the device-plugins directory, written
// by k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/checkpoint) for each
// case read from stdin, one JSON object a line:
//
//	{"entries": [{"PodUID": ..., "ContainerName": ..., "ResourceName": ...,
//	  "DeviceIDs": {"-1": [...]}, "AllocResp": <ContainerAllocateResponse
//	  in protojson>}], "registered": {"RESOURCE": [...]}}
//
// as `{"case": ..., "checkpoint": "..."}` lines. An allocation response is
// marshalled as the device manager marshals it (proto.Marshal) with
// deterministic map order; hack/gen-device-checkpoints turns the lines into
// rkube's test table.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/checkpoint"
)

type entry struct {
	PodUID        string
	ContainerName string
	ResourceName  string
	DeviceIDs     checkpoint.DevicesPerNUMA
	AllocResp     json.RawMessage
}

type input struct {
	Entries    []entry             `json:"entries"`
	Registered map[string][]string `json:"registered"`
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "devicecheckpoint:", err)
	os.Exit(1)
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var raw json.RawMessage = append([]byte(nil), in.Bytes()...)
		var c input
		if err := json.Unmarshal(raw, &c); err != nil {
			fail(err)
		}
		var entries []checkpoint.PodDevicesEntry
		for _, e := range c.Entries {
			resp := &pluginapi.ContainerAllocateResponse{}
			if err := protojson.Unmarshal(e.AllocResp, resp); err != nil {
				fail(err)
			}
			blob, err := proto.MarshalOptions{Deterministic: true}.Marshal(resp)
			if err != nil {
				fail(err)
			}
			entries = append(entries, checkpoint.PodDevicesEntry{
				PodUID:        e.PodUID,
				ContainerName: e.ContainerName,
				ResourceName:  e.ResourceName,
				DeviceIDs:     e.DeviceIDs,
				AllocResp:     blob,
			})
		}
		blob, err := checkpoint.New(entries, c.Registered).MarshalCheckpoint()
		if err != nil {
			fail(err)
		}
		if err := out.Encode(map[string]any{"case": raw, "checkpoint": string(blob)}); err != nil {
			fail(err)
		}
	}
	if err := in.Err(); err != nil {
		fail(err)
	}
}
