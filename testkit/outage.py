"""What the outage and uninstall scenarios share: raykueue's processes, Ray objects as users
write them, and reads of what users see (pods, Workloads, Events, the CLI's output)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import devstack
from raykueue.controller import workload as w
from raykueue.core import contract as c
from raykueue.kube.resources import PODS
from raykueue.kube.rest import Rest
from testkit.quota_invariants import RAY, WORKLOADS, gated_by_raykueue, running
from testkit.reads import get_or_none
from testkit.servers import REPO_ROOT, RaykueueServer

ADMIN = "raykueue-admin"  # the CN of devstack's admin certificate: the controller runs as it
EVENTS_PATH = "/api/v1/namespaces/{ns}/events"


class Raykueue:
    """Every raykueue replica of a scenario: one serving the webhooks (registered with the
    API server by URL, failing closed as shipped) and one running the controller."""

    def __init__(self, stack: devstack.Stack, workdir: Path) -> None:
        (workdir / "webhooks").mkdir(parents=True)
        (workdir / "controller").mkdir(parents=True)
        self.webhooks = RaykueueServer(stack, workdir / "webhooks", args=[
            "--no-controller", "--controller-identity", ADMIN,
            "--controller-identity", c.DEFAULT_CONTROLLER_IDENTITY])
        self.controller = RaykueueServer(stack, workdir / "controller", register=False,
                                         env={"RAYKUEUE_LEADER_ELECTION": "false",
                                              "RAYKUEUE_LOG_LEVEL": "WARNING"})

    def start(self) -> Raykueue:
        self.webhooks.start()
        self.controller.start()
        return self

    def stop(self) -> None:
        """Every replica stopped; the webhook configurations stay, as in an outage."""
        self.controller.stop()
        self.webhooks.stop()

    def close(self) -> None:
        self.controller.stop()
        self.webhooks.close()


@pytest.fixture
def raykueue(e2e_stack: devstack.Stack, tmp_path: Path) -> Iterator[Raykueue]:
    pair = Raykueue(e2e_stack, tmp_path / "raykueue").start()
    try:
        yield pair
    finally:
        pair.close()


# --- Ray objects, as users write them ------------------------------------------------------


def cluster_spec(workers: int, *, cpu: str = "500m", autoscaling: bool = False) -> dict[str, Any]:
    def container(role: str) -> dict[str, Any]:
        return {"name": f"ray-{role}", "image": "rayproject/ray:2.46.0",
                "resources": {"requests": {"cpu": cpu, "memory": "512Mi"},
                              "limits": {"cpu": cpu, "memory": "512Mi"}}}

    spec: dict[str, Any] = {
        "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [container("head")]}}},
        "workerGroupSpecs": [{"groupName": "cpu", "replicas": workers, "minReplicas": 0, "maxReplicas": 10,
                              "rayStartParams": {},
                              "template": {"spec": {"containers": [container("worker")]}}}],
    }
    if autoscaling:
        spec["enableInTreeAutoscaling"] = True
        # KubeRay's sidecar asks 500m by default; the head's quota counts it (Kueue's too).
        spec["autoscalerOptions"] = {"resources": {"requests": {"cpu": "100m", "memory": "256Mi"},
                                                   "limits": {"cpu": "100m", "memory": "256Mi"}}}
    return spec


def ray_object(kind: str, name: str, workers: int, *, opted_in: bool, queue: str | None = None,
               cpu: str = "500m", autoscaling: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if opted_in:
        meta["annotations"] = {c.STANDALONE_ANNOTATION: "true"}
    if queue:
        meta["labels"] = {c.QUEUE_LABEL: queue}
    cluster = cluster_spec(workers, cpu=cpu, autoscaling=autoscaling)
    if kind == c.RAYCLUSTER_KIND:
        spec = cluster
    elif kind == c.RAYJOB_KIND:
        # HTTPMode: KubeRay submits through the head's dashboard (devstack's proxy answers
        # 502 for a head no Ray process stands in for), so no submitter pod completes on kwok
        # and ends the job; the RayJob keeps its cluster for as long as the scenario needs.
        spec = {"entrypoint": "python -c 'print(1)'", "submissionMode": "HTTPMode",
                "shutdownAfterJobFinishes": True, "rayClusterSpec": cluster}
    else:
        spec = {"rayClusterConfig": cluster}
    return {"apiVersion": "ray.io/v1", "kind": kind, "metadata": meta, "spec": spec}


# --- reads ---------------------------------------------------------------------------------


def clusters_of(admin: Rest, ns: str, kind: str, name: str) -> list[dict[str, Any]]:
    """The RayClusters of an object: itself, or the ones its RayJob / RayService made."""
    if kind == c.RAYCLUSTER_KIND:
        found = get_or_none(admin, RAY[kind].path(ns, name))
        return [found] if found is not None else []
    return [rc for rc in admin.get(RAY[c.RAYCLUSTER_KIND].path(ns))["items"]
            if any(ref.get("kind") == kind and ref.get("name") == name
                   for ref in rc["metadata"].get("ownerReferences") or [])]


def pods_of(admin: Rest, ns: str, cluster: str) -> list[dict[str, Any]]:
    return [p for p in admin.get(PODS.path(ns), {"labelSelector": f"{c.CLUSTER_LABEL}={cluster}"})["items"]
            if not p["metadata"].get("deletionTimestamp")]


def ray_pods(admin: Rest, ns: str) -> list[dict[str, Any]]:
    selector = f"{c.NODE_TYPE_LABEL} in (head,worker)"
    return [p for p in admin.get(PODS.path(ns), {"labelSelector": selector})["items"]
            if not p["metadata"].get("deletionTimestamp")]


def kueue_workload(admin: Rest, ns: str, kind: str, name: str) -> dict[str, Any] | None:
    """Kueue's own Workload for a whole Ray object, if it made one."""
    for wl in admin.get(WORKLOADS.path(ns))["items"]:
        if not w.is_ours(wl) and any((ref.get("kind"), ref.get("name")) == (kind, name)
                                     for ref in wl["metadata"].get("ownerReferences") or []):
            return wl
    return None


def raykueue_workloads(admin: Rest, ns: str | None = None) -> list[dict[str, Any]]:
    return [wl for wl in admin.get(WORKLOADS.path(ns), {
        "labelSelector": f"{c.MANAGED_BY_LABEL}={c.MANAGED_BY_VALUE}"})["items"]]


def runs(admin: Rest, ns: str, kind: str, name: str, workers: int
         ) -> Callable[[], list[dict[str, Any]] | None]:
    """The object's RayCluster has its head and `workers` workers Running: its pods, else None."""
    def check() -> list[dict[str, Any]] | None:
        clusters = clusters_of(admin, ns, kind, name)
        if len(clusters) != 1:
            return None
        pods = pods_of(admin, ns, clusters[0]["metadata"]["name"])
        roles = sorted(p["metadata"]["labels"].get(c.NODE_TYPE_LABEL, "") for p in pods)
        ok = roles == ["head", *["worker"] * workers] and all(running(p) for p in pods)
        return pods if ok else None
    return check


def warning_events(admin: Rest, ns: str, name: str, needle: str) -> list[dict[str, Any]]:
    """Warning Events about the object `name` whose message contains `needle`."""
    return [e for e in admin.get(EVENTS_PATH.format(ns=ns))["items"]
            if e.get("type") == "Warning" and (e.get("involvedObject") or {}).get("name") == name
            and needle in (e.get("message") or "")]


def untouched_by_raykueue(pod: dict[str, Any]) -> bool:
    labels = pod["metadata"].get("labels") or {}
    return not gated_by_raykueue(pod) and c.MANAGED_BY_LABEL not in labels


# --- the CLI -------------------------------------------------------------------------------


def raykueue_cli(stack: devstack.Stack, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """`raykueue ARGS --kubeconfig <the stack's admin>`, as an admin runs it; its output is printed."""
    result = subprocess.run([sys.executable, "-m", "raykueue.app.cli", *args,
                             "--kubeconfig", str(stack.kubeconfig)],
                            capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT)
    print(f"\n$ raykueue {' '.join(args)}  (exit {result.returncode})\n{result.stdout}{result.stderr}")
    return result
