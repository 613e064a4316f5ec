"""Adopt, don't kill: opted-in RayClusters that raykueue finds running without it.

A RayCluster opted in before raykueue was installed (a GitOps sync order, a
reinstall), or while an admin had deleted raykueue's webhooks (break-glass),
has pod templates without the stamp and running pods without a gate or a
Workload. The leader finds them here, every `interval` and when a RayCluster
changes, and:

- stamps the cluster's templates (a uid-guarded empty update, which raykueue's
  first webhook answers with the stamp), so its next pods are gated at
  creation; never when the update would make KubeRay recreate the running pods
  (`spec.upgradeStrategy.type: Recreate`: KubeRay hashes the spec, template
  labels included, and deletes every pod when the hash on the head differs,
  ray-operator v1.6 `shouldRecreatePodsForUpgrade`); for those an Event on the
  RayCluster says what to change;
- adopts its running pods that nothing manages: the head first, the workers
  once the head's Workload is admitted. The patch adds raykueue's managed-by
  label and, as annotations, the queue and priority class the pod webhook
  would have given it (`classify`, on the pod as its stamped template would
  have made it). Not Kueue's labels: Kueue's pod webhook refuses a queue-name
  or priority-class label added to a running pod. The controller then makes
  the pod's Workload from a live read (`decide`); Kueue admitting it leaves the
  pod running untouched.

Nothing here deletes anything. Only clusters raykueue accounts for are looked
at (opted in, not Kueue's whole), and only in namespaces raykueue's pod
webhook is called for: its namespaceSelector, read from the installed
configuration, is the one place that says which namespaces raykueue skips.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from raykueue.controller import pods as p
from raykueue.controller import workload as w
from raykueue.controller.caches import RAYCLUSTERS, discover_version, workload_resource
from raykueue.core import contract as c
from raykueue.core.objects import Obj, controller_ref, gate_names, labels, metadata, spec
from raykueue.core.podrole import kueue_claims, role_of
from raykueue.core.priority import PriorityPolicy
from raykueue.core.rayobjects import admitted_whole, is_opted_in, is_stamped, templates
from raykueue.core.selectors import matches, namespace_labels
from raykueue.kube import resources as r
from raykueue.kube.events import NORMAL, WARNING, EventRecorder
from raykueue.kube.rest import ApiError, Rest
from raykueue.webhooks.classify import Decision, Manage, PodContext, classify
from raykueue.webhooks.mutate import Patch, put_entries

log = logging.getLogger("raykueue.controller.adopt")

POD_WEBHOOK: Final = "mutate-pods.raykueue.io"
ADOPTED: Final = "Adopted"
NOT_ADOPTED: Final = "NotAdopted"
STAMPED: Final = "Stamped"
NOT_STAMPED: Final = "NotStamped"
RECREATE: Final = "Recreate"
_SAID_LIMIT: Final = 10_000


# --- the pure core ------------------------------------------------------------------


def accounted(cluster: Obj) -> bool:
    """An opted-in RayCluster that raykueue accounts for: not one Kueue admits whole."""
    return (is_opted_in(cluster) and not admitted_whole(cluster)
            and not metadata(cluster).get("deletionTimestamp"))


def pod_webhook_scope(config: Obj | None) -> Mapping[str, Any] | None:
    """The namespaceSelector of raykueue's pod webhook in its installed configuration.

    None when the webhook is not installed (deleted by an admin, or not yet
    applied): then raykueue gates nothing at creation and adopts nothing either.
    A webhook without a selector is called for every namespace: `{}`.
    """
    for hook in (config or {}).get("webhooks") or []:
        if isinstance(hook, dict) and hook.get("name") == POD_WEBHOOK:
            selector = hook.get("namespaceSelector")
            return selector if isinstance(selector, dict) else {}
    return None


def unstamped(cluster: Obj) -> bool:
    """Whether a pod template lacks the stamp (its new pods would not reach raykueue)."""
    return any(not is_stamped(t) for _, t in templates(cluster, c.RAYCLUSTER_KIND))


def recreates_on_change(cluster: Obj) -> bool:
    """Whether KubeRay recreates every pod when the spec (a template's labels too) changes."""
    strategy = spec(cluster).get("upgradeStrategy")
    return isinstance(strategy, dict) and strategy.get("type") == RECREATE


def adoptable(cluster: Obj, pods: Iterable[Obj]) -> list[Obj]:
    """The running pods of `cluster` that nothing manages: heads first.

    Not raykueue's (its label or gate), not Kueue's, not going or ended, and past
    every scheduling gate (a pod someone else still holds is theirs to release).
    """
    uid = metadata(cluster).get("uid")
    out = []
    for pod in pods:
        ref = controller_ref(pod)
        if ref is None or ref.get("uid") != uid or role_of(pod) is None:
            continue
        if labels(pod).get(c.MANAGED_BY_LABEL) == c.MANAGED_BY_VALUE or gate_names(pod):
            continue
        if kueue_claims(pod) is not None or p.is_deleting(pod) or p.is_terminal(pod):
            continue
        out.append(pod)
    return sorted(out, key=lambda x: (role_of(x) != c.ROLE_HEAD, p.name(x)))


def unmanaged_selector(cluster_name: str) -> str:
    """The label selector of a cluster's Ray pods that do not carry raykueue's label: the
    only ones `adoptable` can return. `notin` also matches a pod without the label, so the
    API server filters and a pass over a cluster whose pods are all raykueue's (gated ones
    too) reads an empty list: the pass costs no more as pending pods grow."""
    return (f"{c.CLUSTER_LABEL}={cluster_name},{c.NODE_TYPE_LABEL} in ({','.join(c.MANAGED_ROLES)}),"
            f"{c.MANAGED_BY_LABEL} notin ({c.MANAGED_BY_VALUE})")


def managed_heads_selector(cluster_name: str) -> str:
    """The label selector of a cluster's heads that carry raykueue's label."""
    return (f"{c.CLUSTER_LABEL}={cluster_name},{c.NODE_TYPE_LABEL}={c.ROLE_HEAD},"
            f"{c.MANAGED_BY_LABEL}={c.MANAGED_BY_VALUE}")


def as_stamped(pod: Obj) -> Obj:
    """The pod as its cluster's stamped template would have made it, for `classify`."""
    meta = dict(metadata(pod))
    meta["labels"] = {**labels(pod), c.OPTED_IN_LABEL: c.OPTED_IN_VALUE}
    return {**pod, "metadata": meta}


def decide_pod(pod: Obj, ctx: PodContext, policy: PriorityPolicy) -> Decision:
    """What the pod webhook would have decided had the pod been stamped at creation."""
    return classify(as_stamped(pod), ctx, policy)


def adopt_patch(pod: Obj, decision: Manage) -> Patch:
    """Makes the controller manage the running pod: its label, the queue and priority.

    The uid test makes the patch apply to this pod only, never to a namesake.
    Nothing else changes: the pod keeps running as it is.
    """
    ops: Patch = [{"op": "test", "path": "/metadata/uid", "value": metadata(pod).get("uid")}]
    ops += put_entries(("metadata", "labels"), metadata(pod).get("labels"),
                       {c.MANAGED_BY_LABEL: c.MANAGED_BY_VALUE})
    ops += put_entries(("metadata", "annotations"), metadata(pod).get("annotations"), {
        c.QUEUE_ANNOTATION: decision.queue,
        c.PRIORITY_CLASS_ANNOTATION: decision.priority_class,
    })
    return ops


def stamp_patch(cluster: Obj) -> Patch:
    """An empty update of the RayCluster, guarded by its uid: raykueue's first webhook
    answers it with the stamp (its matchConditions send an opted-in RayCluster with an
    unstamped template to it)."""
    return [{"op": "test", "path": "/metadata/uid", "value": metadata(cluster).get("uid")}]


def own_head_admitted(heads: Iterable[tuple[Obj, Obj | None]]) -> bool:
    """Whether a head of the cluster is raykueue's and its own Workload is admitted."""
    for head, wl in heads:
        if p.is_deleting(head) or p.is_terminal(head) or wl is None:
            continue
        if (w.pod_uid_of(wl) == p.uid(head) and w.is_admitted(wl) and not w.is_evicted(wl)
                and not w.is_finished(wl)):
            return True
    return False


# --- the edge -------------------------------------------------------------------------


class Adopter:
    """Runs `update` every interval, and soon after a RayCluster event, while this replica leads."""

    def __init__(self, rest: Rest, clusters: Callable[[], list[Obj]],
                 context_for: Callable[[Obj, str], PodContext],
                 namespace_labels_of: Callable[[str], Mapping[str, str] | None],
                 policy: PriorityPolicy, recorder: EventRecorder, is_leader: Callable[[], bool]) -> None:
        self._rest = rest
        self._clusters = clusters
        self._context_for = context_for
        self._namespace_labels = namespace_labels_of
        self._policy = policy
        self._recorder = recorder
        self._is_leader = is_leader
        self._wake = threading.Event()
        self._version: str | None = None
        # Said once per (uid, reason, detail): a pass repeats every interval.
        self._said: set[tuple[str, str, str]] = set()
        # RayClusters (uid, generation) whose templates were seen stamped.
        self._stamped: set[tuple[str, object]] = set()
        self._no_scope_said = False
        self._lock = threading.Lock()
        self._changed: set[str] = set()  # uids of the RayClusters whose events woke the thread

    def wake(self, _event: str = "", cluster: Obj | None = None) -> None:
        """A RayCluster handler: a pass over that cluster soon. Only that one: every pass
        lists each cluster's pods live, and KubeRay writes a cluster's status many times
        as its pods come and go, so passing over all on every event cost a LIST per
        cluster per event (963 LISTs for 30 clusters in bench/cohort.py). The interval's
        pass still covers every cluster."""
        if cluster is not None:
            with self._lock:
                self._changed.add(str(metadata(cluster).get("uid")))
        self._wake.set()

    # --- one pass ---------------------------------------------------------------------

    def update(self, only: set[str] | None = None) -> list[Obj]:
        """One pass over every opted-in RayCluster (or those whose uid is in `only`);
        returns the pods adopted."""
        scope = self._scope()
        if scope is None:
            return []
        adopted: list[Obj] = []
        clusters = self._clusters()
        # What is remembered is of clusters that still exist: it cannot grow for good.
        uids = {str(metadata(x).get("uid")) for x in clusters}
        self._stamped = {k for k in self._stamped if k[0] in uids}
        if len(self._said) > _SAID_LIMIT:
            self._said.clear()  # at worst an Event said once more
        if only is not None:
            clusters = [x for x in clusters if str(metadata(x).get("uid")) in only]
        for cluster in clusters:
            ns = str(metadata(cluster).get("namespace") or "")
            if not accounted(cluster):
                continue
            if not matches(scope, self._namespace_labels(ns) or namespace_labels(ns)):
                continue  # the webhooks skip it, so does this
            try:
                adopted += self._cluster(cluster)
            except ApiError as exc:
                log.warning("%s/%s: adoption pass failed: %s; next pass retries", ns,
                            metadata(cluster).get("name"), exc)
        return adopted

    def _scope(self) -> Mapping[str, Any] | None:
        path = r.MUTATING_WEBHOOK_CONFIGURATIONS.path(name=c.MUTATING_WEBHOOK_CONFIG)
        try:
            config = self._rest.get(path)
        except ApiError as exc:
            if not exc.is_not_found:
                raise
            config = None
        scope = pod_webhook_scope(config)
        if scope is None and not self._no_scope_said:
            log.warning("%s is not installed (%s): raykueue gates no pod at creation, so it "
                        "adopts none either until it is back", POD_WEBHOOK, c.MUTATING_WEBHOOK_CONFIG)
        self._no_scope_said = scope is None
        return scope

    def _cluster(self, cached: Obj) -> list[Obj]:
        ns, name = str(metadata(cached).get("namespace")), str(metadata(cached).get("name"))
        key = (str(metadata(cached).get("uid")), metadata(cached).get("generation"))
        if key not in self._stamped:
            self._stamp(ns, name, cached)
        pods = self._rest.get(r.PODS.path(ns), {"labelSelector": unmanaged_selector(name)})["items"]
        found = adoptable(cached, pods)
        if not found:
            return []
        adopted = [x for x in found if role_of(x) == c.ROLE_HEAD and self._adopt(x, ns)]
        workers = [x for x in found if role_of(x) == c.ROLE_WORKER]
        if workers and self._head_admitted(ns, cached, name):
            adopted += [x for x in workers if self._adopt(x, ns)]
        return adopted

    def _stamp(self, ns: str, name: str, cached: Obj) -> None:
        try:
            live = self._rest.get(RAYCLUSTERS.path(ns, name))
        except ApiError as exc:
            if exc.is_not_found:
                return
            raise
        uid = str(metadata(live).get("uid"))
        if uid != metadata(cached).get("uid") or not accounted(live):
            return
        key = (uid, metadata(live).get("generation"))
        if not unstamped(live):
            self._stamped.add(key)
            return
        if recreates_on_change(live):
            self._say(live, WARNING, NOT_STAMPED, str(key[1]), (
                f"RayCluster {name} opts in to raykueue but its pod templates lack the label "
                f"{c.OPTED_IN_LABEL}: \"{c.OPTED_IN_VALUE}\", so its new pods would start without "
                "a gate. raykueue does not add it: with spec.upgradeStrategy.type Recreate, "
                "KubeRay would delete and recreate every running pod. Add the label to every pod "
                "template yourself when a restart suits you (or remove upgradeStrategy); "
                "meanwhile raykueue adopts its running pods."))
            return
        try:
            self._rest.json_patch(RAYCLUSTERS.path(ns, name), stamp_patch(live))
        except ApiError as exc:
            if exc.is_not_found or exc.status in (409, 422):
                return  # gone, or a namesake: the next pass looks again
            self._say(live, WARNING, NOT_STAMPED, str(key[1]),
                      f"raykueue could not stamp the pod templates of RayCluster {name}: {exc}; "
                      "it tries again")
            return
        log.info("%s/%s: stamped the pod templates of an opted-in RayCluster", ns, name)
        self._say(live, NORMAL, STAMPED, uid,
                  f"raykueue stamped the pod templates of RayCluster {name} "
                  f"({c.OPTED_IN_LABEL}: \"{c.OPTED_IN_VALUE}\"): its new pods queue in Kueue "
                  "through raykueue; running pods are adopted, none is restarted")

    def _head_admitted(self, ns: str, cluster: Obj, name: str) -> bool:
        # Read only when workers wait for adoption: the pass's own list holds no pod of ours.
        uid = metadata(cluster).get("uid")
        live = self._rest.get(r.PODS.path(ns), {"labelSelector": managed_heads_selector(name)})["items"]
        heads = [x for x in live if (controller_ref(x) or {}).get("uid") == uid]
        if not heads:
            return False
        path = workload_resource(self._workload_version()).path
        pairs: list[tuple[Obj, Obj | None]] = []
        for head in heads:
            try:
                pairs.append((head, self._rest.get(path(ns, w.workload_name(head)))))
            except ApiError as exc:
                if not exc.is_not_found:
                    raise
                pairs.append((head, None))
        return own_head_admitted(pairs)

    def _workload_version(self) -> str:
        if self._version is None:
            self._version = discover_version(self._rest) or w.V1BETA2
        return self._version

    def _adopt(self, pod: Obj, ns: str) -> bool:
        decision = decide_pod(pod, self._context_for(pod, ns), self._policy)
        name = p.name(pod)
        if not isinstance(decision, Manage):
            why = getattr(decision, "message", None) or getattr(decision, "reason", "")
            self._say(pod, WARNING, NOT_ADOPTED, why, (
                f"pod {name} of opted-in RayCluster {p.cluster(pod) or '?'} runs without a "
                f"Workload, and raykueue cannot adopt it: {why}. It is left running as it is"))
            return False
        try:
            self._rest.json_patch(r.PODS.path(ns, name), adopt_patch(pod, decision))
        except ApiError as exc:
            if exc.is_not_found or exc.status == 409 or (
                    exc.status == 422 and "test" in exc.message.lower()):
                return False  # gone, or not this pod any more: the next pass looks again
            self._say(pod, WARNING, NOT_ADOPTED, str(exc.status), (
                f"raykueue could not adopt pod {name}: {exc.message}; it tries again and "
                "leaves the pod running"))
            return False
        log.info("%s/%s: adopted (%s, queue %s, priority class %s)", ns, name, role_of(pod),
                 decision.queue, decision.priority_class)
        self._say(pod, NORMAL, ADOPTED, p.uid(pod), (
            f"pod {name} of opted-in RayCluster {p.cluster(pod) or '?'} was running without a "
            "Workload (created before raykueue ran, or while its webhooks were away); raykueue "
            f"manages it now and makes its Workload in queue {decision.queue} "
            f"({decision.priority_class}). It keeps running while Kueue admits it"))
        return True

    def _say(self, obj: Obj, type_: str, reason: str, detail: str, message: str) -> None:
        said = (str(metadata(obj).get("uid")), reason, detail)
        if said in self._said:
            return
        self._said.add(said)
        if type_ == WARNING:
            log.warning("%s/%s: %s", metadata(obj).get("namespace"), metadata(obj).get("name"),
                        message)
        self._recorder.record(obj, type_, reason, message)

    # --- the thread ---------------------------------------------------------------------

    def run(self, stop: threading.Event, interval: float) -> None:
        while not stop.is_set():
            woken = self._wake.wait(interval)
            self._wake.clear()
            with self._lock:
                changed, self._changed = self._changed, set()
            if stop.is_set():
                return
            if not self._is_leader():
                continue
            try:
                # Woken by clusters' events: those; by the interval (or a bare wake): all.
                self.update(changed if woken and changed else None)
            except Exception:
                log.exception("adoption pass failed; next try in %.0fs", interval)
            # A burst of RayCluster events makes one pass, not one each.
            stop.wait(1.0)

    def start(self, stop: threading.Event, interval: float) -> threading.Thread:
        thread = threading.Thread(target=self.run, args=(stop, interval), name="adopt",
                                  daemon=True)
        thread.start()
        return thread
