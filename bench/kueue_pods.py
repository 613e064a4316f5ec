"""Kueue's own pod integration, for the side-by-side benchmarks (bench/compare.py).

Paths, webhook names and rules as Kueue v0.19.2 ships them in
config/components/webhook/manifests.yaml (mpod.kb.io, vpod.kb.io); the configuration
names carry the "kueue-" prefix its kustomization adds.
"""

from __future__ import annotations

import base64
import contextlib
import copy
from pathlib import Path

from devstack import Stack
from devstack.components import kueue_dir
from devstack.kubeapi import KubeError, object_path

KUEUE_POD_MUTATE_PATH = "/mutate--v1-pod"
KUEUE_POD_VALIDATE_PATH = "/validate--v1-pod"
KUEUE_MUTATING_CONFIG = "kueue-mutating-webhook-configuration"
KUEUE_VALIDATING_CONFIG = "kueue-validating-webhook-configuration"
KUEUE_POD_GATE = "kueue.x-k8s.io/admission"


def kueue_pod_integration(namespace_selector: dict) -> dict:
    """A `StackConfig.kueue_config` overlay turning Kueue's `pod` integration on.

    Kueue only manages pods in namespaces matching `namespace_selector`
    (its managedJobsNamespaceSelector), so raykueue's namespaces stay its own.
    """
    return {"integrations": {"frameworks": ["batch/job", "pod"]},
            "managedJobsNamespaceSelector": copy.deepcopy(namespace_selector)}


def kueue_webhook_ca(stack: Stack) -> Path:
    """The CA of the self-signed pair devstack gives Kueue's webhook server."""
    return kueue_dir(stack.config) / "webhook-certs" / "tls-ca.crt"


def kueue_pod_webhook_configurations(url_base: str, ca_bundle_pem: bytes,
                                     namespace_selector: dict) -> list[dict]:
    """Kueue's pod mutating (CREATE) and validating (CREATE, UPDATE) webhooks, by URL."""
    ca_b64 = base64.b64encode(ca_bundle_pem).decode()
    base = url_base.rstrip("/")

    def hook(name: str, path: str, operations: list[str]) -> dict:
        return {
            "name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "failurePolicy": "Fail", "namespaceSelector": copy.deepcopy(namespace_selector),
            "clientConfig": {"url": base + path, "caBundle": ca_b64},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": operations,
                       "resources": ["pods"]}],
        }

    return [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
         "metadata": {"name": KUEUE_MUTATING_CONFIG},
         "webhooks": [hook("mpod.kb.io", KUEUE_POD_MUTATE_PATH, ["CREATE"])]},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
         "metadata": {"name": KUEUE_VALIDATING_CONFIG},
         "webhooks": [hook("vpod.kb.io", KUEUE_POD_VALIDATE_PATH, ["CREATE", "UPDATE"])]},
    ]


def register_kueue_pod_webhooks(stack: Stack, namespace_selector: dict) -> list[dict]:
    """Point the API server at the stack's Kueue manager for pods in matching namespaces."""
    port = stack.procs["kueue"].ports["webhook"]
    objs = kueue_pod_webhook_configurations(f"https://127.0.0.1:{port}",
                                            kueue_webhook_ca(stack).read_bytes(), namespace_selector)
    return [stack.api.apply(object_path(o), o) for o in objs]


def unregister_kueue_pod_webhooks(stack: Stack) -> None:
    for o in kueue_pod_webhook_configurations("https://unused", b"", {}):
        with contextlib.suppress(KubeError):
            stack.api.delete(object_path(o))
