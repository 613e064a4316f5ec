"""raykueue's pod webhook renamed and pointed at another server of the same decision.

The benchmarks' ceiling (bench/ceiling.py: raykueue's decision behind a bare ASGI
handler) is registered exactly as raykueue's pod webhook is, from the shipped
declaration (manifests/webhooks.yaml, through `webhooks.webhook_configurations`),
so that what the API server measures of the two differs only by the server.
"""

from __future__ import annotations

from devstack.controlplane.webhooks import webhook_configurations

POD_HOOK = "mutate-pods.raykueue.io"  # raykueue's pod webhook in manifests/webhooks.yaml
CEILING_HOOK = "mutate-pods.ceiling.bench.raykueue.io"
# Mutating configurations are called in name order: after Kueue's, like raykueue's.
CEILING_CONFIG = "zz-raykueue-ceiling"


def ceiling_configuration(url_base: str, ca_pem: bytes, namespace_selector: dict) -> dict:
    """raykueue's pod webhook as the bench registers it, renamed and calling `url_base`."""
    for config in webhook_configurations(url_base, ca_pem, namespace_selector=namespace_selector):
        for hook in config.get("webhooks", []):
            if hook["name"] == POD_HOOK:
                return {"apiVersion": config["apiVersion"], "kind": config["kind"],
                        "metadata": {"name": CEILING_CONFIG},
                        "webhooks": [{**hook, "name": CEILING_HOOK}]}
    raise LookupError(f"{POD_HOOK} is not in manifests/webhooks.yaml")
