//go:build tools

// The CSI sidecars the storage tests run beside hack/csi's driver, built
// from the Go module proxy (their images cannot be pulled here).
package tools

import (
	_ "github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher"
	_ "github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner"
)
