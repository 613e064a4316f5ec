"""A handback gives Ray its own allocate timeout back (issue 28, item 6).

raykueue's first webhook raises the autoscaler's allocate timeout (86400 s) on an
opted-in RayCluster so that workers waiting for per-pod quota are not recycled;
a cluster handed to Kueue is admitted whole and must not keep it: the autoscaler
would not replace a worker that never starts for a day. Only the value raykueue
wrote goes; a value the user set stays.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from raykueue.core import contract as c
from raykueue.uninstall import patches as up
from raykueue.webhooks.autoscaler_env import ALLOCATE_TIMEOUT_ENV, INJECTED_ANNOTATION
from raykueue.webhooks.raypatches import first_patch
from testkit.unit.uninstall_plan import apply_all, cluster_spec, obj

ALLOCATE_TIMEOUT = 86400


def through_the_webhook(rc: dict[str, Any]) -> dict[str, Any]:
    """The RayCluster as raykueue's first webhook stores it."""
    return jsonpatch.apply_patch(copy.deepcopy(rc), first_patch(rc, "CREATE", ALLOCATE_TIMEOUT))


def env(rc: dict[str, Any]) -> list[dict[str, Any]]:
    return rc["spec"].get("autoscalerOptions", {}).get("env", [])


def handed_back(rc: dict[str, Any]) -> dict[str, Any]:
    return apply_all(copy.deepcopy(rc), up.handback_patches(c.RAYCLUSTER_KIND, rc, "q"))


def test_the_injected_timeout_is_marked_and_removed_on_handback() -> None:
    rc = obj(c.RAYCLUSTER_KIND, "rc", suspend=True, cluster=cluster_spec(autoscaling=True))
    rc["spec"]["autoscalerOptions"] = {"env": [{"name": "OTHER", "value": "1"}]}
    stored = through_the_webhook(rc)
    assert {"name": ALLOCATE_TIMEOUT_ENV, "value": "86400"} in env(stored)
    assert stored["metadata"]["annotations"][INJECTED_ANNOTATION] == "86400"
    after = handed_back(stored)
    assert env(after) == [{"name": "OTHER", "value": "1"}]
    assert INJECTED_ANNOTATION not in after["metadata"]["annotations"]


def test_a_value_the_user_set_is_neither_marked_nor_removed() -> None:
    rc = obj(c.RAYCLUSTER_KIND, "rc", suspend=True, cluster=cluster_spec(autoscaling=True))
    rc["spec"]["autoscalerOptions"] = {"env": [{"name": ALLOCATE_TIMEOUT_ENV, "value": "86400"}]}
    stored = through_the_webhook(rc)
    assert INJECTED_ANNOTATION not in stored["metadata"]["annotations"]
    assert env(handed_back(stored)) == [{"name": ALLOCATE_TIMEOUT_ENV, "value": "86400"}]


def test_a_value_the_user_changed_since_stays() -> None:
    rc = obj(c.RAYCLUSTER_KIND, "rc", suspend=True, cluster=cluster_spec(autoscaling=True))
    stored = through_the_webhook(rc)
    stored["spec"]["autoscalerOptions"]["env"][0]["value"] = "600"
    after = handed_back(stored)
    assert env(after) == [{"name": ALLOCATE_TIMEOUT_ENV, "value": "600"}]
    assert INJECTED_ANNOTATION not in after["metadata"]["annotations"]


def test_the_removal_is_tested_in_place() -> None:
    """The patch names the entry it removes: applied to a changed list it fails, never
    removing someone else's variable."""
    rc = obj(c.RAYCLUSTER_KIND, "rc", suspend=True, cluster=cluster_spec(autoscaling=True))
    stored = through_the_webhook(rc)
    ops = up.restore_allocate_timeout(c.RAYCLUSTER_KIND, stored)
    assert [op["op"] for op in ops] == ["test", "remove"]
    moved = copy.deepcopy(stored)
    moved["spec"]["autoscalerOptions"]["env"].insert(0, {"name": "NEW", "value": "x"})
    try:
        jsonpatch.apply_patch(moved, ops)
    except jsonpatch.JsonPatchTestFailed:
        return
    raise AssertionError("the removal applied to a list that changed")
