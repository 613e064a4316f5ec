"""The Workload lifecycle end to end: real KubeRay, Kueue, kube-scheduler, kwok.

KubeRay creates the pods, raykueue's webhook gates them, raykueue's controller
(in `raykueue serve`) makes their Workloads, real Kueue admits or preempts, and
kube-scheduler binds the ungated pods to kwok's fake nodes, where they run.
Each test gets its own namespace, ResourceFlavor (placing pods on the kwok
nodes through nodeLabels), ClusterQueue and LocalQueue `team-a`.
"""

from __future__ import annotations

import json
import os
import signal

from raykueue.controller import workload as w
from raykueue.core import contract as c
from raykueue.kube.resources import PODS
from testkit.e2e.controller import (
    CQS,
    KUEUE,
    RAYCLUSTERS,
    WORKLOADS,
    WPCS,
    cq_cpu_reaches,
    describe,
    raycluster,
    settled,
    workloads,
)
from testkit.pods import gated, role, running
from testkit.stackfixtures import keep_logs_if_failed, new_namespace  # noqa: F401 - fixture
from testkit.waiting import wait_for

# --- Must show ------------------------------------------------------------------------------


def test_quota_for_four_then_scale_down_admits_the_waiting_two(admin, controller, queue):
    ns = queue(cpu="5", memory="5Gi")  # the head and 4 workers
    admin.create(RAYCLUSTERS.path(ns), raycluster("rc", 6))

    s = wait_for(settled(admin, ns, "rc", 4, 2), timeout=120,
                 message=describe(admin, ns, "rc"))
    head = next(p for p in s["pods"] if role(p) == "head")
    head_wl = s["owned"][head["metadata"]["uid"]][0]
    admitted_at = w.condition(head_wl, w.ADMITTED)["lastTransitionTime"]
    # Head first: no worker's Workload existed before the head's was admitted.
    for p in s["pods"]:
        if role(p) == "worker":
            assert s["owned"][p["metadata"]["uid"]][0]["metadata"]["creationTimestamp"] >= \
                admitted_at
    waiting = [p for p in s["pods"] if gated(p)]
    names = [s["owned"][p["metadata"]["uid"]][0]["metadata"]["name"] for p in waiting]

    def kueue_says_why() -> str | None:
        for name in names:
            wl = admin.get(WORKLOADS.path(ns, name))
            assert not w.is_quota_reserved(wl)
            cond = w.condition(wl, w.QUOTA_RESERVED) or {}
            if cond.get("status") == "False" and cond.get("message"):
                return str(cond["message"])
        return None

    # Kueue's words, e.g. "couldn't assign flavors to pod set main: insufficient
    # unused quota for cpu in flavor ..., 1 more needed". Kueue writes them on
    # one of two identical Workloads only: it skips the twin of one it found
    # inadmissible (scheduling equivalence) without a status update.
    assert "quota" in wait_for(kueue_says_why, timeout=30, message="Kueue's pending message")
    for p in s["pods"]:
        if running(p):
            assert p["spec"]["nodeSelector"]["type"] == "kwok"  # the flavor's placement

    # Scale-down as the autoscaler does it: fewer replicas, these two go.
    victims = sorted(p["metadata"]["name"] for p in s["pods"]
                     if role(p) == "worker" and running(p))[:2]
    admin.merge_patch(RAYCLUSTERS.path(ns, "rc"), {"spec": {"workerGroupSpecs": [{
        "groupName": "cpu", "replicas": 4, "minReplicas": 0, "maxReplicas": 100,
        "rayStartParams": {}, "template": raycluster("rc", 4)["spec"]["workerGroupSpecs"][0][
            "template"], "scaleStrategy": {"workersToDelete": victims}}]}})
    after = wait_for(settled(admin, ns, "rc", 4, 0), timeout=120,
                     message=describe(admin, ns, "rc"))
    names = {p["metadata"]["name"] for p in after["pods"]}
    assert not names & set(victims)
    assert {p["metadata"]["name"] for p in waiting} <= names  # the same two, now running
    cq_cpu_reaches(admin, ns, 5000)


def test_preemption_takes_workers_never_the_head(admin, controller, queue):
    ns = queue(cpu="5", memory="5Gi", preemption=True)
    admin.create(RAYCLUSTERS.path(ns), raycluster("rc", 4))
    before = wait_for(settled(admin, ns, "rc", 4, 0), timeout=120,
                      message=describe(admin, ns, "rc"))
    head_uid = next(p["metadata"]["uid"] for p in before["pods"] if role(p) == "head")
    workers_before = {p["metadata"]["uid"] for p in before["pods"] if role(p) == "worker"}

    # A more important Workload needing two workers' worth of quota.
    high = f"e2e-high-{ns}"
    admin.create(WPCS.path(), {"apiVersion": WPCS.api_version, "kind": "WorkloadPriorityClass",
                               "metadata": {"name": high}, "value": 5000})
    try:
        admin.create(WORKLOADS.path(ns), {
            "apiVersion": WORKLOADS.api_version, "kind": "Workload",
            "metadata": {"name": "urgent"},
            "spec": {"queueName": "team-a", "priority": 5000,
                     "priorityClassRef": {"group": KUEUE, "kind": "WorkloadPriorityClass",
                                          "name": high},
                     "podSets": [{"name": "main", "count": 2, "template": {"spec": {
                         "restartPolicy": "Never",
                         "containers": [{"name": "c", "image": "busybox", "resources": {
                             "requests": {"cpu": "1", "memory": "1Gi"}}}]}}}]}})
        wait_for(lambda: w.is_admitted(admin.get(WORKLOADS.path(ns, "urgent"))), timeout=120,
                 message="the urgent Workload to be admitted by preempting")
        after = wait_for(settled(admin, ns, "rc", 2, 2), timeout=120,
                         message=describe(admin, ns, "rc"))
    finally:
        admin.delete(WPCS.path(None, high))
    head_now = next(p for p in after["pods"] if role(p) == "head")
    assert head_now["metadata"]["uid"] == head_uid  # the head was never taken
    workers_now = {p["metadata"]["uid"] for p in after["pods"] if role(p) == "worker"}
    assert len(workers_before - workers_now) == 2  # two evicted, deleted ...
    replaced = [p for p in after["pods"] if p["metadata"]["uid"] in workers_now - workers_before]
    assert len(replaced) == 2 and all(gated(p) for p in replaced)  # ... and recreated gated
    finished = [x for x in workloads(admin, ns)
                if w.pod_uid_of(x) in workers_before - workers_now]
    for wl in finished:  # unless the collector was quicker
        assert w.is_finished(wl) or wl["metadata"].get("deletionTimestamp")


def test_controller_killed_during_a_50_pod_scale_up(admin, controller, queue):
    # The head asks 100m; a worker 200m, the request of KubeRay's wait-gcs-ready
    # init container, which Kueue counts as it exceeds the 100m container.
    # So the head and 30 workers fit, 20 wait.
    ns = queue(cpu="6100m", memory="31Gi")
    admin.create(RAYCLUSTERS.path(ns), raycluster("rc", 0, cpu="100m", memory="1Gi"))
    wait_for(settled(admin, ns, "rc", 0, 0), timeout=120, message=describe(admin, ns, "rc"))

    spec = raycluster("rc", 50, cpu="100m", memory="1Gi")["spec"]["workerGroupSpecs"]
    admin.merge_patch(RAYCLUSTERS.path(ns, "rc"), {"spec": {"workerGroupSpecs": spec}})
    wait_for(lambda: len(workloads(admin, ns)) >= 10, timeout=60, message="10 Workloads")
    assert controller.proc is not None
    os.killpg(controller.proc.pid, signal.SIGKILL)
    controller.proc.wait(timeout=10)
    controller.proc = None
    controller.start()

    final = wait_for(settled(admin, ns, "rc", 30, 20), timeout=240,
                     message=describe(admin, ns, "rc"))
    assert len(final["pods"]) == 51
    assert all(n == 1 for n in final["counts"].values())  # exactly one Workload each
    # Kueue writes the ClusterQueue's status after the Workloads' own, on its
    # own schedule: read it once it has caught up, and fail if it never does.
    def admitted() -> int:
        return admin.get(CQS.path(None, f"e2e-{ns}")).get("status", {}).get("admittedWorkloads")

    wait_for(lambda: admitted() == 31, timeout=60,  # the head and 30 workers
             message=lambda: f"ClusterQueue admittedWorkloads == 31, is {admitted()}")
    assert admitted() == 31
    cq_cpu_reaches(admin, ns, 100 + 30 * 200)


def test_a_user_removing_the_gate_is_denied(admin, kubectl, controller, queue):
    ns = queue(cpu="1", memory="1Gi")  # the head only
    admin.create(RAYCLUSTERS.path(ns), raycluster("rc", 1))
    s = wait_for(settled(admin, ns, "rc", 0, 1), timeout=120, message=describe(admin, ns, "rc"))
    worker = next(p for p in s["pods"] if role(p) == "worker")
    # alice may edit pods in the namespace: only the webhook stands in her way.
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}"
    admin.create(f"{rbac}/roles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "pod-editor"},
        "rules": [{"apiGroups": [""], "resources": ["pods"],
                   "verbs": ["get", "list", "patch", "update"]}]})
    admin.create(f"{rbac}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "alice-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "pod-editor"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                      "name": "alice"}]})
    patch = json.dumps([{"op": "remove", "path": "/spec/schedulingGates"}])

    def denied() -> str | None:
        out = kubectl("patch", "pod", worker["metadata"]["name"], "-n", ns, "--as=alice",
                      "--type=json", "-p", patch)
        last.append(out.stderr or out.stdout)
        return out.stderr if out.returncode != 0 and "denied" in out.stderr else None

    last: list[str] = []
    message = wait_for(denied, timeout=30,
                       message=lambda: f"the gate removal to be denied: {last[-1:]}")
    assert c.GATE in message and "raykueue explain" in message
    assert gated(admin.get(PODS.path(ns, worker["metadata"]["name"])))
