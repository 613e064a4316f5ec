"""`raykueue uninstall`, acting: reads the cluster, prints the plan, carries it out (plan.py says why).

Every step is idempotent and every step re-reads what it acts on, so a run that
stops half way (a timeout, a blocker that appeared, Ctrl-C) is finished by
running it again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

from raykueue.controller import workload as w
from raykueue.core import contract as c
from raykueue.core.objects import metadata
from raykueue.kube.resources import (
    MUTATING_WEBHOOK_CONFIGURATIONS,
    NAMESPACES,
    PODS,
    VALIDATING_WEBHOOK_CONFIGURATIONS,
    Resource,
    crd,
)
from raykueue.kube.rest import ApiError, Rest
from raykueue.uninstall import patches as up
from raykueue.uninstall import plan as p
from raykueue.uninstall import render as ur
from raykueue.uninstall import world as uw

RAY: Final = {kind: crd(c.RAY_API_GROUP, "v1", kind.lower() + "s") for kind in uw.RAY_KINDS}
LOCAL_QUEUES: Final = crd(c.KUEUE_GROUP, "v1beta2", "localqueues")
WORKLOAD_VERSIONS: Final = ("v1beta2", "v1beta1")
WEBHOOK_RESOURCES: Final = {r.plural: r for r in (MUTATING_WEBHOOK_CONFIGURATIONS,
                                                 VALIDATING_WEBHOOK_CONFIGURATIONS)}
RAY_POD_SELECTOR: Final = f"{c.NODE_TYPE_LABEL} in ({','.join(c.MANAGED_ROLES)})"
# How long one write is retried while the API server answers with a passing error:
# among them a webhook call to a raykueue that is gone, for the moments the API
# server still has a deleted webhook configuration in its cache.
RETRY_SECONDS: Final = 30.0

# Exit codes: 0 done (or a dry run), 1 failed or timed out, 3 blocked (see plan.py).
OK, FAILED, BLOCKED = 0, 1, 3


class Failed(Exception):
    """A step could not finish; the message says which and what is left."""


class Uninstall:
    def __init__(self, rest: Rest, *, out: Callable[[str], None] = print, timeout: float = 300.0,
                 poll: float = 1.0) -> None:
        self.rest = rest
        self.out = out
        self.timeout = timeout
        self.poll = poll
        self._workloads: Resource | None = None

    # --- reading ------------------------------------------------------------------

    def _list(self, resource: Resource, selector: str | None = None, namespace: str | None = None
              ) -> list[dict[str, Any]]:
        query = {"labelSelector": selector} if selector else None
        try:
            return list(self.rest.get(resource.path(namespace), query)["items"])
        except ApiError as exc:
            if exc.is_not_found:  # the kind is not served here (Kueue or KubeRay absent)
                return []
            raise

    def workloads_resource(self) -> Resource:
        if self._workloads is None:
            for version in WORKLOAD_VERSIONS:
                candidate = crd(c.KUEUE_GROUP, version, "workloads")
                try:
                    self.rest.get(candidate.path(), {"limit": 1})
                except ApiError as exc:
                    if exc.is_not_found:
                        continue
                    raise
                self._workloads = candidate
                break
            else:
                self._workloads = crd(c.KUEUE_GROUP, WORKLOAD_VERSIONS[0], "workloads")
        return self._workloads

    def read(self, namespace: str | None = None) -> uw.World:
        """Everything the plan reads; within `namespace` only (and no webhooks) when given."""
        configs = [] if namespace else [
            (plural, cfg) for plural, res in WEBHOOK_RESOURCES.items()
            for cfg in self._list(res) if uw.is_raykueue_webhook_config(cfg)]
        ours = f"{c.MANAGED_BY_LABEL}={c.MANAGED_BY_VALUE}"
        # Cluster-wide only: one owner's handback may not list namespaces.
        terminating = set() if namespace else {
            str(metadata(ns).get("name")) for ns in self._list(NAMESPACES)
            if (ns.get("status") or {}).get("phase") == "Terminating"}
        return uw.World(
            rayclusters=self._list(RAY[c.RAYCLUSTER_KIND], namespace=namespace),
            rayjobs=self._list(RAY[c.RAYJOB_KIND], namespace=namespace),
            rayservices=self._list(RAY[c.RAYSERVICE_KIND], namespace=namespace),
            pods=self._list(PODS, RAY_POD_SELECTOR, namespace),
            workloads=self._list(self.workloads_resource(), ours, namespace),
            local_queues=self._list(LOCAL_QUEUES, namespace=namespace),
            webhook_configs=configs,
        ).outside(terminating)

    def plan(self, *, handback: bool) -> p.Plan:
        return p.make_plan(self.read(), handback=handback)

    # --- acting -------------------------------------------------------------------

    def run(self, *, handback: bool, act: bool) -> int:
        plan = self.plan(handback=handback)
        for line in ur.render(plan, act=act):
            self.out(line)
        if plan.blockers:
            return BLOCKED
        if not act or plan.nothing_to_do:
            return OK
        try:
            return self._act(plan)
        except Failed as exc:
            self.out(f"raykueue uninstall: {exc}")
        except ApiError as exc:
            # e.g. a write refused by a raykueue webhook while no replica answers it
            self.out(f"raykueue uninstall: the API server refused a step: {exc}")
        self.out("Run it again to carry on from here.")
        return FAILED

    def _act(self, plan: p.Plan) -> int:
        self._suspend_and_drain(plan)
        for plural, name in plan.webhooks:
            self._call(lambda plural=plural, name=name: self.rest.delete(
                WEBHOOK_RESOURCES[plural].path(name=name)), missing_ok=True)
            self.out(f"deleted {plural[:-1]} {name}")
        # Anything opted in between the first look and the webhooks' deletion
        # was gated by raykueue: suspend it too. Nothing can be gated any more.
        again = self.plan(handback=plan.handback)
        if again.blockers:
            for line in ur.render(again, act=True):
                self.out(line)
            self.out("raykueue uninstall: stopped: the blockers above appeared while it ran "
                     "(raykueue's webhooks are already deleted)")
            return BLOCKED
        self._suspend_and_drain(again)
        for pod in again.bare_pods:
            self._call(lambda pod=pod: self.rest.delete(PODS.path(pod.namespace, pod.name)), missing_ok=True)
            self.out(f"deleted pod {pod.namespace}/{pod.name} (raykueue's, owned by no Ray object)")
        self._delete_workloads()
        parked: list[p.Unit] = []
        for unit in again.units:
            if unit.handback is None or unit.handback.queue is None:
                parked.append(unit)
                continue
            self._hand_back(unit, unit.handback.queue)
        for unit in parked:
            if not unit.deleting:
                self.out(f"{unit.ref}: left suspended ({unit.handback_refusal})")
        self.out("raykueue uninstall: done. Now remove raykueue itself: kubectl delete -k manifests/ "
                 "--ignore-not-found (or: helm uninstall raykueue -n raykueue-system).")
        return OK

    def _suspend_and_drain(self, plan: p.Plan, namespace: str | None = None) -> None:
        units = [u for u in plan.units if not u.blocker]
        suspending = [u for u in units if u.needs_suspend]
        waiting = [u for u in units if u.pods]
        if not (suspending or waiting):
            return
        for unit in suspending:
            resource = RAY[unit.kind]
            self._call(lambda unit=unit, resource=resource: self.rest.json_patch(
                resource.path(unit.ref.namespace, unit.ref.name), up.suspend_patch(unit.kind, unit.obj)),
                missing_ok=True)
            self.out(f"suspended {unit.ref}")
        uids = {u.ref.uid for u in units}

        def left() -> list[str]:
            world = self.read(namespace)
            return sorted(f"{metadata(pod).get('namespace')}/{metadata(pod).get('name')}"
                          for uid, pods in p.unit_pods(world).items() if uid in uids for pod in pods)

        remaining = self._wait(left, "their pods to go")
        if remaining:
            raise Failed(f"timed out after {self.timeout:.0f}s waiting for these pods to go: "
                         + ", ".join(remaining))
        self.out(f"no pod of the {len(units)} suspended object(s) is left")

    def _delete_workloads(self) -> None:
        resource = self.workloads_resource()
        selector = f"{c.MANAGED_BY_LABEL}={c.MANAGED_BY_VALUE}"
        for wl in self._list(resource, selector):
            meta = metadata(wl)
            self._call(lambda meta=meta: self.rest.delete(
                resource.path(str(meta.get("namespace")), str(meta.get("name")))), missing_ok=True)

        def left() -> list[str]:
            return sorted(f"{metadata(w).get('namespace')}/{metadata(w).get('name')}"
                          for w in self._list(resource, selector))

        remaining = self._wait(left, "raykueue's Workloads to go")
        if remaining:
            raise Failed(f"timed out waiting for raykueue's Workloads to go: {', '.join(remaining)}")
        self.out("no raykueue Workload is left")

    def _hand_back(self, unit: p.Unit, queue: str) -> None:
        resource = RAY[unit.kind]
        path = resource.path(unit.ref.namespace, unit.ref.name)
        try:
            fresh = self.rest.get(path)
        except ApiError as exc:
            if exc.is_not_found:
                return
            raise
        for ops in up.handback_patches(unit.kind, fresh, queue):
            try:
                self._call(lambda ops=ops: self.rest.json_patch(path, ops))
            except ApiError as exc:
                # Kueue's validation refuses (e.g. an autoscaled cluster with its elastic
                # jobs off): the object stays suspended and the reason is shown.
                self.out(f"{unit.ref}: not handed back, left suspended: {exc.message or exc}")
                return
        self.out(f"handed back {unit.ref} to Kueue: LocalQueue {queue}; Kueue resumes it once it "
                 "admits it")

    # --- one object, by its owner ------------------------------------------------------

    def hand_back_one(self, kind: str, namespace: str, name: str, *, act: bool) -> int:
        """`raykueue handback`: one opted-in object to Kueue, with raykueue still installed.

        The same steps as the uninstall's for one object (suspend, wait for its pods and
        their Workloads to go, hand back), with the owner's own credentials: it reads and
        writes only that namespace. The owner asked for it by name, so an object they
        had suspended themselves is handed back too.
        """
        world = self.read(namespace)
        obj = world.find(kind, namespace, name)
        ref = uw.Ref(kind, namespace, name)
        if obj is None:
            self.out(f"raykueue handback: {ref} not found")
            return FAILED
        unit = next((u for u in p.make_plan(world, handback=True).units
                     if u.ref.uid == metadata(obj).get("uid")), None)
        if unit is None:
            self.out(f"raykueue handback: {ref} is not raykueue's (not opted in, or Kueue's already): "
                     "nothing to hand back")
            return OK
        if unit.blocker:
            self.out(f"raykueue handback: {ref}: {unit.blocker}")
            return BLOCKED
        back = unit.handback or p.queue_for(world, kind, obj)
        if back.queue is None:
            self.out(f"raykueue handback: {ref}: {back.source}")
            return FAILED
        self.out(f"raykueue handback: {'acting' if act else 'the plan (a dry run; --yes acts on it)'}")
        self.out(f"1. Suspend {ref} ({unit.pods} pods, {unit.gated} gated): KubeRay deletes its pods, "
                 "their Workloads go with them")
        self.out(f"2. Hand it to Kueue: LocalQueue {back.queue} (from {back.source}); Kueue admits it "
                 "whole and resumes it")
        for note in back.notes:
            self.out(f"   {note}")
        if not act:
            return OK
        try:
            self._suspend_and_drain(p.Plan(units=(unit,)), namespace)
            gone = {str(metadata(pod).get("uid")) for pod in p.unit_pods(world).get(unit.ref.uid, [])}

            def workloads_left() -> list[str]:
                return [str(metadata(wl).get("name")) for wl in self.read(namespace).workloads
                        if w.pod_uid_of(wl) in gone]

            left = self._wait(workloads_left, "their Workloads to go")
            if left:
                raise Failed(f"timed out waiting for these Workloads to go: {', '.join(left)}")
            self._hand_back(unit, back.queue)
        except Failed as exc:
            self.out(f"raykueue handback: {exc}")
            return FAILED
        except ApiError as exc:
            self.out(f"raykueue handback: the API server refused a step: {exc}")
            return FAILED
        return OK

    # --- plumbing ---------------------------------------------------------------------

    def _wait(self, left: Callable[[], list[str]], what: str) -> list[str]:
        deadline = time.monotonic() + self.timeout
        remaining = left()
        shown = -1
        while remaining and time.monotonic() < deadline:
            if len(remaining) != shown:
                self.out(f"waiting for {what}: {len(remaining)} left")
                shown = len(remaining)
            time.sleep(self.poll)
            remaining = left()
        return remaining

    def _call(self, fn: Callable[[], object], *, missing_ok: bool = False) -> None:
        """One write, retried for RETRY_SECONDS while the server answers with a passing error."""
        deadline = time.monotonic() + RETRY_SECONDS
        while True:
            try:
                fn()
                return
            except ApiError as exc:
                if missing_ok and exc.is_not_found:
                    return
                if not exc.is_transient or time.monotonic() >= deadline:
                    raise
            time.sleep(self.poll)
