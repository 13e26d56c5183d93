//go:build tools

// Package tools pins the upstream main packages that hack/build-k8s builds,
// so that `go mod tidy` keeps them (and all their dependencies) in go.mod.
// This file is never compiled.
package tools

import (
	_ "go.etcd.io/etcd/server/v3" // etcd server binary (package main of that module)
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
