"""What raykueue's own ServiceAccount may write: RBAC, then the shipped ValidatingAdmissionPolicy.

Issue 21: the ClusterRole lets raykueue patch and delete any pod and write any
Workload's status, cluster-wide; RBAC cannot name objects by label. Shown here on
the real API server, as raykueue's ServiceAccount holding the shipped ClusterRole
(tests/api/test_controller_api.py's `as_controller`): first that RBAC alone lets
it rewrite or delete another team's pod, create and write Workloads that are not
its own, and admit its own Workload past Kueue; then that the policy of
manifests/own-writes-policy.yaml refuses each; then that under it the controller
still does its whole job (Workload, gate lift, PodsReady, eviction, scale-down).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from raykueue.core import contract as c
from raykueue.kube.resources import PODS
from raykueue.kube.rest import Rest
from testkit.api.controller import (  # noqa: F401 - fixtures
    admin,
    as_controller,
    ns,
    run_controller,
    scope,
)
from testkit.api.own_writes import (
    DRY_RUN,
    _no_policy_left,  # noqa: F401 - autouse fixtures
    enforced,
    refusal,
)
from testkit.reviews import gates
from testkit.stackfixtures import new_namespace  # noqa: F401 - fixture
from testkit.standins import (
    WORKLOADS,
    admit,
    cond,
    create_pod,
    evict,
    live,
    make_ready,
    ray_pod,
    release,
    workload_of,
)
from testkit.waiting import wait_for


def foreign_workload(namespace: str, name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": WORKLOADS.api_version, "kind": "Workload",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"queueName": "other-team", "podSets": [{"name": "main", "count": 1, "template": {
                "spec": {"containers": [{"name": "c", "image": "busybox",
                                         "resources": {"requests": {"cpu": "1"}}}],
                         "restartPolicy": "Never"}}}]}}


def self_admission(wl: dict[str, Any]) -> dict[str, Any]:
    """Kueue's admission written by someone else: what a stolen token would try."""
    meta = wl["metadata"]
    return {"apiVersion": WORKLOADS.api_version, "kind": "Workload",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "status": {"admission": {"clusterQueue": "any", "podSetAssignments": [{
                "name": "main", "count": 1, "flavors": {"cpu": "any"},
                "resourceUsage": {"cpu": "1"}}]},
                "conditions": [{"type": t, "status": "True", "reason": t, "message": "self-admitted",
                                "lastTransitionTime": "2026-01-01T00:00:00Z"}
                               for t in ("QuotaReserved", "Admitted")]}}


def pods_ready(wl: dict[str, Any]) -> dict[str, Any]:
    """What raykueue writes of a Workload's status: PodsReady, nothing of Kueue's."""
    meta = wl["metadata"]
    return {"apiVersion": WORKLOADS.api_version, "kind": "Workload",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "status": {"conditions": [{"type": "PodsReady", "status": "True", "reason": "Started",
                                       "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}


def apply_dry(rest: Rest, path: str, body: dict[str, Any]) -> Any:
    """A server-side apply as raykueue's field manager, not stored (dry run)."""
    return rest.request("PATCH", path, body, {**DRY_RUN, "fieldManager": "raykueue", "force": True},
                        content_type="application/apply-patch+yaml")


def test_raykueues_account_is_refused_what_it_does_not_manage(
        admin, ns, scope, as_controller) -> None:  # noqa: F811
    sa = as_controller
    other_pod = create_pod(admin, {"apiVersion": "v1", "kind": "Pod",
                                   "metadata": {"name": "other-team", "namespace": ns},
                                   "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
    other_wl = admin.create(WORKLOADS.path(ns), foreign_workload(ns, "other-team"))
    our_wl = admin.create(WORKLOADS.path(ns), foreign_workload(
        ns, "ours", **{c.MANAGED_BY_LABEL: c.MANAGED_BY_VALUE}))
    pod_path = PODS.path(ns, "other-team")
    writes: dict[str, Callable[[], Any]] = {
        "relabel another team's pod": lambda: sa.merge_patch(
            pod_path, {"metadata": {"labels": {"x": "y"}}}, DRY_RUN),
        "delete another team's pod": lambda: sa.delete(pod_path, query=DRY_RUN),
        "write another team's pod status": lambda: apply_dry(sa, PODS.path(ns, "other-team", "status"), {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "other-team", "namespace": ns},
            "status": {"conditions": [{"type": c.EVICTED_CONDITION, "status": "True"}]}}),
        "create a Workload not labelled ours": lambda: sa.create(
            WORKLOADS.path(ns), foreign_workload(ns, "forged"), DRY_RUN),
        "delete another team's Workload": lambda: sa.delete(
            WORKLOADS.path(ns, "other-team"), query=DRY_RUN),
        "write another team's Workload status": lambda: apply_dry(
            sa, WORKLOADS.path(ns, "other-team", "status"), pods_ready(other_wl)),
        "admit its own Workload": lambda: apply_dry(
            sa, WORKLOADS.path(ns, "ours", "status"), self_admission(our_wl)),
    }
    # The hole: RBAC alone lets every one of these through.
    for what, write in writes.items():
        assert refusal(write) is None, what
    with enforced(admin, writes["delete another team's pod"]):
        refused = {what: refusal(write) for what, write in writes.items()}
        assert all(refused.values()), [what for what, text in refused.items() if not text]
        assert "pod " + ns + "/other-team is neither" in refused["delete another team's pod"]
        assert "may change only" in refused["relabel another team's pod"]
        assert "Kueue admits" in refused["admit its own Workload"]
        # raykueue's own writes on its own Workload are still let through.
        assert refusal(lambda: apply_dry(
            sa, WORKLOADS.path(ns, "ours", "status"), pods_ready(our_wl))) is None
    # Nobody else is bound by it: the admin still writes anything.
    assert live(admin, other_pod) is not None
    admin.delete(pod_path)


def test_a_pod_of_an_opted_in_cluster_may_be_deleted_never_changed(
        admin, ns, as_controller) -> None:  # noqa: F811
    """A pod of an opted-in cluster that carries the stamp but none of raykueue's other
    marks (it ran ungated while raykueue was down) may be deleted by raykueue, and
    nothing else; the same pod without the stamp (its cluster never opted in) may not
    even be deleted (tests/api/test_least_privilege.py has the rest)."""
    cluster = admin.create(f"/apis/{c.RAY_API_GROUP}/v1/namespaces/{ns}/rayclusters", {
        "apiVersion": f"{c.RAY_API_GROUP}/v1", "kind": c.RAYCLUSTER_KIND,
        "metadata": {"name": "stamped", "namespace": ns,
                     "annotations": {c.STANDALONE_ANNOTATION: "true"}},
        "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": {
            "containers": [{"name": "ray-head", "image": "rayproject/ray"}]}}}}})
    owner = [{"apiVersion": f"{c.RAY_API_GROUP}/v1", "kind": c.RAYCLUSTER_KIND, "name": "stamped",
              "uid": cluster["metadata"]["uid"], "controller": True}]
    for name, stamp in (("stamped-worker", {c.OPTED_IN_LABEL: c.OPTED_IN_VALUE}), ("bare-worker", {})):
        create_pod(admin, {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": name, "namespace": ns, "ownerReferences": owner,
            "labels": {c.NODE_TYPE_LABEL: c.ROLE_WORKER, c.CLUSTER_LABEL: "stamped", **stamp}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
    path = PODS.path(ns, "stamped-worker")
    relabel = lambda: as_controller.merge_patch(  # noqa: E731
        path, {"metadata": {"labels": {"x": "y"}}}, DRY_RUN)
    with enforced(admin, relabel):
        assert "may change only" in (refusal(relabel) or "")
        assert refusal(lambda: as_controller.delete(path, query=DRY_RUN)) is None
        assert "is neither" in (refusal(lambda: as_controller.delete(
            PODS.path(ns, "bare-worker"), query=DRY_RUN)) or "")


def test_a_kuberay_pod_without_raykueues_marks_may_be_adopted_and_nothing_else(
        admin, ns, as_controller) -> None:  # noqa: F811
    """A running pod of a cluster opted in before raykueue ran (or during break-glass)
    carries none of raykueue's marks: the leader adopts it (controller/adopt.py) by adding
    its label and queue and priority-class annotations, and may change nothing else."""
    cluster = admin.create(f"/apis/{c.RAY_API_GROUP}/v1/namespaces/{ns}/rayclusters", {
        "apiVersion": f"{c.RAY_API_GROUP}/v1", "kind": c.RAYCLUSTER_KIND,
        "metadata": {"name": "before", "namespace": ns,
                     "annotations": {c.STANDALONE_ANNOTATION: "true"}},
        "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": {
            "containers": [{"name": "ray-head", "image": "rayproject/ray"}]}}}}})
    create_pod(admin, {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "before-worker", "namespace": ns,
        "labels": {c.NODE_TYPE_LABEL: c.ROLE_WORKER, c.CLUSTER_LABEL: "before"},
        "annotations": {"theirs": "kept"},
        "ownerReferences": [{"apiVersion": f"{c.RAY_API_GROUP}/v1", "kind": c.RAYCLUSTER_KIND,
                             "name": "before", "uid": cluster["metadata"]["uid"],
                             "controller": True}]},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
    path = PODS.path(ns, "before-worker")

    def patch(labels: dict[str, Any], notes: dict[str, Any] | None = None) -> Callable[[], None]:
        meta: dict[str, Any] = {"labels": labels}
        if notes is not None:
            meta["annotations"] = notes
        return lambda: as_controller.merge_patch(path, {"metadata": meta}, DRY_RUN)

    adopt = patch({c.MANAGED_BY_LABEL: c.MANAGED_BY_VALUE},
                  {c.QUEUE_ANNOTATION: "team-a", c.PRIORITY_CLASS_ANNOTATION: "ray-worker"})
    relabel = patch({"x": "y"})
    with enforced(admin, relabel):
        assert "is neither" in (refusal(relabel) or "")
        assert refusal(adopt) is None
        # Anything more than adopting is refused: another label, another value, a dropped
        # annotation, the spec.
        for more in (patch({c.MANAGED_BY_LABEL: c.MANAGED_BY_VALUE, "x": "y"}),
                     patch({c.MANAGED_BY_LABEL: "someone"}),
                     patch({c.MANAGED_BY_LABEL: c.MANAGED_BY_VALUE, c.CLUSTER_LABEL: None}),
                     patch({c.MANAGED_BY_LABEL: c.MANAGED_BY_VALUE}, {"theirs": None}),
                     patch({c.MANAGED_BY_LABEL: c.MANAGED_BY_VALUE}, {"other.io/x": "y"}),
                     lambda: as_controller.merge_patch(path, {
                         "metadata": {"labels": {c.MANAGED_BY_LABEL: c.MANAGED_BY_VALUE}},
                         "spec": {"activeDeadlineSeconds": 1}}, DRY_RUN)):
            assert "is neither" in (refusal(more) or ""), more
        # Not stamped and not managed: adopting is all raykueue may do to it, never delete it.
        assert "is neither" in (refusal(lambda: as_controller.delete(path, query=DRY_RUN)) or "")

def test_under_the_policy_the_controller_still_does_its_whole_job(
        admin, ns, scope, as_controller, run_controller) -> None:  # noqa: F811
    other = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": ns},
             "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    create_pod(admin, copy.deepcopy(other))
    with enforced(admin, lambda: as_controller.delete(PODS.path(ns, "probe"), query=DRY_RUN)):
        head = create_pod(admin, ray_pod(ns, scope, "head", "rc-head", hold=True))
        worker = create_pod(admin, ray_pod(ns, scope, "worker", "rc-worker", hold=True))
        run_controller()
        admit(admin, head, scope)  # Workload created by raykueue, admitted by "Kueue"
        wait_for(lambda: not gates(live(admin, head)), timeout=30, message="head gate lifted")
        admit(admin, worker, scope)
        wait_for(lambda: not gates(live(admin, worker)), timeout=30, message="worker gate lifted")
        make_ready(admin, head)
        wait_for(lambda: (cond(workload_of(admin, head), "PodsReady") or {}).get("status") == "True",
                 timeout=30, message="PodsReady on the head's Workload")
        evict(admin, worker, scope)  # pods/status, pod delete, Finished
        wait_for(lambda: (p := live(admin, worker)) is not None
                 and bool(p["metadata"].get("deletionTimestamp")), timeout=30,
                 message="the evicted worker deleted")
        wait_for(lambda: (cond(workload_of(admin, worker), "Finished") or {}).get("status") == "True",
                 timeout=30, message="the evicted worker's Workload Finished")
        admin.delete(PODS.path(ns, "rc-head"))  # scale-down: the Workload goes at once
        wait_for(lambda: workload_of(admin, head) is None, timeout=30, message="head Workload deleted")
        release(admin, head)
        release(admin, worker)


