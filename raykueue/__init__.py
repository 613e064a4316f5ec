"""raykueue: per-pod Kueue admission for autoscaled KubeRay clusters.

Floors, imports pointing down only (docs/ARCHITECTURE.md):
  app/                       settings, CLI, ASGI routes, wiring; holds no rule
  controller/ certs/ coexist/  the Workload lifecycle, certificates, Kueue's setup
  webhooks/ kube/            pure admission decisions; Kubernetes I/O primitives
  core/                      the domain's names and readers, shared by all of them
"""
