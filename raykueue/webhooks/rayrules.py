"""The first stage's rules for a Ray object: what it refuses, and why.

Each rule is a pure function of the object (and, on UPDATE, the old one) and of
what the edge read about the object's namespace; webhooks/rayobjects.py applies
them in order and turns the first refusal into the review's answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from raykueue.core import contract as c
from raykueue.core import submitter
from raykueue.core.objects import Obj, annotations, display_name
from raykueue.core.rayobjects import MANAGED_BY, admitted_whole, get, is_suspended, template_opt_in, templates
from raykueue.core.refusal import Refusal


@dataclass(frozen=True, slots=True)
class NamespaceFacts:
    """What the edge read from its caches about a Ray object's namespace."""

    default_queue_exists: bool = False
    # Kueue admits this kind whole here even without a queue label
    # (manageJobsWithoutQueueName, its namespace selector over the namespace's
    # labels); None: the namespace is not in the cache yet, so it cannot be told.
    kueue_manages_unqueued: bool | None = False
    namespace: str = ""


def kueue_takes(obj: Obj, old: Obj, facts: NamespaceFacts) -> str | Refusal | None:
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
    suspending = is_suspended(obj, kind) and not is_suspended(old, kind)
    if not suspending or admitted_whole(obj):
        return None
    if facts.kueue_manages_unqueued is None:
        return Refusal(f"{kind} {display_name(obj)} is being suspended, and raykueue does not know the "
                       f"labels of namespace {facts.namespace} yet: Kueue may be taking it (its "
                       "managedJobsNamespaceSelector selects namespaces by their labels); retry in a "
                       "moment")
    if facts.kueue_manages_unqueued:
        return (f"suspended in namespace {facts.namespace}, where Kueue manages every {kind} "
                "(manageJobsWithoutQueueName, and its managedJobsNamespaceSelector selects it)")
    return None



def opt_in_change(obj: Obj, old: Obj, was: str | None, now: str | None) -> Refusal | None:
    """The opt-in of a live cluster does not change: one cluster, one admission regime."""
    kind = str(obj.get("kind"))
    change = (f"{c.STANDALONE_ANNOTATION} may not change from {_shown(was)} to {_shown(now)} on "
              f"{kind} {display_name(obj)} while it runs: its pods would be under two admission "
              "regimes (raykueue's per-pod Workloads and Kueue's)")
    if kind == c.RAYSERVICE_KIND:
        return Refusal(f"{change}. Create a new RayService with the opt-in you want and delete "
                       "this one")
    if is_suspended(old, kind) and is_suspended(obj, kind):
        return None
    suspend = _RAYJOB_SUSPEND if kind == c.RAYJOB_KIND else "spec.suspend: true; its pods are deleted"
    return Refusal(f"{change}. Suspend it first ({suspend}), change "
                   "the annotation in another update, then resume it")


def cannot_opt_in(obj: Obj, facts: NamespaceFacts) -> Refusal | None:
    """Why this object cannot be raykueue's, checked when it opts in."""
    kind = str(obj.get("kind"))
    what = f"{kind} {display_name(obj)}"
    if facts.kueue_manages_unqueued is None:
        return Refusal(f"raykueue does not know the labels of namespace {facts.namespace} yet, and "
                       "Kueue manages jobs without a queue name in the namespaces its "
                       "managedJobsNamespaceSelector selects; retry in a moment")
    if facts.kueue_manages_unqueued:
        return Refusal(
            f"{what} opts in to raykueue in namespace {facts.namespace}, where Kueue admits every "
            f"{kind} whole (manageJobsWithoutQueueName, and its managedJobsNamespaceSelector "
            "selects this namespace): Kueue would suspend it and admit it as one Workload while "
            "raykueue queued its pods too, counting their quota twice. Run it in a namespace "
            f"that selector leaves out, or remove {c.STANDALONE_ANNOTATION} to leave it to Kueue")
    managed_by = get(obj, MANAGED_BY)
    if managed_by == c.MULTIKUEUE_MANAGED_BY:
        return Refusal(f"{what} sets spec.managedBy: {managed_by}: MultiKueue would run it in "
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


def submitter_rule(obj: Obj, old: Obj | None) -> Refusal | None:
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
        return Refusal(
            f"{what} submits its job in K8sJobMode (KubeRay's default when spec.submissionMode is "
            "unset) to an existing cluster (spec.clusterSelector): that cluster's head reserved no "
            "quota for a submitter pod, which would run outside Kueue's quota. Set "
            "spec.submissionMode: HTTPMode (KubeRay posts the job to the cluster's dashboard; no "
            "pod. SidecarMode is not allowed with clusterSelector), or replace spec.clusterSelector "
            "with a spec.rayClusterSpec of its own, whose head reserves the submitter's quota")
    if now is not None and annotations(obj).get(c.GANG_ANNOTATION) == "true":
        # A gang's base Workload is built per worker group (controller/gang/base.py) and has no
        # submitter podSet yet: the submitter would run on quota nobody holds.
        return Refusal(
            f"{what} asks for gang start ({c.GANG_ANNOTATION}: \"true\") and submits its job in "
            "K8sJobMode (KubeRay's default when spec.submissionMode is unset), whose submitter pod "
            f"a gang's Workload does not reserve. Set spec.submissionMode: HTTPMode (no pod), or "
            f"{_SIDECAR}, or remove the gang annotation to admit the "
            "cluster pod by pod, whose head reserves the submitter's quota")
    if old is None or submitter.encode(now) == submitter.encode(submitter.pod_spec(old)):
        return None
    if is_suspended(old, c.RAYJOB_KIND) and is_suspended(obj, c.RAYJOB_KIND):
        return None  # no cluster: the next one is made from the new spec
    needs = f" (for {_SIDECAR})" if submitter.mode(obj) == c.SIDECAR_MODE else ""
    return Refusal(
        f"what the submitter of {what} costs may not change while it runs (spec.submissionMode "
        f"{submitter.mode(old)} -> {submitter.mode(obj)}, or spec.submitterPodTemplate): its head's "
        "Workload reserved the submitter's quota when it was admitted (K8sJobMode: the submitter "
        "pod's requests, KubeRay's default 500m CPU / 200Mi; HTTPMode, InteractiveMode, "
        "SidecarMode: none), so the running cluster would start a submitter nobody reserved "
        f"quota for. Suspend it first ({_RAYJOB_SUSPEND}), make the "
        f"change in another update{needs}, then resume it (spec.suspend: false)")


def introduced_template_opt_in(obj: Obj, old: Obj | None) -> str | None:
    """The first pod template that carries the opt-in annotation its old self did not."""
    before = [value for _, value in _template_opt_ins(old)] if old is not None else []
    for i, (where, value) in enumerate(_template_opt_ins(obj)):
        if value is not None and (i >= len(before) or before[i] != value):
            return where
    return None


def _template_opt_ins(obj: Obj) -> Iterator[tuple[str, str | None]]:
    """(which template, its opt-in annotation) for every pod template of the object, in order."""
    for where, template in templates(obj):
        yield _describe_template(where), template_opt_in(template)
    submitter_template = get(obj, ("spec", "submitterPodTemplate"))
    if obj.get("kind") == c.RAYJOB_KIND and isinstance(submitter_template, dict):
        yield "spec.submitterPodTemplate", template_opt_in(submitter_template)


def _describe_template(where: tuple[str, ...]) -> str:
    return ".".join(f"[{p}]" if p.isdigit() else p for p in where).replace(".[", "[")


def _shown(value: str | None) -> str:
    return "(none)" if value is None else f'"{value}"'
