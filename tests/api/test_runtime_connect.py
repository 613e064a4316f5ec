"""A replica started while the API server is down: not ready until it answers, then it gates.

Issue 21: such a replica probed /version once and ran admission-only for life;
with its certificates it still reported Ready, and the pods of RayClusters
opted in on the RayCluster passed without a gate. Here the real kube-apiserver
is stopped (etcd and its data kept), `raykueue serve` starts against it, says
on /readyz that it is connecting and why, and once the API server is back it
connects by itself, its webhook gates such a pod and its controller makes the
pod's Workload.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import devstack
from devstack.controlplane.kubeapi import KubeError
from devstack.stack import restart_component
from raykueue.core import contract as c
from testkit import reviews as rv
from testkit.servers import RaykueueServer
from testkit.stackfixtures import new_namespace  # noqa: F401 - fixture
from testkit.waiting import wait_for

RAYCLUSTERS = "/apis/ray.io/v1/namespaces/{ns}/rayclusters"
WORKLOADS = "/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads"


def readyz(server: RaykueueServer) -> tuple[int, dict[str, Any]] | None:
    """(status, body) of the server's /readyz, None while it does not listen yet."""
    if not server.ca_file.exists():
        return None
    ctx = ssl.create_default_context(cafile=str(server.ca_file))
    try:
        with urllib.request.urlopen(f"{server.url}/readyz", context=ctx, timeout=2) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


def test_started_during_an_outage_it_waits_not_ready_then_connects_and_gates(
        api_stack: devstack.Stack, new_namespace, tmp_path: Path) -> None:  # noqa: F811
    api = api_stack.api
    ns = new_namespace("blip")
    server = RaykueueServer(api_stack, tmp_path, register=False, env={
        "RAYKUEUE_PROBE_TIMEOUT_SECONDS": "1", "RAYKUEUE_CONNECT_BACKOFF_MAX_SECONDS": "1",
        "RAYKUEUE_LEASE_NAMESPACE": ns})
    seen: dict[str, Any] = {}

    def during_the_outage() -> None:
        server.start(wait_ready=False)

        def connecting() -> bool:
            answer = readyz(server)
            if answer is None:
                return False
            seen["status"], seen["body"] = answer
            return "cluster" in answer[1]["checks"]
        wait_for(connecting, timeout=60, interval=0.2,
                 message=lambda: f"/readyz to answer; it said {seen}; log:\n{server.logs()}")

    try:
        restart_component(api_stack, "kube-apiserver", while_down=during_the_outage)
        assert seen["status"] == 503, seen
        detail = seen["body"]["checks"]["cluster"]["detail"]
        assert detail.startswith("connecting to ") and api_stack.server.split("//")[1] in detail, detail

        # Back: it connects by itself, with no restart, and is ready.
        wait_for(lambda: (readyz(server) or (0,))[0] == 200, timeout=90, interval=0.5,
                 message=lambda: f"ready once the API server is back: {readyz(server)}; "
                                 f"log:\n{server.logs()}")
        devstack.register_webhooks(api_stack.kubeconfig, server.url, server.ca_pem)
        server.registered = True
        wait_for(server._called_by_api_server, timeout=30, interval=0.2,
                 message="the API server to call this server")

        # A pod of a RayCluster opted in on the RayCluster, as KubeRay creates it.
        cluster = api.call("POST", RAYCLUSTERS.format(ns=ns), {
            "apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": "rc", "annotations": {c.STANDALONE_ANNOTATION: "true",
                                                       c.QUEUE_ANNOTATION: "lq"}},
            "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": {
                "containers": [{"name": "ray-head", "image": "rayproject/ray"}]}}}}})
        head = rv.creatable_pod("head")
        head["metadata"].pop("generateName", None)
        head["metadata"].update(name=f"rc-head-{uuid.uuid4().hex[:5]}", namespace=ns,
                                ownerReferences=[{
                                    "apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "rc",
                                    "uid": cluster["metadata"]["uid"], "controller": True}])
        head["metadata"]["labels"][c.CLUSTER_LABEL] = "rc"
        # The stamp, as KubeRay copies it from the template raykueue's first webhook stamped.
        head["metadata"]["labels"][c.OPTED_IN_LABEL] = c.OPTED_IN_VALUE

        def created() -> dict[str, Any] | None:
            # The owner cache may lag the RayCluster's create by a moment: raykueue then
            # refuses the pod (KubeRay would retry), never lets it through ungated.
            try:
                return api.call("POST", f"/api/v1/namespaces/{ns}/pods", head)
            except KubeError as err:
                assert "not yet in raykueue's cache" in str(err), err
                return None
        stored = wait_for(created, timeout=30, interval=0.2, message="the head pod created")
        assert rv.gates(stored) == [c.GATE], stored["spec"].get("schedulingGates")
        wl = wait_for(lambda: (api.get(WORKLOADS.format(ns=ns))["items"] or [None])[0],
                      timeout=60, message=lambda: f"the head's Workload; log:\n{server.logs()}")
        assert wl["metadata"]["labels"][c.POD_UID_LABEL] == stored["metadata"]["uid"]
    finally:
        server.close()
