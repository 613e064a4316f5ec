"""What tests/api/test_install.py shares with other tests (so that no test module imports another). That
module: `kubectl apply -k manifests/` for real, on the real API server, then uninstall.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import devstack
from raykueue.core import contract as c
from testkit.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]


MANIFESTS = ROOT / "manifests"


NAMESPACE = "raykueue-system"


SERVICE_ACCOUNT = "raykueue"


CONFIGS = c.WEBHOOK_CONFIGS


ADMISSION = "/apis/admissionregistration.k8s.io/v1"


WORKLOADS = "/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads"


WPCS = "/apis/kueue.x-k8s.io/v1beta2/workloadpriorityclasses"


FLAVORS = "/apis/kueue.x-k8s.io/v1beta2/resourceflavors"


def config_path(plural: str, name: str = "") -> str:
    return f"{ADMISSION}/{plural}" + (f"/{name}" if name else "")


def ours_left(api) -> list[str]:
    return [item["metadata"]["name"]
            for plural in sorted({plural for plural, _ in CONFIGS})
            for item in api.get(config_path(plural))["items"]
            if item["metadata"]["name"] in {n for _, n in CONFIGS}]


def wait_namespace_gone(api, name: str) -> None:
    wait_for(lambda: api.get_or_none(f"/api/v1/namespaces/{name}") is None, timeout=180,
             interval=0.5, message=f"namespace {name} to be deleted")


@pytest.fixture(scope="module")
def installed(api_stack: devstack.Stack) -> Iterator[devstack.Stack]:
    api = api_stack.api
    saved = []
    for plural, name in CONFIGS:
        found = api.get_or_none(config_path(plural, name))
        if found is not None:
            meta = found["metadata"]
            found["metadata"] = {k: meta[k] for k in ("name", "labels", "annotations") if k in meta}
            saved.append((plural, found))
            api.delete(config_path(plural, name))
    # A previous run's uninstall may still be finishing.
    wait_namespace_gone(api, NAMESPACE)
    out = api_stack.kubectl("apply", "-k", str(MANIFESTS), timeout=180)
    assert out.returncode == 0, out.stderr
    try:
        yield api_stack
    finally:
        api_stack.kubectl("delete", "-k", str(MANIFESTS), "--ignore-not-found", timeout=240)
        wait_namespace_gone(api, NAMESPACE)
        for plural, obj in saved:
            api.call("POST", config_path(plural), obj)


def _admit(api, wl: dict[str, Any], flavor: str) -> None:
    """Kueue's part, as testkit/standins.py plays it."""
    meta = wl["metadata"]
    (pod_set,) = wl["spec"]["podSets"]
    now = "2026-01-01T00:00:00Z"
    conditions = [{"type": t, "status": "True", "reason": t, "message": t, "lastTransitionTime": now,
                   "observedGeneration": meta.get("generation", 1)}
                  for t in ("QuotaReserved", "Admitted")]
    body = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "status": {"admission": {"clusterQueue": "cq", "podSetAssignments": [{
                "name": pod_set["name"], "count": 1, "flavors": {"cpu": flavor, "memory": flavor},
                "resourceUsage": {"cpu": "1", "memory": "1Gi"}}]},
                "conditions": conditions}}
    installed_path = WORKLOADS.format(ns=meta["namespace"]) + f"/{meta['name']}/status"
    api.call("PATCH", installed_path, body, query={"fieldManager": "kueue-admission", "force": "true"},
             content_type="application/apply-patch+yaml")
