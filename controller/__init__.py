"""The Workload lifecycle: one Kueue Workload per gated Ray pod.

`workload` builds Workloads and reads their state, `decide` maps what the
caches hold for one pod to actions, `loop` applies those actions through
`kube/`, `explain` tells a user why a pod is still gated.
"""
