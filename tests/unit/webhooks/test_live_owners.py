"""A stamped pod whose Ray owner the caches lack: its owners read live once, then decided.

The view's live reader is a recording function here (no server); the admission
endpoint's part (the read off the event loop) is tests/unit/app/test_owner_reads.py,
and the read against a real API server tests/api/test_owner_reads_api.py.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch

from raykueue.app.runtime import mutate_with, policy_from
from raykueue.app.settings import Settings
from raykueue.core import contract as c
from raykueue.webhooks.classify import OwnerUnread, PodContext, classify
from raykueue.webhooks.reads import ClusterView
from raykueue.webhooks.review import Review, parse
from testkit import reviews as rv

POLICY = policy_from(Settings())
NS = "team-a"
CLUSTER = "raycluster-gpu"  # the fixture pods' RayCluster


class Store:
    def __init__(self, *objs: dict[str, Any]) -> None:
        self.synced = True
        self.objs = {(o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objs}

    def get(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        return self.objs.get((namespace, name))


class Reader:
    """The API server as the live reader sees it: objects by (kind, name), or one error."""

    def __init__(self, *objs: dict[str, Any], error: Exception | None = None) -> None:
        self.objs = {(o["kind"], o["metadata"]["name"]): o for o in objs}
        self.error = error
        self.calls: list[tuple[str, str, str, float]] = []

    def __call__(self, kind: str, namespace: str, name: str, timeout: float) -> dict[str, Any] | None:
        self.calls.append((kind, namespace, name, timeout))
        if self.error is not None:
            raise self.error
        return self.objs.get((kind, name))


def raycluster(name: str = CLUSTER, *, owner: tuple[str, str] | None = None,
               gang: bool = False, **annotations: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "annotations": dict(annotations)}
    if gang:
        meta["annotations"][c.GANG_ANNOTATION] = "true"
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": owner[0], "name": owner[1],
                                    "uid": "u", "controller": True}]
    return {"kind": c.RAYCLUSTER_KIND, "metadata": meta,
            "spec": {"workerGroupSpecs": [{"groupName": "gpu", "minReplicas": 2}]}}


def rayjob(name: str, **annotations: str) -> dict[str, Any]:
    return {"kind": c.RAYJOB_KIND, "metadata": {"name": name, "namespace": NS,
                                                "annotations": annotations}}


def view(*cached: dict[str, Any], reader: Reader | None) -> ClusterView:
    by_kind = {kind: Store(*(o for o in cached if o["kind"] == kind))
               for kind in (c.RAYCLUSTER_KIND, c.RAYJOB_KIND, c.RAYSERVICE_KIND)}
    return ClusterView(by_kind, Store(), live=reader, live_budget=2.0)


def stamped_worker() -> Review:
    """The recorded KubeRay worker creation, stamped and naming no queue of its own."""
    review = rv.set_label(rv.worker_review(), c.OPTED_IN_LABEL, c.OPTED_IN_VALUE)
    return parse(json.dumps(rv.set_label(review, c.QUEUE_LABEL, None)).encode())


def decide(v: ClusterView, review: Review):
    """What the admission endpoint does: decide from the caches, then run the follow-up."""
    first = mutate_with(v, POLICY, review)
    return first, (first.follow_up() if first.follow_up is not None else None)


def test_a_cache_hit_makes_no_read_and_no_follow_up() -> None:
    reader = Reader()
    first, second = decide(view(raycluster(**{c.QUEUE_ANNOTATION: "lq"}), reader=reader),
                           stamped_worker())
    assert (first.decision, first.queue, second) == ("gated", "lq", None)
    assert reader.calls == []


def test_a_missing_owner_found_live_is_decided_as_if_cached() -> None:
    found = raycluster(**{c.QUEUE_ANNOTATION: "lq"})
    reader = Reader(found)
    first, second = decide(view(reader=reader), stamped_worker())
    # The answer without the read stays the refusal it was; the follow-up replaces it.
    assert first.decision == "denied" and "not yet in raykueue's cache" in first.reason
    cached, _ = decide(view(found, reader=None), stamped_worker())
    assert second is not None and second.follow_up is None
    assert (second.decision, second.verdict) == (cached.decision, cached.verdict)
    assert second.queue == "lq" and second.reason == cached.reason
    assert [call[:3] for call in reader.calls] == [(c.RAYCLUSTER_KIND, NS, CLUSTER)]
    assert 0 < reader.calls[0][3] <= 2.0


def test_only_the_owners_the_caches_lack_are_read() -> None:
    """The RayCluster cached, its RayJob not: the RayJob is read, and its queue used."""
    reader = Reader(rayjob("train", **{c.QUEUE_ANNOTATION: "from-job"}))
    v = view(raycluster(owner=(c.RAYJOB_KIND, "train")), reader=reader)
    _, second = decide(v, stamped_worker())
    assert second is not None and (second.decision, second.queue) == ("gated", "from-job")
    assert [call[:3] for call in reader.calls] == [(c.RAYJOB_KIND, NS, "train")]


def test_a_missing_owner_the_api_server_does_not_have_is_refused_by_name() -> None:
    reader = Reader()
    _, second = decide(view(reader=reader), stamped_worker())
    assert second is not None and second.decision == "denied"
    assert f"RayCluster {NS}/{CLUSTER} does not exist" in second.verdict.message
    assert "retried" not in second.verdict.message
    assert len(reader.calls) == 1


def test_a_failed_read_gives_the_cache_refusal_naming_the_error() -> None:
    reader = Reader(error=TimeoutError("read timed out"))
    _, second = decide(view(reader=reader), stamped_worker())
    assert second is not None and second.decision == "denied" and second.follow_up is None
    message = second.verdict.message
    assert f"RayCluster {NS}/{CLUSTER} is not yet in raykueue's cache" in message
    assert "TimeoutError: read timed out" in message and "retried by KubeRay" in message
    assert len(reader.calls) == 1  # once: the follow-up's answer is final


def test_the_budget_is_for_the_whole_chain() -> None:
    """Each read is given what is left; none is tried once nothing is."""
    reader = Reader(raycluster(owner=(c.RAYJOB_KIND, "train")))
    v = ClusterView({kind: Store() for kind in (c.RAYCLUSTER_KIND, c.RAYJOB_KIND)}, Store(),
                    live=reader, live_budget=1e-9)
    ctx = v.context_live(stamped_worker().object, NS)
    assert reader.calls == [] and ctx.unresolved_owner == f"RayCluster {NS}/{CLUSTER}"
    assert ctx.owner_read_error is not None and "ran out" in ctx.owner_read_error


def test_without_a_reader_the_refusal_is_as_before() -> None:
    """Connecting (no caches attached yet) or a view built without one: no follow-up."""
    for v in (ClusterView.connecting(), view(reader=None)):
        first = mutate_with(v, POLICY, stamped_worker())
        assert first.decision == "denied" and first.follow_up is None
        assert "not yet in raykueue's cache" in first.reason


def test_admission_only_never_reads() -> None:
    first = mutate_with(ClusterView.offline(), POLICY, stamped_worker())
    assert first.follow_up is None


def test_an_unstamped_pod_is_never_read_for() -> None:
    reader = Reader()
    review = parse(json.dumps(rv.set_label(rv.worker_review(), c.QUEUE_LABEL, "lq")).encode())
    first, second = decide(view(reader=reader), review)
    assert (first.decision, second, reader.calls) == ("skipped", None, [])


def test_a_head_only_gang_cluster_is_a_gang_of_its_head_alone() -> None:
    """No workerGroupSpecs is a head-only cluster, not one the cache knows too little of:
    decided from the cache (no read, no refusal), with a gang of no worker group."""
    head_only = copy.deepcopy(raycluster(gang=True, **{c.QUEUE_ANNOTATION: "lq"}))
    del head_only["spec"]
    reader = Reader()
    first, second = decide(view(head_only, reader=reader), stamped_worker())
    assert (first.decision, second, reader.calls) == ("gated", None, [])
    patched = jsonpatch.apply_patch(stamped_worker().object, first.verdict.patch or [])
    assert patched["metadata"]["annotations"][c.GANG_MIN_ANNOTATION] == "{}"
    assert patched["metadata"]["labels"][c.GANG_LABEL] == CLUSTER


def test_the_cache_miss_refusal_is_its_own_type_and_still_a_refusal() -> None:
    """Every other caller of classify (adoption) sees the refusal it always saw."""
    decision = classify(stamped_worker().object, PodContext(unresolved_owner="RayCluster a/b"), POLICY)
    assert isinstance(decision, OwnerUnread)
    absent = classify(stamped_worker().object, PodContext(unresolved_owner="RayCluster a/b",
                                                          owner_absent=True), POLICY)
    assert not isinstance(absent, OwnerUnread) and "does not exist" in absent.message


def test_an_absent_owner_further_up_is_named() -> None:
    """The RayCluster read live, the RayJob it names not there: the RayJob is the absent one."""
    reader = Reader(raycluster(owner=(c.RAYJOB_KIND, "train")))
    _, second = decide(view(reader=reader), stamped_worker())
    assert second is not None and second.decision == "denied"
    assert f"RayJob {NS}/train does not exist" in second.verdict.message
    assert [call[:3] for call in reader.calls] == [(c.RAYCLUSTER_KIND, NS, CLUSTER),
                                                   (c.RAYJOB_KIND, NS, "train")]
