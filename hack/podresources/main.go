// Command podresources calls the kubelet's pod-resources API v1 (the gRPC
// service on <root-dir>/pod-resources/kubelet.sock) through the client
// generated in k8s.io/kubelet, as monitoring agents do, and prints the
// answer as JSON (protobuf's JSON mapping: camelCase field names, empty
// fields left out).
//
//	podresources [--socket PATH] list
//	podresources [--socket PATH] get NAMESPACE NAME
//	podresources [--socket PATH] allocatable
//
// Exit codes: 0 success, 1 the call failed (the gRPC code and message are
// printed), 2 usage.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

const usage = `usage: podresources [--socket PATH] [--timeout D] list | get NAMESPACE NAME | allocatable`

func main() {
	socket := flag.String("socket", "/var/lib/kubelet/pod-resources/kubelet.sock", "the pod-resources socket")
	timeout := flag.Duration("timeout", 10*time.Second, "deadline of the call")
	flag.Usage = func() { fmt.Fprintln(os.Stderr, usage); flag.PrintDefaults() }
	flag.Parse()
	args := flag.Args()
	if len(args) == 0 {
		flag.Usage()
		os.Exit(2)
	}

	// The kubelet's own client (pkg/kubelet/apis/podresources.GetV1Client)
	// dials the same way: plaintext gRPC over the Unix socket.
	conn, err := grpc.NewClient("unix://"+*socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
	defer conn.Close()
	client := podresourcesv1.NewPodResourcesListerClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	var resp proto.Message
	switch {
	case args[0] == "list" && len(args) == 1:
		resp, err = client.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	case args[0] == "get" && len(args) == 3:
		resp, err = client.Get(ctx, &podresourcesv1.GetPodResourcesRequest{PodNamespace: args[1], PodName: args[2]})
	case args[0] == "allocatable" && len(args) == 1:
		resp, err = client.GetAllocatableResources(ctx, &podresourcesv1.AllocatableResourcesRequest{})
	default:
		flag.Usage()
		os.Exit(2)
	}
	if err != nil {
		s := status.Convert(err)
		fmt.Fprintf(os.Stderr, "error: %s: %s\n", s.Code(), s.Message())
		os.Exit(1)
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
	// protojson varies its whitespace on purpose; print it normalised.
	var compact, pretty bytes.Buffer
	if err := json.Compact(&compact, out); err == nil && json.Indent(&pretty, compact.Bytes(), "", "  ") == nil {
		out = pretty.Bytes()
	}
	fmt.Println(string(out))
}
