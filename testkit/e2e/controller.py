"""What tests/e2e/test_controller_e2e.py shares with other tests (so that no test module imports another).
That module: The Workload lifecycle end to end: real KubeRay, Kueue, kube-scheduler, kwok.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from raykueue.controller import workload as w
from raykueue.core import contract as c
from raykueue.kube.resources import PODS, crd
from raykueue.kube.rest import ApiError, Rest
from testkit.pods import gated, role, running
from testkit.servers import RaykueueServer
from testkit.stackfixtures import keep_logs_if_failed
from testkit.waiting import wait_for

KUEUE = "kueue.x-k8s.io"


WORKLOADS = crd(KUEUE, "v1beta2", "workloads")


CQS = crd(KUEUE, "v1beta2", "clusterqueues", namespaced=False)


LQS = crd(KUEUE, "v1beta2", "localqueues")


FLAVORS = crd(KUEUE, "v1beta2", "resourceflavors", namespaced=False)


WPCS = crd(KUEUE, "v1beta2", "workloadpriorityclasses", namespaced=False)


RAYCLUSTERS = crd("ray.io", "v1", "rayclusters")


ADMIN = "raykueue-admin"  # the CN of devstack's admin certificate


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
def queue(admin: Rest, new_namespace) -> Iterator[Callable[..., str]]:
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
