"""The Workload lifecycle: one Kueue Workload per gated Ray pod.

Three parts (docs/CONTROLLER.md): the `state` the controller keeps between
passes; `decide`, pure, on the facts `facts.gather` reads from a source (the
caches, `reads.Reader`); and the applier, `apply.HANDLERS`, one handler
(`handlers`) per action type (`actions`). `loop` wires them to the caches and
the work queue. `verdict` says why a pod is still gated, from `decide`: the
stuck-gate report (`stuck`) and `raykueue explain` (`explain`, over the API
server: `live`) both print it.
"""
