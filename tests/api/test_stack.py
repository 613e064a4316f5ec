"""The api tier of the local control plane is real and complete."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from kubernetes import client

from testkit.waiting import wait_for

KUEUE_CRDS = {
    "admissionchecks", "clusterqueues", "cohorts", "localqueues", "multikueueclusters",
    "multikueueconfigs", "provisioningrequestconfigs", "resourceflavors", "topologies",
    "workloadpriorityclasses", "workloads",
}


def test_version_is_pinned_kubernetes(k8s, kubectl):
    info = client.VersionApi(k8s).get_code()
    assert info.git_version == "v1.36.3"
    assert (info.major, info.minor) == ("1", "36")
    assert info.git_tree_state == "clean"
    out = kubectl("version", "-o", "json", check=True)
    versions = json.loads(out.stdout)
    assert versions["clientVersion"]["gitVersion"] == "v1.36.3"
    assert versions["serverVersion"]["gitVersion"] == "v1.36.3"


def test_all_crds_established(api_stack):
    crds = api_stack.api.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")["items"]
    established = {
        c["metadata"]["name"] for c in crds
        if any(x["type"] == "Established" and x["status"] == "True"
               for x in c.get("status", {}).get("conditions", []))
    }
    assert {f"{n}.kueue.x-k8s.io" for n in KUEUE_CRDS} <= established
    assert {"rayclusters.ray.io", "rayjobs.ray.io", "rayservices.ray.io"} <= established
    workloads = next(c for c in crds if c["metadata"]["name"] == "workloads.kueue.x-k8s.io")
    served = {v["name"]: v.get("storage", False) for v in workloads["spec"]["versions"] if v["served"]}
    assert served.get("v1beta2") is True


def test_sample_kueue_objects(api_stack):
    api = api_stack.api
    s = api_stack.config.samples
    cq = api.get(f"/apis/kueue.x-k8s.io/v1beta2/clusterqueues/{s.cluster_queue}")
    assert cq["spec"]["namespaceSelector"] == {}
    quotas = {r["name"]: r["nominalQuota"]
              for r in cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]}
    # values are whatever the stack was started with (scripts/cluster up --quota ...)
    assert set(quotas) >= {"cpu", "memory"}
    lq = api.get(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{s.local_queue_namespace}"
                 f"/localqueues/{s.local_queue}")
    assert lq["spec"]["clusterQueue"] == s.cluster_queue
    assert api.get(f"/apis/kueue.x-k8s.io/v1beta2/resourceflavors/{s.flavor}")
    for name, value in {"ray-head": 1000, "ray-worker": 100}.items():
        wpc = api.get(f"/apis/kueue.x-k8s.io/v1beta2/workloadpriorityclasses/{name}")
        assert wpc["value"] == value


def test_pods_are_admitted_with_a_service_account_token(new_namespace, kubectl):
    """serviceaccount-controller + the ServiceAccount admission plugin work together."""
    ns = new_namespace("sa")
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": ns},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    kubectl("create", "-f", "-", input=json.dumps(pod), check=True)
    got = json.loads(kubectl("get", "pod", "p", "-n", ns, "-o", "json", check=True).stdout)
    assert got["spec"]["serviceAccountName"] == "default"
    assert any(v["name"].startswith("kube-api-access-") for v in got["spec"]["volumes"])
    # the root CA publisher fills the ConfigMap that projected tokens reference
    wait_for(lambda: kubectl("get", "configmap", "kube-root-ca.crt", "-n", ns).returncode == 0,
             timeout=30, message="kube-root-ca.crt ConfigMap")


def test_service_account_tokens_are_issued(kubectl):
    """TokenRequest works (--service-account-signing-key-file and issuer are set)."""
    import base64

    out = kubectl("create", "token", "default", "-n", "default", "--duration=10m", check=True)
    token = out.stdout.strip()
    _header, payload, _sig = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert claims["sub"] == "system:serviceaccount:default:default"
    assert claims["iss"] == "https://kubernetes.default.svc.cluster.local"


def test_namespace_deletion_finishes(api_stack):
    """namespace-controller empties and removes a namespace."""
    api = api_stack.api
    api.call("POST", "/api/v1/namespaces",
             {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns-gc-check"}})
    api.call("POST", "/api/v1/namespaces/ns-gc-check/configmaps",
             {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})
    api.delete("/api/v1/namespaces/ns-gc-check")
    wait_for(lambda: api.get_or_none("/api/v1/namespaces/ns-gc-check") is None,
             timeout=60, message="namespace ns-gc-check to be deleted")


def test_an_api_server_restart_leaves_no_custom_resource_of_a_deleted_namespace(api_stack):
    """restart_component lets terminating namespaces go first: the namespace controller
    asking a just-started API server may not see the RayCluster kind in discovery and
    finalize the namespace with its RayCluster left in etcd (measured: 4 of 4 orphaned
    in one round before the fix; a CI run's uninstall test then waited on one)."""
    from devstack.stack import restart_component

    api = api_stack.api
    names = [f"orphan-{i}-{uuid.uuid4().hex[:6]}" for i in range(4)]
    for ns in names:
        api.call("POST", "/api/v1/namespaces",
                 {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        api.call("POST", f"/apis/ray.io/v1/namespaces/{ns}/rayclusters", {
            "apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "rc"},
            "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": {
                "containers": [{"name": "ray-head", "image": "ray"}]}}}}})
    for ns in names:
        api.delete(f"/api/v1/namespaces/{ns}")
    restart_component(api_stack, "kube-apiserver")
    wait_for(lambda: not {n["metadata"]["name"] for n in api.get("/api/v1/namespaces")["items"]} & set(names),
             timeout=120, message="the deleted namespaces to go")
    left = [r["metadata"]["namespace"] for r in api.get("/apis/ray.io/v1/rayclusters")["items"]
            if r["metadata"]["namespace"] in names]
    assert left == []


def test_garbage_collector_follows_owner_references(new_namespace, api_stack):
    api = api_stack.api
    ns = new_namespace("gc")
    owner = api.call("POST", f"/api/v1/namespaces/{ns}/configmaps",
                     {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}})
    api.call("POST", f"/api/v1/namespaces/{ns}/configmaps", {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "dependent", "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
            "uid": owner["metadata"]["uid"]}]}})
    api.delete(f"/api/v1/namespaces/{ns}/configmaps/owner")
    wait_for(lambda: api.get_or_none(f"/api/v1/namespaces/{ns}/configmaps/dependent") is None,
             timeout=60, message="the dependent ConfigMap to be garbage-collected")


def test_state_file_lets_another_process_find_the_stack(api_stack):
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "devstack", "--stack-dir", str(api_stack.dir), "status", "--json"],
        capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parents[2])
    st = json.loads(out.stdout)
    assert st["apiserver_ready"] is True
    assert st["components"]["kube-apiserver"]["state"] == "running"
    assert st["kubeconfig"] == str(api_stack.kubeconfig)


def test_raykueue_server_fixture_registers_webhooks(raykueue_server, api_stack):
    import base64
    import ssl
    import urllib.request

    from raykueue.core.contract import (
        MUTATE_PATH,
        MUTATING_WEBHOOK_CONFIG,
        VALIDATE_PATH,
        VALIDATING_WEBHOOK_CONFIG,
    )

    reg = "/apis/admissionregistration.k8s.io/v1"
    mwc = api_stack.api.get(f"{reg}/mutatingwebhookconfigurations/{MUTATING_WEBHOOK_CONFIG}")
    vwc = api_stack.api.get(f"{reg}/validatingwebhookconfigurations/{VALIDATING_WEBHOOK_CONFIG}")
    # The pod webhook comes first in its configuration (the Ray-object one follows).
    m, (v,) = mwc["webhooks"][0], vwc["webhooks"]
    assert m["clientConfig"]["url"] == raykueue_server.url + MUTATE_PATH
    assert v["clientConfig"]["url"] == raykueue_server.url + VALIDATE_PATH
    assert base64.b64decode(m["clientConfig"]["caBundle"]) == raykueue_server.ca_pem
    assert m["rules"][0]["operations"] == ["CREATE"] and v["rules"][0]["operations"] == ["UPDATE"]
    assert m["rules"][0]["resources"] == ["pods"] == v["rules"][0]["resources"]
    assert m["failurePolicy"] == "Fail" and m["sideEffects"] == "None"
    assert m["reinvocationPolicy"] == "IfNeeded" and m["timeoutSeconds"] == 5
    assert m["admissionReviewVersions"] == ["v1"]
    # The shipped scope (manifests/webhooks.yaml), not a test-only copy of it.
    from devstack.controlplane.webhooks import shipped_webhook_configurations

    shipped = {cfg["metadata"]["name"]: cfg["webhooks"][0] for cfg in shipped_webhook_configurations()
               if "webhooks" in cfg}
    for hook, name in ((m, MUTATING_WEBHOOK_CONFIG), (v, VALIDATING_WEBHOOK_CONFIG)):
        for key in ("objectSelector", "namespaceSelector", "matchConditions"):
            assert hook[key] == shipped[name][key], key

    # a test may stop and start the server again; it comes back on the same port
    raykueue_server.stop()
    assert not raykueue_server.running
    raykueue_server.start()
    ctx = ssl.create_default_context(cafile=str(raykueue_server.ca_file))
    with urllib.request.urlopen(raykueue_server.url + "/healthz", context=ctx, timeout=5) as r:
        assert r.status == 200
