"""`kubectl apply -k manifests/` for real, on the real API server, then uninstall.

The api stack runs kube-controller-manager but no scheduler or kubelet: the
Deployment's pods are created and stay Pending, which is exactly "raykueue
installed but not running". That is when the webhook scope must keep every
pod but opted-in Ray pods independent of raykueue.

The shared stack registers webhook configurations of the same names by URL
for other tests (RaykueueServer). This module takes them out of the way for
its duration and puts back whatever it found.
"""

from __future__ import annotations

import base64
import copy
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

import devstack
from devstack.controlplane.kubeapi import KubeError
from raykueue.core import contract as c
from testkit import reviews as rv
from testkit.accounts import service_account_token, token_kubeconfig
from testkit.api.install import (
    ADMISSION,
    CONFIGS,
    FLAVORS,
    MANIFESTS,
    NAMESPACE,
    SERVICE_ACCOUNT,
    WORKLOADS,
    WPCS,
    _admit,
    config_path,
    ours_left,
    wait_namespace_gone,
)
from testkit.servers import RaykueueServer
from testkit.waiting import wait_for

PRIORITIES = MANIFESTS / "components" / "priorities"


def shipped() -> dict[str, dict[str, Any]]:
    docs = yaml.safe_load_all((MANIFESTS / "webhooks.yaml").read_text())
    return {d["metadata"]["name"]: d for d in docs if d and "webhooks" in d}


def pod(name: str, namespace: str, *, labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None, gates: list[str] | None = None,
        owner: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {},
                            "annotations": annotations or {}}
    if owner:
        meta["ownerReferences"] = [owner]
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def create(api, obj: dict[str, Any]) -> dict[str, Any]:
    return api.call("POST", f"/api/v1/namespaces/{obj['metadata']['namespace']}/pods", obj)


def rejected_by_us(api, obj: dict[str, Any]) -> str:
    with pytest.raises(KubeError) as err:
        create(api, obj)
    text = str(err.value)
    assert "mutate-pods.raykueue.io" in text, text
    return text


def test_install_is_applied_with_the_shipped_scope(installed: devstack.Stack) -> None:
    api = installed.api
    want = shipped()
    for plural, name in CONFIGS:
        live = api.get(config_path(plural, name))
        assert len(live["webhooks"]) == len(want[name]["webhooks"])
        for hook, spec in zip(live["webhooks"], want[name]["webhooks"], strict=True):
            assert hook["clientConfig"]["service"] == {
                "name": "raykueue-webhook", "namespace": NAMESPACE,
                "path": spec["clientConfig"]["service"]["path"], "port": 443}
            assert "caBundle" not in hook["clientConfig"], "raykueue injects it when it runs"
            # Every one fails closed (no legacy pod webhook: unstamped pods are adopted).
            assert (hook["failurePolicy"], hook["sideEffects"]) == ("Fail", "None")
            assert hook["timeoutSeconds"] == spec["timeoutSeconds"] <= 10
            if hook["rules"][0]["resources"] == ["pods"]:
                assert hook["objectSelector"] == spec["objectSelector"]
                assert {"key": c.NODE_TYPE_LABEL, "operator": "In", "values": list(c.MANAGED_ROLES)} in \
                    hook["objectSelector"]["matchExpressions"]
            (ns_expr,) = hook["namespaceSelector"]["matchExpressions"]
            assert (ns_expr["key"], ns_expr["operator"]) == ("kubernetes.io/metadata.name", "NotIn")
            assert {"kube-system", NAMESPACE} <= set(ns_expr["values"])
            assert hook["matchConditions"] == spec["matchConditions"]
        assert live["metadata"]["labels"]["app.kubernetes.io/part-of"] == "raykueue"
    mutating = api.get(config_path("mutatingwebhookconfigurations", c.MUTATING_WEBHOOK_CONFIG))
    assert {hook["reinvocationPolicy"] for hook in mutating["webhooks"]} == {"IfNeeded"}
    policy = api.get(f"{ADMISSION}/validatingadmissionpolicies/{c.STAMP_POLICY}")
    assert policy["metadata"]["labels"]["app.kubernetes.io/part-of"] == "raykueue"
    assert api.get(f"{ADMISSION}/validatingadmissionpolicybindings/{c.STAMP_POLICY}")["spec"][
        "validationActions"] == ["Deny"]


def test_deployment_pod_is_admitted(installed: devstack.Stack) -> None:
    """A pod as the ReplicaSet creates it from the installed Deployment passes the
    namespace's restricted Pod Security and resolves our PriorityClass. (This
    stack runs no deployment controller or scheduler: raykueue stays down.)"""
    api = installed.api
    deployment = api.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/raykueue")
    assert deployment["spec"]["replicas"] == 2
    template = deployment["spec"]["template"]
    body = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "raykueue-", "labels": template["metadata"]["labels"]},
            "spec": template["spec"]}
    created = api.call("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", body)
    try:
        assert created["spec"]["priorityClassName"] == "raykueue-critical"
        assert created["spec"]["priority"] == 100_000_000
        assert created["spec"]["serviceAccountName"] == SERVICE_ACCOUNT
        (ctr,) = created["spec"]["containers"]
        assert ctr["lifecycle"]["preStop"]["sleep"]["seconds"] > 0
        assert created["status"]["phase"] == "Pending" and not created["spec"].get("nodeName")
    finally:
        api.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{created['metadata']['name']}")
    pdb = api.get(f"/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets/raykueue")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()


def test_with_raykueue_down_only_opted_in_ray_pods_wait(installed: devstack.Stack,
                                                          new_namespace) -> None:
    """As installed (the Service has no ready endpoint). tests/api/test_scope.py covers
    the scope in full; this is the install's own check."""
    api = installed.api
    ns = new_namespace("managed")
    worker = {c.NODE_TYPE_LABEL: c.ROLE_WORKER, c.QUEUE_LABEL: "q"}
    stamped = {**worker, c.OPTED_IN_LABEL: c.OPTED_IN_VALUE}
    opted_in = {c.STANDALONE_ANNOTATION: "true"}
    owner = {"apiVersion": "ray.io/v1", "kind": c.RAYCLUSTER_KIND, "name": "rc",
             "uid": str(uuid.uuid4()), "controller": True}

    # Created normally: nothing of Ray, another team's KubeRay pod (its RayCluster
    # as owner, no stamp), a role raykueue never manages, and
    # anything in kube-system.
    create(api, pod("plain", ns))
    create(api, pod("ray-not-opted-in", ns, labels=worker, owner=owner))
    create(api, pod("ray-unowned", ns, labels=worker))
    create(api, pod("ray-redis-cleanup", ns, labels={c.NODE_TYPE_LABEL: "redis-cleanup"},
                    annotations=opted_in))
    system_pod = f"ray-in-kube-system-{uuid.uuid4().hex[:6]}"
    create(api, pod(system_pod, "kube-system", labels=stamped, annotations=opted_in))
    try:
        assert api.get(f"/api/v1/namespaces/kube-system/pods/{system_pod}")
    finally:
        api.delete(f"/api/v1/namespaces/kube-system/pods/{system_pod}")

    # Fail closed: a stamped pod of an opted-in cluster, a bare opted-in pod, an
    # invalid bare opt-in (raykueue would deny it).
    text = rejected_by_us(api, pod("ray-opted-in", ns, labels=stamped, owner=owner))
    assert "failed calling webhook" in text
    rejected_by_us(api, pod("ray-bare-opted-in", ns, labels=worker, annotations=opted_in))
    rejected_by_us(api, pod("ray-bad-opt-in", ns, labels=worker,
                            annotations={c.STANDALONE_ANNOTATION: "yes"}))

    # Updates: a Ray pod without our gate never waits for raykueue; one with
    # it (created before raykueue went down) cannot be changed, gate or not.
    # (Not the owned one: the garbage collector deletes it, its owner being made up.)
    path = f"/api/v1/namespaces/{ns}/pods/ray-unowned"
    merge = {"content_type": "application/merge-patch+json"}
    api.call("PATCH", path, {"metadata": {"labels": {"touched": "yes"}}}, **merge)
    create(api, pod("ray-gated", ns, labels=worker, gates=[c.GATE]))
    gated = f"/api/v1/namespaces/{ns}/pods/ray-gated"
    for change in ({"metadata": {"labels": {"touched": "yes"}}},
                   {"spec": {"schedulingGates": None}}):
        with pytest.raises(KubeError) as err:
            api.call("PATCH", gated, change, **merge)
        assert "validate-pods.raykueue.io" in str(err.value)
    assert rv.gates(api.get(gated)) == [c.GATE]


def test_installed_rbac_is_enough_to_run(installed: devstack.Stack, new_namespace,
                                         tmp_path: Path) -> None:
    """`raykueue serve` as the installed ServiceAccount: CA injection into the
    shipped configurations, the shared certificate Secret, leader election,
    a Workload per pod and the gate lifted on admission, with no 403."""
    api = installed.api
    kubeconfig = token_kubeconfig(installed, service_account_token(api, NAMESPACE, SERVICE_ACCOUNT),
                                  tmp_path / "sa.kubeconfig")
    server = RaykueueServer(installed, tmp_path, register=False, args=["--kubeconfig", str(kubeconfig)],
                            env={"KUBECONFIG": str(kubeconfig),
                                 "RAYKUEUE_POD_NAMESPACE": NAMESPACE,
                                 "RAYKUEUE_LEASE_NAMESPACE": NAMESPACE,
                                 "RAYKUEUE_CERT_SECRET": "raykueue-webhook-tls",
                                 "RAYKUEUE_INJECT_CA_BUNDLE": "true"})
    # The installed configurations, pointed at this process instead of the
    # Service and left without a caBundle: only raykueue's injection makes
    # the API server trust it.
    originals = {name: api.get(config_path(plural, name)) for plural, name in CONFIGS}
    for plural, name in CONFIGS:
        hook_path = originals[name]["webhooks"][0]["clientConfig"]["service"]["path"]
        api.call("PATCH", config_path(plural, name),
                 [{"op": "replace", "path": "/webhooks/0/clientConfig",
                   "value": {"url": server.url + hook_path}}],
                 content_type="application/json-patch+json")
    created_priorities = [n for n in (c.DEFAULT_HEAD_PRIORITY_CLASS, c.DEFAULT_WORKER_PRIORITY_CLASS)
                          if api.get_or_none(f"{WPCS}/{n}") is None]
    out = installed.kubectl("apply", "-k", str(PRIORITIES))
    assert out.returncode == 0, out.stderr
    flavor = ""
    try:
        server.start()
        wait_for(server._called_by_api_server, timeout=90, interval=0.5,
                 message=lambda: f"the API server to trust raykueue's injected CA; log:\n{server.logs()}")
        ca = base64.b64encode(server.ca_pem).decode()
        for plural, name in CONFIGS:
            assert api.get(config_path(plural, name))["webhooks"][0]["clientConfig"]["caBundle"] == ca
        secret = api.get(f"/api/v1/namespaces/{NAMESPACE}/secrets/raykueue-webhook-tls")
        assert base64.b64decode(secret["data"]["ca.crt"]) == server.ca_pem

        ns = new_namespace("rbac")
        flavor = f"install-{ns}"
        api.call("POST", FLAVORS, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                                   "metadata": {"name": flavor}})
        # A head: a worker would wait for its cluster's head to be admitted first.
        p = rv.creatable_pod("head")
        p["metadata"].update(name="rbac-head", namespace=ns)
        p["metadata"].setdefault("labels", {})[c.QUEUE_LABEL] = "lq"
        p["metadata"].setdefault("annotations", {})[c.STANDALONE_ANNOTATION] = "true"
        assert rv.gates(create(api, p)) == [c.GATE]
        wl = wait_for(lambda: (api.get(WORKLOADS.format(ns=ns))["items"] or [None])[0], timeout=60,
                      message=lambda: f"a Workload for the pod; log:\n{server.logs()}")
        _admit(api, wl, flavor)
        wait_for(lambda: not rv.gates(api.get(f"/api/v1/namespaces/{ns}/pods/rbac-head")),
                 timeout=60, message=lambda: f"the gate to be lifted; log:\n{server.logs()}")
        lease = api.get(f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/raykueue-controller")
        assert lease["spec"]["holderIdentity"]
        # The controller watches every namespace, so other tests' namespaces being
        # deleted show up as a 403 of the NamespaceLifecycle plugin; that is not RBAC.
        log = server.logs(lines=100_000)
        forbidden = [line for line in log.splitlines()
                     if re.search(r"\b403\b|forbidden", line, re.IGNORECASE)
                     and "because it is being terminated" not in line]
        assert not forbidden, "\n".join(forbidden)
    finally:
        server.stop()
        if flavor:
            api.delete(f"{FLAVORS}/{flavor}")
        for plural, name in CONFIGS:
            restore = copy.deepcopy(originals[name])
            restore["metadata"] = {"name": name, "resourceVersion": api.get(
                config_path(plural, name))["metadata"]["resourceVersion"],
                **{k: v for k, v in restore["metadata"].items() if k in ("labels", "annotations")}}
            api.call("PUT", config_path(plural, name), restore)
        for n in created_priorities:
            api.delete(f"{WPCS}/{n}")


def test_uninstall_leaves_no_webhook_configuration(installed: devstack.Stack) -> None:
    api = installed.api
    out = installed.kubectl("apply", "-k", str(MANIFESTS), timeout=180)
    assert out.returncode == 0, out.stderr
    assert sorted(ours_left(api)) == sorted(name for _, name in CONFIGS)

    out = installed.kubectl("delete", "-k", str(MANIFESTS), timeout=240)
    assert out.returncode == 0, out.stderr
    assert ours_left(api) == []
    wait_namespace_gone(api, NAMESPACE)
    for path in ("/apis/rbac.authorization.k8s.io/v1/clusterroles/raykueue",
                 "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/raykueue",
                 "/apis/scheduling.k8s.io/v1/priorityclasses/raykueue-critical"):
        assert api.get_or_none(path) is None, path
    # Pods are created without raykueue again, opted in or not.
    probe = pod("after-uninstall", "default", labels={c.NODE_TYPE_LABEL: c.ROLE_WORKER},
                annotations={c.STANDALONE_ANNOTATION: "true"})
    created = api.call("POST", "/api/v1/namespaces/default/pods?dryRun=All", probe)
    assert created["metadata"]["name"] == "after-uninstall" and rv.gates(created) == []
