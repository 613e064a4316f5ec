"""Whether a Workload is the one raykueue would make of a pod, and what the
controller's cache keeps of a Workload to tell (its podSets' fingerprint).

Split from controller/workload.py, which builds Workloads and reads their state;
this module compares one against a pod.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from raykueue.controller import pods as p
from raykueue.controller.workload import (
    POD_SET,
    owner_pod,
    pod_priority_class,
    pod_queue,
    pod_set_template,
    priority_class_name,
    queue_name,
    submitter_spec,
    workload_name,
)
from raykueue.core import contract as c
from raykueue.core.objects import Obj, metadata, spec

# Kubernetes records no creator on an object (managedFields' manager is any
# string the client sends), so whoever may create Workloads in a namespace can
# forge one carrying our label and an owner reference to a gated pod, and Kueue
# will admit it. What such a Workload cannot fake and still be harmful is what
# Kueue charged: the gate is lifted only through a Workload whose name is the
# one we would give it, whose owner is the pod by uid, and whose queue,
# priority class and podSets' resources (the pod's; a head's submitter slot too)
# are exactly what `build_workload` makes of the pod. A forgery that passes is our
# Workload in all but authorship: admitting it charges the pod's real requests
# (and its submitter's) to the pod's real queue.

class SlimWorkload(dict[str, Any]):
    """A Workload as the cache keeps it: without its pod templates (most of its
    bytes), but with the one thing read of them, the podSets' fingerprint.

    `copy.copy` and `copy.deepcopy` keep the type and the fingerprint; `dict()`
    would drop both.
    """

    __slots__ = ("pod_sets",)  # as SlimPod's: no instance __dict__ per cached Workload

    def __init__(self, obj: Mapping[str, Any], pod_sets: str) -> None:
        super().__init__(obj)
        self.pod_sets = pod_sets


# A fingerprint of several podSets (a gang's base) starts so; a pod's sizing never does.
SETS_PREFIX: Final = "sets:"


def pod_sets_fingerprint(wl: Obj) -> str:
    """`main`x1 and its template's sizing; for any other podSets shape, each podSet's
    sizing by name (`gang_base.pod_set_sizings`), which no pod's sizing equals."""
    if isinstance(wl, SlimWorkload):
        return wl.pod_sets
    pod_sets = spec(wl).get("podSets")
    if not isinstance(pod_sets, list) or not pod_sets:
        return ""
    only = pod_sets[0]
    if (len(pod_sets) == 1 and isinstance(only, dict) and only.get("name", POD_SET) == POD_SET
            and only.get("count") == 1):
        return _template_sizing(only)
    sizings = {str(x.get("name")): _template_sizing(x) for x in pod_sets if isinstance(x, dict)}
    return SETS_PREFIX + json.dumps(sizings, sort_keys=True, separators=(",", ":"))


def _template_sizing(pod_set: Mapping[str, Any]) -> str:
    template = pod_set.get("template")
    template_spec = template.get("spec") if isinstance(template, dict) else None
    return p.sizing_fingerprint(template_spec) if isinstance(template_spec, dict) else ""


def pod_sizing(pod: Obj) -> str:
    """The fingerprint of what the pod's podSet would request; a cached pod carries it."""
    if isinstance(pod, p.SlimPod):
        return pod.sizing
    return p.sizing_fingerprint(pod_set_template(pod)["spec"])


def expected_pod_sets_fingerprint(pod: Obj) -> str:
    """`pod_sets_fingerprint` of the Workload `build_workload` makes of `pod` (cached pods too)."""
    reserved = submitter_spec(pod)
    if reserved is None:
        return pod_sizing(pod)
    sizings = {POD_SET: pod_sizing(pod), c.SUBMITTER_POD_SET: p.sizing_fingerprint(reserved)}
    return SETS_PREFIX + json.dumps(sizings, sort_keys=True, separators=(",", ":"))


def mismatch(wl: Obj, pod: Obj) -> str | None:
    """Why `wl` is not the Workload raykueue would have made for `pod`, or None."""
    meta = metadata(wl)
    expected = workload_name(pod)
    if meta.get("name") != expected:
        return f"its name is not {expected}"
    owner = owner_pod(wl)
    pod_meta = metadata(pod)
    if owner is None or owner != (str(pod_meta.get("name") or ""), str(pod_meta.get("uid") or "")):
        return "its owner reference is not this pod"
    if queue_name(wl) != pod_queue(pod):
        return f"its queue {queue_name(wl)!r} is not the pod's {pod_queue(pod)!r}"
    wanted_class = pod_priority_class(pod)
    if priority_class_name(wl) != wanted_class:
        return (f"its priority class {priority_class_name(wl)!r} is not the pod's "
                f"{wanted_class!r}")
    if pod_sets_fingerprint(wl) != expected_pod_sets_fingerprint(pod):
        return "its podSets do not request what the pod requests"
    return None
