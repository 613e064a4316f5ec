"""What tests/e2e/test_removal_guard.py shares with other tests (so that no test module imports another).
That module: Never destroy work (issue 28): raykueue removes a pod only on live proof.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from raykueue.controller import actions as a
from raykueue.controller import removal
from raykueue.controller import workload as w
from raykueue.controller.config import ControllerConfig
from raykueue.controller.keys import QueueKey
from raykueue.controller.loop import Controller
from raykueue.core import contract as c
from raykueue.kube.cache import WatchCache
from raykueue.kube.events import EventRecorder
from raykueue.kube.resources import PODS, Resource
from raykueue.kube.rest import Rest
from testkit.e2e.controller import (
    WORKLOADS,
)
from testkit.reads import get_or_none
from testkit.waiting import wait_for
from testkit.watches import Watching


class LyingCache:
    """A Workload cache that leaves out the names in `hidden`: the informer lags or was
    filtered. Events still flow (the loop still hears of changes); only what it answers
    about the hidden Workloads is false."""

    def __init__(self, inner: Any, hidden: set[str]) -> None:
        self._inner, self._hidden = inner, hidden

    def get(self, namespace: str | None, name: str) -> Any:
        return None if name in self._hidden else self._inner.get(namespace, name)

    def list(self, namespace: str | None = None) -> list[Any]:
        return [x for x in self._inner.list(namespace)
                if x["metadata"]["name"] not in self._hidden]

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._inner, attr)


class Watched(Controller):
    """Records each pass: (key, actions, time), to wait for a pass on the lie."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.passes: list[tuple[QueueKey, list[a.Action], float]] = []
        self._lock = threading.Lock()

    def reconcile(self, key: QueueKey) -> list[a.Action]:
        actions = super().reconcile(key)
        with self._lock:
            self.passes.append((key, actions, time.time()))
        return actions

    def since(self, moment: float) -> list[tuple[QueueKey, list[a.Action], float]]:
        with self._lock:
            return [x for x in self.passes if x[2] >= moment]


class InProcess:
    def __init__(self, api: Rest, ns: str, hidden: set[str] | None = None, **config: Any) -> None:
        hidden_names = hidden if hidden is not None else set()

        def caches(rest: Rest, resource: Resource, **kw: Any) -> Any:
            cache = WatchCache(rest, resource, **kw)
            return LyingCache(cache, hidden_names) if resource.plural == "workloads" else cache

        config.setdefault("workers", 2)
        self.controller = Watched(api, ControllerConfig(namespace=ns, **config),
                                  EventRecorder(api, "raykueue.io/controller"),
                                  cache_factory=caches)
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self.controller.run, args=(self.stop_event,),
                                       daemon=True)

    def __enter__(self) -> Watched:
        self.thread.start()
        wait_for(lambda: self.controller.synced, timeout=60, message="controller caches")
        return self.controller

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.thread.join(timeout=30)


class QuotaWatch(Watching):
    """Every change of the namespace's Workloads, checked the moment it arrives: while
    `old` (a deleted pod's Workload) runs, it stays admitted and no other worker of the
    cluster is admitted beside the ones already running. (KubeRay, as built here, makes
    the replacement only once the old pod is gone; a replacement made sooner, as the
    issue saw, would queue behind the quota the old one still holds.)"""

    def __init__(self, api: Rest, ns: str, old: str, others: set[str],
                 pod: str | None = None) -> None:
        self.old, self.others = old, others
        # With `pod`, whether it still runs is read from the API server the moment its
        # Workload goes (the kubelet's report, not the test's word).
        self.api, self.ns, self.pod = api, ns, pod
        self.stopped_at: float | None = None
        self.old_gone_at: float | None = None
        self.violations: list[str] = []
        self._lock = threading.Lock()
        self.cache = WatchCache(api, WORKLOADS, namespace=ns)
        self.cache.add_handler(self._workload)
        self.caches = (self.cache,)

    def _workload(self, event: str, wl: dict[str, Any]) -> None:
        name = wl["metadata"]["name"]
        with self._lock:
            running = self.stopped_at is None
            if running and self.pod is not None:
                running = self._pod_runs()
            if name == self.old:
                gone = event == "DELETED" or bool(wl["metadata"].get("deletionTimestamp")) \
                    or not w.is_admitted(wl)
                if gone and running:
                    self.violations.append(f"{event} {name} while its pod still ran: "
                                           f"{w.conditions(wl)}")
                if gone and self.old_gone_at is None:
                    self.old_gone_at = time.time()
            elif name not in self.others and w.is_admitted(wl) and running \
                    and (wl["metadata"].get("labels") or {}).get(c.NODE_TYPE_LABEL) == "worker":
                self.violations.append(f"{name} admitted while {self.old} still held the quota")

    def _pod_runs(self) -> bool:
        pod = get_or_none(self.api, PODS.path(self.ns, self.pod))
        return pod is not None and not removal.has_stopped(pod)

    def stop(self) -> None:
        with self._lock:
            self.stopped_at = time.time()

