"""bench/curve.py: what the cohort bench's growth curve counts as a pending pod, when a
checkpoint is crossed, and the per-1,000 arithmetic."""

from __future__ import annotations

from typing import Any

import pytest

from bench import curve


def workload(*counts: int, conditions: tuple[tuple[str, str], ...] = (),
             deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "wl", "namespace": "ns"}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-05T09:00:00Z"
    return {"metadata": meta,
            "spec": {"podSets": [{"name": f"ps{i}", "count": n} for i, n in enumerate(counts)]},
            "status": {"conditions": [{"type": t, "status": st} for t, st in conditions]}}


def test_parse_checkpoints_sorts_and_dedups() -> None:
    assert curve.parse_checkpoints("5000, 1000,10000,1000") == [1000, 5000, 10000]
    assert curve.parse_checkpoints("") == []


@pytest.mark.parametrize("text", ["0", "1000,-5", "x"])
def test_parse_checkpoints_refuses_what_is_no_count(text: str) -> None:
    with pytest.raises(ValueError):
        curve.parse_checkpoints(text)


def test_a_queued_workload_holds_all_its_pod_sets_pending() -> None:
    # Kueue's elastic RayCluster: one Workload, a head pod set and a worker group.
    assert curve.pending_pods(workload(1, 50)) == 51
    # raykueue: a Workload per pod.
    assert curve.pending_pods(workload(1)) == 1
    # Kueue said why it waits, but holds no quota: still pending.
    assert curve.pending_pods(workload(1, 50, conditions=(("QuotaReserved", "False"),))) == 51


@pytest.mark.parametrize("wl", [
    workload(1, 50, conditions=(("QuotaReserved", "True"),)),
    workload(1, conditions=(("QuotaReserved", "True"), ("Admitted", "True"))),
    workload(1, conditions=(("Finished", "True"),)),
    workload(1, deleting=True),
])
def test_admitted_finished_or_deleting_workloads_hold_nothing_pending(wl: dict[str, Any]) -> None:
    assert curve.pending_pods(wl) == 0


def test_a_pod_set_without_count_is_one_pod() -> None:
    wl = {"metadata": {}, "spec": {"podSets": [{"name": "main"}]}}
    assert curve.pending_pods(wl) == 1


def test_crossed_names_each_checkpoint_once_lowest_first() -> None:
    cps = [1000, 5000, 10000]
    assert curve.crossed(cps, [], 999) == []
    assert curve.crossed(cps, [], 5200) == [1000, 5000]  # a jump crosses two at once
    assert curve.crossed(cps, [1000, 5000], 5300) == []
    assert curve.crossed(cps, {1000: None, 5000: None}, 12000) == [10000]  # a dict's keys are reached


def test_per_thousand() -> None:
    assert curve.per_thousand(34.0, 2000) == pytest.approx(17.0)
    assert curve.per_thousand(5.0, 0) is None


def test_creation_rate_from_the_first_create_to_the_last_pod() -> None:
    assert curve.creation_rate([11.0, 12.0, 20.0, 30.0], since=10.0) == pytest.approx(4 / 20)
    # A pod seen before the first create is not the fill's.
    assert curve.creation_rate([5.0, 11.0, 20.0], since=10.0) == pytest.approx(2 / 10)
    assert curve.creation_rate([11.0], since=10.0) is None


def test_by_method_sums_codes_and_hosts() -> None:
    samples = {"rest_client_requests_total": {
        (("code", "200"), ("host", "a"), ("method", "GET")): 3.0,
        (("code", "404"), ("host", "a"), ("method", "GET")): 1.0,
        (("code", "201"), ("host", "a"), ("method", "POST")): 2.0,
    }}
    assert curve.by_method(samples) == {"GET": 4.0, "POST": 2.0}
    assert curve.by_method({}) == {}


def test_with_concurrency_sets_replaces_or_drops_the_flag() -> None:
    argv = ["ray-operator", "--metrics-addr=127.0.0.1:1"]
    flag = "--reconcile-concurrency"
    assert curve.with_concurrency(argv, flag, 8) == [*argv, f"{flag}=8"]
    assert curve.with_concurrency([*argv, f"{flag}=8"], flag, 4) == [*argv, f"{flag}=4"]
    assert curve.with_concurrency([*argv, flag, "8"], flag, None) == argv  # the spaced form too
    assert curve.with_concurrency(argv, flag, None) == argv
