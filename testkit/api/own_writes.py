"""What tests/api/test_own_writes.py shares with other tests (so that no test module imports another). That
module: What raykueue's own ServiceAccount may write: RBAC, then the shipped ValidatingAdmissionPolicy.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from raykueue.kube.rest import ApiError, Rest
from testkit.waiting import wait_for

POLICY = Path(__file__).resolve().parents[2] / "manifests" / "own-writes-policy.yaml"


ADMISSION = "/apis/admissionregistration.k8s.io/v1"


DRY_RUN = {"dryRun": "All"}


def policy_docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(POLICY.read_text()) if d]


def plural(kind: str) -> str:
    return {"ValidatingAdmissionPolicy": "validatingadmissionpolicies",
            "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings"}[kind]


@contextlib.contextmanager
def enforced(rest: Rest, probe: Callable[[], None]) -> Iterator[None]:
    """The shipped policy and its binding, created, and in force once `probe` is refused."""
    made = []
    for doc in policy_docs():
        path = f"{ADMISSION}/{plural(doc['kind'])}"
        rest.create(path, doc)
        made.append(f"{path}/{doc['metadata']['name']}")
    try:
        # The API server loads policies through an informer: a moment after the create.
        wait_for(lambda: refusal(probe) is not None, timeout=30, interval=0.2,
                 message="the policy to be in force")
        yield
    finally:
        for path in reversed(made):
            with contextlib.suppress(ApiError):
                rest.delete(path)
        # ... and out of force again only a moment after the delete: the next test
        # first shows what RBAC alone lets through.
        wait_for(lambda: refusal(probe) is None, timeout=30, interval=0.2,
                 message="the policy to be out of force")


def refusal(write: Callable[[], Any]) -> str | None:
    """The policy's refusal of `write`, or None when the write is let through."""
    try:
        write()
    except ApiError as exc:
        assert exc.status in (403, 422), exc
        text = str(exc)
        assert "raykueue-own-writes" in text, text
        return text
    return None


@pytest.fixture(autouse=True)
def _no_policy_left(admin) -> Iterator[None]:
    yield
    for doc in policy_docs():
        with contextlib.suppress(ApiError):
            admin.delete(f"{ADMISSION}/{plural(doc['kind'])}/{doc['metadata']['name']}")
