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

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from raykueue.core import contract as c
from raykueue.core.jsonpointer import pointer
from raykueue.core.objects import Obj, annotations, controller_ref, gate_names, labels, metadata, spec
from raykueue.webhooks.autoscaler_env import ALLOCATE_TIMEOUT_ENV, INJECTED_ANNOTATION

# Where each kind keeps its RayCluster spec and its suspend flag. A RayService's
# `rayClusterConfig.suspend` is not a suspend of the service (see the docstring).
CLUSTER_SPEC: Final[Mapping[str, tuple[str, ...]]] = {
    c.RAYCLUSTER_KIND: ("spec",),
    c.RAYJOB_KIND: ("spec", "rayClusterSpec"),
    c.RAYSERVICE_KIND: ("spec", "rayClusterConfig"),
}
SUSPEND: Final[Mapping[str, tuple[str, ...]]] = {
    c.RAYCLUSTER_KIND: ("spec", "suspend"),
    c.RAYJOB_KIND: ("spec", "suspend"),
}
RAY_KINDS: Final = tuple(CLUSTER_SPEC)
RAYKUEUE_PREFIX: Final = "raykueue.io/"
# KubeRay's JobDeploymentStatus values after which a RayJob never runs again.
RAYJOB_FINISHED: Final = ("Complete", "Failed")
# What the plan says for each kind that cannot be suspended in place.
RAYSERVICE_BLOCKER: Final = (
    "KubeRay cannot suspend a RayService in place (a changed rayClusterConfig starts a new "
    "RayCluster): delete it, or create it again without the annotation "
    f"{c.STANDALONE_ANNOTATION} (with the label {c.QUEUE_LABEL} to have Kueue admit it whole), "
    "then run raykueue uninstall again")
RAYJOB_KEEPS_CLUSTER_BLOCKER: Final = (
    "KubeRay suspends a RayJob only with shutdownAfterJobFinishes: true: let it finish (its "
    "RayCluster is then suspended alone) or delete it, then run raykueue uninstall again")


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


def get_path(obj: Obj, path: Sequence[str]) -> Any:
    node: Any = obj
    for part in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def templates(obj: Obj, kind: str) -> Iterator[tuple[tuple[str, ...], Obj]]:
    """(path, template) of every pod template in the object's RayCluster spec."""
    at = CLUSTER_SPEC.get(kind, ())
    cluster = get_path(obj, at) if at else None
    if not isinstance(cluster, Mapping):
        return
    head = get_path(cluster, ("headGroupSpec", "template"))
    if isinstance(head, Mapping):
        yield (*at, "headGroupSpec", "template"), head
    groups = cluster.get("workerGroupSpecs")
    for i, group in enumerate(groups if isinstance(groups, list) else []):
        template = get_path(group, ("template",))
        if isinstance(template, Mapping):
            yield (*at, "workerGroupSpecs", str(i), "template"), template


def opted_in(obj: Obj, kind: str) -> bool:
    """Opted in on the object, or (as raykueue read it before that was refused) on a pod template."""
    if annotations(obj).get(c.STANDALONE_ANNOTATION) == "true":
        return True
    return any(annotations(t).get(c.STANDALONE_ANNOTATION) == "true" for _, t in templates(obj, kind))


def is_raykueues(pod: Obj) -> bool:
    """A pod raykueue gated (or gated once and admitted)."""
    return c.GATE in gate_names(pod) or labels(pod).get(c.MANAGED_BY_LABEL) == c.MANAGED_BY_VALUE


def suspended(obj: Obj, kind: str) -> bool:
    path = SUSPEND.get(kind)
    return path is not None and get_path(obj, path) is True


def autoscaling(obj: Obj, kind: str) -> bool:
    at = CLUSTER_SPEC.get(kind)
    return at is not None and get_path(obj, (*at, "enableInTreeAutoscaling")) is True


def finished_rayjob(job: Obj) -> bool:
    return get_path(job, ("status", "jobDeploymentStatus")) in RAYJOB_FINISHED


def _ray_owner(obj: Obj) -> Obj | None:
    ref = controller_ref(obj)
    if ref is None or not str(ref.get("apiVersion") or "").startswith(c.RAY_API_GROUP + "/"):
        return None
    return ref


def top_of_cluster(world: World, cluster: Obj) -> tuple[str, Obj]:
    """The object that decides a RayCluster's life: its RayJob or RayService, else itself.

    A finished RayJob never touches its cluster again, so a cluster it kept is
    handled on its own.
    """
    ref = _ray_owner(cluster)
    if ref is not None and ref.get("kind") in (c.RAYJOB_KIND, c.RAYSERVICE_KIND):
        owner = world.find(str(ref["kind"]), str(metadata(cluster).get("namespace") or ""),
                           str(ref.get("name") or ""))
        alive = owner is not None and metadata(owner).get("uid") == ref.get("uid")
        if alive and owner is not None and not (ref["kind"] == c.RAYJOB_KIND and finished_rayjob(owner)):
            return str(ref["kind"]), owner
    return c.RAYCLUSTER_KIND, cluster


def top_of_pod(world: World, pod: Obj) -> tuple[str, Obj] | None:
    """The top object of a KubeRay pod, or None when no live RayCluster owns it."""
    ref = _ray_owner(pod)
    if ref is None or ref.get("kind") != c.RAYCLUSTER_KIND:
        return None
    cluster = world.find(c.RAYCLUSTER_KIND, str(metadata(pod).get("namespace") or ""),
                         str(ref.get("name") or ""))
    if cluster is None or metadata(cluster).get("uid") != ref.get("uid"):
        return None
    return top_of_cluster(world, cluster)


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
          and not get_path(obj, ("spec", "shutdownAfterJobFinishes"))):
        blocker = RAYJOB_KEEPS_CLUSTER_BLOCKER
    back: Handback | None = None
    refusal = ""
    if not handback:
        refusal = "not asked (--handback)"
    elif deleting:
        refusal = "being deleted"
    elif kind == c.RAYCLUSTER_KIND and _ray_owner(obj) is not None:
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
        elif kind == c.RAYJOB_KIND and (get_path(obj, ("spec", "rayClusterSpec")) is None
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
        if c.QUEUE_LABEL in labels(obj):
            kueues.append(ref_of(obj, kind))
            continue
        units.append(_unit(world, kind, obj, pods.get(uid, []), handback))
    return Plan(units=tuple(sorted(units, key=lambda u: u.ref)), kueues=tuple(sorted(kueues)),
                bare_pods=tuple(sorted(bare)), workloads=len(world.workloads),
                webhooks=tuple(sorted((plural, str(metadata(cfg).get("name") or ""))
                                      for plural, cfg in world.webhook_configs)),
                handback=handback)


def is_raykueue_webhook_config(config: Obj) -> bool:
    """One of raykueue's webhook configurations: by its shipped name, or any webhook of ours in it."""
    if metadata(config).get("name") in {name for _, name in c.WEBHOOK_CONFIGS}:
        return True
    hooks = config.get("webhooks")
    return any(isinstance(h, Mapping) and str(h.get("name") or "").endswith(".raykueue.io")
               for h in (hooks if isinstance(hooks, list) else []))


# --- patches ------------------------------------------------------------------------------


def suspend_patch(kind: str, obj: Obj) -> list[dict[str, Any]]:
    """JSON patch: suspended, and marked as suspended by the uninstall; for this object only (uid)."""
    ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/uid",
                                  "value": str(metadata(obj).get("uid") or "")}]
    mark = {c.SUSPENDED_BY_ANNOTATION: c.SUSPENDED_BY_UNINSTALL}
    if isinstance(metadata(obj).get("annotations"), Mapping):
        ops.append({"op": "add", "path": pointer("metadata", "annotations", c.SUSPENDED_BY_ANNOTATION),
                    "value": c.SUSPENDED_BY_UNINSTALL})
    else:
        ops.append({"op": "add", "path": pointer("metadata", "annotations"), "value": mark})
    ops.append({"op": "add", "path": pointer(*SUSPEND[kind]), "value": True})
    return ops


def _drop(meta_path: tuple[str, ...], entries: object, keep: Mapping[str, object] | None = None,
          ) -> list[dict[str, Any]]:
    """Remove the opt-in and every raykueue.io/ key from one labels or annotations map."""
    if not isinstance(entries, Mapping):
        return []
    return [{"op": "remove", "path": pointer(*meta_path, key)} for key in entries
            if (key == c.STANDALONE_ANNOTATION or key.startswith(RAYKUEUE_PREFIX))
            and not (keep and key in keep)]


def handback_patches(kind: str, obj: Obj, queue: str) -> list[list[dict[str, Any]]]:
    """JSON patches, applied in order, that give a suspended opted-in object to Kueue.

    Kueue validates an object once it has a queue: an autoscaled one must be an
    elastic job, and that annotation may not appear in the same update as the
    queue (it is immutable there), so it comes first, alone. Everything is
    guarded by the object's uid. The object stays suspended: Kueue resumes it
    when it admits its Workload.
    """
    uid = str(metadata(obj).get("uid") or "")
    guard = {"op": "test", "path": "/metadata/uid", "value": uid}
    patches: list[list[dict[str, Any]]] = []
    elastic = autoscaling(obj, kind)
    if elastic and annotations(obj).get(c.KUEUE_ELASTIC_JOB_ANNOTATION) != "true":
        patches.append([guard, {"op": "add",
                                "path": pointer("metadata", "annotations", c.KUEUE_ELASTIC_JOB_ANNOTATION),
                                "value": "true"}])
    ops: list[dict[str, Any]] = [guard]
    meta = metadata(obj)
    if isinstance(meta.get("labels"), Mapping):
        ops.append({"op": "add", "path": pointer("metadata", "labels", c.QUEUE_LABEL), "value": queue})
    else:
        ops.append({"op": "add", "path": pointer("metadata", "labels"), "value": {c.QUEUE_LABEL: queue}})
    ops += _drop(("metadata", "labels"), meta.get("labels"))
    ops += _drop(("metadata", "annotations"), meta.get("annotations"))
    ops += restore_allocate_timeout(kind, obj)
    for path, template in templates(obj, kind):
        tmeta = metadata(template)
        ops += _drop((*path, "metadata", "labels"), tmeta.get("labels"))
        ops += _drop((*path, "metadata", "annotations"), tmeta.get("annotations"))
        if elastic and kind == c.RAYCLUSTER_KIND and c.KUEUE_ELASTIC_JOB_GATE not in gate_names(template):
            gates = spec(template).get("schedulingGates")
            if isinstance(gates, list):
                ops.append({"op": "add", "path": pointer(*path, "spec", "schedulingGates", "-"),
                            "value": {"name": c.KUEUE_ELASTIC_JOB_GATE}})
            else:
                ops.append({"op": "add", "path": pointer(*path, "spec", "schedulingGates"),
                            "value": [{"name": c.KUEUE_ELASTIC_JOB_GATE}]})
    patches.append(ops)
    return patches


def restore_allocate_timeout(kind: str, obj: Obj) -> list[dict[str, Any]]:
    """JSON patch ops removing the autoscaler's allocate timeout raykueue injected.

    Kueue admits a handed-back cluster whole; its pods wait for no per-pod quota,
    so Ray's own timeout applies again. Only the value raykueue wrote (its
    annotation says which) goes, tested in place: a value the user set, or
    changed since, stays.
    """
    injected = annotations(obj).get(INJECTED_ANNOTATION)
    if kind != c.RAYCLUSTER_KIND or not injected:
        return []
    at = (*CLUSTER_SPEC[kind], "autoscalerOptions", "env")
    env = get_path(obj, at)
    if not isinstance(env, list):
        return []
    for i, var in enumerate(env):
        if (isinstance(var, Mapping) and var.get("name") == ALLOCATE_TIMEOUT_ENV
                and var.get("value") == injected and "valueFrom" not in var):
            return [{"op": "test", "path": pointer(*at, str(i)), "value": dict(var)},
                    {"op": "remove", "path": pointer(*at, str(i))}]
    return []


# --- what the plan says ------------------------------------------------------------------------


def _unit_line(u: Unit) -> str:
    parts = [str(u.ref)]
    if u.pods:
        parts.append(f"{u.pods} pods ({u.gated} gated)")
    if u.deleting:
        parts.append("being deleted: only waited for")
    elif u.suspended:
        parts.append("suspended already" + (" by raykueue uninstall" if u.suspended_by_uninstall else ""))
    if u.autoscaling:
        parts.append("autoscaled")
    return "   " + "; ".join(parts)


def render(plan: Plan, *, act: bool) -> list[str]:
    """The plan in words; `act`: --yes was given."""
    if plan.blockers:
        head = "blocked: nothing is changed" if act else "the plan (a dry run: nothing is changed)"
    else:
        head = "acting on this plan" if act else "the plan (a dry run: nothing is changed; --yes acts on it)"
    lines = [f"raykueue uninstall: {head}"]
    if plan.blockers:
        lines.append("Blocked: nothing is done while any of these remains:")
        lines += [f"   {u.ref}: {u.blocker}" for u in plan.blockers]
    if plan.nothing_to_do:
        lines.append("Nothing of raykueue is left: no opted-in Ray object, raykueue pod, Workload "
                     "or webhook.")
        return lines
    step = 0

    def heading(text: str) -> None:
        nonlocal step
        step += 1
        lines.append(f"{step}. {text}")

    todo = [u for u in plan.units if not u.blocker]
    if todo:
        heading(f"Suspend {len(todo)} opted-in Ray object(s); KubeRay deletes their pods, gated or running, "
                "and each pod's Workload goes with it, so their quota is free:")
        lines += [_unit_line(u) for u in todo]
        heading("Wait until none of their pods is left.")
    if plan.webhooks:
        heading("Delete raykueue's webhook configurations (from here no object waits for raykueue): "
                + ", ".join(name for _, name in plan.webhooks))
    heading("Look again: suspend what was opted in meanwhile, delete raykueue's pods that no Ray object "
            "owns (nothing would recreate them)"
            + (": " + ", ".join(f"{p.namespace}/{p.name}" for p in plan.bare_pods) if plan.bare_pods else "")
            + f", and every raykueue Workload left ({plan.workloads} now; most go with their pods).")
    if todo:
        if plan.handback:
            heading("Hand back to Kueue (each stays suspended until Kueue admits it whole and resumes it):")
        else:
            heading("Leave them suspended and opted in (no --handback): nothing of them runs, nothing holds "
                    "quota. `raykueue uninstall --yes --handback` hands them to Kueue later; resuming one "
                    f"without a {c.QUEUE_LABEL} label runs it outside any quota.")
        for u in todo:
            if u.handback is not None:
                lines.append(f"   {u.ref} -> LocalQueue {u.handback.queue} (from {u.handback.source})")
                lines += [f"      {note}" for note in u.handback.notes]
            elif plan.handback:
                lines.append(f"   {u.ref}: not handed back: {u.handback_refusal}")
    if plan.kueues:
        lines.append("Left alone (opted in, but Kueue's already: they carry its queue label): "
                     + ", ".join(str(r) for r in plan.kueues))
    lines.append("Then remove raykueue itself: kubectl delete -k manifests/ --ignore-not-found "
                 "(or: helm uninstall raykueue -n raykueue-system).")
    return lines
