"""A few JSON calls to the local API server with the admin client certificate.

devstack needs only a handful of calls while it brings the stack up; doing them
with the standard library keeps the stack independent of the code under test.
"""

from __future__ import annotations

import http.client
import json
import ssl
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode, urlsplit


class KubeError(Exception):
    def __init__(self, status: int, method: str, path: str, body: str):
        self.status = status
        self.body = body
        try:
            message = json.loads(body).get("message", body)
        except ValueError:
            message = body
        super().__init__(f"{method} {path}: HTTP {status}: {message[:2000]}")


@dataclass
class KubeApi:
    server: str  # https://127.0.0.1:port
    ca_file: Path
    cert_file: Path
    key_file: Path
    timeout: float = 30.0

    def _context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        ctx.load_cert_chain(str(self.cert_file), str(self.key_file))
        return ctx

    def request(
        self,
        method: str,
        path: str,
        body: object | bytes | None = None,
        *,
        query: dict | None = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> tuple[int, bytes]:
        parts = urlsplit(self.server)
        conn = http.client.HTTPSConnection(
            parts.hostname, parts.port, context=self._context(), timeout=timeout or self.timeout
        )
        if query:
            path = f"{path}?{urlencode(query)}"
        data = None
        headers = {"Accept": "application/json"}
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = content_type
        try:
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def call(self, method: str, path: str, body=None, **kw) -> dict:
        status, data = self.request(method, path, body, **kw)
        if status >= 400:
            raise KubeError(status, method, path, data.decode(errors="replace"))
        return json.loads(data) if data else {}

    def get(self, path: str, **kw) -> dict:
        return self.call("GET", path, **kw)

    def get_or_none(self, path: str) -> dict | None:
        try:
            return self.get(path)
        except KubeError as e:
            if e.status == 404:
                return None
            raise

    def apply(self, path: str, obj: dict, field_manager: str = "raykueue-devstack") -> dict:
        """Server-side apply (JSON is YAML, so the body is sent as JSON)."""
        return self.call(
            "PATCH",
            path,
            obj,
            query={"fieldManager": field_manager, "force": "true"},
            content_type="application/apply-patch+yaml",
        )

    def delete(self, path: str) -> None:
        try:
            self.call("DELETE", path)
        except KubeError as e:
            if e.status != 404:
                raise


# group/version/kind -> (api prefix, plural, namespaced) for what devstack writes.
_KINDS = {
    ("v1", "Namespace"): ("/api/v1", "namespaces", False),
    ("v1", "Node"): ("/api/v1", "nodes", False),
    ("v1", "ConfigMap"): ("/api/v1", "configmaps", True),
    ("v1", "Service"): ("/api/v1", "services", True),
    ("apiregistration.k8s.io/v1", "APIService"):
        ("/apis/apiregistration.k8s.io/v1", "apiservices", False),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"):
        ("/apis/apiextensions.k8s.io/v1", "customresourcedefinitions", False),
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"):
        ("/apis/admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations", False),
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"):
        ("/apis/admissionregistration.k8s.io/v1", "validatingwebhookconfigurations", False),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"):
        ("/apis/admissionregistration.k8s.io/v1", "validatingadmissionpolicies", False),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"):
        ("/apis/admissionregistration.k8s.io/v1", "validatingadmissionpolicybindings", False),
    ("kueue.x-k8s.io/v1beta2", "ResourceFlavor"): ("/apis/kueue.x-k8s.io/v1beta2", "resourceflavors", False),
    ("kueue.x-k8s.io/v1beta2", "ClusterQueue"): ("/apis/kueue.x-k8s.io/v1beta2", "clusterqueues", False),
    ("kueue.x-k8s.io/v1beta2", "LocalQueue"): ("/apis/kueue.x-k8s.io/v1beta2", "localqueues", True),
    ("kueue.x-k8s.io/v1beta2", "WorkloadPriorityClass"):
        ("/apis/kueue.x-k8s.io/v1beta2", "workloadpriorityclasses", False),
}


def object_path(obj: dict) -> str:
    key = (obj["apiVersion"], obj["kind"])
    if key not in _KINDS:
        raise ValueError(f"devstack does not know where {key} lives")
    prefix, plural, namespaced = _KINDS[key]
    meta = obj["metadata"]
    if namespaced:
        return f"{prefix}/namespaces/{meta.get('namespace', 'default')}/{plural}/{meta['name']}"
    return f"{prefix}/{plural}/{meta['name']}"
