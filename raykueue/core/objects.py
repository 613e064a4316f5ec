"""Tolerant readers for Kubernetes objects held as parsed JSON.

The API server guarantees shapes for what it stores, but an AdmissionReview
can carry an object before defaulting and a cache can hold a partial one, so
every reader here treats a missing or mistyped field as absent.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

Obj = Mapping[str, Any]

# The metadata every cache of ours keeps of an object (the webhook's owner
# caches, the controller's pod and Workload caches): what the rules, decisions
# and Events read. managedFields, the largest part, is never among it.
METADATA_KEPT: Final = ("name", "namespace", "uid", "resourceVersion", "generation",
                        "creationTimestamp", "deletionTimestamp", "labels", "annotations",
                        "ownerReferences")
_EMPTY: Mapping[str, Any] = {}
# DNS-1123 subdomain, as Kubernetes validates object names (LocalQueue and
# WorkloadPriorityClass are named objects).
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def is_dns1123_subdomain(value: str) -> bool:
    return len(value) <= 253 and _DNS1123_SUBDOMAIN.match(value) is not None


def metadata(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else _EMPTY


def labels(obj: Obj) -> Mapping[str, str]:
    value = metadata(obj).get("labels")
    return value if isinstance(value, dict) else _EMPTY


def annotations(obj: Obj) -> Mapping[str, str]:
    value = metadata(obj).get("annotations")
    return value if isinstance(value, dict) else _EMPTY


def spec(obj: Obj) -> Obj:
    value = obj.get("spec")
    return value if isinstance(value, dict) else _EMPTY


def gate_names(pod: Obj) -> list[str]:
    gates = spec(pod).get("schedulingGates")
    if not isinstance(gates, list):
        return []
    return [g["name"] for g in gates if isinstance(g, dict) and isinstance(g.get("name"), str)]


def controller_ref(obj: Obj) -> Obj | None:
    """The owner reference marked controller=true, as KubeRay sets on its pods."""
    refs = metadata(obj).get("ownerReferences")
    if not isinstance(refs, list):
        return None
    for ref in refs:
        if isinstance(ref, dict) and ref.get("controller") is True:
            return ref
    return None


def ref_group(ref: Obj) -> str:
    api_version = ref.get("apiVersion")
    if not isinstance(api_version, str) or "/" not in api_version:
        return ""
    return api_version.split("/", 1)[0]


def display_name(obj: Obj) -> str:
    """Name for logs and messages; `generateName` pods have none at admission."""
    meta = metadata(obj)
    name = meta.get("name")
    if isinstance(name, str) and name:
        return name
    generate = meta.get("generateName")
    return f"{generate}<generated>" if isinstance(generate, str) and generate else "<unnamed>"
