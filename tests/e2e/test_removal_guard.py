"""Never destroy work (issue 28): raykueue removes a pod only on live proof.

Real stack, Kueue as shipped, KubeRay, kube-scheduler and kwok. The controller runs
in-process (as devstack's admin, which the webhook lets lift gates) so that a test
can make its Workload cache lie: the cache is the belief, the API server the truth.

- A Workload missing from the controller's cache but present in the API deletes
  nothing, for a plain cluster (the pass sees a running pod with no Workload) and for
  a gang (the pass sees released pods with no base).
- Pods past the gate whose own Workload stays not admitted past the grace
  (RAYKUEUE_OUTSIDE_QUOTA_GRACE_SECONDS) are removed, workers before the head, with an
  Event on each pod and on the RayCluster; under RAYKUEUE_ENFORCEMENT=report nothing
  is deleted and the Events say so.

Every pod deletion in the namespace is watched from the start of a scenario to its
end (`Deletions`), not sampled.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

from raykueue.controller import actions as a
from raykueue.controller import workload as w
from raykueue.controller.keys import GangKey, PodKey, QueueKey
from raykueue.core import contract as c
from raykueue.core.clock import timestamp
from raykueue.kube.cache import WatchCache
from raykueue.kube.resources import PODS
from raykueue.kube.rest import Rest
from testkit.e2e.controller import (  # noqa: F401 - fixtures
    RAYCLUSTERS,
    WORKLOADS,
    admin,
    describe,
    pods,
    queue,
    raycluster,
    settled,
    webhooks,
)
from testkit.e2e.gang import cluster as gang_cluster
from testkit.e2e.kueue_shipped import kueue_as_shipped, watched  # noqa: F401 - fixtures
from testkit.e2e.removal_guard import InProcess, QuotaWatch
from testkit.pods import gated, role, running
from testkit.stackfixtures import new_namespace  # noqa: F401 - fixture
from testkit.waiting import holds_for, wait_for
from testkit.watches import Watching

# --- a controller whose Workload cache lies -------------------------------------------------


class Deletions(Watching):
    """Every pod of the namespace that was ever being deleted or deleted, in order."""

    def __init__(self, api: Rest, ns: str) -> None:
        self.seen: list[tuple[float, str, str, str]] = []  # (time, name, uid, role)
        self._uids: set[str] = set()
        self._lock = threading.Lock()
        self.cache = WatchCache(api, PODS, namespace=ns)
        self.cache.add_handler(self._pod)
        self.caches = (self.cache,)

    def _pod(self, event: str, pod: dict[str, Any]) -> None:
        if event != "DELETED" and not pod["metadata"].get("deletionTimestamp"):
            return
        with self._lock:
            if pod["metadata"]["uid"] not in self._uids:
                self._uids.add(pod["metadata"]["uid"])
                self.seen.append((time.time(), pod["metadata"]["name"], pod["metadata"]["uid"],
                                  role(pod) or "?"))

    def of(self, uids: set[str]) -> list[tuple[float, str, str, str]]:
        with self._lock:
            return [x for x in self.seen if x[2] in uids]



def events(api: Rest, ns: str, reason: str, kind: str, name: str | None = None) -> list[dict]:
    items = api.get(f"/apis/events.k8s.io/v1/namespaces/{ns}/events")["items"]
    return [e for e in items if e.get("reason") == reason
            and e.get("regarding", {}).get("kind") == kind
            and (name is None or e.get("regarding", {}).get("name") == name)]


def poke(api: Rest, ns: str, names: list[str]) -> None:
    """A pod event for each: the controller passes over them again (on its lying cache)."""
    for name in names:
        api.merge_patch(PODS.path(ns, name),
                          {"metadata": {"annotations": {"e2e.raykueue.io/poke": str(time.time())}}})


def ungate(api: Rest, ns: str, pod: dict[str, Any]) -> None:
    """Past the gate without admission: what a lost gate looks like (the admin identity
    may lift gates, as the controller's)."""
    gates = [g["name"] for g in pod["spec"].get("schedulingGates") or []]
    index = gates.index(c.GATE)
    api.json_patch(PODS.path(ns, pod["metadata"]["name"]), [
        {"op": "test", "path": f"/spec/schedulingGates/{index}", "value": {"name": c.GATE}},
        {"op": "remove", "path": f"/spec/schedulingGates/{index}"}])


# --- a cache miss is no evidence ---------------------------------------------------------------


def test_a_workload_missing_from_the_cache_but_in_the_api_deletes_nothing(admin, webhooks, queue):  # noqa: F811
    ns = queue(cpu="6", memory="6Gi")
    hidden: set[str] = set()
    with watched(admin, ns), Deletions(admin, ns) as deletions, \
            InProcess(admin, ns, hidden) as ctl:
        admin.create(RAYCLUSTERS.path(ns), raycluster("plain", 2))
        admin.create(RAYCLUSTERS.path(ns), gang_cluster("gang", True))
        wait_for(settled(admin, ns, "plain", 2, 0), timeout=180,
                 message=describe(admin, ns, "plain"))
        wait_for(lambda: len([x for x in pods(admin, ns, "gang") if running(x)]) == 5,
                 timeout=180, message=describe(admin, ns, "gang"))
        before = {x["metadata"]["uid"]: x["metadata"]["name"]
                  for x in [*pods(admin, ns, "plain"), *pods(admin, ns, "gang")]}
        names = sorted(before.values())
        stored = admin.get(WORKLOADS.path(ns))["items"]
        assert len(stored) == 3 + 1  # three pods' own and the gang's base

        # The cache now lies: no Workload at all. The API server still has each one.
        hidden.update(x["metadata"]["name"] for x in stored)
        start = time.time()
        poke(admin, ns, names)

        def passed() -> list[tuple[QueueKey, list[a.Action], float]] | None:
            done = ctl.since(start)
            keys = {k.name for k, _, _ in done if isinstance(k, PodKey)}
            gang_passed = any(k == GangKey(ns, "gang") for k, _, _ in done)
            return done if set(names) <= keys and gang_passed else None

        done = wait_for(passed, timeout=60, message="a pass over every pod and the gang on the lie")
        # The plain cluster's passes decided on the lie (a running pod with no Workload);
        # whatever they proposed, nothing was deleted, and a proposal said why it was kept.
        plain = {x["metadata"]["name"] for x in pods(admin, ns, "plain")}
        acted = {k.name for k, actions, _ in done if isinstance(k, PodKey) and k.name in plain
                 and any(isinstance(x, (a.EvictPod, a.CreateWorkload)) for x in actions)}
        assert acted == plain, f"the passes did not decide on the lie: {done}"
        proposed = {k.name for k, actions, _ in done if isinstance(k, PodKey)
                    and any(isinstance(x, a.EvictPod) for x in actions)}
        print(f"\n[cache lies] removals proposed on the lie and kept: {sorted(proposed)}")
        for name in proposed:
            wait_for(lambda name=name: events(admin, ns, "RemovalNotProven", "Pod", name),
                     timeout=30, message=f"RemovalNotProven on {name}")
        if proposed:
            assert events(admin, ns, "RemovalNotProven", "RayCluster", "plain")
        # The gang's pass read its base live: it proposed nothing.
        gang_actions = [x for k, actions, _ in done if k == GangKey(ns, "gang") for x in actions]
        assert not [x for x in gang_actions if isinstance(x, (a.EvictPod, a.CreateWorkload))], \
            gang_actions
        # Over the whole scenario: no pod was ever deleted, every pod is the same one.
        assert deletions.seen == []
        after = {x["metadata"]["uid"] for x in [*pods(admin, ns, "plain"), *pods(admin, ns, "gang")]}
        assert after == set(before)
        assert all(w.is_admitted(x) for x in admin.get(WORKLOADS.path(ns))["items"])


# --- outside quota: removed on proof, workers first; or only reported -------------------------


GRACE = 5.0


@contextlib.contextmanager
def outside_quota(api: Rest, ns: str, ctl_config: dict[str, Any], name: str
                  ) -> Iterator[tuple[Deletions, dict[str, dict[str, Any]], dict[str, float]]]:
    """A RayCluster (head + 2 workers) whose pods all have a pending Workload, then lose
    their gate: the deletions watched, the pods by uid, each Workload's creation time."""
    with watched(api, ns), Deletions(api, ns) as deletions, InProcess(api, ns, **ctl_config):
        api.create(RAYCLUSTERS.path(ns), raycluster(name, 2))

        def all_pending() -> tuple[list[dict[str, Any]], dict[str, float]] | None:
            found = [x for x in pods(api, ns, name) if gated(x)]
            made = {w.pod_uid_of(x) or "": timestamp(x["metadata"]["creationTimestamp"]) or 0.0
                    for x in api.get(WORKLOADS.path(ns))["items"] if not w.is_admitted(x)}
            ok = len(found) == 3 and all(x["metadata"]["uid"] in made for x in found)
            return (found, made) if ok else None

        found, made = wait_for(all_pending, timeout=120, message=describe(api, ns, name))
        for pod in found:
            ungate(api, ns, pod)
        yield deletions, {x["metadata"]["uid"]: x for x in found}, made


def test_pods_outside_quota_past_the_grace_go_workers_first_with_events(admin, webhooks, queue):  # noqa: F811
    ns = queue(cpu="0", memory="0")  # Kueue admits nothing
    config = {"head_first": False, "outside_quota_grace_seconds": GRACE}
    with outside_quota(admin, ns, config, "outside") as (deletions, original, made):
        wait_for(lambda: len(deletions.of(set(original))) == 3, timeout=90,
                 message=lambda: f"removals so far: {deletions.of(set(original))}")
        gone = deletions.of(set(original))
        assert [r for _, _, _, r in gone] == ["worker", "worker", "head"], gone
        for when, pod_name, uid, _ in gone:
            # Not before the grace (the API server's stamps are whole seconds).
            assert when >= made[uid] + GRACE - 1, (pod_name, when - made[uid])
            notes = [e["note"] for e in events(admin, ns, "Evicted", "Pod", pod_name)]
            assert notes and all("OutsideQuota" in n and "has not been admitted since" in n
                                 for n in notes), notes
            on_cluster = [e["note"] for e in events(admin, ns, "Evicted", "RayCluster", "outside")
                          if e["note"].startswith(f"pod {pod_name}:")]
            assert on_cluster and all("OutsideQuota" in n for n in on_cluster), on_cluster
        # KubeRay made them again, gated: they queue, and nothing else goes.
        wait_for(lambda: len([x for x in pods(admin, ns, "outside")
                              if gated(x) and not x["metadata"].get("deletionTimestamp")]) == 3,
                 timeout=60, message=describe(admin, ns, "outside"))
        assert len(deletions.seen) == 3


def test_report_only_deletes_nothing_and_says_what_it_would_have_done(admin, webhooks, queue):  # noqa: F811
    ns = queue(cpu="0", memory="0")
    config = {"head_first": False, "outside_quota_grace_seconds": GRACE, "enforcement": "report"}
    with outside_quota(admin, ns, config, "reported") as (deletions, original, _):
        workers = [x["metadata"]["name"] for x in original.values() if role(x) == "worker"]
        for name in workers:
            wait_for(lambda name=name: events(admin, ns, "RemovalReportOnly", "Pod", name),
                     timeout=60, message=f"RemovalReportOnly on {name}")
        notes = [e["note"] for e in events(admin, ns, "RemovalReportOnly", "RayCluster", "reported")]
        assert len(notes) == 2 and all("RAYKUEUE_ENFORCEMENT=report" in n and "not deleted" in n
                                       for n in notes), notes
        # The decision was made (the Events) and no pod was deleted; the head, behind its
        # workers, is not even a candidate while they stay.
        assert deletions.seen == []
        assert {x["metadata"]["uid"] for x in pods(admin, ns, "reported")} == set(original)


# --- quota held until the pod has stopped -----------------------------------------------------

# The kubelet stand-in. A real kubelet keeps a deleted pod with a day-long
# terminationGracePeriodSeconds and a preStop sleep running, its containers reported
# `running`, until they stop; kwok's pod-delete stage deletes at once, so a finalizer of
# the test's holds the pod meanwhile, and the test reports the containers terminated as
# the kubelet would once they stop. (The node tier, a real kubelet, is not built here.)
HOLD = "e2e.raykueue.io/grace-period"
HELD_FOR = 15.0  # stands for the grace period: every moment of it is watched


def test_a_deleted_worker_that_still_runs_holds_its_quota_until_it_stops(admin, webhooks, queue):  # noqa: F811
    ns = queue(cpu="3", memory="3Gi")  # the head and two workers: no room for a fourth pod
    with watched(admin, ns), InProcess(admin, ns):
        admin.create(RAYCLUSTERS.path(ns), raycluster("grace", 2))
        s = wait_for(settled(admin, ns, "grace", 2, 0), timeout=180,
                     message=describe(admin, ns, "grace"))
        worker = next(x for x in s["pods"] if role(x) == "worker")
        name = worker["metadata"]["name"]
        old = w.workload_name(worker)
        admin.merge_patch(PODS.path(ns, name), {"metadata": {"finalizers": [HOLD]}})
        others = {x["metadata"]["name"] for x in admin.get(WORKLOADS.path(ns))["items"]}
        with QuotaWatch(admin, ns, old, others) as quota:
            admin.delete(PODS.path(ns, name))  # what the autoscaler does

            wait_for(lambda: admin.get(PODS.path(ns, name))["metadata"].get("deletionTimestamp"),
                     timeout=30, message="the worker being deleted")
            deleting = admin.get(PODS.path(ns, name))
            assert deleting["metadata"].get("deletionTimestamp")
            assert all("running" in x["state"] for x in deleting["status"]["containerStatuses"])
            # The grace period: every Workload change of it is checked by the watch.
            assert holds_for(lambda: not quota.violations, HELD_FOR), quota.violations
            assert w.is_admitted(admin.get(WORKLOADS.path(ns, old)))

            # The containers stop (the preStop hook and the process ended).
            quota.stop()
            admin.merge_patch(PODS.path(ns, name, "status"), {"status": {"containerStatuses": [
                {"name": x["name"], "image": x["image"], "imageID": "", "ready": False,
                 "restartCount": 0, "state": {"terminated": {
                     "exitCode": 0, "reason": "Completed", "startedAt": x["state"]["running"]["startedAt"],
                     "finishedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}}}
                for x in deleting["status"]["containerStatuses"]]}})
            wait_for(lambda: quota.old_gone_at is not None, timeout=30,
                     message="the old Workload released once its containers stopped")
            assert quota.stopped_at is not None and quota.old_gone_at is not None
            released_after = quota.old_gone_at - quota.stopped_at
            print(f"\n[quota held] released {released_after:.2f}s after the containers stopped")
            assert released_after < 5, released_after
            assert quota.violations == []
            # The pod goes (the kubelet's final delete); KubeRay's replacement takes the
            # quota: admitted, past its gate.
            admin.merge_patch(PODS.path(ns, name), {"metadata": {"finalizers": None}})
            wait_for(settled(admin, ns, "grace", 2, 0), timeout=120,
                     message=describe(admin, ns, "grace"))
