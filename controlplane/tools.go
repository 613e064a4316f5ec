//go:build tools

// Package controlplane pins the main packages that build.sh compiles, so that
// `go mod tidy` keeps their dependencies in go.mod and go.sum. It is never built
// into anything itself (the build tag keeps it out of every normal build).
//
// The KubeRay operator lives in its own module (kuberay/): v1.6.0 is written
// against controller-runtime v0.22 and does not compile against the v0.24 that
// Kueue v0.19 brings in here (ctrl.NewWebhookManagedBy gained a type argument).
package controlplane

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"

	_ "sigs.k8s.io/kueue/cmd/kueue"
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
