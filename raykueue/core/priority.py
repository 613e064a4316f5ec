"""Priority, in one place: which WorkloadPriorityClass a Ray pod gets, and its value.

One policy object (`PriorityPolicy`, built from the settings) is read by the pod
webhook (the class by role, the head-only rule), the Ray-object webhook (a
worker group may not name a head-only class), the settings validator (the
worker class may not be head-only) and the controller (a class's value for the
Workload, or why there is none yet).

Head-only classes (the head class by default) are preemption power over other
clusters' heads, so they go only to a real head: a pod a RayCluster controls
that KubeRay labelled a head.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from raykueue.core import contract as c
from raykueue.core.objects import Obj, controller_ref, display_name, is_dns1123_subdomain, labels, ref_group
from raykueue.core.rayobjects import as_dict, get, templates
from raykueue.core.refusal import Refusal


@dataclass(frozen=True, slots=True)
class PodPriority:
    """Optional: Kubernetes PriorityClasses to set on gated pods.

    Off by default. When on, kube-scheduler's own preemption agrees with
    Kueue's order (a head outranks workers on the node as well as in the queue).
    """

    head_class: str = c.DEFAULT_HEAD_POD_PRIORITY_CLASS
    worker_class: str = c.DEFAULT_WORKER_POD_PRIORITY_CLASS


@dataclass(frozen=True, slots=True)
class PriorityPolicy:
    head_priority_class: str = c.DEFAULT_HEAD_PRIORITY_CLASS
    worker_priority_class: str = c.DEFAULT_WORKER_PRIORITY_CLASS
    pod_priority: PodPriority | None = None
    # WorkloadPriorityClasses a worker may not name; empty: the head class alone.
    head_only_priority_classes: frozenset[str] = frozenset()

    @property
    def head_only_classes(self) -> frozenset[str]:
        return self.head_only_priority_classes or frozenset({self.head_priority_class})

    def problem(self) -> str | None:
        """Why this policy cannot work, for the settings validator."""
        if self.worker_priority_class in self.head_only_classes:
            return (f"RAYKUEUE_WORKER_PRIORITY_CLASS={self.worker_priority_class} is one of the "
                    f"head-only classes {sorted(self.head_only_classes)} "
                    "(RAYKUEUE_HEAD_ONLY_PRIORITY_CLASSES): every worker would be denied")
        return None


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


def named(value: str | None) -> str | None:
    """A class a pod or object names, Kueue's defaulting aside.

    `default` on a Ray pod or object is what Kueue's WorkloadPriorityClass
    defaulting writes; the head/worker classes are the point of raykueue, so
    they win over it.
    """
    return value if value and value != c.KUEUE_DEFAULT_PRIORITY_CLASS else None


def choose(own: str | None, owner: tuple[str, str] | None, role: str, real_head: bool,
           policy: PriorityPolicy, pod_name: str = "") -> Priority | Refusal:
    """The pod's class: its own label, else its Ray owner's, else its role's default.

    Head-only classes go to real heads only (`is_real_head`). A class the pod
    names itself that it may not have is refused with what to change, as for a
    worker group's template; one that comes from its owner or from the head
    default falls back to the worker class with a warning, since the pod itself
    asked for nothing.
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
        return Refusal(
            f"{c.PRIORITY_CLASS_LABEL}={choice.name!r} (from {choice.source}) is not a valid "
            "WorkloadPriorityClass name: use a DNS-1123 subdomain (lowercase letters, digits, "
            "'-' and '.')"
        )
    if choice.name not in policy.head_only_classes or may_be_head:
        return choice
    if own is not None and role == c.ROLE_WORKER:
        return Refusal(
            f"Ray worker pod {pod_name} names {c.PRIORITY_CLASS_LABEL}={choice.name}, "
            "which only Ray heads may use (a worker with it could preempt other clusters' heads): "
            "remove the label from the worker group's pod template (workers get "
            f"{policy.worker_priority_class}) or name a worker class"
        )
    if own is not None:
        return Refusal(
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


def head_class_on_a_worker(obj: Obj, old: Obj | None, policy: PriorityPolicy) -> str | None:
    """Why a worker group of this Ray object may not newly name a head-only class, if it does."""
    before = dict(_worker_classes(old)) if old is not None else {}
    for name, cls in _worker_classes(obj):
        if cls in policy.head_only_classes and before.get(name) != cls:
            return (f"worker group {name} of {obj.get('kind')} {display_name(obj)} names "
                    f"{c.PRIORITY_CLASS_LABEL}={cls}, which only Ray heads may use (it would let a "
                    "worker preempt other clusters' heads). Remove the label (workers get the "
                    "worker class) or name a worker class")
    return None


def _worker_classes(obj: Obj | None) -> Iterator[tuple[str, str]]:
    """(group name, priority-class label) of each worker template that names one."""
    for where, template in templates(obj or {}):
        cls = labels(template).get(c.PRIORITY_CLASS_LABEL)
        if "workerGroupSpecs" in where and cls:
            group = get(obj, (*where[:-1], "groupName"))
            yield (group if isinstance(group, str) else f"#{where[-2]}"), cls


def pod_priority_class(policy: PriorityPolicy, role: str, pod_spec: Obj,
                       values: Mapping[str, int]) -> tuple[tuple[str, int] | None, tuple[str, ...]]:
    """The Kubernetes PriorityClass (name, value) to write into a gated pod, with warnings."""
    if policy.pod_priority is None or as_dict(pod_spec).get("priorityClassName"):
        # A PriorityClass chosen in the pod template is the user's call.
        return None, ()
    name = policy.pod_priority.head_class if role == c.ROLE_HEAD else policy.pod_priority.worker_class
    value = values.get(name)
    if value is None:
        return None, (f"PriorityClass {name} is not known to raykueue; pod priority left unset",)
    return (name, value), ()


@dataclass(frozen=True, slots=True)
class Missing:
    """A WorkloadPriorityClass a pod names that does not exist (yet)."""

    name: str
    message: str

    @property
    def waiting(self) -> str:
        return f"WorkloadPriorityClass {self.name} missing"


def workload_priority(class_name: str | None, values: Mapping[str, int],
                      pod_name: str) -> tuple[str, int] | Missing | None:
    """(name, value) of the WorkloadPriorityClass a pod's Workload names, for the
    controller; None when the pod names none; Missing, with what to say, when the
    class does not exist: the pod then waits, since Kueue's scheduler reads only
    `spec.priority` and the Workload carries both."""
    if not class_name:
        return None
    value = values.get(class_name)
    if value is None:
        return Missing(class_name, f"WorkloadPriorityClass {class_name!r} of pod {pod_name} does not "
                                   "exist; create it and the pod's Workload is made")
    return class_name, value
