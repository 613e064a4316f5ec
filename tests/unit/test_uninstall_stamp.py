"""raykueue/uninstall/stamp.py: which RayClusters still need the stamp, and `raykueue stamp` over a fake API.

The fake runs no admission: a test that wants raykueue's first webhook to stamp
on the update does it in `before_next["patch"]`, as the API server's mutating
admission would before the patch is stored. tests/api/test_stamp.py runs the
command against the real API server and raykueue's webhooks.
"""

from __future__ import annotations

import copy
from typing import Any

from raykueue.core import contract as c
from raykueue.kube.rest import ApiError
from raykueue.uninstall import stamp as legacy
from tests.fakeapi import FakeApi

STAMP = {c.OPTED_IN_LABEL: c.OPTED_IN_VALUE}


def cluster(name: str, *, ns: str = "team-a", opted_in: bool = True,
            stamped: tuple[bool, ...] = (False, False),
            recreate: bool = False, deleting: bool = False) -> dict[str, Any]:
    """`stamped`: the head's template, then each worker group's."""
    head, *workers = ({"metadata": {"labels": dict(STAMP) if s else {}}} for s in stamped)
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}",
                            "annotations": {c.STANDALONE_ANNOTATION: "true"} if opted_in else {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-04T10:00:00Z"
    spec: dict[str, Any] = {"headGroupSpec": {"template": head},
                            "workerGroupSpecs": [{"groupName": f"g{i}", "template": t}
                                                 for i, t in enumerate(workers)]}
    if recreate:
        spec["upgradeStrategy"] = {"type": "Recreate"}
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta, "spec": spec}


def test_only_opted_in_clusters_with_an_unstamped_template_are_listed() -> None:
    # Opted in before raykueue was installed, with Kueue's queue label: Kueue admits it
    # whole and the first webhook leaves it unstamped on purpose.
    kueues_whole = cluster("kueues-whole")
    kueues_whole["metadata"]["labels"] = {c.QUEUE_LABEL: "team-a"}
    found = legacy.unstamped([
        cluster("b-legacy"),
        cluster("a-one-group-unstamped", stamped=(True, True, False)),
        cluster("stamped", stamped=(True, True, True)),
        cluster("theirs", opted_in=False),
        cluster("going", deleting=True),
        kueues_whole,
        cluster("recreates", ns="team-b", recreate=True),
    ])
    assert [(u.namespace, u.name) for u in found] == [
        ("team-a", "a-one-group-unstamped"), ("team-a", "b-legacy"), ("team-b", "recreates")]
    assert [u.recreates_pods for u in found] == [False, False, True]
    assert "recreates its pods" in str(found[2])
    assert legacy.unstamped([cluster("opted-out", opted_in=False, stamped=(True, True))]) == []


def test_the_update_changes_nothing_and_is_held_to_the_clusters_uid() -> None:
    (found,) = legacy.unstamped([cluster("rc")])
    assert legacy.nudge(found) == [{"op": "test", "path": "/metadata/uid", "value": "uid-team-a-rc"}]


def _api(*clusters: dict[str, Any]) -> FakeApi:
    api = FakeApi([legacy.RAYCLUSTERS])
    for obj in clusters:
        api.put("rayclusters", obj)
    return api


def _stamp_on_update(api: FakeApi, ns: str, name: str) -> None:
    """What raykueue's first webhook does to the update of an opted-in, unstamped RayCluster."""
    def webhook() -> None:
        with api.unrecorded():
            obj = copy.deepcopy(api.get_obj("rayclusters", ns, name))
            assert obj is not None
            for t in [obj["spec"]["headGroupSpec"]["template"]] + [
                    g["template"] for g in obj["spec"]["workerGroupSpecs"]]:
                t["metadata"].setdefault("labels", {}).update(STAMP)
            api.put("rayclusters", obj)
    api.before_next["patch"] = webhook


def test_a_dry_run_lists_and_writes_nothing() -> None:
    api, said = _api(cluster("rc"), cluster("theirs", opted_in=False)), []
    assert legacy.run(api, act=False, out=said.append) == legacy.OK  # type: ignore[arg-type]
    assert api.writes() == []
    assert "RayCluster team-a/rc" in "\n".join(said) and "theirs" not in "\n".join(said)
    assert "--yes" in said[-1]


def test_stamped_through_the_webhook_then_nothing_is_left() -> None:
    api, said = _api(cluster("rc")), []
    _stamp_on_update(api, "team-a", "rc")
    assert legacy.run(api, act=True, out=said.append) == legacy.OK  # type: ignore[arg-type]
    assert api.writes() == [("patch", "rayclusters")]
    assert legacy.unstamped(api.of("rayclusters")) == []
    assert "no-legacy-pods" in said[-1] and "legacyPodWebhook=false" in said[-1]
    said.clear()
    assert legacy.run(api, act=True, out=said.append) == legacy.OK  # type: ignore[arg-type]
    assert api.writes() == [("patch", "rayclusters")]  # nothing more to do
    assert said == [f"raykueue stamp: every opted-in RayCluster is stamped; {legacy.DROP_LEGACY}"]


def test_an_update_no_webhook_stamped_fails_and_says_why() -> None:
    api, said = _api(cluster("rc")), []
    assert legacy.run(api, act=True, out=said.append) == legacy.FAILED  # type: ignore[arg-type]
    assert any("still not stamped" in line and "aa-raykueue-first" in line for line in said)


def test_a_refused_update_fails_with_the_api_servers_reason() -> None:
    api, said = _api(cluster("rc")), []
    api.fail_next["patch"] = ApiError(500, "InternalError", {
        "message": 'Internal error occurred: failed calling webhook "first-rayclusters.raykueue.io"'})
    assert legacy.run(api, act=True, out=said.append) == legacy.FAILED  # type: ignore[arg-type]
    assert any("not stamped: Internal error occurred: failed calling webhook" in line for line in said)
    assert "run it again" in said[-1]


def test_a_namesake_made_since_the_list_is_left_alone() -> None:
    api, said = _api(cluster("rc")), []

    def recreated() -> None:
        with api.unrecorded():
            namesake = cluster("rc")
            namesake["metadata"]["uid"] = "uid-namesake"
            api.put("rayclusters", namesake)
    api.before_next["patch"] = recreated
    assert legacy.run(api, act=True, out=said.append) == legacy.OK  # type: ignore[arg-type]
    assert any("gone meanwhile" in line for line in said)
    assert api.get_obj("rayclusters", "team-a", "rc")["metadata"]["uid"] == "uid-namesake"  # type: ignore[index]
