"""Reading AdmissionReviews: what is accepted, what is a 400, what the answer looks like."""

from __future__ import annotations

import base64

import orjson
import pytest

from raykueue.webhooks.review import BadReview, ReviewResponse, encode, parse, request_uid
from testkit import reviews as rv


def test_real_review_parses_to_the_fields_rules_need() -> None:
    doc = rv.head_review()
    review = parse(orjson.dumps(doc))
    assert review.uid == doc["request"]["uid"] and len(review.uid) == 36
    assert review.operation == "CREATE"
    assert review.namespace == "team-a"
    assert review.username == doc["request"]["userInfo"]["username"] != ""
    assert review.dry_run is False
    assert review.object["metadata"]["generateName"] == "raycluster-gpu-head-"
    assert review.object["metadata"]["managedFields"][0]["manager"] == "kuberay-operator"


def test_unknown_fields_are_ignored() -> None:
    doc = rv.head_review()
    doc["futureField"] = {"x": 1}
    doc["request"]["someNewThing"] = [1, 2, 3]
    assert parse(orjson.dumps(doc)).uid == doc["request"]["uid"]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"kind": "Pod", "apiVersion": "v1"}', "expected kind AdmissionReview"),
        (b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1beta1",'
         b' "request": {}}', "expected kind AdmissionReview"),
        (b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1"}', "no request"),
        (b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",'
         b' "request": {"operation": "CREATE"}}', "uid is missing"),
        (b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",'
         b' "request": {"uid": "u", "operation": "CREATE"}}', "request.object is missing"),
        (b"[" * 5000 + b"]" * 5000, "not valid JSON"),
    ],
    ids=["syntax", "array", "wrong-kind", "v1beta1", "no-request", "no-uid", "no-object", "nest"],
)
def test_malformed_reviews_raise_with_a_reason(body: bytes, reason: str) -> None:
    with pytest.raises(BadReview, match=reason):
        parse(body)


def test_uid_of_an_unusable_review_is_recovered_when_present() -> None:
    assert request_uid(b'{"request": {"uid": "abc"}}') == "abc"
    assert request_uid(b"garbage") is None


def test_encoded_denial_carries_status_and_no_patch() -> None:
    answer = orjson.loads(encode("u1", ReviewResponse(False, message="set label x")))
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response == {
        "uid": "u1",
        "allowed": False,
        "status": {"code": 403, "message": "set label x", "reason": "Forbidden"},
    }


def test_encoded_patch_is_base64_json_patch() -> None:
    ops = [{"op": "add", "path": "/metadata/labels/a", "value": "b"}]
    response = orjson.loads(encode("u1", ReviewResponse(True, patch=ops, warnings=("w",))))["response"]
    assert response["patchType"] == "JSONPatch"
    assert orjson.loads(base64.b64decode(response["patch"])) == ops
    assert response["warnings"] == ["w"]
