"""Stuck gates on the real API server: the gauge per reason, and the one Event
for a pod left without a Workload.

The controller runs in-process as raykueue's ServiceAccount (the fixtures of
test_controller_api.py), with a one-second grace period so that the scenario
takes seconds.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import REGISTRY

from raykueue.controller import stuck
from raykueue.controller import verdict as v
from raykueue.core import contract as c
from raykueue.kube.rest import Rest
from testkit.api.controller import (  # noqa: F401 - fixtures
    admin,
    as_controller,
    ns,
    run_controller,
    scope,
)
from testkit.standins import LOCAL_QUEUE, WPCS, create_pod, events_for, ray_pod, workload_of
from testkit.waiting import wait_for

GAUGE = "raykueue_gated_pod_oldest_age_seconds"
INTERVAL = 0.2
GRACE = 1.0


def age(namespace: str, reason: str) -> float | None:
    return REGISTRY.get_sample_value(GAUGE, {"namespace": namespace, "queue": LOCAL_QUEUE, "reason": reason})


def stuck_events(api: Rest, namespace: str, name: str) -> list[dict[str, Any]]:
    return [e for e in events_for(api, namespace, name) if e["reason"] == stuck.EVENT_REASON]


def test_a_pod_without_a_workload_is_measured_told_why_once_and_gets_one(
        admin, ns, scope, run_controller) -> None:  # noqa: F811 - fixtures
    missing = f"missing-{ns}"
    head = create_pod(admin, ray_pod(ns, {**scope, "head": missing}, c.ROLE_HEAD, "head"))
    create_pod(admin, ray_pod(ns, scope, c.ROLE_WORKER, "worker"))
    run_controller(stuck_interval_seconds=INTERVAL, stuck_grace_seconds=GRACE)

    # The head has no Workload (its WorkloadPriorityClass is missing); its worker
    # waits for it by design.
    wait_for(lambda: (age(ns, v.NO_WORKLOAD) or 0) > GRACE and age(ns, v.WAITING_FOR_HEAD),
             timeout=30, message="gauge for both reasons")
    (event,) = wait_for(lambda: stuck_events(admin, ns, "head"), timeout=30,
                        message="GatedWithoutWorkload Event")
    assert event["type"] == "Warning" and missing in event["note"]
    # Several updates later: still one Event, none for the worker.
    seen = age(ns, v.NO_WORKLOAD) or 0
    wait_for(lambda: (age(ns, v.NO_WORKLOAD) or 0) >= seen + 3 * INTERVAL, timeout=30,
             message="three more gauge updates")
    assert len(stuck_events(admin, ns, "head")) == 1
    assert stuck_events(admin, ns, "worker") == []

    # The class appears: the head gets its Workload and moves to waiting for quota.
    admin.create(WPCS.path(), {"apiVersion": WPCS.api_version, "kind": "WorkloadPriorityClass",
                               "metadata": {"name": missing}, "value": 1000})
    try:
        wait_for(lambda: workload_of(admin, head), timeout=30, message="the head's Workload")
        wait_for(lambda: age(ns, v.NO_WORKLOAD) is None and age(ns, v.WAITING_FOR_QUOTA),
                 timeout=30, message="the head counted as waiting for quota")
    finally:
        admin.delete(WPCS.path(None, missing))
