"""The one exception that means "try this key again later"."""

from __future__ import annotations


class Retry(Exception):
    """A read or write failed in a way a later pass, on fresher state, may fix
    (a conflict, a refused test op, an unavailable server). Logged at info and
    requeued with backoff; any other exception is a bug and logged as one."""
