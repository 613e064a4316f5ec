"""After an upgrade: `raykueue stamp`, then the install without the legacy pod webhook.

On the real API server with raykueue's shipped configurations calling a live
raykueue (webhooks only; the api tier runs no KubeRay, so pods are made here as
KubeRay makes them). First the hole: with the legacy entry installed, another
team's KubeRay pod, never opted in, is sent to raykueue (failurePolicy Ignore,
but a call all the same, and up to 2 s of its creation when raykueue hangs).
Then the way off it: `raykueue stamp --yes` has raykueue's first webhook stamp a
cluster opted in before the stamp existed, and once none is left the install
without the entry (components/no-legacy-pods, legacyPodWebhook=false) sends no
unstamped pod to raykueue, while the stamped cluster's pods are still gated.
"""

from __future__ import annotations

import copy
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import devstack
from devstack.kubeapi import object_path
from devstack.webhooks import webhook_configurations
from raykueue.core import contract as c
from raykueue.uninstall import stamp as legacy
from testkit.servers import RaykueueServer, raykueue_command
from testkit.waiting import wait_for
from tests.api.test_scope import OPTED_IN, Registrations, hooks, path, pod, ray_object  # noqa: F401

REVIEWS = "raykueue_admission_requests_total"


@pytest.fixture
def ns(new_namespace) -> str:
    return new_namespace("legacy")


@pytest.fixture
def server(api_stack: devstack.Stack, hooks: Registrations, tmp_path: Path  # noqa: F811
           ) -> Iterator[RaykueueServer]:
    """raykueue's webhooks, live; `hooks` puts the stack's own registrations back after."""
    replica = RaykueueServer(api_stack, tmp_path, args=["--no-controller"])
    try:
        yield replica
    finally:
        replica.close()


def stamp(stack: devstack.Stack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*raykueue_command(), "stamp", "--kubeconfig", str(stack.kubeconfig), *args],
                          capture_output=True, text=True, timeout=120)


def reviews_of(server: RaykueueServer, create: Any) -> float:
    """How many admission reviews raykueue answered for one call of `create`."""
    before = server.metric_total(REVIEWS)
    create()
    return server.metric_total(REVIEWS) - before


def test_stamp_then_no_legacy_webhook_leaves_other_teams_pods_alone(
        api_stack: devstack.Stack, hooks: Registrations, server: RaykueueServer, ns: str) -> None:  # noqa: F811
    api = api_stack.api
    hooks.off()
    # Made before raykueue stamped templates (or before raykueue was installed).
    old = ray_object("RayCluster", "old", annotations={**OPTED_IN, c.QUEUE_ANNOTATION: "team-a"})
    old = api.call("POST", path(ns, "RayCluster"), old)
    theirs = api.call("POST", path(ns, "RayCluster"), ray_object("RayCluster", "theirs"))
    # Opted in before raykueue was installed, with Kueue's queue label: Kueue's, admitted whole.
    api.call("POST", path(ns, "RayCluster"), ray_object(
        "RayCluster", "kueues", annotations=OPTED_IN, labels={c.QUEUE_LABEL: "team-a"}))
    server.start()

    def theirs_pod() -> dict[str, Any]:
        return api.call("POST", f"/api/v1/namespaces/{ns}/pods?dryRun=All", pod(ns, theirs))

    # The hole: another team's pod is sent to raykueue (the legacy entry), and passes untouched.
    assert reviews_of(server, theirs_pod) == 1
    assert not theirs_pod()["spec"].get("schedulingGates")

    listed = stamp(api_stack)
    assert listed.returncode == legacy.OK, listed.stdout + listed.stderr
    assert f"RayCluster {ns}/old" in listed.stdout
    assert f"{ns}/theirs" not in listed.stdout and f"{ns}/kueues" not in listed.stdout
    assert "dry run" in listed.stdout
    assert api.get(path(ns, "RayCluster", "old"))["metadata"]["resourceVersion"] == \
        old["metadata"]["resourceVersion"]

    done = stamp(api_stack, "--yes")
    assert done.returncode == legacy.OK, done.stdout + done.stderr
    assert f"RayCluster {ns}/old: stamped" in done.stdout
    stamped = api.get(path(ns, "RayCluster", "old"))
    assert legacy.unstamped([stamped]) == []
    assert stamped["metadata"]["uid"] == old["metadata"]["uid"]
    assert api.get(path(ns, "RayCluster", "theirs"))["spec"] == theirs["spec"]  # never touched
    # Cluster-wide: the shared stack may hold other tests' clusters; this one is no longer listed.
    assert f"{ns}/old" not in stamp(api_stack).stdout

    # The install without the legacy entry.
    (config,) = [copy.deepcopy(o) for o in webhook_configurations(server.url, server.ca_pem)
                 if o["metadata"]["name"] == c.MUTATING_WEBHOOK_CONFIG]
    config["webhooks"] = [w for w in config["webhooks"] if w["name"] != legacy.LEGACY_WEBHOOK]
    assert len(config["webhooks"]) == 2
    current = api.get(object_path(config))["metadata"]["resourceVersion"]
    config["metadata"]["resourceVersion"] = current
    api.call("PUT", object_path(config), config)
    # The API server reads configurations through an informer: a moment after the write.
    wait_for(lambda: reviews_of(server, theirs_pod) == 0, timeout=30, interval=0.2,
             message="the API server to stop sending unstamped Ray pods to raykueue")
    for _ in range(3):
        assert reviews_of(server, theirs_pod) == 0
    # The stamped cluster's pods (the stamp comes from its templates) are raykueue's still.
    mine = pod(ns, stamped, labels=stamped["spec"]["workerGroupSpecs"][0]["template"]["metadata"]["labels"])
    gated = api.call("POST", f"/api/v1/namespaces/{ns}/pods?dryRun=All", mine)
    assert any(g["name"] == c.GATE for g in gated["spec"].get("schedulingGates") or [])
