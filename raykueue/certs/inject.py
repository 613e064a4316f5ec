"""Point the API server's webhook configurations at our CA.

Only `webhooks[*].clientConfig.caBundle` is touched, with one JSON patch per
configuration whose entries each re-check the webhook's name at that index:
if someone reorders the list between our read and our write, the patch fails
instead of giving a webhook the wrong entry.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from raykueue.certs.checks import bundle_contains
from raykueue.kube.resources import (
    MUTATING_WEBHOOK_CONFIGURATIONS,
    VALIDATING_WEBHOOK_CONFIGURATIONS,
    Resource,
)
from raykueue.kube.rest import Rest, get_or_none

log = logging.getLogger(__name__)


def ca_bundle_ops(config: Mapping[str, Any], ca_pem: bytes) -> list[dict[str, Any]]:
    """JSON patch setting every webhook's caBundle to `ca_pem`; [] if all match."""
    bundle = base64.b64encode(ca_pem).decode("ascii")
    ops: list[dict[str, Any]] = []
    for i, hook in enumerate(config.get("webhooks") or []):
        client = hook.get("clientConfig") or {}
        if client.get("caBundle") == bundle:
            continue
        ops.append({"op": "test", "path": f"/webhooks/{i}/name", "value": hook.get("name")})
        if "clientConfig" in hook:
            ops.append({"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle",
                        "value": bundle})
        else:
            ops.append({"op": "add", "path": f"/webhooks/{i}/clientConfig",
                        "value": {"caBundle": bundle}})
    return ops


def config_trusts(config: Mapping[str, Any], ca_pem: bytes) -> bool:
    """Whether every webhook of `config` has `ca_pem`'s first certificate in its caBundle."""
    for hook in config.get("webhooks") or []:
        encoded = (hook.get("clientConfig") or {}).get("caBundle") or ""
        try:
            bundle = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            return False
        if not bundle_contains(bundle, ca_pem):
            return False
    return True


Names = str | Sequence[str] | None


def _names(names: Names) -> list[str]:
    if names is None:
        return []
    return [names] if isinstance(names, str) else list(names)


def _targets(mutating_names: Names, validating_names: Names) -> list[tuple[Resource, str]]:
    """The configurations to fill: raykueue registers two mutating ones (before and after
    Kueue's) and one validating one."""
    return [(MUTATING_WEBHOOK_CONFIGURATIONS, n) for n in _names(mutating_names) if n] + \
        [(VALIDATING_WEBHOOK_CONFIGURATIONS, n) for n in _names(validating_names) if n]


def configs_trust(rest: Rest, ca_pem: bytes, mutating_name: Names,
                  validating_name: Names) -> bool:
    """Whether every configuration, as the API serves it now, trusts `ca_pem`.

    A configuration that does not exist counts as trusting: nothing calls a
    webhook that is not registered, so nothing can fail for it.
    """
    for resource, name in _targets(mutating_name, validating_name):
        config = get_or_none(rest, resource.path(name=name))
        if config is None:
            continue
        if not config_trusts(config, ca_pem):
            return False
    return True


def inject_ca_bundle(rest: Rest, ca_pem: bytes, mutating_name: Names,
                     validating_name: Names) -> int:
    """Set caBundle on every configuration; returns how many webhooks changed.

    A configuration that does not exist (not installed yet, or this install
    has only one kind) is skipped with a warning; other API errors raise.
    """
    changed = 0
    for resource, name in _targets(mutating_name, validating_name):
        path = resource.path(name=name)
        config = get_or_none(rest, path)
        if config is None:
            log.warning("%s %s not found; caBundle not injected", resource.plural, name)
            continue
        ops = ca_bundle_ops(config, ca_pem)
        if not ops:
            continue
        rest.json_patch(path, ops)
        patched = sum(1 for op in ops if op["op"] == "add")
        changed += patched
        log.info("set caBundle on %d webhook(s) of %s %s", patched, resource.plural, name)
    return changed
