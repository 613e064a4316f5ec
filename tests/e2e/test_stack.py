"""The e2e tier: real Kueue admits, real kube-scheduler binds, kwok runs, KubeRay creates pods."""

from __future__ import annotations

import json
import uuid

from testkit.waiting import wait_for

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"


def _condition(obj: dict, ctype: str) -> str | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == ctype:
            return c["status"]
    return None


def _cq_total(cq: dict, field: str, flavor: str, resource: str) -> int:
    """Milli-units of `resource` in status.<field> (flavorsReservation / flavorsUsage)."""
    for f in (cq.get("status") or {}).get(field) or []:
        if f["name"] == flavor:
            for r in f["resources"]:
                if r["name"] == resource:
                    return _milli(r["total"])
    return 0


def _milli(q: str) -> int:
    if q.endswith("m"):
        return int(q[:-1])
    return int(float(q) * 1000)


def test_kwok_nodes_are_ready_with_capacity(e2e_stack):
    nodes = e2e_stack.api.get("/api/v1/nodes", query={"labelSelector": "type=kwok"})["items"]
    assert len(nodes) >= e2e_stack.config.nodes.count
    for n in nodes:
        assert _condition(n, "Ready") == "True"
        for res in ("cpu", "memory", "nvidia.com/gpu", "pods"):
            assert res in n["status"]["allocatable"], (res, n["status"]["allocatable"])


def test_plain_pod_is_scheduled_and_runs(e2e_stack, new_namespace, kubectl):
    ns = new_namespace("pod")
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "plain", "namespace": ns},
        "spec": {"containers": [{"name": "c", "image": "busybox",
                                 "resources": {"requests": {"cpu": "100m"}}}]},
    }
    kubectl("create", "-f", "-", input=json.dumps(pod), check=True)
    path = f"/api/v1/namespaces/{ns}/pods/plain"
    got = wait_for(
        lambda: (p := e2e_stack.api.get(path))["status"].get("phase") == "Running" and p,
        timeout=60, message=lambda: f"pod to run: {e2e_stack.api.get(path).get('status')}")
    assert got["spec"]["nodeName"].startswith(e2e_stack.config.nodes.prefix)
    wait_for(lambda: _condition(e2e_stack.api.get(path), "Ready") == "True",
             timeout=30, message="pod Ready")


def test_workload_is_admitted_by_kueue(e2e_stack):
    api = e2e_stack.api
    s = e2e_stack.config.samples
    name = f"wl-{uuid.uuid4().hex[:8]}"
    ns = s.local_queue_namespace
    cq_path = f"{KUEUE}/clusterqueues/{s.cluster_queue}"
    before = _cq_total(api.get(cq_path), "flavorsReservation", s.flavor, "cpu")
    workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "queueName": s.local_queue,
            "priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass",
                                 "name": "ray-worker"},
            "priority": 100,
            "podSets": [{
                "name": "main", "count": 1,
                "template": {"spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox",
                                    "resources": {"requests": {"cpu": "1"}}}],
                }},
            }],
        },
    }
    wl_path = f"{KUEUE}/namespaces/{ns}/workloads/{name}"
    api.call("POST", f"{KUEUE}/namespaces/{ns}/workloads", workload)
    try:
        wl = wait_for(
            lambda: (w := api.get(wl_path)).get("status", {}).get("admission") and w,
            timeout=60, message=lambda: f"admission of {name}: {api.get(wl_path).get('status')}")
        assert _condition(wl, "QuotaReserved") == "True"
        assert _condition(wl, "Admitted") == "True"
        admission = wl["status"]["admission"]
        assert admission["clusterQueue"] == s.cluster_queue
        assert admission["podSetAssignments"][0]["flavors"]["cpu"] == s.flavor
        wait_for(lambda: _cq_total(api.get(cq_path), "flavorsReservation", s.flavor, "cpu")
                 >= before + 1000, timeout=30,
                 message=lambda: f"ClusterQueue usage: {api.get(cq_path).get('status')}")
        cq = api.get(cq_path)
        assert cq["status"]["admittedWorkloads"] >= 1
    finally:
        api.delete(wl_path)
    # deleting the Workload releases its quota
    wait_for(lambda: _cq_total(api.get(cq_path), "flavorsReservation", s.flavor, "cpu") <= before,
             timeout=60, message="quota to be released")


def test_raycluster_makes_kuberay_create_pods(e2e_stack, new_namespace, kubectl):
    ns = new_namespace("ray")
    container = {"name": "ray", "image": "rayproject/ray:2.52.0",
                 "resources": {"requests": {"cpu": "500m", "memory": "1Gi"},
                               "limits": {"cpu": "500m", "memory": "1Gi"}}}
    raycluster = {
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": "rc", "namespace": ns},
        "spec": {
            "rayVersion": "2.52.0",
            "headGroupSpec": {
                "rayStartParams": {},
                "template": {"spec": {"containers": [{**container, "name": "ray-head"}]}},
            },
            "workerGroupSpecs": [{
                "groupName": "workers", "replicas": 2, "minReplicas": 0, "maxReplicas": 4,
                "rayStartParams": {},
                "template": {"spec": {"containers": [{**container, "name": "ray-worker"}]}},
            }],
        },
    }
    kubectl("apply", "-f", "-", input=json.dumps(raycluster), check=True)

    def pods() -> dict[str, list[dict]]:
        items = e2e_stack.api.get(f"/api/v1/namespaces/{ns}/pods",
                                  query={"labelSelector": "ray.io/cluster=rc"})["items"]
        out: dict[str, list[dict]] = {}
        for p in items:
            out.setdefault(p["metadata"]["labels"].get("ray.io/node-type"), []).append(p)
        return out

    got = wait_for(lambda: (p := pods()) and len(p.get("head", [])) == 1
                   and len(p.get("worker", [])) == 2 and p,
                   timeout=90, message=lambda: f"KubeRay pods: "
                   f"{ {k: len(v) for k, v in pods().items()} }")
    head = got["head"][0]
    assert head["metadata"]["labels"]["ray.io/group"] == "headgroup"
    assert any(o["kind"] == "RayCluster" and o["name"] == "rc"
               for o in head["metadata"]["ownerReferences"])
    assert {p["metadata"]["labels"]["ray.io/group"] for p in got["worker"]} == {"workers"}
    # Without raykueue's webhook they are ordinary pods: scheduled onto kwok nodes and run.
    wait_for(lambda: all(p["status"].get("phase") == "Running"
                         for group in pods().values() for p in group),
             timeout=90, message=lambda: "ray pods Running: " + str(
                 [(p["metadata"]["name"], p["status"].get("phase"))
                  for g in pods().values() for p in g]))
    # KubeRay also made the head Service (needs --service-cluster-ip-range)
    wait_for(lambda: e2e_stack.api.get(f"/api/v1/namespaces/{ns}/services")["items"],
             timeout=30, message="the head Service")
