//go:build tools

// Package tools pins upstream's node programs that hack/cluster runs beside
// rkube's kubelet (kube-proxy) or instead of it (kubelet), so that `go mod
// tidy` keeps them and their dependencies in go.mod. A module of its own, so
// that the cache keys of the control plane (hack/k8s) and of the e2e suite
// (hack/k8s-e2e) stay as they are. This file is never compiled.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kubeadm"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kubelet"
	// Upstream's DRA test driver (its kubelet plugin runs beside a node).
	_ "k8s.io/kubernetes/test/e2e/dra/test-driver"
)
