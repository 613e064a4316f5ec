"""A stamped pod whose RayCluster raykueue's cache does not hold yet, read live from the real API server.

The view's owner caches are empty and unsynced, as in a new cluster's first
moments when KubeRay's watch is ahead of raykueue's. The live reader is
raykueue's own (`OwnerReads`), here as raykueue's ServiceAccount holding the
shipped ClusterRole (impersonated, as tests/api/test_least_privilege.py does),
so the read also proves the role grants it. The decision is run as the server
runs it: from the caches first, then the follow-up.
"""

from __future__ import annotations

import contextlib
import copy
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from raykueue.app.ownerreads import OwnerReads
from raykueue.app.runtime import mutate_with, policy_from
from raykueue.app.settings import Settings
from raykueue.core import contract as c
from raykueue.kube.rest import Rest
from raykueue.webhooks.admit import Outcome
from raykueue.webhooks.reads import ClusterView
from raykueue.webhooks.review import parse
from testkit import reviews as rv
from testkit.api.admission import create, ray_pod, start_server
from testkit.api.controller import admin, as_controller, ns  # noqa: F401 - fixtures
from testkit.servers import RaykueueServer
from testkit.stackfixtures import new_namespace  # noqa: F401 - fixture

RAYCLUSTERS = f"/apis/{c.RAY_API_GROUP}/v1/namespaces/{{ns}}/rayclusters"
KINDS = (c.RAYCLUSTER_KIND, c.RAYJOB_KIND, c.RAYSERVICE_KIND)


class Unsynced:
    """An owner cache before its first list: holds nothing."""

    synced = False

    def get(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        return None


@pytest.fixture(scope="module")
def server(api_stack, tmp_path_factory) -> Iterator[RaykueueServer]:
    server = start_server(api_stack, tmp_path_factory)
    yield server
    server.close()


def view_reading(rest: Rest) -> ClusterView:
    return ClusterView({kind: Unsynced() for kind in KINDS}, Unsynced(),
                       live=OwnerReads(rest, "v1"), live_budget=2.0)


def gang_cluster(admin: Rest, ns: str, name: str) -> dict[str, Any]:  # noqa: F811
    pod_spec = {"containers": [{"name": "ray", "image": "rayproject/ray"}]}
    return admin.create(RAYCLUSTERS.format(ns=ns), {
        "apiVersion": f"{c.RAY_API_GROUP}/v1", "kind": c.RAYCLUSTER_KIND,
        "metadata": {"name": name, "namespace": ns, "annotations": {
            c.STANDALONE_ANNOTATION: "true", c.QUEUE_ANNOTATION: "lq", c.GANG_ANNOTATION: "true"}},
        "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": pod_spec}},
                 "workerGroupSpecs": [{"groupName": "gpu-group", "replicas": 2, "minReplicas": 2,
                                       "maxReplicas": 4, "rayStartParams": {},
                                       "template": {"spec": pod_spec}}]}})


def stamped_worker_of(ns: str, cluster: str, uid: str) -> bytes:  # noqa: F811
    """The recorded KubeRay worker creation, in `ns`, owned by RayCluster `cluster`, stamped."""
    review = copy.deepcopy(rv.worker_review())
    review["request"]["namespace"] = ns
    meta = review["request"]["object"]["metadata"]
    meta["namespace"] = ns
    meta["labels"][c.CLUSTER_LABEL] = cluster
    meta["labels"][c.OPTED_IN_LABEL] = c.OPTED_IN_VALUE
    meta["labels"].pop(c.QUEUE_LABEL, None)
    meta["ownerReferences"][0].update(name=cluster, uid=uid)
    return json.dumps(review).encode()


def as_served(view: ClusterView, body: bytes) -> tuple[Outcome, Outcome]:
    """The decision from the caches, then (as the endpoint does off its loop) the follow-up's."""
    first = mutate_with(view, policy_from(Settings()), parse(body))
    assert first.follow_up is not None, first
    return first, first.follow_up()


def patched(outcome: Outcome, field: str) -> dict[str, str]:
    """metadata.<field> entries the outcome's JSON patch sets."""
    found: dict[str, str] = {}
    for op in outcome.verdict.patch or []:
        if op["path"] == f"/metadata/{field}":
            found.update(op["value"])
        elif op["path"].startswith(f"/metadata/{field}/"):
            found[op["path"].rsplit("/", 1)[1].replace("~1", "/")] = op["value"]
    return found


def test_a_pod_of_an_existing_raycluster_the_cache_lacks_is_gated(
        admin: Rest, as_controller: Rest, ns: str) -> None:  # noqa: F811
    cluster = gang_cluster(admin, ns, "fresh")
    first, second = as_served(view_reading(as_controller),
                              stamped_worker_of(ns, "fresh", cluster["metadata"]["uid"]))
    assert first.decision == "denied"  # the answer without the read, replaced by the follow-up's
    assert (second.decision, second.queue) == ("gated", "lq"), second
    # Its gang base counts come from the RayCluster read live (minReplicas 2).
    assert patched(second, "labels").get(c.GANG_LABEL) == "fresh", second.verdict.patch
    assert json.loads(patched(second, "annotations")[c.GANG_MIN_ANNOTATION]) == {"gpu-group": 2}
    assert [(m, p) for m, p in as_controller.writes] == []  # a read, nothing written


def test_a_pod_of_a_missing_raycluster_is_refused_naming_it(
        admin: Rest, as_controller: Rest, ns: str) -> None:  # noqa: F811
    _, second = as_served(view_reading(as_controller), stamped_worker_of(ns, "gone", "0000"))
    assert second.decision == "denied"
    assert f"RayCluster {ns}/gone does not exist" in second.verdict.message, second.verdict.message


def test_the_replica_s_own_client_reads_it(admin: Rest, k8s, ns: str) -> None:  # noqa: F811
    """`OwnerReads.connect`, as runtime builds it: a copy of the configuration, no retries."""
    cluster = gang_cluster(admin, ns, "own-client")
    reads = OwnerReads.connect(k8s.configuration, "v1")
    got = reads(c.RAYCLUSTER_KIND, ns, "own-client", 2.0)
    assert got is not None and got["metadata"]["uid"] == cluster["metadata"]["uid"]
    assert got["spec"]["workerGroupSpecs"][0]["minReplicas"] == 2
    assert "headGroupSpec" not in got["spec"]  # kept as the cache keeps it


def test_an_api_server_that_does_not_answer_is_tried_once_within_the_budget(k8s) -> None:
    """A listener that accepts and never answers: one connection (urllib3's retries would
    make four, each with the whole timeout), ended inside the webhook's 5 s, and the
    refusal names the error."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        config = copy.deepcopy(k8s.configuration)
        config.host = f"https://127.0.0.1:{silent.getsockname()[1]}"
        view = ClusterView({kind: Unsynced() for kind in KINDS}, Unsynced(),
                           live=OwnerReads.connect(config, "v1"), live_budget=1.0)
        start = time.monotonic()
        _, second = as_served(view, stamped_worker_of("team-a", "silent", "0000"))
        took = time.monotonic() - start
        silent.setblocking(False)
        connections = []
        with contextlib.suppress(BlockingIOError):
            while True:
                connections.append(silent.accept()[0])
        for conn in connections:
            conn.close()
    assert len(connections) == 1, len(connections)
    assert second.decision == "denied"
    message = second.verdict.message
    assert "not yet in raykueue's cache" in message and "reading it from the API server failed" in message
    assert took < 5, took


def test_the_server_reads_an_owner_its_cache_cannot_hold(
        server: RaykueueServer, ns: str, kubectl) -> None:  # noqa: F811
    """Through the API server and the whole wiring: a stamped pod owned by a RayCluster that
    was never made is refused as absent (the cache alone could only say "not yet"), and
    the read is counted on /metrics."""
    before = server.metric_total("raykueue_admission_owner_reads_total")
    pod = ray_pod(ns, "worker", labels={c.OPTED_IN_LABEL: c.OPTED_IN_VALUE, c.CLUSTER_LABEL: "never-made"},
                  owner={"apiVersion": "ray.io/v1", "kind": c.RAYCLUSTER_KIND, "name": "never-made",
                         "uid": "00000000-0000-0000-0000-000000000000", "controller": True})
    result = create(kubectl, pod)
    assert result.returncode != 0, result.stdout
    assert f"RayCluster {ns}/never-made does not exist" in result.stderr, result.stderr
    assert server.metric_total("raykueue_admission_owner_reads_total") == before + 1
