"""RFC 6901 JSON pointers, as JSONPatch paths (admission patches, controller patches)."""

from __future__ import annotations


def pointer(*parts: str) -> str:
    """A pointer to `parts`; label keys contain '/' and must be escaped."""
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)
