"""What `raykueue uninstall` reads: one snapshot of the cluster, and how its objects relate.

The plan (uninstall/plan.py) is decided from it; the shape of Ray objects and the
opt-in are core/rayobjects.py's.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from raykueue.core import contract as c
from raykueue.core.objects import Obj, gate_names, labels, metadata
from raykueue.core.rayobjects import (
    CLUSTER_SPEC,
    get,
    is_opted_in,
    is_suspended,
    ray_owner_ref,
    template_opt_in,
    templates,
)

RAY_KINDS: Final = tuple(CLUSTER_SPEC)
# KubeRay's JobDeploymentStatus values after which a RayJob never runs again.
RAYJOB_FINISHED: Final = ("Complete", "Failed")


@dataclass(frozen=True, slots=True, order=True)
class Ref:
    kind: str
    namespace: str
    name: str
    uid: str = ""

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


def ref_of(obj: Obj, kind: str | None = None) -> Ref:
    meta = metadata(obj)
    return Ref(kind or str(obj.get("kind") or ""), str(meta.get("namespace") or ""),
               str(meta.get("name") or ""), str(meta.get("uid") or ""))


@dataclass(frozen=True)
class World:
    """What the uninstall reads, all namespaces at once."""

    rayclusters: Sequence[Obj] = ()
    rayjobs: Sequence[Obj] = ()
    rayservices: Sequence[Obj] = ()
    pods: Sequence[Obj] = ()  # KubeRay's head and worker pods (raykueue's among them)
    workloads: Sequence[Obj] = ()  # raykueue's Workloads
    local_queues: Sequence[Obj] = ()
    # (resource plural, configuration) for each of raykueue's webhook configurations
    webhook_configs: Sequence[tuple[str, Obj]] = ()

    def objects(self) -> Iterator[tuple[str, Obj]]:
        for kind, items in ((c.RAYCLUSTER_KIND, self.rayclusters), (c.RAYJOB_KIND, self.rayjobs),
                            (c.RAYSERVICE_KIND, self.rayservices)):
            for obj in items:
                yield kind, obj

    def find(self, kind: str, namespace: str, name: str) -> Obj | None:
        for k, obj in self.objects():
            meta = metadata(obj)
            if k == kind and meta.get("namespace") == namespace and meta.get("name") == name:
                return obj
        return None

    def outside(self, namespaces: Collection[str]) -> World:
        """The world without what lives in `namespaces`: those being deleted. Nothing new can
        be created in a terminating namespace (no pod, so nothing that runs outside quota), and
        the namespace controller deletes what is there; acting on it, or waiting for its pods,
        could only hold the uninstall up behind a finalizer that is not ours."""
        def keep(items: Sequence[Obj]) -> tuple[Obj, ...]:
            return tuple(x for x in items if metadata(x).get("namespace") not in namespaces)

        return replace(self, rayclusters=keep(self.rayclusters), rayjobs=keep(self.rayjobs),
                       rayservices=keep(self.rayservices), pods=keep(self.pods),
                       workloads=keep(self.workloads), local_queues=keep(self.local_queues))

    def has_local_queue(self, namespace: str, name: str) -> bool:
        return any(metadata(q).get("namespace") == namespace and metadata(q).get("name") == name
                   for q in self.local_queues)


# --- reading objects ------------------------------------------------------------------

# The kinds KubeRay suspends in place (a RayService has no in-place suspend: see
# the plan's docstring), with where each keeps its suspend flag.
SUSPENDABLE: Final = (c.RAYCLUSTER_KIND, c.RAYJOB_KIND)


def opted_in(obj: Obj, kind: str) -> bool:
    """Opted in on the object, or (as raykueue read it before that was refused) on a pod template."""
    return is_opted_in(obj) or any(template_opt_in(t) == "true" for _, t in templates(obj, kind))


def is_raykueues(pod: Obj) -> bool:
    """A pod raykueue gated (or gated once and admitted)."""
    return c.GATE in gate_names(pod) or labels(pod).get(c.MANAGED_BY_LABEL) == c.MANAGED_BY_VALUE


def suspended(obj: Obj, kind: str) -> bool:
    return kind in SUSPENDABLE and is_suspended(obj, kind)


def autoscaling(obj: Obj, kind: str) -> bool:
    at = CLUSTER_SPEC.get(kind)
    return at is not None and get(obj, (*at, "enableInTreeAutoscaling")) is True


def finished_rayjob(job: Obj) -> bool:
    return get(job, ("status", "jobDeploymentStatus")) in RAYJOB_FINISHED


def top_of_cluster(world: World, cluster: Obj) -> tuple[str, Obj]:
    """The object that decides a RayCluster's life: its RayJob or RayService, else itself.

    A finished RayJob never touches its cluster again, so a cluster it kept is
    handled on its own.
    """
    ref = ray_owner_ref(cluster)
    if ref is not None and ref.get("kind") in (c.RAYJOB_KIND, c.RAYSERVICE_KIND):
        owner = world.find(str(ref["kind"]), str(metadata(cluster).get("namespace") or ""),
                           str(ref.get("name") or ""))
        alive = owner is not None and metadata(owner).get("uid") == ref.get("uid")
        if alive and owner is not None and not (ref["kind"] == c.RAYJOB_KIND and finished_rayjob(owner)):
            return str(ref["kind"]), owner
    return c.RAYCLUSTER_KIND, cluster


def top_of_pod(world: World, pod: Obj) -> tuple[str, Obj] | None:
    """The top object of a KubeRay pod, or None when no live RayCluster owns it."""
    ref = ray_owner_ref(pod)
    if ref is None or ref.get("kind") != c.RAYCLUSTER_KIND:
        return None
    cluster = world.find(c.RAYCLUSTER_KIND, str(metadata(pod).get("namespace") or ""),
                         str(ref.get("name") or ""))
    if cluster is None or metadata(cluster).get("uid") != ref.get("uid"):
        return None
    return top_of_cluster(world, cluster)


def is_raykueue_webhook_config(config: Obj) -> bool:
    """One of raykueue's webhook configurations: by its shipped name, or any webhook of ours in it."""
    if metadata(config).get("name") in {name for _, name in c.WEBHOOK_CONFIGS}:
        return True
    hooks = config.get("webhooks")
    return any(isinstance(h, Mapping) and str(h.get("name") or "").endswith(".raykueue.io")
               for h in (hooks if isinstance(hooks, list) else []))
