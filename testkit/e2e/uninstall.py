"""What tests/e2e/test_uninstall.py shares with other tests (so that no test module imports another). That
module: `raykueue uninstall`, the way out, beside Kueue as shipped (issue 20, item 4).
"""

from __future__ import annotations

from typing import Any

from raykueue.controller import workload as w
from raykueue.core import contract as c
from raykueue.kube.resources import MUTATING_WEBHOOK_CONFIGURATIONS, VALIDATING_WEBHOOK_CONFIGURATIONS
from raykueue.kube.rest import Rest
from testkit.outage import (
    pods_of,
    raykueue_workloads,
)
from testkit.quota_invariants import RAY, gated_by_raykueue, running
from testkit.waiting import wait_for


def raykueue_webhooks(admin: Rest) -> list[str]:
    return [cfg["metadata"]["name"]
            for res in (MUTATING_WEBHOOK_CONFIGURATIONS, VALIDATING_WEBHOOK_CONFIGURATIONS)
            for cfg in admin.get(res.path())["items"]
            if any(h["name"].endswith(".raykueue.io") for h in cfg.get("webhooks") or [])]


def alone_on_the_stack(admin: Rest, ns: str) -> None:
    """The uninstall acts cluster-wide: wait until no other test's opted-in object is left
    (those in a namespace being deleted, as the uninstall itself, leave to the namespace
    controller: a finalizer another test left there may hold them for long)."""
    def others() -> list[str]:
        terminating = {n["metadata"]["name"] for n in admin.get("/api/v1/namespaces")["items"]
                       if (n.get("status") or {}).get("phase") == "Terminating"}
        found = []
        for kind, res in RAY.items():
            for obj in admin.get(res.path())["items"]:
                meta = obj["metadata"]
                if meta["namespace"] not in (ns, *terminating) and (meta.get("annotations") or {}).get(
                        c.STANDALONE_ANNOTATION) == "true":
                    found.append(f"{kind} {meta['namespace']}/{meta['name']}")
        return found

    wait_for(lambda: not others(), timeout=120,
             message=lambda: f"other tests' opted-in objects to go: {others()}")


def settled_ours(admin: Rest, ns: str, cluster: str, running_workers: int, gated_workers: int
                 ) -> dict[str, Any] | None:
    """Head Running, workers as asked, each pod on exactly one raykueue Workload."""
    pods = pods_of(admin, ns, cluster)
    wls: dict[str, list[dict[str, Any]]] = {}
    for wl in raykueue_workloads(admin, ns):
        wls.setdefault(w.pod_uid_of(wl) or "", []).append(wl)
    heads = [p for p in pods if p["metadata"]["labels"].get(c.NODE_TYPE_LABEL) == "head"]
    workers = [p for p in pods if p["metadata"]["labels"].get(c.NODE_TYPE_LABEL) == "worker"]
    ok = (len(heads) == 1 and running(heads[0])
          and sum(1 for p in workers if running(p)) == running_workers
          and sum(1 for p in workers if gated_by_raykueue(p)) == gated_workers
          and len(workers) == running_workers + gated_workers
          and all(len(wls.get(p["metadata"]["uid"], [])) == 1 for p in pods))
    return {"pods": pods, "workloads": wls} if ok else None


def handed_to_kueue(admin: Rest, ns: str, kind: str, name: str, queue: str) -> dict[str, Any]:
    obj = admin.get(RAY[kind].path(ns, name))
    meta = obj["metadata"]
    assert meta["labels"][c.QUEUE_LABEL] == queue
    leftovers = [k for k in {**(meta.get("labels") or {}), **(meta.get("annotations") or {})}
                 if k == c.STANDALONE_ANNOTATION or k.startswith("raykueue.io/")]
    assert not leftovers, leftovers
    return obj
