"""Reading an AdmissionReview and writing its answer.

Only the fields a decision needs are read; the rest of the (often 10 KB) body
is left as parsed JSON and never validated field by field. Typed parsing of
the whole review costs about three times the throughput and buys nothing: the
API server is the authority on the pod's shape, and unknown fields it adds in
later versions must not break us.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"


class BadReview(ValueError):
    """The body is not an AdmissionReview we can answer; the reason is user-facing."""


@dataclass(frozen=True, slots=True)
class Review:
    """The parts of an AdmissionRequest that raykueue's rules look at."""

    uid: str
    operation: str
    namespace: str
    username: str
    dry_run: bool
    object: Mapping[str, Any]
    old_object: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class ReviewResponse:
    """A webhook's answer before it is encoded.

    `patch` is a JSONPatch (list of operations) or None; `message` explains a
    denial and is what `kubectl` prints, so it must say what to change.
    """

    allowed: bool
    patch: list[dict[str, Any]] | None = None
    message: str = ""
    code: int = 403
    warnings: tuple[str, ...] = ()


def parse(body: bytes) -> Review:
    """Parse and check the envelope of an AdmissionReview.

    Raises BadReview with a reason a human can act on. Nesting deeper than
    orjson's limit (1024) is rejected by the parser itself, which keeps a
    hostile body from exhausting the stack.
    """
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadReview(f"body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise BadReview("body is not a JSON object")
    kind, api_version = doc.get("kind"), doc.get("apiVersion")
    if kind != KIND or api_version != API_VERSION:
        raise BadReview(
            f"expected kind {KIND} of apiVersion {API_VERSION}, got kind {kind!r} "
            f"of apiVersion {api_version!r}"
        )
    req = doc.get("request")
    if not isinstance(req, dict):
        raise BadReview("AdmissionReview has no request")
    uid = req.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview("request.uid is missing")
    operation = req.get("operation")
    if not isinstance(operation, str):
        raise BadReview("request.operation is missing")
    obj = req.get("object")
    if not isinstance(obj, dict):
        raise BadReview("request.object is missing or not an object")
    old = req.get("oldObject")
    if old is not None and not isinstance(old, dict):
        raise BadReview("request.oldObject is not an object")
    user = req.get("userInfo")
    user = user if isinstance(user, dict) else {}
    return Review(
        uid=uid,
        operation=operation,
        namespace=_str(req.get("namespace")) or _str(_meta(obj).get("namespace")),
        username=_str(user.get("username")),
        dry_run=req.get("dryRun") is True,
        object=obj,
        old_object=old,
    )


def request_uid(body: bytes) -> str | None:
    """Best-effort uid of an unparseable review, so the 400 can still echo it."""
    try:
        doc = orjson.loads(body)
        uid = doc["request"]["uid"]
    except (orjson.JSONDecodeError, TypeError, KeyError):
        return None
    return uid if isinstance(uid, str) else None


def encode(uid: str, verdict: ReviewResponse) -> bytes:
    response: dict[str, Any] = {"uid": uid, "allowed": verdict.allowed}
    if verdict.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(verdict.patch)).decode("ascii")
    if not verdict.allowed:
        response["status"] = {
            "code": verdict.code,
            "message": verdict.message,
            "reason": "Forbidden" if verdict.code == 403 else "BadRequest",
        }
    if verdict.warnings:
        response["warnings"] = list(verdict.warnings)
    return orjson.dumps({"apiVersion": API_VERSION, "kind": KIND, "response": response})


def encode_error(reason: str) -> bytes:
    return orjson.dumps({"error": "bad AdmissionReview", "reason": reason})


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""
