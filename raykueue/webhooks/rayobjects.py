"""What raykueue does to a RayCluster, RayJob or RayService around Kueue's webhooks.

Kueue acts on a Ray object that carries the `kueue.x-k8s.io/queue-name` label:
its webhook suspends it and its reconciler admits the whole cluster as one
Workload. Its webhook also gives an unlabelled object the namespace's `default`
LocalQueue. For an opted-in object both would take the cluster away from
raykueue, so the object passes two of our webhooks around Kueue's (the API
server calls mutating configurations in name order):

- FIRST (configuration `aa-raykueue-first`, before Kueue's) decides the one
  opt-in rule and refuses what breaks it (docs/KUEUE.md, "One opt-in rule"); for
  an opted-in object it moves the queue label to our annotation
  `raykueue.io/queue-name`, which Kueue never reads, notes a suspend the user
  asked for, and, on a RayCluster, stamps every pod template with
  `raykueue.io/opted-in` (the pod webhook's scope) and raises the Ray
  autoscaler's allocate timeout. A RayJob's or RayService's cluster spec is left
  as written: KubeRay copies their annotations onto the RayCluster it makes, and
  that RayCluster passes here too. So a RayService's cluster hash never changes
  because of raykueue.
- LAST (in `zz-raykueue-mutating`, after Kueue's) takes back only what Kueue's
  defaulting added: its `default` queue label, the suspend it set because of a
  queue label, the MultiKueue `managedBy`. A queue label any other webhook added
  is moved to our annotation (refused when it names another queue than ours); a
  suspend set without a queue label is nobody's defaulting and is kept.

Both are pure functions of the object (and, on UPDATE, the old one), of facts the
edge read from caches, and of the policy; both are idempotent, so a reinvocation
(LAST runs IfNeeded, after a reinvoked Kueue webhook) or a repeated `kubectl apply`
changes nothing more.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum

from raykueue.core import contract as c
from raykueue.core import submitter
from raykueue.core.jsonpointer import pointer
from raykueue.core.objects import Obj, annotations, display_name, labels, metadata
from raykueue.webhooks.autoscaler_env import INJECTED_ANNOTATION, allocate_timeout_patch
from raykueue.webhooks.mutate import Patch, drop_entries, put_entries


class Stage(Enum):
    FIRST = "first"
    LAST = "last"


# Where each kind keeps its RayCluster spec (pod templates) and its suspend flag.
CLUSTER_SPEC: dict[str, tuple[str, ...]] = {
    c.RAYCLUSTER_KIND: ("spec",),
    c.RAYJOB_KIND: ("spec", "rayClusterSpec"),
    c.RAYSERVICE_KIND: ("spec", "rayClusterConfig"),
}
_SUSPEND: dict[str, tuple[str, ...]] = {
    c.RAYCLUSTER_KIND: ("spec", "suspend"),
    c.RAYJOB_KIND: ("spec", "suspend"),
    c.RAYSERVICE_KIND: ("spec", "rayClusterConfig", "suspend"),
}
RAY_OBJECT_KINDS = tuple(CLUSTER_SPEC)
_MANAGED_BY = ("spec", "managedBy")


@dataclass(frozen=True, slots=True)
class RayObjectPolicy:
    """Settings the Ray-object stages apply (app/settings.py)."""

    # Written into an opted-in RayCluster's autoscaler env; None or 0: off.
    allocate_timeout: int | None = None
    # WorkloadPriorityClasses a worker may not name: a worker with the head's
    # priority could preempt other clusters' heads in the cohort.
    head_only_priority_classes: frozenset[str] = frozenset({c.DEFAULT_HEAD_PRIORITY_CLASS})


@dataclass(frozen=True, slots=True)
class Facts:
    """What the edge read from its caches about the object's namespace."""

    default_queue_exists: bool = False
    # Kueue admits this kind whole here even without a queue label
    # (manageJobsWithoutQueueName, its namespace selector over the namespace's
    # labels); None: the namespace is not in the cache yet, so it cannot be told.
    kueue_manages_unqueued: bool | None = False
    namespace: str = ""


@dataclass(frozen=True, slots=True)
class Refused:
    message: str


@dataclass(frozen=True, slots=True)
class Changed:
    """An allowed object: the patch (maybe empty) and what was done, for the log."""

    patch: Patch = field(default_factory=list)
    what: str = ""


Answer = Changed | Refused


def opt_in_value(obj: Obj | None) -> str | None:
    """The object's own opt-in annotation: the one place the opt-in is read from."""
    return annotations(obj).get(c.STANDALONE_ANNOTATION) if obj is not None else None


def is_opted_in(obj: Obj | None) -> bool:
    return opt_in_value(obj) == "true"


def first(obj: Obj, old: Obj | None, operation: str, facts: Facts, policy: RayObjectPolicy) -> Answer:
    """The first stage (before Kueue's webhooks); see the module docstring."""
    kind = str(obj.get("kind"))
    what = f"{kind} {display_name(obj)}"
    value = opt_in_value(obj)
    if value is not None and value not in c.STANDALONE_VALUES:
        return Refused(f'annotation {c.STANDALONE_ANNOTATION}="{value}" on {what} is not valid: set it '
                       'to "true" to queue this Ray cluster in Kueue pod by pod, or "false" (or '
                       "nothing) to leave it to Kueue")
    updating = operation == "UPDATE" and old is not None
    if handed_to_kueue(old if updating else obj):
        # Kueue's since the hand-over (or, on CREATE, a RayCluster KubeRay made from a
        # RayJob/RayService that was handed over: it copies the annotations): nothing
        # of raykueue's goes back on, and its opt-in may go without a suspend, the
        # regime having changed already.
        return Changed(_unstamp(obj), f"handed to Kueue ({c.HANDED_TO_KUEUE_ANNOTATION})")
    was = opt_in_value(old) if updating else None
    if updating and was != value:
        refusal = _opt_in_change(obj, old or {}, was, value)
        if refusal is not None:
            return refusal
    introduced = _introduced_template_opt_in(obj, old if updating else None)
    if introduced is not None:
        return Refused(
            f"annotation {c.STANDALONE_ANNOTATION} on {introduced} of {what}: the opt-in is per "
            f"cluster and is read only from the {kind}'s own metadata.annotations. Remove it "
            f"from the pod template and set {c.STANDALONE_ANNOTATION}: \"true\" on the {kind} "
            "to queue the whole cluster pod by pod, or nothing to leave it to Kueue")
    if value != "true":
        # Not opted in (or the opt-in was just removed from a suspended cluster):
        # its stamps go with it, so its pods are Kueue's again.
        return Changed(_unstamp(obj), "not opted in")
    newly = not updating or was != value
    if not newly:
        taken = kueue_takes(obj, old or {}, facts)
        if isinstance(taken, Refused):
            return taken
        if taken is not None:
            return Changed(_handover_patch(obj, facts, taken), f"handed to Kueue: {taken}")
    if not newly and labels(old).get(c.QUEUE_LABEL):
        # Opted in before raykueue was installed, with Kueue's queue label, so Kueue
        # admits it whole: moving the label would be refused by Kueue's validating
        # webhook on a running object, and stamping it would count its pods twice.
        # Suspend it and set the opt-in again to hand it to raykueue.
        return Changed([], f"Kueue admits it whole ({c.QUEUE_LABEL} since before raykueue)")
    refusal = ((_cannot_opt_in(obj, facts) if newly else None)
               or _submitter_rule(obj, old if updating else None)
               or _head_priority_on_a_worker(obj, old if updating else None, policy))
    if refusal is not None:
        return refusal
    return Changed(_first_patch(obj, operation, policy), "opted in")


def last(obj: Obj, operation: str, facts: Facts) -> Answer:
    """The last stage (after Kueue's webhooks): undo Kueue's defaulting, keep everyone else's."""
    if not is_opted_in(obj):
        return Changed([], "not opted in")
    if handed_to_kueue(obj):
        # The first stage gave it to Kueue in this request or before: Kueue's queue
        # label and suspend are Kueue's to keep.
        return Changed([], "handed to Kueue; nothing to undo")
    kind = str(obj.get("kind"))
    queue = labels(obj).get(c.QUEUE_LABEL)
    ops: Patch = []
    done: list[str] = []
    if queue:
        if operation == "CREATE" and queue == c.DEFAULT_LOCAL_QUEUE and facts.default_queue_exists:
            # Kueue's defaulting (jobframework ApplyDefaultLocalQueue...), CREATE only.
            ops += drop_entries(("metadata", "labels"), metadata(obj).get("labels"), [c.QUEUE_LABEL])
            done.append("Kueue's default queue removed")
        else:
            # The first stage moved every queue label it saw: this one was added
            # after it, by another webhook (a policy engine's mandated queue).
            ours = annotations(obj).get(c.QUEUE_ANNOTATION)
            if ours and ours != queue:
                return Refused(
                    f"{kind} {display_name(obj)} carries label {c.QUEUE_LABEL}={queue}, added by an "
                    f"admission webhook after raykueue's first one, and annotation "
                    f"{c.QUEUE_ANNOTATION}={ours}: an opted-in cluster has one queue. Make them agree "
                    "(set the annotation to the queue your policy requires), or exempt opted-in "
                    "clusters from that policy")
            ops += _move_queue(("metadata",), metadata(obj))
            done.append(f"queue {queue} kept as {c.QUEUE_ANNOTATION}")
    if operation == "CREATE":
        noted = annotations(obj).get(c.SUSPEND_REQUESTED_ANNOTATION) == "true"
        if _get(obj, _SUSPEND[kind]) is True and queue and not noted:
            # Kueue suspends every object that has a queue label when its webhook
            # runs; without one, a suspend is someone else's (an approval flow) and stays.
            ops.append({"op": "replace", "path": pointer(*_SUSPEND[kind]), "value": False})
            done.append("Kueue's suspend undone")
        if _get(obj, _MANAGED_BY) == c.MULTIKUEUE_MANAGED_BY:
            # The first stage refuses a user's MultiKueue managedBy, so this is
            # Kueue's defaulting (a default queue backed by MultiKueue); without
            # it KubeRay runs the cluster here (nil means KubeRay's own).
            ops.append({"op": "remove", "path": pointer(*_MANAGED_BY)})
            done.append("Kueue's MultiKueue managedBy removed")
    return Changed(ops, "; ".join(done) or "nothing of Kueue's to undo")


# --- the hand-over to Kueue ---------------------------------------------------------


def handed_to_kueue(obj: Obj | None) -> bool:
    return obj is not None and c.HANDED_TO_KUEUE_ANNOTATION in annotations(obj)


def kueue_takes(obj: Obj, old: Obj, facts: Facts) -> str | Refused | None:
    """Why Kueue is taking this running opted-in object in this UPDATE, if it is.

    Kueue's job reconciler acts on an object without a queue label only where it
    manages jobs without a queue name (manageJobsWithoutQueueName, and its
    managedJobsNamespaceSelector picks the namespace; Kueue's
    jobframework/reconciler.go `ReconcileGenericJob`). The opt-in is refused in such
    a namespace, so this is a namespace labelled (or a Configuration changed) after
    the opt-in. On the object's next event Kueue finds no Workload matching the
    running object and suspends it (`ensureOneWorkload`, "No matching Workload") -
    the UPDATE seen here; once its pods are gone it makes one Workload for it, with
    the queue of its label. A user's suspend there ends the same way: a suspended
    object without a Workload is one Kueue makes a Workload for. So the object is
    handed over on that suspend: refusing it would only retry Kueue's patch, and
    keeping the stamps would have every pod refused once Kueue resumes the cluster
    (its ancestor is Kueue's, so neither webhook gates them).
    """
    kind = str(obj.get("kind"))
    suspending = _get(obj, _SUSPEND[kind]) is True and _get(old, _SUSPEND[kind]) is not True
    if not suspending or labels(obj).get(c.QUEUE_LABEL):
        return None
    if facts.kueue_manages_unqueued is None:
        return Refused(f"{kind} {display_name(obj)} is being suspended, and raykueue does not know the "
                       f"labels of namespace {facts.namespace} yet: Kueue may be taking it (its "
                       "managedJobsNamespaceSelector selects namespaces by their labels); retry in a "
                       "moment")
    if facts.kueue_manages_unqueued:
        return (f"suspended in namespace {facts.namespace}, where Kueue manages every {kind} "
                "(manageJobsWithoutQueueName, and its managedJobsNamespaceSelector selects it)")
    return None


def _handover_patch(obj: Obj, facts: Facts, why: str) -> Patch:
    """Kueue's from now on: templates unstamped, raykueue's queue as Kueue's label, a note."""
    meta = metadata(obj)
    queue = annotations(obj).get(c.QUEUE_ANNOTATION) or (
        c.DEFAULT_LOCAL_QUEUE if facts.default_queue_exists else None)
    ops = _unstamp(obj)
    # The annotations map holds the opt-in, so it is there to add to.
    ops += drop_entries(("metadata", "annotations"), meta.get("annotations"), [c.QUEUE_ANNOTATION])
    ops += put_entries(("metadata", "annotations"), meta.get("annotations"),
                       {c.HANDED_TO_KUEUE_ANNOTATION: why})
    if queue:
        ops += put_entries(("metadata", "labels"), meta.get("labels"), {c.QUEUE_LABEL: queue})
    return ops


# --- the first stage's rules ------------------------------------------------------


def _opt_in_change(obj: Obj, old: Obj, was: str | None, now: str | None) -> Refused | None:
    """The opt-in of a live cluster does not change: one cluster, one admission regime."""
    kind = str(obj.get("kind"))
    change = (f"{c.STANDALONE_ANNOTATION} may not change from {_shown(was)} to {_shown(now)} on "
              f"{kind} {display_name(obj)} while it runs: its pods would be under two admission "
              "regimes (raykueue's per-pod Workloads and Kueue's)")
    if kind == c.RAYSERVICE_KIND:
        return Refused(f"{change}. Create a new RayService with the opt-in you want and delete "
                       "this one")
    if _get(old, _SUSPEND[kind]) is True and _get(obj, _SUSPEND[kind]) is True:
        return None
    suspend = _RAYJOB_SUSPEND if kind == c.RAYJOB_KIND else "spec.suspend: true; its pods are deleted"
    return Refused(f"{change}. Suspend it first ({suspend}), change "
                   "the annotation in another update, then resume it")


def _cannot_opt_in(obj: Obj, facts: Facts) -> Refused | None:
    """Why this object cannot be raykueue's, checked when it opts in."""
    kind = str(obj.get("kind"))
    what = f"{kind} {display_name(obj)}"
    if facts.kueue_manages_unqueued is None:
        return Refused(f"raykueue does not know the labels of namespace {facts.namespace} yet, and "
                       "Kueue manages jobs without a queue name in the namespaces its "
                       "managedJobsNamespaceSelector selects; retry in a moment")
    if facts.kueue_manages_unqueued:
        return Refused(
            f"{what} opts in to raykueue in namespace {facts.namespace}, where Kueue admits every "
            f"{kind} whole (manageJobsWithoutQueueName, and its managedJobsNamespaceSelector "
            "selects this namespace): Kueue would suspend it and admit it as one Workload while "
            "raykueue queued its pods too, counting their quota twice. Run it in a namespace "
            f"that selector leaves out, or remove {c.STANDALONE_ANNOTATION} to leave it to Kueue")
    managed_by = _get(obj, _MANAGED_BY)
    if managed_by == c.MULTIKUEUE_MANAGED_BY:
        return Refused(f"{what} sets spec.managedBy: {managed_by}: MultiKueue would run it in "
                       "another cluster as one Workload, not pod by pod here. Remove spec.managedBy, "
                       f"or remove {c.STANDALONE_ANNOTATION} to leave it to Kueue")
    return None


# How a RayJob is suspended as KubeRay's validation (v1.6.0) allows it.
_RAYJOB_SUSPEND = ("spec.suspend: true, which KubeRay allows only with spec.shutdownAfterJobFinishes: "
                   "true and without spec.clusterSelector; its cluster and submitter are deleted")


# Everything KubeRay's RayJob validation (utils.ValidateRayJobSpec, v1.6.0) asks of
# SidecarMode, said wherever raykueue advises it, so that following the advice does
# not meet a KubeRay error next.
_SIDECAR = ("SidecarMode (the submitter runs in the head pod and is counted with it; KubeRay "
            "then refuses spec.submitterPodTemplate, spec.submitterConfig and "
            "spec.clusterSelector, and needs the head template's restartPolicy Never or unset)")


def _submitter_rule(obj: Obj, old: Obj | None) -> Refused | None:
    """A RayJob's submitter pod runs only on quota its head's Workload reserved (core/submitter.py).

    K8sJobMode is accounted: the head reserves the submitter's podSet. What cannot
    be accounted is refused, with every way out: a submitter for a cluster this
    RayJob did not make (clusterSelector), and a change of what the submitter
    costs while the cluster that reserved the old cost may be running.
    """
    if obj.get("kind") != c.RAYJOB_KIND:
        return None
    what = f"RayJob {display_name(obj)}"
    now = submitter.pod_spec(obj)
    if now is not None and submitter.uses_cluster_selector(obj):
        return Refused(
            f"{what} submits its job in K8sJobMode (KubeRay's default when spec.submissionMode is "
            "unset) to an existing cluster (spec.clusterSelector): that cluster's head reserved no "
            "quota for a submitter pod, which would run outside Kueue's quota. Set "
            "spec.submissionMode: HTTPMode (KubeRay posts the job to the cluster's dashboard; no "
            "pod. SidecarMode is not allowed with clusterSelector), or replace spec.clusterSelector "
            "with a spec.rayClusterSpec of its own, whose head reserves the submitter's quota")
    if now is not None and annotations(obj).get(c.GANG_ANNOTATION) == "true":
        # A gang's base Workload is built per worker group (gang_base.py) and has no
        # submitter podSet yet: the submitter would run on quota nobody holds.
        return Refused(
            f"{what} asks for gang start ({c.GANG_ANNOTATION}: \"true\") and submits its job in "
            "K8sJobMode (KubeRay's default when spec.submissionMode is unset), whose submitter pod "
            f"a gang's Workload does not reserve. Set spec.submissionMode: HTTPMode (no pod), or "
            f"{_SIDECAR}, or remove the gang annotation to admit the "
            "cluster pod by pod, whose head reserves the submitter's quota")
    if old is None or submitter.encode(now) == submitter.encode(submitter.pod_spec(old)):
        return None
    if _get(old, _SUSPEND[c.RAYJOB_KIND]) is True and _get(obj, _SUSPEND[c.RAYJOB_KIND]) is True:
        return None  # no cluster: the next one is made from the new spec
    needs = f" (for {_SIDECAR})" if submitter.mode(obj) == c.SIDECAR_MODE else ""
    return Refused(
        f"what the submitter of {what} costs may not change while it runs (spec.submissionMode "
        f"{submitter.mode(old)} -> {submitter.mode(obj)}, or spec.submitterPodTemplate): its head's "
        "Workload reserved the submitter's quota when it was admitted (K8sJobMode: the submitter "
        "pod's requests, KubeRay's default 500m CPU / 200Mi; HTTPMode, InteractiveMode, "
        "SidecarMode: none), so the running cluster would start a submitter nobody reserved "
        f"quota for. Suspend it first ({_RAYJOB_SUSPEND}), make the "
        f"change in another update{needs}, then resume it (spec.suspend: false)")


def _head_priority_on_a_worker(obj: Obj, old: Obj | None, policy: RayObjectPolicy) -> Refused | None:
    """A worker group that newly names a head-only WorkloadPriorityClass."""
    before = {name: cls for name, cls in _worker_classes(old)} if old is not None else {}
    for name, cls in _worker_classes(obj):
        if cls in policy.head_only_priority_classes and before.get(name) != cls:
            return Refused(
                f"worker group {name} of {obj.get('kind')} {display_name(obj)} names "
                f"{c.PRIORITY_CLASS_LABEL}={cls}, which only Ray heads may use (it would let a worker "
                "preempt other clusters' heads). Remove the label (workers get the worker class) "
                "or name a worker class")
    return None


def _first_patch(obj: Obj, operation: str, policy: RayObjectPolicy) -> Patch:
    kind = str(obj.get("kind"))
    ops = _move_queue(("metadata",), metadata(obj))
    if kind == c.RAYCLUSTER_KIND:
        # Pods are made from a RayCluster's templates: the stamp goes there, and
        # the allocate timeout too, on every update it is missing from (a
        # re-apply replaces `workerGroupSpecs` and `autoscalerOptions.env` whole).
        cluster = _get(obj, CLUSTER_SPEC[kind])
        if isinstance(cluster, dict):
            timeout_ops = allocate_timeout_patch(cluster, policy.allocate_timeout,
                                                 at=pointer(*CLUSTER_SPEC[kind]))
            if timeout_ops and policy.allocate_timeout:
                ops += timeout_ops + put_entries(
                    ("metadata", "annotations"), metadata(obj).get("annotations"),
                    {INJECTED_ANNOTATION: str(int(policy.allocate_timeout))})
        for where, template in _cluster_templates(obj):
            meta = _dict(template.get("metadata"))
            ops += _move_queue((*where, "metadata"), meta)
            ops += _stamp((*where, "metadata"), template)
            if where[-2:] == ("headGroupSpec", "template"):
                ops += _head_submitter((*where, "metadata"), template, annotations(obj))
    if kind == c.RAYJOB_KIND:
        ops += _rayjob_submitter(obj)
    if operation == "CREATE":
        suspended = _get(obj, _SUSPEND[kind]) is True
        meta_annotations = metadata(obj).get("annotations")
        if suspended:
            ops += put_entries(("metadata", "annotations"), meta_annotations,
                               {c.SUSPEND_REQUESTED_ANNOTATION: "true"})
        else:
            # KubeRay copies a RayJob's annotations onto its RayCluster: a note
            # from the RayJob's own creation says nothing about this one.
            ops += drop_entries(("metadata", "annotations"), meta_annotations,
                                [c.SUSPEND_REQUESTED_ANNOTATION])
    return ops


def _rayjob_submitter(obj: Obj) -> Patch:
    """The RayJob's submitter as its spec says (core/submitter.py), written on every
    update that reaches here: a value a user wrote by hand is replaced."""
    meta_annotations = metadata(obj).get("annotations")
    value = submitter.encode(submitter.pod_spec(obj))
    if value is None:
        return drop_entries(("metadata", "annotations"), meta_annotations, [c.SUBMITTER_ANNOTATION])
    return put_entries(("metadata", "annotations"), meta_annotations, {c.SUBMITTER_ANNOTATION: value})


def _head_submitter(meta_path: tuple[str, ...], template: Obj,
                    cluster_annotations: Mapping[str, str]) -> Patch:
    """The RayCluster's submitter (KubeRay copied the RayJob's annotations onto it)
    onto its head template, so the head pod's Workload reserves it; a head template
    never keeps one its cluster lacks. Runs after `_stamp`, which made the
    template's metadata if it had none."""
    value = cluster_annotations.get(c.SUBMITTER_ANNOTATION)
    current = _dict(template.get("metadata")).get("annotations")
    if value is None:
        return drop_entries((*meta_path, "annotations"), current, [c.SUBMITTER_ANNOTATION])
    return put_entries((*meta_path, "annotations"), current, {c.SUBMITTER_ANNOTATION: value})


def _stamp(meta_path: tuple[str, ...], template: Obj) -> Patch:
    meta = template.get("metadata")
    if not isinstance(meta, dict):
        return [{"op": "add", "path": pointer(*meta_path),
                 "value": {"labels": {c.OPTED_IN_LABEL: c.OPTED_IN_VALUE}}}]
    return put_entries((*meta_path, "labels"), meta.get("labels"), {c.OPTED_IN_LABEL: c.OPTED_IN_VALUE})


def _unstamp(obj: Obj) -> Patch:
    ops: Patch = []
    for where, template in _cluster_templates(obj):
        ops += drop_entries((*where, "metadata", "labels"), _dict(template.get("metadata")).get("labels"),
                            [c.OPTED_IN_LABEL])
    return ops


def _move_queue(meta_path: tuple[str, ...], meta: Obj) -> Patch:
    queue = _dict(meta.get("labels")).get(c.QUEUE_LABEL)
    if not queue:
        return []
    return [*drop_entries((*meta_path, "labels"), meta.get("labels"), [c.QUEUE_LABEL]),
            *put_entries((*meta_path, "annotations"), meta.get("annotations"), {c.QUEUE_ANNOTATION: queue})]


def _introduced_template_opt_in(obj: Obj, old: Obj | None) -> str | None:
    """The first pod template that carries the opt-in annotation its old self did not."""
    before = [value for _, value in _template_opt_ins(old)] if old is not None else []
    for i, (where, value) in enumerate(_template_opt_ins(obj)):
        if value is not None and (i >= len(before) or before[i] != value):
            return where
    return None


def _template_opt_ins(obj: Obj) -> Iterator[tuple[str, str | None]]:
    """(which template, its opt-in annotation) for every pod template of the object, in order."""
    for where, template in _cluster_templates(obj):
        yield _describe_template(where), _dict(_dict(template.get("metadata")).get("annotations")).get(
            c.STANDALONE_ANNOTATION)
    submitter = _get(obj, ("spec", "submitterPodTemplate"))
    if obj.get("kind") == c.RAYJOB_KIND and isinstance(submitter, dict):
        yield "spec.submitterPodTemplate", _dict(_dict(submitter.get("metadata")).get("annotations")).get(
            c.STANDALONE_ANNOTATION)


def _worker_classes(obj: Obj | None) -> Iterator[tuple[str, str]]:
    """(group name, priority-class label) of each worker template that names one."""
    for where, template in _cluster_templates(obj or {}):
        cls = _dict(_dict(template.get("metadata")).get("labels")).get(c.PRIORITY_CLASS_LABEL)
        if "workerGroupSpecs" in where and cls:
            group = _get(obj or {}, (*where[:-1], "groupName"))
            yield (group if isinstance(group, str) else f"#{where[-2]}"), cls


def _cluster_templates(obj: Obj) -> Iterator[tuple[tuple[str, ...], Obj]]:
    kind = obj.get("kind")
    if kind not in CLUSTER_SPEC:
        return
    path = CLUSTER_SPEC[kind]
    cluster = _get(obj, path)
    if not isinstance(cluster, dict):
        return
    head = _dict(_dict(cluster.get("headGroupSpec")).get("template"))
    if head:
        yield (*path, "headGroupSpec", "template"), head
    groups = cluster.get("workerGroupSpecs")
    for i, group in enumerate(groups if isinstance(groups, list) else []):
        template = _dict(_dict(group).get("template"))
        if template:
            yield (*path, "workerGroupSpecs", str(i), "template"), template


def _describe_template(where: tuple[str, ...]) -> str:
    return ".".join(f"[{p}]" if p.isdigit() else p for p in where).replace(".[", "[")


def _shown(value: str | None) -> str:
    return "(none)" if value is None else f'"{value}"'


def _get(obj: Obj, path: tuple[str, ...]) -> object:
    """The value at `path` (list items by their index), None where it ends early."""
    node: object = obj
    for part in path:
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, dict):
            node = node.get(part)
        else:
            return None
    return node


def _dict(value: object) -> Obj:
    return value if isinstance(value, dict) else {}

