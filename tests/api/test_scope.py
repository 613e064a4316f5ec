"""Scope by construction, on the real API server: what waits for raykueue, and what never does.

The shipped configurations (manifests/webhooks.yaml, with their selectors and CEL)
are registered pointing at a port nobody listens on: raykueue is down. A request a
fail-closed webhook matches is then refused with "failed calling webhook"; one no
webhook matches goes through. So
each test reads the scope itself off the API server's answer. The stamp's
ValidatingAdmissionPolicy needs no raykueue at all and is judged the same way.

This module takes the shared stack's configurations of the same names out of the
way for its duration and puts back whatever it found.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import devstack
from devstack.controlplane.kubeapi import KubeError, object_path
from devstack.controlplane.webhooks import shipped_webhook_configurations, webhook_configurations
from raykueue.core import contract as c
from testkit import reviews as rv
from testkit.api.scope import OPTED_IN, STAMPED, path, ray_object
from testkit.waiting import wait_for

MERGE = {"content_type": "application/merge-patch+json"}


class Registrations:
    """Switch raykueue's shipped configurations between absent and present-but-down."""

    def __init__(self, stack: devstack.Stack) -> None:
        self.api = stack.api
        (self.dead_port,) = devstack.free_ports(1)
        # A CA that parses: the call then fails where an outage makes it fail, on connect.
        self.ca = (stack.dir / "pki" / "ca.crt").read_bytes()

    def off(self) -> None:
        for obj in shipped_webhook_configurations():
            self.api.delete(object_path(obj))
        wait_for(lambda: self._probe_created() and self._opted_in_raycluster_created(), timeout=30,
                 interval=0.2, message="the API server to drop raykueue's webhooks and policy")

    def down(self, without: tuple[str, ...] = ()) -> None:
        """Registered, calling nobody: raykueue is down. `without`: configurations left out."""
        for obj in webhook_configurations(f"https://127.0.0.1:{self.dead_port}", self.ca):
            if obj["metadata"]["name"] not in without:
                self.api.apply(object_path(obj), obj)
        pods_hooked = c.MUTATING_WEBHOOK_CONFIG not in without
        wait_for(lambda: (not pods_hooked or not self._probe_created())
                 and not self._opted_in_raycluster_created(), timeout=30, interval=0.2,
                 message="the API server to call raykueue's (down) webhooks and apply its policy")

    def _opted_in_raycluster_created(self) -> bool:
        """Whether a dry-run unstamped opted-in RayCluster is created (neither webhook nor policy)."""
        probe = ray_object("RayCluster", "scope-probe", annotations=OPTED_IN)
        # On the e2e stack Kueue's webhooks give it namespace default's LocalQueue
        # `default`, and refuse autoscaling on a RayCluster they then manage.
        del probe["spec"]["enableInTreeAutoscaling"]
        try:
            self.api.call("POST", path("default", "RayCluster") + "?dryRun=All", probe)
        except KubeError:
            return False
        return True

    def _probe_created(self) -> bool:
        """Whether a dry-run stamped Ray pod is created (no fail-closed webhook matched it)."""
        probe = rv.creatable_pod("worker")
        probe["metadata"].update(generateName="scope-probe-", namespace="default")
        probe["metadata"]["labels"].update(STAMPED)
        try:
            self.api.call("POST", "/api/v1/namespaces/default/pods?dryRun=All", probe)
        except KubeError as err:
            assert "failed calling webhook" in str(err), err
            return False
        return True


@pytest.fixture(scope="module")
def hooks(api_stack: devstack.Stack) -> Iterator[Registrations]:
    api = api_stack.api
    saved = []
    for obj in shipped_webhook_configurations():
        found = api.get_or_none(object_path(obj))
        if found is not None:
            meta = found["metadata"]
            found["metadata"] = {k: meta[k] for k in ("name", "labels", "annotations") if k in meta}
            saved.append(found)
    registrations = Registrations(api_stack)
    try:
        yield registrations
    finally:
        registrations.off()
        for obj in saved:
            api.apply(object_path(obj), obj)


@pytest.fixture
def ns(new_namespace: Callable[..., str]) -> str:
    return new_namespace("scope")


def pod(ns: str, owner: dict[str, Any] | None, *, labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None, role: str = "worker") -> dict[str, Any]:
    """A pod as KubeRay makes it: `owner` (a RayCluster) as its controller, or a bare one."""
    body = rv.creatable_pod(role)
    meta = body["metadata"]
    meta.update(generateName=f"rc-{role}-", namespace=ns)
    meta["labels"].update(labels or {})
    meta.setdefault("annotations", {}).update(annotations or {})
    if owner is not None:
        meta["ownerReferences"] = [owner_ref(owner)]
    return body


def owner_ref(owner: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": owner["kind"], "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"], "controller": True}


def create_pod(api, body: dict[str, Any]) -> dict[str, Any]:
    return api.call("POST", f"/api/v1/namespaces/{body['metadata']['namespace']}/pods?dryRun=All", body)


def refused(call: Callable[[], Any], *, by: str) -> str:
    with pytest.raises(KubeError) as err:
        call()
    text = str(err.value)
    assert by in text, text
    return text


# --- pods ---------------------------------------------------------------------------------


def test_with_raykueue_down_only_stamped_and_bare_opted_in_pods_wait(hooks: Registrations, ns: str,
                                                                      api_stack) -> None:
    api = api_stack.api
    hooks.down()
    rc = api.call("POST", path(ns, "RayCluster"), ray_object("RayCluster", "rc", suspend=True))
    queue = {c.QUEUE_LABEL: "team-a"}
    # Other teams' KubeRay pods are created as usual (raykueue's gate never on them;
    # on the e2e stack Kueue's pod webhook may take them): the owner reference alone
    # no longer brings a pod into scope, nor a pod template's own opt-in annotation.
    for body in (pod(ns, rc, labels=queue), pod(ns, rc, labels=queue, role="head"),
                 pod(ns, rc, annotations=OPTED_IN), pod(ns, rc, annotations={c.STANDALONE_ANNOTATION: "bad"}),
                 pod(ns, None), pod(ns, rc, labels={c.NODE_TYPE_LABEL: "redis-cleanup", **STAMPED})):
        assert c.GATE not in rv.gates(create_pod(api, body))
    system = pod("kube-system", None, labels=STAMPED)
    assert c.GATE not in rv.gates(create_pod(api, system))
    # What opted in waits: a stamped pod (its cluster opted in), a bare pod's own opt-in.
    for body in (pod(ns, rc, labels=STAMPED), pod(ns, rc, labels=STAMPED, role="head"),
                 pod(ns, None, annotations=OPTED_IN),
                 pod(ns, None, annotations={c.STANDALONE_ANNOTATION: "bad"})):
        refused(lambda body=body: create_pod(api, body), by="mutate-pods.raykueue.io")


# --- Ray objects ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["RayCluster", "RayJob", "RayService"])
def test_with_raykueue_down_ray_objects_that_did_not_opt_in_are_created(hooks: Registrations, ns: str,
                                                                         api_stack, kind: str) -> None:
    api = api_stack.api
    hooks.down()
    job = api.call("POST", path(ns, "RayJob"), ray_object("RayJob", "job", suspend=True))
    # On the e2e stack Kueue takes it (its queue label) and refuses autoscaling on it.
    theirs = ray_object(kind, "theirs", labels={c.QUEUE_LABEL: "team-a"}, autoscaling=False)
    # A Ray owner no longer brings an object into scope (KubeRay copies the owner's
    # annotations, so an opted-in owner's RayCluster carries the opt-in itself).
    theirs["metadata"]["ownerReferences"] = [owner_ref(job)]
    api.call("POST", path(ns, kind) + "?dryRun=All", theirs)
    mine = ray_object(kind, "mine", annotations=OPTED_IN)
    refused(lambda: api.call("POST", path(ns, kind) + "?dryRun=All", mine),
            by=f"first-{kind.lower()}s.raykueue.io")
    # An opt-in on a pod template reaches raykueue (which refuses it, saying where it belongs).
    template_opt_in = ray_object(kind, "template")
    spec = template_opt_in["spec"].get("rayClusterSpec") or template_opt_in["spec"].get(
        "rayClusterConfig") or template_opt_in["spec"]
    spec["workerGroupSpecs"][0]["template"]["metadata"]["annotations"] = OPTED_IN
    refused(lambda: api.call("POST", path(ns, kind) + "?dryRun=All", template_opt_in),
            by=f"first-{kind.lower()}s.raykueue.io")


def test_updates_of_an_opted_in_raycluster_wait_only_when_they_change_what_raykueue_keeps(
        hooks: Registrations, ns: str, api_stack) -> None:
    api = api_stack.api
    hooks.off()
    stored = api.call("POST", path(ns, "RayCluster"),
                      ray_object("RayCluster", "rc", annotations={**OPTED_IN, c.QUEUE_ANNOTATION: "team-a"},
                                 stamped=True))
    hooks.down()
    rc = path(ns, "RayCluster", "rc")
    # The autoscaler's patches, and anything else raykueue keeps nothing in, never wait.
    workers = copy.deepcopy(stored["spec"]["workerGroupSpecs"])
    workers[0]["replicas"] = 3
    workers[0]["scaleStrategy"] = {"workersToDelete": ["rc-cpu-abcde"]}
    api.call("PATCH", rc, {"spec": {"workerGroupSpecs": workers}}, **MERGE)
    api.call("PATCH", rc, {"metadata": {"labels": {"team": "a"}}}, **MERGE)
    # What would undo raykueue's work waits for it.
    unstamped = copy.deepcopy(workers)
    unstamped[0]["template"]["metadata"]["labels"] = {}
    for change in ({"spec": {"workerGroupSpecs": unstamped}},
                   {"spec": {"autoscalerOptions": {"env": []}}},
                   {"metadata": {"labels": {c.QUEUE_LABEL: "team-b"}}},
                   {"metadata": {"annotations": {c.STANDALONE_ANNOTATION: None}}}):
        refused(lambda change=change: api.call("PATCH", rc + "?dryRun=All", change, **MERGE),
                by="first-rayclusters.raykueue.io")


def test_the_stamp_is_protected_without_raykueue(hooks: Registrations, ns: str, api_stack) -> None:
    """aa-raykueue-first missing (a partial install): the policy refuses what it would have stamped."""
    api = api_stack.api
    hooks.off()
    clusters = path(ns, "RayCluster")
    legacy = api.call("POST", clusters, ray_object("RayCluster", "legacy", annotations=OPTED_IN))
    hooks.down(without=(c.FIRST_MUTATING_WEBHOOK_CONFIG, c.MUTATING_WEBHOOK_CONFIG))
    message = refused(lambda: api.call("POST", path(ns, "RayCluster"),
                                       ray_object("RayCluster", "new", annotations=OPTED_IN)),
                      by="raykueue-stamp")
    assert c.FIRST_MUTATING_WEBHOOK_CONFIG in message
    refused(lambda: api.call("POST", clusters, ray_object("RayCluster", "theirs", stamped=True)),
            by="raykueue-stamp")
    api.call("POST", clusters, ray_object("RayCluster", "mine", annotations=OPTED_IN, stamped=True))
    # A cluster opted in before raykueue stamped templates keeps updating.
    workers = copy.deepcopy(legacy["spec"]["workerGroupSpecs"])
    workers[0]["replicas"] = 2
    api.call("PATCH", path(ns, "RayCluster", "legacy"), {"spec": {"workerGroupSpecs": workers}}, **MERGE)
    # A stamped one does not lose its stamp.
    unstamped = copy.deepcopy(workers)
    refused(lambda: api.call("PATCH", path(ns, "RayCluster", "mine"),
                             {"spec": {"workerGroupSpecs": unstamped}}, **MERGE),
            by="raykueue-stamp")


def test_a_stamped_pod_is_refused_without_its_gate_even_with_raykueue_away(
        hooks: Registrations, ns: str, api_stack) -> None:
    """A webhook after ours that strips the gate, or a pod written straight to the API with
    the stamp and no gate: the API server itself refuses it (raykueue-gated-at-creation)."""
    api = api_stack.api
    hooks.off()
    hooks.down(without=(c.FIRST_MUTATING_WEBHOOK_CONFIG, c.MUTATING_WEBHOOK_CONFIG))
    pods = f"/api/v1/namespaces/{ns}/pods"

    def created(body: dict[str, Any]) -> bool:
        try:
            api.call("POST", pods + "?dryRun=All", body)
        except KubeError:
            return False
        return True

    # The API server loads policies through an informer: a moment after they are applied.
    wait_for(lambda: not created(pod(ns, None, labels=STAMPED)), timeout=30, interval=0.2,
             message="raykueue-gated-at-creation to be in force")
    message = refused(lambda: api.call("POST", pods, pod(ns, None, labels=STAMPED)),
                      by="raykueue-gated-at-creation")
    assert "outside quota" in message
    gated = pod(ns, None, labels=STAMPED)
    gated["spec"]["schedulingGates"] = [{"name": c.GATE}]
    api.call("POST", pods, gated)
    # Not stamped: none of the policy's business, gate or no gate.
    api.call("POST", pods, pod(ns, None))
