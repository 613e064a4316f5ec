"""AdmissionReview fixtures and small edits of them, shared by the tests and the benchmarks.

The fixtures under testkit/fixtures are KubeRay head and worker pod creations in
the shape the API server sends them: defaulted spec, managedFields,
ownerReferences, a service account's userInfo.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from raykueue.core.objects import gate_names

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
    return _set_meta(review, "labels", key, value)


def set_annotation(review: dict[str, Any], key: str, value: str | None) -> dict[str, Any]:
    return _set_meta(review, "annotations", key, value)


def _set_meta(review: dict[str, Any], field: str, key: str, value: str | None) -> dict[str, Any]:
    """A copy of `review` whose pod has metadata.<field>[key] set, or removed for None."""
    review = copy.deepcopy(review)
    entries = pod_of(review)["metadata"].setdefault(field, {})
    if value is None:
        entries.pop(key, None)
    else:
        entries[key] = value
    return review


def creatable_pod(role: str) -> dict[str, Any]:
    """The recorded KubeRay pod, minus what the API server fills in on create.

    What is left can be POSTed to a real API server in any namespace: no
    owner (the garbage collector would delete a pod whose owner is missing),
    no token volume or service account (admission adds its own), no secret
    reference, no resolved priority.
    """
    pod = copy.deepcopy(pod_of(head_review() if role == "head" else worker_review()))
    for key in ("managedFields", "creationTimestamp", "ownerReferences"):
        pod["metadata"].pop(key, None)
    spec = pod["spec"]
    spec["volumes"] = [v for v in spec["volumes"] if not v["name"].startswith("kube-api-access")]
    for container in spec["containers"] + spec.get("initContainers", []):
        container["volumeMounts"] = [m for m in container.get("volumeMounts", [])
                                     if not m["name"].startswith("kube-api-access")]
        container["env"] = [e for e in container.get("env", [])
                            if "secretKeyRef" not in e.get("valueFrom", {})]
    for key in ("serviceAccount", "priority"):
        spec.pop(key, None)
    pod.pop("status", None)
    return pod


def gates(pod: dict[str, Any] | None) -> list[str]:
    """Names of the pod's scheduling gates (none for a pod that is gone)."""
    return gate_names(pod or {})


def update_review(old_pod: dict[str, Any], new_pod: dict[str, Any], username: str) -> dict[str, Any]:
    review = head_review()
    request = review["request"]
    request["operation"] = "UPDATE"
    request["object"] = new_pod
    request["oldObject"] = old_pod
    request["userInfo"] = {"username": username, "groups": ["system:authenticated"]}
    request["options"] = {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"}
    return review
