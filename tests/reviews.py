"""AdmissionReview fixtures and small edits of them, shared by unit tests and the benchmark.

The fixtures under tests/fixtures are KubeRay head and worker pod creations in
the shape the API server sends them: defaulted spec, managedFields,
ownerReferences, a service account's userInfo.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures"


def load(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def head_review() -> dict[str, Any]:
    return load("kuberay-head-create")


def worker_review() -> dict[str, Any]:
    return load("kuberay-worker-create")


def pod_of(review: dict[str, Any]) -> dict[str, Any]:
    return review["request"]["object"]




def set_label(review: dict[str, Any], key: str, value: str | None) -> dict[str, Any]:
    review = copy.deepcopy(review)
    labels = pod_of(review)["metadata"].setdefault("labels", {})
    if value is None:
        labels.pop(key, None)
    else:
        labels[key] = value
    return review


def set_annotation(review: dict[str, Any], key: str, value: str | None) -> dict[str, Any]:
    review = copy.deepcopy(review)
    annotations = pod_of(review)["metadata"].setdefault("annotations", {})
    if value is None:
        annotations.pop(key, None)
    else:
        annotations[key] = value
    return review


def update_review(old_pod: dict[str, Any], new_pod: dict[str, Any], username: str) -> dict[str, Any]:
    review = head_review()
    request = review["request"]
    request["operation"] = "UPDATE"
    request["object"] = new_pod
    request["oldObject"] = old_pod
    request["userInfo"] = {"username": username, "groups": ["system:authenticated"]}
    request["options"] = {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"}
    return review
