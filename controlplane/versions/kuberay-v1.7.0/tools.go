//go:build tools

// Package kuberay pins the KubeRay operator's main package for ../../build.sh when a
// stack runs this KubeRay version (RAYKUEUE_KUBERAY_VERSION).
package kuberay

import (
	_ "github.com/ray-project/kuberay/ray-operator"
)
