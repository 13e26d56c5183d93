//go:build tools

// Package tools pins upstream's sample API server (k8s.io/sample-apiserver,
// the version matching KUBERNETES_VERSION), which hack/e2e-images builds
// into the image of the suite's aggregator specs.
package tools

import _ "k8s.io/sample-apiserver"
