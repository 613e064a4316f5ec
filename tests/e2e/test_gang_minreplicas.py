"""A gang's base follows `minReplicas` changed on a running cluster (docs/GANG.md, "minReplicas
changed"), and a base edited by hand is made again; on the stack, every wait checking the
gang invariants (`GangWatch`)."""

from __future__ import annotations

from typing import Any

from raykueue.controller import workload as w
from raykueue.core import contract as c
from raykueue.kube.resources import EVENTS_V1, PODS
from raykueue.kube.rest import Rest
from testkit.e2e.controller import (  # noqa: F401 - fixtures
    RAYCLUSTERS,
    admin,
    controller,
    queue,
    webhooks,
)
from testkit.e2e.gang import (
    GangWatch,
    base_of,
    cq_cpu_reaches_held,
    own_workload_pods,
    started,
    until,
)
from testkit.e2e.gang_lifecycle import uids, with_extras
from testkit.e2e.kueue_shipped import kueue_as_shipped, watched  # noqa: F401 - fixtures
from testkit.invariants import WORKLOADS
from testkit.stackfixtures import new_namespace  # noqa: F401 - fixture


def set_workers(api: Rest, ns: str, obj: dict[str, Any], **fields: Any) -> None:
    group = dict(obj["spec"]["workerGroupSpecs"][0], **fields)
    api.merge_patch(RAYCLUSTERS.path(ns, obj["metadata"]["name"]),
                    {"spec": {"workerGroupSpecs": [group]}})


def pod_sets(base: dict[str, Any]) -> dict[str, int]:
    return {ps["name"]: ps["count"] for ps in base["spec"]["podSets"]}


def test_min_lowered_moves_a_base_worker_out_and_hands_its_slot_back(admin, controller, queue):  # noqa: F811
    """minReplicas 2 -> 1, replicas kept: the newest base worker gets a Workload of its own,
    running all along; once Kueue admits it the base hands that slot back."""
    ns = queue(cpu="2500m", memory="2560Mi")  # a base of 3, an extra, and the mover's own
    with watched(admin, ns), GangWatch(admin, ns) as gw:
        obj = with_extras("a", 2, 3)
        admin.create(RAYCLUSTERS.path(ns), obj)
        until(gw, lambda: len(started(admin, ns, "a")) == 4 and len(own_workload_pods(admin, ns)) == 1,
              timeout=120, message="a: head, 2 base workers and an extra running")
        base = base_of(admin, ns, "a")
        running = uids(started(admin, ns, "a"))
        set_workers(admin, ns, obj, minReplicas=1)

        def followed() -> bool:
            now = base_of(admin, ns, "a")
            return (now is not None and len(own_workload_pods(admin, ns)) == 2
                    and (now.get("status") or {}).get("reclaimablePods") == [{"name": "cpu", "count": 1}])

        until(gw, followed, timeout=120, message="a base worker moved out, its slot handed back")
        cq_cpu_reaches_held(gw, admin, ns, 2000)
        after = base_of(admin, ns, "a")
        assert after["metadata"]["uid"] == base["metadata"]["uid"]
        assert pod_sets(after) == {"head": 1, "cpu": 2}
        assert uids(started(admin, ns, "a")) == running  # nothing restarted
        gw.assert_held()


def test_min_raised_leaves_the_new_workers_extras_of_the_running_base(admin, controller, queue):  # noqa: F811
    """An admitted Workload's podSets cannot grow: the running base keeps its counts, the
    workers a raise brings each get a Workload of their own."""
    ns = queue(cpu="10", memory="10Gi")
    with watched(admin, ns), GangWatch(admin, ns) as gw:
        obj = with_extras("a", 2, 3)
        admin.create(RAYCLUSTERS.path(ns), obj)
        until(gw, lambda: len(started(admin, ns, "a")) == 4 and len(own_workload_pods(admin, ns)) == 1,
              timeout=120, message="a: head, 2 base workers and an extra running")
        base = base_of(admin, ns, "a")
        set_workers(admin, ns, obj, minReplicas=4, replicas=4)
        until(gw, lambda: len(started(admin, ns, "a")) == 5 and len(own_workload_pods(admin, ns)) == 2,
              timeout=120, message="the new worker running as an extra")
        after = base_of(admin, ns, "a")
        assert after["metadata"]["uid"] == base["metadata"]["uid"]
        assert pod_sets(after) == {"head": 1, "cpu": 2} and w.is_admitted(after)
        assert not (after.get("status") or {}).get("reclaimablePods")
        gw.assert_held()


def test_min_changed_while_the_base_waits_makes_it_again_with_the_new_counts(
        admin, controller, queue):  # noqa: F811
    ns = queue(cpu="1", memory="1Gi")  # room for 2 pods: a base of 3 waits
    with watched(admin, ns), GangWatch(admin, ns) as gw:
        obj = with_extras("a", 2, 2)
        admin.create(RAYCLUSTERS.path(ns), obj)
        until(gw, lambda: (b := base_of(admin, ns, "a")) is not None
              and pod_sets(b) == {"head": 1, "cpu": 2}, timeout=120, message="a's base of 3 queued")
        first = base_of(admin, ns, "a")
        assert not w.is_quota_reserved(first)
        set_workers(admin, ns, obj, minReplicas=1)

        def remade() -> bool:
            now = base_of(admin, ns, "a")
            return (now is not None and now["metadata"]["uid"] != first["metadata"]["uid"]
                    and pod_sets(now) == {"head": 1, "cpu": 1} and w.is_admitted(now)
                    and len(started(admin, ns, "a")) == 2)

        until(gw, remade, timeout=120, message="a's base made again as head + 1, admitted, running")
        # The other worker is an extra, waiting for room of its own.
        def queued() -> bool:
            gated = [p for p in admin.get(PODS.path(ns))["items"] if p["spec"].get("schedulingGates")]
            return len(gated) == 1 and own_workload_pods(admin, ns) == uids(gated)

        until(gw, queued, timeout=60, message="the other worker queued with a Workload of its own")
        gw.assert_held()


def test_a_base_edited_while_it_waits_is_reported_and_made_again(admin, controller, queue):  # noqa: F811
    """As a forged per-pod Workload is refused: a base that is not the one raykueue makes
    (here its queue edited) releases nothing, is reported on the head, and is made again."""
    ns = queue(cpu="1", memory="1Gi")  # the base of 3 waits: nothing is admitted meanwhile
    with watched(admin, ns), GangWatch(admin, ns) as gw:
        gw.held.add("a")
        admin.create(RAYCLUSTERS.path(ns), with_extras("a", 2, 2))
        until(gw, lambda: base_of(admin, ns, "a") is not None, timeout=120, message="a's base queued")
        first = base_of(admin, ns, "a")
        admin.merge_patch(WORKLOADS.path(ns, first["metadata"]["name"]),
                          {"spec": {"queueName": "elsewhere"}})

        def remade() -> bool:
            now = base_of(admin, ns, "a")
            return (now is not None and now["metadata"]["uid"] != first["metadata"]["uid"]
                    and now["spec"]["queueName"] == "team-a")

        until(gw, remade, timeout=60, message="a's base made again with the head's queue")
        head = next(p for p in admin.get(PODS.path(ns))["items"]
                    if p["metadata"]["labels"][c.NODE_TYPE_LABEL] == c.ROLE_HEAD)

        def reported() -> bool:
            return any(e.get("reason") == "WorkloadMismatch"
                       and (e.get("regarding") or {}).get("name") == head["metadata"]["name"]
                       for e in admin.get(EVENTS_V1.path(ns))["items"])

        until(gw, reported, timeout=30, message="a WorkloadMismatch Event on the head")
        gw.assert_held()
