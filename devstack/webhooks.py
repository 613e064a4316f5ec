"""Register raykueue's admission webhooks with the API server by URL.

Off the cluster the API server calls the webhook at `clientConfig.url`
(https://127.0.0.1:<port>/...), trusting `ca_bundle_pem`.
"""

from __future__ import annotations

import base64
import os
import tempfile
from pathlib import Path

from webhooks.contract import (
    MUTATE_PATH,
    MUTATING_WEBHOOK_CONFIG,
    NODE_TYPE_LABEL,
    VALIDATE_PATH,
    VALIDATING_WEBHOOK_CONFIG,
)

from .kubeapi import KubeApi, object_path

MUTATING_WEBHOOK_NAME = "mutate-pods.raykueue.io"
VALIDATING_WEBHOOK_NAME = "validate-pods.raykueue.io"


def _api_for(kubeconfig: str | Path) -> KubeApi:
    """A KubeApi from a devstack kubeconfig (file paths for CA and client cert)."""
    import yaml

    cfg = yaml.safe_load(Path(kubeconfig).read_text())
    ctx_name = cfg["current-context"]
    ctx = next(c["context"] for c in cfg["contexts"] if c["name"] == ctx_name)
    cluster = next(c["cluster"] for c in cfg["clusters"] if c["name"] == ctx["cluster"])
    user = next(u["user"] for u in cfg["users"] if u["name"] == ctx["user"])
    paths = {}
    for key, section in (("certificate-authority", cluster), ("client-certificate", user),
                         ("client-key", user)):
        if key in section:
            paths[key] = Path(section[key])
        elif f"{key}-data" in section:  # embedded: write it out once
            fd, name = tempfile.mkstemp(prefix="devstack-", suffix=".pem")
            with os.fdopen(fd, "wb") as f:
                f.write(base64.b64decode(section[f"{key}-data"]))
            paths[key] = Path(name)
        else:
            raise ValueError(f"{kubeconfig}: needs {key} (a client-certificate user)")
    return KubeApi(cluster["server"], paths["certificate-authority"],
                   paths["client-certificate"], paths["client-key"])


def webhook_configurations(
    url_base: str,
    ca_bundle_pem: bytes | str,
    *,
    failure_policy: str = "Fail",
    timeout_seconds: int = 5,
    namespace_selector: dict | None = None,
) -> list[dict]:
    if isinstance(ca_bundle_pem, str):
        ca_bundle_pem = ca_bundle_pem.encode()
    ca_b64 = base64.b64encode(ca_bundle_pem).decode()
    base = url_base.rstrip("/")
    selector = {"matchExpressions": [{"key": NODE_TYPE_LABEL, "operator": "Exists"}]}
    common = {
        "failurePolicy": failure_policy,
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": timeout_seconds,
        "objectSelector": selector,
        "namespaceSelector": namespace_selector or {},
        "matchPolicy": "Equivalent",
    }
    mutating = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": MUTATING_WEBHOOK_CONFIG},
        "webhooks": [{
            "name": MUTATING_WEBHOOK_NAME,
            "clientConfig": {"url": base + MUTATE_PATH, "caBundle": ca_b64},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": ["pods"], "scope": "Namespaced"}],
            "reinvocationPolicy": "IfNeeded",
            **common,
        }],
    }
    validating = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": VALIDATING_WEBHOOK_CONFIG},
        "webhooks": [{
            "name": VALIDATING_WEBHOOK_NAME,
            "clientConfig": {"url": base + VALIDATE_PATH, "caBundle": ca_b64},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
                       "resources": ["pods"], "scope": "Namespaced"}],
            **common,
        }],
    }
    return [mutating, validating]


def register_webhooks(
    kubeconfig: str | Path,
    url_base: str,
    ca_bundle_pem: bytes | str,
    *,
    failure_policy: str = "Fail",
    timeout_seconds: int = 5,
    namespace_selector: dict | None = None,
) -> list[dict]:
    """Create or update both webhook configurations (server-side apply); returns them."""
    api = _api_for(kubeconfig)
    objs = webhook_configurations(url_base, ca_bundle_pem, failure_policy=failure_policy,
                                  timeout_seconds=timeout_seconds,
                                  namespace_selector=namespace_selector)
    return [api.apply(object_path(o), o) for o in objs]


def unregister_webhooks(kubeconfig: str | Path) -> None:
    api = _api_for(kubeconfig)
    for o in webhook_configurations("https://unused", b""):
        api.delete(object_path(o))
