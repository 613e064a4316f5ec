"""Nobody but raykueue's controller opens the gate: not a user, not a Workload a
user made, not a relabelled pod. On the real API server, with raykueue's
webhooks registered and its controller running as its ServiceAccount.

The user is `alice`, impersonated, who may edit pods and create Workloads in
the namespace: only raykueue stands between her and an ungated pod. Kueue is
played by the test (its admission is one status apply, as in
test_controller_api).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raykueue.controller import workload as w
from raykueue.controller import workload_match as wm
from raykueue.core import contract as c
from raykueue.kube.resources import PODS
from raykueue.kube.rest import ApiError, Rest
from raykueue.webhooks.validate import FROZEN_WHILE_GATED
from testkit.api.controller import (  # noqa: F401 - fixtures
    admin,
    as_controller,
    ns,
    run_controller,
    scope,
    stays,
)
from testkit.reviews import gates
from testkit.servers import RaykueueServer
from testkit.stackfixtures import new_namespace  # noqa: F401 - fixture
from testkit.standins import (
    WORKLOADS,
    create_pod,
    events_for,
    kueue_status,
    live,
    ray_pod,
    workload_of,
)
from testkit.waiting import wait_for

USER = "alice"
RBAC = "/apis/rbac.authorization.k8s.io/v1"


@pytest.fixture(scope="module")
def webhooks(api_stack, tmp_path_factory) -> Iterator[RaykueueServer]:
    """Admission only, trusting the ServiceAccount the controller runs as."""
    server = RaykueueServer(api_stack, Path(tmp_path_factory.mktemp("gate-webhooks")),
                            args=["--no-controller", "--controller-identity",
                                  c.DEFAULT_CONTROLLER_IDENTITY])
    server.start()
    yield server
    server.close()


@pytest.fixture
def alice(k8s, admin: Rest, ns: str) -> Iterator[Rest]:  # noqa: F811
    """A namespace editor: pods and Workloads, not Workload status."""
    from kubernetes import client

    admin.create(f"{RBAC}/namespaces/{ns}/roles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "editor"},
        "rules": [{"apiGroups": [""], "resources": ["pods"],
                   "verbs": ["get", "list", "patch", "update"]},
                  {"apiGroups": [c.KUEUE_GROUP], "resources": ["workloads"],
                   "verbs": ["get", "list", "create", "delete", "patch", "update"]}]})
    admin.create(f"{RBAC}/namespaces/{ns}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "alice-edits"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "editor"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}]})
    impersonating = client.ApiClient(k8s.configuration)
    impersonating.set_default_header("Impersonate-User", USER)
    try:
        yield Rest(impersonating)
    finally:
        impersonating.close()


def denied(call) -> str:
    """The webhook's message for a write it refused; fails if the write went through."""
    with pytest.raises(ApiError) as caught:
        call()
    error = caught.value
    assert error.status in (400, 403, 422), error
    assert "denied the request" in error.message, error.message
    return error.message


def pod_path(pod: dict[str, Any]) -> str:
    return PODS.path(pod["metadata"]["namespace"], pod["metadata"]["name"])


def forged_workload(pod: dict[str, Any], scope: dict[str, str], **edits: Any) -> dict[str, Any]:  # noqa: F811
    """What raykueue would create for `pod`, then edited: by default it asks Kueue
    for 1m of CPU for a pod that wants far more."""
    body = w.build_workload(pod, w.Priority(scope["worker"], 100))
    template = body["spec"]["podSets"][0]["template"]["spec"]
    for container in template["containers"] + template.get("initContainers", []):
        container["resources"] = {"requests": {"cpu": "1m"}}
    body["metadata"].update(edits)
    return body


# --- a user ------------------------------------------------------------------------------


def test_a_user_cannot_remove_the_gate_by_any_verb(webhooks, admin, alice, ns, scope):  # noqa: F811
    pod = create_pod(admin, ray_pod(ns, scope, "worker", "rc-worker-u"))
    path = pod_path(pod)
    message = denied(lambda: alice.json_patch(
        path, [{"op": "remove", "path": "/spec/schedulingGates"}]))
    assert c.GATE in message and USER in message and "raykueue explain" in message
    denied(lambda: alice.merge_patch(path, {"spec": {"schedulingGates": None}}))
    replaced = copy.deepcopy(alice.get(path))
    replaced["spec"]["schedulingGates"] = []
    denied(lambda: alice.request("PUT", path, body=replaced))
    # Cluster admins are not the controller either.
    denied(lambda: admin.json_patch(path, [{"op": "remove", "path": "/spec/schedulingGates"}]))
    assert gates(live(admin, pod)) == [c.GATE]


# --- relabelling -------------------------------------------------------------------------


@pytest.mark.parametrize("key", FROZEN_WHILE_GATED)
def test_relabelling_a_gated_pod_is_denied(webhooks, admin, alice, ns, scope, key):  # noqa: F811
    made = ray_pod(ns, scope, "worker", "rc-worker-l")
    made["metadata"]["labels"].setdefault(key, "as-created")
    pod = create_pod(admin, made)
    path = pod_path(pod)
    pointer = "/metadata/labels/" + key.replace("~", "~0").replace("/", "~1")
    assert key in denied(lambda: alice.json_patch(path, [{"op": "remove", "path": pointer}]))
    assert key in denied(lambda: alice.merge_patch(path, {"metadata": {"labels": {key: "x"}}}))
    assert live(admin, pod)["metadata"]["labels"][key] == pod["metadata"]["labels"][key]
    assert gates(live(admin, pod)) == [c.GATE]


def test_hiding_the_pod_from_the_webhook_then_lifting_fails(webhooks, admin, alice, ns, scope):  # noqa: F811
    # The webhook's objectSelector needs ray.io/node-type on the old or the new
    # pod. The API server does call it for the update that removes the label
    # (the old pod has it), and it says no, so the next update, the gate's
    # removal, cannot slip past unseen.
    pod = create_pod(admin, ray_pod(ns, scope, "worker", "rc-worker-h"))
    path = pod_path(pod)
    remove_label = {"op": "remove", "path": "/metadata/labels/ray.io~1node-type"}
    remove_gate = {"op": "remove", "path": "/spec/schedulingGates"}
    denied(lambda: alice.json_patch(path, [remove_label]))
    denied(lambda: alice.json_patch(path, [remove_label, remove_gate]))
    denied(lambda: alice.json_patch(path, [remove_gate]))
    after = live(admin, pod)
    assert gates(after) == [c.GATE] and after["metadata"]["labels"][c.NODE_TYPE_LABEL] == "worker"


# --- Workloads a user made ---------------------------------------------------------------


def test_a_forged_workload_with_our_name_does_not_lift_the_gate(
        webhooks, admin, alice, ns, scope, run_controller):  # noqa: F811
    pod = create_pod(admin, ray_pod(ns, scope, "worker", "rc-worker-f"))
    forged = alice.create(WORKLOADS.path(ns), forged_workload(pod, scope))
    assert forged["metadata"]["name"] == w.workload_name(pod)
    assert w.is_ours(forged) and w.pod_uid_of(forged) == pod["metadata"]["uid"]
    kueue_status(admin, forged, scope)  # Kueue admits it: 1m fits any quota
    assert w.is_admitted(workload_of(admin, pod))

    running = run_controller(head_first=False)
    wait_for(lambda: "WorkloadMismatch" in {e["reason"] for e in events_for(admin, ns, pod[
        "metadata"]["name"])}, timeout=30, message="a WorkloadMismatch event on the pod")
    assert "podSets do not request what the pod requests" in \
        running.controller.conflicts()[f"{ns}/rc-worker-f"]
    assert stays(lambda: gates(live(admin, pod)) == [c.GATE], seconds=3)

    # Once it is gone the pod gets the real one, and Kueue's admission of that opens the gate.
    alice.delete(WORKLOADS.path(ns, forged["metadata"]["name"]))
    real = wait_for(lambda: (x := workload_of(admin, pod)) and x["metadata"]["uid"] != forged[
        "metadata"]["uid"] and x, timeout=30, message="raykueue's own Workload")
    assert wm.mismatch(real, pod) is None
    kueue_status(admin, real, scope)
    wait_for(lambda: gates(live(admin, pod)) == [], timeout=30, message="the gate to be lifted")


def test_a_forged_workload_under_another_name_is_finished_not_trusted(
        webhooks, admin, alice, ns, scope, run_controller):  # noqa: F811
    pod = create_pod(admin, ray_pod(ns, scope, "worker", "rc-worker-o"))
    # An honest-looking copy: same requests, our label, the pod as controller owner.
    body = w.build_workload(pod, w.Priority(scope["worker"], 100))
    body["metadata"]["name"] = "alices-shortcut"
    forged = alice.create(WORKLOADS.path(ns), body)
    kueue_status(admin, forged, scope)
    run_controller(head_first=False)

    real = wait_for(lambda: workload_of(admin, pod), timeout=30, message="raykueue's Workload")
    assert not w.is_admitted(real)
    wait_for(lambda: w.is_finished(admin.get(WORKLOADS.path(ns, "alices-shortcut"))), timeout=30,
             message="the stray Workload to be finished")
    finished = w.condition(admin.get(WORKLOADS.path(ns, "alices-shortcut")), w.FINISHED)
    assert finished is not None and finished["reason"] == "Duplicate"
    assert stays(lambda: gates(live(admin, pod)) == [c.GATE], seconds=3)
    kueue_status(admin, real, scope)
    wait_for(lambda: gates(live(admin, pod)) == [], timeout=30, message="the gate to be lifted")


def test_a_user_cannot_admit_her_own_workload(webhooks, admin, alice, ns, scope):  # noqa: F811
    # Writing Kueue's status needs workloads/status, which namespace editors lack.
    pod = create_pod(admin, ray_pod(ns, scope, "worker", "rc-worker-s"))
    forged = alice.create(WORKLOADS.path(ns), forged_workload(pod, scope))
    with pytest.raises(ApiError) as caught:
        kueue_status(alice, forged, scope)
    assert caught.value.status == 403
    with contextlib.suppress(ApiError):
        alice.delete(WORKLOADS.path(ns, forged["metadata"]["name"]))


# --- around the scheduler ------------------------------------------------------------------


def test_a_gated_pod_cannot_be_placed_around_the_scheduler(webhooks, admin, ns, scope):  # noqa: F811
    """Found for issue 21: a pod that names its node, or is bound directly, never
    meets kube-scheduler. The API server refuses both while any gate is on, and
    raykueue's webhook puts its gate on every opted-in pod at creation."""
    made = ray_pod(ns, scope, "worker", "rc-worker-n")
    made["spec"].pop("schedulingGates")  # created as KubeRay creates it: no gate of its own
    made["spec"]["nodeName"] = "a-node-of-my-choosing"
    with pytest.raises(ApiError) as caught:
        create_pod(admin, made)
    assert "cannot be set until all schedulingGates have been cleared" in caught.value.message

    pod = create_pod(admin, ray_pod(ns, scope, "worker", "rc-worker-b"))
    name = pod["metadata"]["name"]
    with pytest.raises(ApiError) as caught:
        admin.create(PODS.path(ns, name, "binding"), {
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "namespace": ns},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "a-node-of-my-choosing"}})
    assert "schedulingGates" in caught.value.message
    assert gates(live(admin, pod)) == [c.GATE] and not live(admin, pod)["spec"].get("nodeName")
