"""The live read of a Ray owner the caches lack, as the server runs it and counts it.

The endpoint runs a decision's follow-up in a worker thread: the event loop keeps
answering meanwhile. `OwnerReads` GETs the owner (a stand-in Rest here; the real
API server in tests/api/test_owner_reads_api.py), keeps what the cache keeps, and
counts each read by kind and result.
"""

from __future__ import annotations

import asyncio
import json
import threading
from functools import partial
from typing import Any

import httpx
import pytest
from kubernetes.client import Configuration
from prometheus_client import REGISTRY

from raykueue.app import server
from raykueue.app.ownerreads import OwnerReads
from raykueue.app.runtime import mutate_with, policy_from, validate_with
from raykueue.app.server import build_app
from raykueue.app.settings import Settings
from raykueue.core import contract as c
from raykueue.kube.rest import ApiError
from raykueue.webhooks.admit import Outcome
from raykueue.webhooks.reads import ClusterView
from raykueue.webhooks.review import ReviewResponse
from testkit import reviews as rv

pytestmark = pytest.mark.anyio
KINDS = (c.RAYCLUSTER_KIND, c.RAYJOB_KIND, c.RAYSERVICE_KIND)
NS, CLUSTER = "team-a", "raycluster-gpu"  # the fixture pods' namespace and RayCluster
FULL_CLUSTER = {
    "apiVersion": "ray.io/v1", "kind": c.RAYCLUSTER_KIND,
    "metadata": {"name": CLUSTER, "namespace": NS, "resourceVersion": "9", "managedFields": [{}],
                 "annotations": {c.QUEUE_ANNOTATION: "lq"}},
    "spec": {"headGroupSpec": {"template": {"spec": {"containers": [{"name": "x" * 100}]}}},
             "workerGroupSpecs": [{"groupName": "gpu", "minReplicas": 1, "template": {}}]},
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Store:
    synced = True

    def get(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        return None


class StandInRest:
    """Answers GET by path: an object, or an ApiError; can hold each GET until released."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.gets: list[tuple[str, Any]] = []
        self.entered = threading.Event()
        self.release: threading.Event | None = None
        self.thread: str | None = None

    def get(self, path: str, query: Any = None, *, timeout: Any = None) -> Any:
        self.gets.append((path, timeout))
        self.thread = threading.current_thread().name
        self.entered.set()
        if self.release is not None:
            self.release.wait(10)
        answer = self.answers.get(path, ApiError(404, "NotFound"))
        if isinstance(answer, Exception):
            raise answer
        return answer


def cluster_path(name: str = CLUSTER) -> str:
    return f"/apis/ray.io/v1/namespaces/{NS}/rayclusters/{name}"


def reads() -> dict[tuple[str, str], float]:
    return {(s.labels["kind"], s.labels["result"]): s.value
            for metric in REGISTRY.collect() if metric.name == "raykueue_admission_owner_reads"
            for s in metric.samples if s.name.endswith("_total")}


def app_with(rest: StandInRest):
    view = ClusterView({kind: Store() for kind in KINDS}, Store(), live=OwnerReads(rest, "v1"),
                       live_budget=2.0)
    mutate = partial(mutate_with, view, policy_from(Settings()))
    return build_app(mutate, partial(validate_with, frozenset()), [], 64 * 1024)


def stamped_worker() -> bytes:
    review = rv.set_label(rv.worker_review(), c.OPTED_IN_LABEL, c.OPTED_IN_VALUE)
    return json.dumps(rv.set_label(review, c.QUEUE_LABEL, None)).encode()


def client_for(app) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://raykueue.test")


async def test_the_event_loop_answers_while_a_read_is_held() -> None:
    rest = StandInRest({cluster_path(): FULL_CLUSTER})
    rest.release = threading.Event()
    client = client_for(app_with(rest))
    review = asyncio.create_task(client.post(c.MUTATE_PATH, content=stamped_worker()))
    try:
        # Waited for in a thread, as the loop itself must stay free.
        assert await asyncio.to_thread(rest.entered.wait, 10), "the owner was never read"
        health = await asyncio.wait_for(client.get("/healthz"), 5)
        assert health.status_code == 200
        assert not review.done(), "the review ended before its read was released"
    finally:
        rest.release.set()
    answer = (await review).json()["response"]
    assert answer["allowed"] is True and answer.get("patch"), answer
    assert rest.thread != threading.main_thread().name


async def test_a_found_owner_gates_a_missing_one_is_refused_by_name_and_each_is_counted() -> None:
    before = reads()
    rest = StandInRest({cluster_path(): FULL_CLUSTER})
    client = client_for(app_with(rest))
    answer = (await client.post(c.MUTATE_PATH, content=stamped_worker())).json()["response"]
    assert answer["allowed"] is True and answer.get("patch")
    assert rest.gets == [(cluster_path(), pytest.approx(2.0, abs=0.5))]

    rest.answers.clear()
    answer = (await client.post(c.MUTATE_PATH, content=stamped_worker())).json()["response"]
    assert answer["allowed"] is False
    assert f"RayCluster {NS}/{CLUSTER} does not exist" in answer["status"]["message"]

    rest.answers[cluster_path()] = ApiError(0, "ReadTimeoutError", {"message": "read timed out"})
    answer = (await client.post(c.MUTATE_PATH, content=stamped_worker())).json()["response"]
    assert answer["allowed"] is False
    assert "not yet in raykueue's cache" in answer["status"]["message"]
    assert "ReadTimeoutError" in answer["status"]["message"]

    after = reads()
    for result in ("found", "not_found", "error"):
        assert after[(c.RAYCLUSTER_KIND, result)] == before[(c.RAYCLUSTER_KIND, result)] + 1, result
    assert after[(c.RAYJOB_KIND, "found")] == before[(c.RAYJOB_KIND, "found")]
    assert "raykueue_admission_owner_reads_total" in (await client.get("/metrics")).text


async def test_a_cache_hit_is_answered_without_a_read_or_a_thread(monkeypatch) -> None:
    hops: list[object] = []
    real = asyncio.to_thread
    monkeypatch.setattr(server.asyncio, "to_thread", lambda f, *a: hops.append(f) or real(f, *a))
    rest = StandInRest({})
    cached = {"kind": c.RAYCLUSTER_KIND, "metadata": {"name": CLUSTER, "namespace": NS,
                                                      "annotations": {c.QUEUE_ANNOTATION: "lq"}}}

    class Holding(Store):
        def get(self, namespace: str | None, name: str) -> dict[str, Any] | None:
            return cached if (namespace, name) == (NS, CLUSTER) else None

    view = ClusterView({c.RAYCLUSTER_KIND: Holding(), c.RAYJOB_KIND: Store()}, Store(),
                       live=OwnerReads(rest, "v1"))
    app = build_app(partial(mutate_with, view, policy_from(Settings())),
                    partial(validate_with, frozenset()), [], 64 * 1024)
    answer = (await client_for(app).post(c.MUTATE_PATH, content=stamped_worker())).json()["response"]
    assert answer["allowed"] is True and answer.get("patch")
    assert (rest.gets, hops) == ([], [])


async def test_a_follow_up_that_raises_is_a_denial_naming_the_request() -> None:
    def boom() -> Outcome:
        raise RuntimeError("bug")

    def decide(review) -> Outcome:
        return Outcome(ReviewResponse(False, message="from the caches"), "denied", follow_up=boom)

    app = build_app(decide, partial(validate_with, frozenset()), [], 64 * 1024)
    answer = (await client_for(app).post(c.MUTATE_PATH, content=stamped_worker())).json()["response"]
    assert answer["allowed"] is False and answer["status"]["code"] == 500
    assert rv.worker_review()["request"]["uid"] in answer["status"]["message"]


def test_owner_reads_keep_what_the_cache_keeps_and_pass_the_timeout() -> None:
    rest = StandInRest({cluster_path(): FULL_CLUSTER,
                        f"/apis/ray.io/v1/namespaces/{NS}/rayjobs/train": {
                            "kind": c.RAYJOB_KIND, "spec": {"entrypoint": "python x.py"},
                            "metadata": {"name": "train", "namespace": NS, "managedFields": [{}]}}})
    owner_reads = OwnerReads(rest, "v1")
    got = owner_reads(c.RAYCLUSTER_KIND, NS, CLUSTER, 1.5)
    assert got is not None and "headGroupSpec" not in got["spec"] and "managedFields" not in got["metadata"]
    assert got["spec"]["workerGroupSpecs"] == [{"groupName": "gpu", "minReplicas": 1}]
    assert owner_reads(c.RAYJOB_KIND, NS, "train", 0.5) == {
        "kind": c.RAYJOB_KIND, "metadata": {"name": "train", "namespace": NS}}
    assert [t for _, t in rest.gets] == [1.5, 0.5]
    assert owner_reads(c.RAYSERVICE_KIND, NS, "absent", 1.0) is None
    rest.answers[cluster_path()] = ApiError(403, "Forbidden")
    with pytest.raises(ApiError):
        owner_reads(c.RAYCLUSTER_KIND, NS, CLUSTER, 1.0)


def test_owner_reads_have_a_client_without_retries() -> None:
    """urllib3 would retry a timed-out GET three times, each with the whole timeout."""
    config = Configuration()
    config.host = "https://127.0.0.1:1"
    owner_reads = OwnerReads.connect(config, "v1")
    assert owner_reads.rest.api_client.configuration.retries is False
    assert config.retries is None
