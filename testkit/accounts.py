"""Acting as a ServiceAccount on a devstack API server: a token, and a kubeconfig around it.

Tests that run raykueue under the RBAC an install ships (kustomize or Helm) give it
this kubeconfig, so that the API server authorizes it as the ServiceAccount would be.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

import devstack


def service_account_token(api: Any, namespace: str, account: str, seconds: int = 3600) -> str:
    review = api.call("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
                      {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                       "spec": {"expirationSeconds": seconds}})
    return review["status"]["token"]


def token_kubeconfig(stack: devstack.Stack, token: str, path: Path) -> Path:
    """A kubeconfig for the stack's API server that authenticates with `token` only."""
    admin = yaml.safe_load(stack.kubeconfig.read_text())
    ctx = next(x["context"] for x in admin["contexts"] if x["name"] == admin["current-context"])
    cluster = next(x["cluster"] for x in admin["clusters"] if x["name"] == ctx["cluster"])
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "account",
        "clusters": [{"name": "stack", "cluster": cluster}],
        "users": [{"name": "account", "user": {"token": token}}],
        "contexts": [{"name": "account", "context": {"cluster": "stack", "user": "account"}}]}))
    path.chmod(0o600)
    return path
