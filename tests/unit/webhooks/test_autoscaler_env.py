"""The autoscaler's allocate timeout raykueue writes into opted-in RayClusters."""

from __future__ import annotations

import copy

import jsonpatch
import pytest

from raykueue.webhooks.autoscaler_env import ALLOCATE_TIMEOUT_ENV, allocate_timeout_patch

WANTED = {"name": ALLOCATE_TIMEOUT_ENV, "value": "86400"}


def cluster(**spec) -> dict:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "rc"},
            "spec": {"enableInTreeAutoscaling": True, **spec}}


def patched(obj: dict, timeout: int | None = 86400) -> dict:
    return jsonpatch.apply_patch(obj, allocate_timeout_patch(obj["spec"], timeout))


@pytest.mark.parametrize("spec", [
    {},
    {"autoscalerOptions": {"version": "v2"}},
    {"autoscalerOptions": {"version": "v2", "env": []}},
    {"autoscalerOptions": {"env": [{"name": "FOO", "value": "1"}]}},
], ids=["no-options", "no-env", "empty-env", "other-env"])
def test_the_timeout_is_added_beside_what_is_there(spec):
    before = cluster(**copy.deepcopy(spec))
    after = patched(before)
    env = after["spec"]["autoscalerOptions"]["env"]
    assert env[-1] == WANTED
    assert env[:-1] == (spec.get("autoscalerOptions") or {}).get("env", [])
    others = {k: v for k, v in after["spec"]["autoscalerOptions"].items() if k != "env"}
    assert others == {k: v for k, v in (spec.get("autoscalerOptions") or {}).items() if k != "env"}


@pytest.mark.parametrize("var", [
    {"name": ALLOCATE_TIMEOUT_ENV, "value": "45"},
    {"name": ALLOCATE_TIMEOUT_ENV, "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
], ids=["value", "valueFrom"])
def test_the_users_value_wins(var):
    spec = {"autoscalerOptions": {"env": [{"name": "FOO", "value": "1"}, var]}}
    assert allocate_timeout_patch(cluster(**spec)["spec"], 86400) == []


def test_a_second_pass_adds_nothing():
    once = patched(cluster())
    assert allocate_timeout_patch(once["spec"], 86400) == []
    assert allocate_timeout_patch(patched(once, 600)["spec"], 600) == []  # a new setting: still the first


@pytest.mark.parametrize("spec,timeout", [
    ({"enableInTreeAutoscaling": False}, 86400),
    ({}, 86400),
    ({"enableInTreeAutoscaling": True}, None),
    ({"enableInTreeAutoscaling": True}, 0),
], ids=["autoscaler-off", "autoscaler-unset", "setting-off", "setting-zero"])
def test_nothing_without_an_autoscaler_or_a_setting(spec, timeout):
    assert allocate_timeout_patch(spec, timeout) == []


def test_the_value_is_whole_seconds_as_a_string():
    (op,) = allocate_timeout_patch(cluster()["spec"], 3600)
    assert op["value"] == {"env": [{"name": ALLOCATE_TIMEOUT_ENV, "value": "3600"}]}
