"""The API's time formats, one pair of writers and one reader.

Kubernetes stores `metav1.Time` with second precision and `metav1.MicroTime`
(Lease renewals, events.k8s.io eventTime) with microseconds, both in UTC with a
"Z". Every reader here is tolerant: an absent or malformed stamp is None.
"""

from __future__ import annotations

from datetime import UTC, datetime


def format_time(moment: datetime) -> str:
    """RFC 3339 to the second, as `metav1.Time` (conditions, creationTimestamp)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(moment: datetime) -> str:
    """RFC 3339 with microseconds, as `metav1.MicroTime` expects."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now_time() -> str:
    return format_time(datetime.now(UTC))


def parse_time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def timestamp(value: object) -> float | None:
    """Seconds since the epoch of a stored stamp, for ages and latencies."""
    moment = parse_time(value)
    return moment.timestamp() if moment is not None else None
