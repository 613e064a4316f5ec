"""Which handler applies which action: one table, checked complete by a test."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from raykueue.controller import actions as a
from raykueue.controller import handlers as h

Handler = Callable[[h.Env, Any, h.Pass], None]

HANDLERS: Mapping[type, Handler] = MappingProxyType({
    a.CreateWorkload: h.create_workload,
    a.LiftGate: h.lift_gate,
    a.SetPodsReady: h.set_pods_ready,
    a.FinishWorkload: h.finish_workload,
    a.DeleteWorkload: h.delete_workload,
    a.EvictPod: h.remove_pod,
    a.ReportConflict: h.report_conflict,
    a.Warn: h.warn,
    a.Wait: h.wait,
    a.SetReclaimable: h.set_reclaimable,
})


def apply(env: h.Env, action: a.Action, at: h.Pass) -> None:
    HANDLERS[type(action)](env, action, at)
