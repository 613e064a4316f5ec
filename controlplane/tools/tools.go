//go:build tools

// Package tools pins the main packages ../build.sh compiles from this module:
// promtool (checks and unit-tests the PrometheusRule in
// manifests/components/monitoring) and helm (lints and renders charts/raykueue).
// Their own module, so their dependencies never move the control plane's.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/promtool"
	_ "helm.sh/helm/v4/cmd/helm"
)
