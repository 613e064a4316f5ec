"""Share one CA and serving certificate between replicas through a Secret.

Every replica of a multi-replica install must present a certificate that the
webhook configurations' caBundle trusts, so the CA cannot be made up per pod.
One replica, the leader (see `certs.keeper`), creates the Secret, rotates it
and injects its CA; the others only read it and serve what it holds.

The Secret is `kubernetes.io/tls` with `tls.crt`, `tls.key` and `ca.crt`, plus
`ca.key` so that the leader can later reissue the serving certificate from the
same CA, and, while a CA rotation is in flight, `next-ca.crt`/`next-ca.key`
(see `certs.rotation` for the stages). A serving renewal keeps the CA (the
caBundle does not change) and, when it happens because a SAN is missing, also
the SANs already served.

Writes are conditional on the resourceVersion that was read: should two
writers ever overlap (a leader change mid-write), one fails with a conflict
and re-reads the other's result.

A Secret without `ca.key` (cert-manager, an operator, a human) is someone
else's to rotate: its pair is served as given and never rewritten.

Nothing here logs key material: only names, reasons and dates.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from raykueue.certs.checks import (
    RENEW_WITHIN,
    ca_needs_rotation,
    issued_by,
    load_bundle,
    needs_rotation,
    pair_matches,
)
from raykueue.certs.issue import cert_to_pem, not_after
from raykueue.certs.rotation import (
    CA_CERT,
    CA_DAYS,
    CA_KEY,
    NEXT_CA_CERT,
    NEXT_CA_KEY,
    ROTATE_ANNOTATION,
    ROTATION,
    SERVING_DAYS,
    TLS_CERT,
    TLS_KEY,
    Material,
    Stage,
    issue_material,
    plan,
)
from raykueue.kube.resources import Resource
from raykueue.kube.rest import ApiError, get_or_none

__all__ = ["SECRETS", "Material", "ca_needs_rotation", "describe", "needs_rotation",
           "read_secret_material", "reconcile_secret", "request_rotation"]

log = logging.getLogger(__name__)

SECRETS = Resource("", "v1", "secrets")
TLS_SECRET_TYPE = "kubernetes.io/tls"
MAX_ATTEMPTS = 5

# Keys this module owns in the Secret: a write drops those the new material lacks.
_MANAGED = (CA_CERT, CA_KEY, TLS_CERT, TLS_KEY, NEXT_CA_CERT, NEXT_CA_KEY, ROTATION)

TrustCheck = Callable[[bytes], bool]


class SecretApi(Protocol):
    """The part of `kube.rest.Rest` this module uses."""

    def get(self, path: str) -> Any: ...

    def create(self, path: str, body: Mapping[str, Any]) -> Any: ...

    def replace(self, path: str, body: Mapping[str, Any]) -> Any: ...


def _never_trusted(_ca_pem: bytes) -> bool:
    return False


# -- the Secret ----------------------------------------------------------------------


def decode(secret: Mapping[str, Any]) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for key, value in (secret.get("data") or {}).items():
        if isinstance(value, str):
            with contextlib.suppress(binascii.Error, ValueError):
                out[key] = base64.b64decode(value, validate=True)
    return out


def _encode(material: Material) -> dict[str, str]:
    return {k: base64.b64encode(v).decode("ascii") for k, v in material.fields().items()}


def rotate_request(secret: Mapping[str, Any]) -> str | None:
    value = ((secret.get("metadata") or {}).get("annotations") or {}).get(ROTATE_ANNOTATION)
    return value if isinstance(value, str) else None


def _secret_body(namespace: str, name: str, material: Material,
                 labels: Mapping[str, str] | None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = dict(labels)
    return {"apiVersion": "v1", "kind": "Secret", "metadata": metadata,
            "type": TLS_SECRET_TYPE, "data": _encode(material)}


def _updated(secret: Mapping[str, Any], material: Material, *,
             clear_request: bool = False) -> dict[str, Any]:
    """The Secret as read, with new data; its resourceVersion makes the PUT conditional."""
    body = dict(secret)
    metadata = dict(body.get("metadata") or {})
    metadata.pop("managedFields", None)  # omitted: the server keeps them
    if clear_request and metadata.get("annotations"):
        annotations = dict(metadata["annotations"])
        annotations.pop(ROTATE_ANNOTATION, None)
        metadata["annotations"] = annotations
    body["metadata"] = metadata
    data = {k: v for k, v in (body.get("data") or {}).items() if k not in _MANAGED}
    data.update(_encode(material))
    body["data"] = data
    return body


def servable(stored: Mapping[str, bytes]) -> Material | None:
    """The pair a replica serves from decoded Secret data, if it holds a matching one."""
    tls_crt, tls_key = stored.get(TLS_CERT), stored.get(TLS_KEY)
    if not tls_crt or not tls_key or not pair_matches(tls_crt, tls_key):
        return None
    return Material(stored.get(CA_CERT) or b"", tls_crt, tls_key)


def read_secret_material(rest: SecretApi, namespace: str, name: str) -> Material | None:
    """What a non-leader serves: the Secret's pair, read and never written. None if absent."""
    secret = get_or_none(rest, SECRETS.path(namespace, name))
    return servable(decode(secret)) if secret is not None else None


def reconcile_secret(rest: SecretApi, namespace: str, name: str, dns_names: Iterable[str],
                     ip_addresses: Iterable[str], *, pending_trusted: TrustCheck = _never_trusted,
                     now: datetime | None = None, settle: timedelta = timedelta(0),
                     renew_within: timedelta = RENEW_WITHIN,
                     ca_days: int = CA_DAYS, serving_days: int = SERVING_DAYS,
                     labels: Mapping[str, str] | None = None) -> tuple[Material | None, bytes | None]:
    """The leader's step: create or advance the Secret; returns (material to serve, pending CA).

    `pending_trusted(ca_pem)` says whether every webhook configuration of raykueue's trusts
    a pending CA; it is asked only while a CA rotation waits on it, and the
    switch waits `settle` after trust was first recorded in the Secret. Races with
    another writer resolve through AlreadyExists and resourceVersion
    conflicts: the loser re-reads and plans again. API errors other than
    those propagate.
    """
    dns, ips = list(dns_names), list(ip_addresses)
    if not dns and not ips:
        raise ValueError("need at least one DNS name or IP address to serve on")
    path = SECRETS.path(namespace, name)
    where = f"Secret {namespace}/{name}"
    for _ in range(MAX_ATTEMPTS):
        moment = now or datetime.now(UTC)
        try:
            secret = rest.get(path)
        except ApiError as exc:
            if not exc.is_not_found:
                raise
            secret = None

        if secret is None:
            material = issue_material(dns, ips, ca_days=ca_days, serving_days=serving_days)
            try:
                rest.create(SECRETS.path(namespace),
                            _secret_body(namespace, name, material, labels))
            except ApiError as exc:
                if exc.is_already_exists:
                    log.info("%s was created by another writer; using theirs", where)
                    continue
                raise
            log.info("created %s with a new CA and a serving certificate for %s",
                     where, ", ".join(dns + ips))
            return material, None

        stored = decode(secret)
        pending = stored.get(NEXT_CA_CERT)
        trusted = bool(pending) and pending_trusted(pending or b"")
        step = plan(stored, dns, ips, moment, request=rotate_request(secret),
                    pending_trusted=trusted, settle=settle, renew_within=renew_within,
                    ca_days=ca_days,
                    serving_days=serving_days)
        if step.warning:
            log.warning("%s: %s", where, step.warning)
        if step.write is None:
            return step.serve, step.pending_ca
        try:
            rest.replace(path, _updated(secret, step.write, clear_request=step.clear_request))
        except ApiError as exc:
            if exc.is_conflict or exc.is_not_found:
                log.info("%s changed while rotating (%s); re-reading", where, exc.reason)
                continue
            raise
        log.info("rotated %s: %s", where, step.reason)
        return servable(step.write.fields()), step.pending_ca
    raise RuntimeError(f"{where}: gave up after {MAX_ATTEMPTS} attempts lost to other writers")


# -- operator requests -----------------------------------------------------------------


def request_rotation(rest: Any, namespace: str, name: str, what: str) -> None:
    """Mark the Secret for the leader to rotate (`what`: ROTATE_CA or ROTATE_SERVING).

    Only an annotation is written: the leader does the rotation (staged, for
    a CA) and removes the mark, so an operator needs no key material and
    cannot race the leader's own writes.
    """
    rest.merge_patch(SECRETS.path(namespace, name),
                     {"metadata": {"annotations": {ROTATE_ANNOTATION: what}}})


def describe(secret: Mapping[str, Any], now: datetime | None = None) -> list[str]:
    """Human-readable lines: the bundle's CAs, who signed the serving pair, any pending step."""
    moment = now or datetime.now(UTC)
    stored = decode(secret)
    lines = []
    bundle = load_bundle(stored.get(CA_CERT) or b"")
    tls = stored.get(TLS_CERT) or b""
    for i, ca in enumerate(bundle):
        pem = cert_to_pem(ca)
        role = "signs the serving certificate" if issued_by(tls, pem) else "trusted"
        lines.append(f"ca.crt[{i}]: {ca.subject.rfc4514_string()}, expires "
                     f"{ca.not_valid_after_utc:%Y-%m-%d}, {role}")
    if tls:
        reason = needs_rotation(tls, [], moment)
        lines.append(f"tls.crt: expires {not_after(tls):%Y-%m-%d}"
                     + (f" ({reason})" if reason else ""))
    if stored.get(NEXT_CA_CERT):
        stage = Stage.decode(stored.get(ROTATION))
        if stage.since is None:
            lines.append("rotation: new CA staged in the bundle (stage trust); the serving "
                         "certificate moves to it once every webhook configuration trusts it")
        else:
            lines.append("rotation: new CA staged in the bundle and trusted by every webhook "
                         f"configuration since {stage.since:%Y-%m-%dT%H:%M:%SZ} (stage settle); "
                         "the serving certificate moves to it next")
    request = rotate_request(secret)
    if request:
        lines.append(f"requested: {ROTATE_ANNOTATION}={request} (the leader has not acted yet)")
    if CA_KEY not in stored:
        lines.append("no ca.key: managed by someone else, served as given")
    return lines
