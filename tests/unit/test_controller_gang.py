"""The gang rule (controller/gang.py) over every order in which the autoscaler may delete pods."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from raykueue.controller.gang import HEAD_GROUP, Base, Member, minimum, plan, quota_held

pytestmark = pytest.mark.unit

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


def _delete_in_order(order: tuple[str, ...]) -> None:
    members = {m.uid: m for m in cluster()}
    base = Base(exists=True, admitted=True)
    for victim in order:
        if members.pop(victim, None) is None:
            continue  # evicted with the base already
        got = plan(list(members.values()), MINS, base)
        if got.requeue:
            # The base goes whole: its pods are evicted, the extras keep their own Workloads.
            members = {uid: m for uid, m in members.items() if m.own_workload}
            base = Base()
        else:
            for uid in got.move_in:
                members[uid] = dataclasses.replace(members[uid], own_workload=False)
            if got.reclaim:
                # reclaimablePods never decreases (Kueue refuses that on an admitted Workload)
                assert all(n >= base.reclaimed.get(g, 0) for g, n in got.reclaim.items())
                base = dataclasses.replace(base, reclaimed=got.reclaim)
            if base.exists:
                assert {m.uid for m in members.values() if not m.own_workload} <= set(got.release)
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
