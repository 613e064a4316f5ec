"""certs.secret against the real kube-apiserver.

What the unit fake cannot prove: that the server accepts our kubernetes.io/tls
Secret, answers a lost create race with AlreadyExists and a stale PUT with
Conflict in the form kube.rest.ApiError classifies, and that the namespaced
Role shipped in manifests/rbac.yaml is exactly enough for the Secret protocol.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from raykueue.certs import secret as s
from raykueue.kube.rest import ApiError, Rest
from testkit.certfiles import ensure_secret_certs

NAME = "raykueue-webhook-tls"  # the name the Role in manifests/rbac.yaml allows
DNS = ["raykueue-webhook.ns.svc", "raykueue-webhook.ns.svc.cluster.local"]
RBAC = Path(__file__).resolve().parents[2] / "manifests" / "rbac.yaml"


def secret_path(ns: str, name: str = NAME) -> str:
    return f"/api/v1/namespaces/{ns}/secrets/{name}"


def stored(rest: Rest, ns: str) -> dict[str, bytes]:
    obj = rest.get(secret_path(ns))
    return {k: base64.b64decode(v) for k, v in obj["data"].items()}


def files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if not p.name.startswith(".")}


@pytest.fixture
def rest(k8s) -> Rest:
    return Rest(k8s)


def test_creates_a_tls_secret_the_server_accepts(rest: Rest, new_namespace, tmp_path: Path):
    ns = new_namespace("certs")
    ensure_secret_certs(rest, ns, NAME, tmp_path, DNS, ["127.0.0.1"])
    obj = rest.get(secret_path(ns))
    assert obj["type"] == "kubernetes.io/tls"
    assert set(obj["data"]) == {"tls.crt", "tls.key", "ca.crt", "ca.key"}
    data = stored(rest, ns)
    assert files(tmp_path) == {k: data[k] for k in ("ca.crt", "tls.crt", "tls.key")}
    x509.load_pem_x509_certificate(data["tls.crt"]).verify_directly_issued_by(
        x509.load_pem_x509_certificate(data["ca.crt"]))


def test_replicas_racing_end_up_with_one_certificate(rest: Rest, new_namespace, tmp_path: Path):
    ns = new_namespace("certs")
    n = 6
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def replica(i: int) -> None:
        try:
            barrier.wait(10)
            ensure_secret_certs(rest, ns, NAME, tmp_path / str(i), DNS, [])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=replica, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    data = stored(rest, ns)
    want = {k: data[k] for k in ("ca.crt", "tls.crt", "tls.key")}
    for i in range(n):
        assert files(tmp_path / str(i)) == want, f"replica {i} serves another certificate"


class Interloper:
    """Rest, except that another writer touches the Secret between our read and our PUT."""

    def __init__(self, rest: Rest) -> None:
        self.rest = rest
        self.interfered = 0

    def get(self, path: str) -> Any:
        return self.rest.get(path)

    def create(self, path: str, body: Mapping[str, Any]) -> Any:
        return self.rest.create(path, body)

    def replace(self, path: str, body: Mapping[str, Any]) -> Any:
        if not self.interfered:
            self.interfered += 1
            self.rest.merge_patch(path, {"metadata": {"annotations": {"touched": "yes"}}})
        return self.rest.replace(path, body)


def test_stale_rotation_is_retried_on_the_servers_conflict(
        rest: Rest, new_namespace, tmp_path: Path):
    ns = new_namespace("certs")
    ensure_secret_certs(rest, ns, NAME, tmp_path, DNS, [], serving_days=10)
    before = stored(rest, ns)

    # The real server's answer to a stale resourceVersion is what we classify.
    stale = rest.get(secret_path(ns))
    rest.merge_patch(secret_path(ns), {"metadata": {"labels": {"bump": "1"}}})
    with pytest.raises(ApiError) as info:
        rest.replace(secret_path(ns), stale)
    assert info.value.is_conflict and not info.value.is_already_exists

    interloper = Interloper(rest)
    ensure_secret_certs(interloper, ns, NAME, tmp_path, DNS, [])
    assert interloper.interfered == 1
    after = stored(rest, ns)
    obj = rest.get(secret_path(ns))
    assert obj["metadata"]["annotations"]["touched"] == "yes"  # the other write survived
    assert obj["metadata"]["labels"]["bump"] == "1"
    assert after["ca.crt"] == before["ca.crt"] and after["ca.key"] == before["ca.key"]
    assert after["tls.crt"] != before["tls.crt"]
    assert s.needs_rotation(after["tls.crt"], DNS, datetime.now(UTC)) is None
    assert files(tmp_path)["tls.crt"] == after["tls.crt"]


def test_lost_create_race_classified_as_already_exists(rest: Rest, new_namespace, tmp_path: Path):
    ns = new_namespace("certs")
    ensure_secret_certs(rest, ns, NAME, tmp_path / "a", DNS, [])
    body = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": NAME, "namespace": ns},
            "data": {"tls.crt": "", "tls.key": ""}}
    with pytest.raises(ApiError) as info:
        rest.create(f"/api/v1/namespaces/{ns}/secrets", body)
    assert info.value.is_already_exists and not info.value.is_conflict


# -- the shipped Role ------------------------------------------------------------------


def _manifest_role(ns: str) -> tuple[dict[str, Any], dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(RBAC.read_text()) if d]
    role = next(d for d in docs if d["kind"] == "Role")
    binding = next(d for d in docs if d["kind"] == "RoleBinding")
    for obj in (role, binding):
        obj["metadata"]["namespace"] = ns
    for subject in binding["subjects"]:
        subject["namespace"] = ns
    return role, binding


@pytest.fixture
def as_service_account(k8s, rest: Rest, new_namespace) -> Iterator[tuple[str, Rest]]:
    """(namespace, Rest impersonating raykueue's ServiceAccount bound to the shipped Role)."""
    from kubernetes import client

    ns = new_namespace("certs-rbac")
    rest.create(f"/api/v1/namespaces/{ns}/serviceaccounts",
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "raykueue"}})
    role, binding = _manifest_role(ns)
    rest.create(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles", role)
    rest.create(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", binding)
    impersonating = client.ApiClient(k8s.configuration)
    impersonating.set_default_header("Impersonate-User", f"system:serviceaccount:{ns}:raykueue")
    try:
        yield ns, Rest(impersonating)
    finally:
        impersonating.close()


def test_shipped_role_allows_the_secret_protocol(as_service_account, rest: Rest,
                                                 tmp_path: Path):
    ns, sa = as_service_account
    # create (nothing there yet), then get + update (a new SAN forces a rotation)
    ensure_secret_certs(sa, ns, NAME, tmp_path, DNS[:1], [])
    first = stored(rest, ns)
    ensure_secret_certs(sa, ns, NAME, tmp_path, DNS, [])
    second = stored(rest, ns)
    assert second["tls.crt"] != first["tls.crt"] and second["ca.crt"] == first["ca.crt"]
    assert files(tmp_path)["tls.crt"] == second["tls.crt"]


def test_shipped_role_allows_nothing_else_on_secrets(as_service_account, rest: Rest):
    ns, sa = as_service_account
    other = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "other"},
             "stringData": {"k": "v"}}
    rest.create(f"/api/v1/namespaces/{ns}/secrets", other)

    def forbidden(call) -> None:
        with pytest.raises(ApiError) as info:
            call()
        assert info.value.status == 403, info.value

    forbidden(lambda: sa.get(secret_path(ns, "other")))
    forbidden(lambda: sa.get(f"/api/v1/namespaces/{ns}/secrets"))
    forbidden(lambda: sa.replace(secret_path(ns, "other"), rest.get(secret_path(ns, "other"))))
    forbidden(lambda: sa.delete(secret_path(ns, "other")))
    forbidden(lambda: sa.get("/api/v1/namespaces/default/secrets/anything"))
