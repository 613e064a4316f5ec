"""manifests/ agrees with the names the code uses.

The install and the code spell the same names in two languages; these checks
keep a rename in one from silently breaking the other. Needs a kubectl with
kustomize (the devstack one or any on PATH); skipped without one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.settings import Settings
from webhooks import contract as c

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
NAMESPACE = "raykueue-system"


def _kubectl() -> str | None:
    bin_dir = Path(os.environ.get("RAYKUEUE_BIN_DIR") or Path.home() / ".cache/raykueue/bin")
    if (bin_dir / "kubectl").exists():
        return str(bin_dir / "kubectl")
    return shutil.which("kubectl")


def build(path: Path) -> list[dict[str, Any]]:
    kubectl = _kubectl()
    if kubectl is None:
        pytest.skip("no kubectl to run kustomize")
    out = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.fixture(scope="module")
def objs() -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in build(MANIFESTS)}


def container(objs: dict) -> dict[str, Any]:
    return objs[("Deployment", "raykueue")]["spec"]["template"]["spec"]["containers"][0]


def env(objs: dict) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(objs)["env"]}


def test_everything_namespaced_lives_in_raykueue_system(objs: dict) -> None:
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding",
                      "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
    for (kind, name), obj in objs.items():
        if kind not in cluster_scoped:
            assert obj["metadata"].get("namespace") == NAMESPACE, (kind, name)
    assert ("Namespace", NAMESPACE) in objs


def test_service_account_is_the_default_controller_identity(objs: dict) -> None:
    assert ("ServiceAccount", "raykueue") in objs
    pod = objs[("Deployment", "raykueue")]["spec"]["template"]["spec"]
    identity = f"system:serviceaccount:{NAMESPACE}:{pod['serviceAccountName']}"
    assert identity == c.DEFAULT_CONTROLLER_IDENTITY
    assert identity in Settings().controller_identities


def test_webhooks_match_the_contract(objs: dict) -> None:
    service = objs[("Service", "raykueue-webhook")]
    port = next(p for p in service["spec"]["ports"] if p["name"] == "webhook")
    for kind, name, path, op in (
        ("MutatingWebhookConfiguration", c.MUTATING_WEBHOOK_CONFIG, c.MUTATE_PATH, "CREATE"),
        ("ValidatingWebhookConfiguration", c.VALIDATING_WEBHOOK_CONFIG, c.VALIDATE_PATH, "UPDATE"),
    ):
        (hook,) = objs[(kind, name)]["webhooks"]
        svc = hook["clientConfig"]["service"]
        assert (svc["name"], svc["namespace"], svc["path"], svc["port"]) == (
            "raykueue-webhook", NAMESPACE, path, port["port"])
        assert "caBundle" not in hook["clientConfig"]
        assert hook["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": [op],
                                  "resources": ["pods"], "scope": "Namespaced"}]
        assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
        (expr,) = hook["objectSelector"]["matchExpressions"]
        assert (expr["key"], expr["operator"], tuple(expr["values"])) == (
            c.NODE_TYPE_LABEL, "In", c.MANAGED_ROLES)
        (ns_expr,) = hook["namespaceSelector"]["matchExpressions"]
        assert ns_expr["operator"] == "NotIn" and NAMESPACE in ns_expr["values"]
    mutating = objs[("MutatingWebhookConfiguration", c.MUTATING_WEBHOOK_CONFIG)]["webhooks"][0]
    assert mutating["reinvocationPolicy"] == "IfNeeded"
    # Sorts after Kueue's own configurations.
    assert c.MUTATING_WEBHOOK_CONFIG > "kueue-mutating-webhook-configuration"


def test_service_targets_the_pods_and_their_https_port(objs: dict) -> None:
    service = objs[("Service", "raykueue-webhook")]
    template = objs[("Deployment", "raykueue")]["spec"]["template"]
    labels = template["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    names = {p["name"] for p in container(objs)["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= names


def test_certificate_names_match_the_service_and_rbac(objs: dict) -> None:
    e = env(objs)
    assert e["RAYKUEUE_DNS_NAMES"].split(",") == [
        f"raykueue-webhook.{NAMESPACE}.svc", f"raykueue-webhook.{NAMESPACE}.svc.cluster.local"]
    role = objs[("Role", "raykueue")]
    named = {(r["resources"][0], n) for r in role["rules"] for n in r.get("resourceNames", [])}
    assert ("secrets", e["RAYKUEUE_CERT_SECRET"]) in named
    assert ("leases", Settings().lease_name) in named
    assert e["RAYKUEUE_POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}


def test_rbac_restricts_webhook_patches_to_our_configurations(objs: dict) -> None:
    rules = objs[("ClusterRole", "raykueue")]["rules"]
    admission = [r for r in rules if r["apiGroups"] == ["admissionregistration.k8s.io"]]
    assert {n for r in admission for n in r["resourceNames"]} == {
        c.MUTATING_WEBHOOK_CONFIG, c.VALIDATING_WEBHOOK_CONFIG}
    for rule in rules:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
        assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])
    secrets = [r for r in rules if "secrets" in r["resources"]]
    assert not secrets, "no cluster-wide access to Secrets"


def test_pod_is_locked_down(objs: dict) -> None:
    deployment = objs[("Deployment", "raykueue")]
    pod = deployment["spec"]["template"]["spec"]
    ctr = container(objs)
    sc = ctr["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert {m["mountPath"] for m in ctr["volumeMounts"]} == {"/tmp"}
    assert "--cert-dir" in ctr["args"] and ctr["args"][ctr["args"].index("--cert-dir") + 1] \
        .startswith("/tmp/")
    assert ctr["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert ctr["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert ctr["image"] == "raykueue:latest"
    assert "priorityClassName" not in pod
    assert deployment["spec"]["replicas"] == 2
    assert objs[("PodDisruptionBudget", "raykueue")]["spec"]["minAvailable"] == 1


def test_samples_use_the_default_priority_classes() -> None:
    samples = {(d["kind"], d["metadata"]["name"]): d for d in build(MANIFESTS / "samples")}
    assert samples[("WorkloadPriorityClass", c.DEFAULT_HEAD_PRIORITY_CLASS)]["value"] == 1000
    assert samples[("WorkloadPriorityClass", c.DEFAULT_WORKER_PRIORITY_CLASS)]["value"] == 100
    rc = samples[("RayCluster", "sample")]["metadata"]
    assert rc["annotations"][c.STANDALONE_ANNOTATION] == "true"
    queue = rc["labels"][c.QUEUE_LABEL]
    lq = samples[("LocalQueue", queue)]
    assert lq["metadata"]["namespace"] == rc["namespace"]
    assert ("ClusterQueue", lq["spec"]["clusterQueue"]) in samples
