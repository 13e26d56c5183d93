//go:build tools

// Package tools pins containerd 2 (the daemon and its runc shim), built by
// hack/containerd2-build for the tests that need CDI (Container Device
// Interface) injection, which the containerd hack/containerd installs from
// Debian (1.6) lacks. This file is never compiled.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
)
