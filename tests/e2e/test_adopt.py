"""Adopt, don't kill (issue 28): opted-in clusters raykueue finds running without it.

Real stack with Kueue as shipped (its pod and Ray webhooks registered), KubeRay
and kwok. raykueue (webhooks and controller in one `raykueue serve`) starts only
after the cluster runs, or comes back after an admin deleted its admission
configurations (break-glass). Each scenario is watched from before the cluster
exists to its end: every pod deletion in the namespace is recorded with what the
pod said of it, and there must be none; `Invariants` watches Kueue's side.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import devstack
from raykueue.controller import adopt
from raykueue.controller import workload as w
from raykueue.core import contract as c
from raykueue.kube import resources as r
from raykueue.kube.cache import WatchCache
from raykueue.kube.rest import ApiError, Rest
from testkit.e2e.controller import (  # noqa: F401 - fixtures
    ADMIN,
    RAYCLUSTERS,
    WORKLOADS,
    admin,
    queue,
    raycluster,
)
from testkit.invariants import Invariants
from testkit.pods import role, running
from testkit.reads import get_or_none
from testkit.servers import RaykueueServer
from testkit.stackfixtures import keep_logs_if_failed, new_namespace  # noqa: F401 - fixture
from testkit.waiting import wait_for
from testkit.watches import Watching

EXEMPT_NAMESPACE = c.DEFAULT_NAMESPACE  # the webhooks' namespaceSelector leaves it out


class PodDeletions(Watching):
    """Every pod of a namespace that starts going or goes, from the watch, with the
    reason its last state gives (raykueue's eviction condition, or none)."""

    def __init__(self, api: Rest, ns: str) -> None:
        self.seen: list[str] = []
        self._lock = threading.Lock()
        self._cache = WatchCache(api, r.PODS, namespace=ns)
        self._cache.add_handler(self._pod)
        self.caches = (self._cache,)

    def _pod(self, event: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        if event != "DELETED" and not meta.get("deletionTimestamp"):
            return
        why = [f"{x['type']}: {x.get('reason')}: {x.get('message')}"
               for x in (pod.get("status") or {}).get("conditions") or []
               if x.get("type") == c.EVICTED_CONDITION]
        with self._lock:
            self.seen.append(f"{event} {meta['name']} ({meta['uid']}) {why or 'no reason recorded'}")

    def assert_none(self) -> None:
        with self._lock:
            assert not self.seen, "pods deleted:\n" + "\n".join(self.seen)


@contextlib.contextmanager
def watched(api: Rest, ns: str) -> Iterator[PodDeletions]:
    with Invariants(api, ns) as inv, PodDeletions(api, ns) as deletions:
        yield deletions
    deletions.assert_none()
    inv.assert_held()


@pytest.fixture
def raykueue_later(request, e2e_stack, tmp_path_factory) -> Iterator[Callable[[], RaykueueServer]]:
    """raykueue_later() starts webhooks and controller in one process, registered;
    stopped and unregistered after the test."""
    made: list[RaykueueServer] = []

    def start() -> RaykueueServer:
        server = RaykueueServer(
            e2e_stack, tmp_path_factory.mktemp("raykueue-adopt"),
            args=["--controller-identity", ADMIN,
                  "--controller-identity", c.DEFAULT_CONTROLLER_IDENTITY],
            env={"RAYKUEUE_LEADER_ELECTION": "false", "RAYKUEUE_ADOPT_INTERVAL_SECONDS": "3"})
        made.append(server)
        return server.start()

    yield start
    for server in made:
        keep_logs_if_failed(request, e2e_stack, raykueue=server)
        server.close()


def opted_in_before_raykueue(name: str, workers: int) -> dict[str, Any]:
    """Opted in with the queue where raykueue keeps it (not Kueue's label, with which
    Kueue would admit the cluster whole), and nothing of raykueue's written yet."""
    obj = raycluster(name, workers)
    obj["metadata"]["labels"].pop(c.QUEUE_LABEL)
    obj["metadata"]["annotations"][c.QUEUE_ANNOTATION] = "team-a"
    return obj


def cluster_pods(api: Rest, ns: str, name: str) -> list[dict[str, Any]]:
    return api.get(r.PODS.path(ns), {"labelSelector": f"{c.CLUSTER_LABEL}={name}"})["items"]


def all_running(api: Rest, ns: str, name: str, count: int) -> Callable[[], list[dict[str, Any]] | None]:
    def check() -> list[dict[str, Any]] | None:
        pods = [p for p in cluster_pods(api, ns, name) if not p["metadata"].get("deletionTimestamp")]
        return pods if len(pods) == count and all(running(p) for p in pods) else None
    return check


def adopted(api: Rest, ns: str, name: str, count: int) -> Callable[[], dict[str, Any] | None]:
    """Every pod raykueue's, each with one admitted Workload of its own."""
    def check() -> dict[str, Any] | None:
        pods = cluster_pods(api, ns, name)
        owned: dict[str, list[dict[str, Any]]] = {}
        for wl in api.get(WORKLOADS.path(ns))["items"]:
            if w.is_ours(wl) and not w.is_finished(wl):
                owned.setdefault(w.pod_uid_of(wl) or "", []).append(wl)
        if len(pods) != count:
            return None
        for pod in pods:
            mine = owned.get(pod["metadata"]["uid"], [])
            if (pod["metadata"]["labels"].get(c.MANAGED_BY_LABEL) != c.MANAGED_BY_VALUE
                    or len(mine) != 1 or not w.is_admitted(mine[0])):
                return None
        return {"pods": pods, "owned": owned}
    return check


def describe(api: Rest, ns: str, name: str) -> Callable[[], str]:
    def text() -> str:
        wls = {w.pod_uid_of(x): (x["metadata"]["name"], w.is_admitted(x))
               for x in api.get(WORKLOADS.path(ns))["items"]}
        return "\n".join(
            f"{p['metadata']['name']} {p['metadata']['uid']} running={running(p)} "
            f"managed={p['metadata']['labels'].get(c.MANAGED_BY_LABEL)} "
            f"workload={wls.get(p['metadata']['uid'])}" for p in cluster_pods(api, ns, name))
    return text


def assert_adopted_in_place(api: Rest, ns: str, name: str, before: list[dict[str, Any]],
                            stamped: bool = True) -> None:
    """The same pods (uids), head included, each with its admitted Workload, head first,
    in the queue and priority the webhook would have given; the templates stamped."""
    s = wait_for(adopted(api, ns, name, len(before)), timeout=120, message=describe(api, ns, name))
    assert {p["metadata"]["uid"] for p in s["pods"]} == {p["metadata"]["uid"] for p in before}
    head = next(p for p in s["pods"] if role(p) == c.ROLE_HEAD)
    (head_wl,) = s["owned"][head["metadata"]["uid"]]
    admitted_at = w.condition(head_wl, w.ADMITTED)["lastTransitionTime"]
    for pod in s["pods"]:
        (wl,) = s["owned"][pod["metadata"]["uid"]]
        notes = pod["metadata"]["annotations"]
        assert w.queue_name(wl) == notes[c.QUEUE_ANNOTATION] == "team-a"
        wanted = (c.DEFAULT_HEAD_PRIORITY_CLASS if role(pod) == c.ROLE_HEAD
                  else c.DEFAULT_WORKER_PRIORITY_CLASS)
        assert w.priority_class_name(wl) == notes[c.PRIORITY_CLASS_ANNOTATION] == wanted
        assert not pod["spec"].get("schedulingGates")
        if role(pod) == c.ROLE_WORKER:  # head first: no worker Workload before the head's admission
            assert wl["metadata"]["creationTimestamp"] >= admitted_at
    if stamped:
        found = wait_for(lambda: (x := api.get(RAYCLUSTERS.path(ns, name))) and not adopt.unstamped(x)
                         and x, timeout=60, message="the RayCluster's templates stamped")
        assert adopt.accounted(found)


def test_a_cluster_running_before_raykueue_is_adopted_not_restarted(admin, queue, raykueue_later):  # noqa: F811
    ns = queue(cpu="4", memory="4Gi")  # room for the head and both workers
    with watched(admin, ns):
        create_before_raykueue(admin, ns, opted_in_before_raykueue("rc", 2))
        before = wait_for(all_running(admin, ns, "rc", 3), timeout=120, message=describe(admin, ns, "rc"))
        assert not any(p["metadata"]["labels"].get(c.MANAGED_BY_LABEL) for p in before)
        assert not admin.get(WORKLOADS.path(ns))["items"]

        raykueue_later()
        assert_adopted_in_place(admin, ns, "rc", before)
        assert {adopt.ADOPTED, adopt.STAMPED} <= event_reasons(admin, ns)
        # Why the queue and priority class are annotations on an adopted pod: Kueue's
        # pod webhook refuses either label added to a running pod, even to an admin.
        head = next(p for p in before if role(p) == c.ROLE_HEAD)
        for label in (c.QUEUE_LABEL, c.PRIORITY_CLASS_LABEL):
            with pytest.raises(ApiError) as refused:
                admin.merge_patch(r.PODS.path(ns, head["metadata"]["name"]),
                                  {"metadata": {"labels": {label: "team-a"}}}, {"dryRun": "All"})
            assert "vpod.kb.io" in str(refused.value), str(refused.value)


def event_reasons(api: Rest, ns: str) -> set[str]:
    return {e.get("reason") for e in api.get(f"/apis/events.k8s.io/v1/namespaces/{ns}/events")["items"]}


def test_a_cluster_that_kuberay_would_recreate_is_adopted_and_told_not_stamped(
        admin, queue, raykueue_later):  # noqa: F811
    """upgradeStrategy Recreate: KubeRay (v1.6) deletes every pod when the spec hash
    changes, template labels included; raykueue leaves the templates alone, says what
    to change in a Warning Event on the RayCluster, and adopts the pods all the same."""
    ns = queue(cpu="4", memory="4Gi")
    with watched(admin, ns):
        body = opted_in_before_raykueue("rc", 2)
        body["spec"]["upgradeStrategy"] = {"type": adopt.RECREATE}
        create_before_raykueue(admin, ns, body)
        before = wait_for(all_running(admin, ns, "rc", 3), timeout=120, message=describe(admin, ns, "rc"))

        raykueue_later()
        assert_adopted_in_place(admin, ns, "rc", before, stamped=False)
        wait_for(lambda: adopt.NOT_STAMPED in event_reasons(admin, ns), timeout=30,
                 message="the NotStamped Event")
        assert adopt.unstamped(admin.get(RAYCLUSTERS.path(ns, "rc")))
        assert adopt.STAMPED not in event_reasons(admin, ns)


@pytest.fixture
def exempt_namespace(admin: Rest) -> Iterator[str]:  # noqa: F811
    made = False
    try:
        admin.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                            "metadata": {"name": EXEMPT_NAMESPACE}})
        made = True
    except ApiError as exc:
        if not exc.is_already_exists:
            raise
    wait_for(lambda: get_or_none(admin, f"/api/v1/namespaces/{EXEMPT_NAMESPACE}/serviceaccounts/default"),
             timeout=30, message=f"ServiceAccount {EXEMPT_NAMESPACE}/default")
    yield EXEMPT_NAMESPACE
    with contextlib.suppress(ApiError):
        admin.delete(RAYCLUSTERS.path(EXEMPT_NAMESPACE, "exempt"))
    wait_for(lambda: not cluster_pods(admin, EXEMPT_NAMESPACE, "exempt"), timeout=60,
             message="the exempt cluster's pods gone")
    if made:
        admin.delete(f"/api/v1/namespaces/{EXEMPT_NAMESPACE}")


def test_an_opted_in_cluster_in_an_exempt_namespace_is_left_alone(
        admin, queue, exempt_namespace, raykueue_later):  # noqa: F811
    ns = queue(cpu="4", memory="4Gi")
    with watched(admin, exempt_namespace), watched(admin, ns):
        create_before_raykueue(admin, exempt_namespace, opted_in_before_raykueue("exempt", 2))
        # A cluster raykueue does adopt, in a namespace its webhooks serve: once its
        # workers are adopted, at least two adoption passes (the head's, then the
        # workers') have looked at every opted-in RayCluster, the exempt one included.
        create_before_raykueue(admin, ns, opted_in_before_raykueue("control", 2))
        left = wait_for(all_running(admin, exempt_namespace, "exempt", 3), timeout=120,
                        message=describe(admin, exempt_namespace, "exempt"))
        control = wait_for(all_running(admin, ns, "control", 3), timeout=120,
                           message=describe(admin, ns, "control"))

        raykueue_later()
        assert_adopted_in_place(admin, ns, "control", control)

        after = cluster_pods(admin, exempt_namespace, "exempt")
        assert {p["metadata"]["uid"] for p in after} == {p["metadata"]["uid"] for p in left}
        for pod in after:  # no patch of ours
            assert c.MANAGED_BY_LABEL not in pod["metadata"]["labels"]
            assert c.QUEUE_ANNOTATION not in (pod["metadata"].get("annotations") or {})
        assert not admin.get(WORKLOADS.path(exempt_namespace))["items"]
        assert adopt.unstamped(admin.get(RAYCLUSTERS.path(exempt_namespace, "exempt")))


def create_before_raykueue(api: Rest, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    """Create the RayCluster once none of raykueue's admission runs: the API server drops
    deleted webhooks and policies (an earlier test's, or break-glass) through its own
    watch, a moment after the delete."""
    wait_for(lambda: _admitted_without_raykueue(api, ns, body), timeout=30,
             message="the API server to stop calling raykueue's admission")
    return api.create(RAYCLUSTERS.path(ns), body)


def _admitted_without_raykueue(api: Rest, ns: str, body: dict[str, Any]) -> bool:
    """A dry-run create of the cluster passes, unstamped: none of raykueue's admission ran."""
    try:
        made = api.create(RAYCLUSTERS.path(ns), body, {"dryRun": "All"})
    except ApiError as exc:
        if exc.status in (403, 422, 500):  # refused by the stamp policy, or a webhook down
            return False
        raise
    return adopt.unstamped(made)


def test_break_glass_then_return_adopts_the_pods_started_meanwhile(
        admin, e2e_stack, queue, raykueue_later):  # noqa: F811
    ns = queue(cpu="4", memory="4Gi")
    server = raykueue_later()
    with watched(admin, ns):
        # Break-glass: raykueue's admission is taken out of the API server's path
        # (its webhook configurations, and the policies that would refuse what
        # starts without them), as an admin does during an outage.
        server.unregister()
        created = create_before_raykueue(admin, ns, opted_in_before_raykueue("rc", 2))
        assert adopt.unstamped(created)  # no raykueue webhook saw it
        meanwhile = wait_for(all_running(admin, ns, "rc", 3), timeout=120,
                             message=describe(admin, ns, "rc"))
        assert not any(p["spec"].get("schedulingGates") for p in meanwhile)

        # raykueue's admission returns.
        devstack.register_webhooks(e2e_stack.kubeconfig, server.url, server.ca_pem)
        server.registered = True
        assert_adopted_in_place(admin, ns, "rc", meanwhile)
