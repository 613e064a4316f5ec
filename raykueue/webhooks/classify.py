"""What raykueue should do with a pod at creation: the defaulting decision.

`classify` is a pure function of the pod, of what the caller already knows
about the pod's owners and of the policy. The owners come from caches; the API
server is never asked on the common path, only once, off the event loop, for a
stamped pod whose Ray owner the caches lack (`OwnerUnread`: the edge reads the
owner chain live and classifies again). It answers Skip (not ours), Refusal
(ours but unusable as given, with a message that says what to change) or Manage
(gate it, with the queue and priority resolved and where each came from).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from raykueue.core import contract as c
from raykueue.core import priority
from raykueue.core.objects import Obj, annotations, display_name, is_dns1123_subdomain, labels, spec
from raykueue.core.podrole import has_ray_owner, kueue_claims, role_of
from raykueue.core.priority import PriorityPolicy
from raykueue.core.rayobjects import admitted_whole, group_minimums, handed_to_kueue
from raykueue.core.refusal import Refusal


@dataclass(frozen=True, slots=True)
class PodContext:
    """What the edge resolved from its caches for one pod (empty when the server
    runs without a cluster: then only the pod itself can be consulted).

    `owners` is the Ray owner chain, nearest first (RayCluster, then the
    RayJob or RayService that owns it). `unresolved_owner` names an owner the
    pod points at that the caches do not hold (yet): a stamped pod's queue or
    gang may come from it, so such a pod's decision waits on a live read of it
    (`live`), or without one is sent back for a retry; any other pod is left alone.
    """

    owners: Sequence[Obj] = ()
    unresolved_owner: str | None = None
    # Reads the pod's owner chain from the API server and answers the context
    # again (blocking: never on the event loop); None without a live reader, and
    # in the context it answers, so that a pod's owners are read live once.
    live: Callable[[Obj, str], PodContext] | None = None
    # What the live read found of `unresolved_owner`: the API server says it does
    # not exist, or the read failed with this error.
    owner_absent: bool = False
    owner_read_error: str | None = None
    default_queue_exists: bool = False
    priority_values: Mapping[str, int] = field(default_factory=dict)
    # What Kueue's Configuration says (the edge reads it): the Ray kinds whose
    # integration is on, and whether Kueue takes such objects in this namespace
    # even without a queue label (manageJobsWithoutQueueName).
    kueue_job_kinds: frozenset[str] = frozenset()
    kueue_manages_unqueued: bool = False


@dataclass(frozen=True, slots=True)
class Skip:
    reason: str
    warning: str | None = None


@dataclass(frozen=True, slots=True)
class Manage:
    role: str
    queue: str
    queue_source: str
    priority_class: str
    priority_source: str
    # (PriorityClass name, value) to write into the pod spec, when configured.
    pod_priority: tuple[str, int] | None = None
    warnings: tuple[str, ...] = ()
    # Kueue's pod webhook took the pod earlier in this request (its label, gate
    # and finalizer are on it); the patch takes it back.
    taken_from_kueue: bool = False
    # A gang cluster (docs/GANG.md): each worker group's base count, by group.
    gang: Mapping[str, int] | None = None


@dataclass(frozen=True, slots=True)
class OwnerUnread(Refusal):
    """A refusal only because the caches lack the pod's Ray owner (for a gang, its
    RayCluster): the edge may settle it by reading the owner chain live."""


Decision = Skip | Refusal | Manage


def classify(pod: Obj, ctx: PodContext, policy: PriorityPolicy) -> Decision:
    role = role_of(pod)
    if role is None:
        return Skip("not a Ray head or worker")

    opt_in = _opt_in(pod, ctx)
    if isinstance(opt_in, Refusal | Skip):
        return opt_in

    kueue_job = _kueue_job(ctx, stamped=labels(pod).get(c.OPTED_IN_LABEL) == c.OPTED_IN_VALUE)
    if kueue_job is not None:
        # Kueue admits the whole cluster through this owner; gating its pods as
        # well would count their quota twice.
        return Skip(
            f"Kueue admits {kueue_job} as a whole",
            warning=(
                f"{kueue_job} is managed by Kueue (it carries {c.QUEUE_LABEL}, or Kueue manages "
                "jobs without a queue name here), so raykueue leaves its pods alone; check that "
                f"raykueue's {c.FIRST_MUTATING_WEBHOOK_CONFIG} webhook configuration is installed"
            ),
        )

    # At creation nothing of Kueue's exists for the pod yet: an opted-in pod that
    # Kueue's pod webhook took earlier in this request is taken back.
    taken = kueue_claims(pod) is not None

    queue = _queue(pod, ctx, role, taken)
    if isinstance(queue, Refusal):
        return queue
    queue_name, queue_source = queue

    real_head = priority.is_real_head(pod, role)
    chosen = priority.choose(priority.named(labels(pod).get(c.PRIORITY_CLASS_LABEL)), _owner_class(ctx),
                             role, real_head, policy, display_name(pod))
    if isinstance(chosen, Refusal):
        return chosen

    gang = gang_minimum(ctx)
    if isinstance(gang, Refusal):
        return gang

    # The scheduler's PriorityClass follows the same rule: a head's only for a real head.
    pod_priority, warnings = priority.pod_priority_class(
        policy, c.ROLE_HEAD if real_head else c.ROLE_WORKER, spec(pod), ctx.priority_values)
    return Manage(
        role=role,
        queue=queue_name,
        queue_source=queue_source,
        priority_class=chosen.name,
        priority_source=chosen.source,
        pod_priority=pod_priority,
        warnings=chosen.warnings + warnings,
        taken_from_kueue=taken,
        gang=gang,
    )


def _owner_class(ctx: PodContext) -> tuple[str, str] | None:
    """(class, where) from the Ray owners' `kueue.x-k8s.io/priority-class` label.

    Kueue reads a job's priority from that label on the object it makes the Workload
    for, the top-level one (a RayJob or RayService before the RayCluster it made;
    jobframework `WorkloadPriorityClassName`), and only from the label. So the
    outermost owner that carries one decides.
    """
    for owner in reversed(ctx.owners):
        name = priority.named(labels(owner).get(c.PRIORITY_CLASS_LABEL))
        if name:
            return name, f"{_describe(owner)} label"
    return None


def _kueue_job(ctx: PodContext, *, stamped: bool) -> str | None:
    """The Ray owner Kueue manages as one job, as Kueue's own ancestor check sees it.

    A stamped pod was made from a template raykueue stamped, and the stamp comes
    off when Kueue takes the cluster (the hand-over, webhooks/rayobjects.py). So for
    it, Kueue managing unqueued jobs in the namespace is not enough: Kueue takes a
    running cluster by suspending it, on the cluster's next event after the
    namespace was labelled, and until then raykueue counts its pods (a pod skipped
    here would be refused by `raykueue-gated-at-creation`).
    One KubeRay created from a template read just before the hand-over is gated
    too: KubeRay deletes it once it sees the suspend, and a gated pod is never
    refused.
    """
    for owner in ctx.owners:
        kind = owner.get("kind")
        if kind not in ctx.kueue_job_kinds:
            continue
        if stamped and handed_to_kueue(owner):
            return None
        if admitted_whole(owner) or (ctx.kueue_manages_unqueued and not stamped):
            return _describe(owner)
    return None


def _opt_in(pod: Obj, ctx: PodContext) -> Refusal | Skip | None:
    """One rule, per cluster: the stamp decides a pod of a Ray cluster; a bare pod decides itself.

    The first stage stamps every pod template of an opted-in RayCluster, so a
    KubeRay pod of an opted-in cluster carries the stamp from its creation; a
    pod's own `standalone` annotation counts only on a pod with no Ray owner.
    An unstamped pod with a Ray owner is not raykueue's at creation (the pod
    webhook is not even called for it): a cluster opted in before raykueue ran
    (or while its webhooks were away) is stamped and its running pods adopted by
    the leader (controller/adopt.py), which classifies them as if stamped.
    """
    if labels(pod).get(c.OPTED_IN_LABEL) == c.OPTED_IN_VALUE:
        if ctx.unresolved_owner:
            return _owner_missing(ctx)
        return None
    if has_ray_owner(pod):
        return Skip("not opted in")  # no stamp: its cluster did not opt in through raykueue
    value = annotations(pod).get(c.STANDALONE_ANNOTATION)
    if value == "true":
        return None
    if value is None:
        return Skip("not opted in")
    if value == "false":
        return Skip("opted out on the pod")
    return Refusal(
        f'annotation {c.STANDALONE_ANNOTATION}="{value}" on the pod is not valid: set it to '
        f'"true" to queue this pod in Kueue through raykueue, or "false" to opt out'
    )


def _owner_missing(ctx: PodContext) -> Refusal:
    """An opted-in pod whose owner is not known: its queue or gang may live on it."""
    if ctx.owner_absent:
        return Refusal(
            f"{ctx.unresolved_owner} does not exist (read from the API server), so this "
            "opted-in pod's queue cannot be read: point the pod's controller ownerReference at "
            "an existing Ray object")
    failed = f" and reading it from the API server failed ({ctx.owner_read_error})" \
        if ctx.owner_read_error else ""
    return OwnerUnread(
        f"{ctx.unresolved_owner} is not yet in raykueue's cache{failed}, so this opted-in pod's "
        "queue cannot be read; the creation is retried by KubeRay. If this persists, "
        "check that raykueue can watch and read RayClusters")


def gang_minimum(ctx: PodContext) -> dict[str, int] | Refusal | None:
    """Each worker group's base count when the nearest owner opts in to gang start.

    The counts come from the RayCluster's spec (minReplicas times numOfHosts,
    as KubeRay creates pods); None when the cluster does not opt in.
    """
    for owner in ctx.owners:
        value = annotations(owner).get(c.GANG_ANNOTATION)
        if value is None:
            continue
        if value == "false":
            return None
        if value not in c.GANG_VALUES:
            return Refusal(
                f'annotation {c.GANG_ANNOTATION}="{value}" on {_describe(owner)} is not valid: '
                'set it to "true" to admit the head and minReplicas workers together, or '
                '"false" to admit pod by pod')
        cluster = next((o for o in ctx.owners if o.get("kind") == c.RAYCLUSTER_KIND), None)
        if cluster is None:
            return OwnerUnread(
                f"{_describe(owner)} asks for gang start ({c.GANG_ANNOTATION}) but raykueue does "
                "not know its RayCluster yet; the creation is retried by KubeRay")
        # A RayCluster with no worker groups (head only) is a gang of its head alone.
        return group_minimums(cluster)
    return None


def _queue(pod: Obj, ctx: PodContext, role: str, taken: bool) -> tuple[str, str] | Refusal:
    """The nearest named queue: the pod, then its owners; our annotation before the label.

    On a pod Kueue took, a queue label "default" is Kueue's defaulting, not the
    user's choice, so the owners are asked first.
    """
    own_label = labels(pod).get(c.QUEUE_LABEL)
    if taken and own_label == c.DEFAULT_LOCAL_QUEUE:
        own_label = None
    candidates = [(annotations(pod).get(c.QUEUE_ANNOTATION), "pod annotation"), (own_label, "pod label")]
    for owner in ctx.owners:
        candidates.append((annotations(owner).get(c.QUEUE_ANNOTATION), f"{_describe(owner)} annotation"))
        candidates.append((labels(owner).get(c.QUEUE_LABEL), f"{_describe(owner)} label"))
    found = next(((value, source) for value, source in candidates if value), None)
    if found is None and ctx.default_queue_exists:
        found = (c.DEFAULT_LOCAL_QUEUE, "namespace default LocalQueue")
    if found is None:
        cluster = labels(pod).get(c.CLUSTER_LABEL, "")
        target = f"RayCluster {cluster}" if cluster else "the RayCluster"
        return Refusal(
            # The annotation, as the README and examples say: Kueue's label on a Ray object
            # is moved to it by raykueue, which a GitOps tool then sees as drift.
            f"no Kueue queue for Ray {role} pod {display_name(pod)}: set annotation "
            f"{c.QUEUE_ANNOTATION}=<LocalQueue name> on {target} or on its pod template, or create "
            f'a LocalQueue named "{c.DEFAULT_LOCAL_QUEUE}" in this namespace'
        )
    name, source = found
    if not is_dns1123_subdomain(name):
        key = c.QUEUE_ANNOTATION if source.endswith("annotation") else c.QUEUE_LABEL
        return Refusal(
            f"{key}={name!r} (from {source}) is not a valid LocalQueue name: use a "
            "DNS-1123 subdomain (lowercase letters, digits, '-' and '.', starting and ending "
            "with a letter or digit)"
        )
    return found


def _describe(obj: Obj) -> str:
    kind = obj.get("kind") if isinstance(obj.get("kind"), str) else "owner"
    return f"{kind} {display_name(obj)}"
