"""The edge of policies.py: watch raykueue's ValidatingAdmissionPolicies and their bindings.

Whether the API server serves the kinds is asked once, when the cluster first
answers (discovery of admissionregistration.k8s.io/v1); if it does, two small
watch caches keep the policies and bindings. Every change recomputes the
findings; a new one is logged, and `raykueue_policy_missing{policy}` is 1 while
that policy is not enforced. /readyz shows them as the detail of the "policies"
check, which never fails: a replica without the guards still admits and gates.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any, Final

from raykueue.coexist.findings import Finding
from raykueue.coexist.metrics import POLICY_MISSING
from raykueue.coexist.policies import POLICIES, policy_findings, unenforced
from raykueue.kube.cache import WatchCache
from raykueue.kube.resources import Resource
from raykueue.kube.rest import ApiError, Rest, get_or_none

log = logging.getLogger("raykueue.coexist")

GROUP: Final = "admissionregistration.k8s.io"
VALIDATING_ADMISSION_POLICIES: Final = Resource(GROUP, "v1", "validatingadmissionpolicies",
                                                namespaced=False)
VALIDATING_ADMISSION_POLICY_BINDINGS: Final = Resource(
    GROUP, "v1", "validatingadmissionpolicybindings", namespaced=False)


def _keep_checked(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A policy or binding trimmed to what the rules read (the CEL bodies are large)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    kept = {k: spec[k] for k in ("policyName", "validationActions", "matchConditions") if k in spec}
    return {"metadata": {k: meta.get(k) for k in ("name", "resourceVersion")}, "spec": kept}


def served(rest: Rest) -> bool:
    """Whether the API server serves both v1 kinds (Kubernetes 1.30 and later)."""
    found = get_or_none(rest, f"/apis/{GROUP}/v1")
    if found is None:
        return False
    names = {res.get("name") for res in found.get("resources") or []}
    return {VALIDATING_ADMISSION_POLICIES.plural, VALIDATING_ADMISSION_POLICY_BINDINGS.plural} <= names


class PolicyWatch:
    def __init__(self, rest: Rest, identity: str) -> None:
        self._rest = rest
        self.identity = identity
        self._served: bool | None = None
        self._policies = WatchCache(rest, VALIDATING_ADMISSION_POLICIES, transform=_keep_checked)
        self._bindings = WatchCache(rest, VALIDATING_ADMISSION_POLICY_BINDINGS, transform=_keep_checked)
        self._lock = threading.Lock()
        self._found: tuple[Finding, ...] = ()
        for cache in self.caches:
            cache.add_handler(lambda _type, _obj: self.refresh())
            # A list that succeeds with nothing in it brings no event.
            cache.add_sync_handler(lambda _error: self.refresh())

    @property
    def caches(self) -> tuple[WatchCache, ...]:
        return self._policies, self._bindings

    def start(self) -> PolicyWatch:
        """Asks discovery once; starts the caches only where the kinds are served."""
        try:
            self._served = served(self._rest)
        except ApiError as exc:
            # Unknown: watch them anyway; a list that fails shows in the detail.
            log.warning("admission policies: discovery of %s/v1 failed (%s); watching them anyway",
                        GROUP, exc)
            self._served = True
        if self._served:
            for cache in self.caches:
                cache.start()
        else:
            self.refresh()
        return self

    def stop(self) -> None:
        if self._served:
            for cache in self.caches:
                cache.stop()

    @property
    def findings(self) -> tuple[Finding, ...]:
        with self._lock:
            return self._found

    def refresh(self) -> tuple[Finding, ...]:
        if self._served is None or (self._served and not all(c.synced for c in self.caches)):
            return self.findings  # not read yet: no finding is better than a false one
        missing = unenforced(bool(self._served), self._policies.list(), self._bindings.list(),
                             self.identity)
        found = tuple(policy_findings(missing))
        with self._lock:
            before, self._found = set(self._found), found
        for name in POLICIES:
            POLICY_MISSING.labels(name).set(1 if name in missing else 0)
        for finding in found:
            if finding not in before:
                log.warning("admission policies: %s", finding.message)
        return found

    def probe(self) -> tuple[bool, str]:
        """For /readyz: always ready (the webhooks work without the policies); the detail
        names what is missing and what is unprotected without it."""
        if self._served is None:
            return True, "not read yet"
        waiting = [cache for cache in self.caches if self._served and not cache.synced]
        if waiting:
            return True, "reading " + " and ".join(
                cache.resource.plural + (f" ({cache.last_sync_error})" if cache.last_sync_error else "")
                for cache in waiting)
        found = self.findings
        if not found:
            return True, f"{', '.join(POLICIES)} enforced (bound with Deny)"
        return True, "; ".join(f"{f.kind}: {f.message}" for f in found)
