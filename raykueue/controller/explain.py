"""`raykueue explain POD`: why a pod is still gated, in words.

`explain` is pure: it renders what the caller read. `explain_pod` does the
reads (a handful of GETs and one LIST, as the CLI's user) and calls it. The
verdict line comes from `decide` itself, so the explanation cannot drift from
what the controller does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from raykueue.controller import actions as a
from raykueue.controller import admission as adm
from raykueue.controller import decide as d
from raykueue.controller import gang_decide as gd
from raykueue.controller import pods as p
from raykueue.controller import workload as w
from raykueue.core import contract as c
from raykueue.core.objects import Obj, labels, metadata
from raykueue.core.pods import role_of
from raykueue.kube import resources as r
from raykueue.kube.rest import ApiError, Rest

# Kueue's VisibilityOnDemand API, served through the API server's aggregation layer.
_VISIBLE_QUEUES = r.crd("visibility.kueue.x-k8s.io", "v1beta2", "localqueues")
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


def verdict(pod: Obj, workloads: Sequence[Obj], ctx: d.Context) -> str:
    """One sentence: what stands between this pod and running."""
    actions = d.decide(pod, workloads, ctx)
    for action in actions:
        if isinstance(action, a.ReportConflict | a.Warn):
            return action.message
    for action in actions:
        if isinstance(action, a.Wait):
            return f"waiting: {action.reason}"
        if isinstance(action, a.CreateWorkload):
            return ("no Workload yet: raykueue's controller has not created it; is the "
                    "controller running (one replica holds the lease)?")
        if isinstance(action, a.LiftGate):
            return ("admitted: the controller lifts the gate next (if this persists, is the "
                    "controller running?)")
        if isinstance(action, a.EvictPod):
            return f"evicted by Kueue ({action.reason}): the pod is about to be deleted"
        if isinstance(action, a.FinishWorkload):
            return f"finishing its Workload: {action.message}"
        if isinstance(action, a.DeleteWorkload):
            return f"deleting its Workload: {action.message}"
    if p.is_gated(pod):
        return "gated, nothing pending on raykueue's side"
    return "not gated: the scheduler places it (or already did)"


def explain(pod: Obj, workload: Obj | None, cluster_queue: Obj | None = None,
            local_queue: Obj | None = None, *, others: Sequence[Obj] = (),
            queue_peers: Sequence[Obj] = (), context: d.Context | None = None,
            kueue_position: Obj | None = None, setup_notes: Sequence[str] = (),
            gang: str | None = None) -> str:
    """Render one pod's state; `kueue_position` is its entry in Kueue's visibility API;
    `gang` is the pod's place in its gang (`gang_decide.describe`)."""
    text = _explain(pod, workload, cluster_queue, local_queue, others, queue_peers, context,
                    kueue_position)
    if gang:
        first, rest = text.split("\n", 1)
        text = f"{first}\n  gang:       {gang}\n{rest}"
    if setup_notes:
        text += "\n  Kueue setup:\n" + "\n".join(f"    {note}" for note in setup_notes)
    return text


def _explain(pod: Obj, workload: Obj | None, cluster_queue: Obj | None, local_queue: Obj | None,
             others: Sequence[Obj], queue_peers: Sequence[Obj], context: d.Context | None,
             kueue_position: Obj | None) -> str:
    ns, name = p.key(pod)
    role = role_of(pod) or "not a Ray head or worker"
    cluster = p.cluster(pod)
    lines = [f"Pod {ns}/{name}: {role}" + (f" of Ray cluster {cluster}" if cluster else "")]
    gated = p.is_gated(pod)
    lines.append(f"  gate:       {c.GATE} " + ("present" if gated else "lifted (or never set)"))
    owned = [x for x in [workload, *others] if x is not None]
    lines.append(f"  verdict:    {verdict(pod, owned, context or d.Context())}")

    if workload is None:
        lines.append("  Workload:   none")
        _queue_lines(lines, labels(pod).get(c.QUEUE_LABEL), local_queue, cluster_queue)
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
    try:
        pod = rest.get(r.PODS.path(namespace, name))
    except ApiError as exc:
        if exc.is_not_found:
            return f"pod {namespace}/{name} not found"
        raise
    version = next((v for v in w.VERSIONS if v in r.served_versions(rest, c.KUEUE_GROUP)), None)
    if version is None:
        return explain(pod, None) + "\n  Kueue:      kueue.x-k8s.io is not served; is Kueue installed?"
    res = r.crd(c.KUEUE_GROUP, version, "workloads")
    items = _items(rest.get(res.path(namespace)))
    uid = p.uid(pod)
    mine = [x for x in items if w.pod_uid_of(x) == uid]
    ours = [x for x in mine if w.is_ours(x)]
    workload = next((x for x in ours if p.name(x) == w.workload_name(pod)), None) or (
        ours[0] if ours else None)
    others = [x for x in mine if x is not workload]
    if workload is None and others:
        workload, others = others[0], others[1:]
    gang = _gang(rest, namespace, pod, items, workload) if gd.is_gang_pod(pod) else None
    if gang is not None and workload is None:
        workload = gang[1]  # a base pod: the base is what Kueue queues for it

    queue = w.queue_name(workload) if workload is not None else labels(pod).get(c.QUEUE_LABEL)
    local_queue = _get(rest, r.crd(c.KUEUE_GROUP, version, "localqueues").path(namespace, queue)
                       ) if queue else None
    cq_name = (adm.cluster_queue(workload) if workload is not None else None) or (
        (local_queue or {}).get("spec", {}).get("clusterQueue"))
    cluster_queue = _get(rest, r.crd(c.KUEUE_GROUP, version, "clusterqueues",
                                     namespaced=False).path(None, cq_name)) if cq_name else None

    context = _context(rest, version, namespace, pod, workload, items)
    kueue_position = _visible_position(rest, namespace, queue, workload) if queue else None
    return explain(pod, workload, cluster_queue, local_queue, others=others, queue_peers=items,
                   context=context, kueue_position=kueue_position, setup_notes=setup_notes,
                   gang=gang[0] if gang is not None else None)


def _gang(rest: Rest, namespace: str, pod: Obj, items: Sequence[Obj],
          own: Obj | None) -> tuple[str, Obj | None]:
    """The pod's place in its gang and what the gang waits for; the base Workload."""
    cluster = str(labels(pod).get(c.GANG_LABEL))
    members = [x for x in _items(rest.get(r.PODS.path(namespace), {
        "labelSelector": f"{c.GANG_LABEL}={cluster}"})) if gd.is_gang_pod(x)]
    owned = {p.uid(x): wl for x in members for wl in items
             if w.is_ours(wl) and w.pod_uid_of(wl) == p.uid(x) and not w.is_deleting(wl)
             and not w.is_finished(wl)}
    base = next((x for x in items if gd.is_base(x) and labels(x).get(c.GANG_LABEL) == cluster),
                None)
    _, plan = gd.decide_gang(members, owned, base, gd.GangContext())
    return gd.describe(pod, plan, own is not None and own is owned.get(p.uid(pod))), base


def _visible_position(rest: Rest, namespace: str, queue: str, workload: Obj | None) -> Obj | None:
    """The Workload's entry in Kueue's pending list (VisibilityOnDemand), if Kueue serves it."""
    if workload is None:
        return None
    path = _VISIBLE_QUEUES.path(namespace, queue, "pendingworkloads")
    try:
        listing = rest.get(path)
    except ApiError:
        return None  # not served (no aggregation layer, feature off) or not allowed: estimate instead
    return next((x for x in _items(listing) if p.name(x) == p.name(workload)), None)


# --- reads --------------------------------------------------------------------------


def _context(rest: Rest, version: str, namespace: str, pod: Obj, workload: Obj | None,
             items: Sequence[Obj]) -> d.Context:
    priority_values: dict[str, int] = {}
    class_name = labels(pod).get(c.PRIORITY_CLASS_LABEL)
    if class_name:
        wpc = _get(rest, r.crd(c.KUEUE_GROUP, version, "workloadpriorityclasses",
                               namespaced=False).path(None, class_name))
        if wpc is not None and isinstance(wpc.get("value"), int):
            priority_values[class_name] = wpc["value"]
    flavors: dict[str, Obj] = {}
    for flavor in adm.assigned_flavors(workload) if workload is not None else []:
        found = _get(rest, r.crd(c.KUEUE_GROUP, version, "resourceflavors",
                                 namespaced=False).path(None, flavor))
        if found is not None:
            flavors[flavor] = found
    head_ok = False
    cluster = p.cluster(pod)
    if role_of(pod) == c.ROLE_WORKER and cluster:
        heads = _items(rest.get(r.PODS.path(namespace), {
            "labelSelector": f"{c.CLUSTER_LABEL}={cluster},{c.NODE_TYPE_LABEL}={c.ROLE_HEAD}"}))
        pairs = [(h, next((x for x in items if w.pod_uid_of(x) == p.uid(h) and w.is_ours(x)),
                          None)) for h in heads]
        head_ok = d.head_admitted(pairs)
    # head_first as the controller's default; the CLI cannot see the server's setting.
    return d.Context(version=version, head_admitted=head_ok, flavors=flavors,
                     priority_values=priority_values)


def _get(rest: Rest, path: str) -> Obj | None:
    try:
        found = rest.get(path)
    except ApiError as exc:
        if exc.is_not_found or exc.status == 403:
            return None
        raise
    return found if isinstance(found, dict) else None


def _items(listing: Any) -> list[Obj]:
    items = listing.get("items") if isinstance(listing, dict) else None
    return [x for x in items if isinstance(x, dict)] if isinstance(items, list) else []


# --- rendering helpers -------------------------------------------------------------------


def _queue_lines(lines: list[str], queue: str | None, local_queue: Obj | None,
                 cluster_queue: Obj | None, admitted_to: str | None = None) -> None:
    if not queue:
        lines.append(f"  queue:      none (label {c.QUEUE_LABEL} missing)")
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
        not w.is_deleting(wl)


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
