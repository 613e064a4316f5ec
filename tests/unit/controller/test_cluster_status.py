"""Events on the RayCluster: what a cluster's Workloads say, and how often it is said."""

from __future__ import annotations

import copy
from typing import Any

from raykueue.controller import cluster_status as cs
from raykueue.core import contract as c
from raykueue.core.clock import timestamp
from raykueue.kube.events import NORMAL, WARNING
from testkit import controller_objects as o

CREATED = timestamp(o.T0)
assert CREATED is not None
LATER = CREATED + 120.0
CLUSTER = ("team-a", "raycluster-gpu")


def wl(role: str, state: str, name: str, **kw: Any) -> dict[str, Any]:
    return o.workload(o.pod(role, name=name, **kw), state)


def as_(obj: dict[str, Any], state: str) -> dict[str, Any]:
    """The same Workload (same uid) in another state, as a watch would bring it."""
    other = o.workload(o.pod(c.ROLE_WORKER, name="x"), state)
    out = copy.deepcopy(obj)
    out["status"] = other.get("status", {})
    return out


def test_read_sorts_a_workload_by_what_kueue_said() -> None:
    assert cs.read(wl(c.ROLE_HEAD, "new", "h")).state == cs.NEW
    pending = cs.read(wl(c.ROLE_WORKER, "pending", "w"))
    assert (pending.state, pending.queue, pending.pod, pending.cluster) == (
        cs.PENDING, "team-a", "w", CLUSTER)
    assert "insufficient unused quota" in pending.message
    assert cs.read(wl(c.ROLE_WORKER, "reserved", "w")).state == cs.RESERVED
    assert cs.read(wl(c.ROLE_WORKER, "admitted", "w")).state == cs.RUNNING
    evicted = cs.read(wl(c.ROLE_WORKER, "evicted", "w"))
    assert (evicted.state, evicted.reason) == (cs.EVICTED, "Preempted")
    assert cs.read(wl(c.ROLE_WORKER, "finished", "w")).state == cs.ENDED
    # Not ours (Kueue's own), or no Ray cluster: nothing to say on a RayCluster.
    assert cs.read(o.workload(o.pod(name="k"), "pending", ours=False)) is None
    no_cluster = wl(c.ROLE_WORKER, "pending", "w")
    del no_cluster["metadata"]["labels"][c.CLUSTER_LABEL]
    assert cs.read(no_cluster) is None


def test_a_new_workload_waits_only_past_the_grace_kueue_usually_needs_less_than() -> None:
    new = cs.read(wl(c.ROLE_WORKER, "new", "w"))
    assert not new.waiting(CREATED + 9.0, 10.0)
    assert new.waiting(CREATED + 10.0, 10.0)
    assert cs.read(wl(c.ROLE_WORKER, "pending", "w")).waiting(CREATED, 10.0)
    assert not cs.read(wl(c.ROLE_WORKER, "admitted", "w")).waiting(LATER, 10.0)


def test_waiting_names_the_pods_the_queue_and_kueues_words() -> None:
    tracker, limiter = cs.Tracker(), cs.Limiter()
    for obj in (wl(c.ROLE_WORKER, "pending", "w1"), wl(c.ROLE_WORKER, "new", "w2"),
                wl(c.ROLE_WORKER, "admitted", "w3"), wl(c.ROLE_HEAD, "admitted", "h")):
        tracker.observe("ADDED", obj, LATER)
    (note,) = cs.plan(tracker, limiter, LATER)
    assert (note.cluster, note.type, note.reason) == (CLUSTER, NORMAL, cs.WAITING_FOR_QUOTA)
    assert note.message.startswith("2 pods wait for quota in LocalQueue team-a (w1, w2); Kueue: "
                                   "couldn't assign flavors")


def test_many_waiting_pods_are_counted_not_all_named() -> None:
    items = [cs.read(wl(c.ROLE_WORKER, "pending", f"w{i:02d}")) for i in range(12)]
    text = cs.waiting_message(items)
    assert "12 pods wait" in text and "w00, w01, w02, w03, w04 and 7 more" in text
    assert text.count("couldn't assign") == 1  # the same words from Kueue said once


def test_admitted_is_said_only_after_a_wait() -> None:
    tracker, limiter = cs.Tracker(), cs.Limiter()
    waited = wl(c.ROLE_WORKER, "pending", "slow")
    at_once = wl(c.ROLE_WORKER, "new", "fast")
    tracker.observe("ADDED", waited, CREATED + 1)
    tracker.observe("ADDED", at_once, CREATED + 1)
    tracker.observe("MODIFIED", as_(at_once, "admitted"), CREATED + 2)  # within the grace
    assert cs.plan(tracker, limiter, CREATED + 2)[0].reason == cs.WAITING_FOR_QUOTA
    tracker.observe("MODIFIED", as_(waited, "admitted"), CREATED + 200)
    (note,) = cs.plan(tracker, limiter, CREATED + 200)
    # The condition's lastTransitionTime (T1) minus the creation (T0): 3 s.
    assert (note.type, note.reason, note.message) == (
        NORMAL, cs.ADMITTED, "Kueue admitted 1 pod that waited for quota: slow after 3s")
    assert cs.plan(tracker, limiter, CREATED + 400) == []  # said once, and nothing waits


def test_an_eviction_by_kueue_names_the_pod_and_kueues_reason() -> None:
    tracker, limiter = cs.Tracker(), cs.Limiter()
    running = wl(c.ROLE_WORKER, "admitted", "w1")
    tracker.observe("ADDED", running, LATER)
    tracker.observe("MODIFIED", as_(running, "evicted"), LATER)
    (note,) = cs.plan(tracker, limiter, LATER)
    assert (note.type, note.reason) == (WARNING, cs.PREEMPTED)
    assert note.message.startswith("Kueue evicted the Workload of w1: Preempted: Preempted to "
                                   "accommodate a workload")
    # Any other reason of Kueue's is an eviction, not a preemption.
    other = as_(running, "evicted")
    other["status"]["conditions"][-2]["reason"] = "PodsReadyTimeout"
    assert cs.eviction_reason(cs.read(other)) == cs.EVICTED_BY_KUEUE


def test_a_state_found_on_the_first_sight_is_not_news() -> None:
    # The initial list after a restart: whoever saw it happen said it.
    tracker = cs.Tracker()
    tracker.observe("ADDED", wl(c.ROLE_WORKER, "evicted", "w1"), LATER)
    tracker.observe("ADDED", wl(c.ROLE_WORKER, "admitted", "w2"), LATER)
    assert cs.plan(tracker, cs.Limiter(), LATER) == []


def test_one_event_per_reason_per_cluster_per_interval_the_rest_held_and_merged() -> None:
    tracker, limiter = cs.Tracker(), cs.Limiter(interval=60.0)
    a, b = (wl(c.ROLE_WORKER, "admitted", n) for n in ("a", "b"))
    other = wl(c.ROLE_WORKER, "admitted", "z", cluster="other")
    for obj in (a, b, other):
        tracker.observe("ADDED", obj, LATER)
    tracker.observe("MODIFIED", as_(a, "evicted"), LATER)
    assert [n.message.split(":")[0] for n in cs.plan(tracker, limiter, LATER)] == [
        "Kueue evicted the Workload of a"]
    tracker.observe("MODIFIED", as_(b, "evicted"), LATER + 1)
    tracker.observe("MODIFIED", as_(other, "evicted"), LATER + 1)
    # Another cluster has its own window; this one's second eviction waits for its.
    (note,) = cs.plan(tracker, limiter, LATER + 1)
    assert note.cluster == ("team-a", "other")
    assert cs.plan(tracker, limiter, LATER + 59) == []
    (note,) = cs.plan(tracker, limiter, LATER + 60)
    assert (note.cluster, note.message.split(":")[0]) == (CLUSTER, "Kueue evicted the Workload of b")


def test_a_standing_wait_is_said_again_only_when_it_changes_or_after_the_refresh() -> None:
    tracker, limiter = cs.Tracker(), cs.Limiter(interval=60.0, refresh=1800.0)
    tracker.observe("ADDED", wl(c.ROLE_WORKER, "pending", "w1"), LATER)
    assert cs.plan(tracker, limiter, LATER)[0].message.startswith("1 pod waits for quota")
    assert cs.plan(tracker, limiter, LATER + 600) == []  # the same words
    tracker.observe("ADDED", wl(c.ROLE_WORKER, "pending", "w2"), LATER + 601)
    assert cs.plan(tracker, limiter, LATER + 601)[0].message.startswith("2 pods wait")
    # Changed again 10 s later: held until the window ends, then said as it is then.
    tracker.observe("ADDED", wl(c.ROLE_WORKER, "pending", "w3"), LATER + 611)
    assert cs.plan(tracker, limiter, LATER + 611) == []
    assert cs.plan(tracker, limiter, LATER + 661)[0].message.startswith("3 pods wait")
    assert cs.plan(tracker, limiter, LATER + 661 + 1799) == []
    assert cs.plan(tracker, limiter, LATER + 661 + 1800)[0].message.startswith("3 pods wait")


def test_a_cluster_whose_workloads_are_gone_is_forgotten() -> None:
    tracker = cs.Tracker()
    obj = wl(c.ROLE_WORKER, "pending", "w1")
    tracker.observe("ADDED", obj, LATER)
    tracker.observe("DELETED", obj, LATER)
    assert tracker.clusters() == []
    finished = wl(c.ROLE_WORKER, "admitted", "w2")
    tracker.observe("ADDED", finished, LATER)
    tracker.observe("MODIFIED", as_(finished, "finished"), LATER)
    assert tracker.clusters() == []


def test_cluster_status_writes_on_the_cached_raycluster_only() -> None:
    written: list[tuple[Any, ...]] = []
    clusters = {CLUSTER: {"metadata": {"name": CLUSTER[1], "namespace": CLUSTER[0], "uid": "u1"}}}
    status = cs.ClusterStatus(lambda ns, name: clusters.get((ns, name)),
                              lambda *e: written.append(e), clock=lambda: LATER)
    status.on_workload("ADDED", wl(c.ROLE_WORKER, "pending", "w1"))
    status.on_workload("ADDED", wl(c.ROLE_WORKER, "pending", "w9", cluster="uncached"))
    assert len(status.flush()) == 2
    ((target, type_, reason, _),) = written
    assert (target["kind"], target["apiVersion"], target["metadata"]["uid"]) == (
        "RayCluster", "ray.io/v1", "u1")
    assert (type_, reason) == (NORMAL, cs.WAITING_FOR_QUOTA)
