"""A gang pod in the per-pod pass: where its cluster's pass decides in place of it. No I/O.

The per-pod `controller.decide` handles a gang pod's own (extra) Workload exactly
as without gang: the gate lift, readiness, release, Kueue's eviction. It never
creates a Workload for a gang pod and never judges one that leans on the base:
the cluster's pass (`gang.decide`) sees every pod and the base at once, which one
pod's pass cannot. This is the one place that says where that line runs.
"""

from __future__ import annotations

from raykueue.controller import pods as p
from raykueue.controller import workload as w
from raykueue.controller.actions import Action, Wait
from raykueue.controller.gang.base import is_gang_pod
from raykueue.core import contract as c
from raykueue.core.objects import Obj, labels


def cluster_decides(pod: Obj, wl: Obj | None) -> list[Action] | None:
    """What the pod's own pass does for a gang pod, given its own live Workload (None:
    it has none); None where the pass's own rules apply.

    - Gated, no Workload: a slot in the base or a Workload of its own is the
      cluster's choice.
    - Past the gate, no Workload: it counts in the base; nothing to make.
    - Past the gate, its own Workload not admitted: a base pod moving out
      (minReplicas lowered), covered by the base until Kueue admits that Workload;
      the cluster's pass judges whether anything covers it.
    """
    if not is_gang_pod(pod):
        return None
    gang = labels(pod)[c.GANG_LABEL]
    if wl is None:
        return [Wait(f"gang {gang}: decided per cluster")] if p.is_gated(pod) else []
    if (p.is_gated(pod) or p.is_deleting(wl) or w.is_finished(wl) or w.is_evicted(wl)
            or w.is_admitted(wl)):
        return None
    return [Wait(f"gang {gang}: covered by the base until Workload {p.name(wl)} is admitted")]
