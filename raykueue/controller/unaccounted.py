"""Pods of opted-in clusters that run outside quota: found, reported, evicted.

A pod reaches raykueue's fail-closed pod webhook only with the stamp its
RayCluster's template got from the first stage. Pods of a cluster opted in before
raykueue stamped templates reach it through the legacy webhook, which fails open
(manifests/README.md, upgrade): one created while raykueue was down, or before it
was installed, runs without a gate and without a Workload. The leader looks for
them among the pods of each opted-in RayCluster (one pod list per cluster, by
label, narrowed to pods raykueue does not manage), records a Warning Event on
each, counts it in `raykueue_pods_evicted_total{reason="OutsideQuota"}`, and
deletes it: KubeRay recreates it, and raykueue, being up, gates it.

A RayCluster that carries Kueue's queue label is Kueue's whole (it was opted in
before raykueue was installed): its pods are counted by Kueue's Workload and
left alone, as are pods Kueue's pod integration manages.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Final

from raykueue.controller import metrics as m
from raykueue.controller import patches
from raykueue.controller import pods as p
from raykueue.core import contract as c
from raykueue.core.objects import Obj, controller_ref, display_name, gate_names, labels, metadata
from raykueue.core.pods import kueue_claims, role_of
from raykueue.kube import resources as r
from raykueue.kube.events import WARNING, EventRecorder
from raykueue.kube.rest import ApiError, Rest

log = logging.getLogger("raykueue.controller.unaccounted")

REASON: Final = "OutsideQuota"


def watched(cluster: Obj) -> bool:
    """An opted-in RayCluster raykueue accounts for (not one Kueue admits whole)."""
    return (metadata(cluster).get("annotations") or {}).get(c.STANDALONE_ANNOTATION) == "true" \
        and not labels(cluster).get(c.QUEUE_LABEL)


def unaccounted(cluster: Obj, pods: Iterable[Obj]) -> list[Obj]:
    """The pods of `cluster` that run or wait without raykueue's gate or Workload."""
    uid = metadata(cluster).get("uid")
    out = []
    for pod in pods:
        ref = controller_ref(pod)
        if ref is None or ref.get("uid") != uid or role_of(pod) is None:
            continue
        if labels(pod).get(c.MANAGED_BY_LABEL) == c.MANAGED_BY_VALUE or c.GATE in gate_names(pod):
            continue
        if kueue_claims(pod) is not None or p.is_deleting(pod) or p.is_terminal(pod):
            continue
        out.append(pod)
    return out


class UnaccountedPods:
    """Runs `update` every interval while this replica leads."""

    def __init__(self, rest: Rest, clusters: Callable[[], list[Obj]], recorder: EventRecorder,
                 is_leader: Callable[[], bool]) -> None:
        self._rest = rest
        self._clusters = clusters
        self._recorder = recorder
        self._is_leader = is_leader

    def update(self) -> list[Obj]:
        found: list[Obj] = []
        for cluster in self._clusters():
            if not watched(cluster):
                continue
            ns, name = metadata(cluster).get("namespace"), metadata(cluster).get("name")
            selector = (f"{c.CLUSTER_LABEL}={name},{c.NODE_TYPE_LABEL} in ({','.join(c.MANAGED_ROLES)}),"
                        f"!{c.MANAGED_BY_LABEL}")
            pods = self._rest.get(r.PODS.path(ns), {"labelSelector": selector})["items"]
            found += unaccounted(cluster, pods)
        for pod in found:
            self._evict(pod)
        return found

    def _evict(self, pod: Obj) -> None:
        ns, name = metadata(pod).get("namespace"), display_name(pod)
        message = (f"pod of opted-in RayCluster {p.cluster(pod) or '?'} runs without raykueue's gate or "
                   "Workload (created while raykueue was down or before it was installed); deleting "
                   "it so that KubeRay recreates it and it queues for its quota")
        log.warning("%s/%s: %s", ns, name, message)
        self._recorder.record(pod, WARNING, REASON, message)
        try:
            self._rest.delete(r.PODS.path(ns, name), patches.delete_options(pod))
        except ApiError as exc:
            # 404: gone already; 409: the uid precondition failed, a namesake stands there now.
            if not (exc.is_not_found or exc.status == 409):
                raise
            return
        m.PODS_EVICTED.labels(role=role_of(pod) or "unknown", reason=REASON).inc()

    def run(self, stop: threading.Event, interval: float) -> None:
        while not stop.wait(interval):
            if not self._is_leader():
                continue
            try:
                self.update()
            except Exception:
                log.exception("looking for pods outside quota failed; next try in %.0fs", interval)

    def start(self, stop: threading.Event, interval: float) -> threading.Thread:
        thread = threading.Thread(target=self.run, args=(stop, interval), name="unaccounted-pods",
                                  daemon=True)
        thread.start()
        return thread
