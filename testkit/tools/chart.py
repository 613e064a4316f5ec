"""What tests/tools/test_chart.py shares with other tests (so that no test module imports another). That
module: charts/raykueue: `helm lint`, and the same objects as manifests/.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

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
