"""raykueue installed in a namespace of the user's choosing, by Helm or by kustomize.

What the server will make of its rendered Deployment is worked out the way the
kubelet hands it over: downward-API fields resolved for the namespace the pod
lands in, `$(VAR)` references expanded in order. From that environment the real
`Settings` derive who may lift the gate and which names the serving certificate
carries; both must agree with the ServiceAccount the RBAC binds and with the
Service the webhook configurations call. Helm's release namespace used to leave
the identity at raykueue-system's account, so no gate was ever lifted (issue 21).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.podenv import kubelet_env, settings_from
from testkit.tools.chart import ROOT, template

NAMESPACE = "ray-ops"
def by_kind(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def kustomized_in(kubectl, tmp_path: Path, namespace: str) -> list[dict[str, Any]]:
    """manifests/ under an overlay that only sets the namespace."""
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "namespace": namespace, "resources": [os.path.relpath(ROOT / "manifests", tmp_path)]}))
    return built(kubectl, tmp_path)


def built(kubectl, path: Path) -> list[dict[str, Any]]:
    out = kubectl("kustomize", path)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


# Helm in its release namespace, with and without cert-manager; kustomize with
# nothing but `namespace:`; and examples/another-namespace, the documented
# overlay for the names kustomize cannot reach (cert-manager's among them).
INSTALLS = ["helm", "helm+certManager", "kustomize", "examples/another-namespace"]


@pytest.fixture(params=INSTALLS)
def installed_in_ray_ops(request: pytest.FixtureRequest, helm, kubectl,
                         tmp_path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    if request.param.startswith("helm"):
        sets = ["certManager.enabled=true"] if "certManager" in request.param else []
        return by_kind(template(helm, *sets, namespace=NAMESPACE))
    if request.param == "kustomize":
        return by_kind(kustomized_in(kubectl, tmp_path, NAMESPACE))
    return by_kind(built(kubectl, ROOT / request.param))


def test_the_gate_lifter_is_the_account_the_rbac_binds(installed_in_ray_ops, monkeypatch) -> None:
    objs = installed_in_ray_ops
    deployment = objs[("Deployment", "raykueue")]
    assert deployment["metadata"]["namespace"] == NAMESPACE
    settings = settings_from(kubelet_env(deployment), monkeypatch)
    (subject,) = objs[("ClusterRoleBinding", "raykueue")]["subjects"]
    bound = f"system:serviceaccount:{subject['namespace']}:{subject['name']}"
    assert subject["name"] == deployment["spec"]["template"]["spec"]["serviceAccountName"]
    assert settings.controller_identities == [bound] == [f"system:serviceaccount:{NAMESPACE}:raykueue"]
    assert (settings.pod_namespace, settings.lease_namespace) == (NAMESPACE, NAMESPACE)


def test_the_certificate_names_the_service_the_webhooks_call(installed_in_ray_ops,
                                                             monkeypatch) -> None:
    objs = installed_in_ray_ops
    settings = settings_from(kubelet_env(objs[("Deployment", "raykueue")]), monkeypatch)
    service = objs[("Service", "raykueue-webhook")]["metadata"]
    host = f"{service['name']}.{service['namespace']}.svc"
    certificate = objs.get(("Certificate", "raykueue-webhook"))
    sans = certificate["spec"]["dnsNames"] if certificate else settings.dns_names
    assert host in sans and f"{host}.cluster.local" in sans
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for (k, name), config in objs.items():
            if k != kind:
                continue
            for hook in config["webhooks"]:
                called = hook["clientConfig"]["service"]
                assert (called["name"], called["namespace"]) == (service["name"], NAMESPACE), name
            if certificate:
                assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
                    f"{NAMESPACE}/{certificate['metadata']['name']}"), name


@pytest.mark.parametrize("install", ["helm", "examples/another-namespace"])
def test_the_webhooks_leave_raykueues_own_namespace_alone(install: str, helm, kubectl) -> None:
    """So that raykueue's own pods never wait for raykueue. (An overlay with only
    `namespace:` leaves raykueue-system named here; the example shows the fix.)"""
    docs = template(helm, namespace=NAMESPACE) if install == "helm" else built(kubectl, ROOT / install)
    hooks = [h for d in docs if d["kind"].endswith("WebhookConfiguration") for h in d["webhooks"]]
    assert hooks
    for hook in hooks:
        excluded = {v for e in hook["namespaceSelector"]["matchExpressions"]
                    if (e["key"], e["operator"]) == ("kubernetes.io/metadata.name", "NotIn")
                    for v in e["values"]}
        assert NAMESPACE in excluded and "raykueue-system" not in excluded, hook["name"]


def configmaps_readable(objs: dict[tuple[str, str], dict[str, Any]]) -> set[str]:
    return {name for rule in objs[("ClusterRole", "raykueue")]["rules"]
            if "configmaps" in rule["resources"] and {"get", "list", "watch"} <= set(rule["verbs"])
            for name in rule.get("resourceNames", ["*"])}


def test_the_kueue_configuration_read_is_the_one_the_rbac_lets_it_read(installed_in_ray_ops,
                                                                       monkeypatch) -> None:
    objs = installed_in_ray_ops
    settings = settings_from(kubelet_env(objs[("Deployment", "raykueue")]), monkeypatch)
    assert configmaps_readable(objs) == {settings.kueue_config_map}


@pytest.mark.parametrize("install", ["helm", "examples/another-namespace"])
def test_kueue_installed_by_its_helm_chart_is_named_once(install: str, helm, kubectl,
                                                          monkeypatch) -> None:
    """Kueue's Helm chart, release "queues" in namespace "queues": its Configuration is
    queues/queues-kueue-manager-config. One value names it for the server and the RBAC."""
    if install == "helm":
        docs = template(helm, "kueue.namespace=queues", "kueue.configMap=queues-kueue-manager-config",
                        namespace=NAMESPACE)
    else:
        docs = built(kubectl, ROOT / install)
    objs = by_kind(docs)
    settings = settings_from(kubelet_env(objs[("Deployment", "raykueue")]), monkeypatch)
    assert (settings.kueue_namespace, settings.kueue_config_map) == (
        "queues", "queues-kueue-manager-config")
    assert configmaps_readable(objs) == {"queues-kueue-manager-config"}


@pytest.mark.parametrize("install", ["helm", "helm+certManager", "examples/another-namespace"])
def test_the_own_writes_policy_binds_exactly_the_gate_lifter(install: str, helm, kubectl,
                                                             monkeypatch) -> None:
    """Issue 28: the policy that bounds raykueue's pod deletes names raykueue's own
    account in its own namespace, no other (a same-named account elsewhere is
    someone else's); and the policies skip raykueue's namespace as the webhooks do.
    (An overlay with only `namespace:` keeps raykueue-system's account named here:
    raykueue reports it at runtime, finding PolicyMissing.)"""
    if install.startswith("helm"):
        sets = ["certManager.enabled=true"] if "certManager" in install else []
        docs = template(helm, *sets, namespace=NAMESPACE)
    else:
        docs = built(kubectl, ROOT / install)
    objs = by_kind(docs)
    settings = settings_from(kubelet_env(objs[("Deployment", "raykueue")]), monkeypatch)
    policy = objs[("ValidatingAdmissionPolicy", "raykueue-own-writes")]["spec"]
    (condition,) = policy["matchConditions"]
    assert condition["expression"] == (
        f"request.userInfo.username == '{settings.controller_identities[0]}'")
    assert settings.controller_identities == [f"system:serviceaccount:{NAMESPACE}:raykueue"]
    for name in ("raykueue-stamp", "raykueue-gated-at-creation"):
        selector = objs[("ValidatingAdmissionPolicy", name)]["spec"]["matchConstraints"]["namespaceSelector"]
        excluded = {v for e in selector["matchExpressions"] for v in e["values"]}
        assert NAMESPACE in excluded and "raykueue-system" not in excluded, name
