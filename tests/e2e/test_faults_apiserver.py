"""kube-apiserver restarted in the middle of a run (etcd and its data kept).

The controller runs in-process as raykueue's ServiceAccount over a Rest that
counts what it asks for. While pods are being created and their Workloads
made, the API server is stopped and started again on the same port. The
controller's watches must resume from their resourceVersion: at most one
LIST per watched resource after the restart (no relisting storm), and every
pod still ends with exactly one Workload (no duplicate creates).

The stack is shared by the session: it is the same API server, on the same
port and certificates, once the test is done, so other tests' fixtures keep
working.
"""

from __future__ import annotations

import collections
import threading
from typing import Any

import pytest

from devstack.stack import let_namespaces_finish, restart_component
from raykueue.controller import workload as w
from raykueue.kube.rest import ApiError, Rest
from testkit.api.controller import (  # noqa: F401 - fixtures
    CountingRest,
    admin,
    as_controller,
    ns,
    run_controller,
    scope,
)
from testkit.e2e.controller import webhooks  # noqa: F401 - fixture
from testkit.reviews import gates
from testkit.stackfixtures import new_namespace  # noqa: F401 - fixture
from testkit.standins import WORKLOADS, create_pod, kueue_status, live, ray_pod, workload_of
from testkit.waiting import wait_for

BEFORE, DURING = 8, 8  # pods created before the restart, and while it happens


def watched(path: str, query: Any) -> str:
    """One name per watch: the resource, and its label selector when it has one (the
    controller watches pods twice, its own and every Ray head)."""
    resource = path.rsplit("/", 1)[-1]
    selector = (query or {}).get("labelSelector") if isinstance(query, dict) else None
    return f"{resource}?{selector}" if selector else resource


class Reads:
    """Counts the controller's LISTs and WATCHes by watch, around a Rest."""

    def __init__(self, rest: Rest) -> None:
        self.lists: collections.Counter[str] = collections.Counter()
        self.watches: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        get, watch = rest.get, rest.watch

        def counted_get(path: str, query: Any = None, **kw: Any) -> Any:
            result = get(path, query, **kw)
            kind = str(result.get("kind", "")) if isinstance(result, dict) else ""
            if kind.endswith("List") and kind != "APIResourceList":
                with self._lock:
                    self.lists[watched(path, query)] += 1
            return result

        def counted_watch(path: str, query: Any = None, **kw: Any) -> Any:
            with self._lock:
                self.watches[watched(path, query)] += 1
            return watch(path, query, **kw)

        create = rest.create
        self.creates: collections.Counter[str] = collections.Counter()

        def counted_create(path: str, body: Any, *args: Any, **kw: Any) -> Any:
            outcome = "created"
            try:
                return create(path, body, *args, **kw)
            except ApiError as exc:
                outcome = "already exists" if exc.is_already_exists else f"failed ({exc.status})"
                raise
            finally:
                if path.endswith("/workloads"):
                    with self._lock:
                        self.creates[outcome] += 1

        rest.create = counted_create  # type: ignore[method-assign]
        rest.get = counted_get  # type: ignore[method-assign]
        rest.watch = counted_watch  # type: ignore[method-assign]

    def snapshot(self) -> tuple[dict[str, int], dict[str, int]]:
        with self._lock:
            return dict(self.lists), dict(self.watches)


def create_with_retry(admin: Rest, pod: dict[str, Any]) -> dict[str, Any]:  # noqa: F811
    """Create a pod through an API server that may be down for a moment."""
    def attempt() -> dict[str, Any] | None:
        try:
            return create_pod(admin, pod)
        except ApiError as exc:
            if exc.is_already_exists:
                return live(admin, pod)
            raise
    return wait_for(attempt, timeout=120, interval=0.5, message=f"pod {pod['metadata']['name']}")


def one_workload_each(admin: Rest, ns: str, made: list[dict[str, Any]]) -> bool:  # noqa: F811
    items = admin.get(WORKLOADS.path(ns))["items"]
    per_pod = collections.Counter(w.pod_uid_of(x) for x in items)
    return all(per_pod[p["metadata"]["uid"]] == 1 for p in made) and len(items) == len(made)


def test_watches_resume_after_an_apiserver_restart(
        api_stack, admin, ns, scope, as_controller, run_controller):  # noqa: F811
    reads = Reads(as_controller)
    running = run_controller(head_first=False)
    made = [create_pod(admin, ray_pod(ns, scope, "worker", f"rc-worker-{i}"))
            for i in range(BEFORE)]
    wait_for(lambda: one_workload_each(admin, ns, made), timeout=60,
             message="a Workload for each pod made before the restart")
    lists_before, watches_before = reads.snapshot()
    creates_before = len([x for x in as_controller.writes if x[0] == "POST" and "workloads" in x[1]])
    assert creates_before == BEFORE

    # Pods keep coming while the API server goes away and comes back (the restart
    # first waits for other tests' namespaces to go: waited for here, so that the
    # feeder's pods meet the outage).
    let_namespaces_finish(api_stack)
    during: list[dict[str, Any]] = []
    feeder = threading.Thread(target=lambda: during.extend(
        create_with_retry(admin, ray_pod(ns, scope, "worker", f"rc-late-{i}"))
        for i in range(DURING)), daemon=True)
    feeder.start()
    outage = restart_component(api_stack, "kube-apiserver", down_for=1.0)
    feeder.join(timeout=180)
    assert not feeder.is_alive() and len(during) == DURING
    made += during

    wait_for(lambda: one_workload_each(admin, ns, made), timeout=120,
             message="a Workload for each pod, and no more, after the restart")
    for pod in made:
        kueue_status(admin, workload_of(admin, pod), scope)
    wait_for(lambda: all(gates(live(admin, p)) == [] for p in made), timeout=120,
             message="every gate lifted once admitted")

    lists_after, watches_after = reads.snapshot()
    relists = {k: lists_after.get(k, 0) - lists_before.get(k, 0) for k in lists_after}
    rewatches = {k: watches_after.get(k, 0) - watches_before.get(k, 0) for k in watches_after}
    creates = [x for x in as_controller.writes if x[0] == "POST" and "workloads" in x[1]]
    print(f"\n[faults] API server down and back in {outage:.1f}s; controller LISTs before "
          f"{lists_before}, after the restart {relists}; WATCH requests after {rewatches}; "
          f"Workload create requests {dict(reads.creates)} for {len(made)} pods")
    # One LIST per watch at most (a 410 would cost exactly one: the restarted server's
    # watch cache starts at its own list, older resourceVersions are gone);
    # resuming from the last resourceVersion costs none.
    assert {k.split("?")[0] for k in lists_before} >= {"pods", "workloads", "resourceflavors",
                                                       "workloadpriorityclasses"}
    assert all(n <= 1 for n in relists.values()), relists
    # Every create asked for the pod's deterministic name, so a retried or
    # repeated one can only meet AlreadyExists, never make a second Workload.
    assert len({x[1] for x in creates}) == len(made)
    assert reads.creates["created"] == len(made)
    assert one_workload_each(admin, ns, made)
    # Watches are re-opened with backoff, not in a tight loop.
    assert all(n <= 10 for n in rewatches.values()), rewatches
    assert running.controller.synced
    assert api_stack.apiserver_ready()  # left as found: the same server on the same port


@pytest.fixture(scope="module", autouse=True)
def _pods_pass_raykueues_webhook(webhooks) -> None:  # noqa: F811
    """The pods here are made as raykueue's webhook stores them; with Kueue as shipped,
    Kueue's pod webhook takes them on the way in, and only raykueue's takes them back."""
