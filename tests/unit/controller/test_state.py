"""The controller's state on its own: indexes, departed pods, the overlay."""

from __future__ import annotations

import copy

from raykueue.controller.keys import GangKey, OrphansKey, PodKey
from raykueue.controller.state import State, owner_key
from raykueue.core import contract as c
from raykueue.kube.cache import DELETED
from testkit import controller_objects as o

NS = "team-a"


def key_of(obj: dict) -> tuple[str, str]:
    return obj["metadata"]["namespace"], obj["metadata"]["name"]


def pod_key(obj: dict) -> PodKey:
    return PodKey(*key_of(obj))


def test_workload_is_indexed_under_its_owner_until_deleted():
    state = State()
    pod = o.pod()
    wl = o.workload(pod)
    key = owner_key(wl)
    assert key == pod_key(pod)
    state.workload_event("ADDED", wl, key, None)
    assert state.workload_names(key) == {wl["metadata"]["name"]}
    state.workload_event(DELETED, wl, key, None)
    assert state.workload_names(key) == set()


def test_owner_key_of_orphans_and_of_kueues_own():
    pod = o.pod()
    orphan = o.workload(pod)
    orphan["metadata"]["ownerReferences"] = []
    assert owner_key(orphan) == OrphansKey(NS)
    foreign = o.workload(pod, ours=False)
    foreign["metadata"]["ownerReferences"] = []
    assert owner_key(foreign) is None


def test_a_gang_base_is_its_clusters_key_which_no_pod_key_equals():
    pod = o.pod()
    base = o.workload(pod)
    base["metadata"]["ownerReferences"] = [{"kind": "RayCluster", "name": "rc", "uid": "u"}]
    base["metadata"]["labels"][c.GANG_LABEL] = "rc"
    assert owner_key(base) == GangKey(NS, "rc")
    # A pod may be named like its cluster, or like nothing at all: the kinds never mix,
    # so the queue never merges two passes of different kinds.
    assert len({GangKey(NS, "rc"), PodKey(NS, "rc"), OrphansKey(NS), PodKey(NS, "")}) == 4


def test_cluster_members_wait_until_they_have_a_workload():
    state = State()
    head = o.pod(c.ROLE_HEAD, cluster="rc")
    worker = o.pod(c.ROLE_WORKER, cluster="rc")
    for pod in (head, worker):
        state.pod_event("ADDED", pod)
    assert state.heads(NS, "rc") == [head["metadata"]["name"]]
    assert sorted(state.waiting_members(NS, "rc")) == sorted(
        [head["metadata"]["name"], worker["metadata"]["name"]])
    state.add_owned(pod_key(worker), "its-workload")
    assert state.waiting_members(NS, "rc") == [head["metadata"]["name"]]
    state.pod_event(DELETED, head)
    assert state.heads(NS, "rc") == []


def test_departed_pod_is_kept_until_its_pass_forgets_it():
    state = State()
    pod = o.pod()
    key = key_of(pod)
    state.pod_event("ADDED", pod)
    assert state.departed(key) is None
    state.pod_event(DELETED, pod)
    assert state.departed(key) == pod
    assert state.first_report(pod["metadata"]["uid"], ("podX", "m"))
    state.set_conflict(f"{key[0]}/{key[1]}", "Kind", "msg")
    state.forget_pod(key, pod)
    assert state.departed(key) is None
    assert state.conflicts() == {}
    # Its reported events were forgotten with it.
    assert state.first_report(pod["metadata"]["uid"], ("podX", "m"))


def test_when_a_pod_departed_is_kept_with_it():
    state = State()
    pod = o.pod()
    key = key_of(pod)
    state.pod_event(DELETED, pod, now=42.0)
    assert state.departed_at(key) == 42.0
    state.pod_event("ADDED", pod, now=43.0)  # it came back: nothing departed
    assert state.departed_at(key) is None
    state.pod_event(DELETED, pod)  # no clock given: unknown, never a stale time
    assert state.departed(key) == pod and state.departed_at(key) is None
    state.pod_event(DELETED, pod, now=44.0)
    state.forget_pod(key, pod)
    assert state.departed_at(key) is None


def test_a_pod_that_comes_back_is_no_longer_departed():
    state = State()
    pod = o.pod()
    state.pod_event(DELETED, pod)
    state.pod_event("ADDED", pod)
    assert state.departed(key_of(pod)) is None


def test_overlay_serves_our_write_until_the_cache_moves_past_what_it_replaced():
    state = State()
    before = o.pod()
    after = copy.deepcopy(before)
    after["metadata"]["resourceVersion"] = "new"
    key = key_of(before)
    state.remember("pod", key, before, after)
    assert state.read("pod", key, before) is after  # the cache still lags
    newer = copy.deepcopy(before)
    newer["metadata"]["resourceVersion"] = "newer"
    assert state.read("pod", key, newer) is newer  # the cache caught up
    assert state.read("pod", key, before) is before  # and the overlay entry is gone


def test_overlay_entry_is_dropped_by_the_watch_event_that_delivers_the_write():
    state = State()
    pod = o.pod()
    written = copy.deepcopy(pod)
    written["metadata"]["resourceVersion"] = "after-lift"
    state.remember("pod", key_of(pod), pod, written)
    state.pod_event("MODIFIED", written)
    assert state.read("pod", key_of(pod), pod) is pod


def test_created_workloads_are_found_by_name_before_their_watch_event():
    state = State()
    pod = o.pod()
    wl = o.workload(pod)
    name = wl["metadata"]["name"]
    state.remember("workload", (NS, name), None, wl)
    assert name in state.workload_names(PodKey(NS, "another-pod"))  # any key in the namespace
    assert state.read("workload", (NS, name), None) is wl


def test_admission_time_is_recorded_only_when_seen_live():
    state = State()
    pod = o.pod()
    listed = o.workload(pod, "admitted")
    state.workload_event("ADDED", listed, pod_key(pod), None)
    assert state.admitted_at(listed["metadata"]["uid"]) is None
    live = o.workload(pod, "admitted")
    state.workload_event("MODIFIED", live, pod_key(pod), 42.0)
    assert state.admitted_at(live["metadata"]["uid"]) == 42.0
    state.workload_event("MODIFIED", live, pod_key(pod), 99.0)
    assert state.admitted_at(live["metadata"]["uid"]) == 42.0  # the first sighting counts
    state.workload_event(DELETED, live, pod_key(pod), 100.0)
    assert state.admitted_at(live["metadata"]["uid"]) is None


def test_conflicts_report_the_one_they_replace():
    state = State()
    assert state.set_conflict("ns/a", "K1", "m1") is None
    assert state.set_conflict("ns/a", "K2", "m2") == ("K1", "m1")
    assert state.conflicts() == {"ns/a": "K2: m2"}
    state.clear_conflict("ns/a")
    assert state.conflicts() == {}


def test_events_are_first_reported_once():
    state = State()
    assert state.first_report("uid-1", ("podWarn", "m"))
    assert not state.first_report("uid-1", ("podWarn", "m"))
    assert state.first_report("uid-1", ("podWarn", "other"))


def _at(obj: dict, rv: str) -> dict:
    out = copy.deepcopy(obj)
    out["metadata"]["resourceVersion"] = rv
    return out


def test_an_event_older_than_our_write_does_not_drop_it():
    """Someone's write between our read and our patch (the scheduler's SchedulingGated
    condition before a gate lift) reaches the watch before ours: the pod must still
    read as we left it, not as the older event shows it."""
    state = State()
    pod = _at(o.pod(), "100")
    lifted = _at(o.pod(gated=False), "102")
    key = key_of(pod)
    state.remember("pod", key, pod, lifted)
    between = _at(pod, "101")
    state.pod_event("MODIFIED", between)
    assert state.read("pod", key, between) is lifted
    state.pod_event("MODIFIED", lifted)  # ours arrives
    newer = _at(lifted, "103")
    assert state.read("pod", key, newer) is newer


def test_a_result_we_made_up_holds_until_the_cache_moves_past_what_it_replaced():
    state = State()
    pod = _at(o.pod(gated=False), "100")
    deleting = _at(pod, "100")
    deleting["metadata"]["deletionTimestamp"] = o.T2
    state.remember("pod", key_of(pod), pod, deleting)
    assert state.read("pod", key_of(pod), pod) is deleting
    moved = _at(pod, "101")
    assert state.read("pod", key_of(pod), moved) is moved


def test_a_deleted_pod_drops_its_overlay_entry():
    state = State()
    pod = _at(o.pod(), "100")
    state.remember("pod", key_of(pod), pod, _at(o.pod(gated=False), "102"))
    state.pod_event(DELETED, pod)
    assert state.read("pod", key_of(pod), None) is None


def gang_pod(**kw) -> dict:
    pod = o.pod(**kw)
    pod["metadata"]["labels"][c.GANG_LABEL] = "raycluster-gpu"
    return pod


def test_gang_pods_released_are_kept_until_seen_to_go():
    state = State()
    pods = [gang_pod(gated=False) for _ in range(3)]
    for pod in pods:
        state.pod_event("ADDED", pod)
        state.note_gang_released(NS, "raycluster-gpu", pod["metadata"]["uid"], "g", lambda: True)
    deleting = copy.deepcopy(pods[0])
    deleting["metadata"]["deletionTimestamp"] = o.T2
    state.pod_event("MODIFIED", deleting)
    state.pod_event(DELETED, pods[1])
    assert state.gang_released(NS, "raycluster-gpu") == {pods[2]["metadata"]["uid"]: "g"}
    # A pod the cache dropped before the note is never noted (its DELETED came first).
    state.note_gang_released(NS, "raycluster-gpu", "gone-uid", "g", lambda: False)
    assert "gone-uid" not in state.gang_released(NS, "raycluster-gpu")
