"""The gang rule (controller/gang/rule.py) over every order in which the autoscaler may delete pods."""

from __future__ import annotations

import dataclasses
import itertools

from raykueue.controller.gang.rule import HEAD_GROUP, Base, Member, Plan, minimum, plan, quota_held

MINS = minimum({"a": 2, "b": 1, "spare": 0})


def cluster() -> list[Member]:
    """Head, two base workers of a and one of b; two extras of a and one of b."""
    spec = [("head", HEAD_GROUP, False), ("a1", "a", False), ("a2", "a", False), ("b1", "b", False),
            ("a3", "a", True), ("a4", "a", True), ("b2", "b", True)]
    return [Member(uid, group, f"t{i:02d}", own) for i, (uid, group, own) in enumerate(spec)]


def test_minimum_is_the_head_and_each_groups_min_replicas() -> None:
    assert MINS == {HEAD_GROUP: 1, "a": 2, "b": 1}


def test_the_base_is_created_only_once_every_base_pod_exists() -> None:
    pods = [m for m in cluster() if not m.own_workload]
    for i in range(len(pods)):
        partial = pods[:i]
        got = plan(partial, MINS, Base())
        assert not got.create_base and got.waiting
    assert plan(pods, MINS, Base()).create_base


def test_nothing_is_released_and_no_extra_admitted_before_the_base() -> None:
    members = [dataclasses.replace(m, own_workload=False) for m in cluster()]
    got = plan(members, MINS, Base(exists=True))
    assert got.release == () and got.move_in == () and "admit the base" in got.waiting
    # The oldest fill the base; the rest wait as extras (their Workloads come after the base).
    assert set(got.extras) == {"a3", "a4", "b2"}
    admitted = plan(members, MINS, Base(exists=True, admitted=True))
    assert set(admitted.release) == {"head", "a1", "a2", "b1"}


def running() -> dict[str, Member]:
    """The cluster as it runs: every pod past the gate, the extras' Workloads admitted."""
    return {m.uid: dataclasses.replace(m, released=True, own_admitted=m.own_workload)
            for m in cluster()}


def _apply(members: dict[str, Member], got: Plan) -> None:
    """What the actions of `got` make of the pods (Kueue admitting new extras at once)."""
    for uid in got.move_in:
        members[uid] = dataclasses.replace(members[uid], own_workload=False, own_admitted=False)
    for uid in got.release:
        members[uid] = dataclasses.replace(members[uid], released=True)
    for uid in got.extras:
        if not members[uid].own_workload:
            members[uid] = dataclasses.replace(members[uid], own_workload=True, own_admitted=True)
            members[uid] = dataclasses.replace(members[uid], released=True)


def _leaning(members: dict[str, Member], group: str) -> int:
    return sum(1 for m in members.values()
               if m.group == group and m.released and not m.own_admitted)


def _delete_in_order(order: tuple[str, ...]) -> None:
    members = running()
    base = Base(exists=True, admitted=True)
    for victim in order:
        if members.pop(victim, None) is None:
            continue  # evicted with the base already
        got = plan(list(members.values()), MINS, base)
        assert got.uncovered == () and got.move_out == ()
        if got.requeue:
            # The gang goes whole, extras too (gang.decide proposes every pod for removal).
            members = {}
            base = Base()
        else:
            _apply(members, got)
            if got.reclaim:
                # reclaimablePods never decreases (Kueue refuses that on an admitted Workload)
                assert all(n >= base.reclaimed.get(g, 0) for g, n in got.reclaim.items())
                assert set(base.reclaimed) <= set(got.reclaim)  # written whole
                base = dataclasses.replace(base, reclaimed=got.reclaim)
            if base.exists:
                assert {m.uid for m in members.values() if not m.own_workload} == set(got.standing)
                for group, n in MINS.items():
                    assert _leaning(members, group) <= n - base.reclaimed.get(group, 0)
        extras = sum(1 for m in members.values() if m.own_workload)
        assert quota_held(MINS, base, extras) == len(members), (order, victim, base, members)


def test_quota_held_equals_the_pods_that_exist_for_every_deletion_order() -> None:
    """All 5,040 orders of deleting the seven pods, checked after every deletion."""
    orders = list(itertools.permutations([m.uid for m in cluster()]))
    assert len(orders) == 5040
    for order in orders:
        _delete_in_order(order)


def test_an_extra_moves_into_a_vacancy_of_its_own_group_only() -> None:
    members = [m for m in cluster() if m.uid != "b1"]
    got = plan(members, MINS, Base(exists=True, admitted=True))
    assert got.move_in == ("b2",) and got.reclaim == {}
    members = [m for m in cluster() if m.uid not in ("b1", "b2")]
    got = plan(members, MINS, Base(exists=True, admitted=True))
    assert got.move_in == () and got.reclaim == {"b": 1}


def test_the_head_leaving_requeues_the_base_whole() -> None:
    members = [m for m in cluster() if m.group != HEAD_GROUP]
    assert plan(members, MINS, Base(exists=True, admitted=True)).requeue


# --- a slot is filled once: counted from the pods past the gate, never from an order ---


def test_a_pod_sorting_before_a_released_base_pod_never_takes_its_slot() -> None:
    """The read behind the double fill: creationTimestamp has one-second resolution,
    and a pod created in the base pods' second (or seen after them) whose uid sorts
    first came out "oldest", took a slot and was released; the base pod it displaced
    was already running and, past the gate, was skipped for good."""
    base = Base(exists=True, admitted=True)
    head = Member("h", HEAD_GROUP, "t00", released=True)
    a1, a2 = (Member(uid, "a", "t00", released=True) for uid in ("u5", "u7"))
    b1 = Member("u6", "b", "t00", released=True)
    newcomer = Member("u1", "a", "t00")  # same second, smallest uid
    got = plan([head, a1, a2, b1, newcomer], MINS, base)
    assert got.release == () and got.uncovered == ()
    assert got.extras == ("u1",)  # it queues for a Workload of its own
    assert set(got.standing) == {"h", "u5", "u7", "u6"}


def test_a_base_pod_missing_from_the_snapshot_still_holds_its_slot() -> None:
    """A base pod the snapshot lacks (the controller released it; its pod has not been
    seen to go) is counted in its slot: the newcomer is not released under the base."""
    base = Base(exists=True, admitted=True)
    seen = [Member("h", HEAD_GROUP, "t00", released=True), Member("u5", "a", "t00", released=True),
            Member("u6", "b", "t00", released=True), Member("u9", "a", "t05")]
    assert plan(seen, MINS, base).release == ("u9",)  # what one snapshot alone allows
    got = plan(seen, MINS, base, unseen={"a": 1})
    assert got.release == () and got.extras == ("u9",) and got.reclaim == {}


def test_pods_arriving_in_any_order_never_fill_a_slot_twice() -> None:
    """Pods of one second, seen one by one in every order, a pass after each arrival."""
    pods = [Member("h", HEAD_GROUP, "t00")] + [
        Member(uid, "a", "t00") for uid in ("u3", "u1", "u4", "u2")] + [
        Member(uid, "b", "t00") for uid in ("u6", "u5")]
    for order in itertools.permutations(pods[1:]):
        members: dict[str, Member] = {"h": pods[0]}
        base = Base(exists=True, admitted=True)
        for arrival in order:
            members[arrival.uid] = arrival
            got = plan(list(members.values()), MINS, base)
            assert got.uncovered == ()
            _apply(members, got)
            for group, n in MINS.items():
                assert _leaning(members, group) <= n, (order, members)


def test_released_pods_beyond_the_slots_are_uncovered_newest_first() -> None:
    members = [m for m in running().values() if not m.own_workload]
    intruder = Member("late", "a", "t09", released=True)
    got = plan([*members, intruder], MINS, Base(exists=True, admitted=True))
    assert got.uncovered == ("late",) and got.release == ()
    assert "late" not in got.standing


def test_without_an_admitted_base_released_pods_are_uncovered() -> None:
    members = list(running().values())
    for base in (Base(), Base(exists=True)):  # gone, or pending
        got = plan(members, MINS, base)
        # The extras have admitted Workloads of their own; the others have nothing.
        assert set(got.uncovered) == {"head", "a1", "a2", "b1"}


def test_an_extra_leaning_on_nothing_is_uncovered_but_one_moving_out_is_not() -> None:
    members = running()
    members["a3"] = dataclasses.replace(members["a3"], own_admitted=False)
    got = plan(list(members.values()), MINS, Base(exists=True, admitted=True))
    assert got.uncovered == ("a3",)  # the base's slots are all taken
    lowered = {**MINS, "a": 1}
    members = running()
    members["a2"] = dataclasses.replace(members["a2"], own_workload=True)  # moving out
    got = plan(list(members.values()), lowered, Base(exists=True, admitted=True, counts=MINS))
    assert got.uncovered == () and got.reclaim == {} and got.move_out == ()


# --- minReplicas changed on a running gang ------------------------------------------------


def test_min_lowered_moves_the_newest_base_pod_out_then_hands_its_slot_back() -> None:
    lowered = minimum({"a": 1, "b": 1})
    members = running()
    base = Base(exists=True, admitted=True, counts=MINS)
    got = plan(list(members.values()), lowered, base)
    assert got.move_out == ("a2",) and got.reclaim == {} and got.uncovered == ()
    members["a2"] = dataclasses.replace(members["a2"], own_workload=True)  # its Workload, pending
    got = plan(list(members.values()), lowered, base)
    assert got.move_out == () and got.reclaim == {} and got.uncovered == ()
    members["a2"] = dataclasses.replace(members["a2"], own_admitted=True)  # Kueue admits it
    got = plan(list(members.values()), lowered, base)
    assert got.reclaim == {"a": 1}
    base = dataclasses.replace(base, reclaimed=got.reclaim)
    assert plan(list(members.values()), lowered, base) == Plan(
        extras=("a2", "a3", "a4", "b2"), standing=("head", "a1", "b1"))
    assert quota_held(lowered, base, 4) == len(members)


def test_min_raised_on_an_admitted_base_leaves_the_new_pods_extras() -> None:
    raised = minimum({"a": 3, "b": 1})
    members = running()
    members["a5"] = Member("a5", "a", "t09")
    got = plan(list(members.values()), raised, Base(exists=True, admitted=True, counts=MINS))
    assert got.release == () and "a5" in got.extras and got.uncovered == ()
    assert not got.remake_base


def test_min_changed_on_a_pending_base_makes_it_again() -> None:
    pods = [m for m in cluster() if not m.own_workload]
    got = plan(pods, minimum({"a": 1, "b": 1}), Base(exists=True, counts=MINS))
    assert got.remake_base and got.release == ()
    assert not plan(pods, MINS, Base(exists=True, counts=MINS)).remake_base


def test_a_worker_kuberay_is_told_to_delete_is_never_planned_on() -> None:
    """minReplicas and replicas lowered in one write, the victim named: nothing moves out
    while the victim stands in its slot, and the slot goes back once it is gone."""
    lowered = minimum({"a": 1, "b": 1})
    members = {uid: m for uid, m in running().items() if not m.own_workload or m.group != "a"}
    members["a2"] = dataclasses.replace(members["a2"], going=True)
    base = Base(exists=True, admitted=True, counts=MINS)
    got = plan(list(members.values()), lowered, base)
    assert got.move_out == () and got.reclaim == {} and got.uncovered == ()
    del members["a2"]
    assert plan(list(members.values()), lowered, base).reclaim == {"a": 1}
    gated_victim = Member("a9", "a", "t09", going=True)
    got = plan([*members.values(), gated_victim], MINS, base)
    assert "a9" not in got.release and "a9" not in got.extras
