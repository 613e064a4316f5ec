"""`raykueue explain POD`: why a pod is still gated, in words (or, `-o json`, as data).

`explain` is pure: it renders the facts the caller gathered. `explain_pod`
gathers them live (`live.ApiSource`: a handful of GETs and LISTs, as the CLI's
user) with the same `facts.gather` the controller's pass uses, and its verdict
line is the stuck-gate report's (`verdict.verdict`, from `decide` itself), so
the explanation cannot drift from what the controller does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from raykueue.controller import decide as d
from raykueue.controller import kueue_admission as adm
from raykueue.controller import pods as p
from raykueue.controller import workload as w
from raykueue.controller.current import claims
from raykueue.controller.facts import Facts, gather
from raykueue.controller.gang import base as gb
from raykueue.controller.gang import decide as gd
from raykueue.controller.live import ApiSource, get, items
from raykueue.controller.verdict import verdict
from raykueue.core import contract as c
from raykueue.core.objects import Obj, labels, metadata
from raykueue.core.podrole import role_of
from raykueue.kube import resources as r
from raykueue.kube.rest import ApiError, Rest, get_or_none

# Kueue's VisibilityOnDemand API, served through the API server's aggregation layer.
VISIBLE_QUEUES = r.crd("visibility.kueue.x-k8s.io", "v1beta2", "localqueues")
_KUEUE_CONDITIONS = (w.QUOTA_RESERVED, w.ADMITTED, w.EVICTED, w.PREEMPTED, w.REQUEUED,
                     w.PODS_READY, w.FINISHED)


def queue_position(wl: Obj, peers: Sequence[Obj]) -> tuple[int, int] | None:
    """(1-based position, pending count) of `wl` among the pending Workloads of
    its LocalQueue, in Kueue's default order: priority, then creation time.

    An estimate, used when Kueue's visibility API is not served: Kueue's real
    order is per ClusterQueue (other namespaces' LocalQueues share it) and
    requeued Workloads sort by eviction time.
    """
    if not _pending(wl):
        return None
    pending = [x for x in peers if _pending(x) and w.queue_name(x) == w.queue_name(wl)]
    if not any(p.name(x) == p.name(wl) for x in pending):
        pending.append(wl)
    pending.sort(key=lambda x: (-w.priority_value(x), str(metadata(x).get("creationTimestamp")),
                                p.name(x)))
    index = next(i for i, x in enumerate(pending) if p.name(x) == p.name(wl))
    return index + 1, len(pending)


def explain(facts: Facts, cluster_queue: Obj | None = None, local_queue: Obj | None = None, *,
            shown: Obj | None = None, queue_peers: Sequence[Obj] = (),
            kueue_position: Obj | None = None, setup_notes: Sequence[str] = (),
            gang: str | None = None) -> str:
    """Render one pod's state from its gathered facts (`facts.pod` is there).

    The Workload shown is the pod's own (`current.claims`), else one of Kueue's
    for it, unless `shown` names another (a gang's base, for a pod in the base);
    `kueue_position` is its entry in Kueue's visibility API; `gang` is the pod's
    place in its gang (`gang.decide.describe`)."""
    text = _explain(facts, shown, cluster_queue, local_queue, queue_peers, kueue_position)
    if gang:
        first, rest = text.split("\n", 1)
        text = f"{first}\n  gang:       {gang}\n{rest}"
    if setup_notes:
        text += "\n  Kueue setup:\n" + "\n".join(f"    {note}" for note in setup_notes)
    return text


def _explain(facts: Facts, shown: Obj | None, cluster_queue: Obj | None,
             local_queue: Obj | None, queue_peers: Sequence[Obj], kueue_position: Obj | None) -> str:
    pod = facts.pod
    assert pod is not None, "explain renders a pod"
    ns, name = p.key(pod)
    role = role_of(pod) or "not a Ray head or worker"
    cluster = p.cluster(pod)
    lines = [f"Pod {ns}/{name}: {role}" + (f" of Ray cluster {cluster}" if cluster else "")]
    gated = p.is_gated(pod)
    lines.append(f"  gate:       {c.GATE} " + ("present" if gated else "lifted (or never set)"))
    lines.append(f"  verdict:    {verdict(facts).text}")
    found = claims(pod, facts.workloads)
    if found.duplicates:
        lines.append(f"  duplicates: {', '.join(p.name(x) for x in found.duplicates)} "
                     "(ours for this pod under another name: the controller finishes them)")
    workload = shown or found.current or next(iter(found.foreign), None)

    if workload is None:
        lines.append("  Workload:   none")
        _queue_lines(lines, w.pod_queue(pod), local_queue, cluster_queue)
        priority = labels(pod).get(c.PRIORITY_CLASS_LABEL)
        lines.append(f"  priority:   {priority or 'none'} (label {c.PRIORITY_CLASS_LABEL})")
        return "\n".join(lines)

    lines.append(f"  Workload:   {p.name(workload)} ({workload.get('apiVersion', '?')})"
                 + ("" if w.is_ours(workload) else "  [not created by raykueue]"))
    lines.append(f"  state:      {_state(workload)}")
    _queue_lines(lines, w.queue_name(workload), local_queue, cluster_queue,
                 adm.cluster_queue(workload))
    lines.append(f"  priority:   {w.priority_class_name(workload) or 'none'} "
                 f"({w.priority_value(workload)})")
    flavors = adm.assigned_flavors(workload)
    if flavors:
        lines.append(f"  flavors:    {', '.join(flavors)}")
    conds = [x for x in w.conditions(workload) if x.get("type") in _KUEUE_CONDITIONS]
    if conds:
        lines.append("  Kueue says:")
        for cond in conds:
            reason = f" ({cond['reason']})" if cond.get("reason") else ""
            message = f": {cond['message']}" if cond.get("message") else ""
            lines.append(f"    {cond.get('type')}={cond.get('status')}{reason}{message}")
    position = queue_position(workload, queue_peers)
    if kueue_position is not None and _pending(workload):
        lines.append(f"  position:   {_ordinal(int(kueue_position.get('positionInLocalQueue', 0)) + 1)} in "
                     f"LocalQueue {w.queue_name(workload)}, "
                     f"{_ordinal(int(kueue_position.get('positionInClusterQueue', 0)) + 1)} in its "
                     "ClusterQueue (Kueue's visibility API)")
    elif position is not None:
        at, total = position
        lines.append(f"  position:   {_ordinal(at)} of {total} pending in LocalQueue "
                     f"{w.queue_name(workload)} (estimated from priority and creation time)")
    elif _pending(workload):
        lines.append("  position:   unknown")
    return "\n".join(lines)


def explain_pod(rest: Rest, namespace: str, name: str, setup_notes: Sequence[str] = ()) -> str:
    """Read what `explain` needs, as the calling user, and render it."""
    read = _read(rest, namespace, name)
    if isinstance(read, str):
        return read
    if isinstance(read, Facts):
        return explain(read) + "\n  Kueue:      kueue.x-k8s.io is not served; is Kueue installed?"
    facts, kwargs = read
    return explain(facts, **kwargs, setup_notes=setup_notes)


def describe_pod(rest: Rest, namespace: str, name: str,
                 setup_notes: Sequence[str] = ()) -> dict[str, Any]:
    """What `explain_pod` says, as data (`raykueue explain POD -o json`)."""
    read = _read(rest, namespace, name)
    if isinstance(read, str):
        return {"kind": "Pod", "namespace": namespace, "name": name, "found": False}
    if isinstance(read, Facts):
        return {**describe(read, setup_notes=setup_notes), "kueue": "not served"}
    facts, kwargs = read
    return describe(facts, **kwargs, setup_notes=setup_notes)


def describe(facts: Facts, cluster_queue: Obj | None = None, local_queue: Obj | None = None, *,
             shown: Obj | None = None, queue_peers: Sequence[Obj] = (),
             kueue_position: Obj | None = None, setup_notes: Sequence[str] = (),
             gang: str | None = None) -> dict[str, Any]:
    """The facts `explain` words, as data: the same inputs, the same verdict."""
    pod = facts.pod
    assert pod is not None, "describe is of a pod"
    ns, name = p.key(pod)
    found = claims(pod, facts.workloads)
    workload = shown or found.current or next(iter(found.foreign), None)
    said = verdict(facts)
    out: dict[str, Any] = {
        "kind": "Pod", "namespace": ns, "name": name, "found": True,
        "role": role_of(pod), "rayCluster": p.cluster(pod), "gated": p.is_gated(pod),
        "verdict": {"reason": said.reason, "text": said.text},
        "gang": gang, "duplicates": [p.name(x) for x in found.duplicates],
        "queue": w.queue_name(workload) if workload is not None else w.pod_queue(pod),
        "localQueue": _queue_data(local_queue), "clusterQueue": _queue_data(cluster_queue),
        "workload": None, "position": None, "kueueSetup": list(setup_notes),
    }
    if workload is None:
        out["priority"] = {"class": labels(pod).get(c.PRIORITY_CLASS_LABEL), "value": None}
        return out
    out["priority"] = {"class": w.priority_class_name(workload), "value": w.priority_value(workload)}
    out["workload"] = {
        "name": p.name(workload), "apiVersion": workload.get("apiVersion"), "ours": w.is_ours(workload),
        "state": _state(workload), "clusterQueue": adm.cluster_queue(workload),
        "flavors": adm.assigned_flavors(workload),
        "conditions": [{k: x.get(k) for k in ("type", "status", "reason", "message")}
                       for x in w.conditions(workload) if x.get("type") in _KUEUE_CONDITIONS]}
    if kueue_position is not None and _pending(workload):
        out["position"] = {"localQueue": int(kueue_position.get("positionInLocalQueue", 0)) + 1,
                           "clusterQueue": int(kueue_position.get("positionInClusterQueue", 0)) + 1,
                           "estimated": False}
    else:
        position = queue_position(workload, queue_peers)
        if position is not None:
            out["position"] = {"localQueue": position[0], "pending": position[1],
                               "clusterQueue": None, "estimated": True}
    return out


def _queue_data(queue: Obj | None) -> dict[str, Any] | None:
    if queue is None:
        return None
    status = queue.get("status") or {}
    return {"name": p.name(queue), "clusterQueue": (queue.get("spec") or {}).get("clusterQueue"),
            "pending": status.get("pendingWorkloads"), "reserving": status.get("reservingWorkloads"),
            "admitted": status.get("admittedWorkloads")}


def _read(rest: Rest, namespace: str, name: str) -> str | Facts | tuple[Facts, dict[str, Any]]:
    """What explain reads, as the calling user: a message if the pod is not
    there, its bare facts if Kueue is not served, else the facts and the rest
    of `explain`'s arguments."""
    pod = get_or_none(rest, r.PODS.path(namespace, name))
    if pod is None:
        return f"pod {namespace}/{name} not found"
    version = next((v for v in w.VERSIONS if v in r.served_versions(rest, c.KUEUE_GROUP)), None)
    if version is None:
        return Facts(pod, [], d.Context())
    workloads = items(rest.get(r.crd(c.KUEUE_GROUP, version, "workloads").path(namespace)))
    # head_first as the controller's default; the CLI cannot see the server's setting.
    facts = gather(ApiSource(rest, version, workloads), pod, d.Context(version=version))
    found = claims(pod, facts.workloads)
    shown = found.current or next(iter(found.foreign), None)
    gang = _gang(rest, namespace, pod, workloads, found.current) if gb.is_gang_pod(pod) else None
    if gang is not None and shown is None:
        shown = gang[1]  # a base pod: the base is what Kueue queues for it

    queue = w.queue_name(shown) if shown is not None else w.pod_queue(pod)
    local_queue = get(rest, r.crd(c.KUEUE_GROUP, version, "localqueues").path(namespace, queue)
                      ) if queue else None
    cq_name = (adm.cluster_queue(shown) if shown is not None else None) or (
        (local_queue or {}).get("spec", {}).get("clusterQueue"))
    cluster_queue = get(rest, r.crd(c.KUEUE_GROUP, version, "clusterqueues",
                                    namespaced=False).path(None, cq_name)) if cq_name else None
    kueue_position = _visible_position(rest, namespace, queue, shown) if queue else None
    return facts, {"cluster_queue": cluster_queue, "local_queue": local_queue, "shown": shown,
                   "queue_peers": workloads, "kueue_position": kueue_position,
                   "gang": gang[0] if gang is not None else None}


def _gang(rest: Rest, namespace: str, pod: Obj, workloads: Sequence[Obj],
          own: Obj | None) -> tuple[str, Obj | None]:
    """The pod's place in its gang and what the gang waits for; the base Workload."""
    cluster = str(labels(pod).get(c.GANG_LABEL))
    members = [x for x in items(rest.get(r.PODS.path(namespace), {
        "labelSelector": f"{c.GANG_LABEL}={cluster}"})) if gb.is_gang_pod(x)]
    owned = {p.uid(x): wl for x in members for wl in workloads
             if w.is_ours(wl) and w.pod_uid_of(wl) == p.uid(x) and not p.is_deleting(wl)
             and not w.is_finished(wl)}
    base = next((x for x in workloads
                 if gb.is_base(x) and labels(x).get(c.GANG_LABEL) == cluster), None)
    _, plan = gd.decide_gang(members, owned, base, gd.GangContext())
    return gd.describe(pod, plan, own is not None and own is owned.get(p.uid(pod))), base


def _visible_position(rest: Rest, namespace: str, queue: str, workload: Obj | None) -> Obj | None:
    """The Workload's entry in Kueue's pending list (VisibilityOnDemand), if Kueue serves it."""
    if workload is None:
        return None
    path = VISIBLE_QUEUES.path(namespace, queue, "pendingworkloads")
    try:
        listing = rest.get(path)
    except ApiError:
        return None  # not served (no aggregation layer, feature off) or not allowed: estimate instead
    return next((x for x in items(listing) if p.name(x) == p.name(workload)), None)


# --- rendering helpers -------------------------------------------------------------------


def _queue_lines(lines: list[str], queue: str | None, local_queue: Obj | None,
                 cluster_queue: Obj | None, admitted_to: str | None = None) -> None:
    if not queue:
        lines.append(f"  queue:      none (annotation {c.QUEUE_ANNOTATION} or label "
                     f"{c.QUEUE_LABEL} missing)")
        return
    cq_name = admitted_to or (local_queue or {}).get("spec", {}).get("clusterQueue")
    if local_queue is None:
        lines.append(f"  queue:      LocalQueue {queue} (not found)")
    else:
        lines.append(f"  queue:      LocalQueue {queue} -> ClusterQueue {cq_name or '?'}"
                     f"  [{_counts(local_queue)}]")
    if cluster_queue is not None:
        lines.append(f"  ClusterQueue {p.name(cluster_queue)}: {_counts(cluster_queue)}")
        for cond in w.conditions(cluster_queue):
            if cond.get("type") == "Active" and cond.get("status") != "True":
                lines.append(f"    inactive ({cond.get('reason')}): {cond.get('message')}")


def _counts(queue: Mapping[str, Any]) -> str:
    status = queue.get("status") or {}
    return (f"{status.get('pendingWorkloads', '?')} pending, "
            f"{status.get('reservingWorkloads', '?')} reserving, "
            f"{status.get('admittedWorkloads', '?')} admitted")


def _state(wl: Obj) -> str:
    if w.is_finished(wl):
        return "Finished"
    if w.is_evicted(wl):
        return "Evicted"
    if w.is_admitted(wl):
        return f"Admitted to ClusterQueue {adm.cluster_queue(wl) or '?'}"
    if w.is_quota_reserved(wl):
        return "QuotaReserved, waiting for admission checks"
    return "Pending"


def _pending(wl: Obj) -> bool:
    active = (wl.get("spec") or {}).get("active", True) is not False
    return active and not w.is_quota_reserved(wl) and not w.is_finished(wl) and \
        not p.is_deleting(wl)


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
