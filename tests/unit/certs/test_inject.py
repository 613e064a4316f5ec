"""certs.inject: caBundle patches for webhook configurations."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from raykueue.certs.inject import ca_bundle_ops, config_trusts, inject_ca_bundle
from raykueue.certs.rotation import issue_material
from raykueue.kube.resources import (
    MUTATING_WEBHOOK_CONFIGURATIONS,
    VALIDATING_WEBHOOK_CONFIGURATIONS,
)
from raykueue.kube.rest import ApiError
from testkit.fakeapi import FakeApi

CA = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
B64 = base64.b64encode(CA).decode()


def config(*bundles: str | None) -> dict[str, Any]:
    hooks = []
    for i, bundle in enumerate(bundles):
        client: dict[str, Any] = {"service": {"name": "s", "namespace": "n"}}
        if bundle is not None:
            client["caBundle"] = bundle
        hooks.append({"name": f"h{i}.example.io", "clientConfig": client})
    return {"metadata": {"name": "cfg"}, "webhooks": hooks}


def test_no_ops_when_every_bundle_matches() -> None:
    assert ca_bundle_ops(config(B64, B64), CA) == []
    assert ca_bundle_ops({"webhooks": None}, CA) == []


def test_ops_only_for_differing_entries_each_guarded_by_name() -> None:
    ops = ca_bundle_ops(config(B64, "b2xk", None), CA)
    assert ops == [
        {"op": "test", "path": "/webhooks/1/name", "value": "h1.example.io"},
        {"op": "add", "path": "/webhooks/1/clientConfig/caBundle", "value": B64},
        {"op": "test", "path": "/webhooks/2/name", "value": "h2.example.io"},
        {"op": "add", "path": "/webhooks/2/clientConfig/caBundle", "value": B64},
    ]


def test_missing_client_config_is_created() -> None:
    ops = ca_bundle_ops({"webhooks": [{"name": "h"}]}, CA)
    assert ops[1] == {"op": "add", "path": "/webhooks/0/clientConfig",
                      "value": {"caBundle": B64}}


MUT = MUTATING_WEBHOOK_CONFIGURATIONS.path(name="m")
VAL = VALIDATING_WEBHOOK_CONFIGURATIONS.path(name="v")


def api(configs: dict[str, dict[str, Any]]) -> FakeApi:
    """The one fake API holding these webhook configurations, by path."""
    fake = FakeApi([MUTATING_WEBHOOK_CONFIGURATIONS, VALIDATING_WEBHOOK_CONFIGURATIONS])
    for path, body in configs.items():
        fake.store(path, {**body, "metadata": {"name": path.rsplit("/", 1)[1]}})
    return fake


def patched(fake: FakeApi) -> list[str]:
    return [path for verb, path in fake.requests if verb == "patch"]


def test_inject_patches_every_configuration() -> None:
    rest = api({MUT: config(None, None), VAL: config("b2xk")})
    assert inject_ca_bundle(rest, CA, "m", "v") == 3  # type: ignore[arg-type]
    assert patched(rest) == [MUT, VAL]
    assert [h["clientConfig"]["caBundle"] for path in (MUT, VAL)
            for h in rest.objects[path]["webhooks"]] == [B64] * 3


def test_inject_is_a_no_op_when_current() -> None:
    rest = api({MUT: config(B64), VAL: config(B64)})
    assert inject_ca_bundle(rest, CA, "m", "v") == 0  # type: ignore[arg-type]
    assert patched(rest) == []


def test_inject_skips_missing_and_unnamed_configurations() -> None:
    rest = api({VAL: config(None)})
    assert inject_ca_bundle(rest, CA, "m", "v") == 1  # type: ignore[arg-type]
    assert inject_ca_bundle(rest, CA, None, "") == 0  # type: ignore[arg-type]


def test_inject_propagates_other_errors() -> None:
    rest = api({})
    rest.fail_always["get"] = ApiError(403, "Forbidden")
    with pytest.raises(ApiError):
        inject_ca_bundle(rest, CA, "m", "v")  # type: ignore[arg-type]


def test_config_trusts_needs_the_ca_in_every_webhook() -> None:
    old, new = issue_material(["a"], []).ca_cert, issue_material(["b"], []).ca_cert
    both = base64.b64encode(old + new).decode()
    only_old = base64.b64encode(old).decode()
    assert config_trusts(config(both, both), new)
    assert not config_trusts(config(both, only_old), new)
    assert not config_trusts(config(both, None), new)
    assert not config_trusts(config("not base64!"), new)
    assert config_trusts(config(only_old), old)
    assert config_trusts({"webhooks": []}, new)
