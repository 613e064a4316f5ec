"""Living beside Kueue as users install it: read its setup, report what would double-count.

Pure rules (`kueueconfig`, `selectors`, `findings`, `policies`) at the core;
`watcher` and `policywatch` are the edges that read Kueue's Configuration,
webhook configurations and raykueue's ValidatingAdmissionPolicies through
watch caches and publish what they found (metric, Event, /readyz, explain).
A middle-floor package: imports only the ground floor's core/ and kube/
(docs/ARCHITECTURE.md).
"""
