//go:build tools

// Package node pins the main packages of the real node (controlplane/node/build.sh):
// the kubelet and kube-proxy from the same Kubernetes release as ../go.mod
// (containerd is in containerd/, a module of its own). Never built into anything
// itself (the build tag keeps it out of every normal build).
package node

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
