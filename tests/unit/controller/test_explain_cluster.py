"""`raykueue explain raycluster NAME` and `explain POD -o json`: what they say, from the same verdict."""

from __future__ import annotations

import copy

import orjson
import pytest

from raykueue.controller import explain_cluster as ec
from raykueue.controller import verdict as v
from raykueue.controller.explain import describe, explain
from raykueue.core import contract as c
from testkit import controller_objects as o
from testkit.listsource import facts_of
from testkit.unit.controller_explain import CQ, LQ, facts

CLUSTER = "raycluster-gpu"


def running(pod: dict) -> dict:
    pod = copy.deepcopy(pod)
    pod["status"] = {"phase": "Running"}
    return pod


def world() -> tuple[list[dict], list[dict]]:
    head = running(o.pod(c.ROLE_HEAD, name="head", gated=False))
    up = running(o.pod(name="w-up", gated=False))
    waiting = [o.pod(name=f"w-wait-{i}") for i in range(2)]
    evicted = o.pod(name="w-evicted")
    nothing = o.pod(name="w-none", priority="missing-class")
    workloads = [o.workload(head, "admitted"), o.workload(up, "admitted"),
                 o.workload(waiting[0], "pending"), o.workload(waiting[1], "pending", priority=500),
                 o.workload(evicted, "evicted")]
    gone = o.pod(name="w-gone")  # raykueue deleted it; its evicted Workload remains a moment
    workloads.append(o.workload(gone, "evicted"))
    return [head, up, *waiting, evicted, nothing], workloads


def summary() -> dict:
    pods, workloads = world()
    positions = {}
    for wl in workloads:
        at = ec.queue_position(wl, workloads)
        if at is not None:
            positions[wl["metadata"]["name"]] = (at[0], None, True)
    return ec.summarise("team-a", CLUSTER, None, pods, workloads, facts_of(pods, workloads),
                        positions, LQ)


def test_the_summary_counts_workers_by_state() -> None:
    s = summary()
    assert s["head"]["state"] == ec.RUNNING
    assert s["workers"] == {ec.RUNNING: 1, ec.STARTING: 0, ec.WAITING_FOR_QUOTA: 2,
                            ec.WAITING_FOR_HEAD: 0, ec.NO_WORKLOAD: 1, ec.EVICTED: 2, ec.ENDED: 0}
    assert s["queue"] == "team-a"


def test_waiting_workers_have_their_place_in_the_queue() -> None:
    by_name = {e["name"]: e for e in summary()["pods"]}
    # Priority 500 is ahead of 100 (Kueue's default order).
    assert by_name["w-wait-1"]["position"]["localQueue"] == 1
    assert by_name["w-wait-0"]["position"]["localQueue"] == 2
    assert "position" not in by_name["w-up"]


def test_evicted_workers_say_why_even_when_the_pod_is_gone() -> None:
    by_name = {e["name"]: e for e in summary()["pods"]}
    assert by_name["w-evicted"]["evicted"]["reason"]
    assert by_name["w-gone"]["podGone"] is True and by_name["w-gone"]["state"] == ec.EVICTED


def test_a_worker_without_a_workload_carries_the_verdicts_sentence() -> None:
    pods, workloads = world()
    entry = {e["name"]: e for e in summary()["pods"]}["w-none"]
    (pod,) = [x for x in pods if x["metadata"]["name"] == "w-none"]
    assert entry["why"] == v.verdict(facts_of(pods, workloads)(pod)).text


def test_the_text_names_each_worker_that_is_not_running() -> None:
    text = ec.render(summary())
    assert f"RayCluster team-a/{CLUSTER} (not found; its pods:)" in text
    assert f"LocalQueue team-a -> ClusterQueue {o.CQ}" in text
    assert "workers:    1 running, 2 waiting for quota, 1 no workload, 2 evicted" in text
    assert "w-wait-1: waiting for quota, 1st in its LocalQueue (estimated" in text
    assert "w-gone: evicted" in text and "raykueue deleted the pod" in text
    assert "w-up" not in text
    orjson.dumps(summary())  # -o json prints it as is


def test_describe_is_the_text_as_data() -> None:
    pod = o.pod()
    wl = o.workload(pod, "pending")
    found = facts(pod, wl)
    data = describe(found, CQ, LQ, queue_peers=[wl])
    assert data["verdict"]["text"] in explain(found, CQ, LQ, queue_peers=[wl])
    assert data["workload"]["name"] == wl["metadata"]["name"]
    assert data["position"] == {"localQueue": 1, "pending": 1, "clusterQueue": None,
                                "estimated": True}
    assert data["localQueue"]["clusterQueue"] == o.CQ
    orjson.dumps(data)


def test_an_adopted_pod_is_read_in_its_annotated_queue() -> None:
    """Adopted pods carry raykueue.io/queue-name, not the label."""
    pod = o.pod(queue=None)
    pod["metadata"].setdefault("annotations", {})[c.QUEUE_ANNOTATION] = "team-a"
    assert "LocalQueue team-a -> ClusterQueue" in explain(facts(pod), CQ, LQ)
    assert describe(facts(pod))["queue"] == "team-a"
    assert ec.summarise("team-a", CLUSTER, None, [pod], [], lambda _: None, {})["queue"] == "team-a"


def test_the_cli_reads_a_kind_and_a_name_or_a_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    from raykueue.app import cli

    calls: list[tuple] = []
    monkeypatch.setattr(cli, "explain", lambda *a, **kw: calls.append((a, kw)) or 0)
    cli.main(["explain", "raycluster", "rc", "-n", "team-a", "-o", "json"])
    cli.main(["explain", "rc-head-abcde"])
    assert calls[0] == (("raycluster", "team-a", None), {"name": "rc", "output": "json"})
    assert calls[1][0][0] == "rc-head-abcde" and calls[1][1] == {"name": None, "output": "text"}
