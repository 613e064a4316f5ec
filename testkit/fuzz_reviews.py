"""Malformed and hostile AdmissionReviews, generated from a seed.

Each case starts from a real review (a KubeRay head or worker creation
recorded from an API server, or an update of a gated pod) and is broken in one
of the ways a confused or hostile client could: wrong types, missing fields,
huge strings, deep nesting, odd unicode, bytes that are not JSON at all.
`must_deny` marks the cases whose answer is known whatever the junk: a user
removing raykueue's gate, with hostile content only where the rule does not
look.

Shared by the in-process unit test (every decision survives) and the API-tier
test (the HTTP server answers every one with a 4xx or an AdmissionReview).
"""

from __future__ import annotations

import copy
import json
import random
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from raykueue.core import contract as c
from testkit import reviews as rv

MUTATE, VALIDATE = c.MUTATE_PATH, c.VALIDATE_PATH
USER = "mallory"

# Strings a parser or a rule might trip on: empty, control characters, NUL,
# right-to-left and zero-width marks, astral emoji, combining marks, a
# JSON-looking string, a path-looking one, a label key without a prefix.
ODD_STRINGS = (
    "", " ", "\x00", "\x00\x01\x1f", "\u202eevil\u202c", "\u200b", "\ufeff", "🦄" * 64,
    "e\u0301" * 100, '{"kind":"AdmissionReview"}', "../../etc/passwd", "%s%n%x", "\\u0000",
    "true", "null", "0", "-1", "NaN", "ray.io/node-type", c.GATE, "head", "worker",
)


@dataclass(frozen=True)
class Case:
    path: str
    body: bytes
    kind: str  # which mutation made it, for the report
    must_deny: bool = False


# --- values -------------------------------------------------------------------


def deep(depth: int, leaf: Any = "x") -> Any:
    """Nested lists and objects, built without recursion."""
    value = leaf
    for i in range(depth):
        value = [value] if i % 2 else {"a": value}
    return value


def wrong_value(rng: random.Random) -> Any:
    pick = rng.randrange(12)
    if pick == 0:
        return None
    if pick == 1:
        return rng.choice([True, False])
    if pick == 2:
        return rng.choice([0, -1, 2**63, -(2**63), 2**64 + 1, 1e308, -0.0])
    if pick == 3:
        return rng.choice(ODD_STRINGS)
    if pick == 4:
        return []
    if pick == 5:
        return {}
    if pick == 6:
        return [rng.choice(ODD_STRINGS) for _ in range(rng.randrange(1, 5))]
    if pick == 7:
        return {rng.choice(ODD_STRINGS): rng.choice(ODD_STRINGS) for _ in range(3)}
    if pick == 8:
        return deep(rng.randrange(10, 700))
    if pick == 9:
        return "x" * rng.choice([4 * 1024, 64 * 1024])
    if pick == 10:
        points = (rng.randrange(0x20, 0x2FFFF) for _ in range(rng.randrange(1, 300)))
        return "".join(chr(x) for x in points if not 0xD800 <= x <= 0xDFFF)
    return [[[]]] * rng.randrange(1, 1000)


# --- structural mutations ---------------------------------------------------------


def paths(doc: Any, prefix: tuple[Any, ...] = (), limit: int = 4000) -> list[tuple[Any, ...]]:
    """Every path into `doc` (dict keys and list indices), breadth first."""
    out: list[tuple[Any, ...]] = []
    queue: deque[tuple[tuple[Any, ...], Any]] = deque([(prefix, doc)])
    while queue and len(out) < limit:
        here, value = queue.popleft()
        items = (value.items() if isinstance(value, dict)
                 else enumerate(value) if isinstance(value, list) else ())
        for key, child in items:
            out.append((*here, key))
            queue.append(((*here, key), child))
    return out


def _parent(doc: Any, path: tuple[Any, ...]) -> Any:
    for key in path[:-1]:
        doc = doc[key]
    return doc


def mutate_at(doc: Any, path: tuple[Any, ...], rng: random.Random) -> None:
    parent = _parent(doc, path)
    key = path[-1]
    op = rng.randrange(4)
    if op == 0:
        del parent[key]
    elif op == 1 and isinstance(parent, dict):
        parent[rng.choice(ODD_STRINGS) or "k"] = wrong_value(rng)
    else:
        parent[key] = wrong_value(rng)


# Paths a rule reads; mutations aimed here find more than random ones.
HOT = (
    ("request",), ("request", "uid"), ("request", "operation"), ("request", "object"),
    ("request", "oldObject"), ("request", "userInfo"), ("request", "userInfo", "username"),
    ("request", "namespace"), ("request", "dryRun"), ("kind",), ("apiVersion",),
    ("request", "object", "metadata"), ("request", "object", "metadata", "labels"),
    ("request", "object", "metadata", "annotations"),
    ("request", "object", "metadata", "ownerReferences"),
    ("request", "object", "metadata", "name"), ("request", "object", "spec"),
    ("request", "object", "spec", "schedulingGates"),
    ("request", "object", "spec", "containers"), ("request", "object", "spec", "nodeSelector"),
    ("request", "object", "spec", "tolerations"), ("request", "object", "spec", "priority"),
    ("request", "oldObject", "metadata", "labels"), ("request", "oldObject", "spec"),
    ("request", "oldObject", "spec", "schedulingGates"),
)


def _gated(pod: dict[str, Any]) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["metadata"]["labels"][c.QUEUE_LABEL] = "team-a"
    pod["spec"]["schedulingGates"] = [{"name": c.GATE}]
    return pod


def base_reviews() -> dict[str, dict[str, Any]]:
    head, worker = rv.head_review(), rv.worker_review()
    for review in (head, worker):
        meta = rv.pod_of(review)["metadata"]
        meta.setdefault("labels", {})[c.OPTED_IN_LABEL] = c.OPTED_IN_VALUE
        meta.setdefault("annotations", {})  # the mutations below write into it
    old = _gated(rv.pod_of(worker))
    new = copy.deepcopy(old)
    new["spec"]["schedulingGates"] = []
    return {"head": head, "worker": worker,
            "lift": rv.update_review(old, new, USER),
            "relabel": rv.update_review(old, _without_label(old, c.NODE_TYPE_LABEL), USER)}


def _without_label(pod: dict[str, Any], key: str) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["metadata"]["labels"].pop(key, None)
    return pod


# --- raw bodies -----------------------------------------------------------------


def raw_body(rng: random.Random, valid: bytes) -> tuple[bytes, str]:
    pick = rng.randrange(10)
    if pick == 0:
        return b"", "empty"
    if pick == 1:
        return valid[: rng.randrange(1, len(valid))], "truncated"
    if pick == 2:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 2048))), "random-bytes"
    if pick == 3:
        return b"[" * rng.choice([1025, 10_000, 200_000]) + b"]" * 3, "deep-array"
    if pick == 4:
        return b'{"a":' * 5000 + b"1" + b"}" * 5000, "deep-object"
    if pick == 5:
        return valid.replace(b'"uid"', b'"uid":"\\ud800","x"', 1), "lone-surrogate"
    if pick == 6:
        return b"\xef\xbb\xbf" + valid, "bom"
    if pick == 7:
        return valid.replace(b"{", b"{\xff\xfe", 1), "invalid-utf8"
    if pick == 8:
        return b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":' \
               b'{"uid":1e999,"object":NaN}}', "non-json-numbers"
    return json.dumps(rng.choice([None, 1, "x", [], [1, 2], True])).encode(), "not-an-object"


# --- the generator ------------------------------------------------------------------


def cases(n: int, seed: int, *, big: bool = True) -> Iterator[Case]:
    """`n` cases, the same ones for the same seed. `big` allows multi-MB bodies."""
    rng = random.Random(seed)
    bases = base_reviews()
    encoded = {name: json.dumps(doc).encode() for name, doc in bases.items()}
    for i in range(n):
        name = rng.choice(("head", "worker", "lift", "relabel"))
        endpoint = (MUTATE if name in ("head", "worker") else VALIDATE)
        if rng.random() < 0.2:
            endpoint = rng.choice((MUTATE, VALIDATE))  # the wrong review for the path
        pick = rng.random()
        if pick < 0.12:
            body, kind = raw_body(rng, encoded[name])
            yield Case(endpoint, body, kind)
            continue
        if 0.225 <= pick < 0.227 and big:
            # Past the server's 4 MiB limit: refused before it is parsed.
            yield Case(endpoint, encoded[name][:-1] + b" " * (5 * 1024 * 1024) + b"}",
                       "over-limit")
            continue
        doc = orjson.loads(encoded[name])  # a fresh copy, faster than deepcopy
        if pick < 0.22 and name in ("lift", "relabel"):
            # Junk only where the gate rule does not look: still denied.
            _junk_elsewhere(doc, rng, big)
            doc["request"]["uid"] = f"fuzz-{seed}-{i}"
            yield Case(VALIDATE, json.dumps(doc).encode(), f"{name}-with-junk", must_deny=True)
            continue
        if 0.22 <= pick < 0.225 and big:
            pod = doc["request"]["object"]
            pod["metadata"]["annotations"]["huge"] = "h" * rng.choice([256, 1024, 3072]) * 1024
            kind = "huge-string"
        else:
            for _ in range(rng.randrange(1, 4)):
                targets = ([p for p in HOT if _exists(doc, p)] if rng.random() < 0.5
                           else paths(doc))
                if not targets:
                    break
                mutate_at(doc, rng.choice(targets), rng)
            kind = "structural"
        try:
            body = json.dumps(doc, ensure_ascii=rng.random() < 0.5).encode()
        except RecursionError:
            # Nested past what json can write: send the nesting as text instead.
            body, kind = b'{"request":' * 3000 + b"{}" + b"}" * 3000, "deep-object"
        yield Case(endpoint, body, kind)


def _exists(doc: Any, path: tuple[Any, ...]) -> bool:
    for key in path:
        found = (isinstance(doc, dict) and key in doc) or (
            isinstance(doc, list) and isinstance(key, int) and key < len(doc))
        if found:
            doc = doc[key]
        else:
            return False
    return True


def _junk_elsewhere(doc: dict[str, Any], rng: random.Random, big: bool) -> None:
    request = doc["request"]
    for pod in (request["object"], request["oldObject"]):
        annotations = pod["metadata"].setdefault("annotations", {})
        annotations["fuzz"] = rng.choice(ODD_STRINGS[1:]) * rng.randrange(1, 50)
        pod["metadata"]["labels"]["fuzz.example.com/odd"] = rng.choice(ODD_STRINGS)
        pod["spec"]["containers"][0]["env"] = [
            {"name": rng.choice(ODD_STRINGS) or "E", "value": rng.choice(ODD_STRINGS)}]
    extra = request["object"]["metadata"]["annotations"]
    extra["deep"] = json.dumps(deep(rng.randrange(10, 500)))
    if big and rng.random() < 0.05:
        extra["huge"] = "h" * 1024 * 1024
    request["userInfo"]["extra"] = {"x": [rng.choice(ODD_STRINGS)]}
