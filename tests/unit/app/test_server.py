"""The ASGI app: admission endpoints over HTTP, bad input, health, readiness, metrics."""

from __future__ import annotations

import base64
import json
from functools import partial

import httpx
import orjson
import pytest

from raykueue.app.runtime import mutate_with, policy_from, validate_with
from raykueue.app.server import BodyTooLarge, Readiness, build_app, read_body, whole_body
from raykueue.app.settings import Settings
from raykueue.core import contract as c
from raykueue.webhooks.admit import Outcome
from raykueue.webhooks.reads import ClusterView
from testkit import reviews as rv

LIMIT = 64 * 1024
pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def make_app(mutate=None, readiness=None):
    mutate = mutate or partial(mutate_with, ClusterView.offline(), policy_from(Settings()))
    validate = partial(validate_with, frozenset({c.DEFAULT_CONTROLLER_IDENTITY}))
    return build_app(mutate, validate, readiness or [], LIMIT)


@pytest.fixture
def client():
    transport = httpx.ASGITransport(app=make_app())
    return httpx.AsyncClient(transport=transport, base_url="https://raykueue.test")


def gated_head() -> bytes:
    review = rv.set_label(rv.head_review(), c.OPTED_IN_LABEL, c.OPTED_IN_VALUE)
    return json.dumps(rv.set_label(review, c.QUEUE_LABEL, "team-a")).encode()


async def test_mutate_answers_a_review_with_a_patch(client: httpx.AsyncClient) -> None:
    response = await client.post(c.MUTATE_PATH, content=gated_head())
    assert response.status_code == 200
    answer = response.json()["response"]
    ops = orjson.loads(base64.b64decode(answer["patch"]))
    assert {"op": "add", "path": "/spec/schedulingGates", "value": [{"name": c.GATE}]} in ops


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{", "not valid JSON"),
        (b'{"kind": "AdmissionReview"}', "expected kind AdmissionReview"),
        (b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1"}', "no request"),
        (b"[" * 2000 + b"]" * 2000, "not valid JSON"),
        (b" " * (LIMIT + 1), "exceeds the limit"),
    ],
    ids=["syntax", "envelope", "no-request", "nesting", "oversize"],
)
async def test_bad_bodies_get_400_with_reason_and_server_keeps_serving(
    client: httpx.AsyncClient, body: bytes, reason: str
) -> None:
    response = await client.post(c.MUTATE_PATH, content=body)
    assert response.status_code == 400
    assert reason in response.json()["reason"]
    assert (await client.post(c.MUTATE_PATH, content=gated_head())).status_code == 200


async def test_oversize_body_without_content_length_is_refused(client: httpx.AsyncClient) -> None:
    async def chunks():
        for _ in range(4):
            yield b" " * (LIMIT // 2)

    response = await client.post(c.VALIDATE_PATH, content=chunks())
    assert response.status_code == 400
    assert "exceeds the limit" in response.json()["reason"]


async def test_a_declared_length_over_the_limit_is_refused_before_the_rest_is_read() -> None:
    asked = []

    async def receive():
        asked.append(1)
        return {"type": "http.request", "body": b" ", "more_body": True}

    first = {"type": "http.request", "body": b"{", "more_body": True}
    assert whole_body(first, LIMIT) is None
    scope = {"headers": [(b"content-length", str(LIMIT + 1).encode())]}
    with pytest.raises(BodyTooLarge, match="exceeds the limit"):
        await read_body(receive, LIMIT, scope, first)
    assert asked == []


async def test_a_body_in_several_messages_is_read_whole_in_order() -> None:
    rest = [{"type": "http.request", "body": b"c", "more_body": False},
            {"type": "http.request", "body": b"b", "more_body": True}]

    async def receive():
        return rest.pop()

    first = {"type": "http.request", "body": b"a", "more_body": True}
    assert await read_body(receive, LIMIT, {"headers": []}, first) == b"abc"
    assert whole_body({"type": "http.request", "body": b"abc"}, LIMIT) == b"abc"
    with pytest.raises(BodyTooLarge):
        whole_body({"type": "http.request", "body": b" " * (LIMIT + 1)}, LIMIT)


async def test_a_client_gone_mid_body_is_not_answered() -> None:
    async def receive():
        return {"type": "http.disconnect"}

    first = {"type": "http.request", "body": b"a", "more_body": True}
    with pytest.raises(ConnectionError):
        await read_body(receive, LIMIT, {"headers": []}, first)
    assert whole_body({"type": "http.disconnect"}, LIMIT) is None


async def test_a_crashing_decision_is_a_denial_not_a_crash() -> None:
    def boom(review) -> Outcome:
        raise RuntimeError("bug")

    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=make_app(mutate=boom)),
                               base_url="https://raykueue.test")
    response = await client.post(c.MUTATE_PATH, content=gated_head())
    assert response.status_code == 200
    answer = response.json()["response"]
    assert answer["allowed"] is False
    assert rv.head_review()["request"]["uid"] in answer["status"]["message"]


async def test_get_on_an_admission_path_is_405(client: httpx.AsyncClient) -> None:
    assert (await client.get(c.MUTATE_PATH)).status_code == 405


async def test_healthz_and_readyz() -> None:
    state = {"ok": False}
    checks = [Readiness("caches", lambda: (state["ok"], "waiting" if not state["ok"] else "ok"))]
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=make_app(readiness=checks)),
                               base_url="https://raykueue.test")
    assert (await client.get("/healthz")).status_code == 200
    response = await client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["caches"] == {"ok": False, "detail": "waiting"}
    state["ok"] = True
    assert (await client.get("/readyz")).status_code == 200


async def test_metrics_count_decisions_by_webhook_decision_and_role(
    client: httpx.AsyncClient,
) -> None:
    def count(text: str) -> float:
        for line in text.splitlines():
            if line.startswith("raykueue_admission_requests_total{") and (
                'decision="gated"' in line and 'role="head"' in line and 'webhook="mutate"' in line
            ):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    before = count((await client.get("/metrics")).text)
    await client.post(c.MUTATE_PATH, content=gated_head())
    metrics = (await client.get("/metrics")).text
    assert count(metrics) == before + 1
    assert "raykueue_admission_duration_seconds_bucket" in metrics


async def test_validate_denies_gate_removal_by_a_user(client: httpx.AsyncClient) -> None:
    old = rv.pod_of(rv.worker_review())
    old["metadata"]["labels"][c.QUEUE_LABEL] = "team-a"
    old["spec"]["schedulingGates"] = [{"name": c.GATE}]
    new = json.loads(json.dumps(old))
    new["spec"]["schedulingGates"] = []
    body = json.dumps(rv.update_review(old, new, "kubernetes-admin")).encode()
    answer = (await client.post(c.VALIDATE_PATH, content=body)).json()["response"]
    assert answer["allowed"] is False
    assert c.GATE in answer["status"]["message"]
