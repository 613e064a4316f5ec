"""Where the serving certificate comes from, and how it reaches the TLS context.

Two sources, one destination (`certs.serving.ServingContext`, loaded with bytes):
- `--cert-dir` (one process, or a mounted Secret): files, issued with a CA
  when absent and polled for changes; the CLI's contract.
- `RAYKUEUE_CERT_SECRET` (replicas): the Secret, read through the API by
  `certs.keeper.SecretCertKeeper`, which hands each new pair over as bytes.
  Only `ca.crt` is written to the cert dir, for clients that want to trust
  the server; the key stays in memory.
"""

from __future__ import annotations

import logging
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from raykueue.app.metrics import CERT_EXPIRY, CERT_RELOADS, TLS_HANDSHAKES
from raykueue.app.settings import Settings
from raykueue.app.startup import StartupError
from raykueue.certs.inject import inject_ca_bundle
from raykueue.certs.keeper import SecretCertKeeper, placeholder_pair
from raykueue.certs.rotation import Material
from raykueue.certs.serving import ServingContext
from raykueue.certs.store import CA_CERT, CertPaths, CertReloader, HalfPair, ensure_certs, write_atomic
from raykueue.core import contract as c
from raykueue.kube.rest import Rest

log = logging.getLogger("raykueue")


@dataclass(frozen=True, slots=True)
class Certificates:
    """The serving pair's source and the context it is loaded into."""

    serving: ServingContext
    # Where clients find the CA to trust; None when the cert dir came without one.
    ca_file: Path | None
    keeper: SecretCertKeeper | None
    reloader: CertReloader | None

    def ready(self) -> tuple[bool, str]:
        if not self.serving.loaded:
            return False, "serving certificate not loaded"
        keeper = self.keeper
        if keeper is not None and not keeper.synced:
            why = f": {keeper.last_error}" if keeper.last_error else ""
            return False, f"waiting for Secret {keeper.namespace}/{keeper.name}{why}"
        return True, f"serving certificate valid until {self.serving.not_after:%Y-%m-%dT%H:%M:%SZ}"

    def stop(self) -> None:
        if self.keeper is not None:
            self.keeper.wake()
        if self.reloader is not None:
            self.reloader.stop()


def counted(cert_pem: bytes, key_pem: bytes) -> ServingContext:
    """A serving context whose loads and handshakes show on /metrics."""
    serving = ServingContext.from_pem(cert_pem, key_pem)
    serving.on_load(_count_load)
    serving.on_hello = TLS_HANDSHAKES.inc
    return serving


def from_cert_dir(settings: Settings, rest: Rest | None, stop: threading.Event,
                  threads: list[threading.Thread]) -> Certificates:
    """Serve the files in the cert dir (issued when absent) and follow their changes."""
    paths = _cert_files(settings)
    try:
        serving = counted(paths.tls_cert.read_bytes(), paths.tls_key.read_bytes())
    except (OSError, ValueError, ssl.SSLError) as exc:
        raise StartupError(
            f"{paths.tls_cert} and {paths.tls_key} are not a usable PEM certificate and its key "
            f"({_why(exc)}) (fix: put a matching pair there, or remove both, and ca.crt and ca.key "
            "with them, to have raykueue issue its own)") from exc
    reloader = CertReloader(serving, paths.tls_cert, paths.tls_key)
    if settings.inject_ca_bundle and rest is not None:
        inject = _injector(rest, paths.ca_cert)
        serving.on_load(lambda _expires: inject())
        # Also on a timer: the configurations may be created (or reset by a
        # re-apply of the manifests) after this process started.
        threads.append(_thread("ca-bundle", _every, settings.ca_bundle_interval_seconds, inject,
                               stop))
    reloader.start()
    return Certificates(serving, paths.ca_cert, None, reloader)


def _cert_files(settings: Settings) -> CertPaths:
    where = f"{settings.cert_dir} (--cert-dir / RAYKUEUE_CERT_DIR)"
    try:
        return ensure_certs(settings.cert_dir, tuple(settings.dns_names), tuple(settings.ip_addresses))
    except HalfPair as exc:
        raise StartupError(
            f"{exc.have} is there but {exc.lacks} is not; raykueue never writes over a certificate "
            f"it was given (fix: add {exc.lacks.name}, or remove {exc.have.name} to have raykueue "
            "issue its own)") from exc
    except OSError as exc:
        raise StartupError(
            f"cannot write certificates into {where}: {exc.filename or settings.cert_dir}: "
            f"{exc.strerror or exc} (fix: make that directory writable by this user, or mount "
            "tls.crt and tls.key there)") from exc


def _why(exc: BaseException) -> str:
    # OpenSSL's reason (e.g. "[SSL] PEM lib") or the parser's, without the class path.
    return f"{type(exc).__name__}: {exc}"


def from_secret(settings: Settings, rest: Rest | None, is_leader: Callable[[], bool],
                stop: threading.Event, threads: list[threading.Thread]) -> Certificates:
    """Serve the Secret's pair; until it is read, a placeholder pair and /readyz false."""
    s = settings
    assert s.cert_secret is not None
    if rest is None:
        raise StartupError(
            f"RAYKUEUE_CERT_SECRET={s.cert_secret} needs a cluster to read the Secret from, and "
            "none is configured (fix: run in a pod or give --kubeconfig, or unset "
            "RAYKUEUE_CERT_SECRET to serve from --cert-dir)")
    ca_file = Path(s.cert_dir) / CA_CERT
    serving = counted(*placeholder_pair(list(s.dns_names), list(s.ip_addresses)))
    keeper = SecretCertKeeper(
        rest, s.pod_namespace, s.cert_secret, list(s.dns_names), list(s.ip_addresses),
        is_leader=is_leader, mutating_config=c.MUTATING_WEBHOOK_CONFIGS,
        validating_config=c.VALIDATING_WEBHOOK_CONFIG,
        on_material=lambda material: _serve(serving, ca_file, material),
        inject=s.inject_ca_bundle, poll_seconds=s.cert_secret_poll_seconds,
        leader_seconds=s.ca_bundle_interval_seconds, settle_seconds=s.ca_trust_settle_seconds)
    try:
        keeper.tick()  # not leading yet: only reads, so a Secret that exists is served at once
    except Exception as exc:
        log.warning("reading certificate Secret %s/%s failed (retrying): %s",
                    s.pod_namespace, s.cert_secret, exc)
    if not keeper.synced:
        log.info("Secret %s/%s not there yet: serving a placeholder certificate, not ready",
                 s.pod_namespace, s.cert_secret)
    threads.append(_thread("cert-secret", keeper.run, stop))
    return Certificates(serving, ca_file, keeper, None)


def _serve(serving: ServingContext, ca_file: Path, material: Material) -> None:
    if not serving.load(material.tls_cert, material.tls_key, "from the Secret"):
        raise ValueError("the Secret's serving pair did not load")
    # Public: lets a client on this host (a test, an operator) trust the server.
    ca_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if material.ca_cert:
        write_atomic(ca_file, material.ca_cert, 0o644)
    else:
        ca_file.unlink(missing_ok=True)


def _injector(rest: Rest, ca_file: Path | None) -> Callable[[], None]:
    def inject() -> None:
        if ca_file is None:
            log.warning("no ca.crt next to the serving certificate: caBundle not injected")
            return
        changed = inject_ca_bundle(rest, ca_file.read_bytes(), c.MUTATING_WEBHOOK_CONFIGS,
                                   c.VALIDATING_WEBHOOK_CONFIG)
        if changed:
            log.info("injected the CA into %d webhook(s)", changed)

    return inject


def _every(seconds: float, fn: Callable[[], None], stop: threading.Event) -> None:
    while not stop.wait(seconds):
        try:
            fn()
        except Exception as exc:  # the API may be briefly away; the next tick retries
            log.warning("caBundle injection failed: %s", exc)


def _count_load(expires: datetime) -> None:
    CERT_EXPIRY.set(expires.timestamp())
    CERT_RELOADS.inc()


def _thread(name: str, target: Callable[..., None], *args: object) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, name=name, daemon=True)
    thread.start()
    return thread
