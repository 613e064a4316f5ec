"""certs.inject against real webhook configurations.

The configurations made here match no object (an objectSelector on a label
nothing carries, failurePolicy Ignore), so other tests sharing the cluster
never call them.
"""

from __future__ import annotations

import base64
import contextlib
import uuid
from collections.abc import Iterator

import pytest

from raykueue.certs.inject import inject_ca_bundle
from raykueue.certs.issue import cert_to_pem, new_ca
from raykueue.kube.resources import MUTATING_WEBHOOK_CONFIGURATIONS, VALIDATING_WEBHOOK_CONFIGURATIONS
from raykueue.kube.rest import ApiError, Rest


def webhook(name: str) -> dict:
    return {
        "name": name,
        "clientConfig": {"url": "https://127.0.0.1:1/never"},
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                   "resources": ["configmaps"]}],
        "objectSelector": {"matchLabels": {"kube-test.example.io/never": "true"}},
        "failurePolicy": "Ignore",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 1,
    }


@pytest.fixture
def configs(k8s) -> Iterator[tuple[Rest, str]]:
    rest = Rest(k8s)
    name = f"kube-test-inject-{uuid.uuid4().hex[:8]}"
    for resource, kind in ((MUTATING_WEBHOOK_CONFIGURATIONS, "MutatingWebhookConfiguration"),
                           (VALIDATING_WEBHOOK_CONFIGURATIONS, "ValidatingWebhookConfiguration")):
        rest.create(resource.path(), {
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
            "metadata": {"name": name},
            "webhooks": [webhook(f"one.{name}.example.io"), webhook(f"two.{name}.example.io")]})
    yield rest, name
    for resource in (MUTATING_WEBHOOK_CONFIGURATIONS, VALIDATING_WEBHOOK_CONFIGURATIONS):
        with contextlib.suppress(ApiError):
            rest.delete(resource.path(name=name))


def bundles(rest: Rest, name: str) -> list[bytes]:
    out = []
    for resource in (MUTATING_WEBHOOK_CONFIGURATIONS, VALIDATING_WEBHOOK_CONFIGURATIONS):
        for hook in rest.get(resource.path(name=name))["webhooks"]:
            out.append(base64.b64decode(hook["clientConfig"].get("caBundle", "")))
    return out


def test_inject_sets_every_bundle_then_is_a_no_op(configs: tuple[Rest, str]) -> None:
    rest, name = configs
    ca_pem = cert_to_pem(new_ca("inject test", 1)[0])
    assert inject_ca_bundle(rest, ca_pem, name, name) == 4
    assert bundles(rest, name) == [ca_pem] * 4

    before = rest.get(MUTATING_WEBHOOK_CONFIGURATIONS.path(name=name))["metadata"]
    assert inject_ca_bundle(rest, ca_pem, name, name) == 0
    after = rest.get(MUTATING_WEBHOOK_CONFIGURATIONS.path(name=name))["metadata"]
    assert after["resourceVersion"] == before["resourceVersion"]


def test_inject_rotates_to_a_new_ca(configs: tuple[Rest, str]) -> None:
    rest, name = configs
    old = cert_to_pem(new_ca("old", 1)[0])
    new = cert_to_pem(new_ca("new", 1)[0])
    inject_ca_bundle(rest, old, name, name)
    assert inject_ca_bundle(rest, new, name, name) == 4
    assert bundles(rest, name) == [new] * 4


def test_missing_configuration_is_skipped(configs: tuple[Rest, str]) -> None:
    rest, name = configs
    ca_pem = cert_to_pem(new_ca("x", 1)[0])
    assert inject_ca_bundle(rest, ca_pem, f"{name}-absent", name) == 2
