"""Write events.k8s.io/v1 Events about objects; best effort by design.

An Event is a note for humans (`kubectl describe`, `kubectl events`); losing
one must never fail the work it describes, so `record` logs and swallows.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from raykueue.core.clock import format_micro_time
from raykueue.kube.resources import EVENTS_V1
from raykueue.kube.rest import ApiError, Rest

log = logging.getLogger(__name__)

NORMAL, WARNING = "Normal", "Warning"

# Limits enforced by the API server's Event validation.
NOTE_MAX_BYTES = 1024
FIELD_MAX = 128  # action, reason, reportingController, reportingInstance
NAME_MAX = 253


def truncate_utf8(text: str, max_bytes: int) -> str:
    """Cut to at most `max_bytes` of UTF-8 without splitting a character."""
    raw = text.encode("utf-8")
    if len(raw) <= max_bytes:
        return text
    return raw[:max_bytes].decode("utf-8", "ignore")


def object_reference(obj: Mapping[str, Any]) -> dict[str, str]:
    meta = obj.get("metadata") or {}
    ref = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "resourceVersion": meta.get("resourceVersion"),
    }
    return {k: v for k, v in ref.items() if v}


def event_body(obj: Mapping[str, Any], type: str, reason: str, message: str, *,
               action: str | None, controller: str, instance: str,
               now: datetime, unique: int) -> dict[str, Any]:
    """The Event to create; pure so the shape can be tested without a server."""
    regarding = object_reference(obj)
    # Events about cluster-scoped objects live in "default", as client-go does.
    namespace = regarding.get("namespace") or "default"
    base = regarding.get("name") or "object"
    suffix = f".{unique:x}"
    return {
        "apiVersion": EVENTS_V1.api_version,
        "kind": "Event",
        "metadata": {"name": base[: NAME_MAX - len(suffix)] + suffix, "namespace": namespace},
        "eventTime": format_micro_time(now),
        "type": type,
        "reason": reason[:FIELD_MAX],
        "action": (action or reason)[:FIELD_MAX],
        "note": truncate_utf8(message, NOTE_MAX_BYTES),
        "regarding": regarding,
        "reportingController": controller[:FIELD_MAX],
        "reportingInstance": instance[:FIELD_MAX],
    }


class EventRecorder:
    """Records Events as `component` (a qualified name, e.g. `example.io/ctl`)."""

    def __init__(self, rest: Rest, component: str, *, instance: str | None = None,
                 timeout: float = 5.0) -> None:
        self._rest = rest
        self.component = component
        self.instance = instance or socket.gethostname()
        self._timeout = timeout

    def record(self, obj: Mapping[str, Any], type: str, reason: str, message: str,
               action: str | None = None) -> None:
        body = event_body(obj, type, reason, message, action=action,
                          controller=self.component, instance=self.instance,
                          now=datetime.now(UTC), unique=time.time_ns())
        namespace = body["metadata"]["namespace"]
        try:
            self._rest.create(EVENTS_V1.path(namespace), body, timeout=self._timeout)
        except ApiError as exc:
            log.warning("event %s on %s/%s not recorded: %s", reason, namespace,
                        body["regarding"].get("name"), exc)
        except Exception:
            log.warning("event %s on %s/%s not recorded", reason, namespace,
                        body["regarding"].get("name"), exc_info=True)
