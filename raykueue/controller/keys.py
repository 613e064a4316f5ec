"""What the work queue carries: one typed key per kind of pass.

A pass runs for a pod (by name: the pod may be gone, its Workloads not), for
the Workloads of a namespace that lost their owner reference, or for one gang
cluster. Each kind is its own type, so no name can be taken for another kind's
(a pod may be called like its cluster), and the loop dispatches on the type.
Frozen dataclasses compare and hash by type and fields, so the queue's dedup
holds per kind.
"""

from __future__ import annotations

from dataclasses import dataclass

# (namespace, name) of an object: the caches' and the state's indexes.
Ref = tuple[str, str]


@dataclass(frozen=True, slots=True)
class PodKey:
    """The pass over one pod name and every Workload that names it as owner."""

    namespace: str
    name: str

    @property
    def ref(self) -> Ref:
        return self.namespace, self.name

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class OrphansKey:
    """The pass over a namespace's Workloads of ours that lost their owner reference
    (a pod deleted with propagationPolicy=Orphan): nothing else would ever finish
    them, and they would hold quota for good."""

    namespace: str

    def __str__(self) -> str:
        return f"{self.namespace}/(orphaned Workloads)"


@dataclass(frozen=True, slots=True)
class GangKey:
    """The pass over one gang cluster: its pods, their own Workloads and its base."""

    namespace: str
    cluster: str

    def __str__(self) -> str:
        return f"{self.namespace}/gang {self.cluster}"


QueueKey = PodKey | OrphansKey | GangKey


def pod_key(ref: Ref) -> PodKey:
    return PodKey(ref[0], ref[1])
