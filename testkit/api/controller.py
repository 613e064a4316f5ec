"""What tests/api/test_controller_api.py shares with other tests (so that no test module imports another).
That module: The controller against a real kube-apiserver.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from raykueue.controller.config import ControllerConfig
from raykueue.controller.loop import Controller
from raykueue.core import contract as c
from raykueue.kube.events import EventRecorder
from raykueue.kube.rest import ApiError, Rest
from testkit.standins import (
    FLAVORS,
    WPCS,
)
from testkit.waiting import holds_for, wait_for

RBAC = Path(__file__).resolve().parents[2] / "manifests" / "rbac.yaml"


class CountingRest(Rest):
    """Rest that records every write it sends: (method, path)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.writes: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def request(self, method: str, path: str, body: Any = None, query: Any = None,
                content_type: str | None = None, **kw: Any) -> Any:
        if method != "GET":
            name = ((body or {}).get("metadata") or {}).get("name") if method == "POST" else None
            with self._lock:
                # A create's path is the collection: name the object it creates.
                self.writes.append((method, f"{path}/{name}" if name else path))
        return super().request(method, path, body, query, content_type, **kw)

    def writes_about(self, *names: str) -> list[tuple[str, str]]:
        with self._lock:
            return [(m, p) for m, p in self.writes if any(n in p for n in names)]


@pytest.fixture
def admin(k8s) -> Rest:
    return Rest(k8s)


@pytest.fixture
def ns(new_namespace) -> str:
    return new_namespace("ctl")


@pytest.fixture
def scope(admin: Rest, ns: str) -> Iterator[dict[str, str]]:
    """Per-test cluster-scoped objects: a flavor with placement, two priority classes."""
    names = {"flavor": f"ctl-{ns}", "head": f"ctl-head-{ns}", "worker": f"ctl-worker-{ns}",
             "pool": ns, "cq": f"ctl-cq-{ns}"}
    admin.create(FLAVORS.path(), {
        "apiVersion": FLAVORS.api_version, "kind": "ResourceFlavor",
        "metadata": {"name": names["flavor"]},
        "spec": {"nodeLabels": {"raykueue.io/test-pool": ns},
                 "tolerations": [{"key": "raykueue.io/test-pool", "operator": "Equal",
                                  "value": ns, "effect": "NoSchedule"}]}})
    for role, value in (("head", 1000), ("worker", 100)):
        admin.create(WPCS.path(), {"apiVersion": WPCS.api_version,
                                   "kind": "WorkloadPriorityClass",
                                   "metadata": {"name": names[role]}, "value": value})
    yield names
    for path in (FLAVORS.path(None, names["flavor"]), WPCS.path(None, names["head"]),
                 WPCS.path(None, names["worker"])):
        with contextlib.suppress(ApiError):
            admin.delete(path)


@pytest.fixture
def as_controller(k8s, admin: Rest, ns: str) -> Iterator[CountingRest]:
    """A client that is raykueue's ServiceAccount, holding the shipped ClusterRole."""
    from kubernetes import client

    docs = [d for d in yaml.safe_load_all(RBAC.read_text()) if d]
    role = copy.deepcopy(next(d for d in docs if d["kind"] == "ClusterRole"))
    binding = copy.deepcopy(next(d for d in docs if d["kind"] == "ClusterRoleBinding"))
    role["metadata"]["name"] = binding["metadata"]["name"] = f"raykueue-{ns}"
    binding["roleRef"]["name"] = role["metadata"]["name"]
    base = "/apis/rbac.authorization.k8s.io/v1"
    admin.create(f"{base}/clusterroles", role)
    admin.create(f"{base}/clusterrolebindings", binding)
    impersonating = client.ApiClient(k8s.configuration)
    impersonating.set_default_header("Impersonate-User", c.DEFAULT_CONTROLLER_IDENTITY)
    try:
        yield CountingRest(impersonating)
    finally:
        impersonating.close()
        for path in (f"{base}/clusterrolebindings/{binding['metadata']['name']}",
                     f"{base}/clusterroles/{role['metadata']['name']}"):
            with contextlib.suppress(ApiError):
                admin.delete(path)


class Running:
    def __init__(self, rest: Rest, ns: str, **config: Any) -> None:
        config.setdefault("workers", 2)
        config.setdefault("resync_seconds", 30.0)
        self.rest = rest
        self.controller = Controller(
            rest, ControllerConfig(namespace=ns, **config),
            EventRecorder(rest, "raykueue.io/controller"))
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self.controller.run, args=(self.stop_event,),
                                       daemon=True)
        self.thread.start()
        wait_for(lambda: self.controller.synced, timeout=30, message="controller caches")

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=15)
        assert not self.thread.is_alive()


@pytest.fixture
def run_controller(as_controller: CountingRest, ns: str) -> Iterator[Callable[..., Running]]:
    started: list[Running] = []

    def start(**config: Any) -> Running:
        running = Running(as_controller, ns, **config)
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop()


def stays(check: Callable[[], bool], seconds: float = 1.5) -> bool:
    return holds_for(check, seconds)
