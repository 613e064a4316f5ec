"""As it ships: raykueue's own image on a real node, installed with `kubectl apply -k manifests/`.

The image is the Dockerfile's, built here (scripts/build-image) and imported into
the node's containerd; the install is manifests/ with the image set by kustomize
(testkit/node_install.py says what the overlay adds for this stack). The API server
calls the webhooks through the `raykueue-webhook` Service (its ClusterIP, which
kube-proxy on the node sends to a pod), and raykueue reaches the API server with
its ServiceAccount token at the `kubernetes` Service: nothing of raykueue runs
outside the cluster.
"""

from __future__ import annotations

import base64
import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import devstack
from devstack.node import kubelet as node
from raykueue.core import contract as c
from testkit import node_install as inst
from testkit.e2e.controller import (  # noqa: F401 - fixtures
    RAYCLUSTERS,
    admin,
    describe,
    queue,
    raycluster,
    settled,
    state,
)
from testkit.stackfixtures import new_namespace  # noqa: F401 - fixture
from testkit.waiting import wait_for

# An opted-in Ray worker pod, created with dryRun=All: the API server calls every
# webhook (sideEffects None) and stores nothing.
PROBE = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"generateName": "rolling-probe-",
                 "labels": {c.NODE_TYPE_LABEL: c.ROLE_WORKER, c.QUEUE_LABEL: "probe"},
                 "annotations": {c.STANDALONE_ANNOTATION: "true"}},
    "spec": {"containers": [{"name": "probe", "image": "busybox"}]},
}


class Creates:
    """Pod creates at a steady rate in a thread, until stopped (or `limit` seconds)."""

    def __init__(self, stack: devstack.Stack, interval: float = 0.1, limit: float = 300) -> None:
        self.stack, self.interval, self.limit = stack, interval, limit
        self.ok = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        deadline = time.monotonic() + self.limit
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                status, body = self.stack.api.request(
                    "POST", "/api/v1/namespaces/default/pods", PROBE, query={"dryRun": "All"},
                    timeout=15)
                gated = status == 201 and c.GATE in body.decode()
                if gated:
                    self.ok += 1
                else:
                    self.failures.append(f"{status}: {body.decode()[:300]}")
            except OSError as e:
                self.failures.append(f"{type(e).__name__}: {e}")
            self._stop.wait(self.interval)  # the rate, not a wait for a condition

    def __enter__(self) -> Creates:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


@pytest.fixture(scope="module")
def installed(node_stack: devstack.Stack, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[inst.Install]:
    workdir: Path = tmp_path_factory.mktemp("kustomize")
    try:
        done = inst.install_kustomize(node_stack, workdir)
        print(f"\n[node] kubectl apply -k: 2 replicas Ready on {node.NODE_NAME} in "
              f"{done.seconds_to_ready:.1f}s ({done.image})", file=sys.stderr)
        yield done
    finally:
        inst.uninstall_kustomize(node_stack, workdir)


def test_both_replicas_run_the_built_image_on_the_real_node(node_stack, installed) -> None:
    pods = inst.deployment_pods(node_stack, installed.namespace)
    assert len(pods) == 2
    for pod in pods:
        assert pod["spec"]["nodeName"] == node.NODE_NAME
        (status,) = pod["status"]["containerStatuses"]
        assert status["ready"] and status["restartCount"] == 0, status
        assert status["image"].endswith(installed.image.split("/", 1)[1]), status["image"]
    # Spread over nodes is ScheduleAnyway: one real node takes both.


def test_read_only_root_filesystem_and_non_root_user(node_stack, installed) -> None:
    pod = inst.deployment_pods(node_stack, installed.namespace)[0]["metadata"]["name"]
    done = node_stack.kubectl("-n", installed.namespace, "exec", pod, "--", "sh", "-c",
                              "id -u; id -g; touch /opt/venv/x 2>&1; touch /tmp/ok && echo tmp-ok")
    assert done.returncode == 0, done.stderr
    uid, gid, denied, tmp = done.stdout.strip().splitlines()
    assert (uid, gid) == ("65532", "65532")
    assert "Read-only file system" in denied
    assert tmp == "tmp-ok"  # the emptyDir at /tmp is the one writable path


def test_ca_bundle_injected_from_the_shared_secret(node_stack, installed) -> None:
    secret = node_stack.api.get(
        f"/api/v1/namespaces/{installed.namespace}/secrets/raykueue-webhook-tls")
    ca = base64.b64decode(secret["data"]["ca.crt"])
    bundles = []
    for kind in inst.WEBHOOK_CONFIGS:
        for item in node_stack.api.get(f"/apis/admissionregistration.k8s.io/v1/{kind}")["items"]:
            if "raykueue" not in item["metadata"]["name"]:
                continue
            for hook in item["webhooks"]:
                # Called through the Service, never a URL.
                assert hook["clientConfig"]["service"]["name"] == "raykueue-webhook", hook["name"]
                bundles.append(base64.b64decode(hook["clientConfig"]["caBundle"]))
    assert bundles and all(b == ca for b in bundles)


def test_one_replica_holds_the_lease(node_stack, installed) -> None:
    names = {p["metadata"]["name"] for p in inst.deployment_pods(node_stack, installed.namespace)}
    lease = wait_for(lambda: (node_stack.api.get_or_none(
        f"/apis/coordination.k8s.io/v1/namespaces/{installed.namespace}/leases/raykueue-controller")
        or {}).get("spec", {}).get("holderIdentity"), timeout=60, message="a Lease holder")
    assert lease.split("_", 1)[0] in names


def test_an_opted_in_raycluster_is_admitted_pod_by_pod_through_the_service(
        node_stack, installed, admin, queue) -> None:  # noqa: F811
    calls_before = inst.webhook_calls(node_stack, "mutate-pods.raykueue.io")
    errors_before = inst.webhook_errors(node_stack)
    ns = queue("8", "16Gi")
    admin.create(RAYCLUSTERS.path(ns), raycluster("as-shipped", 2))
    # Head and both workers: each its own Workload, admitted by Kueue, its gate
    # lifted by the in-cluster controller, running on a kwok node.
    s = wait_for(settled(admin, ns, "as-shipped", 2, 0), timeout=180,
                 message=describe(admin, ns, "as-shipped"))
    assert len(s["pods"]) == 3
    for pod in s["pods"]:
        assert pod["spec"]["nodeName"] != node.NODE_NAME  # Ray pods never on the real node
        assert pod["metadata"]["labels"].get("raykueue.io/managed-by") == "raykueue"
    assert inst.webhook_calls(node_stack, "mutate-pods.raykueue.io") >= calls_before + 3
    assert inst.webhook_errors(node_stack) == errors_before
    print(f"\n[node] RayCluster admitted pod by pod: "
          f"{json.dumps({k: len(v) for k, v in state(admin, ns, 'as-shipped')['owned'].items()})}",
          file=sys.stderr)


def lease_holder(stack: devstack.Stack, ns: str) -> str:
    lease = stack.api.get_or_none(
        f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/raykueue-controller") or {}
    return lease.get("spec", {}).get("holderIdentity") or ""


def test_the_other_replica_takes_over_when_the_leader_pod_is_deleted(
        node_stack, installed, admin, queue) -> None:  # noqa: F811
    ns = installed.namespace
    leader = wait_for(lambda: lease_holder(node_stack, ns), timeout=60,
                      message="a Lease holder").split("_", 1)[0]
    t0 = time.monotonic()
    # As `kubectl delete pod` does: graceful, through preStop's 5 s sleep.
    node_stack.api.delete(f"/api/v1/namespaces/{ns}/pods/{leader}")
    new = wait_for(lambda: (h := lease_holder(node_stack, ns)) and not h.startswith(leader + "_")
                   and h, timeout=90, message="another replica to take the Lease")
    took = time.monotonic() - t0
    print(f"\n[node] leader pod {leader} deleted: {new.split('_', 1)[0]} holds the Lease "
          f"{took:.1f}s later", file=sys.stderr)
    # The new leader's controller works: a cluster made now is admitted pod by pod,
    # and no pod is left gated without a Workload.
    cluster_ns = queue("8", "16Gi")
    admin.create(RAYCLUSTERS.path(cluster_ns), raycluster("after-takeover", 1))
    wait_for(settled(admin, cluster_ns, "after-takeover", 1, 0), timeout=180,
             message=describe(admin, cluster_ns, "after-takeover"))
    inst.wait_rolled_out(node_stack, ns)  # the Deployment made a new second replica


def test_a_rolling_update_under_steady_pod_creates_drops_none(node_stack, installed) -> None:
    ns = installed.namespace
    errors_before = inst.webhook_errors(node_stack)
    before = {p["metadata"]["name"] for p in inst.deployment_pods(node_stack, ns)}
    t0 = time.monotonic()
    with Creates(node_stack) as creates:
        wait_for(lambda: creates.ok >= 10, timeout=60, message="creates under way")
        # A changed env var: a new ReplicaSet, one surge pod at a time (maxUnavailable 0).
        inst.kubectl(node_stack, "-n", ns, "set", "env", "deploy/raykueue",
                     "RAYKUEUE_LOG_LEVEL=info")
        inst.wait_rolled_out(node_stack, ns, timeout=240)
        after = {p["metadata"]["name"] for p in inst.deployment_pods(node_stack, ns)
                 if not p["metadata"].get("deletionTimestamp")}  # old ones may be in preStop
        assert not before & after, "every replica was replaced"
        # Some more once the old replicas are gone (their connections with them).
        target = creates.ok + 20
        wait_for(lambda: creates.ok >= target, timeout=60, message="creates after the update")
    print(f"\n[node] rolling update in {time.monotonic() - t0:.1f}s under {creates.ok} creates: "
          f"{len(creates.failures)} failed", file=sys.stderr)
    assert creates.failures == []
    assert inst.webhook_errors(node_stack) == errors_before


def test_the_disruption_budget_holds_a_drain_of_the_real_node(node_stack, installed) -> None:
    ns = installed.namespace
    drain = node_stack.kubectl("drain", node.NODE_NAME, "--ignore-daemonsets",
                               "--delete-emptydir-data", "--timeout=40s", timeout=120)
    try:
        # One replica may go; the other is held by minAvailable: 1, for its
        # replacement has nowhere to run (the only real node is cordoned).
        assert drain.returncode != 0, drain.stdout
        assert "disruption budget" in drain.stderr + drain.stdout
        ready = [p for p in inst.deployment_pods(node_stack, ns)
                 if inst.ready(p) and not p["metadata"].get("deletionTimestamp")]
        assert len(ready) == 1
        status, body = node_stack.api.request("POST", "/api/v1/namespaces/default/pods", PROBE,
                                              query={"dryRun": "All"})
        assert status == 201 and c.GATE in body.decode()  # still admitting
    finally:
        inst.kubectl(node_stack, "uncordon", node.NODE_NAME)
    inst.wait_rolled_out(node_stack, ns)


def test_uninstall_leaves_no_webhook_and_no_rbac(node_stack, installed) -> None:
    assert installed.workdir is not None
    inst.uninstall_kustomize(node_stack, installed.workdir)
    assert inst.raykueue_leftovers(node_stack) == []
