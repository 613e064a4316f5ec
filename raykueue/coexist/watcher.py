"""The edge of coexist/: watch Kueue's setup, publish what `findings` says about it.

Two small watch caches (Kueue's ConfigMap, by name; the mutating webhook
configurations, trimmed to what the rules read). Every change recomputes the
setup and the findings; a new finding is logged, counted in
`raykueue_kueue_overlap` and recorded as an Event on Kueue's ConfigMap; one
that is gone resets its gauge. /readyz and `raykueue explain` read `snapshot`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from raykueue.coexist.findings import KINDS, Finding, findings
from raykueue.coexist.kueueconfig import ASSUMED, CONFIG_KEY, BadConfig, KueueSetup, parse
from raykueue.coexist.metrics import KUEUE_OVERLAP
from raykueue.kube import resources as r
from raykueue.kube.cache import WatchCache
from raykueue.kube.events import EventRecorder
from raykueue.kube.rest import ApiError, Rest

log = logging.getLogger("raykueue.coexist")

CONFIG_MAPS = r.Resource("", "v1", "configmaps")


@dataclass(frozen=True, slots=True)
class Snapshot:
    setup: KueueSetup
    findings: tuple[Finding, ...]


def _keep_hooks(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A webhook configuration trimmed to what `findings` reads (no caBundle)."""
    hooks = [{k: h.get(k) for k in ("name", "rules", "reinvocationPolicy")}
             for h in obj.get("webhooks") or []]
    meta = obj.get("metadata") or {}
    return {"metadata": {k: meta.get(k) for k in ("name", "resourceVersion")}, "webhooks": hooks}


class KueueWatch:
    def __init__(self, rest: Rest, namespace: str, config_map: str,
                 recorder: EventRecorder | None = None) -> None:
        self.source = f"ConfigMap {namespace}/{config_map}"
        self._config = WatchCache(rest, CONFIG_MAPS, namespace=namespace,
                                  field_selector=f"metadata.name={config_map}")
        self._hooks = WatchCache(rest, r.MUTATING_WEBHOOK_CONFIGURATIONS, transform=_keep_hooks)
        self._recorder = recorder
        self._lock = threading.Lock()
        self._snapshot = Snapshot(ASSUMED, ())
        self.config_error: str | None = None
        for cache in (self._config, self._hooks):
            cache.add_handler(lambda _type, _obj: self.refresh())

    @property
    def caches(self) -> tuple[WatchCache, ...]:
        return self._config, self._hooks

    def start(self) -> KueueWatch:
        for cache in self.caches:
            cache.start()
        return self

    def stop(self) -> None:
        for cache in self.caches:
            cache.stop()

    @property
    def snapshot(self) -> Snapshot:
        with self._lock:
            return self._snapshot

    def refresh(self) -> Snapshot:
        config_map = next(iter(self._config.list()), None)
        setup, error = ASSUMED, None
        text = ((config_map or {}).get("data") or {}).get(CONFIG_KEY)
        if text is not None:
            try:
                setup = parse(text, self.source)
            except BadConfig as exc:
                error = str(exc)
        found = tuple(findings(setup, self._hooks.list()))
        with self._lock:
            before = {f.kind for f in self._snapshot.findings}
            self._snapshot = Snapshot(setup, found)
            self.config_error = error
        for kind in KINDS:
            KUEUE_OVERLAP.labels(kind).set(1 if any(f.kind == kind for f in found) else 0)
        for finding in found:
            if finding.kind in before:
                continue
            log.warning("Kueue setup: %s", finding.message)
            if self._recorder is not None and config_map is not None:
                self._recorder.record(config_map, "Warning", finding.kind, finding.message)
        return self._snapshot

    def probe(self) -> tuple[bool, str]:
        """For /readyz: always ready (failing would block every Ray pod), the findings as detail."""
        if not all(cache.synced for cache in self.caches):
            return False, "waiting for Kueue's Configuration and webhook configurations"
        snap = self.snapshot
        where = snap.setup.source + (f" ({self.config_error})" if self.config_error else "")
        if not snap.findings:
            return True, f"no overlap with Kueue; {where}"
        return True, "; ".join(f"{f.kind}: {f.message}" for f in snap.findings)


def read_findings(rest: Rest, namespace: str, config_map: str) -> list[Finding]:
    """One-shot reads for the CLI (`raykueue explain`): the same rules, no watch."""
    source = f"ConfigMap {namespace}/{config_map}"
    setup = ASSUMED
    try:
        found = rest.get(CONFIG_MAPS.path(namespace, config_map))
        text = (found.get("data") or {}).get(CONFIG_KEY)
        if text is not None:
            setup = parse(text, source)
    except (ApiError, BadConfig) as exc:
        log.debug("Kueue's Configuration not read: %s", exc)
    try:
        hooks = rest.get(r.MUTATING_WEBHOOK_CONFIGURATIONS.path()).get("items") or []
    except ApiError:
        unread = Finding("Unknown", "webhook configurations not readable: the order of Kueue's and "
                                    "raykueue's webhooks was not checked")
        return [unread, *(f for f in findings(setup, []) if f.kind != "RaykueueWebhookMissing")]
    return findings(setup, hooks)
