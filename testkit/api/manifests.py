"""What tests/api/test_manifests.py shares with other tests (so that no test module imports another). That
module: The kustomize install validates against the real kube-apiserver and CRDs.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

RENAMED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration",
           "ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy",
           "ValidatingAdmissionPolicyBinding"}


CLUSTER_SCOPED = {
    "Namespace", "ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration", "WorkloadPriorityClass", "ClusterQueue", "ResourceFlavor",
    "PriorityClass", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
}


def build(kubectl, path: Path) -> list[dict]:
    built = kubectl("kustomize", str(path), check=True).stdout
    return [d for d in yaml.safe_load_all(built) if d]


def dry_run(kubectl, path: Path, namespace: str, docs: list[dict] | None = None) -> list[dict]:
    docs = build(kubectl, path) if docs is None else docs
    for doc in docs:
        if doc["kind"] not in CLUSTER_SCOPED:
            doc["metadata"]["namespace"] = namespace
        elif doc["kind"] in RENAMED:
            doc["metadata"]["name"] += f"-{namespace}"
        if doc["kind"] == "ClusterRoleBinding":
            doc["roleRef"]["name"] += f"-{namespace}"
        if doc["kind"] == "ValidatingAdmissionPolicyBinding":
            doc["spec"]["policyName"] += f"-{namespace}"
    out = kubectl("apply", "--server-side", "--force-conflicts", "--dry-run=server",
                  "--field-manager=manifest-test", "-o", "json", "-f", "-",
                  input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    return result.get("items", [result])
