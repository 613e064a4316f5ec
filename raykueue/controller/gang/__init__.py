"""Gang start: a cluster's head and minimum workers as one Workload (docs/GANG.md).

- `rule`: the rule itself, a pure function of the cluster's pods and its base (`plan`).
- `base`: reading gang pods, building the base Workload, trusting the one that stands.
- `decide`: the pass per gang cluster, the rule turned into actions (no I/O).
- `member`: where a gang pod's own pass leaves the decision to its cluster's pass.

The loop runs a cluster's pass under its `keys.GangKey`; the handlers keep what it
released (`State.gang_released`). Nothing here is re-exported: import the module.
"""
