"""Quota held until the pod has stopped, on a real kubelet (issue 28, item 4).

An opted-in Ray worker pod with `terminationGracePeriodSeconds: 86400` and a preStop
hook that sleeps runs on the node tier's real kubelet (kwok deletes a pod at once, whatever its
grace period). The worker is deleted, as the autoscaler deletes one: the kubelet runs
the preStop hook, the container keeps running meanwhile, then stops. raykueue used to
delete the Workload (freeing the quota) the moment the pod got its deletionTimestamp;
now every Workload change is watched for the whole time, and the Workload must stay
admitted until the kubelet reports the container terminated, and be released promptly
after. The controller runs in-process, Kueue as shipped admits.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Any

from devstack.node import kubelet as node
from raykueue.controller import workload as w
from raykueue.core import contract as c
from raykueue.core.clock import timestamp
from raykueue.kube.resources import PODS
from raykueue.kube.rest import ApiError
from testkit.e2e.controller import (  # noqa: F401 - fixtures
    CQS,
    FLAVORS,
    LQS,
    WORKLOADS,
    admin,
    webhooks,
)
from testkit.e2e.removal_guard import InProcess, QuotaWatch
from testkit.reads import get_or_none
from testkit.stackfixtures import new_namespace  # noqa: F401 - fixture
from testkit.waiting import wait_for

PRE_STOP_SECONDS = 20
TOLERATION = {"key": node.NODE_TAINT["key"], "operator": "Equal",
              "value": node.NODE_TAINT["value"], "effect": node.NODE_TAINT["effect"]}


def bare_worker(name: str, image: str) -> dict[str, Any]:
    """An opted-in Ray worker pod of its own (no KubeRay: its injected init container
    waits for a Ray head, which the image cannot run) on the real node: a sleeping Python
    process with a day-long grace period and a preStop hook that sleeps PRE_STOP_SECONDS."""
    python = ["python", "-c"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name,
        "labels": {c.NODE_TYPE_LABEL: c.ROLE_WORKER, c.CLUSTER_LABEL: "bare"},
        "annotations": {c.STANDALONE_ANNOTATION: "true", c.QUEUE_ANNOTATION: "team-a"}},
        "spec": {
            "terminationGracePeriodSeconds": 86400,
            "tolerations": [TOLERATION],
            "nodeSelector": {node.NODE_LABEL[0]: node.NODE_LABEL[1]},
            "containers": [{
                "name": "ray-worker", "image": image, "imagePullPolicy": "Never",
                # PID 1 ignores SIGTERM unless it handles it: exit on it, as Ray does.
                "command": [*python, "import signal, sys, time; "
                            "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); "
                            "time.sleep(10**6)"],
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                              "limits": {"cpu": "100m", "memory": "64Mi"}},
                "lifecycle": {"preStop": {"exec": {"command": [
                    *python, f"import time; time.sleep({PRE_STOP_SECONDS})"]}}}}]}}


def test_a_worker_in_its_grace_period_holds_its_quota_until_the_kubelet_stops_it(
        node_stack, admin, webhooks, new_namespace) -> None:  # noqa: F811
    ns = new_namespace("grace")
    name = f"grace-{ns}"
    # A flavor with no node labels: the worker goes to the real node by its own selector.
    admin.create(FLAVORS.path(), {"apiVersion": FLAVORS.api_version, "kind": "ResourceFlavor",
                                  "metadata": {"name": name}})
    admin.create(CQS.path(), {"apiVersion": CQS.api_version, "kind": "ClusterQueue",
                              "metadata": {"name": name}, "spec": {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
        "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
            "name": name, "resources": [{"name": "cpu", "nominalQuota": "1"},
                                        {"name": "memory", "nominalQuota": "1Gi"}]}]}]}})
    admin.create(LQS.path(ns), {"apiVersion": LQS.api_version, "kind": "LocalQueue",
                                "metadata": {"name": "team-a"}, "spec": {"clusterQueue": name}})
    try:
        with InProcess(admin, ns, head_first=False):
            admin.create(PODS.path(ns), bare_worker("worker", node.raykueue_image(node_stack)))

            def worker_running() -> dict[str, Any] | None:
                for pod in admin.get(PODS.path(ns), {"labelSelector": f"{c.CLUSTER_LABEL}=bare"})["items"]:
                    states = (pod.get("status") or {}).get("containerStatuses") or []
                    if pod["spec"].get("nodeName") == node.NODE_NAME and states \
                            and all("running" in x["state"] for x in states):
                        return pod
                return None

            worker = wait_for(worker_running, timeout=240, message="the worker running on the real node")
            old = w.workload_name(worker)
            assert w.is_admitted(admin.get(WORKLOADS.path(ns, old)))
            others = {x["metadata"]["name"] for x in admin.get(WORKLOADS.path(ns))["items"]}
            with QuotaWatch(admin, ns, old, others, pod=worker["metadata"]["name"]) as quota:
                deleted_at = time.time()
                admin.delete(PODS.path(ns, worker["metadata"]["name"]))  # as the autoscaler does

                def stopped() -> dict[str, Any] | None:
                    pod = get_or_none(admin, PODS.path(ns, worker["metadata"]["name"]))
                    if pod is None:
                        return {"gone": True}
                    states = (pod.get("status") or {}).get("containerStatuses") or []
                    if states and all("terminated" in x["state"] for x in states):
                        return pod
                    return None

                # The kubelet runs the preStop hook: the container runs all along. The
                # watch fails the test the moment the Workload goes before it stops.
                done = wait_for(stopped, timeout=PRE_STOP_SECONDS + 60, interval=0.2,
                                message="the kubelet stopping the container")
                ran_for = time.time() - deleted_at
                notes = [(e.get("reason"), e.get("note")) for e in admin.get(
                    f"/apis/events.k8s.io/v1/namespaces/{ns}/events")["items"]
                    if e.get("regarding", {}).get("name") == worker["metadata"]["name"]]
                assert ran_for >= PRE_STOP_SECONDS - 1, (ran_for, notes)
                quota.stop()
                assert quota.violations == [], quota.violations
                wait_for(lambda: quota.old_gone_at is not None, timeout=30,
                         message="the Workload released once the container stopped")
                assert quota.old_gone_at is not None
                finished = None
                if "gone" not in done:
                    finished = timestamp(done["status"]["containerStatuses"][0]["state"][
                        "terminated"].get("finishedAt"))
                held = quota.old_gone_at - deleted_at
                after = quota.old_gone_at - finished if finished is not None else None
                print(f"\n[node] quota held {held:.1f}s after the delete (preStop "
                      f"{PRE_STOP_SECONDS}s), released "
                      + (f"{after:.1f}s after the container finished" if after is not None
                         else "once the pod was gone"), file=sys.stderr)
                assert held >= PRE_STOP_SECONDS - 1, held
                if after is not None:
                    assert after < 10, after  # finishedAt is whole seconds, then the status write
    finally:
        for path in (LQS.path(ns, "team-a"), CQS.path(None, name), FLAVORS.path(None, name)):
            with contextlib.suppress(ApiError):
                admin.delete(path)
