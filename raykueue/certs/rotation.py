"""What to do with the certificate Secret next: a pure plan, no I/O.

A CA rotation is staged so that the API server never meets a serving
certificate it does not trust:

1. "trust": a new CA is issued and joins `ca.crt` (behind the signing CA);
   its key waits in `next-ca.key`, and the serving pair is left as it is.
   The leader injects the grown bundle into every webhook configuration.
2. "settle": every configuration's caBundle holds the new CA, read back from
   the API (see `certs.inject.configs_trust`) at the time recorded. The API
   server applies a changed configuration through a watch, a moment after
   that read; should either stop trusting it meanwhile, back to "trust".
3. "switch": once `settle` has passed, the serving pair is reissued from the
   new CA, which moves to the front of `ca.crt`; the stage key goes.

The stage lives in the Secret's data under `rotation` ("trust", or "settle"
with the time trust was first read back), written in the same conditional
update as the material it describes: whichever replica leads next carries
on from it, and `raykueue certs status` shows it.

The old CA stays in the bundle until it expires: a replica that has not yet
picked up the new pair keeps serving one the API server still trusts, and a
CA left in a bundle costs nothing. (Dropping it once every replica serves
the new pair would need each replica to publish what it serves; expiry needs
no such bookkeeping and cannot be wrong.)

Serving-certificate renewals under the same CA change nothing the API server
trusts, so they happen in one step.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from cryptography import x509

from raykueue.certs.checks import (
    LACKS_SANS,
    RENEW_WITHIN,
    ca_needs_rotation,
    der,
    load_bundle,
    needs_rotation,
    pair_matches,
)
from raykueue.certs.issue import (
    IssuerKey,
    cert_to_pem,
    key_from_pem,
    key_to_pem,
    new_ca,
    new_serving_cert,
)

CA_CERT, CA_KEY, TLS_CERT, TLS_KEY = "ca.crt", "ca.key", "tls.crt", "tls.key"
NEXT_CA_CERT, NEXT_CA_KEY = "next-ca.crt", "next-ca.key"
ROTATION = "rotation"
STAGE_TRUST, STAGE_SETTLE = "trust", "settle"

# Set on the Secret by an operator (`raykueue certs rotate`); the leader
# honours it and removes it in the write that starts the rotation.
ROTATE_ANNOTATION = "raykueue.io/rotate"
ROTATE_CA, ROTATE_SERVING = "ca", "serving"

CA_DAYS = 3650
SERVING_DAYS = 365


@dataclass(frozen=True, slots=True)
class Material:
    """PEM bytes as stored in the Secret; `ca_key` is None when not ours."""

    ca_cert: bytes
    tls_cert: bytes
    tls_key: bytes
    ca_key: bytes | None = None
    next_ca_cert: bytes | None = None
    next_ca_key: bytes | None = None
    # The CA rotation's stage (see the module docstring); None when none is under way.
    rotation: bytes | None = None

    def fields(self) -> dict[str, bytes]:
        out = {CA_CERT: self.ca_cert, TLS_CERT: self.tls_cert, TLS_KEY: self.tls_key}
        for key, value in ((CA_KEY, self.ca_key), (NEXT_CA_CERT, self.next_ca_cert),
                           (NEXT_CA_KEY, self.next_ca_key), (ROTATION, self.rotation)):
            if value is not None:
                out[key] = value
        return out


@dataclass(frozen=True, slots=True)
class Stage:
    """A CA rotation's stage as stored: "trust", or "settle" since `since`."""

    name: str
    since: datetime | None = None

    def encode(self) -> bytes:
        if self.since is None:
            return self.name.encode()
        return f"{self.name} {self.since.isoformat()}".encode()

    @classmethod
    def decode(cls, value: bytes | None) -> Stage:
        """The stored stage; anything unreadable counts as "trust", the safe one."""
        name, _, when = (value or b"").decode("ascii", "replace").partition(" ")
        if name == STAGE_SETTLE:
            try:
                since = datetime.fromisoformat(when)
            except ValueError:
                return cls(STAGE_TRUST)
            if since.tzinfo is not None:
                return cls(STAGE_SETTLE, since)
        return cls(STAGE_TRUST)


@dataclass(frozen=True, slots=True)
class Plan:
    """The outcome of `plan`.

    serve: what replicas serve now (None: nothing usable is stored yet).
    write: the Secret's new content, or None to leave it.
    reason: why `write` (for the log; never key material).
    pending_ca: the CA that must be trusted before the serving pair may move to it.
    clear_request: drop ROTATE_ANNOTATION in the write.
    warning: something an operator should fix that this plan will not.
    """

    serve: Material | None
    write: Material | None = None
    reason: str | None = None
    pending_ca: bytes | None = None
    clear_request: bool = False
    warning: str | None = None


# -- issuing -------------------------------------------------------------------------


def issue_material(dns_names: list[str], ip_addresses: list[str], *,
                   ca_days: int = CA_DAYS, serving_days: int = SERVING_DAYS) -> Material:
    """A new CA and a serving certificate signed by it."""
    ca, ca_key = new_ca(_ca_name(dns_names, ip_addresses), ca_days)
    return serve_from(cert_to_pem(ca), ca, ca_key, dns_names, ip_addresses, serving_days)


def serve_from(ca_bundle: bytes, ca: x509.Certificate, ca_key: IssuerKey,
               dns_names: list[str], ip_addresses: list[str], serving_days: int) -> Material:
    cert, key = new_serving_cert(ca, ca_key, dns_names, ip_addresses, serving_days)
    return Material(ca_bundle, cert_to_pem(cert), key_to_pem(key), key_to_pem(ca_key))


def _ca_name(dns: list[str], ips: list[str]) -> str:
    return f"{(dns + ips)[0]} CA"


def union_sans(cert_pem: bytes, dns: list[str], ips: list[str]) -> tuple[list[str], list[str]]:
    """`dns`/`ips` plus whatever `cert_pem` already serves on."""
    try:
        san = x509.load_pem_x509_certificate(cert_pem).extensions.get_extension_for_class(
            x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        return dns, ips
    have_dns = list(san.get_values_for_type(x509.DNSName))
    have_ips = [str(ip) for ip in san.get_values_for_type(x509.IPAddress)]
    lower = {d.lower() for d in dns}
    wanted_ips = {ipaddress.ip_address(ip) for ip in ips}
    return (dns + [d for d in have_dns if d.lower() not in lower],
            ips + [ip for ip in have_ips if ipaddress.ip_address(ip) not in wanted_ips])


# -- the plan --------------------------------------------------------------------------


def plan(stored: Mapping[str, bytes], dns: list[str], ips: list[str], now: datetime, *,
         request: str | None = None, pending_trusted: bool = False,
         settle: timedelta = timedelta(0), renew_within: timedelta = RENEW_WITHIN,
         ca_days: int = CA_DAYS, serving_days: int = SERVING_DAYS) -> Plan:
    """The next step for a Secret holding `stored` (decoded data).

    `request` is the operator's ROTATE_ANNOTATION value, if any.
    `pending_trusted` says that every webhook configuration's caBundle holds
    the pending CA (`next-ca.crt`), as read back from the API at `now`;
    without it a pending rotation waits. With a `settle` time the trust is
    first recorded (stage "settle") and the switch waits that long after it.
    """
    ca_crt, ca_key = stored.get(CA_CERT), stored.get(CA_KEY)
    tls_crt, tls_key = stored.get(TLS_CERT), stored.get(TLS_KEY)
    current = (Material(ca_crt or b"", tls_crt, tls_key, ca_key)
               if tls_crt and tls_key and pair_matches(tls_crt, tls_key) else None)

    if ca_key is None:
        if current is not None:
            # Someone else's (cert-manager, a human): served as given, never rewritten.
            due = needs_rotation(current.tls_cert, dns, now, ip_addresses=ips,
                                 renew_within=renew_within)
            return Plan(current, warning=due and f"serving as given, not rotating (no {CA_KEY} "
                        f"in the Secret): {due}")
        return Plan(None, issue_material(dns, ips, ca_days=ca_days, serving_days=serving_days),
                    "Secret holds neither a serving pair nor a CA key")

    next_crt, next_key = stored.get(NEXT_CA_CERT), stored.get(NEXT_CA_KEY)
    next_broken = None
    if next_crt or next_key:
        next_broken = ca_needs_rotation(next_crt or b"", next_key or b"", now,
                                        renew_within=renew_within)
    if next_crt and next_key and next_broken is None:
        stage = Stage.decode(stored.get(ROTATION))
        if not pending_trusted or (settle > timedelta(0) and stage.since is None):
            return _wait_for_trust(stored, stage, pending_trusted, now, next_crt, current)
        if stage.since is not None and now - stage.since < settle:
            return Plan(current, pending_ca=next_crt)
        switched = _switch(ca_crt or b"", next_crt, next_key, dns, ips, now, serving_days)
        return Plan(current, switched,
                    "new CA is trusted by the webhook configurations: serving certificate "
                    "reissued from it", clear_request=request is not None)

    ca_reason = ca_needs_rotation(ca_crt or b"", ca_key, now, renew_within=renew_within)
    if ca_reason is None and next_broken is not None:
        ca_reason = f"staged {next_broken}"
    if ca_reason is None and request == ROTATE_CA:
        ca_reason = f"rotation requested ({ROTATE_ANNOTATION}={ROTATE_CA})"
    if ca_reason is not None:
        staged = _stage_new_ca(ca_crt or b"", ca_key, tls_crt, tls_key, dns, ips, now, ca_days,
                               drop=next_crt if next_broken else None)
        return Plan(current, staged, f"{ca_reason}: new CA added to the bundle; the serving "
                    "certificate moves to it once the webhook configurations trust it",
                    pending_ca=staged.next_ca_cert, clear_request=request is not None)

    reason = (needs_rotation(tls_crt, dns, now, ip_addresses=ips, renew_within=renew_within,
                             ca_pem=ca_crt) if tls_crt and tls_key else "serving pair missing")
    if reason is None and current is None:
        reason = "serving key does not match the serving certificate"
    if reason is None and request == ROTATE_SERVING:
        reason = f"rotation requested ({ROTATE_ANNOTATION}={ROTATE_SERVING})"
    if reason is None:
        if request is not None:
            # An unknown value: dropped so that it does not linger; logged by the caller.
            return Plan(current, current, f"ignored {ROTATE_ANNOTATION}={request!r} (want {ROTATE_CA!r} or "
                        f"{ROTATE_SERVING!r})", clear_request=True)
        return Plan(current)
    assert ca_crt
    if tls_crt and reason.startswith(LACKS_SANS):
        # Keep the names already served: during a rolling change of the SAN
        # list, old and new replicas would otherwise take turns rotating.
        dns, ips = union_sans(tls_crt, dns, ips)
    ca = x509.load_pem_x509_certificates(ca_crt)[0]
    return Plan(current, serve_from(ca_crt, ca, key_from_pem(ca_key), dns, ips, serving_days),
                reason, clear_request=request is not None)


def _wait_for_trust(stored: Mapping[str, bytes], stage: Stage, trusted: bool, now: datetime,
                    next_crt: bytes, current: Material | None) -> Plan:
    """Record trust gained (the settle time starts) or lost (it starts over); else wait."""
    if trusted:
        new, reason = Stage(STAGE_SETTLE, now), "every webhook configuration trusts the new CA"
    elif stage.since is not None:
        new, reason = Stage(STAGE_TRUST), "a webhook configuration no longer trusts the new CA"
    else:
        return Plan(current, pending_ca=next_crt)
    return Plan(current, replace(stored_material(stored), rotation=new.encode()),
                f"{reason}: rotation stage {new.name}", pending_ca=next_crt)


def stored_material(stored: Mapping[str, bytes]) -> Material:
    """The Secret's material exactly as stored (for a write that changes only the stage)."""
    return Material(stored.get(CA_CERT) or b"", stored.get(TLS_CERT) or b"",
                    stored.get(TLS_KEY) or b"", stored.get(CA_KEY), stored.get(NEXT_CA_CERT),
                    stored.get(NEXT_CA_KEY), stored.get(ROTATION))


def _valid(bundle: bytes, now: datetime) -> list[x509.Certificate]:
    return [c for c in load_bundle(bundle) if c.not_valid_after_utc > now]


def _stage_new_ca(bundle: bytes, ca_key: bytes, tls_crt: bytes | None, tls_key: bytes | None,
                  dns: list[str], ips: list[str], now: datetime, ca_days: int, *,
                  drop: bytes | None = None) -> Material:
    """Stage 1: the signing CA stays first (it signs what is served); the new one joins.

    `drop` is an unusable staged CA being replaced: nothing was ever served from it.
    """
    ca, key = new_ca(_ca_name(dns, ips), ca_days)
    dropped = {der(c) for c in load_bundle(drop or b"")}
    kept = b"".join(cert_to_pem(c) for c in _valid(bundle, now) if der(c) not in dropped)
    new_pem = cert_to_pem(ca)
    return Material(kept + new_pem, tls_crt or b"", tls_key or b"", ca_key, new_pem,
                    key_to_pem(key), Stage(STAGE_TRUST).encode())


def _switch(bundle: bytes, next_crt: bytes, next_key: bytes, dns: list[str], ips: list[str],
            now: datetime, serving_days: int) -> Material:
    """Stage 2: serve from the new CA, which moves to the front; old CAs stay behind it."""
    ca = x509.load_pem_x509_certificates(next_crt)[0]
    new_der = der(ca)
    others = b"".join(cert_to_pem(c) for c in _valid(bundle, now) if der(c) != new_der)
    return serve_from(cert_to_pem(ca) + others, ca, key_from_pem(next_key), dns, ips,
                      serving_days)
