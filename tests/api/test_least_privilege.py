"""raykueue's pod deletes, bounded by the shipped policy to what it manages (issue 28, item 5).

Shown on the real API server before this change: raykueue's account deleted a
worker of a RayCluster that never opted in (the policy allowed any KubeRay head
or worker), and the policy matched every ServiceAccount named raykueue in any
namespace. Here, as raykueue's ServiceAccount holding the shipped ClusterRole
(impersonated, as tests/api/test_own_writes.py does) under the shipped policy
(manifests/own-writes-policy.yaml, created as shipped): RBAC alone lets each
delete through; the policy refuses another team's Ray pod and a pod in another
namespace, still lets raykueue delete a pod it manages (for real, not a dry
run) and a pod of a cluster that opted in; a ServiceAccount of the same name in
another namespace holds none of it.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

from raykueue.core import contract as c
from raykueue.kube.resources import PODS
from raykueue.kube.rest import ApiError, Rest
from testkit.api.controller import (  # noqa: F401 - fixtures
    admin,
    as_controller,
    ns,
)
from testkit.api.own_writes import DRY_RUN, _no_policy_left, enforced, refusal  # noqa: F401
from testkit.stackfixtures import new_namespace  # noqa: F401 - fixture
from testkit.standins import create_pod, live
from testkit.waiting import wait_for

RAYCLUSTERS = f"/apis/{c.RAY_API_GROUP}/v1/namespaces/{{ns}}/rayclusters"


def raycluster(rest: Rest, namespace: str, name: str, *, opted_in: bool) -> dict[str, Any]:
    annotations = {c.STANDALONE_ANNOTATION: "true"} if opted_in else {}
    return rest.create(RAYCLUSTERS.format(ns=namespace), {
        "apiVersion": f"{c.RAY_API_GROUP}/v1", "kind": c.RAYCLUSTER_KIND,
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": {
            "containers": [{"name": "ray-head", "image": "rayproject/ray"}]}}}}})


def ray_worker(rest: Rest, cluster: dict[str, Any], name: str, **labels: str) -> dict[str, Any]:
    """A worker pod of `cluster` as KubeRay makes it (role label, controller reference)."""
    meta = cluster["metadata"]
    return create_pod(rest, {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": meta["namespace"],
        "labels": {c.NODE_TYPE_LABEL: c.ROLE_WORKER, c.CLUSTER_LABEL: meta["name"], **labels},
        "ownerReferences": [{"apiVersion": f"{c.RAY_API_GROUP}/v1", "kind": c.RAYCLUSTER_KIND,
                             "name": meta["name"], "uid": meta["uid"], "controller": True}]},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}})


def impersonating(k8s, user: str) -> Rest:
    api = client.ApiClient(k8s.configuration)
    api.set_default_header("Impersonate-User", user)
    return Rest(api)


def test_raykueue_deletes_only_pods_it_manages_or_of_clusters_that_opted_in(
        admin, ns, as_controller, new_namespace) -> None:  # noqa: F811
    sa = as_controller
    elsewhere = new_namespace("other-team")
    theirs = raycluster(admin, ns, "theirs", opted_in=False)
    ray_worker(admin, theirs, "theirs-worker")
    far = raycluster(admin, elsewhere, "far", opted_in=False)
    ray_worker(admin, far, "far-worker")
    create_pod(admin, {"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": "plain", "namespace": elsewhere},
                       "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
    ours = raycluster(admin, ns, "ours", opted_in=True)
    stamped = ray_worker(admin, ours, "ours-worker", **{c.OPTED_IN_LABEL: c.OPTED_IN_VALUE})
    managed = ray_worker(admin, ours, "ours-managed", **{
        c.OPTED_IN_LABEL: c.OPTED_IN_VALUE, c.MANAGED_BY_LABEL: c.MANAGED_BY_VALUE})
    foreign = {
        "another team's Ray worker (cluster never opted in)": PODS.path(ns, "theirs-worker"),
        "a Ray worker in another namespace": PODS.path(elsewhere, "far-worker"),
        "a plain pod in another namespace": PODS.path(elsewhere, "plain"),
    }

    def delete(path: str) -> Any:
        return sa.delete(path, query=DRY_RUN)

    # The hole the policy closes: RBAC alone lets every one of these deletes through.
    for what, path in foreign.items():
        assert refusal(lambda path=path: delete(path)) is None, what
    with enforced(admin, lambda: delete(foreign["another team's Ray worker (cluster never opted in)"])):
        for what, path in foreign.items():
            text = refusal(lambda path=path: delete(path))
            assert text is not None and "may delete only" in text, what
        assert refusal(lambda: delete(PODS.path(ns, "ours-worker"))) is None
        # raykueue's own pod goes, for real: the policy reads the pod as it was
        # (a DELETE has no `object`, only `oldObject`).
        sa.delete(PODS.path(ns, "ours-managed"))
        wait_for(lambda: live(admin, managed) is None, timeout=30, message="the managed pod gone")
    for path in foreign.values():
        assert admin.get(path)["metadata"]["name"]
    assert live(admin, stamped) is not None


def test_a_same_named_service_account_elsewhere_is_not_raykueue(
        k8s, admin, ns, as_controller, new_namespace) -> None:  # noqa: F811
    """The ClusterRoleBinding, the policy and the gate lifter name one account:
    raykueue's own namespace's. A `raykueue` ServiceAccount a team makes in its own
    namespace holds no grant: it may delete neither raykueue's pods nor an opted-in
    cluster's, policy or not."""
    other_ns = new_namespace("team")
    admin.create(f"/api/v1/namespaces/{other_ns}/serviceaccounts", {
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": c.DEFAULT_SERVICE_ACCOUNT, "namespace": other_ns}})
    namesake = impersonating(k8s, c.service_account_user(other_ns, c.DEFAULT_SERVICE_ACCOUNT))
    ours = raycluster(admin, ns, "ours", opted_in=True)
    ray_worker(admin, ours, "ours-worker", **{c.OPTED_IN_LABEL: c.OPTED_IN_VALUE,
                                              c.MANAGED_BY_LABEL: c.MANAGED_BY_VALUE})
    path = PODS.path(ns, "ours-worker")

    def forbidden() -> bool:
        try:
            namesake.delete(path, query=DRY_RUN)
        except ApiError as exc:
            assert exc.status == 403 and "raykueue-own-writes" not in str(exc), exc
            return True
        return False

    assert forbidden()
    theirs = raycluster(admin, ns, "theirs", opted_in=False)
    ray_worker(admin, theirs, "theirs-worker")
    probe = PODS.path(ns, "theirs-worker")
    with enforced(admin, lambda: as_controller.delete(probe, query=DRY_RUN)):
        assert forbidden()
        # raykueue's own account may: the same pod, under the same policy.
        assert refusal(lambda: as_controller.delete(path, query=DRY_RUN)) is None
