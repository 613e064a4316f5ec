//go:build tools

// Package kueue pins the Kueue manager's main package for ../../build.sh when a
// stack runs this Kueue version (RAYKUEUE_KUEUE_VERSION). A module of its own:
// each Kueue release is built on the k8s.io and controller-runtime versions it
// was released with, which differ from the control plane's.
package kueue

import (
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
