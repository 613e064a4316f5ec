"""The Workload lifecycle end to end: real KubeRay, Kueue, kube-scheduler, kwok.

KubeRay creates the pods, raykueue's webhook gates them, raykueue's controller
(in `raykueue serve`) makes their Workloads, real Kueue admits or preempts, and
kube-scheduler binds the ungated pods to kwok's fake nodes, where they run.
Each test gets its own namespace, ResourceFlavor (placing pods on the kwok
nodes through nodeLabels), ClusterQueue and LocalQueue `team-a`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from raykueue.controller import workload as w
from raykueue.core import contract as c
from raykueue.kube.resources import PODS, crd
from raykueue.kube.rest import ApiError, Rest
from testkit.pods import gated, role, running
from testkit.servers import RaykueueServer
from testkit.stackfixtures import keep_logs_if_failed, new_namespace  # noqa: F401 - fixture
from testkit.waiting import wait_for

KUEUE = "kueue.x-k8s.io"
WORKLOADS = crd(KUEUE, "v1beta2", "workloads")
CQS = crd(KUEUE, "v1beta2", "clusterqueues", namespaced=False)
LQS = crd(KUEUE, "v1beta2", "localqueues")
FLAVORS = crd(KUEUE, "v1beta2", "resourceflavors", namespaced=False)
WPCS = crd(KUEUE, "v1beta2", "workloadpriorityclasses", namespaced=False)
RAYCLUSTERS = crd("ray.io", "v1", "rayclusters")
ADMIN = "raykueue-admin"  # the CN of devstack's admin certificate


# --- fixtures --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def admin(e2e_stack, k8s) -> Rest:
    return Rest(k8s)


@pytest.fixture(scope="module")
def webhooks(e2e_stack, tmp_path_factory) -> Iterator[RaykueueServer]:
    """The webhooks alone; the controller runs in a server of its own so a
    test can kill it without taking admission down."""
    server = RaykueueServer(e2e_stack, tmp_path_factory.mktemp("raykueue-webhooks"),
                            args=["--no-controller", "--controller-identity", ADMIN,
                                  "--controller-identity", c.DEFAULT_CONTROLLER_IDENTITY])
    server.start()
    yield server
    server.close()


@pytest.fixture
def controller(request, e2e_stack, webhooks, tmp_path_factory) -> Iterator[RaykueueServer]:
    # The controller runs as devstack's admin, which the webhook lets lift gates.
    server = RaykueueServer(e2e_stack, tmp_path_factory.mktemp("raykueue-controller"),
                            register=False, env={"RAYKUEUE_LEADER_ELECTION": "false"})
    server.start()
    yield server
    server.stop()
    keep_logs_if_failed(request, e2e_stack, controller=server, webhooks=webhooks)


@pytest.fixture
def queue(admin: Rest, new_namespace) -> Iterator[Callable[..., str]]:  # noqa: F811
    """queue(cpu, memory, preemption=False, local_queue="team-a") -> namespace with that LocalQueue."""
    made: list[tuple[str, str]] = []

    def make(cpu: str, memory: str, preemption: bool = False, local_queue: str = "team-a") -> str:
        ns = new_namespace("e2e-ctl")
        name = f"e2e-{ns}"
        admin.create(FLAVORS.path(), {
            "apiVersion": FLAVORS.api_version, "kind": "ResourceFlavor",
            "metadata": {"name": name}, "spec": {"nodeLabels": {"type": "kwok"}}})
        spec: dict[str, Any] = {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
            "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
                "name": name, "resources": [{"name": "cpu", "nominalQuota": cpu},
                                            {"name": "memory", "nominalQuota": memory}]}]}],
        }
        if preemption:
            spec["preemption"] = {"withinClusterQueue": "LowerPriority"}
        admin.create(CQS.path(), {"apiVersion": CQS.api_version, "kind": "ClusterQueue",
                                  "metadata": {"name": name}, "spec": spec})
        admin.create(LQS.path(ns), {"apiVersion": LQS.api_version, "kind": "LocalQueue",
                                    "metadata": {"name": local_queue},
                                    "spec": {"clusterQueue": name}})
        made.append((ns, local_queue))
        return ns

    yield make
    for ns, local_queue in made:
        name = f"e2e-{ns}"
        for path in (RAYCLUSTERS.path(ns), WORKLOADS.path(ns)):
            with contextlib.suppress(ApiError):
                admin.request("DELETE", path)
        for path in (LQS.path(ns, local_queue), CQS.path(None, name), FLAVORS.path(None, name)):
            with contextlib.suppress(ApiError):
                admin.delete(path)


# --- helpers ---------------------------------------------------------------------------


def raycluster(name: str, workers: int, cpu: str = "1", memory: str = "1Gi") -> dict[str, Any]:
    def container(role: str) -> dict[str, Any]:
        return {"name": f"ray-{role}", "image": "rayproject/ray:2.46.0",
                "resources": {"requests": {"cpu": cpu, "memory": memory},
                              "limits": {"cpu": cpu, "memory": memory}}}

    return {
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": name, "labels": {c.QUEUE_LABEL: "team-a"},
                     "annotations": {c.STANDALONE_ANNOTATION: "true"}},
        "spec": {
            "headGroupSpec": {"rayStartParams": {},
                              "template": {"spec": {"containers": [container("head")]}}},
            "workerGroupSpecs": [{
                "groupName": "cpu", "replicas": workers, "minReplicas": 0, "maxReplicas": 100,
                "rayStartParams": {},
                "template": {"spec": {"containers": [container("worker")]}},
            }],
        },
    }


def pods(admin: Rest, ns: str, cluster: str) -> list[dict[str, Any]]:
    return admin.get(PODS.path(ns), {"labelSelector": f"{c.CLUSTER_LABEL}={cluster}"})["items"]


def workloads(admin: Rest, ns: str) -> list[dict[str, Any]]:
    return admin.get(WORKLOADS.path(ns))["items"]


def live_workloads(admin: Rest, ns: str) -> list[dict[str, Any]]:
    return [x for x in workloads(admin, ns) if not w.is_finished(x)
            and not x["metadata"].get("deletionTimestamp")]


def by_pod(admin: Rest, ns: str) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for wl in live_workloads(admin, ns):
        out.setdefault(w.pod_uid_of(wl) or "", []).append(wl)
    return out


def state(admin: Rest, ns: str, cluster: str) -> dict[str, Any]:
    """Running and gated pods by role, and how many live Workloads each pod has."""
    everything = [p for p in pods(admin, ns, cluster) if not p["metadata"].get("deletionTimestamp")]
    owned = by_pod(admin, ns)
    return {
        "running": sorted(p["metadata"]["name"] for p in everything if running(p)),
        "head_running": any(running(p) for p in everything if role(p) == "head"),
        "workers_running": sum(1 for p in everything if role(p) == "worker" and running(p)),
        "workers_gated": sum(1 for p in everything if role(p) == "worker" and gated(p)),
        "counts": {p["metadata"]["name"]: len(owned.get(p["metadata"]["uid"], []))
                   for p in everything},
        "pods": everything,
        "owned": owned,
    }


def settled(admin: Rest, ns: str, cluster: str, workers_running: int, workers_gated: int
            ) -> Callable[[], dict[str, Any] | None]:
    def check() -> dict[str, Any] | None:
        s = state(admin, ns, cluster)
        ok = (s["head_running"] and s["workers_running"] == workers_running
              and s["workers_gated"] == workers_gated
              and all(n == 1 for n in s["counts"].values()))
        return s if ok else None
    return check


def describe(admin: Rest, ns: str, cluster: str) -> Callable[[], str]:
    def text() -> str:
        s = state(admin, ns, cluster)
        return json.dumps({k: s[k] for k in ("running", "workers_running", "workers_gated",
                                             "counts")}, indent=1)
    return text


def cq_usage(admin: Rest, ns: str) -> dict[str, str]:
    cq = admin.get(CQS.path(None, f"e2e-{ns}"))
    usage: dict[str, str] = {}
    for flavor in (cq.get("status") or {}).get("flavorsReservation") or []:
        for res in flavor.get("resources") or []:
            usage[res["name"]] = res.get("total", "0")
    return usage


def millicores(value: str) -> int:
    return int(value[:-1]) if value.endswith("m") else int(float(value) * 1000)


def cq_cpu_reaches(admin: Rest, ns: str, want_millicores: int) -> None:
    """Wait until the ClusterQueue's reserved cpu is `want_millicores`.

    Kueue writes the ClusterQueue's status after the Workloads' own, on its
    own schedule: a single read right after the pods settle can see the usage
    of a moment before. A value that never arrives still fails the test.
    """
    def cpu() -> int:
        return millicores(cq_usage(admin, ns).get("cpu", "0"))

    wait_for(lambda: cpu() == want_millicores, timeout=60,
             message=lambda: f"ClusterQueue cpu reservation == {want_millicores}m, is {cpu()}m")


# --- Must show ------------------------------------------------------------------------------


def test_quota_for_four_then_scale_down_admits_the_waiting_two(admin, controller, queue):
    ns = queue(cpu="5", memory="5Gi")  # the head and 4 workers
    admin.create(RAYCLUSTERS.path(ns), raycluster("rc", 6))

    s = wait_for(settled(admin, ns, "rc", 4, 2), timeout=120,
                 message=describe(admin, ns, "rc"))
    head = next(p for p in s["pods"] if role(p) == "head")
    head_wl = s["owned"][head["metadata"]["uid"]][0]
    admitted_at = w.condition(head_wl, w.ADMITTED)["lastTransitionTime"]
    # Head first: no worker's Workload existed before the head's was admitted.
    for p in s["pods"]:
        if role(p) == "worker":
            assert s["owned"][p["metadata"]["uid"]][0]["metadata"]["creationTimestamp"] >= \
                admitted_at
    waiting = [p for p in s["pods"] if gated(p)]
    names = [s["owned"][p["metadata"]["uid"]][0]["metadata"]["name"] for p in waiting]

    def kueue_says_why() -> str | None:
        for name in names:
            wl = admin.get(WORKLOADS.path(ns, name))
            assert not w.is_quota_reserved(wl)
            cond = w.condition(wl, w.QUOTA_RESERVED) or {}
            if cond.get("status") == "False" and cond.get("message"):
                return str(cond["message"])
        return None

    # Kueue's words, e.g. "couldn't assign flavors to pod set main: insufficient
    # unused quota for cpu in flavor ..., 1 more needed". Kueue writes them on
    # one of two identical Workloads only: it skips the twin of one it found
    # inadmissible (scheduling equivalence) without a status update.
    assert "quota" in wait_for(kueue_says_why, timeout=30, message="Kueue's pending message")
    for p in s["pods"]:
        if running(p):
            assert p["spec"]["nodeSelector"]["type"] == "kwok"  # the flavor's placement

    # Scale-down as the autoscaler does it: fewer replicas, these two go.
    victims = sorted(p["metadata"]["name"] for p in s["pods"]
                     if role(p) == "worker" and running(p))[:2]
    admin.merge_patch(RAYCLUSTERS.path(ns, "rc"), {"spec": {"workerGroupSpecs": [{
        "groupName": "cpu", "replicas": 4, "minReplicas": 0, "maxReplicas": 100,
        "rayStartParams": {}, "template": raycluster("rc", 4)["spec"]["workerGroupSpecs"][0][
            "template"], "scaleStrategy": {"workersToDelete": victims}}]}})
    after = wait_for(settled(admin, ns, "rc", 4, 0), timeout=120,
                     message=describe(admin, ns, "rc"))
    names = {p["metadata"]["name"] for p in after["pods"]}
    assert not names & set(victims)
    assert {p["metadata"]["name"] for p in waiting} <= names  # the same two, now running
    cq_cpu_reaches(admin, ns, 5000)


def test_preemption_takes_workers_never_the_head(admin, controller, queue):
    ns = queue(cpu="5", memory="5Gi", preemption=True)
    admin.create(RAYCLUSTERS.path(ns), raycluster("rc", 4))
    before = wait_for(settled(admin, ns, "rc", 4, 0), timeout=120,
                      message=describe(admin, ns, "rc"))
    head_uid = next(p["metadata"]["uid"] for p in before["pods"] if role(p) == "head")
    workers_before = {p["metadata"]["uid"] for p in before["pods"] if role(p) == "worker"}

    # A more important Workload needing two workers' worth of quota.
    high = f"e2e-high-{ns}"
    admin.create(WPCS.path(), {"apiVersion": WPCS.api_version, "kind": "WorkloadPriorityClass",
                               "metadata": {"name": high}, "value": 5000})
    try:
        admin.create(WORKLOADS.path(ns), {
            "apiVersion": WORKLOADS.api_version, "kind": "Workload",
            "metadata": {"name": "urgent"},
            "spec": {"queueName": "team-a", "priority": 5000,
                     "priorityClassRef": {"group": KUEUE, "kind": "WorkloadPriorityClass",
                                          "name": high},
                     "podSets": [{"name": "main", "count": 2, "template": {"spec": {
                         "restartPolicy": "Never",
                         "containers": [{"name": "c", "image": "busybox", "resources": {
                             "requests": {"cpu": "1", "memory": "1Gi"}}}]}}}]}})
        wait_for(lambda: w.is_admitted(admin.get(WORKLOADS.path(ns, "urgent"))), timeout=120,
                 message="the urgent Workload to be admitted by preempting")
        after = wait_for(settled(admin, ns, "rc", 2, 2), timeout=120,
                         message=describe(admin, ns, "rc"))
    finally:
        admin.delete(WPCS.path(None, high))
    head_now = next(p for p in after["pods"] if role(p) == "head")
    assert head_now["metadata"]["uid"] == head_uid  # the head was never taken
    workers_now = {p["metadata"]["uid"] for p in after["pods"] if role(p) == "worker"}
    assert len(workers_before - workers_now) == 2  # two evicted, deleted ...
    replaced = [p for p in after["pods"] if p["metadata"]["uid"] in workers_now - workers_before]
    assert len(replaced) == 2 and all(gated(p) for p in replaced)  # ... and recreated gated
    finished = [x for x in workloads(admin, ns)
                if w.pod_uid_of(x) in workers_before - workers_now]
    for wl in finished:  # unless the collector was quicker
        assert w.is_finished(wl) or wl["metadata"].get("deletionTimestamp")


def test_controller_killed_during_a_50_pod_scale_up(admin, controller, queue):
    # The head asks 100m; a worker 200m, the request of KubeRay's wait-gcs-ready
    # init container, which Kueue counts as it exceeds the 100m container.
    # So the head and 30 workers fit, 20 wait.
    ns = queue(cpu="6100m", memory="31Gi")
    admin.create(RAYCLUSTERS.path(ns), raycluster("rc", 0, cpu="100m", memory="1Gi"))
    wait_for(settled(admin, ns, "rc", 0, 0), timeout=120, message=describe(admin, ns, "rc"))

    spec = raycluster("rc", 50, cpu="100m", memory="1Gi")["spec"]["workerGroupSpecs"]
    admin.merge_patch(RAYCLUSTERS.path(ns, "rc"), {"spec": {"workerGroupSpecs": spec}})
    wait_for(lambda: len(workloads(admin, ns)) >= 10, timeout=60, message="10 Workloads")
    assert controller.proc is not None
    os.killpg(controller.proc.pid, signal.SIGKILL)
    controller.proc.wait(timeout=10)
    controller.proc = None
    controller.start()

    final = wait_for(settled(admin, ns, "rc", 30, 20), timeout=240,
                     message=describe(admin, ns, "rc"))
    assert len(final["pods"]) == 51
    assert all(n == 1 for n in final["counts"].values())  # exactly one Workload each
    # Kueue writes the ClusterQueue's status after the Workloads' own, on its
    # own schedule: read it once it has caught up, and fail if it never does.
    def admitted() -> int:
        return admin.get(CQS.path(None, f"e2e-{ns}")).get("status", {}).get("admittedWorkloads")

    wait_for(lambda: admitted() == 31, timeout=60,  # the head and 30 workers
             message=lambda: f"ClusterQueue admittedWorkloads == 31, is {admitted()}")
    assert admitted() == 31
    cq_cpu_reaches(admin, ns, 100 + 30 * 200)


def test_a_user_removing_the_gate_is_denied(admin, kubectl, controller, queue):
    ns = queue(cpu="1", memory="1Gi")  # the head only
    admin.create(RAYCLUSTERS.path(ns), raycluster("rc", 1))
    s = wait_for(settled(admin, ns, "rc", 0, 1), timeout=120, message=describe(admin, ns, "rc"))
    worker = next(p for p in s["pods"] if role(p) == "worker")
    # alice may edit pods in the namespace: only the webhook stands in her way.
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}"
    admin.create(f"{rbac}/roles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "pod-editor"},
        "rules": [{"apiGroups": [""], "resources": ["pods"],
                   "verbs": ["get", "list", "patch", "update"]}]})
    admin.create(f"{rbac}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "alice-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "pod-editor"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                      "name": "alice"}]})
    patch = json.dumps([{"op": "remove", "path": "/spec/schedulingGates"}])

    def denied() -> str | None:
        out = kubectl("patch", "pod", worker["metadata"]["name"], "-n", ns, "--as=alice",
                      "--type=json", "-p", patch)
        last.append(out.stderr or out.stdout)
        return out.stderr if out.returncode != 0 and "denied" in out.stderr else None

    last: list[str] = []
    message = wait_for(denied, timeout=30,
                       message=lambda: f"the gate removal to be denied: {last[-1:]}")
    assert c.GATE in message and "raykueue explain" in message
    assert gated(admin.get(PODS.path(ns, worker["metadata"]["name"])))
