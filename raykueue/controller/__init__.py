"""The Workload lifecycle: one Kueue Workload per gated Ray pod.

Three parts (docs/CONTROLLER.md): the `state` the controller keeps between
passes; `decide`, pure, on the facts a `reads.Reader` gathers; and the applier,
`apply.HANDLERS`, one handler (`handlers`) per action type (`actions`). `loop`
wires them to the caches and the work queue; `explain` tells a user why a pod
is still gated.
"""
