"""raykueue/controller/adopt.py's pure core: which clusters and pods are adopted, and how."""

from __future__ import annotations

import copy
from typing import Any

from raykueue.controller import adopt
from raykueue.controller import workload as w
from raykueue.core import contract as c
from raykueue.core.priority import PriorityPolicy
from raykueue.core.rayobjects import templates
from raykueue.core.refusal import Refusal
from raykueue.webhooks.classify import Manage, PodContext

UID = "uid-rc"


def cluster(**spec: Any) -> dict[str, Any]:
    template: dict[str, Any] = {"metadata": {"labels": {}}, "spec": {"containers": []}}
    return {
        "kind": "RayCluster",
        "metadata": {"name": "rc", "namespace": "team-a", "uid": UID, "labels": {},
                     "annotations": {c.STANDALONE_ANNOTATION: "true",
                                     c.QUEUE_ANNOTATION: "team-a"}},
        "spec": {"headGroupSpec": {"template": copy.deepcopy(template)},
                 "workerGroupSpecs": [{"groupName": "cpu", "template": copy.deepcopy(template)}],
                 **spec},
    }


def running(name: str, role: str, **labels: str) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}",
                     "labels": {c.CLUSTER_LABEL: "rc", c.NODE_TYPE_LABEL: role, **labels},
                     "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster",
                                          "name": "rc", "uid": UID, "controller": True}]},
        "spec": {"containers": [{"name": "ray"}]},
        "status": {"phase": "Running"},
    }


def test_only_opted_in_clusters_kueue_does_not_admit_whole_are_accounted() -> None:
    assert adopt.accounted(cluster())
    kueues = cluster()
    kueues["metadata"]["labels"][c.QUEUE_LABEL] = "team-a"
    out = cluster()
    out["metadata"]["annotations"][c.STANDALONE_ANNOTATION] = "false"
    going = cluster()
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert not any(adopt.accounted(x) for x in (kueues, out, going))


def test_the_scope_is_the_installed_pod_webhooks_namespace_selector() -> None:
    selector = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                      "values": ["kube-system", "raykueue-system"]}]}
    config = {"webhooks": [{"name": "last-ray-objects.raykueue.io", "namespaceSelector": {}},
                           {"name": adopt.POD_WEBHOOK, "namespaceSelector": selector}]}
    assert adopt.pod_webhook_scope(config) == selector
    # Deleted (break-glass) or not installed: nothing is gated at creation, nothing adopted.
    assert adopt.pod_webhook_scope(None) is None
    assert adopt.pod_webhook_scope({"webhooks": []}) is None
    assert adopt.pod_webhook_scope({"webhooks": [{"name": adopt.POD_WEBHOOK}]}) == {}


def test_stamping_is_needed_until_every_template_is_stamped_and_never_under_recreate() -> None:
    rc = cluster()
    assert adopt.unstamped(rc) and not adopt.recreates_on_change(rc)
    for _, template in list(templates(rc, c.RAYCLUSTER_KIND))[:1]:
        template["metadata"]["labels"][c.OPTED_IN_LABEL] = c.OPTED_IN_VALUE
    assert adopt.unstamped(rc)  # the worker group's still lacks it
    for _, template in templates(rc, c.RAYCLUSTER_KIND):
        template["metadata"]["labels"][c.OPTED_IN_LABEL] = c.OPTED_IN_VALUE
    assert not adopt.unstamped(rc)
    assert adopt.recreates_on_change(cluster(upgradeStrategy={"type": "Recreate"}))
    assert not adopt.recreates_on_change(cluster(upgradeStrategy={"type": "None"}))
    assert adopt.stamp_patch(rc) == [{"op": "test", "path": "/metadata/uid", "value": UID}]


def test_only_running_pods_nothing_manages_are_adopted_head_first() -> None:
    gated = running("gated", c.ROLE_WORKER)
    gated["spec"]["schedulingGates"] = [{"name": c.GATE}]
    held = running("held", c.ROLE_WORKER)
    held["spec"]["schedulingGates"] = [{"name": "someone.else/gate"}]
    kueues = running("kueues", c.ROLE_WORKER, **{c.KUEUE_MANAGED_LABEL: "true"})
    going = running("going", c.ROLE_WORKER)
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    ended = running("ended", c.ROLE_WORKER)
    ended["status"]["phase"] = "Failed"
    other = running("other", c.ROLE_WORKER)
    other["metadata"]["ownerReferences"][0]["uid"] = "another-cluster"
    pods = [running("w1", c.ROLE_WORKER), gated, held, kueues, going, ended, other,
            running("ours", c.ROLE_WORKER, **{c.MANAGED_BY_LABEL: c.MANAGED_BY_VALUE}),
            running("redis", "redis-cleanup"), running("head", c.ROLE_HEAD)]
    assert [x["metadata"]["name"] for x in adopt.adoptable(cluster(), pods)] == ["head", "w1"]


def test_the_pod_is_decided_as_the_webhook_would_have_had_it_been_stamped() -> None:
    ctx = PodContext(owners=(cluster(),))
    head = adopt.decide_pod(running("head", c.ROLE_HEAD), ctx, PriorityPolicy())
    worker = adopt.decide_pod(running("w1", c.ROLE_WORKER), ctx, PriorityPolicy())
    assert isinstance(head, Manage) and isinstance(worker, Manage)
    assert (head.queue, head.priority_class) == ("team-a", c.DEFAULT_HEAD_PRIORITY_CLASS)
    assert (worker.queue, worker.priority_class) == ("team-a", c.DEFAULT_WORKER_PRIORITY_CLASS)
    # A queue nobody names is the webhook's refusal, reported, never a patch.
    nameless = cluster()
    del nameless["metadata"]["annotations"][c.QUEUE_ANNOTATION]
    assert isinstance(adopt.decide_pod(running("w1", c.ROLE_WORKER),
                                       PodContext(owners=(nameless,)),
                                       PriorityPolicy()), Refusal)


def test_the_patch_adds_our_label_and_annotations_only_to_this_pod() -> None:
    pod = running("head", c.ROLE_HEAD)
    decision = adopt.decide_pod(pod, PodContext(owners=(cluster(),)), PriorityPolicy())
    assert isinstance(decision, Manage)
    ops = adopt.adopt_patch(pod, decision)
    assert ops[0] == {"op": "test", "path": "/metadata/uid", "value": "uid-head"}
    assert {"op": "add", "path": "/metadata/labels/raykueue.io~1managed-by",
            "value": c.MANAGED_BY_VALUE} in ops
    assert {"op": "add", "path": "/metadata/annotations",
            "value": {c.QUEUE_ANNOTATION: "team-a",
                      c.PRIORITY_CLASS_ANNOTATION: c.DEFAULT_HEAD_PRIORITY_CLASS}} in ops
    # Never Kueue's labels (its pod webhook refuses them on a running pod), never the spec.
    assert not [x for x in ops if "kueue.x-k8s.io" in x["path"] or x["path"].startswith("/spec")]
    assert all(x["op"] in ("test", "add") for x in ops)


def test_workers_wait_for_the_heads_own_admitted_workload() -> None:
    head = running("head", c.ROLE_HEAD, **{c.MANAGED_BY_LABEL: c.MANAGED_BY_VALUE})
    wl = {"metadata": {"name": w.workload_name(head), "ownerReferences": [
        {"apiVersion": "v1", "kind": "Pod", "name": "head", "uid": "uid-head"}]},
          "status": {"conditions": []}}
    assert not adopt.own_head_admitted([(head, None)])
    assert not adopt.own_head_admitted([(head, wl)])
    wl["status"]["conditions"] = [{"type": w.QUOTA_RESERVED, "status": "True"},
                                  {"type": w.ADMITTED, "status": "True"}]
    assert adopt.own_head_admitted([(head, wl)])
    going = copy.deepcopy(head)
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert not adopt.own_head_admitted([(going, wl)])
