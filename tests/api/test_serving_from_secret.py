"""In-cluster certificate flow on a real API server: Secret-backed certs and caBundle injection."""

from __future__ import annotations

import base64
import json
import uuid

import devstack
from raykueue.core import contract as c
from testkit.api.admission import create, opted_in_pod
from testkit.reviews import gates
from testkit.servers import RaykueueServer
from testkit.stackfixtures import new_namespace  # noqa: F401 - fixture
from testkit.waiting import wait_for


def test_server_takes_its_certs_from_a_secret_and_injects_the_ca(
    api_stack, new_namespace, kubectl, tmp_path  # noqa: F811
) -> None:
    ns = new_namespace("tls")
    secret = f"rk-tls-{uuid.uuid4().hex[:6]}"
    server = RaykueueServer(api_stack, tmp_path, register=False, args=["--no-controller"], env={
        "RAYKUEUE_CERT_SECRET": secret,
        "RAYKUEUE_POD_NAMESPACE": ns,
        "RAYKUEUE_INJECT_CA_BUNDLE": "true",
        "RAYKUEUE_CA_BUNDLE_INTERVAL_SECONDS": "0.5",
    })
    # Registered with a CA that did not sign the server's certificate, as a
    # fresh `kubectl apply -k manifests/` leaves caBundle empty or stale.
    devstack.register_webhooks(api_stack.kubeconfig, server.url, api_stack.ca_file.read_bytes())
    try:
        server.start()
        stored = json.loads(kubectl("get", "secret", secret, "-n", ns, "-o", "json",
                                    check=True).stdout)
        assert stored["type"] == "kubernetes.io/tls"
        ca = base64.b64decode(stored["data"]["ca.crt"])
        assert server.ca_file.read_bytes() == ca

        def injected() -> bool:
            config = json.loads(kubectl("get", "mutatingwebhookconfiguration",
                                        c.MUTATING_WEBHOOK_CONFIG, "-o", "json").stdout)
            return base64.b64decode(config["webhooks"][0]["clientConfig"]["caBundle"]) == ca

        wait_for(injected, timeout=20, message="caBundle to be injected")

        def gated() -> bool:
            result = create(kubectl, opted_in_pod(ns), "--dry-run=server")
            return result.returncode == 0 and gates(json.loads(result.stdout)) == [c.GATE]

        wait_for(gated, timeout=30, message="API server to trust the injected CA")
    finally:
        devstack.unregister_webhooks(api_stack.kubeconfig)
        server.stop()
