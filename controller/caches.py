"""The controller's four watch caches, and what they keep of each object."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from controller import workload as w
from controller.config import ControllerConfig
from kube import resources as r
from kube.rest import Rest
from webhooks import contract as c

log = logging.getLogger("raykueue.controller")

Handler = Callable[[str, dict[str, Any]], None]


class Cache(Protocol):
    synced: bool

    def start(self) -> Any: ...
    def stop(self, timeout: float = 5.0) -> None: ...
    def wait_synced(self, timeout: float | None = None) -> bool: ...
    def get(self, namespace: str | None, name: str) -> dict[str, Any] | None: ...
    def list(self, namespace: str | None = None) -> list[dict[str, Any]]: ...
    def add_handler(self, fn: Handler) -> None: ...


CacheFactory = Callable[..., Cache]


def workload_resource(version: str) -> r.Resource:
    return r.crd(c.KUEUE_GROUP, version, "workloads")


def kueue_resource(version: str, plural: str, *, namespaced: bool = True) -> r.Resource:
    return r.crd(c.KUEUE_GROUP, version, plural, namespaced=namespaced)


def discover_version(rest: Rest) -> str | None:
    """v1beta2 where served, else v1beta1; None while Kueue's CRDs are absent."""
    served = r.served_versions(rest, c.KUEUE_GROUP)
    for version in w.VERSIONS:
        if version in served:
            return version
    return None


def slim_workload(obj: dict[str, Any]) -> w.SlimWorkload:
    """Cache transform: managedFields and pod templates are most of a Workload's
    bytes and nothing here reads them; whether they ask for what the pod asks
    for is all we need of the templates, and the result carries that."""
    if isinstance(obj, w.SlimWorkload):
        return obj
    obj.get("metadata", {}).pop("managedFields", None)
    pod_sets = w.pod_sets_fingerprint(obj)
    for pod_set in (obj.get("spec") or {}).get("podSets") or []:
        if isinstance(pod_set, dict):
            pod_set.pop("template", None)
    return w.SlimWorkload(obj, pod_sets)


def slim_pod(obj: dict[str, Any]) -> dict[str, Any]:
    obj.get("metadata", {}).pop("managedFields", None)
    return obj


@dataclass(frozen=True, slots=True)
class Caches:
    pods: Cache  # ours only, by the managed-by label
    workloads: Cache  # all, not just ours: one Kueue made for our pod is a conflict
    flavors: Cache
    priority_classes: Cache

    @classmethod
    def open(cls, rest: Rest, config: ControllerConfig, version: str,
             make: CacheFactory) -> Caches:
        """Build the caches (not started: handlers go on first)."""
        ns = config.namespace
        return cls(
            pods=make(rest, r.PODS, namespace=ns,
                      label_selector=f"{c.MANAGED_BY_LABEL}={c.MANAGED_BY_VALUE}",
                      transform=slim_pod),
            workloads=make(rest, workload_resource(version), namespace=ns,
                           transform=slim_workload),
            flavors=make(rest, kueue_resource(version, "resourceflavors", namespaced=False)),
            priority_classes=make(rest, kueue_resource(version, "workloadpriorityclasses",
                                                       namespaced=False)),
        )

    @property
    def all(self) -> tuple[Cache, ...]:
        return (self.pods, self.workloads, self.flavors, self.priority_classes)

    def start(self) -> None:
        for cache in self.all:
            cache.start()

    def stop(self) -> None:
        for cache in self.all:
            cache.stop()

    def wait_synced(self, stop: threading.Event, timeout: float) -> bool:
        """True once every cache holds its initial list; False if `stop` came first."""
        deadline = time.monotonic() + timeout
        while not stop.is_set():
            if all(cache.wait_synced(0.2) for cache in self.all):
                return True
            if time.monotonic() > deadline:
                log.warning("caches not synced after %.0fs; still waiting", timeout)
                deadline = time.monotonic() + timeout
        return False
