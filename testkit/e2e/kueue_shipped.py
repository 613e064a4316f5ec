"""What tests/e2e/test_kueue_shipped.py shares with other tests (so that no test module imports another).
That module: raykueue beside Kueue as users install it: its Ray and pod integrations on, its webhooks
registered.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from raykueue.controller import workload as w
from raykueue.core import contract as c
from raykueue.kube.resources import MUTATING_WEBHOOK_CONFIGURATIONS, crd
from raykueue.kube.rest import ApiError, Rest
from testkit.e2e.controller import (
    RAYCLUSTERS,
    WORKLOADS,
    describe,
    raycluster,
    settled,
)
from testkit.invariants import Invariants
from testkit.pods import role
from testkit.waiting import wait_for

RAYJOBS = crd("ray.io", "v1", "rayjobs")


RAYSERVICES = crd("ray.io", "v1", "rayservices")


JOBS = crd("batch", "v1", "jobs")


@pytest.fixture(scope="module", autouse=True)
def kueue_as_shipped(admin: Rest) -> None:
    try:
        admin.get(MUTATING_WEBHOOK_CONFIGURATIONS.path(name="kueue-mutating-webhook-configuration"))
    except ApiError as exc:
        pytest.fail(f"the e2e stack does not run Kueue as shipped (its webhooks are not registered): {exc}")


@contextlib.contextmanager
def watched(admin: Rest, ns: str) -> Iterator[Invariants]:
    with Invariants(admin, ns) as inv:
        yield inv
    inv.assert_held()


def opted_in_cluster(name: str, workers: int, queue_label: bool = True) -> dict[str, Any]:
    obj = raycluster(name, workers)
    if not queue_label:
        obj["metadata"]["labels"].pop(c.QUEUE_LABEL)
    return obj


def raykueue_runs_it(api: Rest, ns: str, cluster: str, running_workers: int, gated_workers: int,
                     local_queue: str) -> dict[str, Any]:
    """One raykueue Workload per pod, head priority above workers, workers only after the head."""
    s = wait_for(settled(api, ns, cluster, running_workers, gated_workers), timeout=120,
                 message=describe(api, ns, cluster))
    head = next(p for p in s["pods"] if role(p) == "head")
    head_wl = s["owned"][head["metadata"]["uid"]][0]
    admitted_at = w.condition(head_wl, w.ADMITTED)["lastTransitionTime"]
    for p in s["pods"]:
        labels = p["metadata"]["labels"]
        assert labels[c.QUEUE_LABEL] == local_queue and labels[c.MANAGED_BY_LABEL] == c.MANAGED_BY_VALUE
        assert c.KUEUE_MANAGED_LABEL not in labels
        assert c.KUEUE_POD_FINALIZER not in (p["metadata"].get("finalizers") or [])
        (wl,) = s["owned"][p["metadata"]["uid"]]
        assert w.is_ours(wl) and w.queue_name(wl) == local_queue
        refs = wl["metadata"]["ownerReferences"]
        assert [(ref["kind"], ref["uid"], ref.get("controller")) for ref in refs] == [
            ("Pod", p["metadata"]["uid"], False)]
        if role(p) == "worker":
            assert wl["spec"]["priority"] < head_wl["spec"]["priority"]
            assert wl["metadata"]["creationTimestamp"] >= admitted_at
    return s


def no_kueue_workload_for(admin: Rest, ns: str, kind: str, name: str) -> None:
    for wl in admin.get(WORKLOADS.path(ns))["items"]:
        for ref in wl["metadata"].get("ownerReferences") or []:
            assert (ref["kind"], ref["name"]) != (kind, name), f"Kueue made {wl['metadata']['name']}"


def _owned_cluster(admin: Rest, ns: str, kind: str, owner: str) -> str:
    def find() -> str | None:
        for rc in admin.get(RAYCLUSTERS.path(ns))["items"]:
            for ref in rc["metadata"].get("ownerReferences") or []:
                if (ref["kind"], ref["name"]) == (kind, owner):
                    return rc["metadata"]["name"]
        return None
    return wait_for(find, timeout=60, message=f"KubeRay's RayCluster for {kind} {owner}")
