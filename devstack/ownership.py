"""Who owns a stack and when it stops: the rule alone, no I/O (stack.py applies it).

A stack has one owner, recorded in state.json, and any number of users (live
processes that joined it, one file per pid under `<stack dir>/users`):

- "session": started by a process that will `release` it (a test session, a bench
  run); the last live user's `release` stops it.
- "manual": started by hand (`python -m devstack up`, `scripts/cluster up`); only
  `down` stops it.

Joining never takes a stack over: a bench run beside a test session, or inside
one, is one more user, and the session's `release` still stops the stack once the
bench has released it too. The only change of owner is a stack left behind by
sessions that all died (a killed pytest): `up` by hand then keeps it, since no
live process will release it.
"""

from __future__ import annotations

from typing import Literal

Owner = Literal["manual", "session"]
MANUAL: Owner = "manual"
SESSION: Owner = "session"


def owner_after_up(recorded: Owner | None, *, by_hand: bool, other_users: bool) -> Owner:
    """The owner a stack has once `up` returns.

    `recorded` is the owner before (None: this `up` starts the stack); `by_hand` says
    the caller wants a stack that stays until `down`; `other_users` that another live
    process uses the stack.
    """
    if recorded is None:
        return MANUAL if by_hand else SESSION
    if by_hand and recorded == SESSION and not other_users:
        return MANUAL
    return recorded


def release_stops(owner: Owner, live_users: int) -> bool:
    """Whether a `release` that leaves `live_users` users stops the stack."""
    return owner == SESSION and live_users == 0
