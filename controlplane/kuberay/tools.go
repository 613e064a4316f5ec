//go:build tools

// Package kuberay pins the KubeRay operator's main package for ../build.sh.
package kuberay

import (
	_ "github.com/ray-project/kuberay/ray-operator"
)
