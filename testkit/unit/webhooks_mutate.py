"""What tests/unit/webhooks/test_mutate.py shares with other tests (so that no test module imports another).
That module: The mutating webhook's rules, from a real-shaped AdmissionReview to the patched pod.
"""

from __future__ import annotations

import base64
import copy
from typing import Any

import jsonpatch
import orjson

from raykueue.core import contract as c
from raykueue.core.priority import PriorityPolicy
from raykueue.webhooks.admit import admit_create
from raykueue.webhooks.classify import PodContext
from raykueue.webhooks.review import encode, parse
from testkit import reviews as rv

POLICY = PriorityPolicy()


RAYCLUSTER = {
    "kind": "RayCluster",
    "metadata": {
        "name": "raycluster-gpu",
        "namespace": "team-a",
        "labels": {c.QUEUE_LABEL: "team-a"},
        "annotations": {c.STANDALONE_ANNOTATION: "true"},
    },
}


def run(review: dict[str, Any], ctx: PodContext | None = None, policy: PriorityPolicy = POLICY):
    outcome = admit_create(parse(orjson.dumps(review)), ctx or PodContext(), policy)
    return outcome


def patched(review: dict[str, Any], outcome) -> dict[str, Any]:
    """Apply the answer the way the API server does: decode, then RFC 6902."""
    answer = orjson.loads(encode(review["request"]["uid"], outcome.verdict))["response"]
    pod = copy.deepcopy(rv.pod_of(review))
    if "patch" not in answer:
        return pod
    assert answer["patchType"] == "JSONPatch"
    ops = orjson.loads(base64.b64decode(answer["patch"]))
    return jsonpatch.apply_patch(pod, ops)
