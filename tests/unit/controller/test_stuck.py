"""Stuck gates: which reason each gated pod waits for, the oldest age per
(queue, reason), and the Event for a pod left without a Workload."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from prometheus_client import REGISTRY

from raykueue.controller import stuck
from raykueue.controller.verdict import NO_WORKLOAD, WAITING_FOR_HEAD, WAITING_FOR_QUOTA
from raykueue.core import contract as c
from testkit import controller_objects as o
from testkit.listsource import facts_of

CREATED = datetime.fromisoformat(o.T0.replace("Z", "+00:00")).timestamp()
NOW = CREATED + 300.0
GAUGE = "raykueue_gated_pod_oldest_age_seconds"


def reasons(pods: list[dict], workloads: list[dict], *, head_first: bool = True,
            now: float = NOW) -> dict[str, str]:
    return {x.pod["metadata"]["name"]: x.reason
            for x in stuck.gated(pods, facts_of(pods, workloads, head_first=head_first), now)}


def named(pod: dict, name: str) -> dict:
    pod["metadata"]["name"] = name
    return pod


def test_a_pod_with_a_pending_workload_waits_for_quota() -> None:
    head = named(o.pod(c.ROLE_HEAD), "head")
    (item,) = stuck.gated([head], facts_of([head], [o.workload(head, "pending")]), NOW)
    assert (item.reason, item.queue, item.age) == (WAITING_FOR_QUOTA, "team-a", 300.0)


def test_a_worker_waits_for_its_head_only_while_the_head_is_not_admitted() -> None:
    head = named(o.pod(c.ROLE_HEAD), "head")
    worker = named(o.pod(c.ROLE_WORKER), "worker")
    assert reasons([head, worker], [o.workload(head, "pending")]) == {
        "head": WAITING_FOR_QUOTA, "worker": WAITING_FOR_HEAD}
    # Head admitted (its gate still on): the worker should have a Workload by now.
    assert reasons([head, worker], [o.workload(head, "admitted")])["worker"] == NO_WORKLOAD
    # Head running (gate lifted, its Workload not in the cache): the same.
    running = named(o.pod(c.ROLE_HEAD, gated=False), "head")
    assert reasons([running, worker], []) == {"worker": NO_WORKLOAD}
    # Without head-first nothing makes a worker wait for its head.
    assert reasons([head, worker], [o.workload(head, "pending")], head_first=False)["worker"] \
        == NO_WORKLOAD


def test_a_head_of_another_cluster_or_namespace_does_not_count() -> None:
    worker = named(o.pod(c.ROLE_WORKER, cluster="a"), "worker")
    other_cluster = named(o.pod(c.ROLE_HEAD, cluster="b", gated=False), "head-b")
    other_ns = named(o.pod(c.ROLE_HEAD, cluster="a", namespace="elsewhere", gated=False), "head-a")
    assert reasons([worker, other_cluster, other_ns], [])["worker"] == WAITING_FOR_HEAD


def test_without_a_live_workload_of_ours_a_pod_has_no_workload() -> None:
    finished = named(o.pod(c.ROLE_HEAD), "finished")
    foreign = named(o.pod(c.ROLE_HEAD, cluster="other"), "foreign")
    assert reasons([finished, foreign], [o.workload(finished, "finished"),
                                         o.workload(foreign, "pending", ours=False)]) == {
        "finished": NO_WORKLOAD, "foreign": NO_WORKLOAD}


def test_pods_past_the_gate_or_on_their_way_out_are_not_counted() -> None:
    pods = [o.pod(c.ROLE_HEAD, gated=False), o.pod(c.ROLE_HEAD, deleting=True),
            o.pod(c.ROLE_HEAD, phase="Failed")]
    assert stuck.gated(pods, facts_of(pods, []), NOW) == []


def test_oldest_is_per_queue_and_reason() -> None:
    def item(queue: str, reason: str, age: float) -> stuck.Gated:
        return stuck.Gated({}, queue, reason, age)

    ages = stuck.oldest([item("a", NO_WORKLOAD, 5), item("a", NO_WORKLOAD, 50),
                         item("a", WAITING_FOR_QUOTA, 7), item("b", NO_WORKLOAD, 1)])
    assert ages == {("", "a", NO_WORKLOAD): 50, ("", "a", WAITING_FOR_QUOTA): 7,
                    ("", "b", NO_WORKLOAD): 1}


def test_a_queue_name_is_one_series_per_namespace() -> None:
    """Every namespace may have a LocalQueue `default`: their ages must not merge."""
    one = o.pod(c.ROLE_HEAD, queue="default", namespace="team-a")
    two = o.pod(c.ROLE_HEAD, queue="default", namespace="team-b", cluster="c2")
    items = stuck.gated([one, two], facts_of([one, two], []), NOW)
    assert set(stuck.oldest(items)) == {("team-a", "default", NO_WORKLOAD),
                                        ("team-b", "default", NO_WORKLOAD)}


def test_an_adopted_pod_is_counted_in_its_annotated_queue() -> None:
    """Adopted pods carry the queue as the annotation raykueue.io/queue-name."""
    pod = o.pod(c.ROLE_HEAD, queue=None)
    pod["metadata"].setdefault("annotations", {})[c.QUEUE_ANNOTATION] = "adopted-q"
    (item,) = stuck.gated([pod], facts_of([pod], []), NOW)
    assert item.queue == "adopted-q"


def test_only_pods_without_a_workload_past_the_grace_period_are_overdue() -> None:
    head = named(o.pod(c.ROLE_HEAD, queue=None), "head")
    worker = named(o.pod(c.ROLE_WORKER, cluster="c2"), "worker")  # waits for a head
    queued = named(o.pod(c.ROLE_HEAD, cluster="c3"), "queued")
    pods = [head, worker, queued]
    items = stuck.gated(pods, facts_of(pods, [o.workload(queued, "pending")]), NOW)
    assert [x.pod["metadata"]["name"] for x in stuck.overdue(items, 300)] == ["head"]
    assert stuck.overdue(items, 301) == []


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []

    def __call__(self, pod: dict, type_: str, reason: str, message: str) -> None:
        self.events.append((pod["metadata"]["name"], type_, reason, message))


def watcher(pods: list[dict], workloads: list[dict], clock: list[float], events: Recorder,
            requeued: list[str], priority_values: dict[str, int] | None = None
            ) -> stuck.StuckGates:
    def sweep() -> Any:  # the lists as they are now
        return facts_of(pods, workloads, priority_values=priority_values)

    return stuck.StuckGates(lambda: list(pods), sweep, grace_seconds=120, record=events,
                            requeue=lambda pod: requeued.append(pod["metadata"]["name"]),
                            clock=lambda: clock[0])


def sample(queue: str, reason: str, namespace: str = "team-a") -> float | None:
    return REGISTRY.get_sample_value(GAUGE, {"namespace": namespace, "queue": queue,
                                             "reason": reason})


def test_the_gauge_follows_the_pods_and_is_cleared_on_stop() -> None:
    head = named(o.pod(c.ROLE_HEAD, queue="gauge-q"), "head")
    pods, workloads, clock = [head], [o.workload(head, "pending")], [NOW]
    gates = watcher(pods, workloads, clock, Recorder(), [])
    gates.update()
    assert sample("gauge-q", WAITING_FOR_QUOTA) == 300.0
    clock[0] += 60
    gates.update()
    assert sample("gauge-q", WAITING_FOR_QUOTA) == 360.0
    # Admitted and lifted: the label set goes rather than staying at its last age.
    pods[:] = [named(o.pod(c.ROLE_HEAD, queue="gauge-q", gated=False), "head")]
    gates.update()
    assert sample("gauge-q", WAITING_FOR_QUOTA) is None
    pods[:] = [head]
    gates.update()
    gates.clear()
    assert sample("gauge-q", WAITING_FOR_QUOTA) is None


def test_a_pod_without_a_workload_past_the_grace_period_gets_an_event_saying_why() -> None:
    head = named(o.pod(c.ROLE_HEAD, queue="event-q", priority="gold"), "head")
    events, requeued, clock = Recorder(), [], [CREATED + 60]
    # No WorkloadPriorityClass "gold" in the context: the reason decide gives.
    gates = watcher([head], [], clock, events, requeued, priority_values={})
    gates.update()
    assert events.events == [] and requeued == []
    clock[0] = CREATED + 121
    gates.update()
    clock[0] += 30
    gates.update()
    ((name, type_, reason, message),) = set(events.events)
    assert (name, type_, reason) == ("head", "Warning", stuck.EVENT_REASON)
    assert "WorkloadPriorityClass 'gold'" in message and "120s grace period" in message
    # Same text each pass: the controller's recorder sends it once per pod.
    assert len(events.events) == 2 and requeued == ["head", "head"]


def test_the_event_for_a_pod_whose_workload_could_be_created_says_it_is_retried() -> None:
    head = named(o.pod(c.ROLE_HEAD, queue="event-q"), "head")
    events = Recorder()
    gates = watcher([head], [], [NOW], events, [],
                    priority_values={c.DEFAULT_HEAD_PRIORITY_CLASS: 1000})
    gates.update()
    ((_, _, _, message),) = events.events
    assert "creating its Workload has not succeeded yet" in message
