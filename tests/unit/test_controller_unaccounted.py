"""Pods of opted-in clusters running outside quota: which, and what the leader does with them."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from raykueue.controller import metrics as m
from raykueue.controller.unaccounted import REASON, UnaccountedPods, unaccounted, watched
from raykueue.core import contract as c
from raykueue.kube.rest import ApiError

CLUSTER = {"kind": "RayCluster", "metadata": {"name": "rc", "namespace": "team-a", "uid": "rc-uid",
                                              "annotations": {c.STANDALONE_ANNOTATION: "true"}}}


def pod(name: str, *, role: str = c.ROLE_WORKER, owner: str = "rc-uid", **meta: Any) -> dict[str, Any]:
    labels = {c.NODE_TYPE_LABEL: role, c.CLUSTER_LABEL: "rc", **meta.pop("labels", {})}
    gates = meta.pop("gates", [])
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "team-a", "uid": f"{name}-uid", "labels": labels,
                     "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "rc",
                                          "uid": owner, "controller": True}], **meta},
        "spec": {"schedulingGates": gates}, "status": {"phase": "Running"}}
    return body


def test_only_ungated_unmanaged_pods_of_the_cluster_are_outside_quota() -> None:
    gated = pod("gated")
    gated["spec"]["schedulingGates"] = [{"name": c.GATE}]
    kueues = pod("kueues", labels={c.KUEUE_MANAGED_LABEL: "true"})
    ended = pod("ended")
    ended["status"]["phase"] = "Succeeded"
    going = pod("going", deletionTimestamp="2026-01-01T00:00:00Z")
    pods = [pod("head", role=c.ROLE_HEAD), pod("worker"), gated, kueues, ended, going,
            pod("managed", labels={c.MANAGED_BY_LABEL: c.MANAGED_BY_VALUE}),
            pod("other-cluster", owner="other-uid"), pod("cleanup", role="redis-cleanup")]
    assert [x["metadata"]["name"] for x in unaccounted(CLUSTER, pods)] == ["head", "worker"]


def test_only_opted_in_clusters_kueue_does_not_admit_whole_are_watched() -> None:
    assert watched(CLUSTER)
    kueues = copy.deepcopy(CLUSTER)
    kueues["metadata"]["labels"] = {c.QUEUE_LABEL: "team-a"}
    assert not watched(kueues)
    theirs = copy.deepcopy(CLUSTER)
    theirs["metadata"]["annotations"] = {}
    assert not watched(theirs)


class Rest:
    def __init__(self, pods: list[dict[str, Any]], fail_delete: ApiError | None = None) -> None:
        self.pods = pods
        self.fail_delete = fail_delete
        self.lists: list[tuple[str, dict[str, Any]]] = []
        self.deleted: list[tuple[str, dict[str, Any]]] = []

    def get(self, path: str, query: dict[str, Any]) -> dict[str, Any]:
        self.lists.append((path, query))
        return {"items": self.pods}

    def delete(self, path: str, body: dict[str, Any]) -> None:
        if self.fail_delete is not None:
            raise self.fail_delete
        self.deleted.append((path, body))


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def record(self, obj: dict[str, Any], type: str, reason: str, message: str) -> None:
        self.events.append((obj["metadata"]["name"], reason, message))


def test_the_leader_reports_and_evicts_each_pod_outside_quota() -> None:
    rest, recorder = Rest([pod("worker"), pod("gated", gates=[{"name": c.GATE}])]), Recorder()
    theirs = {"metadata": {"name": "theirs", "namespace": "team-a", "uid": "x"}}
    before = m.PODS_EVICTED.labels(role=c.ROLE_WORKER, reason=REASON)._value.get()
    found = UnaccountedPods(rest, lambda: [CLUSTER, theirs], recorder, lambda: True).update()  # type: ignore[arg-type]
    assert [x["metadata"]["name"] for x in found] == ["worker"]
    # One list, for the opted-in cluster, narrowed by label to what raykueue does not manage.
    ((path, query),) = rest.lists
    assert path == "/api/v1/namespaces/team-a/pods"
    assert query["labelSelector"] == (f"{c.CLUSTER_LABEL}=rc,{c.NODE_TYPE_LABEL} in (head,worker),"
                                      f"!{c.MANAGED_BY_LABEL}")
    assert rest.deleted == [("/api/v1/namespaces/team-a/pods/worker",
                             {"apiVersion": "v1", "kind": "DeleteOptions",
                              "preconditions": {"uid": "worker-uid"}})]
    ((name, reason, message),) = recorder.events
    assert (name, reason) == ("worker", REASON) and "queues for its quota" in message
    assert m.PODS_EVICTED.labels(role=c.ROLE_WORKER, reason=REASON)._value.get() == before + 1


@pytest.mark.parametrize("status", [404, 409])
def test_a_pod_gone_or_replaced_meanwhile_is_not_an_error(status: int) -> None:
    rest = Rest([pod("worker")], fail_delete=ApiError(status, "gone"))
    assert UnaccountedPods(rest, lambda: [CLUSTER], Recorder(), lambda: True).update()  # type: ignore[arg-type]
