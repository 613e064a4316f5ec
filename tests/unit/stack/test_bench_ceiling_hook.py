"""bench/ceiling_hook.py: the ceiling webhook is registered exactly as raykueue's pod webhook."""

from __future__ import annotations

import devstack
from bench.ceiling_hook import CEILING_HOOK, POD_HOOK, ceiling_configuration

SELECTOR = {"matchLabels": {"bench.raykueue.io/system": "ceiling"}}


def test_the_ceiling_is_raykueues_pod_webhook_renamed_and_pointed_elsewhere() -> None:
    ceiling = ceiling_configuration("https://127.0.0.1:1", b"ca", SELECTOR)
    ours = next(hook for config in devstack.webhook_configurations(
        "https://127.0.0.1:2", b"ca", namespace_selector=SELECTOR)
        for hook in config["webhooks"] if hook["name"] == POD_HOOK)
    (hook,) = ceiling["webhooks"]
    assert hook["name"] == CEILING_HOOK
    assert hook["clientConfig"]["url"] == "https://127.0.0.1:1/mutate-pods"
    differs = {k for k in hook.keys() | ours.keys() if hook.get(k) != ours.get(k)}
    assert differs == {"name", "clientConfig"}
    # Called after Kueue's pod webhook, as raykueue's is (configurations go in name order).
    assert ceiling["metadata"]["name"] > "kueue-mutating-webhook-configuration"
    assert ceiling["kind"] == "MutatingWebhookConfiguration"
