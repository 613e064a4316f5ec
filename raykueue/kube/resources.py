"""Where a kind lives on the API server, as URL paths."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from urllib.parse import quote

from raykueue.kube.rest import Rest, get_or_none


@dataclass(frozen=True, slots=True)
class Resource:
    """A served resource: group ("" for core), version, plural, scope."""

    group: str
    version: str
    plural: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """The `apiVersion` objects of this resource carry."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def prefix(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def at_version(self, version: str) -> Resource:
        """Same resource at another version (after checking what is served)."""
        return dataclasses.replace(self, version=version)

    def path(self, namespace: str | None = None, name: str | None = None,
             subresource: str | None = None) -> str:
        """Collection or object path.

        A namespaced resource without a namespace gives the all-namespaces
        collection, which is only meaningful for list and watch.
        """
        if subresource and not name:
            raise ValueError("a subresource needs an object name")
        parts = [self.prefix]
        if namespace:
            if not self.namespaced:
                raise ValueError(f"{self.plural} is cluster-scoped; no namespace")
            parts += ["namespaces", _segment(namespace)]
        elif name and self.namespaced:
            raise ValueError(f"{self.plural} is namespaced; {name!r} needs a namespace")
        parts.append(self.plural)
        if name:
            parts.append(_segment(name))
        if subresource:
            parts.append(subresource)
        return "/".join(parts)


def _segment(value: str) -> str:
    # Names are DNS labels or subdomains in practice, but RBAC and a few other
    # kinds allow ':'; quoting keeps an odd name from escaping its segment.
    if not value or value in (".", ".."):
        raise ValueError(f"invalid path segment {value!r}")
    return quote(value, safe=":@")


def crd(group: str, version: str, plural: str, *, namespaced: bool = True) -> Resource:
    """A custom resource; spelled out so call sites read as intent."""
    if not group:
        raise ValueError("custom resources always have a group")
    return Resource(group, version, plural, namespaced)


PODS = Resource("", "v1", "pods")
NAMESPACES = Resource("", "v1", "namespaces", namespaced=False)
EVENTS_V1 = Resource("events.k8s.io", "v1", "events")
LEASES = Resource("coordination.k8s.io", "v1", "leases")
MUTATING_WEBHOOK_CONFIGURATIONS = Resource(
    "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", namespaced=False)
VALIDATING_WEBHOOK_CONFIGURATIONS = Resource(
    "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", namespaced=False)


def served_versions(rest: Rest, group: str) -> list[str]:
    """Versions the server serves for `group`, preferred first; [] if none.

    Uses discovery, so it answers for a CRD only once the CRD is established.
    """
    doc = get_or_none(rest, f"/apis/{group}" if group else "/api")
    if not isinstance(doc, dict):
        return []
    if not group:  # APIVersions: {"versions": ["v1"]}
        return [v for v in doc.get("versions", []) if isinstance(v, str)]
    versions = [v.get("version") for v in doc.get("versions", []) if isinstance(v, dict)]
    ordered = [v for v in versions if isinstance(v, str)]
    preferred = (doc.get("preferredVersion") or {}).get("version")
    if preferred in ordered:
        ordered.remove(preferred)
        ordered.insert(0, preferred)
    return ordered
