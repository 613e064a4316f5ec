"""Certificate rotation in the cluster, on a real API server.

Two `raykueue serve` replicas share the certificate Secret behind a
round-robin TCP pass-through on 127.0.0.1 (the stand-in for the Service);
the webhook configurations point at it by URL. While the API server sends
them a steady, bounded stream of opted-in pod creations (server-side dry
run: the webhook is still called), an operator forces a CA rotation and the
stream must see zero failed admissions.

Also: a replica that does not hold the Lease waits for the Secret, serves
it, and never writes it nor the caBundle; the leader repairs a reset caBundle.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import devstack
from raykueue.certs import checks
from raykueue.certs import rotation as r
from raykueue.certs.issue import cert_to_pem
from raykueue.core import contract as c
from raykueue.core.clock import format_micro_time
from raykueue.kube.client import load_api_client
from raykueue.kube.rest import Rest
from testkit.certfiles import ensure_secret_certs
from testkit.servers import RaykueueServer, raykueue_command
from testkit.stackfixtures import new_namespace  # noqa: F401
from testkit.waiting import wait_for

MUTATING = (f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/"
            f"{c.MUTATING_WEBHOOK_CONFIG}")
VALIDATING = (f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/"
              f"{c.VALIDATING_WEBHOOK_CONFIG}")


# -- the stand-in for the Service ----------------------------------------------------


class RoundRobinProxy:
    """Accepts on 127.0.0.1 and pipes each connection to the next backend in turn."""

    def __init__(self, backends: list[int]) -> None:
        self.backends = backends
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections: Counter[int] = Counter()
        self._turn = itertools.cycle(backends)
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> RoundRobinProxy:
        self._thread.start()
        return self

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            backend = next(self._turn)
            try:
                upstream = socket.create_connection(("127.0.0.1", backend), timeout=5)
            except OSError:
                client.close()  # the API server sees a failed call: counted by the load loop
                continue
            upstream.settimeout(None)
            self.connections[backend] += 1
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
                with contextlib.suppress(OSError):
                    s.shutdown(how)

    def close(self) -> None:
        self._closed = True
        self.listener.close()


# -- helpers -------------------------------------------------------------------------


def worker_pod(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "rot-", "namespace": namespace,
                     "labels": {c.NODE_TYPE_LABEL: c.ROLE_WORKER, c.QUEUE_LABEL: "team-a"},
                     "annotations": {c.STANDALONE_ANNOTATION: "true"}},
        "spec": {"containers": [{"name": "ray-worker", "image": "rayproject/ray:2.9.0"}]},
    }


@dataclass
class Load:
    """A bounded loop of dry-run pod creations through the API server."""

    api: Any
    namespace: str
    max_requests: int = 20000
    max_seconds: float = 600.0
    workers: int = 3
    requests: int = 0
    failures: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Load:
        deadline = time.monotonic() + self.max_seconds
        for i in range(self.workers):
            thread = threading.Thread(target=self._run, args=(deadline,), name=f"load-{i}",
                                      daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def _run(self, deadline: float) -> None:
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        body = worker_pod(self.namespace)
        while not self.stop.is_set() and time.monotonic() < deadline:
            with self._lock:
                if self.requests >= self.max_requests:
                    return
                self.requests += 1
            failure = None
            try:
                status, data = self.api.request("POST", path, body, query={"dryRun": "All"},
                                                timeout=30)
                if status != 201:
                    failure = f"HTTP {status}: {data[:300]!r}"
                elif not any(g.get("name") == c.GATE
                             for g in json.loads(data)["spec"].get("schedulingGates") or []):
                    failure = "created without our gate: the webhook was not called"
            except Exception as exc:  # a client-side error is a failed admission too
                failure = f"{type(exc).__name__}: {exc}"
            if failure:
                with self._lock:
                    self.failures.append(failure)

    @property
    def succeeded(self) -> int:
        with self._lock:
            return self.requests - len(self.failures)

    def finish(self) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(60)


def served_leaf(port: int) -> bytes:
    """The serving certificate a replica presents now (no verification: we inspect it)."""
    return ssl.get_server_certificate(("127.0.0.1", port), timeout=5).encode()


def secret_data(api: Any, namespace: str, name: str) -> dict[str, bytes]:
    secret = api.get(f"/api/v1/namespaces/{namespace}/secrets/{name}")
    return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}


def ca_bundle(api: Any, path: str) -> bytes:
    hook = api.get(path)["webhooks"][0]
    return base64.b64decode(hook["clientConfig"].get("caBundle") or "")


def admissions(server: RaykueueServer) -> float:
    return server.metric_total("raykueue_admission_requests_total")


def raykueue_cli(stack: devstack.Stack, *args: str) -> str:
    result = subprocess.run([*raykueue_command(), *args, "--kubeconfig", str(stack.kubeconfig)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr + result.stdout
    return result.stdout


def replica_env(namespace: str, secret: str, lease: str) -> dict[str, str]:
    return {
        "RAYKUEUE_CERT_SECRET": secret,
        "RAYKUEUE_POD_NAMESPACE": namespace,
        "RAYKUEUE_INJECT_CA_BUNDLE": "true",
        "RAYKUEUE_CA_BUNDLE_INTERVAL_SECONDS": "1",
        "RAYKUEUE_CERT_SECRET_POLL_SECONDS": "0.5",
        "RAYKUEUE_CA_TRUST_SETTLE_SECONDS": "2",
        "RAYKUEUE_LEASE_NAMESPACE": namespace,
        "RAYKUEUE_LEASE_NAME": lease,
    }


@pytest.fixture
def cleanup() -> Iterator[list[Any]]:
    """Callables run at teardown, last first."""
    undo: list[Any] = []
    yield undo
    for fn in reversed(undo):
        try:
            fn()
        except Exception as exc:
            print(f"cleanup {fn!r} failed: {exc}", file=sys.stderr)


# -- the rotation under load ---------------------------------------------------------


@dataclass
class Rig:
    namespace: str
    secret: str
    replicas: list[RaykueueServer]
    proxy: RoundRobinProxy
    old_ca: bytes


def start_rig(api_stack: devstack.Stack, ns: str, tmp_path: Path, cleanup: list[Any],
              **env_overrides: str) -> Rig:
    """Two replicas sharing a fresh Secret, behind the proxy, registered by URL at it."""
    secret = f"rk-tls-{uuid.uuid4().hex[:6]}"
    env = {**replica_env(ns, secret, "raykueue-certs"), **env_overrides}
    replicas = []
    for i in range(2):
        (tmp_path / str(i)).mkdir()
        replica = RaykueueServer(api_stack, tmp_path / str(i), register=False, env=env,
                                 ready_timeout=120)
        cleanup.append(replica.stop)
        replicas.append(replica.start())  # the first waits for its own (leader's) Secret
    old_ca = secret_data(api_stack.api, ns, secret)["ca.crt"]
    assert len(checks.load_bundle(old_ca)) == 1
    for replica in replicas:
        assert checks.issued_by(served_leaf(replica.port), old_ca)

    proxy = RoundRobinProxy([replica.port for replica in replicas]).start()
    cleanup.append(proxy.close)
    devstack.register_webhooks(api_stack.kubeconfig, proxy.url, old_ca)
    cleanup.append(lambda: devstack.unregister_webhooks(api_stack.kubeconfig))
    wait_for(lambda: replicas[0]._called_by_api_server(), timeout=60,
             message="the API server to call the webhook through the proxy")
    return Rig(ns, secret, replicas, proxy, old_ca)


def test_ca_rotation_under_load_fails_no_admission(
        api_stack, new_namespace, tmp_path: Path, cleanup, record_property) -> None:  # noqa: F811
    ns = new_namespace("rot")
    rig = start_rig(api_stack, ns, tmp_path, cleanup)
    api, secret, replicas, proxy, old_ca = (api_stack.api, rig.secret, rig.replicas, rig.proxy,
                                            rig.old_ca)

    load = Load(api, ns).start()
    cleanup.append(load.finish)
    wait_for(lambda: load.succeeded >= 30 or load.failures, timeout=120,
             message="the load loop to get going")
    before_rotation = load.requests
    started = time.monotonic()

    print(raykueue_cli(api_stack, "certs", "rotate", "--ca", "--secret", secret, "-n", ns))

    # The ordering, sampled while it happens: a replica serving a certificate
    # from a CA the configurations do not all trust yet would break calls.
    seen_untrusted: list[str] = []

    def new_ca_everywhere() -> bytes | None:
        data = secret_data(api, ns, secret)
        signing = checks.load_bundle(data["ca.crt"])[0]
        signing_pem = cert_to_pem(signing)
        if signing_pem == old_ca:
            return None
        leaves = [served_leaf(replica.port) for replica in replicas]
        bundles = [ca_bundle(api, MUTATING), ca_bundle(api, VALIDATING)]
        for leaf in leaves:
            if checks.issued_by(leaf, signing_pem) and not all(
                    checks.bundle_contains(b, signing_pem) for b in bundles):
                seen_untrusted.append("a replica served the new CA's certificate before the "
                                      "caBundle trusted it")
        if all(checks.issued_by(leaf, signing_pem) for leaf in leaves):
            return signing_pem
        return None

    new_ca = wait_for(new_ca_everywhere, timeout=180, interval=0.2,
                      message=lambda: "both replicas to serve a certificate from the new CA; "
                      f"failures so far {len(load.failures)}; log:\n{replicas[0].logs(30)}")
    rotation_seconds = time.monotonic() - started
    at_rotation_end = load.requests
    # A little more traffic on the new certificates, then stop the loop.
    wait_for(lambda: load.requests >= at_rotation_end + 30 or load.stop.is_set(), timeout=120,
             message="traffic after the rotation")
    load.finish()

    per_replica = [admissions(replica) for replica in replicas]
    final = secret_data(api, ns, secret)
    summary = {
        "requests": load.requests, "failures": len(load.failures),
        "requests_during_rotation": at_rotation_end - before_rotation,
        "rotation_seconds": round(rotation_seconds, 1),
        "admissions_per_replica": per_replica,
        "proxy_connections_per_replica": [proxy.connections[x.port] for x in replicas],
    }
    print(f"\ncert rotation under load: {json.dumps(summary)}")
    for key, value in summary.items():
        record_property(key, value)

    assert load.failures == [], load.failures[:5]
    assert seen_untrusted == []
    assert at_rotation_end - before_rotation > 0
    assert all(count > 0 for count in per_replica), per_replica
    # The old CA stays trusted behind the new one; no staged CA is left over.
    bundle = [cert_to_pem(x) for x in checks.load_bundle(final["ca.crt"])]
    assert bundle == [new_ca, old_ca]
    assert "next-ca.crt" not in final
    assert ca_bundle(api, MUTATING) == final["ca.crt"] == ca_bundle(api, VALIDATING)
    annotations = api.get(f"/api/v1/namespaces/{ns}/secrets/{secret}")["metadata"].get(
        "annotations") or {}
    assert r.ROTATE_ANNOTATION not in annotations


# -- who writes ----------------------------------------------------------------------


def hold_lease(api: Any, namespace: str, name: str, holder: str) -> None:
    now = format_micro_time(datetime.now(UTC))
    api.call("POST", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases", {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 3600,
                 "acquireTime": now, "renewTime": now, "leaseTransitions": 0}})


def readyz(server: RaykueueServer) -> tuple[int, dict[str, Any]]:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the placeholder is trusted by nobody, on purpose
    try:
        with urllib.request.urlopen(server.url + "/readyz", context=context, timeout=3) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_only_the_leader_writes_and_it_repairs_the_ca_bundle(
        api_stack, new_namespace, tmp_path: Path, cleanup) -> None:  # noqa: F811
    ns = new_namespace("rotw")
    secret, lease = f"rk-tls-{uuid.uuid4().hex[:6]}", "raykueue-certs"
    api = api_stack.api
    rest = Rest(load_api_client(str(api_stack.kubeconfig)))
    hold_lease(api, ns, lease, "another-replica")
    # The configurations exist with someone else's CA: a non-leader must leave them be.
    devstack.register_webhooks(api_stack.kubeconfig, "https://127.0.0.1:9",
                               api_stack.ca_file.read_bytes())
    cleanup.append(lambda: devstack.unregister_webhooks(api_stack.kubeconfig))
    foreign = ca_bundle(api, MUTATING)

    replica = RaykueueServer(api_stack, tmp_path, register=False,
                             env=replica_env(ns, secret, lease))
    cleanup.append(replica.stop)
    replica.start(wait_ready=False)

    # Before the Secret exists: listening, not ready, and not creating it.
    status, body = wait_for(lambda: (got := readyz(replica)) and got, timeout=60,
                            message=lambda: f"/readyz to answer; log:\n{replica.logs()}")
    assert status == 503 and "waiting for Secret" in body["checks"]["certificates"]["detail"]
    assert api.get_or_none(f"/api/v1/namespaces/{ns}/secrets/{secret}") is None

    # The (absent) leader's Secret appears: due for renewal and asked to rotate its CA,
    # so a replica that wrote would show itself at once.
    ensure_secret_certs(rest, ns, secret, tmp_path / "other", ["localhost"], ["127.0.0.1"],
                        serving_days=10)
    rest.merge_patch(f"/api/v1/namespaces/{ns}/secrets/{secret}",
                     {"metadata": {"annotations": {r.ROTATE_ANNOTATION: r.ROTATE_CA}}})
    wait_for(lambda: readyz(replica)[0] == 200, timeout=60,
             message=lambda: f"the replica to serve the Secret; log:\n{replica.logs()}")
    served = secret_data(api, ns, secret)
    assert checks.issued_by(served_leaf(replica.port), served["ca.crt"])

    extra = r.issue_material(["extra"], []).ca_cert
    for round_ in range(3):
        # A change the replica must read proves it refreshed after our last write.
        data = dict(api.get(f"/api/v1/namespaces/{ns}/secrets/{secret}"))
        base = base64.b64decode(data["data"]["ca.crt"]).replace(extra, b"")
        bundle = base + extra if round_ % 2 == 0 else base  # a real change every round
        data["data"]["ca.crt"] = base64.b64encode(bundle).decode()
        written = api.call("PUT", f"/api/v1/namespaces/{ns}/secrets/{secret}", data)
        version = written["metadata"]["resourceVersion"]
        wait_for(lambda b=bundle: replica.ca_file.exists() and replica.ca_file.read_bytes() == b,
                 timeout=30, message="the replica to pick up the Secret's change")
        current = api.get(f"/api/v1/namespaces/{ns}/secrets/{secret}")
        assert current["metadata"]["resourceVersion"] == version
        assert current["metadata"]["annotations"][r.ROTATE_ANNOTATION] == r.ROTATE_CA
        assert ca_bundle(api, MUTATING) == foreign == ca_bundle(api, VALIDATING)

    # The other holder goes away: this replica leads, honours the request, injects.
    api.delete(f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{lease}")
    wait_for(lambda: r.ROTATE_ANNOTATION not in (api.get(
        f"/api/v1/namespaces/{ns}/secrets/{secret}")["metadata"].get("annotations") or {}),
        timeout=60, message=lambda: f"the new leader to act; log:\n{replica.logs()}")
    wait_for(lambda: ca_bundle(api, MUTATING) == secret_data(api, ns, secret)["ca.crt"]
             == ca_bundle(api, VALIDATING), timeout=30, message="the caBundle to be injected")

    # Someone resets the caBundle (a re-apply of the manifests): put back within an interval.
    for path in (MUTATING, VALIDATING):
        reset = time.monotonic()
        api.call("PATCH", path, [{"op": "replace", "path": "/webhooks/0/clientConfig/caBundle",
                                  "value": base64.b64encode(foreign).decode()}],
                 content_type="application/json-patch+json")
        wait_for(lambda p=path: ca_bundle(api, p) == secret_data(api, ns, secret)["ca.crt"],
                 timeout=30, message=f"{path} to be repaired")
        print(f"\n{path.rsplit('/', 2)[1]} caBundle repaired "
              f"{time.monotonic() - reset:.1f}s after a reset (interval 1s)")


def test_serving_pair_waits_for_a_lagging_ca_bundle(
        api_stack, new_namespace, tmp_path: Path, cleanup) -> None:  # noqa: F811
    """Someone else injects the caBundle, slowly: the new CA must not be served before it."""
    ns = new_namespace("rotlag")
    rig = start_rig(api_stack, ns, tmp_path, cleanup, RAYKUEUE_INJECT_CA_BUNDLE="false")
    api = api_stack.api
    load = Load(api, ns).start()
    cleanup.append(load.finish)
    wait_for(lambda: load.succeeded >= 10 or load.failures, timeout=120,
             message="the load loop to get going")
    raykueue_cli(api_stack, "certs", "rotate", "--ca", "--secret", rig.secret, "-n", ns)
    staged = wait_for(lambda: secret_data(api, ns, rig.secret).get("next-ca.crt"), timeout=60,
                      message="stage 1 in the Secret")

    # The caBundle lags: while it does, let the leader run many ticks (1 s) and the
    # replicas many polls (0.5 s), and the load many admissions.
    lag_until = load.requests + 150
    while load.requests < lag_until and not load.stop.is_set():
        for replica in rig.replicas:
            assert checks.issued_by(served_leaf(replica.port), rig.old_ca)
        assert "next-ca.crt" in secret_data(api, ns, rig.secret)
        target = min(lag_until, load.requests + 10)
        wait_for(lambda t=target: load.requests >= t, timeout=60, message="more admissions")
    assert load.failures == [], load.failures[:5]

    bundle = secret_data(api, ns, rig.secret)["ca.crt"]
    assert checks.bundle_contains(bundle, staged)
    devstack.register_webhooks(api_stack.kubeconfig, rig.proxy.url, bundle)
    wait_for(lambda: all(checks.issued_by(served_leaf(x.port), staged) for x in rig.replicas),
             timeout=120, message="both replicas to move to the new CA once it is trusted")
    at_switch = load.requests
    wait_for(lambda: load.requests >= at_switch + 30 or load.stop.is_set(), timeout=120,
             message="traffic after the switch")
    load.finish()
    print(f"\nlagging caBundle: {load.requests} requests, {len(load.failures)} failures")
    assert load.failures == [], load.failures[:5]
