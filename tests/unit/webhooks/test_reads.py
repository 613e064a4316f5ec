"""The webhook's cluster view: owner chains and default queues from caches."""

from __future__ import annotations

from typing import Any

from raykueue.coexist.kueueconfig import KueueSetup
from raykueue.core import contract as c
from raykueue.webhooks.reads import ClusterView, keep_metadata
from testkit import reviews as rv


class Store:
    def __init__(self, *objs: dict[str, Any], synced: bool = True) -> None:
        self.synced = synced
        self.objs = {(o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objs}

    def get(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        return self.objs.get((namespace, name))


def owned(name: str, kind: str, owner: tuple[str, str] | None = None, **meta: Any) -> dict[str, Any]:
    obj = {"kind": kind, "metadata": {"name": name, "namespace": "team-a", **meta}}
    if owner:
        obj["metadata"]["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": owner[0],
                                               "name": owner[1], "controller": True}]
    return obj


def test_offline_view_knows_nothing() -> None:
    ctx = ClusterView.offline().context_for(rv.pod_of(rv.head_review()), "team-a")
    assert ctx.owners == () and ctx.unresolved_owner is None


def test_owner_chain_is_followed_through_rayjob() -> None:
    cluster = owned("raycluster-gpu", "RayCluster", owner=("RayJob", "train"))
    job = owned("train", "RayJob")
    view = ClusterView({"RayCluster": Store(cluster), "RayJob": Store(job),
                        "RayService": Store()}, Store())
    ctx = view.context_for(rv.pod_of(rv.head_review()), "team-a")
    assert [o["metadata"]["name"] for o in ctx.owners] == ["raycluster-gpu", "train"]
    assert ctx.unresolved_owner is None and ctx.default_queue_exists is False


def test_a_connecting_view_reads_the_caches_attached_to_it_whole() -> None:
    view = ClusterView.connecting()
    ctx = view.context_for(rv.pod_of(rv.head_review()), "team-a")
    assert ctx.unresolved_owner == "RayCluster team-a/raycluster-gpu"  # refused until attached
    cluster = owned("raycluster-gpu", "RayCluster")
    view.attach({"RayCluster": Store(cluster)}, Store(owned(c.DEFAULT_LOCAL_QUEUE, "LocalQueue")))
    ctx = view.context_for(rv.pod_of(rv.head_review()), "team-a")
    assert [o["metadata"]["name"] for o in ctx.owners] == ["raycluster-gpu"]
    assert ctx.unresolved_owner is None and ctx.default_queue_exists


def test_missing_owner_is_reported_unresolved() -> None:
    view = ClusterView({"RayCluster": Store()}, Store())
    ctx = view.context_for(rv.pod_of(rv.head_review()), "team-a")
    assert ctx.unresolved_owner == "RayCluster team-a/raycluster-gpu"


def test_default_local_queue_is_seen() -> None:
    view = ClusterView({}, Store(owned(c.DEFAULT_LOCAL_QUEUE, "LocalQueue")))
    assert view.context_for(rv.pod_of(rv.head_review()), "team-a").default_queue_exists
    assert not view.context_for(rv.pod_of(rv.head_review()), "other").default_queue_exists


def test_keep_metadata_keeps_what_rules_and_watches_need() -> None:
    full = {"apiVersion": "ray.io/v1", "kind": "RayJob", "spec": {"big": "x" * 1000},
            "metadata": {"name": "a", "namespace": "n", "resourceVersion": "7", "labels": {"l": "1"},
                         "annotations": {"x": "y"}, "managedFields": [{}]}}
    kept = keep_metadata("RayJob")(full)
    assert kept == {"kind": "RayJob", "metadata": {
        "name": "a", "namespace": "n", "resourceVersion": "7", "labels": {"l": "1"},
        "annotations": {"x": "y"}}}


def kueue_managing_unqueued() -> KueueSetup:
    return KueueSetup(frozenset({"ray.io/raycluster"}), True, {"matchLabels": {"kueue-managed": "true"}},
                      True, "test")


def test_ray_object_facts_judge_the_namespace_by_its_labels() -> None:
    namespaces = Store({"metadata": {"name": "managed", "labels": {"kueue-managed": "true"}}},
                       {"metadata": {"name": "free", "labels": {}}})
    view = ClusterView({}, Store(owned(c.DEFAULT_LOCAL_QUEUE, "LocalQueue")), kueue=kueue_managing_unqueued,
                       namespaces=namespaces)
    rc = {"kind": "RayCluster"}
    assert view.facts_for(rc, "managed").kueue_manages_unqueued is True
    assert view.facts_for(rc, "free").kueue_manages_unqueued is False
    # Not in the cache yet: cannot tell, so the first stage asks for a retry.
    assert view.facts_for(rc, "new").kueue_manages_unqueued is None
    # A kind whose integration is off is never Kueue's.
    assert view.facts_for({"kind": "RayJob"}, "managed").kueue_manages_unqueued is False
    assert view.facts_for(rc, "team-a").default_queue_exists
    assert not ClusterView.offline().facts_for(rc, "team-a").default_queue_exists
