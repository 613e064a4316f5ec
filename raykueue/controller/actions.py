"""What the controller can do to the API server, as values `decide` returns.

Each type has exactly one handler (`controller.apply.HANDLERS`); the reasons
and kinds below are what those handlers write into conditions, Events and
metric labels.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final


@dataclass(frozen=True, slots=True)
class CreateWorkload:
    body: Mapping[str, Any]
    role: str


@dataclass(frozen=True, slots=True)
class LiftGate:
    """One pod patch: remove the gate, add the flavors' placement."""

    workload: str
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    flavors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SetPodsReady:
    workload: str
    ready: bool
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class FinishWorkload:
    workload: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class DeleteWorkload:
    """The pod is being deleted: delete its Workload, freeing the quota at once.

    One write, where marking it Finished would be two: ours, and the garbage
    collector's delete once the pod is gone. Kueue drops a deleted Workload
    from its cache on the delete event. `uid` makes the delete conditional.
    """

    workload: str
    uid: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class SetReclaimable:
    """A gang's base hands slots back: its `status.reclaimablePods`, by podSet."""

    workload: str
    counts: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class EvictPod:
    """A proposed removal: `handlers.remove_pod` reads the pod, its Workload(s) and its
    RayCluster live and deletes only what `removal.confirm` proves (condition on the pod,
    Events, uid-preconditioned delete); anything else it reports. `workload` names the
    Workload whose state is the evidence (the pod's own, or a gang's base; "" for none).
    A FinishWorkload may follow: it is skipped when the pod was kept."""

    workload: str
    reason: str
    message: str
    head: bool


@dataclass(frozen=True, slots=True)
class ReportConflict:
    """Someone else claims this pod, or its placement; we keep our hands off."""

    kind: str
    message: str
    workload: str | None = None  # also reported on this Workload


@dataclass(frozen=True, slots=True)
class Warn:
    """Something the user must fix: logged, and an Event on the pod (once) when
    there is a pod to attach it to."""

    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Wait:
    """Nothing to write; says what the pod waits for (logs, explain)."""

    reason: str
    # WAIT_FOR_HEAD, or "": the stuck-gate report counts a worker waiting for
    # its head apart from one that should have had a Workload by now.
    kind: str = ""
    # Seconds after which the pass is worth running again (a grace running out); None: on events.
    after: float | None = None


WAIT_FOR_HEAD: Final = "head"

Action = (CreateWorkload | LiftGate | SetPodsReady | FinishWorkload | DeleteWorkload | EvictPod
          | ReportConflict | Warn | Wait | SetReclaimable)

# Conflict kinds (metric label, event reason).
CONFLICT_KUEUE_POD: Final = "KueueManagesPod"
CONFLICT_KUEUE_WORKLOAD: Final = "KueueWorkload"
CONFLICT_NODE_SELECTOR: Final = "NodeSelectorConflict"
CONFLICT_FORGED_WORKLOAD: Final = "WorkloadMismatch"

# Finished reasons. Kueue's own: Succeeded, Failed, OwnerNotFound.
FINISHED_SUCCEEDED: Final = "Succeeded"
FINISHED_FAILED: Final = "Failed"
FINISHED_POD_DELETED: Final = "PodDeleted"
FINISHED_EVICTED: Final = "Evicted"
FINISHED_OWNER_NOT_FOUND: Final = "OwnerNotFound"
FINISHED_DUPLICATE: Final = "Duplicate"
# A gang's extra whose own Workload goes because it fills a vacancy in the base.
GANG_MOVED_IN: Final = "MovedIntoGang"
# A gang's base deleted to be made again: its head went, or Kueue evicted it.
GANG_REQUEUED: Final = "GangRequeued"
# A pending base deleted to be made again with the counts minReplicas now asks for.
GANG_REMADE: Final = "GangMinReplicasChanged"
# A gang pod past the gate that no admitted Workload covers: evicted (KubeRay recreates it gated).
GANG_UNCOVERED: Final = "GangPodNotCovered"

WARN_PRIORITY_CLASS: Final = "PriorityClassNotFound"
WARN_NO_QUEUE: Final = "NoQueue"
WARN_FINISHED_WHILE_GATED: Final = "WorkloadFinished"
WARN_UNGATED_NOT_ADMITTED: Final = "RunningWithoutAdmission"
WARN_LABEL_REMOVED: Final = "ManagedByLabelRemoved"
# A pod past the gate whose own Workload stayed not admitted past the grace.
OUTSIDE_QUOTA: Final = "OutsideQuota"
# Evictions raykueue decides itself (every other reason is Kueue's).
OWN_EVICTIONS: Final = frozenset({GANG_REQUEUED, GANG_UNCOVERED, CONFLICT_FORGED_WORKLOAD,
                                  OUTSIDE_QUOTA})
