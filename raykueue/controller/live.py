"""Reads from the API server, not the caches: for `raykueue explain`, and the
evidence a removal is judged on (`handlers.remove_pod`).

`ApiSource` answers the same `facts.Source` questions as the controller's
caches, with GETs and LISTs made as the CLI's user; objects that user may not
read count as absent. A removal's reads count only an answer: anything but
404 retries the pass, since a cache miss or a failed read is no evidence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from raykueue.controller import pods as p
from raykueue.controller import workload as w
from raykueue.controller.caches import workload_resource
from raykueue.controller.current import names_pod
from raykueue.controller.retry import Retry
from raykueue.core import contract as c
from raykueue.core.objects import Obj
from raykueue.kube import resources as r
from raykueue.kube.rest import ApiError, Rest


class ApiSource:
    """`facts.Source` over the API server, for one namespace whose Workloads
    were listed once (explain also ranks the pod's Workload among them)."""

    def __init__(self, rest: Rest, version: str, workloads: Sequence[Obj]) -> None:
        self.rest = rest
        self.version = version
        self.workloads = list(workloads)

    def workloads_of(self, pod: Obj) -> list[Obj]:
        name, uid = p.name(pod), p.uid(pod)
        return [x for x in self.workloads if names_pod(x, name, uid)]

    def heads(self, namespace: str, cluster: str) -> list[Obj]:
        return items(self.rest.get(r.PODS.path(namespace), {
            "labelSelector": f"{c.CLUSTER_LABEL}={cluster},{c.NODE_TYPE_LABEL}={c.ROLE_HEAD}"}))

    def flavor(self, name: str) -> Obj | None:
        return get(self.rest, self._cluster_scoped("resourceflavors", name))

    def priority_value(self, class_name: str) -> int | None:
        found = get(self.rest, self._cluster_scoped("workloadpriorityclasses", class_name))
        value = found.get("value") if found is not None else None
        return value if isinstance(value, int) else None

    def _cluster_scoped(self, plural: str, name: str) -> str:
        return r.crd(c.KUEUE_GROUP, self.version, plural, namespaced=False).path(None, name)


def get(rest: Rest, path: str) -> Obj | None:
    """The object, or None when it is absent or the user may not read it."""
    try:
        found = rest.get(path)
    except ApiError as exc:
        if exc.is_not_found or exc.status == 403:
            return None
        raise
    return found if isinstance(found, dict) else None


def items(listing: Any) -> list[Obj]:
    found = listing.get("items") if isinstance(listing, dict) else None
    return [x for x in found if isinstance(x, dict)] if isinstance(found, list) else []


def must_get(rest: Rest, path: str, what: str, query: Mapping[str, str] | None = None) -> Any:
    """A live GET in a pass: None for 404; any other failure retries the pass (nothing,
    a removal least of all, is decided on a read that did not answer)."""
    try:
        return rest.get(path, query) if query else rest.get(path)
    except ApiError as exc:
        if exc.is_not_found:
            return None
        raise Retry(f"reading {what} live: {exc}") from exc


def cluster_peers(rest: Rest, version: str, ns: str, cluster: str) -> list[tuple[Obj, Obj | None]]:
    """The live pods of the cluster, each with its own live Workload (one list each)."""
    selector = {"labelSelector": f"{c.CLUSTER_LABEL}={cluster}"}
    pods = must_get(rest, r.PODS.path(ns), "the cluster's pods", selector) or {}
    wls = must_get(rest, workload_resource(version).path(ns), "the cluster's Workloads",
                   selector) or {}
    by_name = {p.name(x): x for x in wls.get("items") or [] if isinstance(x, dict)}
    return [(x, by_name.get(w.workload_name(x))) for x in pods.get("items") or []
            if isinstance(x, dict)]
