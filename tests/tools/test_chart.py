"""charts/raykueue: `helm lint`, and the same objects as manifests/.

For each chart option, `helm template` must render what `kubectl kustomize`
makes of manifests/ with the matching Component, up to what Helm adds for its
own bookkeeping (the helm.sh/chart and managed-by labels) and the order of
lists whose items are keyed by name (env, volumes, ...), which kustomize's
strategic merge reorders and nothing reads in order.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "raykueue"
COMPONENTS = ROOT / "manifests" / "components"
NAMESPACE = "raykueue-system"
HELM_ONLY_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by")
# chart option (as --set gives it) -> the kustomize Component that does the same
OPTIONS = {
    "priorities.create=true": "priorities",
    "certManager.enabled=true": "cert-manager",
    "monitoring.enabled=true": "monitoring",
}

Objects = dict[tuple[str, str], dict[str, Any]]


def template(helm, *sets: str, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    # The chart renders its Namespace only on request; kustomize always builds one.
    args = ["template", "raykueue", CHART, "--namespace", namespace, "--set", "createNamespace=true"]
    for s in sets:
        args += ["--set", s]
    out = helm(*args)
    assert out.returncode == 0, out.stderr
    # Hooks (the pre-delete uninstall Job) have no kustomize counterpart:
    # tests/tools/test_uninstall_hook.py reads them.
    return [d for d in yaml.safe_load_all(out.stdout) if d and not is_hook(d)]


def is_hook(doc: dict[str, Any]) -> bool:
    return "helm.sh/hook" in ((doc.get("metadata") or {}).get("annotations") or {})


def kustomize(kubectl, tmp_path: Path, components: list[str]) -> list[dict[str, Any]]:
    def rel(path: Path) -> str:  # kustomize takes no absolute roots
        return os.path.relpath(path, tmp_path)

    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [rel(ROOT / "manifests")],
        "components": [rel(COMPONENTS / c) for c in components]}))
    out = kubectl("kustomize", tmp_path)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def normal(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: normal(v) for k, v in value.items()}
    if isinstance(value, list):
        items = [normal(v) for v in value]
        for key in ("name", "mountPath"):
            if items and all(isinstance(v, dict) and key in v for v in items):
                return sorted(items, key=lambda v: str(v[key]))
        return items
    return value


# Cluster-scoped kinds kustomize's built-in schema does not know: it writes the
# install's namespace into them, which the API server drops.
KUSTOMIZE_NAMESPACES_ANYWAY = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")


def objects(docs: list[dict[str, Any]], *, from_helm: bool) -> Objects:
    out: Objects = {}
    for doc in docs:
        if from_helm:
            labels = doc["metadata"].get("labels", {})
            for key in HELM_ONLY_LABELS:
                assert labels.pop(key, None), (doc["kind"], key)
        elif doc["kind"] in KUSTOMIZE_NAMESPACES_ANYWAY:
            doc["metadata"].pop("namespace", None)
        key = (doc["kind"], doc["metadata"]["name"])
        assert key not in out, key
        out[key] = normal(doc)
    return out


def assert_same(chart: Objects, kustomized: Objects) -> None:
    assert sorted(chart) == sorted(kustomized)
    for key, obj in kustomized.items():
        assert chart[key] == obj, key


@pytest.mark.parametrize("options", [[], *[[o] for o in OPTIONS]],
                         ids=lambda o: "+".join(o) or "defaults")
def test_chart_renders_what_kustomize_builds(helm, kubectl, tmp_path: Path,
                                             options: list[str]) -> None:
    chart = objects(template(helm, *options), from_helm=True)
    kustomized = objects(kustomize(kubectl, tmp_path, [OPTIONS[o] for o in options]),
                         from_helm=False)
    assert_same(chart, kustomized)


def test_comparison_notices_a_difference(helm, kubectl, tmp_path: Path) -> None:
    chart = objects(template(helm, "replicas=3"), from_helm=True)
    kustomized = objects(kustomize(kubectl, tmp_path, []), from_helm=False)
    with pytest.raises(AssertionError):
        assert_same(chart, kustomized)


@pytest.mark.parametrize("sets", [[], list(OPTIONS)],
                         ids=["defaults", "every-option"])
def test_helm_lint_is_clean(helm, sets: list[str]) -> None:
    args = ["lint", "--strict", CHART]
    for s in sets:
        args += ["--set", s]
    out = helm(*args)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 chart(s) failed" in out.stdout


def test_values_reach_the_objects(helm) -> None:
    objs = objects(template(helm, "image.repository=registry.example.com/raykueue",
                            "image.tag=0.1.0", "replicas=3", "priorities.create=true",
                            "priorities.head.name=gold", "priorities.head.value=5000",
                            "extraEnv.RAYKUEUE_STUCK_GRACE_SECONDS=300", namespace="ray-ops"),
                   from_helm=True)
    deployment = objs[("Deployment", "raykueue")]
    assert deployment["spec"]["replicas"] == 3
    assert deployment["metadata"]["namespace"] == "ray-ops"
    (ctr,) = deployment["spec"]["template"]["spec"]["containers"]
    assert ctr["image"] == "registry.example.com/raykueue:0.1.0"
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    assert env["RAYKUEUE_HEAD_PRIORITY_CLASS"] == "gold"
    assert "RAYKUEUE_WORKER_PRIORITY_CLASS" not in env
    assert env["RAYKUEUE_STUCK_GRACE_SECONDS"] == "300"
    # Resolved by the kubelet from the pod's namespace (tests/tools/test_install_namespace.py).
    assert env["RAYKUEUE_DNS_NAMES"].split(",")[0] == "raykueue-webhook.$(RAYKUEUE_POD_NAMESPACE).svc"
    assert objs[("WorkloadPriorityClass", "gold")]["value"] == 5000
    hook = objs[("MutatingWebhookConfiguration", "zz-raykueue-mutating")]["webhooks"][0]
    assert hook["clientConfig"]["service"]["namespace"] == "ray-ops"
    (excluded,) = hook["namespaceSelector"]["matchExpressions"]
    assert excluded["values"] == ["kube-system", "ray-ops"]


def test_values_outside_the_schema_are_refused(helm) -> None:
    out = helm("template", "raykueue", CHART, "--set", "replicas=zero")
    assert out.returncode != 0 and "replicas" in out.stderr
