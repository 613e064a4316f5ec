"""One handler per action type: the API writes, their metrics and logs.

A handler gets the `Env` (clients and state), its action, and the `Pass`
(the pod key, the pod, its Workloads by name). It raises `Retry` when a later
pass on fresher state may succeed; answers that mean "already done" (404 on a
delete, 409 on a create) are success. Every write is remembered in the state's
overlay, so a pass before the watch catches up does not repeat it.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from raykueue.controller import actions as a
from raykueue.controller import live, patches, removal
from raykueue.controller import metrics as m
from raykueue.controller import pods as p
from raykueue.controller import workload as w
from raykueue.controller import workload_status as ws
from raykueue.controller.caches import RAYCLUSTERS, slim_pod, slim_workload, workload_resource
from raykueue.controller.config import ControllerConfig
from raykueue.controller.gang.base import group_of
from raykueue.controller.keys import GangKey, PodKey, QueueKey, Ref
from raykueue.controller.retry import Retry
from raykueue.controller.state import State
from raykueue.core import contract as c
from raykueue.core.clock import now_time, timestamp
from raykueue.core.objects import Obj, metadata
from raykueue.core.podrole import role_of
from raykueue.kube import resources as r
from raykueue.kube.events import WARNING
from raykueue.kube.rest import ApiError, Rest

log = logging.getLogger("raykueue.controller")


class Recorder(Protocol):
    def record(self, obj: Mapping[str, Any], type: str, reason: str, message: str,
               action: str | None = None) -> None: ...



@dataclass(frozen=True, slots=True)
class Env:
    """What every handler writes through."""

    rest: Rest
    config: ControllerConfig
    version: str
    state: State
    recorder: Recorder | None
    clock: Callable[[], float]
    # The pod cache, asked whether a pod put in a gang's base is still there.
    cached_pod: Callable[[str, str], Obj | None] = lambda ns, name: None

    def write(self, verb: str, resource: str, call: Callable[[], Any]) -> Any:
        m.API_WRITES.labels(verb=verb, resource=resource).inc()
        return call()

    def event(self, pod: Obj, type_: str, reason: str, message: str,
              regarding: Obj | None = None) -> None:
        if self.recorder is None:
            return
        m.API_WRITES.labels(verb="create", resource="events").inc()
        self.recorder.record(regarding if regarding is not None else pod, type_, reason, message)

    def event_once(self, pod: Obj, type_: str, reason: str, message: str,
                   regarding: Obj | None = None) -> None:
        """Events for standing problems are sent once per pod, not per pass."""
        target = "workload" if regarding is not None else "pod"
        if self.state.first_report(p.uid(pod), (target + reason, message)):
            self.event(pod, type_, reason, message, regarding)


@dataclass(slots=True)
class Pass:
    """One reconcile of one pod key, as its handlers see it. `workloads` is
    updated by each write, so a later action of the pass sees what an earlier
    one applied (a finish after PodsReady carries the PodsReady)."""

    key: QueueKey
    pod: Obj | None
    workloads: dict[str, Obj]
    # Workloads whose pod a removal kept: a Finished after it is skipped.
    kept: set[str] = field(default_factory=set)
    # The gang whose pass this step is part of (its pods' steps run under their own keys).
    gang: GangKey | None = None

    def the_pod(self) -> Obj:
        assert self.pod is not None, "decide only acts on a pod that is there"
        return self.pod

    def pod_ref(self) -> Ref:
        assert isinstance(self.key, PodKey), "a pod is written only in its own key's step"
        return self.key.ref


def create_workload(env: Env, action: a.CreateWorkload, at: Pass) -> None:
    body = action.body
    ns = str(body["metadata"]["namespace"])
    name = str(body["metadata"]["name"])
    path = workload_resource(env.version).path(ns)
    try:
        created = env.write("create", "workloads", lambda: env.rest.create(path, body))
    except ApiError as exc:
        if exc.is_already_exists:
            # Our cache lagged (or a previous leader's create landed):
            # the watch brings it, and the next pass adopts it.
            log.info("%s: Workload %s already exists; adopting it", at.key, name)
            return
        raise Retry(f"creating Workload {name}: {exc}") from exc
    m.WORKLOADS_CREATED.labels(role=action.role).inc()
    log.info("%s: created Workload %s", at.key, name)
    if isinstance(created, dict):
        env.state.remember("workload", (ns, name), None, slim_workload(created))
        env.state.add_owned(at.key, name)


def lift_gate(env: Env, action: a.LiftGate, at: Pass) -> None:
    _lift_gate(env, action, at)
    if at.gang is not None:
        _stands_in_base(env, at, at.gang)  # a gang's pass lifts a gate only into a slot


def _lift_gate(env: Env, action: a.LiftGate, at: Pass) -> None:
    pod = at.the_pod()
    ops = patches.lift_gate_ops(pod, action.node_selector, action.tolerations)
    path = r.PODS.path(*at.pod_ref())
    try:
        patched = env.write("patch", "pods", lambda: env.rest.json_patch(path, ops))
    except ApiError as exc:
        if exc.is_not_found:
            return
        # 422 from a failed test op or 409: the pod changed since our read.
        raise Retry(f"lifting the gate: {exc}") from exc
    _observe_lift(env, pod, at.workloads.get(action.workload))
    log.info("%s: gate lifted (flavors %s)", at.key, ", ".join(action.flavors) or "none")
    if isinstance(patched, dict):
        env.state.remember("pod", at.pod_ref(), pod, slim_pod(patched))


def _observe_lift(env: Env, pod: Obj, wl: Obj | None) -> None:
    now = env.clock()
    role = role_of(pod) or "unknown"
    created = timestamp(metadata(pod).get("creationTimestamp"))
    if created is not None:
        m.GATE_AGE.labels(role=role).observe(max(now - created, 0.0))
    if wl is None:
        return
    seen = env.state.admitted_at(str(metadata(wl).get("uid") or ""))
    if seen is None:
        seen = timestamp((w.condition(wl, w.ADMITTED) or {}).get("lastTransitionTime"))
    if seen is not None:
        m.ADMITTED_TO_LIFTED.observe(max(now - seen, 0.0))


def _set_condition(env: Env, at: Pass, name: str, update: ws.ConditionUpdate | None,
                   reclaim: Mapping[str, int] | None = None) -> bool:
    wl = at.workloads.get(name)
    if wl is None:
        return False
    ns = str(metadata(wl).get("namespace") or at.key.namespace)
    body = ws.status_apply_body(wl, [update] if update else [], now_time(), reclaim)
    path = workload_resource(env.version).path(ns, name, "status")
    try:
        applied = env.write("apply", "workloads/status", lambda: env.rest.apply(
            path, body, env.config.field_manager, force=True))
    except ApiError as exc:
        if exc.is_not_found:
            return False  # already garbage-collected: its quota is free
        what = update.type if update else "reclaimablePods"
        raise Retry(f"setting {what} on Workload {name}: {exc}") from exc
    if isinstance(applied, dict):
        slim = slim_workload(applied)
        env.state.remember("workload", (ns, name), wl, slim)
        at.workloads[name] = slim
    return True


def set_pods_ready(env: Env, action: a.SetPodsReady, at: Pass) -> None:
    _set_condition(env, at, action.workload, ws.ConditionUpdate(
        w.PODS_READY, action.ready, action.reason, action.message))


def set_reclaimable(env: Env, action: a.SetReclaimable, at: Pass) -> None:
    if _set_condition(env, at, action.workload, None, action.counts):
        log.info("%s: gang base %s hands back %s", at.key.namespace, action.workload,
                 ", ".join(f"{n} of {k}" for k, n in sorted(action.counts.items())))


def finish_workload(env: Env, action: a.FinishWorkload, at: Pass) -> None:
    if action.workload in at.kept:
        return  # its pod was kept (not proven, or report-only): it still runs, counted
    if _set_condition(env, at, action.workload, ws.ConditionUpdate(
            w.FINISHED, True, action.reason, action.message)):
        m.WORKLOADS_FINISHED.labels(reason=action.reason).inc()
        log.info("%s: Workload %s finished (%s)", at.key, action.workload, action.reason)


def delete_workload(env: Env, action: a.DeleteWorkload, at: Pass) -> None:
    _delete_workload(env, action, at)
    if at.gang is not None and action.reason == a.GANG_MOVED_IN:
        _stands_in_base(env, at, at.gang)  # an extra whose own Workload went fills a slot


def _stands_in_base(env: Env, at: Pass, gang: GangKey) -> None:
    """The pod now stands in its gang's base: the gang's later passes count it in its
    slot whatever their snapshot says, until the pod is seen to go (`State.pod_event`).
    Without this, a pass on a pod cache behind our write sees the slot free and fills
    it twice."""
    pod = at.pod
    if pod is None:
        return

    def still_there() -> bool:
        cached = env.cached_pod(*p.key(pod))
        return cached is not None and p.uid(cached) == p.uid(pod)

    env.state.note_gang_released(gang.namespace, gang.cluster, p.uid(pod), group_of(pod),
                                 still_there)


def _delete_workload(env: Env, action: a.DeleteWorkload, at: Pass) -> None:
    wl = at.workloads.get(action.workload)
    ns = str(metadata(wl).get("namespace") or at.key.namespace) if wl is not None else at.key.namespace
    path = workload_resource(env.version).path(ns, action.workload)
    options = {"apiVersion": "v1", "kind": "DeleteOptions",
               "preconditions": {"uid": action.uid}} if action.uid else None
    deleted = True
    try:
        env.write("delete", "workloads", lambda: env.rest.delete(path, options))
    except ApiError as exc:
        # 404: gone already; 409: a namesake stands there now, not this pod's.
        if exc.status == 409:
            return
        if not exc.is_not_found:
            raise Retry(f"deleting Workload {action.workload}: {exc}") from exc
        deleted = False
    if wl is not None:
        # Until the watch says so, our cache still holds it: the pod's
        # final DELETED event (kwok, or the kubelet after the grace
        # period) would otherwise make the next pass delete it again.
        gone = copy.copy(wl)  # shallow, keeping a SlimWorkload's fingerprint
        gone["metadata"] = {**metadata(wl), "deletionTimestamp": now_time()}
        env.state.remember("workload", (ns, action.workload), wl, gone)
        at.workloads[action.workload] = gone
    if deleted:
        m.WORKLOADS_DELETED.labels(reason=action.reason).inc()
        log.info("%s: deleted Workload %s (%s)", at.key, action.workload, action.reason)


def _raycluster_of(pod: Obj, live: Obj | None) -> Obj | None:
    """What the RayCluster Event regards: the live object, else the pod's owner reference."""
    if live is not None:
        return live
    ref = removal.raycluster_ref(pod)
    if ref is None:
        return None
    return {"apiVersion": f"{c.RAY_API_GROUP}/v1", "kind": "RayCluster",
            "metadata": {"name": ref["name"], "uid": ref["uid"],
                         "namespace": metadata(pod).get("namespace")}}


def _tell(env: Env, pod: Obj, raycluster: Obj | None, type_: str, reason: str,
          message: str, once: bool) -> None:
    """The same Event on the pod and on its RayCluster (where users look for a lost pod)."""
    send = env.event_once if once else env.event
    send(pod, type_, reason, message)
    if raycluster is not None:
        send(pod, type_, reason, f"pod {p.name(pod)}: {message}", regarding=raycluster)


def _kept(env: Env, pod: Obj, raycluster: Obj | None, cause: str, outcome: str, reason: str,
          message: str) -> None:
    """A removal that did not happen: counted, logged, and said once on the pod and its
    RayCluster."""
    m.POD_REMOVALS.labels(cause=cause, outcome=outcome).inc()
    log.warning("%s/%s: pod kept (%s, %s): %s", metadata(pod).get("namespace"), p.name(pod), cause, outcome,
                message)
    _tell(env, pod, raycluster, WARNING, reason, message, once=True)


def remove_pod(env: Env, action: a.EvictPod, at: Pass) -> None:
    """The one place raykueue deletes a pod: only what live reads prove (`removal`).

    The pod, the Workload named for it, the Workload the decision names (a gang's
    base), the owning RayCluster and, for an outside-quota removal, the cluster's
    pods and Workloads are read from the API server, never from the caches: a cache
    miss or a stale cache is no evidence. Proven and enforcing: condition, Events on
    the pod and its RayCluster, a delete preconditioned on the pod's uid. Proven
    under RAYKUEUE_ENFORCEMENT=report, or not proven: Events and a metric only, and
    the Finished that would follow is skipped (the pod keeps running, counted).
    """
    pod = at.the_pod()
    ns, name = at.pod_ref()
    now = env.clock()
    grace = env.config.outside_quota_grace_seconds
    live_pod = live.must_get(env.rest, r.PODS.path(ns, name), f"pod {name}")
    own = evidence = raycluster = None
    peers: list[tuple[Obj, Obj | None]] = []
    if isinstance(live_pod, dict) and p.uid(live_pod) == p.uid(pod):
        own_name = w.workload_name(live_pod)
        path = workload_resource(env.version).path
        own = live.must_get(env.rest, path(ns, own_name), f"Workload {own_name}")
        if action.workload and action.workload != own_name:
            evidence = live.must_get(env.rest, path(ns, action.workload), f"Workload {action.workload}")
        ref = removal.raycluster_ref(live_pod)
        if ref is not None:
            raycluster = live.must_get(env.rest, RAYCLUSTERS.path(ns, ref["name"]),
                                       f"RayCluster {ref['name']}")
        cluster = p.cluster(live_pod)
        if cluster and removal.outside_quota_left(live_pod, own, now, grace) == 0.0:
            peers = live.cluster_peers(env.rest, env.version, ns, cluster)
    verdict = removal.confirm(p.uid(pod), live_pod if isinstance(live_pod, dict) else None,
                              own, evidence, raycluster, peers, now, grace)
    role = role_of(pod) or "unknown"
    regarding = _raycluster_of(pod, raycluster)
    if not verdict.justified:
        at.kept.add(action.workload)
        if isinstance(live_pod, dict) and p.uid(live_pod) == p.uid(pod) \
                and not p.is_deleting(live_pod):
            # (A pod gone or going already is no refusal: nothing is counted or said.)
            _kept(env, pod, regarding, action.reason, "not_proven", removal.NOT_PROVEN,
                  f"raykueue did not delete the pod ({action.reason}: {action.message}): "
                  f"the live state does not prove it must go: {verdict.evidence}")
        return
    if env.config.enforcement == removal.REPORT:
        at.kept.add(action.workload)
        _kept(env, pod, regarding, verdict.cause, "reported", removal.REPORTED,
              f"RAYKUEUE_ENFORCEMENT=report: the pod was not deleted; it would be ("
              f"{verdict.cause}): {verdict.evidence}")
        return
    _delete_pod(env, action, at, pod, verdict, regarding)
    m.POD_REMOVALS.labels(cause=verdict.cause, outcome="deleted").inc()
    m.PODS_EVICTED.labels(role=role, reason=action.reason).inc()


def _delete_pod(env: Env, action: a.EvictPod, at: Pass, pod: Obj, verdict: removal.Justification,
                regarding: Obj | None) -> None:
    ns, name = at.pod_ref()
    by = "Kueue" if verdict.cause == removal.KUEUE_EVICTED else "raykueue"
    # The evidence, logged with every delete: what the live reads showed.
    if action.head:
        log.warning("%s/%s: Ray cluster %s taken down: its head is removed (%s, by %s): %s",
                    ns, name, p.cluster(pod) or "?", verdict.cause, by, verdict.evidence)
    else:
        log.warning("%s/%s: deleting the pod (%s, by %s): %s", ns, name, verdict.cause, by,
                    verdict.evidence)
    body = patches.evicted_condition_body(pod, action.reason, action.message, now_time())
    try:
        env.write("apply", "pods/status", lambda: env.rest.apply(
            r.PODS.path(ns, name, "status"), body, env.config.field_manager, force=True))
    except ApiError as exc:
        if not exc.is_not_found:
            raise Retry(f"writing the eviction condition: {exc}") from exc
    message = f"{action.reason}: {action.message}. Evidence ({verdict.cause}): {verdict.evidence}"
    if action.head:
        message += "; the Ray cluster's head is going, KubeRay will recreate it gated"
    _tell(env, pod, regarding, WARNING, removal.REMOVED, message, once=False)
    try:
        gone = env.write("delete", "pods", lambda: env.rest.delete(
            r.PODS.path(ns, name), patches.delete_options(pod)))
    except ApiError as exc:
        # 404: gone already; 409: the uid precondition failed, a namesake
        # stands there now and is not ours to delete.
        if not (exc.is_not_found or exc.status == 409):
            raise Retry(f"deleting the evicted pod: {exc}") from exc
    else:
        # Until the watch says so, a pass would still see the pod running (and a
        # gang's pass, a pod past the gate to evict again).
        deleting = gone if isinstance(gone, dict) and gone.get("kind") == "Pod" else pod
        after = copy.copy(slim_pod(deleting))
        after["metadata"] = {**metadata(after),
                             "deletionTimestamp": metadata(after).get("deletionTimestamp")
                             or now_time()}
        env.state.remember("pod", at.pod_ref(), pod, after)


def report_conflict(env: Env, action: a.ReportConflict, at: Pass) -> None:
    pod = at.the_pod()
    env.event_once(pod, WARNING, action.kind, action.message)
    wl = at.workloads.get(action.workload) if action.workload else None
    if wl is not None:
        env.event_once(pod, WARNING, action.kind, action.message, regarding=wl)


def warn(env: Env, action: a.Warn, at: Pass) -> None:
    log.warning("%s: %s", at.key, action.message)
    if at.pod is not None:
        env.event_once(at.pod, WARNING, action.reason, action.message)


def wait(env: Env, action: a.Wait, at: Pass) -> None:
    log.debug("%s: waiting: %s", at.key, action.reason)
