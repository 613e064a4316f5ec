"""What a RayJob's pods hold in quota, judged from what users see, for the lifecycle scenarios.

`accounted(admin, ns, cpu_m, memory)` is a condition to wait for: the namespace's
ClusterQueue reserves exactly that, the live Ray pods past the gate request exactly that (each
pod as the scheduler and Kueue count it: the larger of its containers' sum and
any one init container), every live Ray pod past raykueue's gate has exactly one
admitted raykueue Workload, and no raykueue Workload is left without its pod.
Used by tests/e2e/test_rayjob_lifecycle.py and tests/ray/test_rayjob_lifecycle.py.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

from raykueue.controller import workload as w
from raykueue.core import contract as c
from raykueue.kube import resources as r
from raykueue.kube.rest import Rest
from testkit.pods import gated, role
from testkit.quota_invariants import CLUSTER_QUEUES, RAY, WORKLOADS

RAYJOBS = RAY[c.RAYJOB_KIND]
RAYCLUSTERS = RAY[c.RAYCLUSTER_KIND]
GI = 2**30


def effective_requests(pod: dict[str, Any]) -> Counter[str]:
    """A pod's requests as the scheduler (and Kueue's podSet) counts them."""
    total: Counter[str] = Counter()
    for ctr in pod["spec"].get("containers") or []:
        for name, value in ((ctr.get("resources") or {}).get("requests") or {}).items():
            total[name] += parse_quantity(value)
    for ctr in pod["spec"].get("initContainers") or []:
        for name, value in ((ctr.get("resources") or {}).get("requests") or {}).items():
            total[name] = max(total[name], parse_quantity(value))
    return total


def _pair(values: Counter[str] | dict[str, Decimal]) -> tuple[int, int]:
    return int(values.get("cpu", Decimal(0)) * 1000), int(values.get("memory", Decimal(0)))


def reserved(admin: Rest, ns: str) -> tuple[int, int]:
    """(millicores, bytes) the namespace's ClusterQueue (e2e-<ns>) reserves."""
    cq = admin.get(CLUSTER_QUEUES.path(None, f"e2e-{ns}"))
    out: Counter[str] = Counter()
    for flavor in (cq.get("status") or {}).get("flavorsReservation") or []:
        for res in flavor.get("resources") or []:
            out[res["name"]] += parse_quantity(res.get("total") or "0")
    return _pair(out)


def ray_pods(admin: Rest, ns: str) -> list[dict[str, Any]]:
    """Heads and workers not on their way out."""
    return [p for p in admin.get(r.PODS.path(ns))["items"]
            if role(p) in c.MANAGED_ROLES and not p["metadata"].get("deletionTimestamp")
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]


def ours(admin: Rest, ns: str) -> list[dict[str, Any]]:
    return [x for x in admin.get(WORKLOADS.path(ns))["items"] if w.is_ours(x)]


def snapshot(admin: Rest, ns: str) -> dict[str, Any]:
    pods = ray_pods(admin, ns)
    requested: Counter[str] = Counter()
    for pod in pods:
        if not gated(pod):  # a gated pod holds nothing yet
            requested.update(effective_requests(pod))
    workloads = ours(admin, ns)
    per_pod: dict[str, list[str]] = {}
    for wl in workloads:
        per_pod.setdefault(str(w.pod_uid_of(wl)), []).append(wl["metadata"]["name"])
    uids = {p["metadata"]["uid"] for p in pods}
    return {
        "reserved": reserved(admin, ns),
        "requested": _pair(requested),
        "pods": {p["metadata"]["name"]: {"role": role(p), "gated": gated(p),
                                         "phase": (p.get("status") or {}).get("phase"),
                                         "workloads": per_pod.get(p["metadata"]["uid"], [])}
                 for p in pods},
        "admitted": {p["metadata"]["name"] for p in pods if any(
            w.is_admitted(x) and w.pod_uid_of(x) == p["metadata"]["uid"] for x in workloads)},
        "orphans": sorted(x["metadata"]["name"] for x in workloads if w.pod_uid_of(x) not in uids),
    }


def accounted(admin: Rest, ns: str, cpu_m: int, memory: int) -> Callable[[], dict[str, Any] | None]:
    """The condition described in the module's docstring; returns the snapshot once it holds."""
    def check() -> dict[str, Any] | None:
        s = snapshot(admin, ns)
        ok = (s["reserved"] == (cpu_m, memory) and s["requested"] == (cpu_m, memory)
              and not s["orphans"]
              and all(len(p["workloads"]) == 1 for p in s["pods"].values())
              and all(name in s["admitted"] for name, p in s["pods"].items() if not p["gated"]))
        return s if ok else None
    return check


def show(admin: Rest, ns: str, want: tuple[int, int] | None = None) -> Callable[[], str]:
    def text() -> str:
        s = snapshot(admin, ns)
        s["admitted"] = sorted(s["admitted"])
        head = f"want (millicores, bytes) {want}; " if want else ""
        jobs = {j["metadata"]["name"]: {k: (j.get("status") or {}).get(k) for k in (
            "jobStatus", "jobDeploymentStatus", "rayClusterName", "message")}
            for j in admin.get(RAYJOBS.path(ns))["items"]}
        return head + json.dumps({**s, "rayjobs": jobs}, indent=1, default=str)
    return text


def status(api: Rest, ns: str, name: str) -> dict[str, Any]:
    """A RayJob's status as KubeRay wrote it last (read fresh: wait on it, never assert once)."""
    return api.get(RAYJOBS.path(ns, name)).get("status") or {}
