"""RayJob lifecycles that need no finished job, on the real stack (Kueue as shipped, KubeRay).

- Suspend, then resume, an opted-in RayJob whose second worker waits for quota:
  KubeRay deletes its cluster (so every pod and raykueue Workload, the pending one
  too, goes and the quota is freed), and on resume makes a new one whose pods are
  created gated and admitted pod by pod again, as far as the quota goes.
- A RayJob with `clusterSelector` on an existing opted-in RayCluster: the cluster's
  pods are already accounted, the RayJob adds no pod and no Workload, and deleting
  it leaves the cluster's pods, Workloads and quota as they were.

Watched over the whole scenario (`QuotaInvariants`: nothing ungated without an
admitted raykueue Workload, ClusterQueue usage never above nominal); the quota is
exact after each step (testkit/rayjob_quota.py). The scenarios that need a job to
finish (deletion rules, TTL) are in tests/ray/test_rayjob_lifecycle.py.
"""

from __future__ import annotations

from typing import Any

from raykueue.kube import resources as r
from raykueue.kube.rest import Rest
from testkit.e2e.controller import (  # noqa: F401 - fixtures
    admin,
    controller,
    queue,
    raycluster,
    settled,
    webhooks,
)
from testkit.e2e.kueue_shipped import watched
from testkit.quota_invariants import QuotaInvariants
from testkit.raycluster import observed, opted_in
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
from testkit.reads import gone
from testkit.stackfixtures import new_namespace  # noqa: F401 - fixture

# raycluster(name, 1): a head and one worker of 1 CPU / 1Gi each (KubeRay's
# wait-gcs-ready init container asks less), no autoscaler.
HEAD_AND_WORKER = (2000, 2 * GI)


def rayjob(name: str, **spec: Any) -> dict[str, Any]:
    """Opted in; HTTPMode (KubeRay posts the entrypoint itself: no submitter pod, and
    this tier has no Ray dashboard, so the job stays Running for as long as the test)."""
    return opted_in("RayJob", name, {"entrypoint": "echo done", "submissionMode": "HTTPMode", **spec})


def _running(inv: QuotaInvariants, api: Rest, ns: str, want: tuple[int, int]) -> tuple[str, set[str]]:
    """The RayJob's cluster once one Workload per pod is admitted and the quota is `want`:
    its name and its pods' uids."""
    cluster = inv.wait(lambda: status(api, ns, "job").get("rayClusterName"), timeout=60,
                       message=show(api, ns))
    inv.wait(settled(api, ns, cluster, 1, 1), timeout=120, message=show(api, ns, want))
    inv.wait(accounted(api, ns, *want), timeout=60, message=show(api, ns, want))
    uids = {p["metadata"]["uid"] for p in ray_pods(api, ns)}
    inv.sweep()
    return cluster, uids


def test_a_suspended_rayjob_frees_its_quota_and_is_admitted_pod_by_pod_on_resume(
        admin, controller, queue):  # noqa: F811
    ns = queue(cpu="2", memory="2Gi")
    want = HEAD_AND_WORKER
    with (QuotaInvariants(admin, [ns], quota_namespaces=[ns], cluster_queues=[f"e2e-{ns}"]) as inv,
          observed(admin, ns) as seen):
        # KubeRay suspends only a RayJob that deletes its cluster when it finishes.
        # Two workers, quota for one: the second waits gated, its Workload pending.
        admin.create(RAYJOBS.path(ns), rayjob("job", shutdownAfterJobFinishes=True,
                                              rayClusterSpec=raycluster("x", 2)["spec"]))
        first, before = _running(inv, admin, ns, want)

        admin.merge_patch(RAYJOBS.path(ns, "job"), {"spec": {"suspend": True}})
        inv.wait(lambda: status(admin, ns, "job").get("jobDeploymentStatus") == "Suspended",
                 timeout=120, message=show(admin, ns))
        inv.wait(lambda: gone(admin, RAYCLUSTERS.path(ns, first)) and not ray_pods(admin, ns)
                 and not ours(admin, ns), timeout=120,
                 message=lambda: "the cluster, its pods and Workloads gone; " + show(admin, ns)())
        inv.wait(accounted(admin, ns, 0, 0), timeout=60, message=show(admin, ns, (0, 0)))

        admin.merge_patch(RAYJOBS.path(ns, "job"), {"spec": {"suspend": False}})
        _, after = _running(inv, admin, ns, want)

        admin.delete(RAYJOBS.path(ns, "job"))
        inv.wait(lambda: not admin.get(RAYCLUSTERS.path(ns))["items"] and not ray_pods(admin, ns),
                 timeout=120, message=show(admin, ns))
        inv.wait(accounted(admin, ns, 0, 0), timeout=60, message=show(admin, ns, (0, 0)))
        inv.raise_if_broken()
    assert len(before) == len(after) == 3 and not before & after, (before, after)
    # Each pod of the resumed cluster was created gated; the two that ran did so only
    # after a Workload of their own was admitted, and the third never ran.
    assert after <= seen.created_gated, (after, seen.pod_names)
    ran = after & seen.pods_ran
    assert len(ran) == 2 and ran <= seen.admitted_pods, (after, seen.pod_names)


def test_a_rayjob_on_an_existing_cluster_adds_nothing_and_leaves_its_accounting(
        admin, controller, queue):  # noqa: F811
    ns = queue(cpu="2", memory="2Gi")
    want = HEAD_AND_WORKER
    with (watched(admin, ns),
          QuotaInvariants(admin, [ns], quota_namespaces=[ns], cluster_queues=[f"e2e-{ns}"]) as inv):
        admin.create(RAYCLUSTERS.path(ns), raycluster("rc", 1))
        inv.wait(settled(admin, ns, "rc", 1, 0), timeout=120, message=show(admin, ns, want))
        inv.wait(accounted(admin, ns, *want), timeout=60, message=show(admin, ns, want))
        pods = {p["metadata"]["uid"] for p in ray_pods(admin, ns)}
        workloads = {x["metadata"]["uid"] for x in ours(admin, ns)}

        admin.create(RAYJOBS.path(ns), rayjob("job", clusterSelector={"ray.io/cluster": "rc"}))
        # KubeRay found the cluster Ready and went on to submit (it sets the dashboard
        # URL then): the RayJob is running on it.
        inv.wait(lambda: status(admin, ns, "job").get("dashboardURL")
                 and status(admin, ns, "job").get("rayClusterName") == "rc",
                 timeout=60, message=show(admin, ns))
        stored = admin.get(RAYCLUSTERS.path(ns, "rc"))
        assert not stored["metadata"].get("ownerReferences"), stored["metadata"]
        s = inv.wait(accounted(admin, ns, *want), timeout=60, message=show(admin, ns, want))
        assert {p["metadata"]["uid"] for p in ray_pods(admin, ns)} == pods, s
        assert {x["metadata"]["uid"] for x in ours(admin, ns)} == workloads, s
        inv.sweep()

        admin.delete(RAYJOBS.path(ns, "job"))
        inv.wait(lambda: gone(admin, RAYJOBS.path(ns, "job")), timeout=60,
                 message="KubeRay's finalizer ran and the RayJob is gone")
        s = inv.wait(accounted(admin, ns, *want), timeout=60, message=show(admin, ns, want))
        assert {p["metadata"]["uid"] for p in ray_pods(admin, ns)} == pods, s
        assert {x["metadata"]["uid"] for x in ours(admin, ns)} == workloads, s

        # The cluster is still raykueue's, accounted live: a worker beyond the quota waits gated.
        admin.json_patch(RAYCLUSTERS.path(ns, "rc"), [
            {"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": 2}])
        inv.wait(settled(admin, ns, "rc", 1, 1), timeout=120, message=show(admin, ns, want))
        inv.wait(accounted(admin, ns, *want), timeout=60, message=show(admin, ns, want))
        inv.sweep()
        admin.delete(RAYCLUSTERS.path(ns, "rc"))
        inv.wait(lambda: not ray_pods(admin, ns), timeout=120, message=show(admin, ns))
        inv.wait(accounted(admin, ns, 0, 0), timeout=60, message=show(admin, ns, (0, 0)))
        inv.raise_if_broken()
    assert not [p for p in admin.get(r.PODS.path(ns))["items"]], "pods left"
