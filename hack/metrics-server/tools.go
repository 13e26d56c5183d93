//go:build tools

// Package tools pins metrics-server (sigs.k8s.io/metrics-server, the version
// in go.mod, whose own go.mod picks every dependency: it is this module's only
// requirement), so that `go mod tidy` keeps it and its dependencies in
// go.mod. hack/cluster builds sigs.k8s.io/metrics-server/cmd/metrics-server
// from here into the image of the cluster's metrics add-on. This file is
// never compiled.
package tools

import _ "sigs.k8s.io/metrics-server/cmd/metrics-server"
