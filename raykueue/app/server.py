"""The ASGI application: admission endpoints plus health, readiness and metrics.

The admission paths (the pods' two, the Ray objects' two) are served by a
lean ASGI handler placed in front of FastAPI rather than by a FastAPI route.
They are hit on every Ray pod creation and update; FastAPI's request and
response machinery (routing, dependency solving, middleware) costs more than
the decision itself. Everything else is an ordinary FastAPI route, where
clarity beats microseconds.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from raykueue.app.logs import DecisionLog
from raykueue.app.metrics import ADMISSIONS
from raykueue.core import contract as c
from raykueue.core.objects import display_name
from raykueue.webhooks.admit import Outcome
from raykueue.webhooks.review import (
    BadReview,
    Review,
    ReviewResponse,
    encode,
    encode_error,
    parse,
    request_uid,
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Decide = Callable[[Review], Outcome]

log = logging.getLogger("raykueue.admission")

_JSON_HEADERS = [(b"content-type", b"application/json")]


class BodyTooLarge(Exception):
    pass


@dataclass(frozen=True)
class Readiness:
    """A named check the /readyz page reports; `probe` returns (ok, detail)."""

    name: str
    probe: Callable[[], tuple[bool, str]]


def whole_body(first: Message, limit: int) -> bytes | None:
    """The body when the first message holds all of it (the common case: its size is
    known, so no header is looked up), else None: `read_body` reads the rest."""
    if first["type"] != "http.request" or first.get("more_body", False):
        return None
    body = first.get("body", b"")
    if len(body) > limit:
        raise BodyTooLarge(f"body of {len(body)} bytes exceeds the limit of {limit}")
    return body


async def read_body(receive: Receive, limit: int, scope: Scope, first: Message) -> bytes:
    """A body in several messages, from its first; a declared length over the limit is
    refused before the rest is read."""
    declared = _content_length(scope)
    if declared is not None and declared > limit:
        raise BodyTooLarge(f"body of {declared} bytes exceeds the limit of {limit}")
    chunks: list[bytes] = []
    size = 0
    message = first
    while True:
        if message["type"] == "http.disconnect":
            raise ConnectionError("client went away")
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"body exceeds the limit of {limit} bytes")
        if not message.get("more_body", False):
            return b"".join(chunks)
        message = await receive()


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _respond(send: Send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": _JSON_HEADERS})
    await send({"type": "http.response.body", "body": body})


class AdmissionEndpoint:
    """POST handler for one webhook: read, parse, decide, answer, account.

    A body that is not an AdmissionReview gets a 400 with the reason; an
    exception inside a decision is logged and answered with a denial that
    says so, never by dropping the connection or stopping the server. A
    decision that comes back with a follow-up (an owner the caches lack, read
    from the API server) has it run in a worker thread: a slow or absent API
    server holds up that review alone, never the event loop.
    """

    def __init__(self, webhook: str, decide: Decide, max_body_bytes: int) -> None:
        self.webhook = webhook
        self.decide = decide
        self.max_body_bytes = max_body_bytes
        self._decisions = DecisionLog()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            await _respond(send, 405, encode_error("use POST with an AdmissionReview body"))
            return
        try:
            # Read here, not in a coroutine of its own: one review, one fewer frame.
            first = await receive()
            body = whole_body(first, self.max_body_bytes)
            if body is None:
                body = await read_body(receive, self.max_body_bytes, scope, first)
        except BodyTooLarge as exc:
            ADMISSIONS.count_bad(self.webhook)
            await _respond(send, 400, encode_error(str(exc)))
            return
        except ConnectionError:
            return
        start = time.perf_counter()
        try:
            review = parse(body)
        except BadReview as exc:
            ADMISSIONS.count_bad(self.webhook)
            log.warning("bad AdmissionReview on %s: %s", self.webhook, exc,
                        extra={"uid": request_uid(body)})
            await _respond(send, 400, encode_error(str(exc)))
            return
        try:
            outcome = self.decide(review)
            if outcome.follow_up is not None:
                outcome = await asyncio.to_thread(outcome.follow_up)
        except Exception:
            log.exception("decision failed", extra={"uid": review.uid})
            outcome = Outcome(
                ReviewResponse(False, code=500, message="raykueue failed to decide on this pod; "
                        "see the raykueue server log for the request uid " + review.uid),
                "error",
            )
        payload = encode(review.uid, outcome.verdict)
        elapsed = time.perf_counter() - start
        await send({"type": "http.response.start", "status": 200, "headers": _JSON_HEADERS})
        await send({"type": "http.response.body", "body": payload})
        ADMISSIONS.record(self.webhook, outcome.decision, outcome.role or "none", elapsed)
        self._log(review, outcome, elapsed)

    def _log(self, review: Review, outcome: Outcome, elapsed: float) -> None:
        # Names and decisions only: pod specs carry env vars and may hold secrets.
        self._decisions.emit(
            "admission decision",
            {
                "webhook": self.webhook,
                "uid": review.uid,
                "namespace": review.namespace,
                "pod": display_name(review.object),
                "operation": review.operation,
                "role": outcome.role,
                "decision": outcome.decision,
                "gated": outcome.decision == "gated",
                "queue": outcome.queue,
                "priority": outcome.priority,
                "reason": outcome.reason,
                "dry_run": review.dry_run,
                # To the microsecond, half up: a third of the cost of round(ms, 3).
                "latency_ms": int(elapsed * 1_000_000 + 0.5) / 1000,
            },
        )


def build_app(mutate: Decide, validate: Decide, readiness: list[Readiness],
              max_body_bytes: int, more: Mapping[str, tuple[str, Decide]] | None = None) -> ASGIApp:
    """The ASGI app; `more` maps further admission paths to (webhook name, decision)."""
    api = FastAPI(
        title="raykueue",
        description="Per-pod Kueue admission for KubeRay clusters. The admission paths "
        f"{', '.join([c.MUTATE_PATH, c.VALIDATE_PATH, *(more or {})])} take admission.k8s.io/v1 "
        "AdmissionReviews.",
        docs_url=None,
        redoc_url=None,
    )

    @api.get("/healthz")
    def healthz() -> dict[str, str]:
        # Alive means the event loop answers; readiness is a separate question.
        return {"status": "ok"}

    @api.get("/readyz")
    def readyz() -> JSONResponse:
        checks = {}
        ready = True
        for check in readiness:
            ok, detail = check.probe()
            checks[check.name] = {"ok": ok, "detail": detail}
            ready = ready and ok
        return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)

    @api.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    endpoints = {
        c.MUTATE_PATH: AdmissionEndpoint("mutate", mutate, max_body_bytes),
        c.VALIDATE_PATH: AdmissionEndpoint("validate", validate, max_body_bytes),
    }
    for path, (webhook, decide) in (more or {}).items():
        endpoints[path] = AdmissionEndpoint(webhook, decide, max_body_bytes)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            endpoint = endpoints.get(scope["path"])
            if endpoint is not None:
                await endpoint(scope, receive, send)
                return
        await api(scope, receive, send)

    app.fastapi = api  # type: ignore[attr-defined]
    return app
