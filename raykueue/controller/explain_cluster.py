"""`raykueue explain raycluster NAME`: one Ray cluster's pods as Kueue sees them.

`summarise` is pure: from the cluster's pods, its Workloads and each gated
pod's verdict (the same `verdict.verdict` `explain POD` and the stuck-gate
report print) it counts workers running, waiting for quota (and where in the
queue), waiting for their head, without a Workload, and evicted (and why).
`explain_raycluster` reads those as the calling user; `render` words them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from raykueue.controller import decide as d
from raykueue.controller import pods as p
from raykueue.controller import verdict as v
from raykueue.controller import workload as w
from raykueue.controller.caches import RAYCLUSTERS
from raykueue.controller.current import claims
from raykueue.controller.explain import VISIBLE_QUEUES, queue_position
from raykueue.controller.facts import Facts, gather
from raykueue.controller.live import ApiSource, get, items
from raykueue.core import contract as c
from raykueue.core.objects import Obj, annotations, labels
from raykueue.core.podrole import role_of
from raykueue.kube import resources as r
from raykueue.kube.rest import ApiError, Rest

# A pod's state in the summary, in the order they are listed.
RUNNING, STARTING, WAITING_FOR_QUOTA, WAITING_FOR_HEAD, NO_WORKLOAD, EVICTED, ENDED = (
    "running", "starting", v.WAITING_FOR_QUOTA, v.WAITING_FOR_HEAD, v.NO_WORKLOAD, "evicted",
    "ended")
STATES = (RUNNING, STARTING, WAITING_FOR_QUOTA, WAITING_FOR_HEAD, NO_WORKLOAD, EVICTED, ENDED)

# (position in LocalQueue, position in ClusterQueue or None, estimated?) by Workload name.
Positions = Mapping[str, tuple[int, int | None, bool]]


def _evicted(wl: Obj | None) -> dict[str, str] | None:
    """Kueue's Evicted condition (with Preempted's detail when it says more)."""
    if wl is None or not w.is_evicted(wl):
        return None
    cond = w.condition(wl, w.EVICTED) or {}
    return {"reason": str(cond.get("reason") or ""), "message": str(cond.get("message") or "")}


def pod_entry(pod: Obj, workload: Obj | None, facts: Facts | None,
              positions: Positions) -> dict[str, Any]:
    """One pod: its state, why, its Workload, and its place in the queue if it waits."""
    entry: dict[str, Any] = {
        "name": p.name(pod), "role": role_of(pod) or "", "group": labels(pod).get(c.GROUP_LABEL),
        "workload": p.name(workload) if workload is not None else None,
    }
    evicted = _evicted(workload)
    if evicted is not None:
        entry.update(state=EVICTED, evicted=evicted)
    elif p.is_terminal(pod):
        entry["state"] = ENDED
    elif not p.is_gated(pod):
        entry["state"] = RUNNING if p.phase(pod) == "Running" else STARTING
    else:
        found = v.verdict(facts) if facts is not None else None
        entry["state"] = found.reason if found is not None else NO_WORKLOAD
        entry["why"] = found.text if found is not None else ""
    if workload is not None and p.name(workload) in positions and entry["state"] == WAITING_FOR_QUOTA:
        local, cluster_queue, estimated = positions[p.name(workload)]
        entry["position"] = {"localQueue": local, "clusterQueue": cluster_queue,
                             "estimated": estimated}
    return entry


def summarise(namespace: str, name: str, cluster: Obj | None, pods: Sequence[Obj],
              workloads: Sequence[Obj], verdicts: Callable[[Obj], Facts | None],
              positions: Positions, local_queue: Obj | None = None) -> dict[str, Any]:
    """The cluster's summary as data (`-o json` prints it as is)."""
    ours = [x for x in workloads if labels(x).get(c.CLUSTER_LABEL) == name]
    entries = []
    for pod in sorted(pods, key=lambda x: (role_of(x) != c.ROLE_HEAD, p.name(x))):
        found = claims(pod, ours)
        workload = found.current or next(iter(found.foreign), None)
        entries.append(pod_entry(pod, workload, verdicts(pod) if p.is_gated(pod) else None,
                                 positions))
    # Workloads Kueue evicted whose pod is already gone (raykueue deleted it):
    # still the answer to "why did my worker disappear?" until they are collected.
    live = {p.uid(x) for x in pods}
    for wl in ours:
        gone = w.pod_uid_of(wl) not in live
        if gone and _evicted(wl) is not None:
            entries.append({"name": (w.owner_pod(wl) or ("", ""))[0], "role": labels(wl).get(
                c.NODE_TYPE_LABEL, ""), "group": labels(wl).get(c.GROUP_LABEL),
                "workload": p.name(wl), "state": EVICTED, "evicted": _evicted(wl), "podGone": True})
    workers = [e for e in entries if e["role"] == c.ROLE_WORKER]
    queue = None
    if cluster is not None:
        queue = annotations(cluster).get(c.QUEUE_ANNOTATION) or labels(cluster).get(c.QUEUE_LABEL)
    queue = queue or next((q for q in map(w.pod_queue, pods) if q), None)
    status = (local_queue or {}).get("status") or {}
    return {
        "kind": c.RAYCLUSTER_KIND, "namespace": namespace, "name": name,
        "found": cluster is not None,
        "queue": queue,
        "localQueue": None if local_queue is None else {
            "clusterQueue": (local_queue.get("spec") or {}).get("clusterQueue"),
            "pending": status.get("pendingWorkloads"), "admitted": status.get("admittedWorkloads")},
        "head": next((e for e in entries if e["role"] == c.ROLE_HEAD), None),
        "workers": {state: sum(1 for e in workers if e["state"] == state) for state in STATES},
        "pods": entries,
    }


def render(summary: Mapping[str, Any]) -> str:
    ns, name = summary["namespace"], summary["name"]
    lines = [f"RayCluster {ns}/{name}" + ("" if summary["found"] else " (not found; its pods:)")]
    queue = summary["queue"]
    lq = summary["localQueue"]
    if queue is None:
        lines.append(f"  queue:      none (annotation {c.QUEUE_ANNOTATION} missing)")
    elif lq is None:
        lines.append(f"  queue:      LocalQueue {queue} (not found)")
    else:
        lines.append(f"  queue:      LocalQueue {queue} -> ClusterQueue {lq['clusterQueue'] or '?'}"
                     f"  [{lq['pending']} pending, {lq['admitted']} admitted]")
    head = summary["head"]
    lines.append(f"  head:       {_state(head) if head else 'no head pod'}")
    counts = summary["workers"]
    said = [f"{n} {state.replace('_', ' ')}" for state, n in counts.items() if n]
    lines.append(f"  workers:    {', '.join(said) or 'none'}")
    for entry in summary["pods"]:
        if entry["role"] == c.ROLE_WORKER and entry["state"] not in (RUNNING,):
            lines.append(f"    {entry['name']}: {_state(entry)}")
    return "\n".join(lines)


def _state(entry: Mapping[str, Any]) -> str:
    state = entry["state"]
    text = state.replace("_", " ")
    if state == EVICTED:
        ev = entry["evicted"]
        text += f" by Kueue ({ev['reason']}): {ev['message']}" if ev["message"] else f" ({ev['reason']})"
        if entry.get("podGone"):
            text += "; raykueue deleted the pod"
    elif "position" in entry:
        pos = entry["position"]
        text += f", {_nth(pos['localQueue'])} in its LocalQueue"
        if pos["clusterQueue"] is not None:
            text += f", {_nth(pos['clusterQueue'])} in its ClusterQueue"
        if pos["estimated"]:
            text += " (estimated from priority and creation time)"
    elif entry.get("why") and state != WAITING_FOR_QUOTA:
        text += f": {entry['why']}"
    return text


def _nth(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


# --- reading, as the calling user --------------------------------------------------------


def explain_raycluster(rest: Rest, namespace: str, name: str) -> dict[str, Any]:
    """Read the cluster, its pods and Workloads, and summarise them."""
    cluster = get(rest, RAYCLUSTERS.path(namespace, name))
    pods = items(rest.get(r.PODS.path(namespace), {"labelSelector": f"{c.CLUSTER_LABEL}={name}"}))
    version = next((x for x in w.VERSIONS if x in r.served_versions(rest, c.KUEUE_GROUP)), None)
    if version is None:
        return summarise(namespace, name, cluster, pods, [], lambda _: None, {})
    workloads = items(rest.get(r.crd(c.KUEUE_GROUP, version, "workloads").path(namespace)))
    source = ApiSource(rest, version, workloads)
    context = d.Context(version=version)
    heads_seen: dict[tuple[str, str], bool] = {}

    def verdicts(pod: Obj) -> Facts:
        return gather(source, pod, context, heads_seen)

    summary_queue = (annotations(cluster or {}).get(c.QUEUE_ANNOTATION)
                     or labels(cluster or {}).get(c.QUEUE_LABEL)
                     or next((q for q in map(w.pod_queue, pods) if q), None))
    local_queue = get(rest, r.crd(c.KUEUE_GROUP, version, "localqueues").path(
        namespace, summary_queue)) if summary_queue else None
    ours = [x for x in workloads if labels(x).get(c.CLUSTER_LABEL) == name]
    return summarise(namespace, name, cluster, pods, workloads, verdicts,
                     _positions(rest, namespace, ours, workloads), local_queue)


def _positions(rest: Rest, namespace: str, ours: Sequence[Obj], peers: Sequence[Obj]) -> dict[
        str, tuple[int, int | None, bool]]:
    """Kueue's own positions (VisibilityOnDemand) where served, else the estimate."""
    out: dict[str, tuple[int, int | None, bool]] = {}
    visible: dict[str, dict[str, Obj] | None] = {}
    for wl in ours:
        queue = w.queue_name(wl)
        if queue and queue not in visible:
            try:
                listing = rest.get(VISIBLE_QUEUES.path(namespace, queue, "pendingworkloads"))
                visible[queue] = {p.name(x): x for x in items(listing)}
            except ApiError:
                visible[queue] = None  # not served or not allowed: estimate
        entry = (visible.get(queue or "") or {}).get(p.name(wl))
        if entry is not None:
            out[p.name(wl)] = (int(entry.get("positionInLocalQueue", 0)) + 1,
                               int(entry.get("positionInClusterQueue", 0)) + 1, False)
            continue
        estimate = queue_position(wl, peers)
        if estimate is not None:
            out[p.name(wl)] = (estimate[0], None, True)
    return out
