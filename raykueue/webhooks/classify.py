"""What raykueue should do with a pod at creation: the defaulting decision.

`classify` is a pure function of the pod, of what the caller already knows
about the pod's owners (read from caches, never from the API on this path) and
of the policy. It answers Skip (not ours), Deny (ours but unusable as given,
with a message that says what to change) or Manage (gate it, with the queue
and priority resolved and where each came from).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from raykueue.core import contract as c
from raykueue.core.objects import Obj, annotations, controller_ref, display_name, labels, ref_group, spec
from raykueue.core.pods import has_ray_owner, kueue_claims, role_of

# DNS-1123 subdomain, as Kubernetes validates object names (LocalQueue and
# WorkloadPriorityClass are named objects).
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def is_dns1123_subdomain(value: str) -> bool:
    return len(value) <= 253 and _DNS1123_SUBDOMAIN.match(value) is not None


@dataclass(frozen=True, slots=True)
class PodPriority:
    """Optional: Kubernetes PriorityClasses to set on gated pods.

    Off by default. When on, kube-scheduler's own preemption agrees with
    Kueue's order (a head outranks workers on the node as well as in the queue).
    """

    head_class: str
    worker_class: str


@dataclass(frozen=True, slots=True)
class Policy:
    head_priority_class: str = c.DEFAULT_HEAD_PRIORITY_CLASS
    worker_priority_class: str = c.DEFAULT_WORKER_PRIORITY_CLASS
    pod_priority: PodPriority | None = None
    # WorkloadPriorityClasses a worker may not name (the head's, by default).
    head_only_priority_classes: frozenset[str] = frozenset({c.DEFAULT_HEAD_PRIORITY_CLASS})


@dataclass(frozen=True, slots=True)
class Context:
    """What the edge resolved from its caches for one pod.

    `owners` is the Ray owner chain, nearest first (RayCluster, then the
    RayJob or RayService that owns it). `cluster_known` is False when the
    server runs admission-only: then only the pod itself can be consulted.
    `unresolved_owner` names an owner the pod points at that the caches do not
    hold (yet): a stamped pod's queue or gang may come from it, so such a pod is
    sent back for a retry; any other pod is left alone.
    """

    owners: Sequence[Obj] = ()
    cluster_known: bool = False
    unresolved_owner: str | None = None
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
class Deny:
    message: str


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


Decision = Skip | Deny | Manage


def classify(pod: Obj, ctx: Context, policy: Policy) -> Decision:
    role = role_of(pod)
    if role is None:
        return Skip("not a Ray head or worker")

    opt_in = _opt_in(pod, ctx)
    if isinstance(opt_in, Deny | Skip):
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
    if isinstance(queue, Deny):
        return queue
    queue_name, queue_source = queue

    real_head = is_real_head(pod, role)
    priority = choose_priority(_own_class(pod), _owner_class(ctx), role, real_head, policy,
                               display_name(pod))
    if isinstance(priority, Deny):
        return priority

    gang = gang_minimum(ctx)
    if isinstance(gang, Deny):
        return gang

    # The scheduler's PriorityClass follows the same rule: a head's only for a real head.
    pod_priority, warnings = _pod_priority(pod, ctx, policy, c.ROLE_HEAD if real_head else c.ROLE_WORKER)
    return Manage(
        role=role,
        queue=queue_name,
        queue_source=queue_source,
        priority_class=priority.name,
        priority_source=priority.source,
        pod_priority=pod_priority,
        warnings=priority.warnings + warnings,
        taken_from_kueue=taken,
        gang=gang,
    )


@dataclass(frozen=True, slots=True)
class Priority:
    """The WorkloadPriorityClass a pod's Workload names, where it came from, what to say."""

    name: str
    source: str
    warnings: tuple[str, ...] = ()


def is_real_head(pod: Obj, role: str) -> bool:
    """A head as KubeRay makes it: controlled by a RayCluster (ray.io). Its head-only
    class is preemption power over other clusters' heads, so a pod that only calls
    itself a head (the `ray.io/node-type` label is the user's to write) has none."""
    ref = controller_ref(pod)
    return (role == c.ROLE_HEAD and ref is not None and ref_group(ref) == c.RAY_API_GROUP
            and ref.get("kind") == c.RAYCLUSTER_KIND)


def _named(value: str | None) -> str | None:
    # `default` on a Ray pod or object is what Kueue's WorkloadPriorityClass
    # defaulting writes; the head/worker classes are the point of raykueue, so
    # they win over it.
    return value if value and value != c.KUEUE_DEFAULT_PRIORITY_CLASS else None


def _own_class(pod: Obj) -> str | None:
    return _named(labels(pod).get(c.PRIORITY_CLASS_LABEL))


def _owner_class(ctx: Context) -> tuple[str, str] | None:
    """(class, where) from the Ray owners' `kueue.x-k8s.io/priority-class` label.

    Kueue reads a job's priority from that label on the object it makes the Workload
    for, the top-level one (a RayJob or RayService before the RayCluster it made;
    jobframework `WorkloadPriorityClassName`), and only from the label. So the
    outermost owner that carries one decides.
    """
    for owner in reversed(ctx.owners):
        name = _named(labels(owner).get(c.PRIORITY_CLASS_LABEL))
        if name:
            return name, f"{_describe(owner)} label"
    return None


def choose_priority(own: str | None, owner: tuple[str, str] | None, role: str, real_head: bool,
                    policy: Policy, pod_name: str = "") -> Priority | Deny:
    """The pod's class: its own label, else its Ray owner's, else its role's default.

    Head-only classes (`policy.head_only_priority_classes`, the head class by
    default) go to real heads only (`is_real_head`). A class the pod names itself
    that it may not have is refused with what to change, as for a worker group's
    template; one that comes from its owner or from the head default falls back
    to the worker class with a warning, since the pod itself asked for nothing.
    """
    may_be_head = role == c.ROLE_HEAD and real_head
    if own is not None:
        choice = Priority(own, "pod label")
    elif owner is not None:
        choice = Priority(owner[0], owner[1])
    elif role == c.ROLE_HEAD:
        choice = Priority(policy.head_priority_class, "head default")
    else:
        choice = Priority(policy.worker_priority_class, "worker default")
    if not is_dns1123_subdomain(choice.name):
        return Deny(
            f"{c.PRIORITY_CLASS_LABEL}={choice.name!r} (from {choice.source}) is not a valid "
            "WorkloadPriorityClass name: use a DNS-1123 subdomain (lowercase letters, digits, "
            "'-' and '.')"
        )
    if choice.name not in policy.head_only_priority_classes or may_be_head:
        return choice
    if own is not None and role == c.ROLE_WORKER:
        return Deny(
            f"Ray worker pod {pod_name} names {c.PRIORITY_CLASS_LABEL}={choice.name}, "
            "which only Ray heads may use (a worker with it could preempt other clusters' heads): "
            "remove the label from the worker group's pod template (workers get "
            f"{policy.worker_priority_class}) or name a worker class"
        )
    if own is not None:
        return Deny(
            f"pod {pod_name} is labelled a Ray head but no RayCluster owns it, and names "
            f"{c.PRIORITY_CLASS_LABEL}={choice.name}, which only the head of a RayCluster may use "
            "(it preempts other clusters' heads): remove the label (the pod gets "
            f"{policy.worker_priority_class}) or name another class, or create the head "
            "through a RayCluster"
        )
    why = ("no RayCluster owns it" if role == c.ROLE_HEAD
           else "only Ray heads may use it")
    return Priority(
        policy.worker_priority_class, f"worker default ({choice.source} is head-only)",
        (f"pod {pod_name} gets {c.PRIORITY_CLASS_LABEL}={policy.worker_priority_class}, not "
         f"{choice.name} (from {choice.source}): {choice.name} is for the heads of RayClusters "
         f"only and {why}. Create the head through a RayCluster, or name another class",))


def _kueue_job(ctx: Context, *, stamped: bool) -> str | None:
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
        if stamped and c.HANDED_TO_KUEUE_ANNOTATION in annotations(owner):
            return None
        if labels(owner).get(c.QUEUE_LABEL) or (ctx.kueue_manages_unqueued and not stamped):
            return _describe(owner)
    return None


def _opt_in(pod: Obj, ctx: Context) -> Deny | Skip | None:
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
            # Opted in: its queue or gang may live on the owner, which the
            # cache does not hold yet; KubeRay retries the creation.
            return Deny(
                f"{ctx.unresolved_owner} is not yet in raykueue's cache, so this opted-in pod's "
                "queue cannot be read; the creation is retried by KubeRay. If this persists, "
                "check that raykueue can watch RayClusters")
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
    return Deny(
        f'annotation {c.STANDALONE_ANNOTATION}="{value}" on the pod is not valid: set it to '
        f'"true" to queue this pod in Kueue through raykueue, or "false" to opt out'
    )


def gang_minimum(ctx: Context) -> dict[str, int] | Deny | None:
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
        if value != "true":
            return Deny(
                f'annotation {c.GANG_ANNOTATION}="{value}" on {_describe(owner)} is not valid: '
                'set it to "true" to admit the head and minReplicas workers together, or '
                '"false" to admit pod by pod')
        cluster = next((o for o in ctx.owners if o.get("kind") == c.RAYCLUSTER_KIND), None)
        groups = spec(cluster).get("workerGroupSpecs") if cluster is not None else None
        if not isinstance(groups, list):
            return Deny(
                f"{_describe(owner)} asks for gang start ({c.GANG_ANNOTATION}) but raykueue does "
                "not know its RayCluster's worker groups yet; the creation is retried by KubeRay")
        out: dict[str, int] = {}
        for group in groups:
            if not isinstance(group, dict) or not isinstance(group.get("groupName"), str):
                continue
            count = group.get("minReplicas")
            hosts = group.get("numOfHosts")
            count = count if isinstance(count, int) and count > 0 else 0
            out[group["groupName"]] = count * (hosts if isinstance(hosts, int) and hosts > 0 else 1)
        return out
    return None


def _queue(pod: Obj, ctx: Context, role: str, taken: bool) -> tuple[str, str] | Deny:
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
        return Deny(
            # The annotation, as the README and examples say: Kueue's label on a Ray object
            # is moved to it by raykueue, which a GitOps tool then sees as drift.
            f"no Kueue queue for Ray {role} pod {display_name(pod)}: set annotation "
            f"{c.QUEUE_ANNOTATION}=<LocalQueue name> on {target} or on its pod template, or create "
            f'a LocalQueue named "{c.DEFAULT_LOCAL_QUEUE}" in this namespace'
        )
    name, source = found
    if not is_dns1123_subdomain(name):
        key = c.QUEUE_ANNOTATION if source.endswith("annotation") else c.QUEUE_LABEL
        return Deny(
            f"{key}={name!r} (from {source}) is not a valid LocalQueue name: use a "
            "DNS-1123 subdomain (lowercase letters, digits, '-' and '.', starting and ending "
            "with a letter or digit)"
        )
    return found


def _pod_priority(
    pod: Obj, ctx: Context, policy: Policy, role: str
) -> tuple[tuple[str, int] | None, tuple[str, ...]]:
    if policy.pod_priority is None or spec(pod).get("priorityClassName"):
        # A PriorityClass chosen in the pod template is the user's call.
        return None, ()
    name = policy.pod_priority.head_class if role == c.ROLE_HEAD else policy.pod_priority.worker_class
    value = ctx.priority_values.get(name)
    if value is None:
        return None, (f"PriorityClass {name} is not known to raykueue; pod priority left unset",)
    return (name, value), ()


def _describe(obj: Obj) -> str:
    kind = obj.get("kind") if isinstance(obj.get("kind"), str) else "owner"
    return f"{kind} {display_name(obj)}"
