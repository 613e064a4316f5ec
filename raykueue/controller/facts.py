"""Every fact `decide` needs about one pod, gathered from a source.

The source is the controller's caches (`reads.Reader`, for the loop and the
stuck-gate report) or the API server (`live.ApiSource`, for
`raykueue explain`); the gathering is the same, so a pod cannot look admitted
to one and waiting to the other. Only what `decide` reads is gathered: the
Workloads that name the pod, the flavors its own Workload was admitted to, the
value of its priority class, and, for a gated worker under head-first,
whether its cluster's head can run.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

from raykueue.controller import decide as d
from raykueue.controller import kueue_admission as adm
from raykueue.controller import pods as p
from raykueue.controller import workload as w
from raykueue.controller.current import current_workload
from raykueue.core import contract as c
from raykueue.core.objects import Obj
from raykueue.core.podrole import role_of


@dataclass(frozen=True, slots=True)
class Facts:
    """What one pass decides on."""

    pod: Obj | None
    workloads: list[Obj]
    ctx: d.Context


class Source(Protocol):
    def workloads_of(self, pod: Obj) -> list[Obj]:
        """Every Workload that names the pod (`current.names_pod`)."""
        ...

    def heads(self, namespace: str, cluster: str) -> list[Obj]:
        """The head pods of a Ray cluster."""
        ...

    def flavor(self, name: str) -> Obj | None: ...

    def priority_value(self, class_name: str) -> int | None:
        """The value of a WorkloadPriorityClass, None when there is no such class."""
        ...


def gather(source: Source, pod: Obj, base: d.Context,
           heads_seen: dict[tuple[str, str], bool] | None = None) -> Facts:
    """The facts about a pod that is there; `base` carries the settings
    (version, head_first, pods_ready). A sweep over many pods at one moment
    passes one `heads_seen` to all of them, so that each cluster's heads are
    judged once rather than once per worker."""
    workloads = source.workloads_of(pod)
    current = current_workload(pod, workloads)
    flavors: dict[str, Obj] = {}
    for name in adm.assigned_flavors(current) if current is not None else []:
        found = source.flavor(name)
        if found is not None:
            flavors[name] = found
    values: dict[str, int] = {}
    class_name = w.pod_priority_class(pod)
    if class_name:
        value = source.priority_value(class_name)
        if value is not None:
            values[class_name] = value
    # Only a gated worker, or a running one still without a Workload (adopted),
    # waits for its head under head-first.
    head_ok = False
    if base.head_first and role_of(pod) == c.ROLE_WORKER and (p.is_gated(pod) or current is None):
        cluster = (p.key(pod)[0], p.cluster(pod))
        if heads_seen is None:
            head_ok = cluster_head_can_run(source, pod)
        elif (seen := heads_seen.get(cluster)) is not None:
            head_ok = seen
        else:
            head_ok = heads_seen[cluster] = cluster_head_can_run(source, pod)
    return Facts(pod, workloads, replace(base, head_admitted=head_ok, flavors=flavors,
                                         priority_values=values))


def cluster_head_can_run(source: Source, pod: Obj) -> bool:
    """Whether the pod's cluster has a head that can run, each head judged by
    its own Workload under the same rule as the pod's."""
    cluster = p.cluster(pod)
    if not cluster:
        return False
    heads = [h for h in source.heads(p.key(pod)[0], cluster) if role_of(h) == c.ROLE_HEAD]
    return d.head_admitted((h, current_workload(h, source.workloads_of(h))) for h in heads)
