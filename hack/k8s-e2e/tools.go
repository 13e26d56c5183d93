//go:build tools

// Package tools pins upstream's e2e suite, which hack/e2e builds into
// e2e.test with `go test -c`, and the programs hack/e2e-images builds into
// the suite's images, so that `go mod tidy` keeps them (and their
// dependencies) in go.mod. A module of its own so that hack/k8s's go.sum,
// and with it the cache key of the control-plane binaries, stays as it is.
// This file is never compiled.
package tools

import (
	_ "k8s.io/kubernetes/test/e2e"
	// ginkgo's CLI, which runs e2e.test in parallel processes.
	_ "github.com/onsi/ginkgo/v2/ginkgo"
	// Programs hack/e2e-images builds into the suite's images.
	_ "k8s.io/kubernetes/test/images/agnhost"
	_ "k8s.io/kubernetes/test/images/nonewprivs"
)
