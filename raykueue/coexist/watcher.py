"""The edge of coexist/: watch Kueue's setup, publish what `findings` says about it.

Two small watch caches (Kueue's ConfigMap, by name; the mutating webhook
configurations, trimmed to what the rules read). Every change recomputes the
setup and the findings; a new finding is logged, counted in
`raykueue_kueue_overlap` and recorded as an Event on Kueue's ConfigMap; one
that is gone resets its gauge. /readyz and `raykueue explain` read `snapshot`.

A ConfigMap that is not there, cannot be read (RBAC names one ConfigMap) or
holds no Configuration is itself a finding, `KueueConfigurationUnread`: the
setup is then assumed, and saying so is the only honest answer. It never makes
the replica unready, as no finding does.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from raykueue.coexist.findings import KINDS, Finding, findings, unread
from raykueue.coexist.kueueconfig import ASSUMED, KueueSetup, read_configuration
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
        for cache in (self._config, self._hooks):
            cache.add_handler(lambda _type, _obj: self.refresh())
        # An absent or forbidden ConfigMap brings no event: its list (or its
        # failure) has to be a reason to look again too.
        self._config.add_sync_handler(lambda _error: self.refresh())

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

    def setup_read(self, timeout: float) -> KueueSetup | None:
        """Kueue's setup once both watches have listed (waiting at most `timeout`), else None."""
        if not all(cache.wait_synced(timeout) for cache in self.caches):
            return None
        return self.snapshot.setup

    def refresh(self) -> Snapshot:
        config_map = next(iter(self._config.list()), None)
        error = None if self._config.synced else self._config.last_sync_error
        setup, problem = read_configuration(config_map, self.source, error)
        if problem is not None and not self._config.synced and error is None:
            problem = None  # the first list is still on its way
        found = tuple(findings(setup, self._hooks.list()))
        if problem is not None:
            found = (unread(self.source, problem), *found)
        with self._lock:
            before = {f.kind for f in self._snapshot.findings}
            self._snapshot = Snapshot(setup, found)
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
        """For /readyz: ready once both are read or found unreadable (failing would block
        every Ray pod), the findings as detail."""
        snap = self.snapshot
        unread_found = any(f.kind == "KueueConfigurationUnread" for f in snap.findings)
        waiting = [what for what, cache in (("Kueue's Configuration", self._config),
                                            ("webhook configurations", self._hooks))
                   if not cache.synced and not (cache is self._config and unread_found)]
        if waiting:
            return False, "waiting for " + " and ".join(waiting)
        if not snap.findings:
            return True, f"no overlap with Kueue; {snap.setup.source}"
        return True, "; ".join(f"{f.kind}: {f.message}" for f in snap.findings)


def read_findings(rest: Rest, namespace: str, config_map: str) -> list[Finding]:
    """One-shot reads for the CLI (`raykueue explain`): the same rules, no watch."""
    source = f"ConfigMap {namespace}/{config_map}"
    found: dict[str, Any] | None = None
    error: str | None = None
    try:
        found = rest.get(CONFIG_MAPS.path(namespace, config_map))
    except ApiError as exc:
        if not exc.is_not_found:
            error = str(exc)
    setup, problem = read_configuration(found, source, error)
    notes = [unread(source, problem)] if problem is not None else []
    try:
        hooks = rest.get(r.MUTATING_WEBHOOK_CONFIGURATIONS.path()).get("items") or []
    except ApiError:
        unread_hooks = Finding("Unknown", "webhook configurations not readable: the order of Kueue's and "
                                    "raykueue's webhooks was not checked")
        return [*notes, unread_hooks,
                *(f for f in findings(setup, []) if f.kind != "RaykueueWebhookMissing")]
    return [*notes, *findings(setup, hooks)]
