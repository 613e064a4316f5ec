"""Reads that may find nothing, for the test kit, the tests and the benches: raykueue's own
`kube.rest.get_or_none` (the API server's 404 as None; any other failure still raises, so
that a read that did not answer is never taken for "gone"), with a uid.

`uid` names one incarnation of an object: given it, an object of the same name with
another uid (the one asked about deleted, a new one made in its place) counts as not
found, since the object asked about is gone.
"""

from __future__ import annotations

from typing import Any

from raykueue.kube import rest
from raykueue.kube.rest import Rest


def get_or_none(api: Rest, path: str, *, uid: str | None = None) -> dict[str, Any] | None:
    """The object at `path`, or None where there is none (or, given `uid`, not that one)."""
    found = rest.get_or_none(api, path)
    if found is None or (uid is not None and found["metadata"]["uid"] != uid):
        return None
    return found


def gone(api: Rest, path: str, *, uid: str | None = None) -> bool:
    """No object at `path` (or, given `uid`, not that one)."""
    return get_or_none(api, path, uid=uid) is None
