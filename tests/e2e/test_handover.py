"""A namespace turned Kueue-managed after the opt-in: raykueue hands the cluster over (issue 28).

Kueue as shipped (v0.19.2) has manageJobsWithoutQueueName false: its job reconciler
ignores a Ray object without the queue-name label (jobframework/reconciler.go
`ReconcileGenericJob`), and an opted-in cluster carries none (raykueue keeps its
queue in `raykueue.io/queue-name`). So a namespace label alone changes nothing as
shipped. Kueue takes such a cluster only when manageJobsWithoutQueueName is on and
its managedJobsNamespaceSelector picks the namespace, which the platform team
documents as labelling namespaces (`kueue-managed=true`): that is what this module
configures (Kueue's config file rewritten, Kueue restarted, the ConfigMap raykueue
reads updated to match), and what it puts back after.

On the RayCluster's next event Kueue finds no Workload for the running job and
suspends it (`ensureOneWorkload`, "No matching Workload"); raykueue hands it over in
that update. Kueue reconciles a RayCluster on its own events only (no Namespace
watch: `For(job).Owns(Workload)`), so the test touches the RayCluster after
labelling the namespace, as any update would. The cluster's second worker waits for
quota another job's Workload holds, so Kueue's Workload for the whole cluster waits
too until that job ends: the pending phase is watched as well.

Watched for the whole course: every pod created (none stamped or gated after the
hand-over), the API server's refusal counters (the policy `raykueue-gated-at-creation`
and raykueue's webhooks), KubeRay's FailedToCreate* Events, raykueue's pod evictions.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from raykueue.controller import workload as w
from raykueue.core import contract as c
from raykueue.kube.resources import NAMESPACES
from raykueue.kube.rest import ApiError, Rest
from testkit.e2e.controller import (  # noqa: F401 - fixtures
    RAYCLUSTERS,
    WORKLOADS,
    admin,
    controller,
    describe,
    pods,
    queue,
    raycluster,
    settled,
    webhooks,
)
from testkit.e2e.handover import MANAGED, Course, blocker, events, gates_of
from testkit.pods import gated, role, running
from testkit.waiting import wait_for

MERGE_PATCH = {"content_type": "application/merge-patch+json"}


def kueues_workload(admin: Rest, ns: str, cluster: str) -> dict[str, Any] | None:  # noqa: F811
    for wl in admin.get(WORKLOADS.path(ns))["items"]:
        if any((r["kind"], r["name"]) == ("RayCluster", cluster) for r in wl["metadata"].get(
                "ownerReferences") or []):
            return wl
    return None


def test_a_namespace_kueue_starts_managing_gets_its_cluster_handed_over(
        e2e_stack, admin, kueue_takes_labelled_namespaces, controller, queue):  # noqa: F811
    ns = queue(cpu="3", memory="3Gi")
    admin.create(WORKLOADS.path(ns), blocker(ns, "1"))
    wait_for(lambda: w.is_admitted(admin.get(WORKLOADS.path(ns, "other-job"))), timeout=60,
             message="the other job's Workload admitted")
    with Course(admin, e2e_stack, ns, controller) as course:
        # 1. raykueue runs it: head and one worker admitted pod by pod, the second
        # worker waits for the quota the other job holds.
        cluster = raycluster("rc", 2)
        admin.create(RAYCLUSTERS.path(ns), cluster)
        s = wait_for(settled(admin, ns, "rc", 1, 1), timeout=120, message=describe(admin, ns, "rc"))
        first_pods = {p["metadata"]["uid"] for p in s["pods"]}
        assert all(p["metadata"]["labels"][c.OPTED_IN_LABEL] == "true" for p in s["pods"])
        assert kueues_workload(admin, ns, "rc") is None

        # 2. The namespace gets the label Kueue's selector matches; raykueue sees it
        # (a new opt-in there is now refused), then the RayCluster is touched.
        admin.merge_patch(NAMESPACES.path(None, ns), {"metadata": {"labels": MANAGED}})

        def raykueue_sees_the_label() -> bool:
            probe = raycluster("probe", 0)
            try:
                admin.create(RAYCLUSTERS.path(ns), probe, {"dryRun": "All"})
            except ApiError as exc:
                return "manageJobsWithoutQueueName" in str(exc)
            return False

        wait_for(raykueue_sees_the_label, timeout=30, message="raykueue to see the namespace label")
        admin.merge_patch(RAYCLUSTERS.path(ns, "rc"), {"metadata": {"annotations": {"touched": "1"}}})

        # 3. Kueue suspends it; raykueue's first webhook hands it over in that update.
        def handed() -> dict[str, Any] | None:
            rc = admin.get(RAYCLUSTERS.path(ns, "rc"))
            return rc if c.HANDED_TO_KUEUE_ANNOTATION in rc["metadata"].get("annotations", {}) else None

        rc = wait_for(handed, timeout=60, message=lambda: json.dumps(
            admin.get(RAYCLUSTERS.path(ns, "rc"))["metadata"], indent=1))
        course.handed_over.set()
        assert rc["spec"]["suspend"] is True
        assert rc["metadata"]["labels"][c.QUEUE_LABEL] == "team-a"
        templates = [rc["spec"]["headGroupSpec"]["template"]] + [
            g["template"] for g in rc["spec"]["workerGroupSpecs"]]
        assert all(c.OPTED_IN_LABEL not in (t.get("metadata") or {}).get("labels", {}) for t in templates)

        # KubeRay deletes the suspended cluster's pods; Kueue's Workload takes the queue.
        wait_for(lambda: not pods(admin, ns, "rc"), timeout=60, message="the suspended cluster's pods gone")
        def kueue_queue() -> str | None:
            return (kueues_workload(admin, ns, "rc") or {}).get("spec", {}).get("queueName")

        wait_for(lambda: kueue_queue() == "team-a", timeout=60, message="Kueue's Workload in queue team-a")

        # 4. The other job ends: Kueue admits the whole cluster and resumes it.
        admin.delete(WORKLOADS.path(ns, "other-job"))

        def running_under_kueue() -> list[dict[str, Any]] | None:
            wl = kueues_workload(admin, ns, "rc")
            now = [p for p in pods(admin, ns, "rc") if not p["metadata"].get("deletionTimestamp")]
            ok = (wl is not None and w.is_admitted(wl) and len(now) == 3 and all(map(running, now)))
            return now if ok else None

        now = wait_for(running_under_kueue, timeout=120, message=describe(admin, ns, "rc"))
        assert sorted(role(p) for p in now) == ["head", "worker", "worker"]
        for p in now:
            labels = p["metadata"]["labels"]
            assert p["metadata"]["uid"] not in first_pods
            assert c.OPTED_IN_LABEL not in labels and c.MANAGED_BY_LABEL not in labels
            assert not gated(p) and c.GATE not in gates_of(p)
        # raykueue's per-pod Workloads went with their pods (the garbage collector or raykueue).
        wait_for(lambda: not [x for x in admin.get(WORKLOADS.path(ns))["items"] if w.is_ours(x)],
                 timeout=60, message="raykueue's Workloads gone with their pods")

        # 5. The Event says what happened and what to change.
        rc = admin.get(RAYCLUSTERS.path(ns, "rc"))
        notes = wait_for(lambda: [e for e in events(admin, ns)
                                  if e.get("reason") == c.HANDED_TO_KUEUE_REASON],
                         timeout=30, message="the HandedToKueue Event")
        (note,) = notes
        assert note["regarding"]["uid"] == rc["metadata"]["uid"]
        assert "raykueue deleted no pod" in note["note"] and "managedJobsNamespaceSelector" in note["note"]

        # The whole course: nothing refused, nothing deleted by raykueue.
        assert course.refusals() == course.refused_before, "a pod creation was refused"
        assert course.evictions() == course.evicted_before, "raykueue deleted a pod"
        assert not [e for e in events(admin, ns)
                    if e.get("reason") in ("Evicted", "OutsideQuota")
                    or str(e.get("reason", "")).startswith("FailedToCreate")], "refusals or evictions seen"
        assert not course.violations, course.violations
        assert set(course.deleted) >= {p["metadata"]["name"] for p in s["pods"]}
        with contextlib.suppress(ApiError):
            admin.delete(RAYCLUSTERS.path(ns, "rc"))
