"""What tests/unit/certs/test_secret.py shares with other tests (so that no test module imports another).
That module: certs.secret: the rotation decision, and the Secret protocol against a fake.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from raykueue.kube.rest import ApiError
from testkit.certfiles import ensure_secret_certs
from testkit.fakeapi import FakeApi

NS, NAME = "raykueue-system", "raykueue-webhook-tls"


DNS = ["raykueue-webhook.raykueue-system.svc", "raykueue-webhook.raykueue-system.svc.cluster.local"]


PATH = f"/api/v1/namespaces/{NS}/secrets/{NAME}"


class FakeSecrets(FakeApi):
    """The one fake API, checking what every writer of the Secret must respect."""

    def create(self, path: str, body: Mapping[str, Any], query: Any = None, **kw: Any) -> Any:
        # A create is never conditional: a resourceVersion in it is a bug the API rejects.
        assert "resourceVersion" not in body["metadata"]
        return super().create(path, body, query, **kw)

    def replace(self, path: str, body: Mapping[str, Any], **kw: Any) -> Any:
        current = self.objects.get(path)
        if current is not None and body.get("type") != current.get("type"):
            raise ApiError(422, "Invalid", {"reason": "Invalid", "message": "type is immutable"})
        return super().replace(path, body, **kw)

    def writes(self) -> list[str]:  # type: ignore[override]
        return [verb for verb, _ in super().writes()]

    def stored(self) -> dict[str, bytes]:
        data = self.objects[PATH]["data"]
        return {k: base64.b64decode(v) for k, v in data.items()}


def ensure(fake: FakeSecrets, cert_dir: Path, dns: list[str] = DNS, ips: list[str] | None = None,
           **kw: Any) -> None:
    ensure_secret_certs(fake, NS, NAME, cert_dir, dns, ips or [], **kw)
