"""The leader finds and evicts pods of opted-in clusters running outside quota, on the real API server.

Such pods come from clusters opted in before raykueue stamped templates, created
while raykueue was down (the legacy webhook fails open). Here they are created
with raykueue's webhooks out of the way, as they would be then.
"""

from __future__ import annotations

import copy
from typing import Any

from raykueue.controller.unaccounted import REASON, UnaccountedPods
from raykueue.core import contract as c
from raykueue.kube.events import EventRecorder
from raykueue.kube.resources import Resource
from raykueue.kube.rest import Rest
from testkit import reviews as rv
from testkit.waiting import wait_for
from tests.api.test_scope import OPTED_IN, hooks, path, ray_object  # noqa: F401 - fixture

EVENTS = Resource("events.k8s.io", "v1", "events")


def owned_pod(ns: str, name: str, owner: dict[str, Any], **labels: str) -> dict[str, Any]:
    body = rv.creatable_pod("worker")
    meta = body["metadata"]
    meta.update(name=name, namespace=ns)
    meta["labels"].update({c.CLUSTER_LABEL: owner["metadata"]["name"], **labels})
    meta["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": "RayCluster",
                                "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                                "controller": True}]
    return body


def test_pods_outside_quota_are_reported_and_evicted(hooks, new_namespace, api_stack, k8s) -> None:  # noqa: F811
    api, rest = api_stack.api, Rest(k8s)
    hooks.off()
    ns = new_namespace("unaccounted")
    clusters_path = path(ns, "RayCluster")
    legacy = api.call("POST", clusters_path, ray_object("RayCluster", "legacy", annotations=OPTED_IN))
    theirs = api.call("POST", clusters_path, ray_object("RayCluster", "theirs"))
    pods = f"/api/v1/namespaces/{ns}/pods"
    outside = api.call("POST", pods, owned_pod(ns, "outside", legacy))
    gated = owned_pod(ns, "gated", legacy, **{c.MANAGED_BY_LABEL: c.MANAGED_BY_VALUE})
    gated["spec"]["schedulingGates"] = [{"name": c.GATE}]
    api.call("POST", pods, gated)
    api.call("POST", pods, owned_pod(ns, "kueues", theirs))
    kueues_whole = copy.deepcopy(legacy)
    kueues_whole["metadata"]["labels"] = {c.QUEUE_LABEL: "team-a"}  # Kueue's whole: not ours to judge

    found = UnaccountedPods(rest, lambda: [legacy, theirs, kueues_whole], EventRecorder(rest, "test"),
                            lambda: True).update()
    # On the e2e stack KubeRay has made the legacy cluster's own pods, just as
    # ungated (raykueue's webhooks are out of the way here): found too.
    names = {p["metadata"]["name"] for p in found}
    assert "outside" in names and not names & {"gated", "kueues"}
    assert all(p["metadata"]["labels"][c.CLUSTER_LABEL] == "legacy" for p in found)
    wait_for(lambda: (api.get_or_none(f"{pods}/outside") or {"metadata": {}})["metadata"].get("uid")
             != outside["metadata"]["uid"], timeout=30, message="the pod outside quota to be deleted")
    assert api.get(f"{pods}/gated") and api.get(f"{pods}/kueues")
    (event,) = [e for e in rest.get(EVENTS.path(ns))["items"]
                if e.get("reason") == REASON and e["regarding"]["name"] == "outside"]
    assert event["type"] == "Warning"
