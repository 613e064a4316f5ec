"""Kueue's own pod integration, for the side-by-side benchmarks (bench/compare.py).

With RAYKUEUE_KUEUE=minimal the stack's Kueue has no webhooks; these register
just its pod webhooks (mpod.kb.io, vpod.kb.io, taken from the Kueue module's
own manifests by devstack/kueue/shipped.py) for some namespaces, and turn its
`pod` integration on there only. As shipped, Kueue has them everywhere already.
"""

from __future__ import annotations

import contextlib
import copy

from devstack import Stack
from devstack.controlplane.kubeapi import KubeError, object_path
from devstack.kueue.shipped import kueue_url, kueue_webhook_configurations, shipped_module, webhook_ca

POD_WEBHOOKS = ("mpod.kb.io", "vpod.kb.io")


def kueue_pod_integration(namespace_selector: dict) -> dict:
    """A `StackConfig.kueue_config` overlay turning Kueue's `pod` integration on.

    Kueue only manages pods in namespaces matching `namespace_selector`
    (its managedJobsNamespaceSelector), so raykueue's namespaces stay its own.
    """
    return {"integrations": {"frameworks": ["batch/job", "pod"]},
            "managedJobsNamespaceSelector": copy.deepcopy(namespace_selector)}


def kueue_pod_webhook_configurations(url_base: str, ca_bundle_pem: bytes,
                                     namespace_selector: dict) -> list[dict]:
    """Kueue's pod mutating and validating webhooks only, for matching namespaces."""
    return kueue_webhook_configurations(shipped_module().webhook_configurations(), url_base,
                                        ca_bundle_pem, only=POD_WEBHOOKS,
                                        namespace_selector=namespace_selector)


def register_kueue_pod_webhooks(stack: Stack, namespace_selector: dict) -> list[dict]:
    """Point the API server at the stack's Kueue manager for pods in matching namespaces."""
    objs = kueue_pod_webhook_configurations(kueue_url(stack), webhook_ca(stack).read_bytes(),
                                            namespace_selector)
    return [stack.api.apply(object_path(o), o) for o in objs]


def unregister_kueue_pod_webhooks(stack: Stack) -> None:
    for o in kueue_pod_webhook_configurations("https://unused", b"", {}):
        with contextlib.suppress(KubeError):
            stack.api.delete(object_path(o))
