"""KubeRay's default RayJob submission (K8sJobMode) under quota, on the real stack.

A RayJob as Ray's documentation writes it (KubeRay's ray-job.sample.yaml: no
submissionMode, so K8sJobMode) with only the opt-in and a queue added. Its
cluster is admitted pod by pod; the head's Workload reserves the submitter pod's
slot (a second podSet, core/submitter.py), so when KubeRay creates the submitter
Job (once the cluster is Ready) its pod starts at once, ungated, on quota the
head's admission already holds. Kueue as shipped; the devstack runs the Job
controller, and kwok's pod-complete stage takes a Job's running pod to Succeeded.

Watched over the whole scenario: `QuotaInvariants` (no Ray pod ungated without
an admitted Workload, usage never above nominal) and `SubmitterWatch` (the
submitter pod never gated, and never running unless its head's Workload is
admitted with the submitter's podSet). Everything is waited for as a condition:
KubeRay fills in the RayJob's status at its own time.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from typing import Any

from raykueue.controller import workload as w
from raykueue.core import contract as c
from raykueue.kube import resources as r
from raykueue.kube.cache import WatchCache
from raykueue.kube.rest import Rest
from testkit.e2e.controller import (  # noqa: F401 - fixtures
    CQS,
    WORKLOADS,
    admin,
    controller,
    cq_usage,
    describe,
    millicores,
    queue,
    settled,
    webhooks,
)
from testkit.e2e.kueue_shipped import JOBS, RAYJOBS, _owned_cluster
from testkit.e2e.rayjob_sample import CODE_SAMPLE, CONFIG_MAPS, DOCUMENTED
from testkit.pods import gated, role, running
from testkit.quota_invariants import QuotaInvariants
from testkit.stackfixtures import new_namespace  # noqa: F401 - fixture
from testkit.watches import Watching

# Head 1 CPU / 2Gi + worker 200m / 256Mi (KubeRay's wait-gcs-ready init container asks
# 200m / 256Mi) + KubeRay's default submitter 500m / 200Mi: exactly the quota.
CPU_M, MEMORY = 1700, "2504Mi"


def documented_rayjob() -> dict[str, Any]:
    job = copy.deepcopy(DOCUMENTED)
    job["metadata"]["labels"] = {c.QUEUE_LABEL: "team-a"}
    job["metadata"]["annotations"] = {c.STANDALONE_ANNOTATION: "true"}
    return job


def _owned_by(obj: dict[str, Any], kind: str, name: str) -> bool:
    return any((ref.get("kind"), ref.get("name")) == (kind, name)
               for ref in obj["metadata"].get("ownerReferences") or [])


def _head_workload(items: list[dict[str, Any]], cluster: str) -> dict[str, Any] | None:
    for wl in items:
        wl_labels = wl["metadata"].get("labels") or {}
        if (w.is_ours(wl) and wl_labels.get(c.CLUSTER_LABEL) == cluster
                and wl_labels.get(c.NODE_TYPE_LABEL) == c.ROLE_HEAD and not w.is_finished(wl)):
            return wl
    return None


def _reserves_submitter(wl: dict[str, Any] | None) -> bool:
    return (wl is not None and w.is_admitted(wl) and not w.is_evicted(wl)
            and c.SUBMITTER_POD_SET in [x.get("name") for x in wl["spec"].get("podSets") or []])


class SubmitterWatch(Watching):
    """Every change of the namespace's pods and Workloads: the submitter pod (a pod of
    KubeRay's Job for the RayJob) is never gated, and is never running unless its
    head's Workload is admitted with the submitter's podSet (a cache miss is judged
    again on fresh reads). Records when things first happened, for the figures."""

    def __init__(self, api: Rest, ns: str, rayjob: str) -> None:
        self.admin, self.ns, self.rayjob = api, ns, rayjob
        self.cluster: str | None = None  # set once KubeRay made it
        self.violations: list[str] = []
        self.seen: dict[str, float] = {}
        self._lock = threading.Lock()
        self.pods = WatchCache(api, r.PODS, namespace=ns)
        self.workloads = WatchCache(api, WORKLOADS, namespace=ns)
        self.pods.add_handler(self._pod)
        self.caches = (self.workloads, self.pods)  # the pod handler reads the Workloads

    def _mark(self, what: str) -> None:
        with self._lock:
            self.seen.setdefault(what, time.monotonic())

    def _pod(self, event: str, pod: dict[str, Any]) -> None:
        if event == "DELETED" or not _owned_by(pod, "Job", self.rayjob):
            return
        self._mark("submitter pod created")
        name = pod["metadata"]["name"]
        if pod["spec"].get("schedulingGates"):
            self.violations.append(f"submitter pod {name} is gated: {pod['spec']['schedulingGates']}")
        if (pod.get("status") or {}).get("phase") == "Succeeded":
            self._mark("submitter pod succeeded")
        if not running(pod) or pod["metadata"].get("deletionTimestamp"):
            return
        self._mark("submitter pod running")
        cluster = self.cluster
        if cluster is not None and _reserves_submitter(_head_workload(self.workloads.list(), cluster)):
            return
        fresh = self.admin.get(WORKLOADS.path(self.ns))["items"]
        clusters = {(x["metadata"].get("labels") or {}).get(c.CLUSTER_LABEL) for x in fresh}
        if not any(_reserves_submitter(_head_workload(fresh, str(k))) for k in clusters if k):
            self.violations.append(f"submitter pod {name} runs while no head Workload reserves its slot")

    def assert_held(self) -> None:
        assert not self.violations, "\n".join(self.violations)


def _cq(api: Rest, ns: str) -> tuple[int, str]:
    usage = cq_usage(api, ns)
    return millicores(usage.get("cpu", "0")), usage.get("memory", "0")


def _submitter_succeeded(inv: QuotaInvariants, api: Rest, sub: SubmitterWatch, ns: str, name: str,
                         timeout: float = 120) -> None:
    inv.wait(lambda: "submitter pod succeeded" in sub.seen, timeout=timeout,
             message=lambda: f"the submitter pod ran and succeeded; seen {sorted(sub.seen)}; RayJob "
                             f"status {api.get(RAYJOBS.path(ns, name)).get('status')}")


def _delete_and_release(inv: QuotaInvariants, api: Rest, ns: str, name: str) -> None:
    api.delete(RAYJOBS.path(ns, name))
    inv.wait(lambda: _cq(api, ns)[0] == 0, timeout=120,
             message=lambda: f"the quota released, ClusterQueue cpu {_cq(api, ns)[0]}m")


def test_a_rayjob_as_rays_documentation_writes_it_runs_its_submitter_on_reserved_quota(
        admin, controller, queue):  # noqa: F811
    ns = queue(cpu=f"{CPU_M}m", memory=MEMORY)
    admin.create(CONFIG_MAPS.path(ns), CODE_SAMPLE)
    name = DOCUMENTED["metadata"]["name"]
    with (QuotaInvariants(admin, [ns], quota_namespaces=[ns], cluster_queues=[f"e2e-{ns}"]) as inv,
          SubmitterWatch(admin, ns, name) as sub):
        t0 = time.monotonic()
        admin.create(RAYJOBS.path(ns), documented_rayjob())
        stored = admin.get(RAYJOBS.path(ns, name))
        assert stored["spec"]["submissionMode"] == c.K8S_JOB_MODE  # KubeRay's CRD default
        assert c.SUBMITTER_ANNOTATION in stored["metadata"]["annotations"]

        cluster = _owned_cluster(admin, ns, "RayJob", name)
        sub.cluster = cluster
        s = inv.wait(settled(admin, ns, cluster, 1, 0), timeout=120, message=describe(admin, ns, cluster))
        t_admitted = time.monotonic()
        head = next(p for p in s["pods"] if role(p) == "head")
        (head_wl,) = s["owned"][head["metadata"]["uid"]]
        main, reserved = head_wl["spec"]["podSets"]
        assert (main["name"], reserved["name"], reserved["count"]) == (w.POD_SET, c.SUBMITTER_POD_SET, 1)
        assert reserved["template"]["spec"]["containers"][0]["resources"]["requests"] == {
            "cpu": "500m", "memory": "200Mi"}
        # The submitter's quota is held from the head's admission: all of the quota, exactly.
        inv.wait(lambda: _cq(admin, ns) == (CPU_M, MEMORY), timeout=60,
                 message=lambda: f"ClusterQueue usage (cpu m, memory) {_cq(admin, ns)}, "
                                 f"want {CPU_M}m, {MEMORY}")

        # KubeRay makes the submitter Job once the cluster is Ready; its pod is never
        # gated and runs at once on the reserved slot (kwok then completes it).
        job = inv.wait(lambda: next((j for j in admin.get(JOBS.path(ns))["items"]
                                     if _owned_by(j, "RayJob", name)), None),
                       timeout=120, message=lambda: f"KubeRay's submitter Job; RayJob status "
                       f"{admin.get(RAYJOBS.path(ns, name)).get('status')}")
        assert job["metadata"]["name"] == name
        _submitter_succeeded(inv, admin, sub, ns, name, timeout=60)
        inv.wait(lambda: any(x.get("type") == "Complete" and x.get("status") == "True" for x in
                             (admin.get(JOBS.path(ns, name)).get("status") or {}).get("conditions") or []),
                 timeout=60, message="the Job controller marks the submitter Job Complete")
        assert "submitter pod running" in sub.seen
        # The slot stays reserved after the submitter finished, as long as the head's
        # Workload lives: Kueue's own RayJob integration (v0.19.2) holds its submitter
        # podSet until the whole Workload finishes too (no reclaimable pods for RayJob).
        # KubeRay gives up on a job whose submitter finished 30 s before (no Ray here):
        # the RayJob ends, its cluster stays (shutdownAfterJobFinishes unset).
        inv.wait(lambda: (admin.get(RAYJOBS.path(ns, name)).get("status") or {}).get(
            "jobDeploymentStatus") in ("Complete", "Failed"), timeout=120,
            message=lambda: f"RayJob status {admin.get(RAYJOBS.path(ns, name)).get('status')}")
        inv.wait(lambda: _cq(admin, ns) == (CPU_M, MEMORY), timeout=10,
                 message=lambda: f"the submitter's slot still held: ClusterQueue usage {_cq(admin, ns)}")
        inv.sweep()

        admin.delete(RAYJOBS.path(ns, name))
        inv.wait(lambda: not [x for x in admin.get(WORKLOADS.path(ns))["items"] if w.is_ours(x)],
                 timeout=120, message="every raykueue Workload gone with the RayJob")
        inv.wait(lambda: _cq(admin, ns)[0] == 0, timeout=60,
                 message=lambda: f"the quota released, ClusterQueue cpu {_cq(admin, ns)[0]}m")
        inv.raise_if_broken()
    sub.assert_held()
    figures = {k: round(v - t_admitted, 2) for k, v in sorted(sub.seen.items())}
    print(f"\nK8sJobMode: cluster settled {t_admitted - t0:.1f}s after create; after it (s): {figures}")


def test_a_head_without_room_for_its_submitter_waits_then_starts_whole(admin, controller, queue):  # noqa: F811
    """The reservation is real: quota for the head and worker but not the submitter keeps
    the head gated (so no submitter can run on nobody's quota); when the quota grows, the
    head is admitted with the slot and the submitter runs at once."""
    ns = queue(cpu=f"{CPU_M - 500}m", memory=MEMORY)  # the submitter's 500m short
    admin.create(CONFIG_MAPS.path(ns), CODE_SAMPLE)
    name = DOCUMENTED["metadata"]["name"]
    cq_path = CQS.path(None, f"e2e-{ns}")
    with (QuotaInvariants(admin, [ns], quota_namespaces=[ns], cluster_queues=[f"e2e-{ns}"]) as inv,
          SubmitterWatch(admin, ns, name) as sub):
        admin.create(RAYJOBS.path(ns), documented_rayjob())
        cluster = _owned_cluster(admin, ns, "RayJob", name)
        sub.cluster = cluster

        def head_pending() -> dict[str, Any] | None:
            wl = _head_workload(admin.get(WORKLOADS.path(ns))["items"], cluster)
            cond = w.condition(wl, w.QUOTA_RESERVED) if wl is not None else None
            # Kueue tried and found no room: QuotaReserved False with its Pending reason.
            return wl if cond is not None and cond.get("status") == "False" else None

        wl = inv.wait(head_pending, timeout=60, message=describe(admin, ns, cluster))
        assert [x["name"] for x in wl["spec"]["podSets"]] == [w.POD_SET, c.SUBMITTER_POD_SET]
        assert "insufficient" in w.condition(wl, w.QUOTA_RESERVED).get("message", "").lower()
        heads = [p for p in admin.get(r.PODS.path(ns))["items"] if role(p) == "head"]
        assert heads and all(gated(p) for p in heads)
        assert not any(_owned_by(j, "RayJob", name) for j in admin.get(JOBS.path(ns))["items"])

        cq = admin.get(cq_path)
        groups = cq["spec"]["resourceGroups"]
        for res in groups[0]["flavors"][0]["resources"]:
            if res["name"] == "cpu":
                res["nominalQuota"] = f"{CPU_M}m"
        admin.merge_patch(cq_path, {"spec": {"resourceGroups": groups}})
        inv.wait(settled(admin, ns, cluster, 1, 0), timeout=120, message=describe(admin, ns, cluster))
        _submitter_succeeded(inv, admin, sub, ns, name)
        inv.wait(lambda: _cq(admin, ns) == (CPU_M, MEMORY), timeout=60,
                 message=lambda: f"ClusterQueue usage {_cq(admin, ns)}")
        inv.sweep()
        _delete_and_release(inv, admin, ns, name)
        inv.raise_if_broken()
    sub.assert_held()


def test_a_suspended_http_mode_rayjob_switched_to_k8s_job_mode_is_accounted(admin, controller, queue):  # noqa: F811
    """A change of submissionMode is followed: made while the RayJob is suspended (no
    cluster holds anything), the switch to K8sJobMode is accepted and raykueue writes
    the submitter it now needs; on resume the head reserves it and the submitter runs
    on that slot, never gated, never on nobody's quota."""
    ns = queue(cpu=f"{CPU_M}m", memory=MEMORY)
    admin.create(CONFIG_MAPS.path(ns), CODE_SAMPLE)
    name = DOCUMENTED["metadata"]["name"]
    job = documented_rayjob()
    # KubeRay lets a RayJob be suspended only with shutdownAfterJobFinishes.
    job["spec"].update(submissionMode="HTTPMode", suspend=True, shutdownAfterJobFinishes=True)
    with (QuotaInvariants(admin, [ns], quota_namespaces=[ns], cluster_queues=[f"e2e-{ns}"]) as inv,
          SubmitterWatch(admin, ns, name) as sub):
        created = admin.create(RAYJOBS.path(ns), job)
        assert c.SUBMITTER_ANNOTATION not in created["metadata"]["annotations"]  # HTTPMode: no pod
        switched = admin.merge_patch(RAYJOBS.path(ns, name), {"spec": {"submissionMode": c.K8S_JOB_MODE}})
        reserved = json.loads(switched["metadata"]["annotations"][c.SUBMITTER_ANNOTATION])
        assert reserved["containers"][0]["resources"]["requests"] == {"cpu": "500m", "memory": "200Mi"}
        admin.merge_patch(RAYJOBS.path(ns, name), {"spec": {"suspend": False}})

        cluster = _owned_cluster(admin, ns, "RayJob", name)
        sub.cluster = cluster
        s = inv.wait(settled(admin, ns, cluster, 1, 0), timeout=120, message=describe(admin, ns, cluster))
        head = next(p for p in s["pods"] if role(p) == "head")
        (head_wl,) = s["owned"][head["metadata"]["uid"]]
        assert [x["name"] for x in head_wl["spec"]["podSets"]] == [w.POD_SET, c.SUBMITTER_POD_SET]
        _submitter_succeeded(inv, admin, sub, ns, name)
        status = admin.get(RAYJOBS.path(ns, name)).get("status") or {}
        assert status.get("jobDeploymentStatus") != "ValidationFailed", status
        inv.sweep()
        _delete_and_release(inv, admin, ns, name)
        inv.raise_if_broken()
    sub.assert_held()
