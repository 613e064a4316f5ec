"""Watch a namespace's pods and Workloads over a whole scenario.

Churn is what happens between two looks, so it is counted from watch events,
never from a final listing: every pod and Workload created and deleted, and
every worker pod that ever ran. The same events say how each Ray pod went:
created gated, its Workload admitted, running.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from raykueue.controller import workload as w
from raykueue.core import contract as c
from raykueue.kube.resources import PODS
from raykueue.kube.rest import ApiError, Rest
from tests.e2e.test_controller_e2e import WORKLOADS, gated, role, running


@dataclass
class Seen:
    created: dict[str, set[str]] = field(default_factory=lambda: {"worker": set(), "Workload": set()})
    deleted: dict[str, set[str]] = field(default_factory=lambda: {"worker": set(), "Workload": set()})
    ran: set[str] = field(default_factory=set)  # worker pods (uid) seen Running
    max_workers_running: int = 0
    errors: list[str] = field(default_factory=list)
    # Every Ray pod (head or worker), by uid: its name, whether the first look at it
    # (its creation, for a pod made while watched) had the gate, whether it ran, and
    # whether a Workload of its own was seen admitted.
    pod_names: dict[str, str] = field(default_factory=dict)
    created_gated: set[str] = field(default_factory=set)
    pods_ran: set[str] = field(default_factory=set)
    admitted_pods: set[str] = field(default_factory=set)

    def churn(self) -> dict[str, Any]:
        admitted = len(self.ran)
        created = len(self.created["worker"])
        return {
            "worker_pods_created": created,
            "worker_pods_deleted": len(self.deleted["worker"]),
            "workers_ran": admitted,
            "pods_per_admitted_worker": round(created / admitted, 2) if admitted else None,
            "workloads_created": len(self.created["Workload"]),
            "workloads_deleted": len(self.deleted["Workload"]),
        }


class Observer:
    def __init__(self, admin: Rest, namespace: str):
        self.admin, self.namespace = admin, namespace
        self.seen = Seen()
        self._running: set[str] = set()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._follow, args=(path, kind), daemon=True)
                         for path, kind in ((PODS.path(namespace), "worker"),
                                            (WORKLOADS.path(namespace), "Workload"))]
        self._lock = threading.Lock()
        self._ready = threading.Barrier(len(self._threads) + 1)

    def _record(self, kind: str, event: str, obj: dict[str, Any]) -> None:
        uid = obj["metadata"]["uid"]
        if kind == "worker" and role(obj) in c.MANAGED_ROLES:
            if uid not in self.seen.pod_names and gated(obj):
                self.seen.created_gated.add(uid)
            self.seen.pod_names[uid] = obj["metadata"]["name"]
            if running(obj):
                self.seen.pods_ran.add(uid)
        if kind == "Workload" and w.is_admitted(obj) and w.pod_uid_of(obj):
            self.seen.admitted_pods.add(str(w.pod_uid_of(obj)))
        if kind == "worker":
            if role(obj) != c.ROLE_WORKER:
                return
            if running(obj):
                self.seen.ran.add(uid)
                self._running.add(uid)
            else:
                self._running.discard(uid)
        if event == "ADDED":
            self.seen.created[kind].add(uid)
        elif event == "DELETED":
            self.seen.deleted[kind].add(uid)
            self._running.discard(uid)
        self.seen.max_workers_running = max(self.seen.max_workers_running, len(self._running))

    def _follow(self, path: str, kind: str) -> None:
        listing = self.admin.get(path)
        with self._lock:
            for obj in listing["items"]:
                self._record(kind, "ADDED", obj)
        version = listing["metadata"]["resourceVersion"]
        self._ready.wait()
        while not self._stop.is_set():
            try:
                with self.admin.watch(path, {"resourceVersion": version, "allowWatchBookmarks": True},
                                      timeout_seconds=5) as stream:
                    for ev in stream:
                        version = ev["object"]["metadata"].get("resourceVersion", version)
                        if ev["type"] in ("ADDED", "MODIFIED", "DELETED"):
                            with self._lock:
                                self._record(kind, ev["type"], ev["object"])
                        if self._stop.is_set():
                            break
            except ApiError as e:  # 410 would lose events: that must fail the count
                self.seen.errors.append(f"{kind} watch: {e}")
                return

    def start(self) -> Observer:
        for t in self._threads:
            t.start()
        self._ready.wait(timeout=30)
        return self

    def stop(self) -> Seen:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=15)
        return self.seen


@contextmanager
def observed(admin: Rest, namespace: str) -> Iterator[Seen]:
    obs = Observer(admin, namespace).start()
    try:
        yield obs.seen
    finally:
        obs.stop()
    assert not obs.seen.errors, obs.seen.errors
