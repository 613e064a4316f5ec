"""Living beside Kueue as users install it: read its setup, report what would double-count.

Pure rules (`kueueconfig`, `selectors`, `findings`) at the core; `watcher` is
the edge that reads Kueue's Configuration and webhook configurations through
watch caches and publishes what it found (metric, Event, /readyz, explain).
Imports only the ground floor (webhooks/, kube/).
"""
