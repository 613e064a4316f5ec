"""What each way a finished RayJob is cleaned up does to quota, with real Ray finishing the job.

An opted-in RayJob (HTTPMode: the KubeRay operator posts the entrypoint to the
head's dashboard, here a real Ray head standing in for the head pod, with a real Ray
worker for its one worker pod) runs its entrypoint and SUCCEEDS; then KubeRay
applies the RayJob's clean-up
(ray-operator v1.6 `rayjob_controller.go`, `handleDeletionRules`,
`handleShutdownAfterJobFinishes`):

- `deletionStrategy.deletionRules` with each policy KubeRay has: DeleteCluster (the
  RayCluster), DeleteWorkers (every worker group suspended, the head stays),
  DeleteSelf (the RayJob, its cluster with it), DeleteNone (nothing); and the
  deprecated `onSuccess`/`onFailure` form once (the same `executeDeletionPolicy`);
- `shutdownAfterJobFinishes: true` with `ttlSecondsAfterFinished`: the cluster is
  deleted once the TTL after the job's end is over, the RayJob stays.

Judged through the API: what remains holds exactly its quota (the ClusterQueue's
reservation = what its live pods request, one admitted raykueue Workload each),
what was deleted frees its quota once its pods stopped, and over the whole scenario
no Ray pod is ungated without an admitted Workload of its own, usage never exceeds
the nominal quota, and no head is stopped while its pod is meant to stay.

The cluster is fixed at one worker, without KubeRay's in-tree autoscaling: KubeRay
refuses DeleteWorkers on an autoscaled cluster. Two Ray nodes per test.
Run under `flock /tmp/raykueue-ray-tier.lock`.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest

from devstack.ray.procs import RayProcessError
from devstack.ray.runner import RayClusterRunner, RayTier
from raykueue.kube.cache import WatchCache
from raykueue.kube.rest import Rest
from testkit.e2e.kueue_shipped import watched
from testkit.quota_invariants import InvariantBroken, QuotaInvariants
from testkit.ray.figures import FIGURES
from testkit.raycluster import Seen, observed, opted_in, raycluster
from testkit.rayjob_quota import (
    GI,
    RAYCLUSTERS,
    RAYJOBS,
    accounted,
    ours,
    ray_pods,
    show,
    status,
)
from testkit.reads import get_or_none, gone
from testkit.waiting import wait_for
from testkit.watches import watching

# Head 750m / 1Gi (no autoscaler sidecar), the worker 1 CPU / 1Gi: the whole quota.
HEAD = (750, GI)
WHOLE = (1750, 2 * GI)
NOTHING = (0, 0)
# The head, then the worker, start one at a time and may be retried on a busy machine.
JOB_TIMEOUT = 420
TEARDOWN_TIMEOUT = 120
T = TypeVar("T")
TTL_SECONDS = 30  # long enough to see the quota held while it runs on a loaded machine


def fixed_cluster_spec() -> dict[str, Any]:
    """raycluster()'s head and worker group, at exactly one worker, no autoscaler."""
    spec = copy.deepcopy(raycluster("unused")["spec"])
    del spec["enableInTreeAutoscaling"], spec["autoscalerOptions"]
    spec["workerGroupSpecs"][0].update(replicas=1, minReplicas=1, maxReplicas=1)
    return spec


def rayjob(name: str, out: Path, **clean_up: Any) -> dict[str, Any]:
    return opted_in("RayJob", name, {
        # Run by Ray's job supervisor on the head, as a shell command: no driver process to
        # start (a Ray driver's imports alone take a minute on a loaded machine). The
        # scenarios are about what the clean-up frees, not about where tasks ran
        # (tests/ray/test_rayjob.py is).
        "entrypoint": f"echo done > {out}",
        "submissionMode": "HTTPMode",
        "rayClusterSpec": fixed_cluster_spec(),
        **clean_up,
    })


def deletion_strategy(policy: str, style: str) -> dict[str, Any]:
    """`policy` on success, as a deletion rule or in the deprecated onSuccess/onFailure form."""
    if style == "legacy":
        return {"deletionStrategy": {"onSuccess": {"policy": policy},
                                     "onFailure": {"policy": "DeleteCluster"}}}
    return {"deletionStrategy": {"deletionRules": [
        {"policy": policy, "condition": {"jobStatus": "SUCCEEDED"}}]}}


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


class Scenario:
    """One RayJob in one namespace, watched from before its creation to the test's end.

    Every status KubeRay writes is recorded from a watch of the RayJob: with DeleteSelf
    the RayJob may be gone before any read sees it Complete."""

    def __init__(self, admin: Rest, ns: str, inv: QuotaInvariants, seen: Seen, ray_tier: RayTier,
                 ray_runner: Callable[[str, str], RayClusterRunner], out: Path) -> None:
        self.admin, self.ns, self.inv, self.seen = admin, ns, inv, seen
        self.tier, self.ray_runner, self.out = ray_tier, ray_runner, out
        self.runner: RayClusterRunner | None = None
        self.cluster = ""
        self.statuses: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.jobs = WatchCache(admin, RAYJOBS, namespace=ns)
        self.jobs.add_handler(self._job)

    def _job(self, event: str, job: dict[str, Any]) -> None:
        with self._lock:
            self.statuses.append(job.get("status") or {})

    def _last(self, key: str) -> Any:
        with self._lock:
            return next((st[key] for st in reversed(self.statuses) if st.get(key)), None)

    def _finished(self) -> dict[str, Any] | None:
        with self._lock:
            return next((st for st in self.statuses
                         if st.get("jobDeploymentStatus") in ("Complete", "Failed")), None)

    def wait(self, fn: Callable[[], T], timeout: float, message: str | Callable[[], str]) -> T:
        def check() -> T:
            self.inv.raise_if_broken()
            self.tier.check()
            return fn()
        return wait_for(check, timeout=timeout, interval=0.5, message=message,
                        fatal=(InvariantBroken, RayProcessError))

    def run_to_success(self, body: dict[str, Any]) -> dict[str, Any]:
        created = time.monotonic()
        self.admin.create(RAYJOBS.path(self.ns), body)
        self.cluster = self.wait(lambda: self._last("rayClusterName"), timeout=60,
                                 message=show(self.admin, self.ns))
        self.runner = self.ray_runner(self.ns, self.cluster)
        done = self.wait(self._finished, timeout=JOB_TIMEOUT, message=show(self.admin, self.ns))
        assert (done.get("jobStatus"), done.get("jobDeploymentStatus")) == ("SUCCEEDED", "Complete"), done
        FIGURES.setdefault("rayjob_lifecycle_create_to_complete_s", []).append(
            round(time.monotonic() - created, 1))
        return done

    def quota(self, want: tuple[int, int]) -> dict[str, Any]:
        return self.wait(accounted(self.admin, self.ns, *want), timeout=TEARDOWN_TIMEOUT,
                         message=show(self.admin, self.ns, want))

    def uids(self) -> set[str]:
        return {p["metadata"]["uid"] for p in ray_pods(self.admin, self.ns)}

    def heads_stopped(self) -> int:
        assert self.runner is not None
        return self.runner.heads_stopped

    def all_gone(self) -> None:
        """Everything gone and the quota free; the Ray head stopped with its pod; and over the
        whole scenario every Ray pod that ran was created gated and ran on a Workload of its
        own that Kueue admitted."""
        self.wait(lambda: not ray_pods(self.admin, self.ns) and not self.admin.get(
            RAYCLUSTERS.path(self.ns))["items"], timeout=TEARDOWN_TIMEOUT, message=show(self.admin, self.ns))
        self.quota(NOTHING)
        self.wait(lambda: self.heads_stopped() == 1 and self.runner is not None and not self.runner.stopping,
                  timeout=60, message="the Ray head stopped with its pod")
        self.inv.sweep()
        seen = self.seen
        assert seen.pods_ran and seen.pods_ran <= seen.created_gated, seen.pod_names
        assert seen.pods_ran <= seen.admitted_pods, seen.pod_names
        assert len(seen.pods_ran) == 2, seen.pod_names  # the head and the one worker, never more
        assert self.out.read_text().strip() == "done", "the entrypoint never ran"


@pytest.fixture
def scenario(admin: Rest, controller, queue, ray_tier: RayTier,
             ray_runner: Callable[[str, str], RayClusterRunner], tmp_path: Path) -> Iterator[Scenario]:
    ns = queue(cpu=f"{WHOLE[0]}m", memory=f"{WHOLE[1]}")
    with (watched(admin, ns),
          QuotaInvariants(admin, [ns], quota_namespaces=[ns], cluster_queues=[f"e2e-{ns}"]) as inv,
          observed(admin, ns) as seen):
        sc = Scenario(admin, ns, inv, seen, ray_tier, ray_runner, tmp_path / "entrypoint.json")
        with watching(sc.jobs):
            yield sc
        inv.raise_if_broken()


@pytest.mark.parametrize(("policy", "style"), [
    ("DeleteCluster", "rules"), ("DeleteWorkers", "rules"), ("DeleteSelf", "rules"), ("DeleteNone", "rules"),
    ("DeleteWorkers", "legacy"),
])
def test_each_deletion_rule_frees_what_it_deletes_and_keeps_what_remains_exact(scenario, admin, policy,
                                                                                style):
    sc, ns = scenario, scenario.ns
    sc.run_to_success(rayjob("job", sc.out, **deletion_strategy(policy, style)))
    t_done = time.monotonic()
    ran = sc.uids()
    if policy == "DeleteCluster":
        # The RayJob stays (Complete); its cluster, pods and Workloads go.
        sc.wait(lambda: gone(admin, RAYCLUSTERS.path(ns, sc.cluster)) and not ray_pods(admin, ns)
                and not ours(admin, ns), timeout=TEARDOWN_TIMEOUT, message=show(admin, ns))
        sc.quota(NOTHING)
        sc.wait(lambda: status(admin, ns, "job").get("jobDeploymentStatus") == "Complete", timeout=30,
                message="the RayJob stays, Complete")
    elif policy == "DeleteSelf":
        sc.wait(lambda: gone(admin, RAYJOBS.path(ns, "job")) and not ray_pods(admin, ns)
                and gone(admin, RAYCLUSTERS.path(ns, sc.cluster)), timeout=TEARDOWN_TIMEOUT,
                message=show(admin, ns))
        sc.quota(NOTHING)
    elif policy == "DeleteWorkers":
        # Every worker group suspended: the workers go, the head stays with its quota.
        def workers_gone() -> bool:
            groups = admin.get(RAYCLUSTERS.path(ns, sc.cluster))["spec"]["workerGroupSpecs"]
            return all(g.get("suspend") is True for g in groups) and all(
                p["metadata"]["labels"].get("ray.io/node-type") == "head" for p in ray_pods(admin, ns))
        sc.wait(workers_gone, timeout=TEARDOWN_TIMEOUT, message=show(admin, ns))
        s = sc.quota(HEAD)
        heads = [name for name, p in s["pods"].items() if p["role"] == "head"]
        assert len(s["pods"]) == 1 and heads and sc.uids() <= ran, s
        assert sc.heads_stopped() == 0, "the head's Ray stopped while its pod stays"
    else:  # DeleteNone: everything stays as it ran, and holds exactly what it did.
        sc.quota(WHOLE)
        assert sc.uids() == ran and len(ran) == 2
        assert not admin.get(RAYCLUSTERS.path(ns, sc.cluster))["metadata"].get("deletionTimestamp")
        assert sc.heads_stopped() == 0
    FIGURES.setdefault("rayjob_lifecycle_complete_to_quota_settled_s", {})[f"{policy}-{style}"] = round(
        time.monotonic() - t_done, 1)
    if policy in ("DeleteWorkers", "DeleteNone"):
        admin.delete(RAYJOBS.path(ns, "job"))
    sc.all_gone()


def test_shutdown_after_the_ttl_holds_the_quota_until_then_and_frees_it_after(scenario, admin):
    sc, ns = scenario, scenario.ns
    done = sc.run_to_success(rayjob("job", sc.out, shutdownAfterJobFinishes=True,
                                    ttlSecondsAfterFinished=TTL_SECONDS))
    # Within the TTL the finished job's cluster is whole and holds exactly its quota.
    s = sc.quota(WHOLE)
    rc = admin.get(RAYCLUSTERS.path(ns, sc.cluster))
    assert not rc["metadata"].get("deletionTimestamp"), (rc["metadata"], s)
    assert sc.heads_stopped() == 0

    def deleting_since() -> float | None:
        """When the cluster's deletion began: its deletionTimestamp, or now once it is gone
        (either is no earlier than the deletion itself)."""
        rc = get_or_none(admin, RAYCLUSTERS.path(ns, sc.cluster))
        if rc is None:
            return time.time()
        stamp = rc["metadata"].get("deletionTimestamp")
        return _seconds(stamp) if stamp else None

    since = sc.wait(deleting_since, timeout=TTL_SECONDS + TEARDOWN_TIMEOUT, message=show(admin, ns))
    sc.wait(lambda: not ray_pods(admin, ns) and not ours(admin, ns), timeout=TEARDOWN_TIMEOUT,
            message=show(admin, ns))
    sc.quota(NOTHING)
    # The RayJob stays, Complete; the cluster went no sooner than the TTL after the job ended.
    sc.wait(lambda: status(admin, ns, "job").get("jobDeploymentStatus") == "Complete", timeout=30,
            message="the RayJob stays, Complete")
    end = _seconds(done["endTime"])  # KubeRay's, truncated to the second
    assert since - end >= TTL_SECONDS, (since, done["endTime"])
    FIGURES["rayjob_ttl_end_to_cluster_deleted_s"] = round(since - end, 1)
    sc.all_gone()
