"""What `raykueue uninstall` does, decided from one snapshot of the cluster (no I/O).

The way out must leave no pod gated forever, no raykueue Workload behind and no
pod running outside quota. Removing the webhooks first (the old recovery) does
not: a gated pod deleted afterwards comes back from KubeRay ungated, with its
queue only in raykueue's annotation, and runs outside any quota; a pod whose
Workload Kueue admitted while the controller was away stays gated and holds that
quota until it goes. So the order is:

1. suspend every opted-in Ray object (a RayCluster, or the RayJob that makes one):
   KubeRay deletes its pods, gated or running, and each pod's Workload goes with
   it (owner reference; raykueue's controller deletes it at once when it is up),
   which frees its quota. Nothing of it runs again until someone resumes it.
2. wait until none of their pods is left;
3. delete raykueue's webhook configurations: from here no object waits for raykueue;
4. look again (an object opted in between 1 and 3 is caught now, and nothing can
   be gated any more), delete pods raykueue admitted that no Ray object owns (nothing
   would recreate them gated), and every raykueue Workload left;
5. with --handback, give each suspended object to Kueue: the queue label from
   `raykueue.io/queue-name` (or the namespace's LocalQueue `default`), the opt-in and
   raykueue's marks removed, and the autoscaler's allocate timeout raykueue raised
   (86400 s, for pods waiting on per-pod quota) back to Ray's own, still suspended:
   Kueue makes its Workload, admits the cluster whole and resumes it. Without it, the
   objects stay suspended and opted in ("parked"); a later
   `raykueue uninstall --yes --handback` hands them back.

Suspending first also satisfies the rule that the opt-in of a live cluster cannot
change unless it is suspended, and the opt-in is only removed once no raykueue
webhook is left to judge it.

What cannot be suspended in place blocks the whole uninstall (nothing is done
while a blocker remains), with what to do: a RayService (KubeRay starts a new
RayCluster when `rayClusterConfig` changes, so it has no in-place suspend), and an
active RayJob with `shutdownAfterJobFinishes: false` (KubeRay suspends only RayJobs
that delete their cluster).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from raykueue.core import contract as c
from raykueue.core.objects import Obj, annotations, gate_names, labels, metadata
from raykueue.core.rayobjects import admitted_whole, get, ray_owner_ref, templates
from raykueue.uninstall.world import (
    Ref,
    World,
    autoscaling,
    finished_rayjob,
    is_raykueues,
    opted_in,
    ref_of,
    suspended,
    top_of_cluster,
    top_of_pod,
)

# What the plan says for each kind that cannot be suspended in place.
RAYSERVICE_BLOCKER: Final = (
    "KubeRay cannot suspend a RayService in place (a changed rayClusterConfig starts a new "
    "RayCluster): delete it, or create it again without the annotation "
    f"{c.STANDALONE_ANNOTATION} (with the label {c.QUEUE_LABEL} to have Kueue admit it whole), "
    "then run raykueue uninstall again")
RAYJOB_KEEPS_CLUSTER_BLOCKER: Final = (
    "KubeRay suspends a RayJob only with shutdownAfterJobFinishes: true: let it finish (its "
    "RayCluster is then suspended alone) or delete it, then run raykueue uninstall again")


# --- the plan ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Handback:
    """Where a suspended object goes on --handback, or why it cannot go."""

    queue: str | None
    source: str  # where the queue comes from, or why there is none
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Unit:
    """One opted-in Ray object the uninstall suspends (and may hand back)."""

    ref: Ref
    obj: Obj = field(repr=False, compare=False)
    pods: int = 0  # its pods now (KubeRay deletes them all when it is suspended)
    gated: int = 0
    suspended: bool = False
    suspended_by_uninstall: bool = False
    deleting: bool = False
    autoscaling: bool = False
    blocker: str | None = None
    handback: Handback | None = None  # None: not handed back (see handback_refusal)
    handback_refusal: str = ""

    @property
    def kind(self) -> str:
        return self.ref.kind

    @property
    def needs_suspend(self) -> bool:
        return self.blocker is None and not self.deleting and not self.suspended


@dataclass(frozen=True)
class Plan:
    units: tuple[Unit, ...] = ()
    kueues: tuple[Ref, ...] = ()  # opted in, but Kueue's already (queue label): left alone
    bare_pods: tuple[Ref, ...] = ()  # raykueue's pods no live Ray object owns
    workloads: int = 0
    webhooks: tuple[tuple[str, str], ...] = ()  # (resource plural, name)
    handback: bool = False

    @property
    def blockers(self) -> list[Unit]:
        return [u for u in self.units if u.blocker]

    @property
    def nothing_to_do(self) -> bool:
        return not (self.units or self.bare_pods or self.workloads or self.webhooks)


def queue_for(world: World, kind: str, obj: Obj) -> Handback:
    """The LocalQueue a handed-back object goes to: raykueue's annotation, else the namespace's `default`."""
    ns = str(metadata(obj).get("namespace") or "")
    queue = annotations(obj).get(c.QUEUE_ANNOTATION) or labels(obj).get(c.QUEUE_LABEL)
    source = f"its annotation {c.QUEUE_ANNOTATION}"
    if not queue:
        # raykueue moved a queue label on a pod template to the template's annotation.
        found = {annotations(t).get(c.QUEUE_ANNOTATION) for _, t in templates(obj, kind)} - {None, ""}
        if len(found) > 1:
            return Handback(None, f"its pod templates name different queues ({', '.join(sorted(found))}); "
                                  "Kueue admits a cluster into one queue: set the label "
                                  f"{c.QUEUE_LABEL} yourself")
        if found:
            queue, source = found.pop(), f"its pod templates' annotation {c.QUEUE_ANNOTATION}"
    if not queue:
        if world.has_local_queue(ns, c.DEFAULT_LOCAL_QUEUE):
            queue, source = c.DEFAULT_LOCAL_QUEUE, f"the namespace's LocalQueue {c.DEFAULT_LOCAL_QUEUE}"
        else:
            return Handback(None, f"no queue: it names none and {ns} has no LocalQueue "
                                  f"{c.DEFAULT_LOCAL_QUEUE}; set the label {c.QUEUE_LABEL} yourself")
    notes: list[str] = []
    if not world.has_local_queue(ns, queue):
        notes.append(f"LocalQueue {ns}/{queue} does not exist: Kueue keeps it pending until it does")
    if autoscaling(obj, kind):
        notes.append(f"autoscaled: handed back as a Kueue elastic job ({c.KUEUE_ELASTIC_JOB_ANNOTATION}; "
                     "needs Kueue's ElasticJobsViaWorkloadSlices feature gate, on by default since v0.18)")
    if kind == c.RAYJOB_KIND:
        notes.append("KubeRay starts a resumed RayJob's job again from the beginning")
    return Handback(queue, source, tuple(notes))


def _unit(world: World, kind: str, obj: Obj, pods: Sequence[Obj], handback: bool) -> Unit:
    is_suspended = suspended(obj, kind)
    by_uninstall = annotations(obj).get(c.SUSPENDED_BY_ANNOTATION) == c.SUSPENDED_BY_UNINSTALL
    deleting = bool(metadata(obj).get("deletionTimestamp"))
    blocker = None
    if deleting:
        pass  # going anyway: its pods are only waited for
    elif kind == c.RAYSERVICE_KIND:
        blocker = RAYSERVICE_BLOCKER
    elif (kind == c.RAYJOB_KIND and not is_suspended
          and not get(obj, ("spec", "shutdownAfterJobFinishes"))):
        blocker = RAYJOB_KEEPS_CLUSTER_BLOCKER
    back: Handback | None = None
    refusal = ""
    if not handback:
        refusal = "not asked (--handback)"
    elif deleting:
        refusal = "being deleted"
    elif kind == c.RAYCLUSTER_KIND and ray_owner_ref(obj) is not None:
        refusal = "its RayJob has finished: it stays suspended; delete it when you are done with it"
    elif is_suspended and not by_uninstall:
        refusal = ("it was suspended before the uninstall: left as it is (Kueue would resume it once "
                   "admitted); hand it back yourself when you want it to run")
    else:
        back = queue_for(world, kind, obj)
        if back.queue is None:
            refusal, back = back.source, None
    return Unit(ref=ref_of(obj, kind), obj=obj, pods=len(pods),
                gated=sum(1 for p in pods if c.GATE in gate_names(p)),
                suspended=is_suspended, suspended_by_uninstall=by_uninstall, deleting=deleting,
                autoscaling=autoscaling(obj, kind), blocker=blocker, handback=back,
                handback_refusal=refusal)


def unit_pods(world: World) -> dict[str, list[Obj]]:
    """The KubeRay pods of each top object, by the top object's uid."""
    out: dict[str, list[Obj]] = {}
    for pod in world.pods:
        top = top_of_pod(world, pod)
        if top is not None:
            out.setdefault(str(metadata(top[1]).get("uid") or ""), []).append(pod)
    return out


def make_plan(world: World, *, handback: bool) -> Plan:
    tops: dict[str, tuple[str, Obj]] = {}  # uid -> (kind, object)
    for kind, obj in world.objects():
        if not opted_in(obj, kind):
            continue
        if kind == c.RAYCLUSTER_KIND:
            kind, obj = top_of_cluster(world, obj)
        elif kind == c.RAYJOB_KIND and (get(obj, ("spec", "rayClusterSpec")) is None
                                         or finished_rayjob(obj)):
            # A clusterSelector RayJob runs on a RayCluster that is judged on its own; a
            # finished one never runs again, and a cluster it kept is judged on its own.
            continue
        tops[str(metadata(obj).get("uid") or "")] = (kind, obj)
    bare: list[Ref] = []
    for pod in world.pods:
        if not is_raykueues(pod):
            continue
        top = top_of_pod(world, pod)
        if top is None:
            bare.append(ref_of(pod, "Pod"))
        else:
            tops.setdefault(str(metadata(top[1]).get("uid") or ""), top)
    pods = unit_pods(world)
    units: list[Unit] = []
    kueues: list[Ref] = []
    for uid, (kind, obj) in tops.items():
        if admitted_whole(obj):
            kueues.append(ref_of(obj, kind))
            continue
        units.append(_unit(world, kind, obj, pods.get(uid, []), handback))
    return Plan(units=tuple(sorted(units, key=lambda u: u.ref)), kueues=tuple(sorted(kueues)),
                bare_pods=tuple(sorted(bare)), workloads=len(world.workloads),
                webhooks=tuple(sorted((plural, str(metadata(cfg).get("name") or ""))
                                      for plural, cfg in world.webhook_configs)),
                handback=handback)
