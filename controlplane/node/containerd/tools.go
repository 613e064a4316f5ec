//go:build tools

// Package containerd pins containerd's main packages for ../build.sh. Its own
// module: containerd v2.4 is written against the CRI API of Kubernetes 1.37
// (runtime.Signal_*), which the 1.36 staging replaces of ../go.mod would pin
// back. The kubelet 1.36 speaks CRI v1 to it all the same.
package containerd

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
