"""An opted-in RayService through KubeRay's updates and upgrades, under quota.

KubeRay (ray-operator v1.6 `rayservice_controller.go`) changes a RayService's
RayCluster in two ways:

- **in place** (`shouldUpdateCluster`, `modifyRayCluster`): when the cluster's
  `ray.io/kuberay-version` is not the operator's (every KubeRay upgrade), or when
  the RayService only appended worker groups. KubeRay then writes the cluster's
  whole spec, labels and annotations again from the RayService, whose templates
  carry no stamp (raykueue leaves a RayService's cluster spec as written, so its
  hash never changes because of raykueue): raykueue's first webhook is called on
  that update (its template lacks the stamp) and stamps it again, so the policy
  `raykueue-stamp` has nothing to refuse. While raykueue is down that update fails
  closed and KubeRay retries it until raykueue is back;
- **a new cluster** (zero-downtime upgrade, `shouldPrepareNewCluster`): any other
  change of `rayClusterConfig`. The pending cluster is stamped at creation, its
  pods gated and admitted one by one; KubeRay switches the Services to it once its
  head is ready and its Serve applications RUNNING, then deletes the old cluster
  (after `rayClusterDeletionDelaySeconds`), whose pods free their quota as they go.

Serve's dashboard API is `testkit.serve_standin.ServeStandin` (kwok runs no Ray),
reached through the stack's dashboard proxy as a real head would be. Every scenario
is watched whole: `Invariants` and `QuotaInvariants` (nothing ungated without an
admitted Workload, no running pod uncovered, usage never above nominal), the
Events (KubeRay never failed to update or create a cluster) and the API server's
refusal counters for raykueue's webhooks and `raykueue-stamp`.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

from devstack.ray.dashboard_proxy import Routes, routes_dir
from raykueue.controller import workload as w
from raykueue.core import contract as c
from raykueue.kube.cache import DELETED, WatchCache
from raykueue.kube.resources import PODS, Resource
from raykueue.kube.rest import Rest
from testkit.e2e.controller import (  # noqa: F401 - fixtures
    CQS,
    RAYCLUSTERS,
    WORKLOADS,
    admin,
    controller,
    queue,
    raycluster,
    webhooks,
)
from testkit.e2e.kueue_shipped import RAYSERVICES
from testkit.invariants import Invariants
from testkit.pods import gated, role, running
from testkit.quota_invariants import QuotaInvariants
from testkit.serve_standin import ServeStandin
from testkit.watches import Watching

EVENTS = Resource("", "v1", "events")
SERVICES = Resource("", "v1", "services")
KUBERAY_VERSION = "ray.io/kuberay-version"
NUM_WORKER_GROUPS = "ray.io/num-worker-groups"
# KubeRay's Warning Events when a write of a RayService's cluster fails.
KUBERAY_FAILURES = ("FailedToUpdateRayCluster", "FailedToCreateRayCluster")
ADMISSION_REFUSAL = re.compile(r"admission webhook|ValidatingAdmissionPolicy|denied the request")
SERVE_CONFIG = "applications:\n  - name: app\n    import_path: app:deployment\n    route_prefix: /\n"


def rayservice(name: str, version: str = "1") -> dict[str, Any]:
    """One head and one worker of 1 CPU / 1Gi each; `version` in their env (a new cluster when changed)."""
    spec = raycluster("x", 1)["spec"]
    for template in (spec["headGroupSpec"]["template"], spec["workerGroupSpecs"][0]["template"]):
        template["spec"]["containers"][0]["env"] = [{"name": "APP_VERSION", "value": version}]
    return {"apiVersion": "ray.io/v1", "kind": "RayService",
            "metadata": {"name": name, "annotations": {c.STANDALONE_ANNOTATION: "true",
                                                       c.QUEUE_ANNOTATION: "team-a"}},
            "spec": {"serveConfigV2": SERVE_CONFIG, "rayClusterDeletionDelaySeconds": 1,
                     "rayClusterConfig": spec}}


def refusals(e2e_stack) -> dict[str, float]:
    """The API server's counts of Ray objects and pods that raykueue's webhooks or policies
    denied (a webhook that could not be called is not a denial: `error_type`)."""
    _, body = e2e_stack.api.request("GET", "/metrics")
    out: dict[str, float] = {}
    for line in body.decode().splitlines():
        series, _, value = line.rpartition(" ")
        if (series.startswith("apiserver_validating_admission_policy_check_total{")
                and re.search(r'policy="raykueue-(stamp|gated-at-creation)"', series)
                and 'enforcement_action="deny"' in series) or (
                series.startswith("apiserver_admission_webhook_rejection_count{")
                and 'error_type="no_error"' in series
                and re.search(r'name="(first-ray[a-z]+|last-ray-objects|mutate-pods)\.raykueue', series)):
            out[series] = float(value)
    return out


def first_webhook_calls(e2e_stack) -> float:
    """How often the API server called raykueue's first webhook for a RayCluster."""
    _, body = e2e_stack.api.request("GET", "/metrics")
    return sum(float(line.rpartition(" ")[2]) for line in body.decode().splitlines()
               if line.startswith("apiserver_admission_webhook_request_total{")
               and 'name="first-rayclusters.raykueue.io"' in line and 'operation="UPDATE"' in line)


def stamped(cluster: dict[str, Any]) -> list[bool]:
    spec = cluster["spec"]
    groups = spec.get("workerGroupSpecs") or []
    templates = [spec["headGroupSpec"]["template"]] + [g["template"] for g in groups]
    return [((t.get("metadata") or {}).get("labels") or {}).get(c.OPTED_IN_LABEL) == c.OPTED_IN_VALUE
            for t in templates]


def cpu(pod: dict[str, Any]) -> int:
    total = 0
    for container in pod["spec"]["containers"]:
        value = str(((container.get("resources") or {}).get("requests") or {}).get("cpu", "0"))
        total += int(value[:-1]) if value.endswith("m") else int(float(value) * 1000)
    return total


class Course(Watching):
    """What happened to the namespace's Ray pods and the RayService's Services, as it happened.

    Watch caches, so every change is seen: the peak CPU that Ray pods ran with at
    once (a running pod counts until it is deleted or stops), the moments the serve
    Service's selector changed cluster, and KubeRay's Warning Events.
    """

    def __init__(self, admin: Rest, ns: str, service: str):  # noqa: F811
        self.service = f"{service}-serve-svc"
        self.lock = threading.Lock()
        self.running: dict[str, tuple[str, int]] = {}  # pod uid -> (cluster, millicores)
        self.peak = 0
        self.ran: dict[str, set[str]] = {}  # cluster -> uids of its pods that ever ran
        self.started: dict[str, float] = {}  # pod uid -> when it was first seen running
        self.stopped: dict[str, float] = {}  # pod uid -> when it stopped running
        self.roles: dict[str, str] = {}  # pod uid -> head or worker
        self.standin: ServeStandin | None = None
        self.selectors: list[tuple[float, str]] = []  # (when, cluster the serve Service selects)
        self.failures: list[str] = []  # KubeRay's writes admission refused
        self.unanswered: list[str] = []  # KubeRay's writes no webhook answered (raykueue down)
        self.caches = [WatchCache(admin, PODS, namespace=ns), WatchCache(admin, SERVICES, namespace=ns),
                       WatchCache(admin, EVENTS, namespace=ns)]
        for cache, handler in zip(self.caches, (self._pod, self._service, self._event), strict=True):
            cache.add_handler(handler)

    def _pod(self, event: str, pod: dict[str, Any]) -> None:
        if role(pod) not in ("head", "worker"):
            return
        uid = pod["metadata"]["uid"]
        cluster = pod["metadata"]["labels"].get(c.CLUSTER_LABEL, "")
        with self.lock:
            self.roles[uid] = role(pod)
            if event != DELETED and running(pod):
                self.running[uid] = (cluster, cpu(pod))
                self.started.setdefault(uid, time.monotonic())
                self.ran.setdefault(cluster, set()).add(uid)
                self.peak = max(self.peak, sum(m for _, m in self.running.values()))
            elif self.running.pop(uid, None) is not None:
                self.stopped[uid] = time.monotonic()

    def _service(self, event: str, svc: dict[str, Any]) -> None:
        if svc["metadata"]["name"] != self.service or event == DELETED:
            return
        selected = (svc["spec"].get("selector") or {}).get(c.CLUSTER_LABEL, "")
        with self.lock:
            if not self.selectors or self.selectors[-1][1] != selected:
                self.selectors.append((time.monotonic(), selected))

    def _event(self, event: str, ev: dict[str, Any]) -> None:
        # KubeRay writes from its informer's copy: a write it retries because that copy
        # was stale ("the object has been modified", "already exists") was refused by
        # nobody. One that admission refused names the webhook or the policy.
        if ev.get("reason") in KUBERAY_FAILURES and ADMISSION_REFUSAL.search(ev.get("message") or ""):
            with self.lock:
                self.failures.append(f"{ev['reason']}: {ev.get('message')}")
        elif ev.get("reason") in KUBERAY_FAILURES and "failed calling webhook" in (ev.get("message") or ""):
            with self.lock:
                self.unanswered.append(f"{ev['reason']}: {ev.get('message')}")

    def serving(self) -> str:
        with self.lock:
            return self.selectors[-1][1] if self.selectors else ""

    def running_in(self, cluster: str) -> int:
        with self.lock:
            return sum(1 for name, _ in self.running.values() if name == cluster)


@contextlib.contextmanager
def watched(admin: Rest, e2e_stack, ns: str, service: str) -> Iterator[tuple[Course, QuotaInvariants]]:  # noqa: F811
    """The whole scenario under every watch; each is checked at the end."""
    cq = f"e2e-{ns}"
    refused_before = refusals(e2e_stack)
    with (Invariants(admin, ns) as inv,
          QuotaInvariants(admin, [ns], quota_namespaces=[ns], cluster_queues=[cq]) as quota,
          Course(admin, ns, service) as course,
          ServeStandin(admin, ns, Routes(routes_dir(e2e_stack.dir))) as standin):
        course.standin = standin
        yield course, quota
        quota.sweep()
    inv.assert_held()
    quota.raise_if_broken()
    assert not course.failures, f"KubeRay failed to write a cluster: {course.failures}"
    refused = {k: v - refused_before.get(k, 0.0) for k, v in refusals(e2e_stack).items()}
    assert not {k: v for k, v in refused.items() if v}, f"refused: {refused}"


def standin_order(course: Course) -> list[str]:
    """The clusters KubeRay deployed the Serve config to, each once, in order."""
    assert course.standin is not None
    return list(dict.fromkeys(course.standin.deployed_to()))


def status(admin: Rest, ns: str, name: str) -> dict[str, Any]:  # noqa: F811
    return admin.get(RAYSERVICES.path(ns, name)).get("status") or {}


def active(admin: Rest, ns: str, name: str) -> str:  # noqa: F811
    return (status(admin, ns, name).get("activeServiceStatus") or {}).get("rayClusterName") or ""


def pending(admin: Rest, ns: str, name: str) -> str:  # noqa: F811
    return (status(admin, ns, name).get("pendingServiceStatus") or {}).get("rayClusterName") or ""


def cluster_pods(admin: Rest, ns: str, cluster: str) -> list[dict[str, Any]]:  # noqa: F811
    return admin.get(PODS.path(ns), {"labelSelector": f"{c.CLUSTER_LABEL}={cluster}"})["items"]


def all_running(admin: Rest, ns: str, cluster: str, count: int) -> bool:  # noqa: F811
    found = [p for p in cluster_pods(admin, ns, cluster) if not p["metadata"].get("deletionTimestamp")]
    return len(found) == count and all(running(p) and not gated(p) for p in found)


def serving_cluster(admin: Rest, ns: str, name: str, course: Course, quota: QuotaInvariants) -> str:  # noqa: F811
    """The cluster the RayService serves from, once KubeRay made it active with both pods running."""
    def up() -> str | None:
        cluster = active(admin, ns, name)
        serves = cluster and course.serving() == cluster and all_running(admin, ns, cluster, 2)
        return cluster if serves else None
    return quota.wait(up, timeout=180, message=lambda: f"RayService {name} never served: "
                      f"{status(admin, ns, name)}; {describe_pods(admin, ns)}")


def describe_pods(admin: Rest, ns: str) -> str:  # noqa: F811
    return "pods " + ", ".join(
        f"{p['metadata']['name']} {p['status'].get('phase')}{' gated' if gated(p) else ''}"
        for p in admin.get(PODS.path(ns))["items"])


def test_kuberays_in_place_updates_keep_the_stamp_and_are_never_refused(
        e2e_stack, admin, controller, queue):  # noqa: F811
    ns = queue(cpu="4", memory="4Gi")
    with watched(admin, e2e_stack, ns, "svc") as (course, quota):
        admin.create(RAYSERVICES.path(ns), rayservice("svc"))
        cluster = serving_cluster(admin, ns, "svc", course, quota)
        rc = admin.get(RAYCLUSTERS.path(ns, cluster))
        assert stamped(rc) == [True, True]
        head_uid = next(p["metadata"]["uid"] for p in cluster_pods(admin, ns, cluster) if role(p) == "head")

        # 1. The user appends a worker group: KubeRay updates the cluster in place.
        calls = first_webhook_calls(e2e_stack)
        svc = admin.get(RAYSERVICES.path(ns, "svc"))
        group = {**svc["spec"]["rayClusterConfig"]["workerGroupSpecs"][0], "groupName": "extra"}
        admin.json_patch(RAYSERVICES.path(ns, "svc"), [
            {"op": "add", "path": "/spec/rayClusterConfig/workerGroupSpecs/-", "value": group}])

        def updated() -> dict[str, Any] | None:
            found = admin.get(RAYCLUSTERS.path(ns, cluster))
            return found if found["metadata"]["annotations"].get(NUM_WORKER_GROUPS) == "2" else None
        rc = quota.wait(updated, timeout=60, message="KubeRay never updated the cluster in place")
        assert stamped(rc) == [True, True, True]
        # KubeRay's update carried the RayService's templates, unstamped: raykueue's
        # first webhook was called for it and stamped them again.
        assert first_webhook_calls(e2e_stack) > calls
        quota.wait(lambda: all_running(admin, ns, cluster, 3), timeout=120,
                   message=lambda: f"the new group's worker never ran: {cluster_pods(admin, ns, cluster)}")
        extra = [p for p in cluster_pods(admin, ns, cluster)
                 if p["metadata"]["labels"].get(c.GROUP_LABEL) == "extra"]
        assert len(extra) == 1 and extra[0]["metadata"]["labels"][c.OPTED_IN_LABEL] == c.OPTED_IN_VALUE
        wl = admin.get(WORKLOADS.path(ns, w.workload_name(extra[0])))
        assert w.is_ours(wl) and w.is_admitted(wl)

        # 2. A KubeRay upgrade: a cluster made by another operator version is updated in place.
        calls = first_webhook_calls(e2e_stack)
        version = rc["metadata"]["annotations"][KUBERAY_VERSION]
        admin.json_patch(RAYCLUSTERS.path(ns, cluster), [
            {"op": "replace", "path": f"/metadata/annotations/{KUBERAY_VERSION.replace('/', '~1')}",
             "value": "v0.0.0-before"}])
        rc = quota.wait(lambda: (found := admin.get(RAYCLUSTERS.path(ns, cluster)))["metadata"][
            "annotations"].get(KUBERAY_VERSION) == version and found, timeout=60,
            message="KubeRay never updated the other version's cluster in place")
        assert stamped(rc) == [True, True, True]
        assert first_webhook_calls(e2e_stack) > calls
        # Nothing was recreated: the same head serves, the same cluster is active.
        assert active(admin, ns, "svc") == cluster and not pending(admin, ns, "svc")
        assert head_uid in {p["metadata"]["uid"] for p in cluster_pods(admin, ns, cluster)}
        assert course.serving() == cluster
        delete_and_wait(admin, ns, "svc", quota)
    assert standin_order(course) == [cluster]


def test_kuberays_in_place_update_waits_while_raykueue_is_down_and_goes_through_once_it_is_back(
        e2e_stack, admin, controller, webhooks, queue):  # noqa: F811
    """The first stage fails closed: KubeRay's update of the templates waits for it
    (KubeRay retries); every write raykueue does not judge goes through meanwhile."""
    ns = queue(cpu="4", memory="4Gi")
    with watched(admin, e2e_stack, ns, "svc") as (course, quota):
        admin.create(RAYSERVICES.path(ns), rayservice("svc"))
        cluster = serving_cluster(admin, ns, "svc", course, quota)
        uids = {p["metadata"]["uid"] for p in cluster_pods(admin, ns, cluster)}
        version = admin.get(RAYCLUSTERS.path(ns, cluster))["metadata"]["annotations"][KUBERAY_VERSION]
        webhooks.stop()
        try:
            # Not raykueue's business (no opt-in, queue, template or suspend change): allowed.
            admin.json_patch(RAYCLUSTERS.path(ns, cluster), [
                {"op": "replace", "path": f"/metadata/annotations/{KUBERAY_VERSION.replace('/', '~1')}",
                 "value": "v0.0.0-before"}])
            quota.wait(lambda: course.unanswered, timeout=60,
                       message="KubeRay's in-place update never met the first stage")
            rc = admin.get(RAYCLUSTERS.path(ns, cluster))
            assert rc["metadata"]["annotations"][KUBERAY_VERSION] == "v0.0.0-before"
            assert stamped(rc) == [True, True]
        finally:
            webhooks.start()
        rc = quota.wait(lambda: (found := admin.get(RAYCLUSTERS.path(ns, cluster)))["metadata"][
            "annotations"].get(KUBERAY_VERSION) == version and found, timeout=60,
            message="KubeRay's in-place update never went through once raykueue was back")
        assert stamped(rc) == [True, True]
        assert {p["metadata"]["uid"] for p in cluster_pods(admin, ns, cluster)} == uids
        assert active(admin, ns, "svc") == cluster and course.serving() == cluster
        delete_and_wait(admin, ns, "svc", quota)


def test_a_zero_downtime_upgrade_waits_for_quota_then_moves_pod_by_pod(
        e2e_stack, admin, controller, queue):  # noqa: F811
    """Quota for one cluster: the new cluster waits and the old one serves; with room
    for one more pod, the new head runs beside the old cluster, takes the traffic, and
    its worker is admitted on the quota the old cluster frees."""
    ns = queue(cpu="2", memory="4Gi")
    with watched(admin, e2e_stack, ns, "svc") as (course, quota):
        admin.create(RAYSERVICES.path(ns), rayservice("svc"))
        old = serving_cluster(admin, ns, "svc", course, quota)
        new = upgrade(admin, ns, "svc", old, quota)
        # No room: the new head is gated behind a Workload Kueue keeps pending.
        quota.wait(lambda: head_waits(admin, ns, new), timeout=60,
                   message=lambda: f"the new head is not waiting for quota: {describe_pods(admin, ns)}")

        # One more pod's room: the new head runs beside the old cluster.
        raised = time.monotonic()
        admin.json_patch(CQS.path(None, f"e2e-{ns}"), [
            {"op": "replace", "path": "/spec/resourceGroups/0/flavors/0/resources/0/nominalQuota",
             "value": "3"}])
        quota.wait(lambda: active(admin, ns, "svc") == new and course.serving() == new, timeout=180,
                   message=lambda: f"KubeRay never switched to {new}: {status(admin, ns, 'svc')}")
        quota.wait(lambda: not cluster_pods(admin, ns, old) and all_running(admin, ns, new, 2), timeout=180,
                   message=lambda: f"the old cluster's quota never went to the new worker: "
                   f"{describe_pods(admin, ns)}")
        delete_and_wait(admin, ns, "svc", quota)

    with course.lock:
        (_, first), (switched, second) = course.selectors  # the serve Service moved once
        old_stops = [course.stopped[uid] for uid in course.ran[old]]
        new_worker = next(uid for uid in course.ran[new] if course.roles[uid] == "worker")
        peak = course.peak
        started = course.started[new_worker]
    assert (first, second) == (old, new)
    # The new cluster waited while quota was short, and the old one served until the switch.
    assert switched > raised and min(old_stops) > switched
    # Together they never ran on more than the quota Kueue admitted: old cluster + new head.
    assert peak == 3000
    # The new worker ran on quota the old cluster freed.
    assert started > min(old_stops)
    assert standin_order(course) == [old, new]


def test_a_zero_downtime_upgrade_with_preemption_takes_the_serving_clusters_workers_never_its_head(
        e2e_stack, admin, controller, queue):  # noqa: F811
    """Quota for one cluster and preemption within the ClusterQueue: the new head
    (raykueue's head class, above workers) preempts the old cluster's worker; the old
    head keeps serving until KubeRay switches to the new cluster, whose worker then
    runs on the quota the old head frees."""
    ns = queue(cpu="2", memory="4Gi", preemption=True)
    with watched(admin, e2e_stack, ns, "svc") as (course, quota):
        admin.create(RAYSERVICES.path(ns), rayservice("svc"))
        old = serving_cluster(admin, ns, "svc", course, quota)
        new = upgrade(admin, ns, "svc", old, quota)
        quota.wait(lambda: active(admin, ns, "svc") == new and course.serving() == new, timeout=180,
                   message=lambda: f"KubeRay never switched to {new}: {status(admin, ns, 'svc')}")
        quota.wait(lambda: not cluster_pods(admin, ns, old) and all_running(admin, ns, new, 2), timeout=180,
                   message=lambda: f"the new worker never ran: {describe_pods(admin, ns)}")
        delete_and_wait(admin, ns, "svc", quota)

    with course.lock:
        (_, first), (switched, second) = course.selectors
        by_role = {(cluster, course.roles[uid]): uid for cluster in (old, new) for uid in course.ran[cluster]}
        old_head, old_worker = by_role[(old, "head")], by_role[(old, "worker")]
        new_head, new_worker = by_role[(new, "head")], by_role[(new, "worker")]
        stopped, started, peak = dict(course.stopped), dict(course.started), course.peak
    assert (first, second) == (old, new)
    # The new head ran on the old worker's quota; the old head served until the switch.
    assert stopped[old_worker] < started[new_head] < switched < stopped[old_head]
    assert started[new_worker] > stopped[old_head]
    assert peak == 2000
    assert standin_order(course) == [old, new]


def upgrade(admin: Rest, ns: str, name: str, old: str, quota: QuotaInvariants) -> str:  # noqa: F811
    """A change KubeRay makes a new cluster for (the containers' env): the pending cluster's name."""
    admin.json_patch(RAYSERVICES.path(ns, name), [
        {"op": "replace", "value": "2",
         "path": f"/spec/rayClusterConfig/{where}/template/spec/containers/0/env/0/value"}
        for where in ("headGroupSpec", "workerGroupSpecs/0")])
    new = quota.wait(lambda: pending(admin, ns, name), timeout=60,
                     message="KubeRay never prepared a pending cluster")
    assert new != old
    quota.wait(lambda: stamped(admin.get(RAYCLUSTERS.path(ns, new))) == [True, True], timeout=10,
               message="the pending cluster is not stamped")
    return new


def head_waits(admin: Rest, ns: str, cluster: str) -> bool:  # noqa: F811
    """The cluster's head is gated behind a Workload Kueue keeps pending for want of quota."""
    heads = [p for p in cluster_pods(admin, ns, cluster) if role(p) == "head"]
    if not heads or not gated(heads[0]):
        return False
    cond = w.condition(admin.get(WORKLOADS.path(ns, w.workload_name(heads[0]))), w.QUOTA_RESERVED)
    return bool(cond and cond["status"] == "False" and cond["reason"] == "Pending")


def delete_and_wait(admin: Rest, ns: str, name: str, quota: QuotaInvariants) -> None:  # noqa: F811
    admin.delete(RAYSERVICES.path(ns, name))
    quota.wait(lambda: not [p for p in admin.get(PODS.path(ns))["items"] if role(p)]
               and not [x for x in admin.get(WORKLOADS.path(ns))["items"] if w.is_ours(x)],
               timeout=120, message=f"RayService {name}'s pods and Workloads never went")
