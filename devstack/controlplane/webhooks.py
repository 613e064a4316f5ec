"""Register raykueue's admission webhooks with the API server by URL.

Off the cluster the API server calls the webhook at `clientConfig.url`
(https://127.0.0.1:<port>/...), trusting `ca_bundle_pem`. The configurations
are read from manifests/webhooks.yaml, so that tests run against the scope
rules (selectors, matchConditions) an install ships, never a copy of them. The
ValidatingAdmissionPolicy there (the stamp's protection, which calls no webhook)
and its binding are registered as shipped.
"""

from __future__ import annotations

import base64
import copy
import os
import tempfile
from pathlib import Path

from .kubeapi import KubeApi, object_path

MANIFEST = Path(__file__).resolve().parents[2] / "manifests" / "webhooks.yaml"


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


def shipped_webhook_configurations() -> list[dict]:
    """Every webhook configuration exactly as manifests/webhooks.yaml ships it, in file order."""
    import yaml

    return [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]


def by_url(configs: list[dict], url_base: str, ca_bundle_pem: bytes | str) -> list[dict]:
    """Copies of webhook configurations that call `url_base` + each service path instead.

    Only the name of each configuration is kept: labels and annotations of an
    install (e.g. cert-manager's inject-ca-from) mean nothing for a registration by URL.
    """
    if isinstance(ca_bundle_pem, str):
        ca_bundle_pem = ca_bundle_pem.encode()
    ca_b64 = base64.b64encode(ca_bundle_pem).decode()
    base = url_base.rstrip("/")
    out = copy.deepcopy(configs)
    for config in out:
        config["metadata"] = {"name": config["metadata"]["name"]}
        for hook in config.get("webhooks", []):
            service = hook["clientConfig"]["service"]
            hook["clientConfig"] = {"url": base + service.get("path", "/"), "caBundle": ca_b64}
    return out


def webhook_configurations(
    url_base: str,
    ca_bundle_pem: bytes | str,
    *,
    failure_policy: str | None = None,
    timeout_seconds: int | None = None,
    namespace_selector: dict | None = None,
) -> list[dict]:
    """The shipped configurations, pointed at `url_base` instead of the in-cluster Service.

    Everything else (selectors, matchConditions, policies) is the manifest's,
    so tests exercise the scope rules a real install has. The overrides are
    for tests that need a different failure policy, timeout or namespace scope.
    """
    configs = by_url(shipped_webhook_configurations(), url_base, ca_bundle_pem)
    for config in configs:
        if namespace_selector is not None and config["kind"] == "ValidatingAdmissionPolicy":
            config["spec"]["matchConstraints"]["namespaceSelector"] = namespace_selector
        for hook in config.get("webhooks", []):
            if failure_policy is not None:
                hook["failurePolicy"] = failure_policy
            if timeout_seconds is not None:
                hook["timeoutSeconds"] = timeout_seconds
            if namespace_selector is not None:
                hook["namespaceSelector"] = namespace_selector
    return configs


def register_webhooks(
    kubeconfig: str | Path,
    url_base: str,
    ca_bundle_pem: bytes | str,
    *,
    failure_policy: str | None = None,
    timeout_seconds: int | None = None,
    namespace_selector: dict | None = None,
) -> list[dict]:
    """Create or update every webhook configuration (server-side apply); returns them."""
    api = _api_for(kubeconfig)
    objs = webhook_configurations(url_base, ca_bundle_pem, failure_policy=failure_policy,
                                  timeout_seconds=timeout_seconds,
                                  namespace_selector=namespace_selector)
    return [api.apply(object_path(o), o) for o in objs]


def unregister_webhooks(kubeconfig: str | Path) -> None:
    api = _api_for(kubeconfig)
    for o in shipped_webhook_configurations():
        api.delete(object_path(o))
