"""The kustomize install validates against the real kube-apiserver and CRDs.

Server-side dry run: the server runs defaulting, schema and CRD validation on
every object but stores nothing, so the shared stack (which registers webhook
configurations of the same names by URL) is left untouched. Namespaced
objects are moved to a fresh namespace, since raykueue-system is not created,
and raykueue's own cluster-scoped objects get a unique name: an apply merges
with a live object of the same name (the stack's webhook configurations point
at a URL, ours at a Service, and both together are invalid).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from raykueue.core import contract as c
from testkit.api.manifests import build, dry_run

ROOT = Path(__file__).resolve().parents[2]
CERT_MANAGER_GROUP = "cert-manager.io"


def test_base_is_accepted(kubectl, new_namespace) -> None:
    ns = new_namespace("manifests")
    applied = dry_run(kubectl, ROOT / "manifests", ns)
    kinds = {o["kind"] for o in applied}
    assert {"Deployment", "Service", "PodDisruptionBudget", "Role", "ClusterRole",
            "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} <= kinds
    hook = next(o for o in applied if o["kind"] == "MutatingWebhookConfiguration"
                and o["metadata"]["name"].startswith(c.MUTATING_WEBHOOK_CONFIG))["webhooks"][0]
    assert hook["reinvocationPolicy"] == "IfNeeded" and hook["matchPolicy"] == "Equivalent"
    # The server compiled and kept the CEL conditions.
    assert [m["name"] for m in hook["matchConditions"]] == ["stamped-or-bare-opt-in"]
    policy = next(o for o in applied if o["kind"] == "ValidatingAdmissionPolicy"
                  and o["metadata"]["name"].startswith(c.STAMP_POLICY + "-"))
    assert [v["name"] for v in policy["spec"]["variables"]] == [
        "optedIn", "stamps", "wasStamped", "handedOver"]
    deployment = next(o for o in applied if o["kind"] == "Deployment")
    (ctr,) = deployment["spec"]["template"]["spec"]["containers"]
    assert ctr["lifecycle"]["preStop"]["sleep"]["seconds"] > 0


@pytest.mark.parametrize(("path", "kinds"), [
    ("manifests/components/priorities", {"WorkloadPriorityClass"}),
    ("examples", {"Namespace", "ClusterQueue", "LocalQueue", "ResourceFlavor", "RayCluster"}),
])
def test_optional_parts_are_accepted(kubectl, new_namespace, path: str, kinds: set[str]) -> None:
    ns = new_namespace("optional")
    applied = dry_run(kubectl, ROOT / path, ns)
    assert {o["kind"] for o in applied} == kinds


def test_cert_manager_overlay_is_accepted(kubectl, new_namespace) -> None:
    """cert-manager's CRDs are not on the test stack: its two objects are checked in
    tests/tools/test_manifests.py; everything the overlay patches is checked here."""
    ns = new_namespace("certmanager")
    docs = build(kubectl, ROOT / "examples" / "cert-manager")
    ours = [d for d in docs if not d["apiVersion"].startswith(CERT_MANAGER_GROUP + "/")]
    assert len(docs) - len(ours) == 2
    applied = dry_run(kubectl, ROOT, ns, ours)
    deployment = next(o for o in applied if o["kind"] == "Deployment")
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert any(v.get("secret", {}).get("secretName") == "raykueue-webhook-cert" for v in volumes)
    for config in (o for o in applied if o["kind"].endswith("WebhookConfiguration")):
        assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]


def test_pod_passes_the_restricted_pod_security_standard(kubectl, new_namespace) -> None:
    ns = new_namespace("psa", labels={"pod-security.kubernetes.io/enforce": "restricted",
                                      "pod-security.kubernetes.io/enforce-version": "latest"})
    built = kubectl("kustomize", str(ROOT / "manifests"), check=True).stdout
    deployment = next(d for d in yaml.safe_load_all(built) if d and d["kind"] == "Deployment")
    template = deployment["spec"]["template"]
    # The PriorityClass is not installed here; Pod Security does not look at it.
    spec = dict(template["spec"], serviceAccountName="default")
    spec.pop("priorityClassName")
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "raykueue", "namespace": ns, "labels": template["metadata"]["labels"]},
           "spec": spec}
    out = kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(pod))
    assert out.returncode == 0, out.stderr
    assert "Warning" not in out.stderr, out.stderr
